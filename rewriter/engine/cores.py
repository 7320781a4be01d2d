"""Which CPU core the timed processes' main threads run on (:attr:`.options.Options.pin`).

On a shared GPU host, identical processes of a host-heavy step differ by tens of percent with the
scheduler's placement or a core of their own each, and by about 1% with every process on one
shared core (docs/decisions.md, "Pinning the timed processes to the median core"): the spread is
the cores' speed, which differs from core to core and over time on a shared host (a busy sibling
hyperthread, a lower clock). One shared core pairs that out of the comparison. :func:`core_speeds`
measures each core at a pure-Python loop, the work that bounds a launch-heavy step's host side
(interpreter dispatch), and the shared core is the one of median speed: a typical core of this
host, as a deployed process the scheduler places lands on one. The fastest core (``--pin
fastest``) is an extreme order statistic, further from the typical core and more variable from
run to run than the median, and on it the search's choice flipped between runs (same section).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

#: Iterations of the calibration loop: about 0.3-1 ms of interpreter work on one core.
LOOP = 20_000
#: Timed loops per core; the median stands.
TRIALS = 5


def _loop() -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i & 7
    return time.perf_counter() - t0


def core_speeds(cores: list[int]) -> dict[int, float]:
    """Seconds of one calibration loop (the median of :data:`TRIALS`) with this thread pinned to
    each of ``cores`` in turn; this thread's affinity is restored afterwards. A core that cannot
    be pinned is left out. About ``len(cores) x 5 x 0.5 ms``: 40 ms for 16 cores. Linux only
    (``os.sched_setaffinity``); elsewhere {}."""
    if not hasattr(os, "sched_setaffinity"):
        return {}
    before = os.sched_getaffinity(0)
    out: dict[int, float] = {}
    try:
        for core in cores:
            try:
                os.sched_setaffinity(0, {core})
            except OSError:
                continue
            _loop()  # the migration and a warm cache before the timed loops
            out[core] = statistics.median(_loop() for _ in range(TRIALS))
    finally:
        os.sched_setaffinity(0, before)
    return out


#: The ``pin`` modes that put every timed process on one core measured by :func:`core_speeds`.
ONE_CORE_MODES = ("shared", "fastest")


def pin_plan(names: list[str], cores: list[int], mode: str = "own", speeds: dict[int, float] | None = None) -> dict[str, int]:
    """The CPU core each timed process's main thread is pinned to, from ``cores`` (the parent's
    affinity), leaving the lowest two for the parent, interrupts and the driver's threads:
    ``shared``, every process on one core, the one of median speed in ``speeds`` (seconds per
    loop, :func:`core_speeds`; the faster of the middle two for an even count; without speeds the
    highest core); ``fastest``, every process on the fastest core in ``speeds`` (the highest
    without speeds); both empty with fewer than 3 cores; ``own``, distinct cores from the top
    (empty with fewer than ``len(names) + 2``); ``off``, empty (no pinning)."""
    cores = sorted(cores)
    if mode in ONE_CORE_MODES:
        if len(cores) < 3:
            return {}
        pool = cores[2:]
        timed = sorted((c for c in pool if speeds and c in speeds), key=lambda c: (speeds[c], -c))  # type: ignore[index]
        if not timed:
            core = pool[-1]
        else:
            core = timed[0] if mode == "fastest" else timed[(len(timed) - 1) // 2]
        return {n: core for n in names}
    if mode != "own" or len(cores) < len(names) + 2:
        return {}
    return {n: cores[-1 - k] for k, n in enumerate(names)}


#: The busy loop :func:`contend` runs: pinned to one core, it takes about half of that core's
#: time from any thread that shares it (the kernel's fair scheduler time-slices the two).
_BUSY = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def contend(core: int) -> Any:
    """Start a process that busy-loops on ``core`` (a contended host core: a data-loader worker,
    a logging thread or a neighbour's vCPU time-slicing with the timed process's main thread) and
    return its ``subprocess.Popen``; the caller kills it. A contended
    core, not a slower one, is what moves a launch-heavy step (``benchmarks/host_sensitivity.py``;
    docs/decisions.md, "Minimax over host conditions").

    Raises:
        OSError: the process could not be started.
    """
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _BUSY, str(core)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
