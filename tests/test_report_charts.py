"""diagnose's report charts (report.py)."""

from __future__ import annotations


def test_the_candidates_chart_draws_the_contended_steps(tmp_path):
    """report.py's candidates.png: each plan's contended step is drawn (hollow) above its quiet one,
    and the title says so; without contended steps the chart is as before."""
    import pytest

    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from rewriter.diagnose.report import charts
    from rewriter.diagnose.rung import RungResult

    drawn: list = []
    real = plt.Axes.scatter

    def spy(self, *a, **k):
        drawn.append((a[1][0], k.get("facecolors")))
        return real(self, *a, **k)

    rows = [{"candidate": "per-block", "step_ms": 10.7, "contended_step_ms": 15.5, "compile_s_per_start": 9.0, "chosen": False},
            {"candidate": "nested+whole", "step_ms": 11.0, "contended_step_ms": 11.5, "compile_s_per_start": 36.8, "chosen": True}]
    search = RungResult(name="search", title="t", status="ok", measurement={"candidates": rows})
    plt.Axes.scatter = spy
    try:
        made, note = charts(tmp_path, {"search": search})
    finally:
        plt.Axes.scatter = real
    assert "candidates.png" in made and (tmp_path / "candidates.png").stat().st_size > 0
    assert (15.5, "none") in drawn and (11.5, "none") in drawn and (10.7, None) in drawn


def test_the_terminal_table_shows_the_contended_step_and_says_why_the_quiet_winner_lost():
    """The terminal's candidates table gets a "busy ms" column when the search timed the host
    core contended, and the quiet-core winner that lost there reads "behind when busy", not as a
    tie it did not win."""
    from rich.console import Console

    from rewriter.diagnose.report import candidates_terminal, short_status
    from rewriter.diagnose.rung import RungResult

    lost = ("the largest net on a quiet host core (637,651 s, step 10.676 ms), but 15.481 ms/step with the host core "
            "contended, 34.8% behind the best there; 'nested+whole' is at most 3.2% behind in either condition")
    assert short_status(lost) == "behind when busy"
    assert short_status("not chosen: the steps 0.5% apart, within the 2.0% noise band on a quiet host core, but 20.000 vs "
                        "13.500 ms/step with the host core contended, 48.1% apart, outside the 4.0% band there") == "behind when busy"
    # without a measured gain, put behind for its recompiles: said so, not "later in order"
    assert short_status("not chosen: 1 recompile(s) over the shapes against 0 as it is (the gain is not measured with "
                        "this backend)") == "more recompiles"
    from rewriter.diagnose.decide import GATED
    assert short_status(GATED + "slower than eager with the host core contended: 12.145 ms vs 11.733 ms per step") == \
        "gate: slower when busy"
    rows = [{"candidate": "per-block", "step_ms": 10.676, "contended_step_ms": 15.481, "compile_s_per_start": 9.0, "recompiles": 1,
             "fallbacks": 0, "numerics": "ok", "net_s": 637651.0, "status": lost, "chosen": False},
            {"candidate": "as-is", "step_ms": 17.053, "contended_step_ms": 23.734, "compile_s_per_start": None, "recompiles": 0,
             "fallbacks": 0, "numerics": "reference", "net_s": 0.0, "status": "net 0 s < 603,053 s", "chosen": False}]
    console = Console(record=True, width=120)
    candidates_terminal(console, RungResult(name="search", title="t", status="ok", measurement={"candidates": rows}))
    text = console.export_text()
    assert "busy ms" in text and "15.481" in text and "behind when busy" in text and " ref " in text, text


def test_the_chosen_candidate_is_said_on_an_80_column_terminal():
    """Long candidate names squeezed the status column out of the table on a narrow terminal:
    nothing said which candidate was chosen."""
    from rich.console import Console

    from rewriter.diagnose.report import candidates_terminal
    from rewriter.diagnose.rung import RungResult

    rows = [{"candidate": n, "step_ms": 1.234, "compile_s_per_start": 0.5, "recompiles": 1, "fallbacks": 0, "numerics": "ok",
             "net_s": 12.0, "status": "chosen" if chosen else "net 3 s < 12 s", "chosen": chosen}
            for n, chosen in [("as-is", False), ("as-is+capture_scalar_outputs+dynamic", True),
                              ("per-block+fullgraph+recompile_limit", False)]]
    console = Console(record=True, width=80)
    candidates_terminal(console, RungResult(name="search", title="t", status="ok", measurement={"candidates": rows}))
    lines = console.export_text().splitlines()
    assert "status" in next(line for line in lines if "candidate" in line and "step ms" in line)
    assert "chosen" in next(line for line in lines if "as-is+capture" in line)
