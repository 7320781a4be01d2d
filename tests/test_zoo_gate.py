"""benchmarks/zoo.py's variant processes: with their compile phases run at once, the steps of one
process are timed only while no other process runs (timing windows never overlap), and a process that
fails or hangs in its compile phase is reported without holding up the others' timing. A toy harness
(no transformers, no compile): the gate is what is tested, not a model."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo.py"

HARNESS = textwrap.dedent('''\
    import time
    import torch


    def build_model():
        torch.manual_seed(0)
        return torch.nn.Linear(8, 8).eval()


    def make_inputs(batch: int = 2):
        BODY
        return {"input": torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))}
''')


@pytest.fixture(scope="module")
def zoo():
    spec = importlib.util.spec_from_file_location("zoo_gate_under_test", ZOO)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _src(path: Path, body: str = "pass") -> Path:
    path.mkdir()
    (path / "harness.py").write_text(HARNESS.replace("BODY", body))
    return path


SHAPES = [{"batch": 2}, {"batch": 3}]


def _run(zoo, jobs, *args, **kw) -> dict:
    return dict(zoo.run_variants(jobs, *args, **kw))


def test_parallel_compile_phases_are_timed_one_at_a_time(zoo, tmp_path):
    src, slow = _src(tmp_path / "src"), _src(tmp_path / "slow", "time.sleep(2)")  # the second's compile phase ends last
    out = _run(zoo, [("eager", src), ("plan", slow)], "cpu", SHAPES, steps=5, timeout=120, parallel=True)
    assert list(out) == ["eager", "plan"]
    for res in out.values():
        assert "error" not in res, res
        assert [row["shape"] for row in res["shapes"]] == SHAPES
        assert all(row["median_ms"] > 0 and row["first_call_s"] > 0 for row in res["shapes"])
        assert res["shapes"][0]["numerics_ok"] is True
        # each round's median per shape, in the order timed: one per round, the step's median among their range
        assert all(len(row["round_ms"]) == zoo.ROUNDS and min(row["round_ms"]) <= row["median_ms"] <= max(row["round_ms"])
                   for row in res["shapes"]), res["shapes"]
    a0 = out["eager"]["timing_window"][0]
    assert out["plan"]["compiled_at"] <= a0  # no step is timed while a compile phase runs
    _one_at_a_time(out)
    assert len(out["eager"]["timing_windows"]) == zoo.ROUNDS  # in rounds, interleaved
    assert out["eager"]["timing_windows"][0][1] <= out["plan"]["timing_windows"][0][0] <= out["eager"]["timing_windows"][1][0]
    assert out["plan"]["compiled_alongside"] == ["eager"]


def _one_at_a_time(out: dict) -> None:
    """No two processes' timing rounds overlap in time."""
    windows = sorted(w for res in out.values() for w in res["timing_windows"])
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:])), windows


def test_a_failed_compile_phase_is_reported_and_the_other_is_timed(zoo, tmp_path):
    bad = _src(tmp_path / "bad", 'if batch == 3:\n        raise ValueError("no such shape")')
    slow = _src(tmp_path / "slow", "time.sleep(60)")
    good = _src(tmp_path / "good")
    out = _run(zoo, [("eager", bad), ("whole", slow), ("plan", good)], "cpu", SHAPES, steps=3, timeout=45,
                           parallel=True)
    assert out["eager"]["error"].startswith("ValueError: no such shape")
    assert out["whole"]["error"] == "timeout after 45 s in the compile phase"
    assert "error" not in out["plan"] and len(out["plan"]["shapes"]) == 2


def test_serial_runs_each_process_after_the_last(zoo, tmp_path):
    src = _src(tmp_path / "src")
    out = _run(zoo, [("eager", src), ("plan", src)], "cpu", SHAPES, steps=3, timeout=120, parallel=False)
    assert out["eager"]["timing_window"][1] <= out["plan"]["timing_window"][0]
    assert "compiled_alongside" not in out["plan"]


BLOCKS = textwrap.dedent('''\
    import torch


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ff = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Dropout(0.0), torch.nn.Linear(8, 8)])

        def forward(self, x):
            for m in self.ff:
                x = m(x)
            return x


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        def forward(self, input):
            for b in self.blocks:
                input = b(input)
            return input


    def build_model():
        torch.manual_seed(0)
        return Net().eval()


    def make_inputs(batch: int = 2):
        return {"input": torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))}
''')


