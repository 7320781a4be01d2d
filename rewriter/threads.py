"""How many CPU threads a CPU measurement uses, and the one rule that picks it.

Without ``OMP_NUM_THREADS``, torch starts one intra-op thread per core it finds (ATen's
``get_num_threads`` default), whatever else the machine runs. On a loaded 2-core machine that
made one diagnose take 12 min 25 s (one rung 597 s) against 18 s with ``OMP_NUM_THREADS=1``:
OpenMP's parallel regions wait at a barrier for their slowest thread, and a thread
that shares its core with another process makes every region wait for the scheduler.

The rule, used when ``OMP_NUM_THREADS`` is unset (a value the user set is always kept):
half the CPUs this process may run on (``os.sched_getaffinity(0)``, which honours ``taskset``
and cgroup cpusets, where ``os.cpu_count()`` counts the whole machine), at least 1. Half,
because on an SMT machine the logical CPUs are two per physical core and one thread per physical
core is the advice of Intel's Extension for PyTorch Performance Tuning Guide (section
``OMP_NUM_THREADS``) and of pytorch/pytorch#125963 (intra-op pool sized to the physical cores);
where there is no SMT, half leaves the other cores as headroom for stackpart's own process, the
variants' idle children and whatever else the machine runs. A 2-CPU machine gets 1 thread.
"""

from __future__ import annotations

import os

#: The environment variable the thread count comes from when the user set it.
ENV = "OMP_NUM_THREADS"


def available_cpus() -> int:
    """The CPUs this process may run on (affinity mask), or ``os.cpu_count()`` where the platform
    has no affinity call."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cpu_threads(environ: dict[str, str] | None = None, cpus: int | None = None) -> dict[str, object]:
    """The thread count of a CPU measurement and where it comes from.

    Args:
        environ: the environment to read ``OMP_NUM_THREADS`` from (default ``os.environ``).
        cpus: the CPUs available (default :func:`available_cpus`).

    Returns:
        ``{"count": n, "source": "OMP_NUM_THREADS" | "rule", "cpus": available, "text": one line}``;
        ``source`` is ``rule`` when the variable is unset or not a positive integer.
    """
    env = os.environ if environ is None else environ
    cpus = available_cpus() if cpus is None else cpus
    raw = env.get(ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        n = int(raw)
        return {"count": n, "source": ENV, "cpus": cpus, "text": f"{n} CPU thread(s) ({ENV}={n}; {cpus} CPU(s) available)"}
    n = max(1, cpus // 2)
    return {"count": n, "source": "rule", "cpus": cpus,
            "text": f"{n} CPU thread(s) ({ENV} unset: half of the {cpus} CPU(s) available, at least 1)"}


def apply_in_process() -> dict[str, object]:
    """Set torch's intra-op threads in this process by :func:`cpu_threads` (a no-op for the count
    when ``OMP_NUM_THREADS`` is set: torch read it at import) and return the record."""
    import torch

    rec = cpu_threads()
    if rec["source"] == "rule":
        torch.set_num_threads(int(rec["count"]))  # type: ignore[call-overload]
    return rec


def child_env_threads(env: dict[str, str]) -> dict[str, object]:
    """Put the thread count into a CPU child's environment (``OMP_NUM_THREADS``, read by torch at
    import) when the user did not set it; returns the record."""
    rec = cpu_threads(env)
    if rec["source"] == "rule":
        env[ENV] = str(rec["count"])
    return rec
