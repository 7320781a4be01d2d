"""Rung 7: memory fragmentation, measured at steady state at the reference shape.

The batch-scaling rung (B, 2B, 4B) and the compile rungs leave the caching allocator holding
blocks sized for other shapes; a peak of inactive split bytes after them is the caching
allocator doing its job, not fragmentation (H200 run 2: every workload showed a 20-30% inactive
split peak after those rungs and was wrongly given ``allocator``). So this rung first returns the
cache to the device (``torch.cuda.empty_cache``), runs :data:`WARMUP` steps at the reference
shape, resets the peak counters (``torch.cuda.reset_peak_memory_stats``) and reads
``torch.cuda.memory_stats`` deltas over :data:`STEADY` steady steps.

Fragmentation is called only on evidence that costs something (PyTorch docs, "CUDA semantics:
memory management" / "optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF": retries flush the
cache and stall; ``expandable_segments`` removes the split-segment waste):

* ``num_alloc_retries`` grew during the steady steps (a failed cudaMalloc forced a cache flush),
  or an OOM was counted; or
* reserved memory grew across the steady steps by >= :data:`GROWTH_MIB` (new segments in a
  steady loop: the cache cannot serve the step's varying allocation sizes); or
Reserved memory held beyond the step's peak allocation is reported but is *not* a verdict: on
the H200 (run 3, torch 2.11) it was 79% of the step's peak for a GEMM-bound MLP, 69% for the
graph-break workload and 42% for the per-instance-recompile workload, against 35% for the
fragmentation workload itself, so the share does not tell fragmentation from caching. Memory a
cache holds costs nothing until an allocation fails for want of it, and then it shows as a retry.

Needs CUDA (``skipped: no CUDA`` otherwise).

An out-of-memory error is the other evidence, and the stronger: the caching allocator converges
on any step it sees repeated (benchmarks/alloc_sim_fragmentation.py; H200 run 7: 0 retries at a
3 GiB cap), so under memory pressure fragmentation shows as an OOM with the free memory stranded
in split segments, not as retries. When any rung's step runs out of memory and the message says
it is a fragmentation OOM (:mod:`.oom`), the ladder stops there and :func:`from_oom` gives this
rung's verdict from it: the plan holds the allocator action, and the rest is measured by running
diagnose again with it applied. A compile rung's fragmentation OOM does not stop the ladder
(its failure is the compiled variant's); it replaces a steady-state "no fragmentation" verdict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .context import Context
from .oom import describe
from .rung import RungResult

WARMUP = 2
STEADY = 3
GROWTH_MIB = 64.0
MiB = 2**20


def verdict(m: dict[str, Any]) -> tuple[bool, str]:
    """(fragmenting, reason) from a steady-state measurement (keys as in :func:`run`)."""
    if m["alloc_retries"] > 0 or m["ooms"] > 0:
        return True, f"{m['alloc_retries']} alloc retries, {m['ooms']} OOMs in {m['steady_steps']} steady steps"
    if m["reserved_growth_mib"] >= GROWTH_MIB:
        return True, f"reserved grew {m['reserved_growth_mib']:.0f} MiB across {m['steady_steps']} steady steps at one shape"
    waste = m["peak_reserved_mib"] - m["peak_allocated_mib"]
    return False, (
        f"no fragmentation at steady state: 0 retries, reserved growth {m['reserved_growth_mib']:.0f} MiB, "
        f"reserved - peak allocated {waste:.0f} MiB ({waste / max(m['peak_allocated_mib'], 1e-9):.0%} of the step's peak) "
        "held by the cache, costing nothing while no allocation fails"
    )


#: The environment variables the caching allocator reads its settings from (torch >= 2.9 reads
#: PYTORCH_ALLOC_CONF and still honours the older PYTORCH_CUDA_ALLOC_CONF).
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def expandable_segments_on(env: Mapping[str, str] | None = None) -> str | None:
    """``VAR=value`` when the allocator settings in ``env`` (default ``os.environ``) already turn
    expandable segments on, else None: the allocator action would then change nothing."""
    env = os.environ if env is None else env
    for var in ALLOC_CONF_VARS:
        value = env.get(var, "")
        for item in value.split(","):
            key, _, setting = item.partition(":")
            if key.strip() == "expandable_segments" and setting.strip().lower() == "true":
                return f"{var}={value}"
    return None


TITLE = "Fragmentation: retries and reserved growth at steady state, or an OOM with the free memory stranded"
IMPLIES = "allocator: expandable_segments:True"


def from_oom(rung: str, oom: dict[str, Any]) -> RungResult:
    """This rung's result from a fragmentation OOM met in ``rung`` (``oom``: :func:`.oom.classify`).

    Raises:
        ValueError: ``oom`` is not a fragmentation OOM (a capacity OOM implies no allocator action).
    """
    if not oom.get("fragmentation"):
        raise ValueError(f"not a fragmentation OOM: {oom}")
    r = RungResult("memory", TITLE)
    r.threshold = (
        "a CUDA OOM whose reserved-but-unallocated memory (free, stranded in split segments after the "
        "allocator's release-and-retry) is >= the request (c10 CUDACachingAllocator's OOM message)"
    )
    r.measurement = {"source": "oom", "oom_rung": rung, **{k: v for k, v in oom.items() if k != "fragmentation"}}
    r.verdict = f"fragmenting: out of memory in rung {rung}: {describe(oom)}"
    r.implies = IMPLIES
    return r


def run(ctx: Context) -> RungResult:
    r = RungResult("memory", TITLE)
    r.threshold = (
        f"steady state at the reference shape (empty_cache, {WARMUP} warm-up, reset peaks, {STEADY} steps): alloc retries > 0, "
        f"or reserved growth >= {GROWTH_MIB:.0f} MiB; reserved - peak allocated is reported, not judged "
        "(PyTorch CUDA semantics: memory management)"
    )
    if not ctx.session.cuda:
        return r.skip("no CUDA")
    import torch

    _, _, step = ctx.reference()
    ctx.session.sync()
    torch.cuda.empty_cache()
    for _ in range(WARMUP):
        ctx.session.run(step)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_stats()
    reserved = []
    for _ in range(STEADY):
        ctx.session.run(step)
        reserved.append(torch.cuda.memory_reserved())
    s = torch.cuda.memory_stats()
    m = {
        "steady_steps": STEADY,
        "peak_reserved_mib": round(s.get("reserved_bytes.all.peak", 0) / MiB, 1),
        "peak_allocated_mib": round(s.get("allocated_bytes.all.peak", 0) / MiB, 1),
        "reserved_mib": round(reserved[-1] / MiB, 1),
        "reserved_growth_mib": round((reserved[-1] - before.get("reserved_bytes.all.current", 0)) / MiB, 1),
        "inactive_split_peak_mib": round(s.get("inactive_split_bytes.all.peak", 0) / MiB, 1),
        "alloc_retries": s.get("num_alloc_retries", 0) - before.get("num_alloc_retries", 0),
        "ooms": s.get("num_ooms", 0) - before.get("num_ooms", 0),
        "cuda_mallocs": s.get("segment.all.allocated", 0) - before.get("segment.all.allocated", 0),
    }
    r.measurement = m
    frag, why = verdict(m)
    if frag:
        r.verdict = f"fragmenting: {why}"
        r.implies = IMPLIES
    else:
        r.verdict = why
    return r
