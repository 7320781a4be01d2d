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
