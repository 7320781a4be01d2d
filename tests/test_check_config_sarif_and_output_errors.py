"""`stackpart check` as the pre-commit hook and `rewrite` as the README runs it: a bad pyproject.toml,
SARIF URIs, what `rewrite --check` tells the user, output files that cannot be written.

* A ``pyproject.toml`` that is not what ``[tool.stackpart]`` reading expected crashed ``check``
  with a traceback (exit 1, read as "findings" by pre-commit): ``tool = 3``, ``[tool]
  stackpart = 1``, bytes that are not UTF-8. A rule code in ``select``/``ignore`` that no rule has
  was refused without naming pyproject.toml.
* ``check --format sarif`` wrote a finding's path as its ``uri`` unencoded (``with space é.py``,
  ``100%.py``), which is no URI reference as SARIF 2.1.0 requires (GitHub code scanning places
  results by it), and an absolute path as a path relative to ``%SRCROOT%``.
* ``rewrite --check`` told the user to run ``validate`` before ``--apply`` even when a passing
  validation report for the exact diff was there (the one diagnose writes): the README's
  "diagnose's validation report covers it" flow got a second, slow validation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from rewriter.cli import main

MODEL = "import torch\n\n\n@torch.compile\ndef f(x):\n    return x.item()\n"


@pytest.mark.parametrize(
    "pyproject, says",
    [
        (b"tool = 3\n", "pyproject.toml: `tool` must be a table"),
        (b"[tool]\nstackpart = 1\n", "pyproject.toml: [tool.stackpart] must be a table"),
        (b'[project]\nname = "caf\xe9"\n', "pyproject.toml:2: not valid TOML: not UTF-8 text"),
        (b'[tool.stackpart]\nignore = ["SP1O9"]\n',
         "pyproject.toml:2: [tool.stackpart] ignore: unknown rule code 'SP1O9'"),
        (b'[tool.stackpart]\nselect = ["XX"]\n', "pyproject.toml:2: [tool.stackpart] select: unknown rule code 'XX'"),
        # each key at its line, a near name for a misspelt key or plan file
        (b'[project]\nname = "p"\n\n[tool.stackpart]\nplan = "plan.yaml"\nscr = "."\n',
         "pyproject.toml:6: [tool.stackpart] has unknown key 'scr'; expected one of plan, src, select, ignore, project "
         "(did you mean 'src'?)"),
        (b'[tool.stackpart]\n"plan" = 3\n', "pyproject.toml:2: [tool.stackpart] plan must be a string path"),
        (b'[tool.stackpart]\nplan = "plna.yaml"  # a typo\n',
         "pyproject.toml:2: [tool.stackpart] plan: plna.yaml is not a file (read relative to pyproject.toml's folder, "),
    ],
    ids=["tool-not-a-table", "stackpart-not-a-table", "not-utf8", "unknown-ignore", "unknown-select", "unknown-key",
         "plan-not-a-string", "plan-not-a-file"],
)
def test_a_bad_pyproject_is_one_error_line_exit_2(tmp_path, monkeypatch, capsys, pyproject, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_bytes(pyproject)
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "plan.yaml").write_text("version: 1\nactions: []\n")
    assert main(["check", "m.py"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
    if "plna.yaml" in says:
        assert lines[0].endswith("(did you mean 'plan.yaml'?)"), lines[0]


#: What a URI reference may hold (RFC 3986: unreserved, reserved, and %XX escapes).
URI_CHARS = re.compile(r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-F]{2})*$")


@pytest.mark.parametrize("name", ["with space \u00e9.py", "100%.py", "c:colon.py", "plain.py"])
def test_sarif_uris_are_uri_references(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(MODEL)
    (tmp_path / "abs").mkdir()
    (tmp_path / "abs" / name).write_text(MODEL)
    out = tmp_path / "check.sarif"
    assert main(["check", "--no-project", "--format", "sarif", "-o", str(out), name, str(tmp_path / "abs" / name)]) == 1
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"]
                 for r in json.loads(out.read_text())["runs"][0]["results"]]
    relative, absolute = sorted(locations, key=lambda loc: "uriBaseId" in loc, reverse=True)
    for loc in locations:
        assert URI_CHARS.match(loc["uri"]), loc
    assert relative["uriBaseId"] == "%SRCROOT%" and not urlsplit(relative["uri"]).scheme
    assert unquote(relative["uri"]) == name
    assert "uriBaseId" not in absolute and absolute["uri"].startswith("file:///")
    assert Path(unquote(urlsplit(absolute["uri"]).path)) == tmp_path / "abs" / name


PLAN = """\
version: 1
harness: {file: harness.py, model: build_model, inputs: make_inputs, shapes: [{batch: 2}]}
actions:
  - action: compile
    target: model.py::Block
    why: test
