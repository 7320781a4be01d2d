"""The decision rule on the candidates the H200 measured (benchmarks/results/, runs 29-30)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_three_llama_runs_on_one_rule_choose_one_plan(benchmark_script):
    """Runs 29 and 30 (HF Llama 16x2048, 8x512 + 8x384, two processes per plan): then the choice
    was per-block, nested+whole, per-block, nested+whole, as the rounds' interval was wide or not;
    the rule that lets the measured band decide chooses nested+whole in all four, and still leaves
    GPT-2's whole+cudagraphs+bucket as it was."""
    lines = []
    for run in ("h200-run29", "h200-run30"):
        lines += benchmark_script("redecide").redecide(ROOT / "benchmarks" / "results" / run / "diagnose_hf.json")
    llama = [r for r in lines if r["model"] == "llama"]
    assert [r["then"] for r in llama] == ["per-block", "nested+whole", "per-block", "nested+whole"], llama
    assert [r["now"] for r in llama] == ["nested+whole"] * 4, llama
    assert all(r["band"].endswith("measured") for r in llama)
    gpt2 = [r for r in lines if r["model"] == "gpt2"]
    assert gpt2 and all(r["then"] == r["now"] == "whole+cudagraphs+bucket" for r in gpt2), gpt2


def test_a_run_timed_in_one_process_per_plan_is_marked(benchmark_script):
    lines = benchmark_script("redecide").redecide(ROOT / "benchmarks" / "results" / "h200-run27" / "llama_throughput_c.json")
    assert lines and lines[0]["band"].startswith("assumed"), lines
