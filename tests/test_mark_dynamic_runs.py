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
