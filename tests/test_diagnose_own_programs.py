"""Issue 17, "What must hold" 1: one test per pattern that broke a program which ran before. Each
fixture is a model file, the user's own script that compiles it (and marks or disables), and a
harness. The user's script runs before, then ``diagnose`` and ``rewrite --apply``, then the
script runs again: the same outputs, its compile still live (Dynamo's own counters, printed by
the script), and report.json/report.md name the user's own compile calls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _run_script(src: Path, script: str, out: Path) -> dict:
    """Run the user's script in its own process (the way the user runs it) and return the counters
    it prints as JSON; its outputs are saved at ``out``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    proc = subprocess.run([sys.executable, script, str(out)], cwd=src, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{script} failed (rc {proc.returncode}) in {src}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _round_trip(tmp_path: Path, case: str, script: str, shapes: list[str]) -> dict:
    """Before / diagnose / rewrite --apply / after, on a copy of ``fixtures/diagnose/<case>``."""
    import torch

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / case, src, ignore=shutil.ignore_patterns("__pycache__"))
    before_counts = _run_script(src, script, tmp_path / "before.pt")
    assert before_counts["unique_graphs"] > 0, before_counts  # the fixture's own compile is live to begin with
    plan = tmp_path / "out" / "plan.yaml"
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60"]
    for s in shapes:
        argv += ["--shape", s]
    assert main(argv) == 0
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0 or load_plan(plan).plan.actions == []
    after_counts = _run_script(src, script, tmp_path / "after.pt")
    before = torch.load(tmp_path / "before.pt")
    after = torch.load(tmp_path / "after.pt")
    torch.testing.assert_close(after, before)
    assert after_counts["unique_graphs"] > 0, f"the user's compile is no longer live after the rewrite: {after_counts}"
    report_dir = plan.parent / "stackpart-diagnose"
    return {"src": src, "plan": load_plan(plan).plan, "report": json.loads((report_dir / "report.json").read_text()),
            "md": (report_dir / "report.md").read_text(), "before": before_counts, "after": after_counts}


def _names_own_calls(result: dict, *calls: str) -> None:
    """report.json's search rung and report.md both name each of the user's own compile calls."""
    [search] = [r for r in result["report"]["rungs"] if r["name"] == "search"]
    own = search["measurement"]["own_compile_setup"]
    for call in calls:
        assert any(call in x for x in own), (call, own)
        assert call in result["md"], call


def test_moe_trainer_that_compiles_each_layer_itself(tmp_path):
    r = _round_trip(tmp_path, "own_moe_trainer", "train.py", ["batch=2,seq=6", "batch=2,seq=9"])
    _names_own_calls(r, "train.py:18: torch.compile(block, fullgraph=True, backend=\"eager\")")
    actions = [(a.action, a.target, getattr(a, "strategy", None)) for a in r["plan"].actions]
    assert not [a for a in actions if a[0] == "compile"], actions  # the layers are the user's; no second compile
    assert not [a for a in actions if a[0] == "disable"], actions  # inside the user's fullgraph=True region
    print(actions, r["after"])


def test_serving_loop_that_marks_its_inputs(tmp_path):
    r = _round_trip(tmp_path, "own_serve_marks", "serve.py", ["batch=2,seq=5", "batch=2,seq=7", "batch=2,seq=9"])
    _names_own_calls(r, "serve.py:27: torch.compile(Encoder(), backend=\"eager\")", "serve.py:20: torch._dynamo.mark_dynamic(ids, 1)")
    actions = [(a.action, a.target) for a in r["plan"].actions]
    assert not [a for a in actions if a[0] == "mark_dynamic" and a[1].startswith("model.py::")], actions
    print(actions, r["after"])


def test_disabled_helper_beside_the_users_fullgraph_blocks(tmp_path):
    r = _round_trip(tmp_path, "own_fullgraph_disabled", "compile_model.py", ["batch=4", "batch=6"])
    _names_own_calls(r, "compile_model.py:17: block.compile(fullgraph=True, backend=\"eager\")", "model.py:10: @torch.compiler.disable")
    print([(a.action, a.target) for a in r["plan"].actions], r["after"])


def test_model_that_already_carries_torch_compile(tmp_path):
    r = _round_trip(tmp_path, "own_decorated", "predict.py", ["batch=4", "batch=6"])
    _names_own_calls(r, "model.py:20: @torch.compile(backend=\"eager\")")
    print([(a.action, a.target) for a in r["plan"].actions], r["after"])
