"""``stackpart validate`` says the rewrite's not-written actions before its verdict, in the words
``stackpart rewrite`` prints, on the terminal and in validation.md/json: a plan whose compile
target already carries ``@torch.compile(mode=...)`` with other options is measured without that
action, and a reader of the verdict must not take it as applied."""

from __future__ import annotations

import json

from rewriter.cli import main
from tiny_programs import NET_MODEL, net_harness

#: tiny_programs' Net whose Block.forward carries a compile decorator with options of its own
MODEL = NET_MODEL.replace("    def forward(self, x):\n        return torch.relu",
                          '    @torch.compile(mode="max-autotune", backend="eager")\n    def forward(self, x):\n'
                          "        return torch.relu", 1)
HARNESS = net_harness(2)

PLAN = """\
version: 1
harness:
  file: harness.py
  shapes:
    - {batch: 2}
  device: cpu
actions:
  - action: compile
    target: model.py::Block
    options: {backend: eager}
"""

#: what ``stackpart rewrite`` prints for this plan (tests/test_rewrite_compiled_otherwise.py)
SAID = ("warning: model.py:10: Block.forward is compiled by the source's "
        "@torch.compile(mode=\"max-autotune\", backend=\"eager\"), not with the plan's options")


def test_validate_prints_the_action_the_rewrite_left_as_written_before_its_verdict(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    rewrite_err = " ".join(capsys.readouterr().err.split())
    warning = rewrite_err[rewrite_err.index(SAID):rewrite_err.index("no changes:")].strip()
    assert SAID in warning, rewrite_err

    out = tmp_path / "report"
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), "--backend", "eager", "--reps", "3",
                 "--warmup", "1", "--timeout", "120", "--baselines", ""])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0, err
    assert warning in err, err  # the same sentence rewrite prints, whole
    verdict = err.index("validate: PASS")
    assert err.index(warning) < verdict, err
    assert err[verdict:].startswith("validate: PASS diff sha256 "), err
    # no baseline ran (--baselines ""): --backend compiled nothing, so the verdict's line names no backend
    assert err[verdict:].split("(", 1)[0].rstrip() == "validate: PASS diff sha256 " + err[verdict:].split()[4], err
    assert "(1 action(s) of the plan not written, above: measured without them)" in err[verdict:], err

    report = json.loads((out / "validation.json").read_text())
    assert report["actions_not_written"] == [0]
    assert [n["kind"] for n in report["rewrite_notices"]] == ["warning"]
    assert "warning: " + report["rewrite_notices"][0]["text"] == warning
    md = (out / "validation.md").read_text()
    section = md.index("## The rewrite's warnings")
    assert section < md.index("## Variants"), md
    assert "1 of the plan's actions are not in the rewritten tree: the plan was measured without them." in md, md
    assert f"- {warning}" in " ".join(md.split()), md


def test_the_verdict_line_names_the_backend_as_what_compiled_the_baselines(capsys):
    """``--backend`` compiles the in-place baselines only; the plan compiles with its own options (a
    program's ``torch.compile(model)`` with Inductor), so the verdict's line says whose backend it is."""
    from rewriter.validate.command import _print_summary

    variant = {"step_ms": 1.0, "cold_first_call_s": 0.1, "numerics": "ok"}
    report = {"verdict": {"exit_code": 0, "errors": [], "failures": [], "notes": []}, "diff_sha256": "ab" * 32,
              "backend": "eager", "environment": {"timed_on": "cpu"},
              "variants": {"eager": variant, "plan": variant, "whole": variant, "regional": variant}}
    _print_summary(report, [])
    line = capsys.readouterr().err.splitlines()[0]
    assert line == f"validate: PASS diff sha256 {'ab' * 6}, baselines (whole, regional) compiled with backend eager", line