def test_per_block_compiles_the_repeated_block_not_its_leaf_layers(zoo, tmp_path):
    """Four Linear layers sit in ModuleLists beside two blocks: the per-block variant compiles the blocks."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(BLOCKS)
    out = _run(zoo, [("per-block", src)], "cpu", SHAPES, steps=2, timeout=300, parallel=True)
    assert out["per-block"]["note"] == "2 x Block", out["per-block"]


PLANNED = textwrap.dedent('''\
    import torch


    def _off_by_a_tenth(gm, example_inputs):  # a backend that changes the math: what numerics must catch
        def run(*args):
            return tuple(o * 1.1 if isinstance(o, torch.Tensor) else o for o in gm(*args))
        return run


    def build_model():  # a rewritten harness: what it builds, it compiles
        torch.manual_seed(0)
        return torch.compile(torch.nn.Linear(8, 8).eval(), backend=_off_by_a_tenth)


    def make_inputs(batch: int = 2):
        return {"input": torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))}
''')


def test_numerics_of_a_compiling_harness_are_judged_against_eager(zoo, tmp_path):
    """The plan's tree builds compiled models: its float32 reference and its eager yardstick must
    still run eager, or a wrong compile is judged against itself and passes."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(PLANNED)
    row = _run(zoo, [("plan", src)], "cpu", SHAPES, steps=5, timeout=300, parallel=True)["plan"]["shapes"][0]
    assert row["eager_rmse"] == 0.0 and row["rmse"] > 1e-3, row
    assert row["numerics_ok"] is False
    assert len(row["output_sha256"]) == 64
    assert row["blocked_ms"] > 0
    assert row["best_round_ms"] == pytest.approx(min(row["round_ms"]), abs=1e-4)  # round_ms is rounded


SLOW_STEPS = textwrap.dedent('''\
    import time
    import torch


    class Slow(torch.nn.Module):  # 20 ms a step: a timing window long enough to see a stray process in
        def forward(self, input):
            time.sleep(0.02)
            return input * 2


    def build_model():
        import atexit
        print('{"config": "a harness line that looks like JSON"}')
        atexit.register(print, "{ and one that does not parse, after the result")
        return Slow()


    def make_inputs(batch: int = 2):
        return {"input": torch.ones(batch, 8)}
''')

HEARTBEAT = textwrap.dedent('''\
    import time
    import torch


    def build_model():
        return torch.nn.Linear(8, 8)


    def make_inputs(batch: int = 2):
        while True:  # a compile phase that never ends, leaving a trace of when it ran
            with open(BEATS, "a") as f:
                f.write(f"{time.time()}\\n")
            time.sleep(0.1)
''')


def test_a_compile_phase_past_its_timeout_is_ended_before_anything_is_timed(zoo, tmp_path):
    """The hung process comes after the one timed: it must not run on during that timing window.
    (45 s: the good process's own compile phase, an interpreter importing torch, must fit it on a
    loaded 2-core CI host.)"""
    good, hung = tmp_path / "good", tmp_path / "hung"
    good.mkdir(), hung.mkdir()
    beats = tmp_path / "beats.txt"
    (good / "harness.py").write_text(SLOW_STEPS)
    (hung / "harness.py").write_text(HEARTBEAT.replace("BEATS", repr(str(beats))))
    out = _run(zoo, [("eager", good), ("whole", hung)], "cpu", SHAPES, steps=10, timeout=45, parallel=True)
    assert out["whole"]["error"] == "timeout after 45 s in the compile phase"
    t0, t1 = out["eager"]["timing_window"]
    during = [float(t) for t in beats.read_text().split() if t0 <= float(t) <= t1]
    assert t1 - t0 > 0.5 and during == [], (t1 - t0, during)


def test_harness_lines_that_look_like_json_are_not_taken_for_the_result(zoo, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SLOW_STEPS)
    res = _run(zoo, [("eager", src)], "cpu", SHAPES, steps=2, timeout=120, parallel=True)["eager"]
    assert res["variant"] == "eager" and "error" not in res and len(res["shapes"]) == 2, res


def _variant(steps: list[float], blocked: list[float], actions: list | None = None) -> dict:
    return {"shapes": [{"median_ms": m, "blocked_ms": b, "numerics_ok": True} for m, b in zip(steps, blocked)],
            "fallbacks": [], "actions": actions}


