"""The apply gate: `rewrite --apply` writes only a diff bound to a passing validation report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.engine.materialize import tree_hashes

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "causal_bucket"


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture
def case(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "case")
    return tmp_path / "case" / "plan.yaml", tmp_path / "case" / "src"


def test_apply_without_a_report_is_refused_and_no_validate_applies(case, capsys):
    plan, src = case
    before = tree_hashes(src)
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 1
    assert "refused to apply: no validation report for this diff" in err
    assert "the full plan's diff with its unsafe actions" in err  # not the safe diff the preview shows
    assert "stackpart validate --plan" in err and "--no-validate" in err
    assert tree_hashes(src) == before
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0, err
    assert "@torch.compile(backend=\"eager\")" in (src / "model.py").read_text()
    # without --unsafe and without validation, the unsafe bucket is not written
    assert "pad_to_bucket" not in (src / "model.py").read_text()


@pytest.mark.slow
def test_apply_needs_a_passing_report_for_the_exact_diff(case, capsys):
    plan, src = case
    code, err = _run(capsys, "validate", "--plan", str(plan), str(src), "--backend", "eager",
                     "--baselines", "", "--reps", "3", "--warmup", "1")
    assert code == 0, err
    report_path = plan.parent / ".stackpart" / "validation" / "validation.json"  # the default place
    report = json.loads(report_path.read_text())

    # stale: SRC changed since validation -> refused, naming the file, nothing written
    model = src / "model.py"
    original = model.read_bytes()
    model.write_bytes(original + b"\n# edited after validation\n")
    before = tree_hashes(src)
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 1 and "stale validation report" in err
    assert "files changed under SRC since: model.py" in err
    assert tree_hashes(src) == before

    # a failing report for the exact diff -> refused with its reasons
    model.write_bytes(original)
    failing = dict(report, verdict=dict(report["verdict"], passed=False, exit_code=1,
                                       failures=["wrong numbers at shape {'seq': 12}"]))
    report_path.write_text(json.dumps(failing))
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 1 and "did not pass: wrong numbers at shape {'seq': 12}" in err

    # the passing report -> the preview shows what --apply will write, the bucket included
    report_path.write_text(json.dumps(report))
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    out, err = capsys.readouterr()
    assert "pad_to_bucket" in out and "_stackpart/bucketing.py" in out, out
    assert "unsafe actions shown" in err and "not written" not in err

    # ... and --apply writes it, the unsafe bucket included (validated), CPU run noted
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 0, err
    assert "validated on CPU" in err and "unsafe actions written" in err
    text = model.read_text()
    assert "@pad_to_bucket(" in text and "@torch.compile(" in text
    assert (src / "_stackpart" / "bucketing.py").is_file()
    # the applied tree is exactly what was validated: the plan now gives an empty diff
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--unsafe", "--check")
    assert code == 0, err


def test_plan_edit_makes_the_report_stale(case, capsys, tmp_path):
    plan, src = case
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite
    from rewriter.engine.materialize import file_sha256
    from rewriter.validate.report import default_report_dir

    # a report for the plan as it is (hand-made: this test is about the gate, not validate)
    digest = plan_rewrite(load_plan(plan), src, unsafe=True).digest()
    out = default_report_dir(plan)
    out.mkdir(parents=True)
    (out / "validation.json").write_text(json.dumps({
        "report_version": 1, "diff_sha256": digest, "plan": str(plan.resolve()),
        "plan_sha256": file_sha256(plan), "src": str(src.resolve()), "tree_sha256": tree_hashes(src),
        "environment": {"timed_on": "cuda"}, "verdict": {"passed": True, "failures": [], "errors": []},
    }))
    plan.write_text(plan.read_text().replace("buckets: [16, 32]", "buckets: [16, 64]"))
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 1 and "stale validation report" in err and "plan.yaml changed since" in err
    # the same report read for a copy of the tree and an edited copy of the plan: one clause names both
    # paths it was written for, another that the plan's bytes differ
    copy = plan.parent.parent / "copy"
    shutil.copytree(plan.parent, copy)
    code, err = _run(capsys, "rewrite", "--plan", str(copy / "plan.yaml"), str(copy / "src"), "--apply",
                     "--report", str(out))
    err = " ".join(err.split())
    assert code == 1 and err.count("it was written for") == 1, err
    assert f"it was written for SRC {src.resolve()} and plan {plan.resolve()}" in err, err
    assert "plan.yaml differs from the plan it validated" in err, err


def test_caches_and_other_reports_written_after_validation_do_not_make_it_stale(case, capsys):
    """Between diagnose and ``rewrite --apply`` the pre-commit hook runs ``stackpart check``
    (which writes ``.stackpart_cache/`` at the project root), mypy writes ``.mypy_cache/``, and a
    second diagnose (``-o plan2.yaml``) writes its report folder beside the first: none of them is
    the program, and the report for this diff still lets the apply through."""
    plan, src = case
    from rewriter.engine.materialize import file_sha256
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite
    from rewriter.validate.report import default_report_dir

    (src / "pyproject.toml").write_text("[project]\nname = 'm'\n")  # the project root check caches at
    digest = plan_rewrite(load_plan(plan), src, unsafe=True).digest()
    out = default_report_dir(plan)
    out.mkdir(parents=True)
    (out / "validation.json").write_text(json.dumps({
        "report_version": 1, "diff_sha256": digest, "plan": str(plan.resolve()),
        "plan_sha256": file_sha256(plan), "src": str(src.resolve()), "tree_sha256": tree_hashes(src),
        "environment": {"timed_on": "cuda"}, "verdict": {"passed": True, "failures": [], "errors": []},
    }))
    _run(capsys, "check", str(src / "model.py"))
    assert (src / ".stackpart_cache").is_dir()  # the hook's cache is under SRC
    (src / ".mypy_cache" / "3.12").mkdir(parents=True)
    (src / ".mypy_cache" / "3.12" / "model.data.json").write_text("{}")
    (src / "stackpart-diagnose-plan2").mkdir()
    (src / "stackpart-diagnose-plan2" / "report.json").write_text("{}")
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply")
    assert code == 0, err
    assert "@torch.compile(" in (src / "model.py").read_text()
