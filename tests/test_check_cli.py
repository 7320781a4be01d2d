"""`stackpart check` as a user runs it: exit codes, formats, suppression, --select/--ignore,
--fix, the prefilter, parallel workers, [tool.stackpart] config and plan drift."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.check import runner
from rewriter.check.command import run_check
from rewriter.cli import main
from tiny_programs import ITEM_STEP, MIN1, MIN1_FIXED

ROOT = Path(__file__).resolve().parents[1]

CLEAN = "import torch\n\n@torch.compile\ndef f(x):\n    return x * 2\n"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "item.py").write_text(ITEM_STEP)
    (tmp_path / "min1.py").write_text(MIN1)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_text_format_exit_codes_and_layout(tree, capsys):
    assert main(["check", "clean.py"]) == 0
    assert main(["check", "item.py", "clean.py"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("item.py:5:16: SP103 .item() inside compiled `step`")


def test_empty_file_list_is_a_clean_pass(tree, capsys):
    assert main(["check"]) == 0
    assert capsys.readouterr().out == ""


def test_unknown_code_and_missing_file_are_usage_errors(tree, capsys):
    assert main(["check", "--select", "SP999", "item.py"]) == 2
    assert "unknown rule code 'SP999'" in capsys.readouterr().err
    assert main(["check", "nope.py"]) == 2


def test_syntax_error_is_reported_and_exits_2(tree, capsys):
    (tree / "broken.py").write_text("import torch\n@torch.compile\ndef f(:\n")
    assert main(["check", "broken.py", "item.py"]) == 2
    captured = capsys.readouterr()
    assert "broken.py:3:" in captured.err and "SP103" in captured.out  # other files still checked


def test_select_and_ignore_by_code_and_prefix(tree, capsys):
    assert main(["check", "--select", "SP106", "item.py"]) == 0
    assert main(["check", "--ignore", "SP103", "item.py"]) == 0
    assert main(["check", "--select", "SP1", "--ignore", "SP106", "item.py", "min1.py"]) == 1
    out = capsys.readouterr().out
    assert "SP103" in out and "SP106" not in out


def test_suppression_comment_forms(tree, capsys):
    (tree / "s.py").write_text(ITEM_STEP.replace(".item()", ".item()  # stackpart: ignore[SP103]"))
    (tree / "above.py").write_text(ITEM_STEP.replace("    return", "    # stackpart: ignore\n    return"))
    (tree / "other.py").write_text(ITEM_STEP.replace(".item()", ".item()  # stackpart: ignore[SP101, SP102]"))
    (tree / "string.py").write_text(ITEM_STEP.replace(".item()", '.item() + len("# stackpart: ignore")'))
    assert main(["check", "s.py", "above.py"]) == 0
    assert main(["check", "other.py"]) == 1
    assert main(["check", "string.py"]) == 1


def test_json_format(tree, capsys):
    assert main(["check", "--format", "json", "item.py", "min1.py", "clean.py"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(f["path"], f["code"], f["line"], f["fixable"]) for f in data["findings"]] == [
        ("item.py", "SP103", 5, False),
        ("min1.py", "SP106", 3, True),
    ]
    assert data["files"] == {"checked": 3, "parsed": 3, "fixed": []}


def test_github_annotations_are_escaped(tree, capsys):
    assert main(["check", "--format", "github", "item.py"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("::warning file=item.py,line=5,col=16,endLine=5,endColumn=")
    assert ",title=SP103 graph-break-call::SP103 .item()" in line
    props = line.split("::")[1]
    assert props.count(",") == 5  # message commas never leak into the property list


def test_sarif_2_1_0(tree):
    out = tree / "report.sarif"
    assert main(["check", "--format", "sarif", "-o", str(out), "item.py", "min1.py"]) == 1
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0" and "sarif-2.1.0" in sarif["$schema"]
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules][:2] == ["SP101", "SP102"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
    assert {r["ruleId"] for r in run["results"]} == {"SP103", "SP106"}


def test_fix_writes_safe_fixes_and_reports_the_rest(tree, capsys):
    before_item = (tree / "item.py").read_bytes()
    assert main(["check", "--fix", "min1.py", "item.py"]) == 1  # SP103 has no fix: still a finding
    assert (tree / "min1.py").read_text() == MIN1_FIXED
    assert (tree / "item.py").read_bytes() == before_item
    assert main(["check", "min1.py"]) == 0
    assert not list(tree.glob(".*.stackpart")), "no temp files left behind"


def test_fix_keeps_bom_and_crlf(tree):
    data = b"\xef\xbb\xbf" + MIN1.replace("\n", "\r\n").encode()
    (tree / "crlf.py").write_bytes(data)
    assert main(["check", "--fix", "crlf.py"]) == 0
    assert (tree / "crlf.py").read_bytes() == b"\xef\xbb\xbf" + MIN1_FIXED.replace("\n", "\r\n").encode()


def test_prefilter_skips_files_without_torch_or_needles(tree):
    (tree / "notorch.py").write_text(ITEM_STEP.replace("torch", "tarch"))
    (tree / "doc_only.py").write_text('"""Mentions torch.compile( in prose only."""\nimport torch\n')
    outcome, _ = run_check(["notorch.py", "doc_only.py", "item.py"], use_config=False)
    assert outcome.checked == 3 and outcome.parsed == 1
    assert [f.path for f in outcome.findings] == ["item.py"]


def test_parallel_workers_find_the_same_as_serial(tree, monkeypatch):
    for i in range(6):
        shutil.copy(tree / "item.py", tree / f"copy{i}.py")
        shutil.copy(tree / "min1.py", tree / f"mark{i}.py")
    serial, _ = run_check(["."], jobs=1, use_config=False)
    monkeypatch.setattr(runner, "PARALLEL_MIN", 2)
    parallel, _ = run_check(["."], jobs=2, use_config=False)
    assert serial.findings == parallel.findings and len(serial.findings) == 14


def test_directories_skip_hidden_and_virtualenvs(tree):
    (tree / ".venv" / "lib").mkdir(parents=True)
    (tree / ".venv" / "lib" / "x.py").write_text(ITEM_STEP)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "y.py").write_text(ITEM_STEP)
    outcome, _ = run_check(["."], use_config=False)
    assert {f.path for f in outcome.findings} == {"./item.py", "./min1.py", "./pkg/y.py"}


def test_pyproject_config_selects_rules(tree, capsys):
    (tree / "pyproject.toml").write_text('[tool.stackpart]\nignore = ["SP103"]\n')
    assert main(["check", "item.py"]) == 0
    (tree / "pyproject.toml").write_text('[tool.stackpart]\nignor = ["SP103"]\n')
    assert main(["check", "item.py"]) == 2
    assert "did you mean 'ignore'" in capsys.readouterr().err


# --- plan drift -------------------------------------------------------------------------------

@pytest.fixture
def gpt(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_plan_drift_from_pyproject_exits_1_with_the_diff_and_fix_applies_it(gpt, capsys):
    (gpt / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\nsrc = "gpt/src"\n')
    model = "gpt/src/model.py"
    original = (gpt / model).read_bytes()
    assert main(["check", "--select", "SP106", model]) == 1
    out = capsys.readouterr().out
    assert f"{model}:45:1: plan drift" in out  # the line the compile decorator goes above
    assert "diff --git a/model.py b/model.py" in out and "+    @torch.compile" in out
    # --fix follows rewrite --apply's rule: no passing validation report, no plan edits written
    assert main(["check", "--select", "SP106", "--fix", model]) == 1
    assert (gpt / model).read_bytes() == original
    assert "plan edits not written: no validation report for this diff" in capsys.readouterr().err
    assert main(["check", "--select", "SP106", "--fix", "--no-validate", model]) == 0
    assert (gpt / model).read_bytes() != original
    assert main(["check", "--select", "SP106", model]) == 0  # the tree is now what the plan asks


def test_the_drift_check_says_which_of_the_plans_actions_it_leaves_out(gpt, capsys):
    """The example plan's ``bucket`` action is unsafe: the drift diff leaves it out, as ``rewrite``
    without ``--unsafe`` does, and says so in rewrite's words, with its plan line; a commit of
    another file is not told about it."""
    (gpt / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\nsrc = "gpt/src"\n')
    assert main(["check", "--select", "SP106", "gpt/src/model.py"]) == 1
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "not written" in line]
    assert len(said) == 1 and said[0].endswith(
        "gpt/plan.yaml:23: actions[2] (bucket model.py::GPT.forward) not written: bucket is an unsafe "
        "action (it changes what runs); pass --unsafe or validate first"), err
    (gpt / "gpt/src/other.py").write_text("x = 1\n")
    assert main(["check", "--select", "SP106", "gpt/src/other.py"]) == 0
    assert "not written" not in capsys.readouterr().err


def test_fix_counts_a_file_the_plan_and_a_rule_both_edit_once(gpt, capsys):
    """The plan's pending edits and SP102's fix land in the same model.py: one file written."""
    (gpt / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\nsrc = "gpt/src"\n')
    model = gpt / "gpt/src/model.py"
    model.write_text(model.read_text() + "\n\ndef build():\n    net = nn.Linear(4, 4)\n    net = torch.compile(net)\n"
                     "    torch.save(net.state_dict(), 'c.pt')\n    return net\n")
    assert main(["check", "--fix", "--no-validate", "gpt/src/model.py", "--format", "json"]) == 0
    assert "    net.compile()\n" in model.read_text() and "@torch.compile" in model.read_text()
    assert json.loads(capsys.readouterr().out)["files"]["fixed"] == ["gpt/src/model.py"]
    model.write_text(model.read_text().replace("    net.compile()\n", "    net = torch.compile(net)\n")
                     .replace("    @torch.compile\n", ""))
    assert main(["check", "--fix", "--no-validate", "./gpt/src/model.py"]) == 0
    assert "fixed 1 file(s)" in capsys.readouterr().err


def test_plan_drift_only_counts_files_given_and_flag_overrides(gpt, capsys):
    assert main(["check", "--plan", "gpt/plan.yaml", "--src", "gpt/src", "gpt/src/harness.py"]) == 0
    assert main(["check", "--plan", "gpt/plan.yaml", "--src", "gpt/src", "gpt/src/model.py", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["drift"]["files"] == ["gpt/src/model.py"] and data["drift"]["diff"].startswith("diff --git")


def test_diff_shows_the_fix_and_writes_nothing(tree, capsys):
    assert main(["check", "--diff", "min1.py"]) == 1
    out = capsys.readouterr().out
    assert "diff --git a/min1.py b/min1.py" in out
    assert "-torch._dynamo.mark_dynamic(x, 1, min=1, max=64)" in out and "+torch._dynamo.maybe_mark_dynamic(x, 1)" in out
    assert (tree / "min1.py").read_text() == MIN1
    assert main(["check", "--diff", "--fix", "min1.py"]) == 2


def test_a_file_named_twice_is_reported_once(tree, capsys):
    assert main(["check", "item.py", "item.py", "--format", "json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["findings"]) == 1


def test_a_commit_of_the_plan_alone_is_checked_for_the_drift_it_creates(gpt, capsys):
    """pre-commit passes only staged files; with `types: [python]` an edit to plan.yaml alone
    never ran the drift check. The hook now passes YAML too, and a staged plan makes every
    change it asks for this commit's drift."""
    (gpt / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\nsrc = "gpt/src"\n')
    assert main(["check", "--select", "SP106", "gpt/plan.yaml", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["drift"]["files"] == ["gpt/src/model.py"]
    assert main(["check", "--select", "SP106", "--fix", "--no-validate", "gpt/plan.yaml"]) == 0
    assert main(["check", "--select", "SP106", "gpt/plan.yaml", "--format", "json"]) == 0
    other = gpt / "other.yaml"
    other.write_text("a: [1\n")  # not Python, not the plan: skipped, never parsed
    assert main(["check", "--select", "SP106", "other.yaml"]) == 0
    # a YAML file that is not the plan does not run the plan (a broken plan blocks no CI edit)
    (gpt / "gpt" / "plan.yaml").write_text("version: 1\nactions: [{action: nope}]\n")
    assert main(["check", "--select", "SP106", "other.yaml"]) == 0
    assert main(["check", "--select", "SP106", "gpt/plan.yaml"]) == 2
    assert main(["check", "nosuch.yaml"]) == 2  # a missing file is an error, YAML or not


def test_the_hooks_pass_plan_files_to_check():
    import yaml

    hooks = yaml.safe_load((Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml").read_text())
    assert all(h["types_or"] == ["python", "yaml"] and "types" not in h for h in hooks)


def test_a_plan_without_src_finds_src_from_the_files_given(gpt, capsys):
    """Newcomer passes: `check --plan gpt/plan.yaml gpt/src/model.py` failed with "no such file
    under SRC" (SRC was the working directory). The plan targets model.py and the file given is
    gpt/src/model.py, so SRC is gpt/src: the drift is found as with --src."""
    assert main(["check", "--plan", "gpt/plan.yaml", "gpt/src/model.py", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["drift"]["files"] == ["gpt/src/model.py"]


def test_a_plan_whose_src_cannot_be_found_points_at_the_src_flag(gpt, capsys):
    """No file given matches a target: SRC is the folder that holds every file the plan targets
    (the commit of other files has no drift); where no folder holds them, SRC stays the working
    directory, and the error says how to name it."""
    assert main(["check", "--plan", "gpt/plan.yaml", "gpt/src/harness.py"]) == 0  # the harness file names SRC too
    (gpt / "gpt" / "src" / "harness.py").rename(gpt / "gpt" / "src" / "h.py")
    assert main(["check", "--plan", "gpt/plan.yaml", "gpt/src/h.py"]) == 0  # gpt/src holds model.py: no drift in h.py
    (gpt / "gpt" / "src" / "model.py").rename(gpt / "gpt" / "src" / "m.py")  # no folder holds them: how to name one
    assert main(["check", "--plan", "gpt/plan.yaml", "gpt/src/h.py"]) == 2
    err = capsys.readouterr().err
    assert "no such file under SRC" in err and err.rstrip().endswith("pass --src DIR (or src = ... under [tool.stackpart]))"), err


def test_a_plan_from_pyproject_without_src_finds_src_from_the_files_given_as_with_the_flag(gpt, capsys):
    """``[tool.stackpart] plan = ...`` without ``src``: SRC is guessed from the files given as for
    ``--plan`` (it was pyproject.toml's folder, and the hook failed with exit 2, "no such file
    under SRC"). A commit of other files passes: SRC is the folder that holds the plan's targets
    (it failed the hook with exit 2). Where no folder holds them, the error ends with the
    ``src = ...`` to set."""
    (gpt / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\n')
    assert main(["check", "gpt/src/model.py", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["drift"]["files"] == ["gpt/src/model.py"]
    (gpt / "other.py").write_text("x = 1\n")
    assert main(["check", "other.py"]) == 0
    capsys.readouterr()
    (gpt / "gpt" / "src" / "model.py").rename(gpt / "gpt" / "model.py")  # gpt/ holds it, not gpt/src: found there
    assert main(["check", "other.py"]) == 0
    capsys.readouterr()
    (gpt / "gpt" / "model.py").rename(gpt / "elsewhere.py")  # no folder holds it
    assert main(["check", "other.py"]) == 2
    err = capsys.readouterr().err
    assert "model.py: no such file under SRC" in err, err
    assert err.rstrip().endswith("pass --src DIR (or src = ... under [tool.stackpart]))"), err


def test_a_plan_schema_error_gets_no_src_hint(gpt, capsys):
    plan = gpt / "gpt" / "plan.yaml"
    plan.write_text(plan.read_text().replace("action: compile", "action: compil", 1))
    assert main(["check", "--plan", "gpt/plan.yaml", "gpt/src/model.py"]) == 2
    assert "pass --src" not in capsys.readouterr().err


def test_plan_drift_is_placed_at_the_first_line_the_plan_changes(tmp_path, monkeypatch, capsys):
    """Drift was placed at `serve.py:1:1` whatever the plan changed; an editor or CI annotation
    then pointed at the file's first line instead of the program's compile call."""
    import json

    from rewriter.check.drift import first_changed_line

    src = tmp_path / "src"
    src.mkdir()
    (src / "serve.py").write_text("import torch\n\n\ndef load_model(model):\n    torch.manual_seed(0)\n"
                                  "    model = model.eval()\n    # compile it\n"
                                  '    model.compile(mode="max-autotune-no-cudagraphs")\n    return model\n')
    (tmp_path / "plan.yaml").write_text("version: 1\nactions:\n  - action: compile\n    target: serve.py::load_model\n"
                                        "    strategy: whole\n    own_call: {dynamic: true}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "src", "--plan", "plan.yaml"]) == 1
    assert "src/serve.py:8:1: plan drift: differs from what plan.yaml asks" in capsys.readouterr().out
    assert main(["check", "src", "--plan", "plan.yaml", "--format", "github"]) == 1
    assert "::error file=src/serve.py,line=8,title=plan drift::" in capsys.readouterr().out
    assert main(["check", "src", "--plan", "plan.yaml", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["drift"]["lines"] == {"src/serve.py": 8}
    # a line added after the last one is placed at the last line; a new file at its first
    assert first_changed_line(b"a\nb\n", b"a\nb\nc\n") == 2
    assert first_changed_line(b"a\nb\n", b"x\na\nb\n") == 1
    assert first_changed_line(None, b"new\n") == 1
