"""Collectives named from recorded trace names: NCCL kernels of three naming generations (as
they appear in real Kineto traces and nccl-tests/ByteMLPerf reports, demangled argument lists
included), and the host-side c10d,
functional-collective, gloo and nccl names PyTorch records."""

from __future__ import annotations

import pytest

from rewriter.distributed.classify import classify_event, classify_host, classify_kernel, is_wait

KERNELS = {
    # NCCL >= 2.19
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": ("all_reduce", "sum", "bfloat16", "RING", "LL"),
    "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL": ("reduce_scatter", "sum", "float32", "RING", "LL"),
    "ncclDevKernel_AllGather_RING_LL": ("all_gather", None, None, "RING", "LL"),
    "ncclDevKernel_AllReduce_Sum_f32_NVLS_SIMPLE(ncclDevKernelArgsStorage<4096ul>)": (
        "all_reduce", "sum", "float32", "NVLS", "SIMPLE"),
    "ncclDevKernel_AllReduce_Sum_u8_TREE_LL128": ("all_reduce", "sum", "uint8", "TREE", "LL128"),
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": (
        "all_reduce", "sum", "float32", "RING", "LL"),
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": ("all_gather", None, None, "RING", "LL"),
    "ncclDevKernel_AllReduce_Sum_f16": ("all_reduce", "sum", "float16", None, None),
    "ncclDevKernel_SendRecv": ("send_recv", None, None, None, None),
    "ncclDevKernel_Broadcast_RING_LL": ("broadcast", None, None, "RING", "LL"),
    # NCCL 2.8 - 2.18: AllGather carries a placeholder "Sum" that is not a reduction
    "ncclKernel_AllGather_RING_LL_Sum_int8_t": ("all_gather", None, "int8", "RING", "LL"),
    "ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16": ("all_reduce", "sum", "bfloat16", "RING", "LL"),
    "ncclKernel_ReduceScatter_RING_SIMPLE_Sum_half": ("reduce_scatter", "sum", "float16", "RING", "SIMPLE"),
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": ("send_recv", None, "int8", "RING", "SIMPLE"),
    # NCCL <= 2.7
    "ncclAllReduceRingLLKernel_sum_f32": ("all_reduce", "sum", "float32", "RING", "LL"),
    "ncclReduceScatterRingLL128Kernel_max_f16": ("reduce_scatter", "max", "float16", "RING", "LL128"),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nccl_kernel_names(name: str) -> None:
    c = classify_kernel(name)
    assert c is not None
    assert (c.kind, c.op, c.dtype, c.algorithm, c.protocol) == KERNELS[name]
    assert c.source == "nccl_kernel"


@pytest.mark.parametrize(
    "name",
    ["ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "void at::native::vectorized_elementwise_kernel<4>",
     "flash_fwd_kernel", "triton_poi_fused_add_0", "nccl_like_but_not_a_kernel"],
)
def test_compute_kernels_are_not_collectives(name: str) -> None:
    assert classify_event({"cat": "kernel", "name": name}) is None


def test_unknown_nccl_kernel_is_still_communication() -> None:
    c = classify_event({"cat": "kernel", "name": "ncclDevKernel_Generic"})
    assert c is not None and c.kind == "unknown" and c.source == "nccl_kernel"


HOST = {
    "c10d::allreduce_": ("all_reduce", "host_op"),
    "c10d::allreduce_coalesced_": ("all_reduce", "host_op"),
    "c10d::_allgather_base_": ("all_gather", "host_op"),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", "host_op"),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", "host_op"),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", "host_op"),
    "c10d::alltoall_base_": ("all_to_all", "host_op"),
    "c10d::broadcast_": ("broadcast", "host_op"),
    "c10d::barrier": ("barrier", "host_op"),
    "c10d::send": ("send_recv", "host_op"),
    "c10d::recv_": ("send_recv", "host_op"),
    "_c10d_functional::all_reduce": ("all_reduce", "host_op"),
    "_c10d_functional::all_gather_into_tensor": ("all_gather", "host_op"),
    "_c10d_functional::reduce_scatter_tensor": ("reduce_scatter", "host_op"),
    "_c10d_functional::all_to_all_single": ("all_to_all", "host_op"),
    "gloo:all_reduce": ("all_reduce", "backend_range"),
    "gloo:all_gather": ("all_gather", "backend_range"),
    "nccl:all_reduce": ("all_reduce", "backend_range"),
    "nccl:_all_gather_base": ("all_gather", "backend_range"),
    "nccl:_reduce_scatter_base": ("reduce_scatter", "backend_range"),
    "nccl:send 0->1": ("send_recv", "backend_range"),
}


@pytest.mark.parametrize("name", sorted(HOST))
def test_host_names(name: str) -> None:
    c = classify_host(name)
    assert c is not None and (c.kind, c.source) == HOST[name]


@pytest.mark.parametrize(
    "name",
    ["aten::mm", "aten::all", "fsdp::all_gather_copy_in", "FSDP::all_gather (0)",
     "torch.distributed.ddp.reducer::copy_bucket_to_grad", "c10d::unknown_op_", "ProfilerStep#3"],
)
def test_non_collective_host_names(name: str) -> None:
    assert classify_host(name) is None


def test_record_param_comms_uses_its_collective_name() -> None:
    c = classify_host("record_param_comms", {"Collective name": "_reduce_scatter_base"})
    assert c is not None and c.kind == "reduce_scatter"
    assert classify_host("record_param_comms", {}).kind == "unknown"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("_c10d_functional::wait_tensor", True), ("c10d::wait", True), ("aten::mm", False),
     ("c10d::allreduce_", False), ("FSDP::post_backward_rs_wait (0)", False)],
)
def test_waits(name: str, expected: bool) -> None:
    assert is_wait(name) is expected
