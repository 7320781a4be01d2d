"""Rung 7: memory fragmentation: reserved - allocated, inactive split bytes, allocation retries.

Every harness shape runs twice and the caching allocator's counters are read
(``torch.cuda.memory_stats``). Threshold: any allocation retry (a failed cudaMalloc that forced a
cache flush), or peak inactive split bytes >= 20% of peak reserved, is fragmentation that
``expandable_segments`` removes (PyTorch docs, "CUDA semantics: optimizing memory usage with
PYTORCH_CUDA_ALLOC_CONF"; the 20% is a chosen margin, checked on the fragmentation workload).
Needs CUDA.
"""

from __future__ import annotations

from .context import Context
from .rung import RungResult

SPLIT_SHARE = 0.20
MiB = 2**20


def run(ctx: Context) -> RungResult:
    r = RungResult("memory", "Fragmentation: reserved - allocated, inactive splits, retries")
    r.threshold = "alloc retries > 0 or inactive split >= 20% of reserved (PyTorch CUDA semantics doc)"
    if not ctx.session.cuda:
        return r.skip("no CUDA")
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        for shape in ctx.session.spec.shapes:
            model, inputs = ctx.session.build(shape)
            ctx.session.run(ctx.session.step_fn(model, inputs))
    s = torch.cuda.memory_stats()
    reserved = s.get("reserved_bytes.all.current", 0)
    allocated = s.get("allocated_bytes.all.current", 0)
    peak_reserved = s.get("reserved_bytes.all.peak", 0) or 1
    split_peak = s.get("inactive_split_bytes.all.peak", 0)
    retries = s.get("num_alloc_retries", 0)
    r.measurement = {
        "reserved_mib": round(reserved / MiB, 1),
        "allocated_mib": round(allocated / MiB, 1),
        "reserved_minus_allocated_mib": round((reserved - allocated) / MiB, 1),
        "peak_reserved_mib": round(peak_reserved / MiB, 1),
        "inactive_split_peak_mib": round(split_peak / MiB, 1),
        "inactive_split_share": round(split_peak / peak_reserved, 3),
        "alloc_retries": retries,
        "ooms": s.get("num_ooms", 0),
    }
    if retries > 0 or split_peak / peak_reserved >= SPLIT_SHARE:
        r.verdict = f"fragmenting: inactive split peak {split_peak / MiB:.0f} MiB ({split_peak / peak_reserved:.0%} of reserved), {retries} alloc retries"
        r.implies = "allocator: expandable_segments:True"
    else:
        r.verdict = f"no fragmentation: inactive split {split_peak / peak_reserved:.0%} of reserved, {retries} retries"
    return r
