"""Programs that already compile are measured as they run: nothing stackpart adds (profiler ranges,
block hooks, the call-site dispatch mode, timers) enters a compiled frame.

Each case is a small model file plus the way real projects compile it: a ``fullgraph=True`` layer
compile in the model, a harness that returns ``torch.compile(model)`` or replaces
``model.forward``, and a tree stackpart itself rewrote and applied. ``diagnose`` runs with
``--no-search`` (the ladder is what these programs broke) and the programs' compiles use the
``eager`` backend, so each case takes seconds on a CPU.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from programs import before_after  # tests/programs.py: the script before and after, in one process

from rewriter.cli import main
from rewriter.plan import load_plan

MODEL = '''\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    {block_decorator}
    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        if x.abs().max().item() > 1e4:  # a host sync outside the compiled layers
            x = x.clamp(-1e4, 1e4)
        for b in self.blocks:
            x = b(x)
        return self.head(x)
'''

#: The model without the guard above: a whole-model fullgraph compile must not break on it.
WHOLE_MODEL = MODEL.replace(
    "        if x.abs().max().item() > 1e4:  # a host sync outside the compiled layers\n"
    "            x = x.clamp(-1e4, 1e4)\n", "")

HARNESS = '''\
import torch
from model import Net


def build_model():
    torch.manual_seed(0)
    model = Net()
    {compile_line}
    return model


def make_inputs(batch: int = 4):
    return (torch.randn(batch, 16),)
'''

#: The user's own script: builds the model, runs it, saves the outputs and prints Dynamo's count.
SCRIPT = '''\
import json
import sys

import torch
from torch._dynamo.utils import counters

from model import Net

torch.manual_seed(0)
model = Net().eval()
x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    out = model(x)
torch.save(out, sys.argv[1])
print(json.dumps({"unique_graphs": int(counters["stats"]["unique_graphs"])}))
'''

SHAPES = ["--shape", "batch=4", "--shape", "batch=6"]


def _tree(tmp_path: Path, *, block_decorator: str = "", compile_line: str = "", model: str = MODEL) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(model.format(block_decorator=block_decorator or "# eager as written"))
    (src / "harness.py").write_text(HARNESS.format(compile_line=compile_line or "pass"))
    (src / "run.py").write_text(SCRIPT)
    return src


def _diagnose(src: Path, out: Path, *extra: str, search: bool = False) -> tuple[int, dict]:
    plan = out / "plan.yaml"
    code = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu",
                 *(["--budget", "60"] if search else ["--no-search"]), "--steps", "1", *SHAPES, *extra])
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    return code, {r["name"]: r for r in report["rungs"]}


def _no_rung_failed(rungs: dict) -> None:
    """Every rung measured (memory is CUDA-only): none failed, none is missing."""
    from rewriter.diagnose.rungs import ladder

    expected = {r.name for r in ladder() if r.reported}
    assert set(rungs) - {"search"} == expected, set(rungs) ^ expected
    bad = {n: r.get("reason") for n, r in rungs.items()
           if r["status"] != "ok" and not (n == "memory" and r["status"] == "skipped")}
    assert not bad, bad


def test_a_fullgraph_layer_compile_is_diagnosed_with_its_host_sync_found(tmp_path):
    """The gaps rung's dispatch mode made Dynamo refuse the fullgraph layers ("non-infra torch
    dispatch mode present") and diagnose stop, blaming the harness. It now runs the step with
    compilation off and finds the host sync at its line."""
    src = _tree(tmp_path, block_decorator='@torch.compile(fullgraph=True, backend="eager")')
    code, rungs = _diagnose(src, tmp_path / "out")
    assert code == 0
    _no_rung_failed(rungs)
    gaps = rungs["gaps"]
    sync_line = next(i for i, text in enumerate(MODEL.splitlines(), 1) if ".item()" in text)
    assert [(f["file"], f["line"]) for f in gaps["findings"]] == [("model.py", sync_line)], gaps["findings"]
    assert "compilation off" in gaps["verdict"] and "force_eager" in gaps["measurement"]["sync_sites_from"]
    # the layers were measured compiled: Dynamo's own count of the program's graphs
    assert rungs["graph_breaks"]["measurement"]["graph_count"] >= 1
    assert "program's own" in rungs["graph_breaks"]["measurement"]["source"]


def test_a_whole_model_fullgraph_compile_from_the_harness_is_profiled_per_block(tmp_path):
    """A whole-model ``fullgraph=True`` compile runs the blocks inside its frame: the profile's
    block hooks add nothing there (no record_function in the graph), and granularity says the
    share is not measured rather than 0%."""
    src = _tree(tmp_path, model=WHOLE_MODEL, compile_line='model = torch.compile(model, fullgraph=True, backend="eager")')
    code, rungs = _diagnose(src, tmp_path / "out")
    assert code == 0
    _no_rung_failed(rungs)
    gran = rungs["granularity"]["measurement"]
    assert gran["share"] is None and "inside the program's own compiled frame" in gran["share_unmeasured"], gran
    assert "not measured" in rungs["granularity"]["verdict"]
    rec = rungs["recompiles"]["measurement"]
    assert rec["compiled_by"].startswith("the program's own torch.compile"), rec


@pytest.mark.parametrize("compile_line", [
    'model = torch.compile(model, backend="eager")',
    'model.forward = torch.compile(model.forward, backend="eager")',
], ids=["torch.compile(model)", "model.forward=torch.compile(model.forward)"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_a_harness_returning_a_compiled_model_gets_its_recompiles_measured(tmp_path, compile_line, mode):
    """torch.compile of an OptimizedModule returns a plain function: the recompiles rung crashed
    on its ``parameters()`` in training, and diagnose exited 0 with that evidence missing. The
    program's compile is now called as it is, at both shapes: its one frame recompiles once, on
    the batch dim (Dynamo's automatic dynamic shapes)."""
    src = _tree(tmp_path, model=WHOLE_MODEL, compile_line=compile_line)
    code, rungs = _diagnose(src, tmp_path / "out", "--mode", mode)
    assert code == 0
    _no_rung_failed(rungs)
    rec = rungs["recompiles"]
    assert rec["measurement"]["recompiles"] == 1, rec
    assert rec["measurement"]["varying_input_dims"] == [{"tensor": 0, "dim": 0, "sizes": [4, 6]}]
    assert rec["findings"] and all(f["kind"] == "recompile" for f in rec["findings"])


def _plan(src: Path, path: Path) -> Path:
    """What diagnose writes for this model, by hand: the whole model compiled fullgraph (the eager
    backend keeps the test fast), with the harness the plan carries."""
    path.write_text(textwrap.dedent("""\
        version: 1
        harness:
          file: harness.py
          model: build_model
          inputs: make_inputs
          shapes:
          - batch: 4
          - batch: 6
          mode: inference
          dtype: float32
          device: cpu
        actions:
        - action: compile
          target: model.py::Net
          options: {fullgraph: true, backend: eager}
        """))
    return path


VALIDATE_FAST = ["--backend", "eager", "--reps", "3", "--warmup", "1", "--timeout", "120", "--baselines", ""]


def test_a_tree_stackpart_rewrote_is_diagnosed_and_validated_again(tmp_path):
    """After ``rewrite --apply`` the model compiles itself whole with fullgraph=True. diagnose
    stopped at the profile rung (record_function traced inside the compiled frame) and validate
    failed in the eager reference (the block-share timer traced: a graph break under fullgraph).
    Now both run, the user's script gives the same outputs with its compile live, and validate's
    eager reference is the program with compilation off."""
    import torch

    src = _tree(tmp_path, model=WHOLE_MODEL)
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    plan = _plan(src, tmp_path / "plan.yaml")
    assert main(["validate", "--plan", str(plan), str(src), *VALIDATE_FAST]) == 0
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    assert '@torch.compile(fullgraph=True, backend="eager")' in (src / "model.py").read_text()
    before, after = before_after(tmp_path / "pristine", src, "run.py", tmp_path)
    assert before["unique_graphs"] == 0
    assert after["unique_graphs"] >= 1  # the compile stackpart wrote is live
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))

    code, rungs = _diagnose(src, tmp_path / "again", search=True)
    assert code == 0
    _no_rung_failed(rungs)
    assert rungs["graph_breaks"]["measurement"]["graph_count"] >= 1  # measured as it runs: compiled
    assert rungs["granularity"]["measurement"]["share"] is None  # the blocks run inside the whole-model frame
    # the search measured the program as it is (its own compile live) and found nothing to add
    [asis] = [r for r in rungs["search"]["measurement"]["candidates"] if r["candidate"] == "as-is"]
    # the search measured the program as it is (its own compile live); the plan is empty, or it is
    # an edit of the program's own call that measured fewer recompiles or graphs than the program as it is
    assert asis["graphs"] >= 1, asis
    again = load_plan(tmp_path / "again" / "plan.yaml").plan.actions
    if asis["status"] != "chosen":
        [chosen] = [r for r in rungs["search"]["measurement"]["candidates"] if r["status"] == "chosen"]
        assert (chosen["recompiles"], chosen["graphs"]) < (asis["recompiles"], asis["graphs"]), (chosen, asis)
        assert again and all(a.action == "compile" and a.own_call is not None for a in again), again
    else:
        assert again == []

    out = tmp_path / "validation-again"
    assert main(["validate", "--plan", str(plan), str(src), "--out", str(out), *VALIDATE_FAST]) == 0
    report = json.loads((out / "validation.json").read_text())
    eager, planned = report["variants"]["eager"], report["variants"]["plan"]
    assert "set_stance('force_eager')" in eager["compiled"], eager["compiled"]
    assert eager["compile"]["unique_graphs"] == 0  # the reference ran eager although the tree compiles
    assert planned["compile"]["unique_graphs"] >= 1 and planned["numerics"] == "ok"
    assert report["verdict"]["passed"]


