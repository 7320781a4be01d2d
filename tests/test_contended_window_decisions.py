"""The contended host core window: what decide makes of a candidate's contended standing, and the
timing's second process and busy loop when the contended window fails or is interrupted."""

from __future__ import annotations

from rewriter.diagnose.decide import decide


def _row(step_ms, compile_s=0.0, **kw):
    return {"step_ms": step_ms, "compile_s_per_start": compile_s, "problems": [], **kw}


def _hosted(quiet_and_contended, compile_s=None):
    compile_s = compile_s or {}
    return {n: _row(q, compile_s.get(n, 0.0), contended_step_ms=c) for n, (q, c) in quiet_and_contended.items()}


NOISE = {"share": 0.02, "median_abs_log": 0.008, "pairs": 10, "contended_share": 0.03}


def test_a_least_behind_candidate_that_does_not_pay_back_does_not_hand_the_plan_to_as_is():
    """'x' is least behind in the worse condition but its quiet net is negative; 'y' beats as-is
    in both conditions. Falling back to as-is picks the worst plan in both conditions, and the
    text says no candidate pays back while 'y' nets 1,000,000 s on a quiet core."""
    rows = _hosted({"as-is": (10.0, 30.0), "x": (10.1, 15.0), "y": (9.0, 28.0)})
    c = decide(rows, ["x", "y", "as-is"], [], 1_000_000_000, 1, True, NOISE)
    assert c.net_s["y"] > 0 and c.net_s["x"] < 0
    assert c.chosen == "y", (c.chosen, c.text, c.status)


def test_as_is_chosen_over_a_quiet_winner_does_not_say_no_candidate_pays_back():
    """'y' nets more than as-is on a quiet core and falls far behind with it contended: as-is is
    the least behind in the worse condition, but the text must not claim nothing pays back."""
    rows = _hosted({"as-is": (10.0, 10.0), "y": (9.0, 20.0)})
    c = decide(rows, ["y", "as-is"], [], 1_000_000_000, 1, True, NOISE)
    assert c.chosen == "as-is"
    assert c.net_s["y"] > 0
    assert "no candidate pays back" not in c.text, c.text


def test_validate_processes_2_runs_autotuning_again_as_its_help_says(tmp_path, monkeypatch):
    """`--processes 2`'s help: "2 gives each a second process that runs Inductor's autotuning
    again"; an explicit 2 kept replica_caches at its default, warm (the second process loads the
    first's stored winners), and only `auto` reautotuned."""
    import rewriter.validate.command as command
    from rewriter.cli import main
    from rewriter.engine.options import on_device

    seen = []
    monkeypatch.setattr(command, "validate_command", lambda plan, src, opts: seen.append(opts) or 0)
    plan = tmp_path / "plan.yaml"
    plan.write_text("{}\n")
    src = tmp_path / "src"
    src.mkdir()
    for how in ("2", "auto"):
        assert main(["validate", "--plan", str(plan), str(src), "--processes", how]) == 0
    explicit, auto = (on_device(o, "cuda:0") for o in seen)
    assert auto.replicates == 2 and auto.replica_caches == "reautotune"
    assert explicit.replicates == 2 and explicit.replica_caches == "reautotune", explicit.replica_caches


def test_a_second_process_that_fails_in_the_contended_window_keeps_its_quiet_figures(busy_loop):
    """The contended window must never change ``median_ms``: a second process that errors only
    with the busy loop running was dropped from every shape, quiet windows included, so its
    variant's step became its slower first process's (10 ms instead of 9)."""
    from rewriter.engine.options import Options
    from rewriter.engine.replicas import REPLICA, merge_replicates
    from rewriter.engine.windows import interleave

    class Kid:
        def __init__(self, ms, fails_loaded=False):
            self.ms, self.fails_loaded = ms, fails_loaded

        def time(self, shape, warmup, n, **kw):
            if busy_loop.on and self.fails_loaded:
                return {"error": {"kind": "Timeout", "message": "too slow"}}
            return {"samples": [self.ms * (2 if busy_loop.on else 1) / 1e3] * n, "calls": 1, "pinned": kw.get("pin")}

        def terminate(self):
            pass

    kids = {"eager": Kid(20.0), "whole": Kid(10.0), "whole" + REPLICA: Kid(9.0, fails_loaded=True)}
    notes: list[str] = []
    timed = interleave(kids, [{"seq": 512}, {"seq": 384}],
                                  Options(warmup=1, reps=4, budget_s=0.0, windows=2, contended=True), notes=notes, device="cuda")
    rows, raw, error = timed.rows, timed.samples, timed.error
    assert error is None and not busy_loop.on
    merged = merge_replicates(timed, ["eager", "whole"]).rows
    for row in merged:
        assert row["timing"]["whole"]["median_ms"] == 9.0, row["timing"]["whole"]  # as without the contended window
        assert row["timing"]["whole"]["contended_ms"] == 20.0
    assert any("its quiet ones still both processes" in n for n in notes), notes


def test_the_busy_loop_is_stopped_when_the_timing_is_interrupted_while_it_settles(monkeypatch, busy_loop):
    """A SIGTERM/Ctrl-C (or any exception) during the 0.2 s settle after contend() left the busy
    loop running: it was outside the try whose finally kills it."""
    import pytest

    import rewriter.engine.windows as windows
    from rewriter.engine.options import Options
    from rewriter.engine.windows import interleave

    class Kid:
        def time(self, shape, warmup, n, **kw):
            return {"samples": [0.01] * n, "calls": 1, "pinned": kw.get("pin")}

        def terminate(self):
            pass

    def interrupted(s):
        raise KeyboardInterrupt

    monkeypatch.setattr(windows.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        interleave({"eager": Kid(), "whole": Kid()}, [{"seq": 512}],
                   Options(warmup=1, reps=3, budget_s=0.0, contended=True), device="cuda")
    assert busy_loop.started and busy_loop.alive == [], "the busy loop was left running"


def test_a_first_process_that_fails_in_the_contended_window_leaves_the_quiet_figures_standing(busy_loop):
    """The contended window is supplementary: a plan's (first) process that errors only there
    drops every plan's contended figures (the decision then falls back to the quiet net) and
    keeps the quiet windows' figures, instead of failing the whole timing."""
    import pytest

    from rewriter.engine.options import Options

    from rewriter.engine.windows import interleave

    class Kid:
        def __init__(self, ms, breaks):
            self.ms, self.breaks = ms, breaks

        def time(self, shape, warmup, n, **kw):
            if busy_loop.on and self.breaks:
                return {"error": {"kind": "crash", "message": "died"}}
            return {"samples": [self.ms / 1e3] * n, "calls": 1, "pinned": kw.get("pin")}

        def terminate(self):
            pass

    notes: list[str] = []
    timed = interleave({"eager": Kid(20.0, False), "whole": Kid(10.0, True)}, [{"seq": 512}],
                                   Options(warmup=1, reps=3, budget_s=0.0, contended=True), notes=notes, device="cuda")
    rows, _raw, error = timed.rows, timed.samples, timed.error
    assert error is None and not busy_loop.on
    assert rows[0]["timing"]["whole"]["median_ms"] == pytest.approx(10.0)
    assert "contended_ms" not in rows[0]["timing"]["whole"] and "contended_ms" not in rows[0]["timing"]["eager"]
    assert any(n.startswith("no contended-core figures") for n in notes), notes
