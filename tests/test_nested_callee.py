"""Hierarchical compilation of a repeated callee: a model whose ``forward`` calls ``self.step`` in a
Python loop, compiled whole by the program itself (``torch.compile(Integrator())`` in the
harness). Dynamo unrolls the loop and traces ``step`` once per iteration; diagnose reads that from
Dynamo's own inlining log (:mod:`rewriter.diagnose.repeated_calls`) and proposes
``as-is+nested``: ``@torch.compiler.nested_compile_region`` on ``Integrator.step`` inside the
program's own compile (docs/design.md, "The search")."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from programs import last_json, run_programs
from rewriter.cli import main

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "own_loop_nested"

needs_nested = pytest.mark.skipif(
    not hasattr(__import__("torch").compiler, "nested_compile_region"), reason="nested_compile_region: torch >= 2.8")

#: One program, before and after the rewrite: its output and the op nodes of every graph Dynamo
#: handed the backend (subgraphs included; ``aot_eager``).
PROGRAM = '''
import json, sys, torch
from harness import build_model, make_inputs
from model import Integrator
nodes = []
def count(gm, example_inputs):
    def walk(g):
        return sum(n.op in ("call_function", "call_method", "call_module") for n in g.graph.nodes) + sum(
            walk(m) for m in g.children() if isinstance(m, torch.fx.GraphModule))
    nodes.append(walk(gm))
    return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
torch.manual_seed(0)
model = Integrator()
(x,) = make_inputs()
with torch.no_grad():
    out = torch.compile(model, backend=count)(x)
print(json.dumps({"out": out.flatten().tolist(), "nodes": nodes}))
'''


@needs_nested
def test_dynamo_s_inlining_log_names_the_repeated_callee_and_the_outermost_one(tmp_path, monkeypatch):
    """``step`` and ``MLP.forward`` are each inlined once per iteration into one trace of
    ``Integrator.forward``; ``step`` is the outermost (``MLP.forward`` runs inside it); a loop
    shorter than :data:`MIN_CALLS` is not a repeated callee."""
    import torch

    from rewriter.diagnose.repeated_calls import MIN_CALLS, capture, read

    src = tmp_path / "src"
    shutil.copytree(CASE, src)
    monkeypatch.syspath_prepend(str(src))
    sys.modules.pop("model", None)
    import model  # noqa: PLC0415 - the fixture's own module

    try:
        for steps, expected in ((12, 12), (MIN_CALLS - 1, None)):
            torch._dynamo.reset()
            with capture() as log, torch.no_grad():
                torch.compile(model.Integrator(steps), backend="eager")(torch.randn(2, 16))
            found = {r.target: r for r in read(log, src)}
            if expected is None:
                assert not found, found
                continue
            step, inner = found["model.py::Integrator.step"], found["model.py::MLP.forward"]
            assert (step.calls, step.frame, step.inner, step.outermost) == (
                12, "model.py::Integrator.forward", ["model.py::MLP.forward"], True)
            assert (inner.calls, inner.outermost) == (12, False)
    finally:
        torch._dynamo.reset()
        sys.modules.pop("model", None)


def test_the_log_reader_keeps_the_last_trace_of_a_frame_and_resolves_decorated_functions(tmp_path):
    """A restarted analysis traces the frame again: only its last trace counts. A code object's
    first line is a decorated function's first decorator."""
    from rewriter.diagnose.repeated_calls import InlineLog, read

    (tmp_path / "m.py").write_text("import functools\n\n\nclass A:\n    @functools.cache\n    def f(self):\n        return 1\n\n"
                                   "    def forward(self):\n        return self.f()\n")
    path = str(tmp_path / "m.py")
    log = InlineLog()
    code = f'<code object f at 0x7f00, file "{path}", line 5>'
    for attempt in (20, 9):
        log.feed(f"Step 1: torchdynamo start tracing forward {path}:9")
        for _ in range(attempt):
            log.feed(f"INLINING {code}, inlined by default")
            log.feed(f"DONE INLINING {code}")
    [found] = read(log, tmp_path)
    assert (found.target, found.calls, found.frame) == ("m.py::A.f", 9, "m.py::A.forward")


