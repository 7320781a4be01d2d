"""The CUDA branches of the profiler rungs on a synthetic device timeline (no GPU needed):
idle time split HTA's way, gaps split into collective-aligned and host stalls, the device op
mix and the dominant non-GEMM op."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.diagnose.rungs import device_time, gaps, op_mix, top_ops
from rewriter.diagnose.context import Context
from rewriter.diagnose.rungs.profile import KernelEvent, OpEvent, ProfileData
from rewriter.diagnose.session import Session
from rewriter.harness import load_harness
from rewriter.plan import load_plan

WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    return _ctx(tmp_path, monkeypatch, "launch_bound")


def _ctx(tmp_path, monkeypatch, workload):
    src = tmp_path / "src"
    shutil.copytree(WORKLOADS / workload, src)
    spec = load_plan(src / "plan.yaml").plan.harness
    monkeypatch.setattr(Session, "cuda", property(lambda self: True))
    monkeypatch.setattr(Session, "sync", lambda self: None)
    c = Context(session=Session(load_harness(spec, src)), out_dir=tmp_path)
    # one step, window 0..1000 us:
    #   gemm 0-200 | gap 200-400, host launches at 250 | nccl 400-600 | gap 600-700 |
    #   triton_poi 700-710 | 10 us | topk 720-900 | idle 900-1000
    c.evidence.profile = ProfileData(
        device="cuda",
        steps=1,
        windows=[(0.0, 1000.0)],
        ops=[OpEvent("aten::mm", 50.0, 0.0, 50.0, 1), OpEvent("aten::add", 10.0, 250.0, 260.0, 2)],
        kernels=[
            KernelEvent("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 0.0, 200.0, 7, "kernel", "aten::mm"),
            KernelEvent("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 400.0, 200.0, 9, "kernel", None),
            KernelEvent("triton_poi_fused_add_0", 700.0, 10.0, 7, "kernel", None),
            KernelEvent("void at::native::sbtopk::gatherTopK<float>", 720.0, 180.0, 7, "kernel", "aten::topk"),
        ],
        profiled_step_ms=1.0,
    )
    c.evidence.eager_time = {"median_ms": 0.9, "min_ms": 0.9, "iters": 3}
    return c


def test_device_time_sums_device_only_and_splits_idle(ctx):
    r = device_time.run(ctx)
    m = r.measurement
    assert m["self_device_ms"] == 0.59 and m["self_cpu_ms"] == 0.06
    assert m["idle_share"] == 0.41
    assert (m["host_wait_ms"], m["kernel_wait_ms"], m["other_idle_ms"]) == (0.2, 0.01, 0.2)
    assert r.verdict.startswith("host-bound")


def test_gaps_split_collective_aligned_from_host_stalls(ctx):
    r = gaps.run(ctx)
    m = r.measurement
    # compute-stream gap 200-700: 400-600 covered by the all-reduce, the rest has no kernel at all
    assert (m["host_stall_ms"], m["collective_gap_ms"], m["host_stall_gaps"]) == (0.3, 0.2, 1)
    assert m["host_stall_share"] == 0.3
    # no sync in this model: the idle is the host launching, not a stall to remove
    assert (m["after_sync_ms"], m["dispatch_gap_ms"], m["dispatch_gap_share"]) == (0.0, 0.3, 0.3)
    assert r.verdict.startswith("dispatch gaps: 30% of the step idle with no kernel while the host launches")
    assert r.implies.startswith("fewer launches: compile")


def _sync_timeline(after_sync_us: float, dispatch_us: float) -> list:
    """reduce | DtoH copy | ``after_sync_us`` idle | div | ``dispatch_us`` idle | mm, in 0..1000 us."""
    t = 302.0 + after_sync_us
    return [
        KernelEvent("void at::native::reduce_kernel<512, 1>", 0.0, 300.0, 7, "kernel", "aten::max"),
        KernelEvent("Memcpy DtoH (Device -> Pageable)", 300.0, 2.0, 7, "memcpy", "aten::_local_scalar_dense"),
        KernelEvent("void at::native::vectorized_elementwise_kernel<4>", t, 100.0, 7, "kernel", "aten::div"),
        KernelEvent("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", t + 100.0 + dispatch_us, 1000.0 - (t + 100.0 + dispatch_us), 7, "kernel", "aten::mm"),
    ]


def test_idle_after_syncs_is_blamed_on_them_and_the_rest_on_dispatch(tmp_path, monkeypatch):
    """H200 diagnose_hf: HF Llama idled 29% of the step with no kernel, 0.7% of it after its one
    .item(); the verdict named the sync for all 29%. Only the idle right after a sync is the
    sync's; the rest is the host launching."""
    c = _ctx(tmp_path, monkeypatch, "host_stall")
    c.evidence.profile.kernels = _sync_timeline(after_sync_us=10.0, dispatch_us=290.0)
    r = gaps.run(c)
    m = r.measurement
    assert (m["after_sync_share"], m["dispatch_gap_share"], m["host_stall_share"]) == (0.01, 0.29, 0.3)
    assert r.verdict.startswith("dispatch gaps: 29% of the step idle with no kernel while the host launches; "
                                "the host sync(s) at model.py:")
    assert r.verdict.endswith("account for 1.0%")
    assert r.implies.startswith("fewer launches")
    assert all("idle right after the syncs: 1.0% of the step" in f.message for f in r.findings)
    # the same sync with a long wait after it: remove the sync
    c.evidence.profile.kernels = _sync_timeline(after_sync_us=120.0, dispatch_us=0.0)
    r = gaps.run(c)
    assert r.measurement["after_sync_share"] == 0.12
    assert r.verdict.startswith("host stalls: 12% of the step idle with no kernel, 12% right after host syncs (device-to-host copies) at model.py:")
    assert r.implies == "remove the host sync(s)"


