"""Which of the program's compile calls the harness's run made: two calls of one model in the two
branches of ``if backend == ...`` are told apart at run time (docs/design.md, "How a program that
compiles is measured"), so the report gives the compiled frames to the call that made them and
says the other one compiled nothing."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import torch

from rewriter.cli import main
from rewriter.engine.watch import CompileCalls
from rewriter.harness import on_sys_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def test_the_recorder_names_the_call_the_program_made(tmp_path, monkeypatch):
    """``torch.compile`` and ``nn.Module.compile`` called from the tree are recorded at their
    lines (the branch taken only); torch's own call inside ``nn.Module.compile`` is not."""
    monkeypatch.setattr(torch, "compile", torch.compile)  # put back after the test
    monkeypatch.setattr(torch.nn.Module, "compile", torch.nn.Module.compile)
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_compile_branches", src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "inplace.py").write_text("import torch\n\n\ndef build():\n    m = torch.nn.Linear(2, 2)\n    m.compile()\n    return m\n")
    calls = CompileCalls(src)
    calls.install()
    with on_sys_path(src):  # this tree's model.py, not one another test imported as 'model'
        for name in ("run", "inplace"):
            spec = importlib.util.spec_from_file_location(f"_calls_{name}", src / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            (module.build_model if name == "run" else module.build)()
    assert calls.sites == [("run.py", 15), ("inplace.py", 6)], calls.sites


def test_the_report_gives_the_frames_to_the_call_that_ran(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_compile_branches", src, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "30",
                 "--shape", "batch=4"]) == 0
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    m = search["measurement"]
    setup = " | ".join(m["own_compile_runtime"])
    assert 'run.py:13: torch.compile(model, mode="max-autotune-no-cudagraphs"): compiled nothing (the call was not made)' in setup, setup
    assert "run.py:15: torch.compile(model, backend=backend): 1 frame" in setup, setup
    said = " | ".join(m["own_compile_disagreements"])
    assert "run.py:13" in said and "never made that call" in said and "run.py:15" not in said, said
