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


def test_a_run_with_contended_steps_is_redecided_on_both_host_conditions(tmp_path, benchmark_script):
    """Run 38's figures (from its report.json; its digest lacked them): per-block 10.68 ms quiet but
    15.48 contended, nested+whole 11.02 and 11.48: today's rule keeps nested+whole, as the run did."""
    import json

    cands = [{"candidate": n, "step_ms": q, "contended_step_ms": c, "compile_s_per_start": s, "numerics": "ok", "status": "x"}
             for n, q, c, s in (("per-block", 10.676, 15.481, 9.0), ("nested+whole", 11.022, 11.482, 36.8),
                                ("whole", 11.770, 11.672, 49.3), ("as-is", 17.053, 23.734, None))]
    cands[-1]["numerics"] = "reference"
    payload = {"runs": 100_000_000, "restarts": 1, "rows": [{"model": "llama", "search": {
        "chosen": "nested+whole", "candidates": cands, "noise": {"share": 0.015, "median_abs_log": 0.0062, "pairs": 10,
                                                               "contended_share": 0.087}}}]}
    (tmp_path / "diagnose_hf.json").write_text(json.dumps(payload))
    line = benchmark_script("redecide").redecide(tmp_path / "diagnose_hf.json")[0]
    assert line["then"] == line["now"] == "nested+whole", line
    for c in cands:
        del c["contended_step_ms"]
    (tmp_path / "diagnose_hf.json").write_text(json.dumps(payload))
    assert benchmark_script("redecide").redecide(tmp_path / "diagnose_hf.json")[0]["now"] == "per-block"


def test_a_diagnose_report_is_read_and_bert_keeps_the_program_as_it_is(benchmark_script):
    """Run 69's report.json (the zoo's BERT): the search chose per-block+mark_dynamic, whose own
    validation report failed the gate with the host core contended; today's rule keeps as-is."""
    lines = benchmark_script("redecide").redecide(ROOT / "benchmarks" / "results" / "h200-run69" / "reports" / "bert" / "report.json")
    assert [(r["model"], r["run"], r["then"], r["now"]) for r in lines] == [("bert", "h200-run69", "per-block+mark_dynamic", "as-is")]
