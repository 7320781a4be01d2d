"""Step timing: CUDA events on GPU, ``time.perf_counter`` after ``synchronize`` on CPU; median and
spread (p10-p90) of many samples (:func:`summarize`). The engine interleaves the variants' samples
across their processes, a rotating order per round, so machine drift and thermal state cancel
(:func:`.windows.interleave`).

The method follows ``torch.utils.benchmark``'s guidance (synchronize around the timed region,
warm up, report the median); a sample is one call (:func:`time_call`) or, on CUDA in the
engine, a short back-to-back block (:func:`time_burst`, its blocked measurement), so variants can
interleave sample by sample.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timed:
    """What :func:`.windows.interleave` returns (and :func:`.replicas.merge_replicates` folds).

    Attributes:
        rows: per shape ``{"shape", "timing": {process name: summarize(...)}}`` (ms figures).
        samples: per shape ``{process name: [seconds per call, ...]}`` in round order, paired
            across processes.
        error: what stopped the timing (a first process failed), or None; ``rows`` and
            ``samples`` are then empty.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, list[float]]] = field(default_factory=list)
    error: str | None = None


def sync(device: str) -> None:
    """Wait for queued device work (no-op on CPU)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_call(fn: Callable[[], Any], device: str) -> float:
    """Seconds one call of ``fn`` takes: CUDA events on ``cuda*`` devices (device time of the
    queued work, host launch included), else wall-clock around a synchronized call."""
    import torch

    if device.startswith("cuda"):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def time_burst(fn: Callable[[], Any], device: str, calls: int) -> float:
    """Seconds per call of ``calls`` back-to-back calls of ``fn``, timed as a steady-state loop: one
    untimed lead-in call first, then (CUDA) an event recorded behind its queued work, the calls,
    and an event after them, so the timed calls start with the host warm and the device busy, as
    each step of a training or serving loop does. This is ``torch.utils.benchmark``'s
    ``Timer.blocked_autorange`` method (a block of ``number`` calls per measurement, the block's
    time / ``number``), where :func:`time_call` times one isolated call: that exposes the first
    kernel's launch latency and a host woken cold from a pipe read on every sample, which can make
    one process of a launch-heavy plan 10-20% slower than another (docs/decisions.md, "Blocked
    timing on CUDA"). On CPU: wall-clock from after the lead-in to a sync after the block.
    ``calls`` >= 1."""
    import torch

    calls = max(1, int(calls))
    if device.startswith("cuda"):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        fn()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / calls
    sync(device)
    fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / calls


def burst_calls(step_s: float, burst_ms: float, cap: int = 16) -> int:
    """Calls per :func:`time_burst` block so the block lasts at least ``burst_ms`` ms, given one
    call's ``step_s`` seconds: ``ceil(burst_ms / step_ms)``, between 1 and ``cap``. ``burst_ms``
    <= 0: 1 (one call per block)."""
    if burst_ms <= 0 or step_s <= 0:
        return 1
    return max(1, min(cap, math.ceil(burst_ms / (step_s * 1e3))))


def wall_call(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    """``(seconds, result)`` of one synchronized wall-clock call: for first calls, whose cost is
    mostly host-side compilation that CUDA events would not see."""
    sync(device)
    t0 = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - t0, result


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median, p10, p90, min and count of ``samples`` (seconds), in milliseconds."""
    if not samples:
        return {"n": 0}
    xs = sorted(samples)

    def pct(p: float) -> float:
        k = (len(xs) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return {
        "n": len(xs),
        "median_ms": statistics.median(xs) * 1e3,
        "p10_ms": pct(0.10) * 1e3,
        "p90_ms": pct(0.90) * 1e3,
        "min_ms": xs[0] * 1e3,
    }
