"""benchmarks/library_models.py --part genpaired: the plan, transformers' static-cache
path and eager timed in the same processes on one set of weights, and the paired statistics over
processes. The end-to-end test is the CPU smoke (TINY config, 2 processes, ~10-15 s on 2 cores);
on CPU transformers does not auto-compile the static cache, so no compile is exercised here.
Manual form: ``OUT=/tmp/o python benchmarks/library_models.py --part genpaired --smoke``."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("library_models_bench", ROOT / "benchmarks" / "library_models.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_t_quantiles_table_and_expansion():
    assert bench.t975(1) == 12.706 and bench.t975(7) == 2.365 and bench.t975(30) == 2.042
    assert abs(bench.t975(40) - 2.021) < 1e-3 and abs(bench.t975(120) - 1.980) < 1e-3


def test_geomean_interval_is_t_over_log_ratios():
    stat = bench.geomean_interval([1.0, 1.0, 1.0])
    assert stat["geomean"] == 1.0 and stat["ci95"] == [1.0, 1.0]
    ratios = [0.98, 1.01, 1.03, 0.99]
    stat = bench.geomean_interval(ratios)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    assert math.isclose(stat["geomean"], math.exp(mean))
    assert math.isclose(stat["ci95"][1], math.exp(mean + 3.182 * sd / 2))
    assert "ci95" not in bench.geomean_interval([1.1]) and bench.geomean_interval([]) == {"n": 0}


def test_verdict_words():
    v = bench.ratio_verdict
    assert v({"n": 1}, 0.02).startswith("not settled")
    assert v({"n": 8, "ci95": [0.97, 0.995]}, 0.02).startswith("shown: <= 1.0x")
    assert v({"n": 8, "ci95": [1.01, 1.05]}, 0.02).startswith("not met")
    assert "(within the 2% margin)" in v({"n": 8, "ci95": [0.99, 1.015]}, 0.02)
    assert "(not within the 2% margin)" in v({"n": 8, "ci95": [0.99, 1.03]}, 0.02)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_cpu_smoke_end_to_end(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "library_models.py"), "--part", "genpaired", "--smoke"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "library_models_genpaired.json").read_text())
    assert "error" not in res, res.get("error")
    assert res["rewrite_rc"] == 0 and "_stackpart/library.py" in res["rewrite_diff_files"]
    assert res["procs_ran"] == 2 and not res["process_errors"]
    assert [p["order"][0] for p in res["processes"]] == ["plan", "static_cache"]  # who goes first alternates
    for p in res["processes"]:
        assert set(p["ms_per_token"]) == {"plan", "static_cache", "eager"}
        assert p["calls_per_arm"] == {"plan": 6, "static_cache": 6, "eager": 6}  # 3 rounds x 2 repeats
        assert p["site_applied"] == ["Generate"] and p["new_tokens"] == [8] and p["round_ratio_plan_static"] > 0
        assert len({r[0] for r in p["round_orders"]}) == 3  # each arm leads one round of three
    assert res["weights_identical"] and res["plan_sets_static_cache"] and res["static_arms_same_tokens"]
    assert res["plan_over_static"]["n"] == 2 and len(res["plan_over_static"]["ci95"]) == 2
    assert res["plan_over_static_round_paired"]["n"] == 2
    assert res["recompiled_in_timed_rounds"] == []
    md = (tmp_path / "library_models_genpaired.md").read_text()
    assert "| process | built/warmed first |" in md and "plan/static, geometric mean over processes" in md
