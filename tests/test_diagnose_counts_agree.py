"""diagnose states one measured figure for one thing: the graph-break rung, the findings and a
config twin's ``why:`` count graph-break sites alike, and what each of the program's own compiles
compiled at run time counts the recompiles the engine's row counts (a value guard after a graph
break recompiles the resume function alone). A model that calls ``model.compile()`` in place,
with an ``.item()`` graph break in each repeated block, on the eager backend (docs/design.md,
"How a program that compiles is measured")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = '''\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        scale = h.abs().mean().item()
        return x + h / (1.0 + scale)


class Net(nn.Module):
    def __init__(self, d: int = 8, n: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
'''

HARNESS = '''\
import torch

from model import Net


def build_model():
    torch.manual_seed(0)
    model = Net()
    model.compile(backend="eager")
    return model


def make_inputs(batch: int = 4):
    return (torch.randn(batch, 8),)
'''

ITEM_LINE = MODEL.splitlines().index("        scale = h.abs().mean().item()") + 1


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    return src


def _net(src: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(src))
    sys.modules.pop("model", None)
    import model  # noqa: PLC0415 - the tree's own module

    return model.Net


def test_the_rung_the_findings_and_the_config_why_count_the_same_breaks(tmp_path, monkeypatch):
    """Dynamo logs the one break twice here (for Net.forward's trace, which inlined the block, and
    for Block.forward's own frame) and counts it once: the rung's verdict, its findings and the
    twin's ``why:`` say 1, Dynamo's counter."""
    import torch
    from torch._dynamo.utils import counters

    from rewriter.diagnose.candidate import AS_IS, Candidate
    from rewriter.diagnose.kinds.config import with_config
    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.engine.watch import CompileWatch
    from rewriter.plan import parse_plan

    src = _src(tmp_path)
    net = _net(src, monkeypatch)
    model = net()
    model.compile(backend="eager")
    with CompileWatch() as watch, torch.no_grad():
        model(torch.randn(4, 8))
        counted = int(sum(counters["graph_break"].values()))
        logged = len(watch.breaks)
    torch._dynamo.reset()
    assert logged > counted == 1, (logged, counted)  # the premise: one break, logged more than once

    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None,
                                 device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks"}, backend="eager")
    [rung] = [r for r in outcome.rungs if r.name == "graph_breaks"]
    assert rung.measurement["graph_break_count"] == counted == rung.measurement["graph_break_sites"], rung.measurement
    assert [(f.file, f.line) for f in rung.findings] == [("model.py", ITEM_LINE)], rung.findings
    assert rung.verdict.startswith(f"{counted} graph break(s) in the program's own compiled code at model.py:{ITEM_LINE}"), \
        rung.verdict
    report = (tmp_path / "stackpart-diagnose" / "report.md").read_text()
    assert report.count(f"`model.py:{ITEM_LINE}` (graph_breaks, graph_break") == 1, report

    ctx = SimpleNamespace(results={"graph_breaks": rung}, reference=lambda: (model, None, None),
                          session=SimpleNamespace(src=src, spec=spec),
                          evidence=SimpleNamespace(config_twins=None, own_regions=[], own_compiled_modules=None, own_parsed=[],
                                                   dynamo_config=[]))
    base = parse_plan("version: 1\nactions: []\n").plan
    out, pruned = with_config(ctx, [Candidate(AS_IS, base)])
    [twin] = [c for c in out if c.name != AS_IS]
    assert pruned == [] and twin.plan.actions[0].why.startswith(
        f"graph breaks: {counted} graph-break site(s) in code this plan runs compiled"), twin.plan.actions[0].why
    torch._dynamo.reset()


def test_on_an_eager_model_the_rung_counts_the_graphs_explain_ended_at_a_break(tmp_path):
    """The same model without its compile is measured by ``torch._dynamo.explain``, whose own
    ``graph_break_count`` is ``graph_count - 1``: the second value of ``.item()`` recompiles the code
    after the break, a graph that is no break. The rung counts the graphs ended at a break."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src = _src(tmp_path)
    (src / "harness.py").write_text(HARNESS.replace('    model.compile(backend="eager")\n', ""))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None,
                                 device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks"}, backend="eager")
    [rung] = [r for r in outcome.rungs if r.name == "graph_breaks"]
    m = rung.measurement
    assert "source" not in m and m["graph_count"] - 1 > m["graph_break_count"] == 1, m
    assert m["graph_break_sites"] == 1, m
    assert [(f.file, f.line) for f in rung.findings] == [("model.py", ITEM_LINE)], rung.findings
    assert rung.verdict == f"1 graph break(s) at model.py:{ITEM_LINE}", rung.verdict


def test_what_a_compile_compiled_counts_the_recompiles_the_engine_counts(tmp_path, monkeypatch):
    """``.item()``'s float guards the resume function after the break; a second value recompiles it:
    a recompile of Block.forward's frame, as the engine's count (cache entries after the first,
    per code object) has it, and as the sentence per compile says."""
    import torch

    from rewriter.diagnose.runtime_compile import granularity
    from rewriter.engine.watch import CompileWatch, compiled_modules

    model = _net(_src(tmp_path), monkeypatch)()
    model.compile(backend="eager")
    with CompileWatch() as watch, torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 8))
        stats = watch.stats()
        frames = watch.frames(model)
        modules = compiled_modules(model)
    torch._dynamo.reset()
    assert stats.recompiles >= 1, stats
    assert sum(f["recompiles"] for f in frames) == stats.recompiles, frames
    [block] = [f for f in frames if f["graphs"]]
    assert block["name"] == "Block.forward" and block["resumes"] >= 2, block
    said = granularity({"frames": frames, "modules": modules})
    plural = "" if stats.recompiles == 1 else "s"
    assert said.endswith(f"{block['graphs']} graphs, {stats.recompiles} recompile{plural}"), said


def test_the_frame_logs_later_compile_of_a_resume_function_whose_frame_it_never_saw_adds_up():
    """A resume function compiled twice whose frame compiled before the log began: one frame, both
    compiles' graphs, the second a recompile (the first compile's entry is not overwritten)."""
    from rewriter.engine.watch import FrameLog

    log = FrameLog()
    resume = {"co_name": "torch_dynamo_resume_in_forward_at_14", "name": "torch_dynamo_resume_in_forward_at_14",
              "file": "/t/model.py", "line": 14, "fullgraph": False, "entry": None}
    log.compiles = [{**resume, "graphs": 1}, {**resume, "graphs": 1}]
    log._installed = True
    [frame] = log.frames()
    assert (frame["name"], frame["graphs"], frame["compiles"], frame["recompiles"]) == ("forward (resumed at line 14)", 2, 2, 1), frame
    json.dumps(frame)  # the row's runtime_compiles is JSON
