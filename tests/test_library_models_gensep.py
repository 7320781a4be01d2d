"""benchmarks/library_models.py --part gensep: one compiled arm per process (the plan or
transformers' static cache, alternating) plus eager as the in-process yardstick, and plan/static as
the ratio of the two groups' geometric means of arm/eager with a Welch interval. The end-to-end test
is the CPU smoke with 4 processes (TINY config, ~26 s on 2 cores) so that every schedule slot and
the interval are exercised; on CPU transformers does not auto-compile the static cache, so no
compile or CUDA graph is exercised here. Manual form:
``OUT=/tmp/o python benchmarks/library_models.py --part gensep --smoke``."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("library_models_bench", ROOT / "benchmarks" / "library_models.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_schedule_alternates_the_arm_and_who_goes_first():
    assert [bench.gensep_schedule(i) for i in range(5)] == [
        ("plan", 0), ("static_cache", 0), ("plan", 1), ("static_cache", 1), ("plan", 0)]


def test_welch_log_ratio_by_hand():
    xs, ys = [0.30, 0.28, 0.29, 0.31], [0.27, 0.29, 0.33]
    a, b = [math.log(x) for x in xs], [math.log(y) for y in ys]
    va, vb = statistics.variance(a) / 4, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    d, se = statistics.fmean(a) - statistics.fmean(b), math.sqrt(va + vb)
    stat = bench.welch_log_ratio(xs, ys)
    assert stat["n_a"] == 4 and stat["n_b"] == 3 and math.isclose(stat["df"], df)
    assert math.isclose(stat["ratio"], math.exp(d)) and math.isclose(stat["se"], se)
    half = bench.t975(math.floor(df)) * se  # df rounded down: the wider, conservative quantile
    assert math.isclose(stat["ci95"][0], math.exp(d - half)) and math.isclose(stat["ci95"][1], math.exp(d + half))


def test_welch_df_equal_groups_and_edges():
    # equal sizes and equal variances: Welch-Satterthwaite gives the pooled 2(n-1)
    stat = bench.welch_log_ratio([1.0, 2.0, 4.0], [2.0, 4.0, 8.0])
    assert math.isclose(stat["df"], 4.0) and math.isclose(stat["ratio"], 0.5)
    flat = bench.welch_log_ratio([1.1, 1.1], [1.0, 1.0])  # no spread: the interval is the point
    assert flat["df"] == 2.0 and math.isclose(flat["ci95"][0], 1.1) and math.isclose(flat["ci95"][1], 1.1)
    one = bench.welch_log_ratio([1.1], [1.0, 1.05])  # one plan process: a point, no interval
    assert "ci95" not in one and math.isclose(one["ratio"], 1.1 / math.sqrt(1.05))
    assert bench.welch_log_ratio([], [1.0]) == {"n_a": 0, "n_b": 1}
    assert bench.ratio_verdict(one, 0.02, "fewer than 2 processes of each arm") == "not settled: fewer than 2 processes of each arm"
    assert bench.ratio_verdict({"n": 1}, 0.02) == "not settled: fewer than 2 processes"  # genpaired's words unchanged


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_cpu_smoke_end_to_end(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "library_models.py"), "--part", "gensep", "--smoke",
                           "--procs", "4"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "library_models_gensep.json").read_text())
    assert "error" not in res, res.get("error")
    assert res["rewrite_rc"] == 0 and "_stackpart/library.py" in res["rewrite_diff_files"]
    assert res["procs_ran"] == 4 and not res["process_errors"]
    ps = res["processes"]
    assert [p["arm"] for p in ps] == ["plan", "static_cache", "plan", "static_cache"]
    assert [p["order"][0] for p in ps] == ["plan", "static_cache", "eager", "eager"]  # who goes first alternates too
    for p in ps:  # exactly one compiled arm plus eager in every process
        arms = {p["arm"], "eager"}
        assert set(p["order"]) == arms and set(p["ms_per_token"]) == arms and set(p["warm"]) == arms
        assert p["calls_per_arm"] == {p["arm"]: 6, "eager": 6}  # 3 rounds x 2 repeats
        assert all(set(r) == arms for r in p["round_orders"]) and len({r[0] for r in p["round_orders"]}) == 2
        assert p["cache_implementation"] == {p["arm"]: "static", "eager": None}
        assert p["site_applied"] == (["Generate"] if p["arm"] == "plan" else None)  # the static process never imports the plan
        assert p["new_tokens"] == [8] and p["same_tokens_as_eager"] == {p["arm"]: True}
        assert math.isclose(p["arm_over_eager"], p["ms_per_token"][p["arm"]] / p["ms_per_token"]["eager"])
        assert p["timed_recordings"] == 0 and not p["recompiled_in_timed_rounds"]
    st = res["plan_over_static"]
    assert st["n_a"] == 2 and st["n_b"] == 2 and st["ci95"][0] <= st["ratio"] <= st["ci95"][1]
    assert math.isclose(st["ratio"], res["plan_over_eager"]["geomean"] / res["static_over_eager"]["geomean"])
    assert res["verdict_plan_vs_static"] == bench.ratio_verdict(st, res["margin"])
    assert res["raw_plan_over_static_ms"] > 0 and set(res["ms_per_token"]) == {"plan", "static_cache", "eager"}
    assert res["timed_recordings"] == {"plan": {"0": 0, "2": 0}, "static_cache": {"1": 0, "3": 0}}
    assert res["no_recordings_in_timed_rounds"] and res["recompiled_in_timed_rounds"] == []
    assert res["compiled_tokens_same_as_eager"] == {"0": True, "1": True, "2": True, "3": True}
    assert res["weights_identical"] and res["arms_set_static_cache"] == {"plan": True, "static_cache": True}
    md = (tmp_path / "library_models_gensep.md").read_text()
    assert "| process | compiled arm | built/warmed first |" in md and "95% Welch interval" in md
