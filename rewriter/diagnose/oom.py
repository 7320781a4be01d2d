"""What a CUDA out-of-memory error says: a fragmentation OOM or a capacity OOM.

The caching allocator's OOM message (c10/cuda/CUDACachingAllocator.cpp, torch 2.x) gives the
request and, at the moment of failure, the memory "reserved by PyTorch but unallocated", and it
suggests ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` "if reserved but unallocated memory
is large ... to avoid fragmentation". Before it raises, the allocator has already freed every
cached segment with no block in use and retried (``release_cached_blocks``), so what is still
reserved but unallocated sits in *split* segments: free, but only in pieces next to live blocks.

The rule (:func:`classify`): when that stranded memory is at least the request, the request
failed for want of contiguity, not of memory: a **fragmentation OOM**, which expandable segments
fix (a segment grows in place and its free pages can be unmapped). Otherwise the live tensors
need more than the limit: a **capacity OOM**, which no allocator setting fixes.

Measured: the fragmentation workload (fixtures/workloads/fragmentation) under a 2 GiB cap runs
out of memory asking for 448 MiB with 599 MiB reserved but unallocated and 1.23 GiB allocated
(benchmarks/alloc_sim_fragmentation.py predicted 448 and 597 MiB); with
``expandable_segments:True`` the same step runs (docs/decisions.md, "Memory rungs").

Parsing the message, not reading ``memory_stats()`` afterwards, keeps the numbers of the moment
of failure (unwinding the stack frees tensors) and works on any host (tests raise the message on
CPU).
"""

from __future__ import annotations

import re
from typing import Any

MiB = 2**20
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([0-9.]+) (bytes|KiB|MiB|GiB|TiB)"
_REQUEST = re.compile(r"Tried to allocate " + _SIZE)
_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")


def _bytes(m: re.Match[str] | None) -> int | None:
    return None if m is None else int(float(m.group(1)) * _UNITS[m.group(2)])


def classify(message: str) -> dict[str, Any] | None:
    """Read a CUDA OOM message.

    Args:
        message: ``str(torch.OutOfMemoryError)``.

    Returns:
        None when the message is not the caching allocator's (no "Tried to allocate"); otherwise
        ``{"requested_mib", "allocated_mib", "reserved_unallocated_mib", "fragmentation"}``, sizes
        in MiB (None where the message lacks them) and ``fragmentation`` True when the reserved
        but unallocated memory is at least the request (see the module docstring), False when
        it is less, None when the message does not say.
    """
    requested = _bytes(_REQUEST.search(message))
    if requested is None:
        return None
    unallocated = _bytes(_UNALLOCATED.search(message))
    allocated = _bytes(_ALLOCATED.search(message))
    return {
        "requested_mib": round(requested / MiB, 1),
        "allocated_mib": None if allocated is None else round(allocated / MiB, 1),
        "reserved_unallocated_mib": None if unallocated is None else round(unallocated / MiB, 1),
        "fragmentation": None if unallocated is None else unallocated >= requested,
    }


def describe(oom: dict[str, Any]) -> str:
    """One line for a person: the numbers and which kind of OOM they make."""
    free = oom["reserved_unallocated_mib"]
    held = "" if oom["allocated_mib"] is None else f", {oom['allocated_mib']:.0f} MiB allocated"
    if free is None:
        return f"asked for {oom['requested_mib']:.0f} MiB{held} (the message gives no reserved-but-unallocated figure)"
    kind = "a fragmentation OOM" if oom["fragmentation"] else "a capacity OOM"
    cmp = ">=" if oom["fragmentation"] else "<"
    return f"asked for {oom['requested_mib']:.0f} MiB with {free:.0f} MiB reserved but unallocated ({cmp} the request){held}: {kind}"