"""
BLOCK = "import torch\nfrom torch import nn\n\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x + 1\n"


def _passing_report(plan: Path, src: Path) -> Path:
    """A validation report as validate writes one for this plan's diff and tree, passed."""
    from rewriter.engine.materialize import file_sha256, tree_hashes
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite
    from rewriter.validate.report import JSON_NAME, REPORT_VERSION, default_report_dir

    loaded = load_plan(plan)
    where = default_report_dir(loaded.path)
    where.mkdir(parents=True)
    report = {
        "report_version": REPORT_VERSION,
        "diff_sha256": plan_rewrite(loaded, src).digest(),
        "tree_sha256": tree_hashes(src),
        "plan_sha256": file_sha256(plan),
        "verdict": {"passed": True},
        "environment": {"timed_on": "cpu"},
    }
    (where / JSON_NAME).write_text(json.dumps(report))
    return where / JSON_NAME


def test_rewrite_check_says_apply_when_a_passing_report_covers_the_diff(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(BLOCK)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--check"]) == 1
    err = capsys.readouterr().err
    assert "run `stackpart validate --plan plan.yaml src`, then `stackpart rewrite" in err

    report = _passing_report(plan, src)
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--check"]) == 1
    err = capsys.readouterr().err
    assert "stackpart validate" not in err, err
    assert f"run `stackpart rewrite --plan plan.yaml src --apply` (the passing validation report {report} covers this diff)" \
        in " ".join(err.split()), err
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--apply"]) == 0  # as --check said
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--check"]) == 0
    assert report.is_file()


def test_check_reports_and_fixes_a_file_named_three_ways_once(tmp_path, monkeypatch, capsys):
    # before: `check m.py ./m.py /abs/m.py` checked it three times: each finding printed three
    # times and "fixed 3 file(s)" for one file (only the exact same string was deduplicated)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("import torch\n\n\n@torch.compile\ndef f(x):\n    torch._dynamo.mark_dynamic(x, 0, min=1)\n    return x.item()\n")
    assert main(["check", "--no-project", "--fix", "m.py", "./m.py", str(tmp_path / "m.py")]) == 1
    out, err = capsys.readouterr()
    assert [line.split(":")[0] for line in out.splitlines()] == ["m.py", "m.py"], out  # SP103, SP105
    assert "fixed 1 file(s); 1 file(s) checked" in err, err
    assert "maybe_mark_dynamic(x, 0)" in (tmp_path / "m.py").read_text()


def test_check_diff_of_an_absolute_path_applies_with_git(tmp_path, monkeypatch, capsys):
    # before: `check --diff /abs/m.py` wrote `diff --git a//abs/m.py ...`, which git apply
    # refuses ("invalid path"), and `./m.py` became `a/./m.py`
    import subprocess

    monkeypatch.chdir(tmp_path)
    text = "import torch\n\n\n@torch.compile\ndef f(x):\n    torch._dynamo.mark_dynamic(x, 0, min=1)\n    return x\n"
    (tmp_path / "m.py").write_text(text)
    (tmp_path / "n.py").write_text(text)
    assert main(["check", "--no-project", "--select", "SP106", "--diff", str(tmp_path / "m.py"), "./n.py"]) == 1
    patch = capsys.readouterr().out
    assert [line for line in patch.splitlines() if line.startswith("diff --git")] == [
        "diff --git a/m.py b/m.py", "diff --git a/n.py b/n.py"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    proc = subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert "maybe_mark_dynamic(x, 0)" in (tmp_path / "m.py").read_text()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_for_an_output_file_is_one_error_line(tmp_path, monkeypatch, capsys):
    # before: ENOSPC carries no filename, so the CLI's OSError guard re-raised it: a traceback
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(MODEL)
    assert main(["check", "--no-project", "--format", "sarif", "-o", "/dev/full", "m.py"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "error: /dev/full: cannot write the report: No space left on device"
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(BLOCK)
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--summary-md", "/dev/full"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "error: /dev/full: cannot write the summary: No space left on device"
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--summary-md", "/dev/full", "--apply", "--no-validate"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("; the rewrite itself was applied (1 file(s) changed under src)"), line
    assert "@torch.compile" in (src / "model.py").read_text()


def test_a_summary_path_under_a_file_is_refused_before_the_apply(tmp_path, monkeypatch, capsys):
    """It exited 2 with the tree already written, saying "File exists" where the cause is a file
    in the path's directories: exit 2 now means nothing written."""
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(BLOCK)
    (tmp_path / "plan.yaml").write_text(PLAN)
    (tmp_path / "afile").write_text("")
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--summary-md", "afile/s.md", "--apply", "--no-validate"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "error: afile/s.md: cannot write the summary: afile is not a directory", line
    assert (src / "model.py").read_text() == BLOCK
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--summary-md", str(tmp_path), "--apply", "--no-validate"]) == 2
    assert "is a directory" in capsys.readouterr().err and (src / "model.py").read_text() == BLOCK