def test_a_variant_computing_the_plans_outputs_bit_for_bit_is_named_beside_the_verdicts(zoo):
    """BERT's part 14: the plan (per-block, fullgraph) and the per-block variant computed one output
    and timed 0.92x apart. The verdict stays on the figures (missed); the digest equality is reported
    beside it, and a variant with other bytes is not named."""
    def with_digest(v, digest):
        v["shapes"][0]["output_sha256"] = digest
        return v
    variants = {"eager": with_digest(_variant([8.93, 9.01], [8.96, 9.36]), "e"),
                "per-block": with_digest(_variant([7.56, 7.14], [7.37, 6.48]), "p"),
                "regions": with_digest(_variant([7.92, 8.56], [8.57, 7.11]), "r"),
                "plan": with_digest(_variant([8.35, 7.62], [7.61, 7.32], actions=[{"action": "compile"}]), "p")}
    v = zoo.verdicts(variants)
    assert v["fastest"] == "per-block" and v["plan_within_5pct_of_fastest"] is False
    assert v["plan_outputs_bitwise_equal_to"] == ["per-block"] and v["fastest_computes_the_plans_outputs"] is True
    assert "plan_outputs_bitwise_equal_to" not in v["on_blocked_ms"]
    variants["per-block"]["shapes"][0]["output_sha256"] = "other"
    assert "plan_outputs_bitwise_equal_to" not in zoo.verdicts(variants)
    variants["per-block"]["shapes"][0]["output_sha256"] = "p"
    assert "plan_outputs_bitwise_equal_to" not in zoo.verdicts(dict(variants, plan={"error": "timeout"}))


def test_the_bars_are_also_read_on_the_blocked_figures(zoo):
    """Mixtral's part 12 steps (the plan 0.72x whole on isolated calls) beside blocked figures that
    put them level: both verdicts are reported, the step's first."""
    variants = {"eager": _variant([14.99, 14.40], [14.0, 13.9]), "whole": _variant([5.95, 6.81], [5.8, 5.7]),
                "plan": _variant([8.95, 8.80], [5.8, 5.8], actions=[{"action": "compile"}])}
    v = zoo.verdicts(variants)
    assert v["fastest"] == "whole" and v["plan_within_5pct_of_fastest"] is False
    assert v["on_blocked_ms"]["plan_within_5pct_of_fastest"] is True
    assert round(v["on_blocked_ms"]["plan_speed_vs_fastest"], 3) == round(5.75 / 5.8, 3)
    failed = {"shapes": [{"median_ms": 9.0, "numerics_ok": True}], "fallbacks": [], "error": "RuntimeError: at shape 2"}
    assert "on_blocked_ms" in zoo.verdicts(dict(variants, **{"per-block": failed}))  # a failed variant is out of both
    assert "on_blocked_ms" not in zoo.verdicts({})


def _rounds(*per_shape: list[float], actions: list | None = None) -> dict:
    """A variant whose shapes carry their round medians (ms), as the timed process writes them."""
    import statistics
    return {"shapes": [{"median_ms": statistics.median(r), "blocked_ms": statistics.median(r), "round_ms": r,
                        "best_round_ms": min(r), "numerics_ok": True} for r in per_shape],
            "fallbacks": [], "actions": actions}


def test_the_bars_are_also_read_on_each_variants_best_round(zoo):
    """ViT's part 18 (H100): every process timed 11-12 ms a step in rounds 1-5 and ~5 ms after, the
    plan (no actions, eager's program) earlier in its slow phase than eager's first process. On the
    median over rounds the plan is 1.4x eager's first process (whole 1.19x); on each one's best round
    they are within 6%. Both verdicts are reported, the median's first; a slower program stays slower."""
    eager = _rounds([5.4, 11.9, 12.0, 12.1, 11.8, 5.5, 5.3, 5.0], [7.7, 12.4, 11.8, 11.7, 11.3, 5.8, 5.4, 5.0])
    whole = _rounds([7.1, 9.1, 9.0, 8.8, 8.8, 6.9, 6.9, 6.9], [6.1, 8.8, 8.5, 8.8, 8.9, 4.3, 4.8, 4.0])
    plan = _rounds([10.9, 11.4, 11.4, 5.3, 6.2, 5.0, 5.6, 4.8], [10.7, 10.9, 11.4, 4.7, 6.1, 5.0, 5.1, 5.0],
                   actions=[])
    v = zoo.verdicts({"eager": eager, "whole": whole, "plan": plan})
    assert v["fastest"] == "plan" and v["best_vs_eager"] > 1.4  # the median over rounds: the slow phase's figure
    assert v["not_change_nothing_when_1_2x"] is True  # no variant but the plan itself is 1.2x eager
    best = v["on_best_round"]
    assert best["fastest"] == "plan" and round(best["best_vs_eager"], 3) == round((5.0 + 5.0) / (4.8 + 4.7), 3)
    assert best["plan_within_5pct_of_fastest"] is True and best["not_change_nothing_when_1_2x"] is True
    slower = _rounds([6.0] * 8, [6.0] * 8, actions=[{"action": "compile"}])
    assert zoo.verdicts({"eager": eager, "plan": slower})["on_best_round"]["plan_not_slower_than_eager"] is False
    no_rounds = {k: _variant([5.0, 5.0], [5.0, 5.0]) for k in ("eager", "plan")}
    assert "on_best_round" not in zoo.verdicts(no_rounds)  # figures without rounds: not read