def test_a_per_block_plan_with_its_mark_is_diagnosed_again_as_it_runs(tmp_path):
    """The plan diagnose chose for this model (per-block fullgraph compile plus the block input
    marked dynamic), applied: the recompiles rung wrapped the whole model in a compile of its own,
    which traced the ``maybe_mark_dynamic`` stackpart wrote ("Attempt to trace forbidden
    callable"), and the rung's evidence was missing. It now calls the program as it compiles
    itself: the mark holds, no recompile across the two batch sizes."""
    src = _tree(tmp_path, model=WHOLE_MODEL)
    plan = _plan(src, tmp_path / "plan.yaml")
    plan.write_text(plan.read_text().replace("target: model.py::Net\n", "target: model.py::Block\n")
                    + "- action: mark_dynamic\n  target: model.py::Net.forward\n  arg: x\n  dim: 0\n  strict: false\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert "torch._dynamo.maybe_mark_dynamic(x, 0)" in (src / "model.py").read_text()
    code, rungs = _diagnose(src, tmp_path / "again")
    assert code == 0
    _no_rung_failed(rungs)
    rec = rungs["recompiles"]["measurement"]
    assert rec["compiled_by"].startswith("the program's own torch.compile"), rec
    assert rec["recompiles"] == 0 and rec["varying_input_dims"], rec


def test_a_failed_validate_keeps_the_passing_report_of_the_same_diff(tmp_path, capsys):
    """A validate that fails (here: a speed gate no plan can meet) on the diff a passing report
    already covers writes its report beside it, not over it, and ``rewrite --apply`` still applies."""
    src = _tree(tmp_path, model=WHOLE_MODEL)
    plan = _plan(src, tmp_path / "plan.yaml")
    out = tmp_path / "validation"
    assert main(["validate", "--plan", str(plan), str(src), "--out", str(out), *VALIDATE_FAST]) == 0
    passing = (out / "validation.json").read_text()
    capsys.readouterr()
    fast_whole = [*VALIDATE_FAST[:-1], "whole"]  # the gate compares the plan with a baseline
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), *fast_whole,
                 "--speed-gate", "on", "--min-speedup", "1000"])
    err = capsys.readouterr().err
    assert code == 1
    assert (out / "validation.json").read_text() == passing
    failed = json.loads((out / "failed" / "validation.json").read_text())
    assert not failed["verdict"]["passed"] and failed["diff_sha256"] == json.loads(passing)["diff_sha256"]
    assert any("kept the passing validation report" in n for n in failed["verdict"]["notes"])
    assert "kept the passing validation report" in err
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--report", str(out)]) == 0
    assert "@torch.compile" in (src / "model.py").read_text()


