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


def test_a_recompile_whose_two_cache_entries_failed_alike_is_listed_once():
    """(2, 8) compiles static, (2, 3) recompiles with the sequence dim dynamic, (3, 3) recompiles
    again: Dynamo records the failure of both entries (0/1 and 0/0) on the same batch-size guard.
    validate's report lists each recompilation once, as many lines as recompiles counted."""
    from rewriter.validate.report import _variant_behaviour_lines

    torch._dynamo.reset()
    lin = torch.compile(torch.nn.Linear(4, 4), backend="eager")
    with CompileWatch() as watch:
        for shape in [(2, 8, 4), (2, 3, 4), (3, 3, 4)]:
            lin(torch.randn(*shape))
        stats = watch.stats()
    torch._dynamo.reset()
    assert stats.recompiles == 2, stats
    seq, batch = "size mismatch at index 1. expected 8, actual 3", "size mismatch at index 0. expected 2, actual 3"
    assert len(stats.recompile_reasons) == 2, stats.recompile_reasons
    assert seq in stats.recompile_reasons[0] and batch in stats.recompile_reasons[1], stats.recompile_reasons
    assert stats.recompile_reasons[1].count(batch) == 1 and "0/1" not in stats.recompile_reasons[1], stats.recompile_reasons
    lines = _variant_behaviour_lines({}, "plan", {"compiled": "plan"}, stats.to_json())
    recompiled = [ln for ln in lines if ln.startswith("  - recompiled: ")]
    assert len(recompiled) == stats.recompiles and sum(batch in ln for ln in recompiled) == 1, lines


def test_failed_guards_are_grouped_per_recompile():
    """Each recompilation's failures end at the frame's first entry (``N/0``); a guard two entries
    failed alike is kept once, distinct guards of one recompile are kept in order."""
    from rewriter.engine.watch import per_recompile

    same = "tensor 'x' size mismatch at index 0. expected 2, actual 3"
    assert per_recompile([f"0/0: {same}", f"0/1: {same}", f"0/0: {same}"]) == [[same], [same]]
    assert per_recompile(["0/1: 2 <= x.size()[0]  # y = x + 1\nmore", f"0/0: {same}"]) == [
        ["2 <= x.size()[0]  # y = x + 1", same]]
    assert per_recompile(["[3/0]: a", "unlabelled b"]) == [["a"], ["unlabelled b"]]