def test_a_plan_of_no_actions_timed_faster_than_eager_is_not_a_variant_that_eager_should_have_become(zoo):
    """ViT's part 18: the plan (no actions: eager's program) timed 1.56x eager's first process on the
    median over rounds, and the bar "never change nothing where a variant is >= 1.2x faster" failed
    on the plan itself. It reads the other variants: whole at 1.08x eager passes it; at 1.3x it fails."""
    eager, plan = _variant([7.0, 7.0], [7.0, 7.0]), _variant([5.0, 5.0], [5.0, 5.0], actions=[])
    v = zoo.verdicts({"eager": eager, "whole": _variant([6.5, 6.5], [6.5, 6.5]), "plan": plan})
    assert v["fastest"] == "plan" and v["best_vs_eager"] == 7.0 / 5.0
    assert v["not_change_nothing_when_1_2x"] is True
    v = zoo.verdicts({"eager": eager, "whole": _variant([5.3, 5.3], [5.3, 5.3]), "plan": plan})
    assert v["not_change_nothing_when_1_2x"] is False


@pytest.mark.parametrize("n", [2, 3, 6, 10])
def test_the_rounds_rotate_so_no_process_is_timed_twice_back_to_back(zoo, n):
    """T5's part 17: rounds alternately forward and reversed gave the process at an end two slots in a
    row, and the plan took both slow ones of a host phase. Rotated, each process takes every place over
    n rounds, and (with three or more) the one timed last in a round is never the next one's first."""
    procs = list(range(n))
    orders = [zoo.round_order(procs, r) for r in range(zoo.ROUNDS)]
    assert all(sorted(o) == procs for o in orders)
    assert {o[0] for o in orders[:n]} == set(procs[:zoo.ROUNDS])
    if n >= 3:
        assert all(a[-1] != b[0] for a, b in zip(orders, orders[1:]))
    assert zoo.round_order([], 3) == []


def test_the_timed_thread_is_pinned_to_the_core_it_is_given(zoo, tmp_path):
    """Pinned as the engine's timed children are (one shared core); the core is in the result."""
    import os

    src = _src(tmp_path / "src")
    core = max(os.sched_getaffinity(0))
    out = _run(zoo, [("eager", src), ("plan", src)], "cpu", SHAPES, steps=2, timeout=120, parallel=True, core=core)
    assert [out[v].get("pinned_core") for v in ("eager", "plan")] == [core, core], out
    assert zoo.timing_core("off") is None
    picked = zoo.timing_core("shared")  # the median core of this host's, None with fewer than 3 cores
    assert picked is None if len(os.sched_getaffinity(0)) < 3 else picked in os.sched_getaffinity(0)


def test_the_timing_core_is_chosen_once_every_process_has_compiled(zoo, tmp_path):
    """The core is picked (``choose_core``) after every compile phase, right before the timing, and
    every timed process is pinned to that one core: core speeds read at the call's start are minutes
    old by the timing and were read before any compile ran."""
    import os

    src = _src(tmp_path / "src")
    core = max(os.sched_getaffinity(0))
    ready_when_chosen: list[bool] = []
    procs: list = []
    real = zoo.VariantProcess

    class Recorded(real):  # the processes run_variants starts, to read their state when the core is picked
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            procs.append(self)

    def choose() -> int:
        ready_when_chosen.append(len(procs) == 2 and all(p.compile_s is not None for p in procs))
        return core

    zoo.VariantProcess = Recorded
    try:
        out = _run(zoo, [("eager", src), ("plan", src)], "cpu", SHAPES, steps=2, timeout=120, parallel=True,
                   core=None, choose_core=choose)
    finally:
        zoo.VariantProcess = real
    assert ready_when_chosen == [True]
    assert [out[v].get("pinned_core") for v in ("eager", "plan")] == [core, core], out


