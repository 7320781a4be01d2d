"""Findings for a collective-bound step -> ``distributed`` plan entries with ``why:`` evidence.

These are launcher/wrapper settings, not source edits: ``rewrite`` reports them and writes
nothing (see ``DistributedAction`` in :mod:`rewriter.plan`). Each rule names its source:

* DDP overlaps each gradient bucket's all-reduce with the rest of backward; ``bucket_cap_mb``
  (default 25 MB, first bucket 1 MB: ``torch.nn.parallel.DistributedDataParallel`` docs and
  Li et al., "PyTorch Distributed", VLDB 2020, §3.2.3) trades per-call latency (small buckets)
  against overlap (large buckets start late). Few calls with little overlap -> smaller buckets;
  many calls with little overlap -> larger buckets.
* Accumulating K micro-batches (``DDP.no_sync()``, FSDP2 ``set_requires_gradient_sync(False)``)
  runs the gradient collective once per K, which helps any collective-bound step: K is the
  larger of ``ceil(comm / compute)`` (when communication per step exceeds compute, no bucket or
  prefetch setting can hide it) and ``ceil(exposed share / collective-bound share)`` (what
  brings the exposed share under the threshold), clamped to 2..16.
* FSDP2 ``reshard_after_forward=False`` keeps parameters unsharded from forward to backward,
  so backward issues no all-gather, at the cost of memory (``fully_shard`` docs); explicit
  ``set_modules_to_forward_prefetch`` issues the next blocks' all-gathers earlier.
* Fully sharded data parallelism moves 1.5x the bytes of plain data parallelism per step
  (Rajbhandari et al., "ZeRO", SC 2020, §7.2.2): a collective-bound FSDP2 run of a model whose
  replica fits one device is a candidate for DDP.
"""

from __future__ import annotations

import math
from typing import Any

from .findings import DistributedFindings

DDP_DEFAULT_BUCKET_MB = 25.0
#: Overlap below this share means the collective mostly runs after the compute it could hide under.
LOW_OVERLAP = 0.5
#: Bucket counts per step above this are latency-bound (many small all-reduces).
MANY_CALLS = 16


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def suggest(findings: DistributedFindings, target: str) -> list[dict[str, Any]]:
    """Plan entries (``action: distributed``) for a collective-bound step; [] otherwise.

    Args:
        findings: merged findings of a multi-process run.
        target: the plan target where the model is built or wrapped (e.g. the harness's
            ``harness.py::build_model``); advisory entries point at it.
    """
    f = findings
    d = f.dominant
    if not f.collective_bound or d is None or f.wrap not in ("ddp", "fsdp2"):
        return []
    compute = sum(r.compute_us for r in f.ranks) / len(f.ranks)
    comm = sum(r.comm_us for r in f.ranks) / len(f.ranks)
    base = (
        f"{d.kind} is {d.share_of_step:.0%} of the step ({d.calls_per_step:.0f} call(s), "
        f"{_ms(d.time_us)}/step), {d.overlap_share:.0%} overlapped with compute; exposed "
        f"communication >= {f.exposed_share:.0%} of the step on every rank "
        f"(collective-bound at {f.thresholds['collective_bound_share']:.0%})"
    )
    out: list[dict[str, Any]] = []

    def entry(settings: dict[str, Any], why: str) -> None:
        out.append({"action": "distributed", "target": target, "wrapper": f.wrap,
                    "settings": settings, "why": f"{base}; {why}"})

    if f.wrap == "ddp" and d.kind == "all_reduce" and d.overlap_share < LOW_OVERLAP:
        bucket = float(f.settings.get("bucket_cap_mb") or DDP_DEFAULT_BUCKET_MB)
        grad_mb = f.grad_bytes / 2**20
        if d.calls_per_step > MANY_CALLS:
            new = min(max(grad_mb, bucket), bucket * 4)
            if new > bucket:
                entry({"bucket_cap_mb": round(new, 1)},
                      f"{d.calls_per_step:.0f} all-reduces per step of <= {bucket:g} MB each are "
                      "latency-bound: larger buckets make fewer calls")
        elif grad_mb > 0:
            new = max(1.0, round(grad_mb / 8, 1))
            # a parameter's gradient is never split across buckets: smaller buckets cannot
            # start earlier when one gradient fills the bucket on its own
            if new < bucket and f.largest_grad_bytes / 2**20 < new:
                entry({"bucket_cap_mb": new},
                      f"{grad_mb:.0f} MB of gradients in buckets of {bucket:g} MB: the all-reduce "
                      "starts only when a bucket fills, late in backward; ~8 smaller buckets "
                      "start it earlier")
    if f.wrap == "fsdp2" and d.kind == "all_gather":
        if f.settings.get("reshard_after_forward", True) is not False:
            entry({"reshard_after_forward": False},
                  "keeping parameters unsharded after forward removes backward's all-gather "
                  "(costs the unsharded parameters' memory until backward)")
        elif not f.settings.get("forward_prefetch"):
            entry({"forward_prefetch": 2},
                  "all-gathers wait for their own block; prefetching the next 2 blocks overlaps "
                  "them with compute")
    share = f.thresholds["collective_bound_share"]
    k_exposed = math.ceil(f.exposed_share / share) if share > 0 else 2
    if comm > compute > 0:
        k = min(16, max(2, math.ceil(comm / compute), k_exposed))
        reason = (f"communication ({_ms(comm)}/step) exceeds compute ({_ms(compute)}/step), so no "
                  "overlap can hide it")
    else:
        k = min(16, max(2, k_exposed))
        reason = (f"{f.exposed_share:.0%} of the step is exposed communication; {k} micro-batches "
                  f"per collective bring it under {share:.0%}")
    entry({"gradient_accumulation": k},
          f"{reason}; accumulating {k} micro-batches runs the gradient collective once per {k} "
          "(DDP no_sync / FSDP2 set_requires_gradient_sync(False))")
    if f.wrap == "fsdp2":
        entry({"parallelism": "ddp"},
              "FSDP moves 1.5x the bytes of DDP per step (ZeRO, SC 2020, §7.2.2); if a full "
              "replica fits one device, DDP's single all-reduce moves less")
    return out
