"""The code the mark_dynamic action writes runs: an optional parameter is marked only when it
holds a tensor (a real-model sweep found T5's encoder stack calling the marked forward with
encoder_hidden_states=None: AttributeError on the first call)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mark_dynamic" / "optional_parameter" / "after" / "model.py"


def test_the_guarded_mark_runs_with_and_without_the_optional_tensor():
    spec = importlib.util.spec_from_file_location("optional_parameter_after", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch._dynamo.reset()
    stack = module.Stack(4)
    x = torch.ones(2, 3, 4)
    assert torch.equal(stack(x), stack.block(x))  # ctx=None: nothing marked, no error
    ctx = torch.ones(2, 3, 4)
    stack(x, ctx)
    assert 1 in getattr(ctx, "_dynamo_weak_dynamic_indices", set())  # the tensor was marked
    torch._dynamo.reset()



def _load(case: str, stage: str, name: str):
    """Import a fixture's model with every ``torch.compile`` it applies at import on the eager
    backend (Dynamo's capture and guards, no Inductor codegen on this CPU)."""
    from unittest import mock

    real = torch.compile

    def eager_compile(model=None, **kwargs):
        kwargs["backend"] = "eager"
        return (lambda fn: real(fn, **kwargs)) if model is None else real(model, **kwargs)

    path = Path(__file__).resolve().parents[1] / "fixtures" / "mark_dynamic" / case / stage / "model.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with mock.patch.object(torch, "compile", eager_compile):
        spec.loader.exec_module(module)
    return module


def _graphs_over_batches(module, batches, mark=None) -> int:
    """Run ``Server`` at each batch size, compare with eager, and return the graphs Dynamo
    compiled (``counters["stats"]["unique_graphs"]``). ``mark`` marks the block input of the
    before/ model by hand, the way another option of the action would write it."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    torch._dynamo.reset()
    counters.clear()
    server = module.Server(11, 8, 2)
    for batch in batches:
        ids = torch.randint(0, 11, (batch, 5))
        if mark is None:
            out = server(ids)
        else:
            out = server.tok(ids)
            mark(out, 0)
            for block in server.blocks:
                out = block(out)
        with torch.compiler.set_stance("force_eager"):
            expected = server(ids)
        assert torch.allclose(out, expected)
    graphs = int(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    return graphs


def test_unbacked_mark_runs_at_batch_1_in_the_shared_dynamic_graph():
    """The unbacked fixture's rewritten code runs at batch 1, and batches 1, 3, 5 share one graph
    (torch 2.13, backend="eager"); a strict mark raises at batch 1 (SP106's warning) and
    maybe_mark_dynamic compiles a second graph for it."""
    import pytest

    after = _load("unbacked", "after", "unbacked_after")
    before = _load("unbacked", "before", "unbacked_before")
    assert _graphs_over_batches(after, [1, 3, 5]) == 1
    assert _graphs_over_batches(before, [1, 3, 5], torch._dynamo.maybe_mark_dynamic) == 2
    with pytest.raises(Exception, match=r"specialized it to be a constant \(1\)"):
        _graphs_over_batches(before, [1], lambda t, d: torch._dynamo.mark_dynamic(t, d, min=2, max=64))
