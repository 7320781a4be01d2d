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
* the steady peak reserved exceeds the steady peak allocated by >= :data:`WASTE_SHARE` of that
  peak allocation *and* by >= :data:`WASTE_MIB`: at one shape and after a clean cache, a step
  with fixed allocation sizes gets back exactly the blocks it freed (reserved ~= peak allocated
  plus the allocator's 2 MiB rounding), so memory held beyond the step's own peak means the
  allocation sizes vary within the step and split segments cannot be reused. Source of the
  figures: a best-fit simulation of the caching allocator's large pool (split when > 1 MiB is
  left, merge on free, 2 MiB segment rounding) on the fragmentation workload's sizes at its
  reference shape gives 35% (600 MiB over a 1.7 GiB peak) at steady state (a loop whose
  allocations all have one size wastes nothing); 25% sits below it. Ordinary models, whose
  activations differ in size in a repeating pattern, were not simulated: the margin on their
  side is unmeasured. The 256 MiB floor keeps the 20 MiB small-segment rounding of small
  models out. Both to be confirmed on the H200 re-run (benchmarks/diagnose_workloads.py checks
  the workload is called fragmenting and the 8 others are not).

Needs CUDA (``skipped: no CUDA`` otherwise).
"""

from __future__ import annotations

from typing import Any

from .context import Context
from .rung import RungResult

WARMUP = 2
STEADY = 3
WASTE_SHARE = 0.25
WASTE_MIB = 256.0
GROWTH_MIB = 64.0
MiB = 2**20


def verdict(m: dict[str, Any]) -> tuple[bool, str]:
    """(fragmenting, reason) from a steady-state measurement (keys as in :func:`run`)."""
    if m["alloc_retries"] > 0 or m["ooms"] > 0:
        return True, f"{m['alloc_retries']} alloc retries, {m['ooms']} OOMs in {m['steady_steps']} steady steps"
    if m["reserved_growth_mib"] >= GROWTH_MIB:
        return True, f"reserved grew {m['reserved_growth_mib']:.0f} MiB across {m['steady_steps']} steady steps at one shape"
    waste = m["peak_reserved_mib"] - m["peak_allocated_mib"]
    if waste >= WASTE_MIB and waste >= WASTE_SHARE * m["peak_allocated_mib"]:
        return True, f"steady peak reserved {m['peak_reserved_mib']:.0f} MiB vs peak allocated {m['peak_allocated_mib']:.0f} MiB: {waste:.0f} MiB ({waste / max(m['peak_allocated_mib'], 1e-9):.0%} of the step's peak) held in split segments"
    return False, (
        f"no fragmentation at steady state: 0 retries, reserved growth {m['reserved_growth_mib']:.0f} MiB, "
        f"reserved - peak allocated {waste:.0f} MiB ({waste / max(m['peak_allocated_mib'], 1e-9):.0%} of the step's peak)"
    )


def run(ctx: Context) -> RungResult:
    r = RungResult("memory", "Fragmentation at steady state: retries, reserved growth, reserved vs peak allocated")
    r.threshold = (
        f"steady state at the reference shape (empty_cache, {WARMUP} warm-up, reset peaks, {STEADY} steps): alloc retries > 0, "
        f"reserved growth >= {GROWTH_MIB:.0f} MiB, or reserved - peak allocated >= {WASTE_SHARE:.0%} of peak allocated and >= {WASTE_MIB:.0f} MiB "
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
        r.implies = "allocator: expandable_segments:True"
    else:
        r.verdict = why
    return r
