"""The ladder is the rung modules of ``rewriter.diagnose.rungs``: a module dropped there is run in
its order, with what it needs run before it, and no line elsewhere registers it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from rewriter.diagnose import rungs
from rewriter.diagnose.rungs import ladder
from rewriter.plan import Harness

HARNESS = """\
import torch

def build_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

def make_inputs(batch: int = 2):
    return (torch.randn(batch, 4),)
"""

PROBE = """\
from rewriter.diagnose.rung import Rung, RungResult


def run(ctx):
    r = RungResult("probe", "What did the profiled run see?")
    r.measurement = {"profiled_steps": ctx.evidence.profile.steps}
    r.verdict = "seen"
    return r


RUNG = Rung(name="probe", order=35, run=run, needs=frozenset({"profile"}))
"""


@pytest.fixture
def dropped_in(tmp_path, monkeypatch):
    """A directory added to the rungs package's path: a module written there is one of its modules."""
    extra = tmp_path / "extra_rungs"
    extra.mkdir()
    monkeypatch.setattr(rungs, "__path__", [*rungs.__path__, str(extra)])
    yield extra
    for name in [m for m in sys.modules if m.startswith(f"{rungs.__name__}.") and m.rsplit(".", 1)[1] in ("probe", "helper", "early")]:
        del sys.modules[name]


def test_the_ladder_runs_cheapest_first():
    assert [r.name for r in ladder()] == ["batch_scaling", "profile", "memory", "device_time", "op_mix", "top_ops",
                                          "gaps", "graph_breaks", "recompiles", "instance_recompiles", "granularity"]
    assert {r.name for r in ladder() if r.compiles} == {"graph_breaks", "recompiles", "instance_recompiles"}
    # the rungs that need the device to themselves come first: the search's early children start after them
    assert [r.name for r in ladder() if r.quiet] == ["batch_scaling", "profile", "memory"]


def test_a_rung_module_dropped_in_the_package_is_run_in_its_order(tmp_path, dropped_in, one_thread):
    from rewriter.diagnose.runner import diagnose

    (dropped_in / "probe.py").write_text(PROBE)
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(HARNESS)
    spec = Harness(file="harness.py", shapes=[{"batch": 2}], mode="inference", device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only={"probe"}, backend="eager", steps=1)
    names = [r.name for r in outcome.rungs]
    assert names == ["batch_scaling", "memory", "device_time", "probe", "op_mix", "top_ops", "gaps", "graph_breaks",
                     "recompiles", "instance_recompiles", "granularity"]
    probe = outcome.rungs[3]
    # selected alone, it ran after the profiled run it needs: the rung that gives it ran too
    assert probe.ok and probe.measurement == {"profiled_steps": 1}, probe
    assert all(r.status == "skipped" for r in outcome.rungs if r.name != "probe")


def test_a_module_without_a_rung_is_refused(dropped_in):
    (dropped_in / "helper.py").write_text("X = 1\n")
    with pytest.raises(TypeError, match=r"helper\.py: a module of rewriter\.diagnose\.rungs declares RUNG"):
        ladder()


def test_a_rung_that_needs_what_no_earlier_rung_gives_is_refused(dropped_in):
    (dropped_in / "early.py").write_text(PROBE.replace("order=35", "order=5").replace('"probe"', '"early"'))
    with pytest.raises(ValueError, match="rung 'early' needs profile, which no earlier rung gives"):
        ladder()