def test_processes_started_early_are_timed_with_the_rest_one_at_a_time(zoo, tmp_path):
    """--overlap-diagnose: a variant started before diagnose is timed first, alone, then the plan;
    each names what it compiled beside: the early one diagnose, the plan (started once the early one
    had compiled, as after a diagnose) nothing."""
    import time

    src = _src(tmp_path / "src")
    early = [zoo.VariantProcess(src, "eager", "cpu", SHAPES, 3, 120)]
    deadline = time.monotonic() + 100
    while early[0].compile_s is None and time.monotonic() < deadline:  # diagnose would run here
        time.sleep(0.2)
    out = _run(zoo, [("plan", src)], "cpu", SHAPES, steps=3, timeout=120, parallel=True, early=early)
    assert list(out) == ["eager", "plan"] and all("error" not in r for r in out.values()), out
    _one_at_a_time(out)
    assert out["eager"]["compiled_alongside"] == ["diagnose"] and out["plan"]["compiled_alongside"] == [], out


def test_an_overlapped_diagnose_is_flagged_and_not_judged_on_its_seconds(zoo):
    v = zoo.verdicts({}, {"ladder_search_s": 100.0, "diagnose_exit": 0, "overlapped": True})
    assert v["ladder_search_s"] == 100.0 and v["ladder_search_within_3_min"] is None and v["plan_chosen_beside_compiles"]
    assert zoo.verdicts({}, {"ladder_search_s": 100.0, "diagnose_exit": 0})["ladder_search_within_3_min"] is True
    failed = zoo.verdicts({}, {"ladder_search_s": 330.0, "diagnose_exit": 124, "overlapped": True})
    assert failed["ladder_search_within_3_min"] is False  # a diagnose that did not finish has not met it, overlapped or not


def test_a_replicated_variant_is_reported_apart_and_never_judged(zoo):
    """--replicate: 'plan#2' is a second process of the plan's compile. Its figures give the spread
    between two processes; a faster second process does not move the verdicts."""
    variants = {"eager": _variant([14.99, 14.40], [14.0, 13.9]), "whole": _variant([5.95, 6.81], [5.8, 5.7]),
                "plan": _variant([8.95, 8.80], [5.8, 5.8], actions=[{"action": "compile"}]),
                "plan#2": _variant([6.0, 6.1], [5.9, 5.8], actions=[{"action": "compile"}])}
    v = zoo.verdicts(variants)
    assert v["fastest"] == "whole" and "plan#2" not in v["passing"]
    assert v["plan_within_5pct_of_fastest"] is False
    rep = v["replicates"]["plan#2"]
    assert rep["median_ms"] == [[8.95, 6.0], [8.8, 6.1]]
    assert rep["median_ms_spread"] == round((8.95 - 6.0) / 6.0, 4)
    assert rep["blocked_ms_spread"] == round(0.1 / 5.8, 4)
    failed = zoo.verdicts(dict(variants, **{"whole#2": {"variant": "whole#2", "error": "timeout"}}))
    assert failed["replicates"]["whole#2"] == {"error": "timeout"}


def test_where_every_variant_ran_twice_the_bars_on_each_faster_process_are_reported_beside(zoo):
    """The engine judges a variant timed twice by its faster process; the zoo reports the same bars
    on that figure beside its one-process verdicts, only where every passing variant ran twice."""
    variants = {"eager": _variant([14.99, 14.40], [14.0, 13.9]), "whole": _variant([5.95, 6.81], [5.8, 5.7]),
                "plan": _variant([8.95, 8.80], [5.8, 5.8], actions=[{"action": "compile"}]),
                "plan#2": _variant([6.0, 6.1], [5.9, 5.8], actions=[{"action": "compile"}])}
    assert "on_faster_process" not in zoo.verdicts(variants)  # whole and eager ran once: no such bar
    both = dict(variants, **{"eager#2": _variant([15.2, 14.1], [14.0, 13.9]), "whole#2": _variant([6.2, 6.5], [5.8, 5.7])})
    v = zoo.verdicts(both)
    assert v["plan_within_5pct_of_fastest"] is False  # the first processes' verdict stands as measured
    faster = v["on_faster_process"]
    assert faster["fastest"] == "plan" and faster["plan_speed_vs_fastest"] == 1.0  # 6.05 against whole's 6.2 (5.95, 6.5)
    assert faster["plan_not_slower_than_eager"] is True


