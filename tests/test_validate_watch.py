"""Dynamo's counters as validate reads them: recompiles counted once each, recompile-limit fallback seen."""

from __future__ import annotations

import torch

from rewriter.validate.watch import CompileWatch


def test_recompiles_are_counted_once_per_recompilation():
    @torch.compile(backend="eager")
    def f(x):
        return x * 2

    with CompileWatch() as watch:
        for shape in [(2, 32), (2, 24), (2, 16), (1, 8)]:
            f(torch.randn(*shape))
        stats = watch.stats()
    # (2,32) static; (2,24) recompiles dynamic; (2,16) reuses it; (1,8) recompiles (size 1 is specialised)
    assert stats.unique_graphs == 3 and stats.recompiles == 2
    assert stats.recompile_limit_hits == []
    assert any("size mismatch" in r for r in stats.recompile_reasons)


def test_recompile_limit_fallback_is_reported_with_the_guard():
    class Block(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.i = i

        def forward(self, x):
            return x * self.i

    blocks = [Block(i) for i in range(12)]
    for b in blocks:
        b.forward = torch.compile(b.forward, backend="eager")
    with CompileWatch() as watch:
        x = torch.randn(4)
        for b in blocks:
            x = b(x)
        stats = watch.stats()
    (hit,) = stats.recompile_limit_hits
    assert "recompile_limit" in hit and "forward" in hit
    assert stats.recompiles == 7  # 8 cache entries (the limit), then eager
