"""Interval arithmetic and the per-step breakdown on synthetic traces whose answers are known
by construction: exposed communication, overlap, collective-aligned gaps vs host stalls (with
file:line), nested ops, gloo's worker threads, GPU streams; then merging ranks (stragglers, the
verdict) and the plan entries a collective-bound step gets."""

from __future__ import annotations

import pytest

from rewriter.distributed import intervals as iv
from rewriter.distributed.advise import suggest
from rewriter.distributed.findings import merge
from rewriter.distributed.report import markdown, summary_lines
from rewriter.distributed.trace import analyze_trace
from rewriter.plan import parse_plan


def test_union_merges_overlapping_and_touching() -> None:
    assert iv.union([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0, 4), (5, 7)]


def test_subtract_and_intersect_partition_the_interval() -> None:
    a = [(0, 10), (20, 30)]
    b = [(2, 4), (8, 22), (25, 26), (40, 50)]
    assert iv.subtract(a, b) == [(0, 2), (4, 8), (22, 25), (26, 30)]
    assert iv.intersect(a, b) == [(2, 4), (8, 10), (20, 22), (25, 26)]
    assert iv.length(iv.subtract(a, b)) + iv.length(iv.intersect(a, b)) == iv.length(a)
    assert iv.subtract(a, []) == a and iv.subtract([], b) == [] and iv.intersect(a, []) == []


def test_clip() -> None:
    assert iv.clip([(0, 5), (8, 12)], (3, 10)) == [(3, 5), (8, 10)]