def test_a_plan_of_no_actions_is_judged_on_every_process_of_eagers_program_beside(zoo):
    """A plan of no actions runs the source as it is: its process and eager's are one program, and
    the zoo reports the bars on the median over all of them beside the one-process verdicts (which
    stand as measured); a plan with actions, or one diagnose never wrote, gets no such bar."""
    variants = {"eager": _variant([4.37, 4.26], [4.3, 4.2], actions=None), "eager#2": _variant([4.78, 4.70], [4.8, 4.6]),
                "per-block": _variant([4.66, 4.62], [4.6, 4.6]), "plan": _variant([4.66, 4.58], [4.6, 4.5], actions=[]),
                "plan#2": _variant([4.61, 4.56], [4.5, 4.5], actions=[])}
    v = zoo.verdicts(variants)
    assert (v["fastest"], v["plan_not_slower_than_eager"]) == ("eager", False)  # one process each, as measured
    pooled = v["on_one_program"]
    assert pooled["plan_speed_vs_fastest"] == 1.0 and pooled["plan_not_slower_than_eager"] is True
    # the median of 4.37, 4.78, 4.66, 4.61 and of 4.26, 4.70, 4.58, 4.56: 4.602 against per-block's 4.64
    assert pooled["fastest"] in ("eager", "plan") and pooled["passing"][-1] == "per-block"
    acted = dict(variants, plan=_variant([4.66, 4.58], [4.6, 4.5], actions=[{"action": "compile"}]))
    assert "on_one_program" not in zoo.verdicts(acted)
    unwritten = {k: v for k, v in variants.items() if not k.startswith("plan")} | {"plan": _variant([4.66, 4.58], [4.6, 4.5])}
    assert "on_one_program" not in zoo.verdicts(unwritten)


def test_a_replica_process_compiles_as_its_variant_does(zoo, tmp_path):
    src = _src(tmp_path / "src")
    out = _run(zoo, [("whole", src), ("whole#2", src)], "cpu", SHAPES[:1], steps=3, timeout=120, parallel=True)
    assert "error" not in out["whole#2"], out["whole#2"]
    assert out["whole#2"]["variant"] == "whole#2" and out["whole#2"]["unique_graphs"] >= 1
    # no Triton kernel on the CPU: nothing whose choice the parallel compile phases could move
    assert out["whole#2"]["autotune"] == {"kernels": 0, "with_configs_to_benchmark": 0}


def test_the_autotune_census_counts_configs_when_a_kernel_is_made(zoo):
    """Inductor clears CachingAutotuner.configs once it has compiled them, before any launch, so
    the census counts at construction (a stand-in class with CachingAutotuner's signature)."""
    ns: dict = {}
    exec(zoo.AUTOTUNE_CENSUS, ns)

    class Kernel:
        def __init__(self, fn, triton_meta, configs, save_cache_hook, *rest, **kw):
            self.configs = None  # what Inductor's precompile leaves

    census = ns["count_configs"](Kernel)
    Kernel(None, {}, [1], None)
    Kernel(None, {}, [1, 2, 3], None)
    Kernel(fn=None, triton_meta={}, configs=[1, 2], save_cache_hook=None)
    assert census == {"kernels": 3, "with_configs_to_benchmark": 2}


OWN = textwrap.dedent('''\
    import torch


    def build_model():
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 8).eval()
        return torch.compile(model, backend="eager")


    def make_inputs(batch: int = 2):
        return {"input": torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))}
''')


def test_own_compile_harness_runs_as_is_and_the_others_take_its_compile_off(zoo, tmp_path):
    """--own-compile: ``as-is`` keeps the program's own compile (Dynamo's counters see its graphs);
    ``eager`` runs the module it wraps (no graph), so the yardstick is the program without a compile."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(OWN)
    out = _run(zoo, [("as-is", src), ("eager", src)], "cpu", SHAPES, steps=3, timeout=300, parallel=True)
    assert "error" not in out["as-is"] and "error" not in out["eager"], out
    assert out["as-is"]["unique_graphs"] >= 1
    assert out["eager"]["unique_graphs"] == 0
    assert out["eager"]["note"] == "the program's own compile taken off"
    assert out["eager"]["shapes"][0]["numerics_ok"] is True


def test_own_compile_harness_text_compiles_what_it_builds(zoo):
    text = zoo.harness_text("llama", smoke=True, own_compile=True)
    compile(text, "harness.py", "exec")
    assert "    model.eval()\n    return torch.compile(model)\n" in text
    assert "return torch.compile" not in zoo.harness_text("llama", smoke=True)
