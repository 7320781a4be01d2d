"""A program whose own torch.compile raises (``fullgraph=True`` over a branch on a tensor's value)
is diagnosed, not only explained: the ladder sets that compile aside, the search measures the
program with compilation off as its reference, and the plan changes the program's compile so
that it runs (docs/design.md, "Programs whose own compile raises")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from programs import last_json, run_programs

from rewriter.cli import main
from rewriter.diagnose.candidate import AS_IS
from rewriter.diagnose.decide import Choice, when_as_is_raises
from rewriter.diagnose.own_raised import unwrap
from rewriter.errors import StackpartError
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"

pytestmark = pytest.mark.skipif(not hasattr(torch.compiler, "set_stance"), reason="torch < 2.6")


def _eager(script: Path, out: Path) -> dict:
    """The user's script with compilation off: the outputs the rewritten program must give."""
    code = ("import runpy, sys, torch\ntorch.compiler.set_stance('force_eager')\n"
            f"sys.argv = [{str(script)!r}, {str(out)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n")
    return {"code": code, "args": [], "cwd": script.parent}


def test_a_per_layer_fullgraph_compile_that_raises_is_diagnosed_and_fixed(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_raises", src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60",
                 "--shape", "batch=2,seq=5", "--shape", "batch=2,seq=7"]) == 0
    [action] = load_plan(plan).plan.actions
    assert action.action == "compile" and action.target == "train.py::apply_compile", action
    assert action.own_call is not None and action.own_call.fullgraph is False, action  # what made it raise goes
    assert "with compilation off" in action.why, action.why
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    notes = " ".join(search["measurement"].get("notes") or [])
    assert "the program as it is raises" in notes and "model.py:12" in notes, notes
    [breaks] = [r for r in report["rungs"] if r["name"] == "graph_breaks"]
    assert breaks["status"] == "ok" and "model.py:12" in breaks["verdict"], breaks  # measured on the model, compile aside
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    before, eager, after = run_programs([
        {"script": pristine / "train.py", "args": [tmp_path / "before.pt"]},
        _eager(pristine / "train.py", tmp_path / "eager.pt"),
        {"script": src / "train.py", "args": [tmp_path / "after.pt"]},
    ])
    assert before["rc"] != 0 and "data-dependent" in before["stderr"], before  # the program as it was raised
    counts = last_json(after, "train.py after the rewrite")
    assert counts["unique_graphs"] > 0, counts  # its compile is live, and runs
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "eager.pt"))
    last_json(eager, "train.py with compilation off")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _Decorated(torch.nn.Module):
    @torch.compile(backend="eager", fullgraph=True)
    def forward(self, x):
        return x + 1


def test_unwrap_takes_off_every_compile_the_model_object_carries():
    net = _Net()
    net.layers.append(_Decorated())
    net.layers[0].compile(backend="eager")  # module.compile()
    net.layers[1] = torch.compile(net.layers[1], backend="eager")  # a compiled child
    net.layers[2].forward = torch.compile(net.layers[2].forward, backend="eager")  # a compiled forward attribute
    bare, n = unwrap(torch.compile(net, backend="eager"))  # and the root
    assert bare is net and n == 5
    assert all(type(m) is torch.nn.Linear for m in net.layers[:3])
    assert not hasattr(_Decorated.forward, "_torchdynamo_orig_callable")  # the method as written
    assert net.layers[0]._compiled_call_impl is None and "forward" not in vars(net.layers[2])
    assert unwrap(net) == (net, 0)


def _rows(**steps):
    return {n: {"step_ms": t} for n, t in steps.items()}


def test_the_program_with_compilation_off_is_the_baseline_never_the_plan():
    rows = _rows(**{AS_IS: 1.0, "as-is+no-fullgraph": 1.4, "as-is+dynamic": 1.2})
    kept = Choice(AS_IS, "the program as it is, the only candidate left", {AS_IS: "chosen"},
                  {AS_IS: 0.0, "as-is+no-fullgraph": -4.0, "as-is+dynamic": -2.0})
    c = when_as_is_raises(kept, rows, [AS_IS, "as-is+no-fullgraph", "as-is+dynamic"])
    assert c.chosen == "as-is+dynamic"  # the largest net of those that run
    assert c.status[AS_IS].startswith("the baseline") and c.status["as-is+dynamic"] == "chosen"
    assert "the program as it is raises" in c.text and "with compilation off" in c.text
    assert "the program as it is, the only" not in c.text


def test_no_candidate_that_runs_is_an_error_not_change_nothing():
    rows = {AS_IS: {"step_ms": 1.0}, "as-is+no-fullgraph": {"problems": ["raised: UserError"]}}
    kept = Choice(AS_IS, "the program as it is", {AS_IS: "chosen", "as-is+no-fullgraph": "failed: raised: UserError"}, {})
    with pytest.raises(StackpartError, match="no candidate that changes it ran"):
        when_as_is_raises(kept, rows, [AS_IS, "as-is+no-fullgraph"])