def test_min_speedup_without_a_baseline_to_compare_with_is_a_usage_error(tmp_path, capsys):
    """``--min-speedup`` is a bound on the better baseline's step over the plan's: with ``--baselines
    none`` there is nothing to compare, and a gate that could never fail would pass silently; it is
    refused before anything runs (exit 2, nothing written)."""
    src = _tree(tmp_path, model=WHOLE_MODEL)
    plan = _plan(src, tmp_path / "plan.yaml")
    out = tmp_path / "validation"
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), *VALIDATE_FAST, "--min-speedup", "1000"])
    assert code == 2 and not out.exists()
    assert "--min-speedup compares the plan with the better of --baselines" in capsys.readouterr().err


def test_a_failed_validate_replaces_a_passing_report_of_another_tree(tmp_path):
    """The rule keeps only a report ``rewrite --apply`` would accept: once the tree changed, the
    passing report is stale and a failing run's report takes its place."""
    from rewriter.validate.report import kept_passing

    out = tmp_path / "validation"
    out.mkdir()
    passing = {"report_version": 1, "diff_sha256": "d", "tree_sha256": {"model.py": "a"}, "plan_sha256": "p",
               "verdict": {"passed": True}}
    (out / "validation.json").write_text(json.dumps(passing))
    failing = dict(passing, verdict={"passed": False, "notes": []})
    assert kept_passing(failing, out) == out / "validation.json"
    assert kept_passing(dict(failing, tree_sha256={"model.py": "b"}), out) is None
    assert kept_passing(dict(failing, diff_sha256="e"), out) is None
    assert kept_passing(dict(passing), out) is None  # a passing run replaces it as before
