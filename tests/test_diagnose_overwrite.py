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
    assert err.startswith("error: plan.yaml:17: -o plan.yaml is the plan --harness reads"), err
    assert "3 action(s)" in err and "pass -o with another path" in err
    assert Path("plan.yaml").read_bytes() == before
    assert not Path("stackpart-diagnose").exists()  # refused before any rung ran
