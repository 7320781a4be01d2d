"""Name a collective from a trace event: NCCL kernels (GPU), c10d / gloo / nccl ops (host).

Kernels are classified by name because a Chrome trace carries nothing else about them: NCCL's
kernel names encode the collective, the reduction, the dtype, the algorithm and the protocol.
Three naming generations are recognised (NCCL's ``src/device/generate.py`` and its predecessors):

* ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` (NCCL >= 2.19),
* ``ncclKernel_AllGather_RING_LL_Sum_int8_t`` (NCCL 2.8 - 2.18),
* ``ncclAllReduceRingLLKernel_sum_f32`` (NCCL <= 2.7).

Host-side names come from PyTorch: the c10d dispatcher ops (``c10d::allreduce_``,
``c10d::_allgather_base_``, ...), functional collectives (``_c10d_functional::all_reduce``), the
record-function ranges each process group opens around its work (``gloo:all_reduce`` on gloo's
worker threads, ``nccl:all_reduce`` on the caller's) and ``record_param_comms``, whose
``Collective name`` argument names the collective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: The normalised collective kinds, in the order reports list them.
KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "send_recv",
    "gather",
    "scatter",
    "barrier",
    "unknown",
)

_CAMEL = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "AllToAll": "all_to_all",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "send_recv",
    "Send": "send_recv",
    "Recv": "send_recv",
}
_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT", "COLLNET")
_PROTOS = ("LL128", "LL", "SIMPLE")
_OPS = {"sum": "sum", "prod": "prod", "max": "max", "min": "min", "premulsum": "premulsum",
        "sumpostdiv": "sumpostdiv", "avg": "avg", "copy": None}
_DTYPES = {
    "int8_t": "int8", "i8": "int8", "uint8_t": "uint8", "u8": "uint8",
    "int32_t": "int32", "i32": "int32", "uint32_t": "uint32", "u32": "uint32",
    "int64_t": "int64", "i64": "int64", "uint64_t": "uint64", "u64": "uint64",
    "half": "float16", "f16": "float16", "float": "float32", "f32": "float32",
    "double": "float64", "f64": "float64", "__nv_bfloat16": "bfloat16", "bf16": "bfloat16",
    "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2", "fp8_e4m3": "float8_e4m3", "fp8_e5m2": "float8_e5m2",
}

_REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})
_NEW = re.compile(r"^nccl(?:Dev)?Kernel_(?P<coll>[A-Za-z]+?)(?:_(?P<rest>\w*))?$")
_OLD = re.compile(
    r"^nccl(?P<coll>AllReduce|AllGather|ReduceScatter|Reduce|Broadcast|SendRecv|Send|Recv)"
    r"(?P<algo>Ring|Tree|CollNet)?(?P<proto>LL128|LL|Simple)?Kernel(?:_(?P<op>[a-z]+)_(?P<dtype>\w+))?$"
)
#: c10d / functional-collective / process-group op names -> kind. Matched on the part after
#: ``::`` or ``:`` with trailing underscores and ``_base``/``_coalesced`` variants stripped.
_HOST = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "allgather_into_tensor": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce",
    "send": "send_recv", "recv": "send_recv", "recv_any_source": "send_recv",
    "gather": "gather", "scatter": "scatter",
    "barrier": "barrier", "monitored_barrier": "barrier",
}
_HOST_NS = ("c10d::", "_c10d_functional::", "c10d_functional::", "gloo:", "nccl:")
_WAIT = re.compile(r"(^|::|:)(wait|wait_tensor|_wait_tensor)$|^ProcessGroup.*::wait$")


@dataclass(frozen=True)
class Collective:
    """What a trace event's name says about a collective.

    Attributes:
        kind: one of :data:`KINDS`.
        source: ``nccl_kernel`` (a device kernel), ``host_op`` (a c10d / functional op on the
            calling thread) or ``backend_range`` (gloo's or NCCL's record-function range).
        op: the reduction (``sum``, ``max``, ...) or None.
        dtype: the element type as a ``torch`` dtype name, or None.
        algorithm: NCCL's algorithm (``RING``, ``TREE``, ``NVLS``, ...) or None.
        protocol: NCCL's protocol (``LL``, ``LL128``, ``SIMPLE``) or None.
    """

    kind: str
    source: str
    op: str | None = None
    dtype: str | None = None
    algorithm: str | None = None
    protocol: str | None = None


def _kernel_name(name: str) -> str:
    """Drop a demangled argument list: ``ncclDevKernel_X(ncclDevKernelArgsStorage<4096ul>)``."""
    return name.split("(", 1)[0].strip()


def classify_kernel(name: str) -> Collective | None:
    """Classify an NCCL kernel name (argument list, if demangled, ignored).

    Returns None when the name is not an NCCL kernel of a known collective; an NCCL kernel whose
    collective the name does not state (``ncclDevKernel_Generic``) is still communication:
    :func:`classify_event` reports it with kind ``unknown``.
    """
    base = _kernel_name(name)
    m = _NEW.match(base)
    if m:
        coll = m.group("coll")
        kind = _CAMEL.get(coll)
        if kind is None:
            return None
        tokens = (m.group("rest") or "").split("_") if m.group("rest") else []
        rest = "_" + "_".join(tokens) + "_"
        algorithm = next((a for a in _ALGOS if f"_{a}_" in rest), None)
        proto_tokens = [t for t in tokens if t in _PROTOS]
        protocol = proto_tokens[-1] if proto_tokens else None
        op = next((_OPS[t.lower()] for t in tokens if t.lower() in _OPS and _OPS[t.lower()]), None)
        dtype = _dtype_of(tokens)
        if kind not in _REDUCING:  # AllGather kernels carry a placeholder "Sum"
            op = None
        return Collective(kind, "nccl_kernel", op, dtype, algorithm, protocol)
    m = _OLD.match(base)
    if m:
        kind = _CAMEL[m.group("coll")]
        algo = m.group("algo")
        proto = m.group("proto")
        op = _OPS.get(m.group("op") or "", None) if kind in _REDUCING else None
        dtype = _DTYPES.get(m.group("dtype") or "")
        return Collective(
            kind,
            "nccl_kernel",
            op,
            dtype,
            {"Ring": "RING", "Tree": "TREE", "CollNet": "COLLNET"}.get(algo or ""),
            {"LL": "LL", "LL128": "LL128", "Simple": "SIMPLE"}.get(proto or ""),
        )
    return None


def _dtype_of(tokens: list[str]) -> str | None:
    # "__nv_bfloat16" splits into ["", "", "nv", "bfloat16"]; "int8_t" into ["int8", "t"].
    joined = "_".join(tokens)
    for raw in sorted(_DTYPES, key=len, reverse=True):
        if re.search(rf"(^|_){re.escape(raw)}($|_)", joined):
            return _DTYPES[raw]
    return None


def is_nccl_kernel(name: str) -> bool:
    """True for any kernel NCCL launches (``nccl`` then a capital: ``ncclDevKernel_*``,
    ``ncclKernel_*``, ``ncclAllReduce*``), classified or not."""
    return bool(re.match(r"^nccl[A-Z]", _kernel_name(name)))


def classify_host(name: str, args: dict[str, Any] | None = None) -> Collective | None:
    """Classify a host-side event name (c10d op, functional collective, gloo/nccl range,
    ``record_param_comms``), or None when it is not a collective (waits are not: see
    :func:`is_wait`)."""
    if name == "record_param_comms":
        coll = str((args or {}).get("Collective name", ""))
        return Collective(_host_kind(coll) or "unknown", "host_op")
    for ns in _HOST_NS:
        if name.startswith(ns):
            rest = name[len(ns):]
            kind = _host_kind(rest)
            if kind is None:
                return None
            source = "backend_range" if ns in ("gloo:", "nccl:") else "host_op"
            return Collective(kind, source)
    return None


def _host_kind(rest: str) -> str | None:
    rest = rest.strip().split(" ", 1)[0].strip("_").lower()
    for suffix in ("_base", "_coalesced", "_tensor_coalesced", "_into_tensor_coalesced"):
        if rest.endswith(suffix) and rest[: -len(suffix)] in _HOST:
            rest = rest[: -len(suffix)]
    rest = rest.rstrip("_")
    return _HOST.get(rest)


def is_wait(name: str) -> bool:
    """True for an op that blocks on a collective's completion (``_c10d_functional::wait_tensor``,
    ``c10d::wait``, ``ProcessGroupNCCL::WorkNCCL::wait``): neither compute nor communication."""
    return bool(_WAIT.search(name))


def classify_event(event: dict[str, Any]) -> Collective | None:
    """Classify a Chrome-trace event: kernels by NCCL name, everything else as a host op."""
    name = str(event.get("name", ""))
    if event.get("cat") == "kernel":
        if not is_nccl_kernel(name):
            return None
        return classify_kernel(name) or Collective("unknown", "nccl_kernel")
    return classify_host(name, event.get("args"))
