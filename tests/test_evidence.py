"""Typed evidence: a value read once, where None is a value it may be read as, is not read again."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rewriter.diagnose.evidence import UNREAD, Evidence
from rewriter.diagnose.generation import generating_module


class _Generator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.generation_config = object()

    def generate(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _ctx(model: torch.nn.Module, step) -> SimpleNamespace:  # noqa: ANN001
    return SimpleNamespace(reference=lambda: (model, None, step), evidence=Evidence())


def test_a_step_that_generates_nothing_is_read_once_as_none():
    model = _Generator()
    calls = []
    ctx = _ctx(model, lambda: calls.append(1))  # the step never calls generate
    assert ctx.evidence.generates is UNREAD
    assert generating_module(ctx) is None
    assert generating_module(ctx) is None
    assert calls == [1] and ctx.evidence.generates is None


def test_the_module_whose_generate_the_step_called_is_found():
    model = torch.nn.Sequential(_Generator())
    ctx = _ctx(model, lambda: model[0].generate(torch.ones(1)))
    assert generating_module(ctx) is model[0]
    assert "generate" not in vars(model[0])  # the counting wrapper is removed after the step


def test_a_compiled_generator_is_patched_once_and_restored():
    """A harness that returns torch.compile(model): the OptimizedModule is listed beside the model it
    wraps and forwards attribute writes to it; patching both and deleting twice raised AttributeError."""
    inner = _Generator()
    model = torch.compile(inner, backend="eager")
    ctx = _ctx(model, lambda: inner.generate(torch.ones(1)))
    assert generating_module(ctx) is inner
    assert "generate" not in vars(inner) and inner.generate(torch.ones(1)).item() == 2
