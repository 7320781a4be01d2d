"""`stackpart diagnose --harness plan.yaml` must not overwrite that plan's actions (the default
`-o plan.yaml` names the same file when run next to it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rewriter.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_default_output_over_the_harness_plan_with_actions_is_refused(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    monkeypatch.chdir(tmp_path / "gpt")
    before = Path("plan.yaml").read_bytes()
    assert main(["diagnose", "--harness", "plan.yaml", "src", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plan.yaml:17: -o plan.yaml exists and was not written by diagnose (it is the plan --harness reads)"), err
    assert "pass -o with another path" in err
    assert Path("plan.yaml").read_bytes() == before
    assert not Path("stackpart-diagnose").exists()  # refused before any rung ran


def test_an_edited_plan_at_the_output_path_is_not_overwritten(tmp_path, monkeypatch, capsys):
    """A hand-written plan at -o (not the harness plan) is kept; a plan diagnose wrote is replaced."""
    shutil.copytree(ROOT / "fixtures" / "workloads" / "launch_bound", tmp_path / "w")
    out = tmp_path / "plan.yaml"
    out.write_text("version: 1\nactions: []  # hand-written\n")
    args = ["diagnose", "--harness", "harness.py", str(tmp_path / "w"), "-o", str(out), "--device", "cpu", "--shape", "batch=2",
            "--steps", "1", "--no-search"]  # the plan file is tested, not what the search would put in it
    assert main(args) == 2
    assert "exists and was not written by diagnose" in capsys.readouterr().err
    assert out.read_text().endswith("# hand-written\n")
    out.unlink()
    assert main(args) == 0  # a fresh plan ...
    first = out.read_bytes()
    assert main(args) == 0  # ... and diagnose may replace its own
    assert out.read_bytes().startswith(b"# Written by `stackpart diagnose`")
    assert first.startswith(b"# Written by `stackpart diagnose`")
