"""Dynamo's counters as validate reads them: recompiles counted once each, recompile-limit fallback seen."""

from __future__ import annotations

import torch

from rewriter.engine.watch import CompileWatch


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


def test_a_graph_break_is_reported_with_its_line(tmp_path, capsys):
    """A newcomer's KV decoder: validate listed "2x TypeError when making fake tensor call" with
    no file or line (Dynamo's counters keep none). The graph-break log gives the site and the
    one-line cause, and nothing of it is echoed to the terminal."""
    import importlib.util

    path = tmp_path / "kv_model.py"
    path.write_text(
        "import torch.nn.functional as F\n\n"
        "def attend(x):\n"
        "    return F.scaled_dot_product_attention(x, x, x, is_causal=(x.shape[1] > 1)) * 2\n"
    )
    spec = importlib.util.spec_from_file_location("kv_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = torch.compile(mod.attend, backend="eager")
    with CompileWatch() as watch:
        for t in (8, 12, 16):
            f(torch.randn(2, t, 4))
        stats = watch.stats()
    assert stats.graph_breaks >= 1
    [site, *_] = stats.graph_break_sites
    assert site.startswith(f"{path}:4: ") and "SymBool" in site
    assert "Graph break in user code" not in capsys.readouterr().err