@needs_nested
def test_diagnose_proposes_the_nested_region_and_the_rewrite_adds_only_the_decorator(tmp_path, monkeypatch):
    """End to end on CPU (eager backend, 12 loop steps): ``as-is+nested`` is proposed and measured
    (numerics ok), keeps the program's own call as it is and marks ``Integrator.step``; applied,
    the diff is the one decorator line; the program's output is unchanged and Dynamo hands the
    backend fewer op nodes."""
    from rewriter.diagnose.candidates import NESTED_OWN
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    shutil.copytree(CASE, src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None,
                                 device="cpu")
    plan = tmp_path / "out" / "plan.yaml"
    outcome = diagnose(spec, src, plan, only={"graph_breaks", "recompiles", "search"}, backend="eager")
    [rung] = [r for r in outcome.rungs if r.name == "recompiles"]
    assert rung.measurement["repeated_calls"][0]["target"] == "model.py::Integrator.step", rung.measurement
    cand = {c.name: c for c in outcome.search.candidates}[NESTED_OWN]
    assert [(a.target, a.strategy, a.own_call.edits() if a.own_call else None) for a in cand.plan.actions] == [
        ("harness.py::build_model", "whole", {"disable": False}), ("model.py::Integrator.step", "nested", None)]
    row = {r["candidate"]: r for r in outcome.search.table()}[NESTED_OWN]
    assert not row["status"].startswith("failed") and row["numerics"] == "ok", row
    # the chosen plan here (the eager backend measures no gain: the ladder's order decides) or not, apply this one
    one = tmp_path / "nested.yaml"
    from rewriter.diagnose.report import plan_yaml

    one.write_text(plan_yaml(cand.plan))
    before = {p.name: p.read_text() for p in src.glob("*.py")}
    assert main(["rewrite", "--plan", str(one), str(src), "--apply", "--no-validate"]) == 0
    after = {p.name: p.read_text() for p in src.glob("*.py")}
    assert after["harness.py"] == before["harness.py"]
    added = [line for line in after["model.py"].splitlines() if line not in before["model.py"].splitlines()]
    assert [line.strip() for line in added] == ["@torch.compiler.nested_compile_region"], added
    assert after["model.py"].replace("    @torch.compiler.nested_compile_region\n", "") == before["model.py"]
    results = run_programs([{"code": PROGRAM, "cwd": pristine}, {"code": PROGRAM, "cwd": src}])
    old, new = (last_json(r) for r in results)
    assert new["out"] == pytest.approx(old["out"], rel=1e-6, abs=1e-6)
    assert sum(new["nodes"]) < sum(old["nodes"]), (old["nodes"], new["nodes"])


def test_nothing_is_proposed_without_the_region_in_torch(tmp_path, monkeypatch):
    """On a torch without ``torch.compiler.nested_compile_region`` (< 2.8) the candidate is pruned,
    and says so."""
    import rewriter.diagnose.candidates as candidates
    from rewriter.diagnose.repeated_calls import RepeatedCall

    pruned: list[str] = []

    class P:  # the proposals' two fields nested_callees reads before the torch check
        ctx = type("C", (), {"evidence": type("E", (), {"repeated_calls": [
            RepeatedCall("model.py::Integrator.step", 300, "model.py::Integrator.forward")]})()})()

    P.pruned = pruned
    monkeypatch.setattr(candidates, "nested_supported", lambda: False)
    candidates.nested_callees(P, None)
    assert pruned == [f"{candidates.NESTED_OWN}, nested+whole: model.py::Integrator.step (300 calls in one trace of "
                      "model.py::Integrator.forward): torch.compiler.nested_compile_region needs torch >= 2.8"]


def test_a_recursive_callee_is_read_as_recursive_and_still_outermost(tmp_path):
    """A function on its own inline stack (it calls itself) is the outermost repeated callee of its
    trace, marked recursive, so the search says why it leaves it out instead of dropping it."""
    from rewriter.diagnose.repeated_calls import InlineLog, read

    (tmp_path / "m.py").write_text("class A:\n    def f(self, x, n):\n        return x if n == 0 else self.f(x + 1, n - 1)\n\n"
                                   "    def forward(self, x):\n        return self.f(x, 12)\n")
    path = str(tmp_path / "m.py")
    log = InlineLog()
    code = f'<code object f at 0x7f00, file "{path}", line 2>'
    log.feed(f"Step 1: torchdynamo start tracing forward {path}:5")
    for _ in range(12):
        log.feed(f"INLINING {code}, inlined by default")
    for _ in range(12):
        log.feed(f"DONE INLINING {code}")
    [found] = read(log, tmp_path)
    assert (found.target, found.calls, found.outermost, found.recursive) == ("m.py::A.f", 12, True, True)


def test_the_search_says_why_a_recursive_callee_gets_no_region():
    from types import SimpleNamespace

    from rewriter.diagnose.candidates import nested_callees
    from rewriter.diagnose.repeated_calls import RepeatedCall

    rec = RepeatedCall("m.py::A.f", 12, "m.py::A.forward", [], True, True)
    p = SimpleNamespace(ctx=SimpleNamespace(evidence=SimpleNamespace(repeated_calls=[rec])), pruned=[])
    nested_callees(p, None)
    assert p.pruned == ["as-is+nested, nested+whole: m.py::A.f (12 calls in one trace of m.py::A.forward) calls itself: "
                        "a nested compile region around a recursive function is not traced once and reused"]