def test_idle_after_a_device_to_host_copy_counts_without_a_located_call(ctx):
    """A read-back the call-site capture does not know (x.to("cpu")) still stalls the device:
    the verdict must not say "no significant gaps" (review of the gaps split)."""
    ctx.evidence.profile.kernels = _sync_timeline(after_sync_us=250.0, dispatch_us=20.0)
    r = gaps.run(ctx)
    assert not r.findings and r.measurement["after_sync_share"] == 0.25
    assert r.verdict.startswith("host stalls: 25% of the step idle with no kernel, 25% right after host syncs")
    assert "no sync call found in SRC" in r.verdict
    assert r.implies == "find the device-to-host reads between kernels"


def test_gap_after_a_device_to_host_copy_is_a_host_stall_of_any_length(ctx):
    data = ctx.evidence.profile
    data.kernels = [
        KernelEvent("void at::native::reduce_kernel<512, 1>", 0.0, 300.0, 7, "kernel", "aten::max"),
        KernelEvent("Memcpy DtoH (Device -> Pageable)", 300.0, 2.0, 7, "memcpy", "aten::_local_scalar_dense"),
        KernelEvent("void at::native::vectorized_elementwise_kernel<4>", 322.0, 600.0, 7, "kernel", "aten::div"),
    ]
    m = gaps.run(ctx).measurement
    assert (m["after_sync_ms"], m["host_stall_ms"], m["host_stall_gaps"]) == (0.02, 0.02, 1)


def test_device_op_mix_and_dominant_non_gemm_kernel(ctx):
    mix = op_mix.run(ctx).measurement
    assert mix["basis"] == "self-device"
    assert mix["ms"]["gemm"] == 0.2 and mix["ms"]["communication"] == 0.2
    assert mix["ms"]["elementwise"] == 0.01 and mix["ms"]["reduction"] == 0.18
    top = top_ops.run(ctx)
    assert [row["op"] for row in top.measurement["top"]][:2] == ["aten::mm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]
    assert top.measurement["dominant"]["op"] == "aten::topk"
    assert top.implies == "kernel for aten::topk"


def test_unlinked_topk_kernels_group_under_aten_topk_and_elementwise_is_not_dominant(ctx):
    """H200 run 2: the profiler linked no kernel to its op; the two mbtopk kernels were separate
    rows and a 10% MulFunctor kernel was called the dominant op. Library kernels map to their op
    by name, and elementwise work is fusible traffic (compile), never the kernel case."""
    gather = "void at::native::mbtopk::gatherTopK<c10::BFloat16, unsigned int, 2>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, unsigned int)"
    counts = "void at::native::mbtopk::computeBlockDigitCounts<c10::BFloat16, unsigned int, unsigned int, 2>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, unsigned int)"
    mul = "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
    ctx.evidence.profile.kernels = [
        KernelEvent("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 0.0, 500.0, 7, "kernel", None),
        KernelEvent(mul, 500.0, 300.0, 7, "kernel", None),
        KernelEvent(gather, 800.0, 60.0, 7, "kernel", None),
        KernelEvent(counts, 860.0, 60.0, 7, "kernel", None),
    ]
    r = top_ops.run(ctx)
    rows = {row["op"]: row for row in r.measurement["top"]}
    assert rows["aten::topk"]["share"] == round(120 / 920, 4) and len(rows["aten::topk"]["kernels"]) == 2
    assert r.measurement["dominant"]["op"] == "aten::topk"
    assert r.implies == "kernel for aten::topk"
    assert "fusible, compile handles it" in r.verdict and mul not in r.verdict

    ctx.evidence.profile.kernels = ctx.evidence.profile.kernels[:2]
    r = top_ops.run(ctx)
    assert r.measurement["dominant"] is None
    assert r.implies.startswith("compile")
    assert "no algorithmic non-GEMM op >= 10%" in r.verdict and "fusible, compile handles it" in r.verdict


def test_report_tables_shorten_demangled_kernel_names_and_json_keeps_them():
    long = "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
    assert top_ops.short_name(long) == "at::native::vectorized_elementwise_kernel<…>"
    assert top_ops.short_name("aten::topk") == "aten::topk"
    assert len(top_ops.short_name("x" * 500)) == top_ops.SHORT


def test_kernel_parent_is_the_frontend_op_not_a_runtime_event_with_the_same_id():
    """A CUDA runtime event (``cudaLaunchKernel``) listed first with the same numeric id as the
    frontend aten op must not become the kernel's parent."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from rewriter.diagnose.rungs.profile import _aten_parent, frontend_by_id

    op = SimpleNamespace(name="aten::topk", id=5, device_type=DeviceType.CPU, is_async=False, linked_correlation_id=0, cpu_parent=None)
    launch = SimpleNamespace(name="cudaLaunchKernel", id=5, device_type=DeviceType.CPU, is_async=False, linked_correlation_id=9, cpu_parent=None)
    kernel = SimpleNamespace(name="gatherTopK", id=9, device_type=DeviceType.CUDA, is_async=False, linked_correlation_id=5)
    by_id = frontend_by_id([launch, op, kernel])
    assert _aten_parent(by_id[kernel.linked_correlation_id]) == "aten::topk"
