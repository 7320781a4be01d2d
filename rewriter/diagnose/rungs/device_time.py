"""Rung 2: summed self-CPU vs self-device time, and the device's idle share split HTA's way.

Sums follow torch's own profiler table (see :mod:`.profile`). Idle time is the step window not
covered by any device activity; each gap is ``kernel wait`` when shorter than 30 µs between
back-to-back kernels, ``host wait`` when the next kernel's operator started only after the device
had gone idle (the queue ran dry), else ``other`` (Holistic Trace Analysis, "Idle Time
Breakdown": host wait / kernel wait / other; 30 µs is HTA's consecutive-kernel delay).
Threshold: self-CPU >= self-device means the host is on the critical path (partitioning-the-stack
rung 2); an idle share >= 15% is launch/host-bound (TF-profiler's 15% band).
"""

from __future__ import annotations

from ..context import Context
from ..rung import Rung, RungResult
from ..profile_data import KernelEvent, ProfileData

KERNEL_WAIT_US = 30.0
IDLE_HIGH = 0.15


def busy_intervals(kernels: list[KernelEvent]) -> list[tuple[float, float]]:
    """Union of device activity intervals (all streams), sorted, µs."""
    out: list[list[float]] = []
    for k in sorted(kernels, key=lambda k: k.start_us):
        if out and k.start_us <= out[-1][1]:
            out[-1][1] = max(out[-1][1], k.end_us)
        else:
            out.append([k.start_us, k.end_us])
    return [(a, b) for a, b in out]


def idle_breakdown(data: ProfileData, ops_start: list[float] | None = None) -> dict[str, float]:
    """Idle µs per step split into host_wait / kernel_wait / other, plus the idle share."""
    total = {"idle_us": 0.0, "host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0}
    launches = sorted(o.start_us for o in data.ops if o.name.startswith("aten::"))
    import bisect

    for ws, we in data.windows:
        ks = [k for k in data.kernels if ws <= k.start_us <= we]
        busy = busy_intervals(ks)
        edges = [ws] + [x for iv in busy for x in iv] + [we]
        for i in range(0, len(edges), 2):
            gap_start, gap_end = edges[i], edges[i + 1]
            gap = max(0.0, gap_end - gap_start)
            if gap <= 0:
                continue
            total["idle_us"] += gap
            if 0 < i < len(edges) - 2 and gap < KERNEL_WAIT_US:
                total["kernel_wait_us"] += gap
            else:
                # did the host start any operator during the gap? then the queue had run dry
                j = bisect.bisect_left(launches, gap_start)
                if j < len(launches) and launches[j] < gap_end:
                    total["host_wait_us"] += gap
                else:
                    total["other_us"] += gap
    n = max(1, data.steps)
    out = {k: v / n for k, v in total.items()}
    out["idle_share"] = out["idle_us"] / data.step_us if data.step_us else 0.0
    return out


def run(ctx: Context) -> RungResult:
    r = RungResult("device_time", "Self-CPU vs self-device time; device idle share")
    r.threshold = "self-CPU >= self-device: host on the critical path; idle >= 15% (TF-profiler band; HTA idle split, 30 us kernel wait)"
    data: ProfileData = ctx.evidence.profile
    eager = ctx.eager_time()["median_ms"]
    m = {
        "step_ms": round(data.step_us / 1e3, 4),
        "self_cpu_ms": round(data.self_cpu_us / 1e3, 4),
        "host_python_share": round(max(0.0, 1 - data.self_cpu_us / data.step_us), 3) if data.step_us else None,
        "profiled_step_ms": round(data.profiled_step_ms, 4),
        "eager_step_ms": round(eager, 4),
        "profiler_overhead": round(data.profiled_step_ms / eager - 1, 3) if eager else None,
    }
    if not ctx.session.cuda:
        m["self_device_ms"] = "skipped: no CUDA"
        m["idle_share"] = "skipped: no CUDA"
        r.measurement = m
        r.verdict = "self-CPU only (device part skipped: no CUDA)"
        return r
    idle = idle_breakdown(data)
    m.update(
        self_device_ms=round(data.self_device_us / 1e3, 4),
        idle_share=round(idle["idle_share"], 3),
        host_wait_ms=round(idle["host_wait_us"] / 1e3, 4),
        kernel_wait_ms=round(idle["kernel_wait_us"] / 1e3, 4),
        other_idle_ms=round(idle["other_us"] / 1e3, 4),
    )
    r.measurement = m
    if data.self_cpu_us >= data.self_device_us or idle["idle_share"] >= IDLE_HIGH:
        r.verdict = f"host-bound: self-CPU {m['self_cpu_ms']} ms vs self-device {m['self_device_ms']} ms, device idle {idle['idle_share']:.0%}"
        r.implies = "compile, then CUDA graphs where shapes are stable"
    else:
        r.verdict = f"device-bound: self-device {m['self_device_ms']} ms > self-CPU {m['self_cpu_ms']} ms, idle {idle['idle_share']:.0%}"
    return r


RUNG = Rung(name="device_time", order=30, run=run, needs=frozenset({"profile"}))