def X(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def step(n: int, ts: float, dur: float) -> dict:
    return X(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def cpu_trace(rank: int = 0, shift: float = 0.0, compute_scale: float = 1.0) -> dict:
    """One gloo step [0, 1000): compute [0, 400*s) and [600, 700); an all-reduce on gloo's worker
    thread [300, 900); a c10d op nested in compute; gloo's own copies; a Python stall at the end."""
    s = compute_scale
    return {
        "distributedInfo": {"rank": rank, "backend": "gloo"},
        "traceEvents": [
            step(3, shift, 1000),
            X("autograd::engine::evaluate_function: MmBackward0", shift, 400 * s),
            X("aten::mm", shift + 10, 80),
            X("c10d::allreduce_", shift + 120, 60),  # the enqueue, nested in compute: not compute
            X("aten::add_", shift + 600, 100),
            X("aten::zero_", shift + 900, 5),
            X("gloo:all_reduce", shift + 300, 600, tid=2, cat="user_annotation"),
            X("aten::copy_", shift + 850, 40, tid=2),  # gloo's copy inside its range: not compute
            X("Optimizer.step#SGD.step", shift + 700, 250, cat="user_annotation"),  # a range, not work
            X("harness.py(12): forward", shift + 905, 90, cat="python_function"),
            X("torch/nn/modules/module.py(1750): _call_impl", shift + 900, 99, cat="python_function"),
        ],
    }


def test_cpu_step_breakdown() -> None:
    (s,) = analyze_trace(cpu_trace()).steps
    assert s.step == 3 and s.step_us == 1000
    # compute = [0,120) + [180,400) + [600,700) + [900,905): the nested c10d op is cut out
    assert s.compute_us == pytest.approx(120 + 220 + 100 + 5)
    # communication = gloo [300,900) U c10d [120,180)
    assert s.comm_us == pytest.approx(600 + 60)
    # exposed = comm - compute = [120,180) + [400,600) + [700,900)
    assert s.exposed_comm_us == pytest.approx(60 + 200 + 200)
    kt = s.by_kind["all_reduce"]
    assert kt.count == 1  # the gloo range, not also its c10d enqueue
    assert kt.overlap_share == pytest.approx(1 - 460 / 660)
    kinds = [(g.offset_us, g.dur_us, g.kind, g.collective) for g in s.gaps]
    assert kinds == [
        (120, 60, "collective", "all_reduce"),
        (400, 200, "collective", "all_reduce"),
        (700, 200, "collective", "all_reduce"),
        (905, 95, "host", None),
    ]
    assert s.gaps[-1].where == "harness.py:12 (forward)"  # the user frame, not torch's
    assert s.host_stall_us == 95 and s.collective_gap_us == 460


def test_short_gaps_are_ignored() -> None:
    (s,) = analyze_trace(cpu_trace(), min_gap_us=150).steps
    assert [g.dur_us for g in s.gaps] == [200, 200]  # not the 60 and 95 µs ones


def test_gpu_trace_uses_kernels_and_attributes_device_idle_to_the_host_call() -> None:
    trace = {"traceEvents": [
        step(0, 0, 1000),
        X("aten::mm", 0, 900),  # host ops are ignored on a device timeline
        X("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 300, tid=7, cat="kernel"),
        X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 200, 400, tid=20, cat="kernel"),
        X("Memcpy DtoD (Device -> Device)", 700, 100, tid=7, cat="gpu_memcpy"),
        X("train.py(40): step", 550, 300, cat="python_function"),
        X("train.py(44): loss_value", 590, 250, cat="python_function"),
    ]}
    rt = analyze_trace(trace, rank=1)
    assert rt.rank == 1 and rt.timeline == "device"
    (s,) = rt.steps
    assert s.compute_us == 400 and s.comm_us == 400 and s.exposed_comm_us == 300
    assert s.by_kind["all_reduce"].count == 1
    # [300, 700): the all-reduce covers 300 of 400 µs; [800, 1000): nothing runs on the device
    assert [(g.offset_us, g.dur_us, g.kind) for g in s.gaps] == [(300, 400, "collective"), (800, 200, "host")]
    assert s.gaps[1].where == "train.py:44 (loss_value)"  # the host call in flight at the gap's start
    assert rt.names == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL": "all_reduce"}


def test_trace_without_events_is_an_error() -> None:
    with pytest.raises(ValueError, match="no complete events"):
        analyze_trace({"traceEvents": []})


def _records(wrap: str = "ddp", grad_mb: float = 64, largest_mb: float = 4, settings: dict | None = None) -> dict:
    rec = {"backend": "gloo", "wrap": wrap, "mode": "training", "settings": settings or {},
           "grad_bytes": int(grad_mb * 2**20), "largest_grad_bytes": int(largest_mb * 2**20), "step_s": [0.001]}
    return {0: rec, 1: rec}


def test_merge_verdict_uses_the_rank_that_waits_least_and_flags_stragglers() -> None:
    # rank 1 computes 3x longer in its first phase: it is the straggler; rank 0's extra wait
    # shows as exposed communication on rank 0 only
    fast = analyze_trace(cpu_trace(rank=0))
    slow = analyze_trace(cpu_trace(rank=1, compute_scale=1.0))
    f = merge([slow, fast], _records(), collective_bound_share=0.25)
    assert [r.rank for r in f.ranks] == [0, 1]
    assert f.exposed_share == pytest.approx(0.46)
    assert f.collective_bound and f.verdict == "collective-bound"
    assert f.dominant is not None and f.dominant.kind == "all_reduce"
    assert f.dominant.share_of_step == pytest.approx(0.66)
    assert f.stragglers == []
    g = merge([fast, analyze_trace(cpu_trace(rank=1, compute_scale=2.0))], _records(), straggler_share=0.10)
    assert [s.rank for s in g.stragglers] == [1]
    assert g.stragglers[0].excess_share > 0.10
    assert not merge([fast, slow], _records(), collective_bound_share=0.5).collective_bound


def test_suggestions_are_valid_plan_entries_with_evidence() -> None:
    f = merge([analyze_trace(cpu_trace(rank=r)) for r in (0, 1)], _records(grad_mb=64, largest_mb=4))
    entries = suggest(f, "harness.py::build_model")
    settings = [e["settings"] for e in entries]
    # one call, little overlap, 64 MB in 25 MB buckets of small parameters -> smaller buckets;
    # communication (660 us) > compute (440 us) -> accumulate ceil(660/440) = 2 micro-batches
    assert settings == [{"bucket_cap_mb": 8.0}, {"gradient_accumulation": 2}]
    assert all("all_reduce is 66% of the step" in e["why"] for e in entries)
    import yaml

    plan = parse_plan(yaml.safe_dump({"version": 1, "actions": entries}))
    assert [a.action for a in plan.plan.actions] == ["distributed", "distributed"]


def test_no_bucket_advice_when_one_gradient_fills_a_bucket() -> None:
    f = merge([analyze_trace(cpu_trace(rank=r)) for r in (0, 1)], _records(grad_mb=64, largest_mb=64))
    assert [e["settings"] for e in suggest(f, "h.py::m")] == [{"gradient_accumulation": 2}]


def test_fsdp2_all_gather_advice() -> None:
    trace = cpu_trace()
    renames = {"gloo:all_reduce": "gloo:all_gather", "c10d::allreduce_": "c10d::_allgather_base_"}
    for e in trace["traceEvents"]:
        e["name"] = renames.get(e["name"], e["name"])
    f = merge([analyze_trace(trace)], {0: _records(wrap="fsdp2")[0]})
    assert [e["settings"] for e in suggest(f, "h.py::m")] == [
        {"reshard_after_forward": False}, {"gradient_accumulation": 2}, {"parallelism": "ddp"}]
    f.settings = {"reshard_after_forward": False}
    assert {"forward_prefetch": 2} in [e["settings"] for e in suggest(f, "h.py::m")]


def test_not_collective_bound_gets_no_entries_and_a_report() -> None:
    f = merge([analyze_trace(cpu_trace())], {0: _records()[0]}, collective_bound_share=0.9)
    assert suggest(f, "h.py::m") == []
    text = markdown(f)
    assert text.startswith("# Collectives on the critical path: not collective-bound")
    assert "| all_reduce (dominant) | 1.0 | 0.66 | 66% | 0.46 | 30% |" in text
    assert "harness.py:12 (forward)" in text
    assert "not collective-bound" in summary_lines(f)[0]


def test_accumulation_targets_the_threshold_when_compute_exceeds_communication() -> None:
    # compute 745 µs > communication 660 µs; exposed [120,180) + [800,900) = 16% of the step
    traces = [analyze_trace(cpu_trace(rank=r, compute_scale=2.0)) for r in (0, 1)]
    f = merge(traces, _records(), collective_bound_share=0.10)
    assert f.exposed_share == pytest.approx(0.16) and f.collective_bound
    (entry,) = suggest(f, "h.py::m")  # 76% overlapped: no bucket change
    assert entry["settings"] == {"gradient_accumulation": 2}
    assert "16% of the step is exposed communication; 2 micro-batches per collective bring it under 10%" in entry["why"]


def test_gloo_ranges_take_the_kind_of_the_c10d_op_that_issued_them() -> None:
    """gloo has no reduce-scatter: FSDP2's reduce-scatter runs as gloo:all_reduce. Work runs in
    issue order, so the i-th gloo range is the i-th c10d op's."""
    trace = {"traceEvents": [
        step(0, 0, 1000),
        X("c10d::_allgather_base_", 10, 5),
        X("c10d::_reduce_scatter_base_", 500, 5),
        X("gloo:all_gather", 20, 100, tid=2, cat="user_annotation"),
        X("gloo:all_reduce", 510, 300, tid=3, cat="user_annotation"),
    ]}
    (s,) = analyze_trace(trace).steps
    assert {k: (v.total_us, v.count) for k, v in s.by_kind.items()} == {
        "all_gather": (105, 1), "reduce_scatter": (305, 1)}
    # counts that do not pair up leave the ranges as named
    trace["traceEvents"].append(X("c10d::barrier", 900, 5))
    (s,) = analyze_trace(trace).steps
    assert set(s.by_kind) == {"all_gather", "all_reduce", "reduce_scatter", "barrier"}
