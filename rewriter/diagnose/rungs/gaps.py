"""Rung 5: timeline gaps: collective-aligned vs host stalls, attributed to file:line.

A gap is time >= 50 µs between compute kernels inside a step (shorter gaps are launch latency,
counted by :mod:`.device_time`), or of any length right after a device-to-host copy (the host
read a value back and the device waits for its next launch). The part of a gap covered by a
communication kernel (``nccl*``, on its own stream) is collective-aligned; the part with no
kernel at all is a host stall (``host_stall_ms``), split in two:

- ``after_sync_ms``: gaps right after a device-to-host copy, attributed to the host syncs
  (``.item()``, ``.tolist()``, ``nonzero``: see :mod:`.callsites`) with the call's file:line.
  This is what removing the syncs gives back.
- ``dispatch_gap_ms``: the other gaps: the host was busy launching (Python, dispatch) or doing
  other work while the device ran dry. A sync elsewhere in the step does not explain them:
  calling every idle gap the sync's sends users to remove a sync worth a small share of it
  (docs/decisions.md, "Ladder margins and attributions"). They call for fewer launches (compile, CUDA graphs).

Threshold: either part >= 5% of the step (partitioning-the-stack: "gaps with no kernel at all
are host stalls — a .item(), a sync, a dataloader"; 5% is TF-profiler's input-bound
"moderately" band); the sync verdict comes first when both hold. Without CUDA the sync points
are still found (they stall only on a device): stall time is ``skipped: no CUDA``.
"""

from __future__ import annotations

from dataclasses import replace

from ..callsites import MEASURED_HOW, SYNC_METHODS, SYNC_OPS, capture
from ..classify import classify_kernel
from ..context import Context
from ..rung import Finding, Rung, RungResult
from .device_time import busy_intervals

GAP_US = 50.0
STALL_SHARE = 0.05


def run(ctx: Context) -> RungResult:
    r = RungResult("gaps", "Timeline gaps: collectives vs host stalls")
    r.threshold = ("gaps >= 50 us; idle right after host syncs >= 5% of the step, else dispatch gaps >= 5% "
                   "(TF-profiler 'moderately input-bound' band)")
    _, _, step = ctx.reference()
    sites = capture(ctx.session, step, set(SYNC_OPS) | set(SYNC_METHODS))
    for op, counter in sites.items():
        for (file, line, qual), n in counter.most_common():
            r.findings.append(Finding("host_sync", f"host sync ({op}, {n}x per step)", file, line, qual))
    m: dict = {"sync_points": len(r.findings), "sync_calls_per_step": sum(sum(c.values()) for c in sites.values()),
               "sync_sites_from": MEASURED_HOW}
    if not ctx.session.cuda:
        m["host_stall_ms"] = m["collective_gap_ms"] = "skipped: no CUDA"
        r.measurement = m
        r.verdict = (f"{m['sync_points']} host sync point(s) in user code (found in a step with compilation off); "
                     "stall time skipped: no CUDA")
        if r.findings:
            r.implies = "remove the host sync(s) (stall on CUDA)"
        return r
    data = ctx.evidence.profile
    is_comm = [classify_kernel(k.name, k.kind, k.parent_op) == "communication" for k in data.kernels]
    comm = busy_intervals([k for k, c in zip(data.kernels, is_comm) if c])
    compute = [k for k, c in zip(data.kernels, is_comm) if not c]
    host = coll = sync = 0.0
    n_host = 0
    dtoh_ends = sorted(k.end_us for k in compute if k.kind == "memcpy" and "dtoh" in k.name.lower())
    for ws, we in data.windows:
        busy = busy_intervals([k for k in compute if ws <= k.start_us <= we])
        for (_, a1), (b0, _) in zip(busy, busy[1:]):
            gap = b0 - a1
            after_sync = any(abs(e - a1) <= 1.0 for e in dtoh_ends)
            if after_sync:
                # the device waited for the host to read a value back and launch again
                sync += gap
                host += gap
                n_host += 1
                continue
            if gap < GAP_US:
                continue
            covered = sum(max(0.0, min(b0, c1) - max(a1, c0)) for c0, c1 in comm)
            coll += covered
            if gap - covered >= GAP_US:
                host += gap - covered
                n_host += 1
    steps = max(1, data.steps)

    def per_step(us: float) -> float:
        return round(us / steps / 1e3, 4)

    def share_of(us: float) -> float:
        return round(us / steps / data.step_us, 3) if data.step_us else 0.0

    m.update(
        host_stall_ms=per_step(host),
        host_stall_gaps=n_host // steps,
        after_sync_ms=per_step(sync),
        dispatch_gap_ms=per_step(host - sync),
        collective_gap_ms=per_step(coll),
        host_stall_share=share_of(host),
        after_sync_share=share_of(sync),
        dispatch_gap_share=share_of(host - sync),
    )
    r.measurement = m
    where = ", ".join(f.where for f in r.findings[:3])
    if where:
        where += " (sync sites found in a step with compilation off)"
    total, synced, dispatch = m["host_stall_share"], m["after_sync_share"], m["dispatch_gap_share"]
    if synced >= STALL_SHARE:
        r.verdict = (f"host stalls: {total:.0%} of the step idle with no kernel, {synced:.0%} right after "
                     "host syncs (device-to-host copies) "
                     + (f"at {where}" if where else "; no sync call found in SRC (a .to('cpu')? data loading?)"))
        r.implies = "remove the host sync(s)" if r.findings else "find the device-to-host reads between kernels"
    elif dispatch >= STALL_SHARE:
        r.verdict = f"dispatch gaps: {dispatch:.0%} of the step idle with no kernel while the host launches"
        if r.findings:
            r.verdict += f"; the host sync(s) at {where} account for {synced:.1%}"
            r.findings = [
                replace(f, message=f"{f.message}; idle right after the syncs: {synced:.1%} of the step")
                for f in r.findings
            ]
        r.implies = "fewer launches: compile, then CUDA graphs where shapes are stable"
    elif coll / steps / data.step_us >= STALL_SHARE if data.step_us else False:
        r.verdict = f"collective-aligned gaps: {m['collective_gap_ms']} ms per step"
        r.implies = "overlap communication or change parallelism"
    else:
        r.verdict = f"no significant gaps (host stalls {total:.0%} of the step)"
    return r


RUNG = Rung(name="gaps", order=60, run=run, needs=frozenset({"profile"}))
