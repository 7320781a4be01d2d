"""Rung 6: memory fragmentation, measured over the harness's shape sweep at steady state.

A training job whose batches change shape every step (variable sequence lengths) asks the
caching allocator for different activation and scratch sizes every step. The allocator serves a
request from its cache when a free cached block fits; when none does it calls ``cudaMalloc`` (a
*device allocation*), and when that fails it frees every unused cached segment and retries
(``num_alloc_retries``), which synchronises the device (PyTorch docs, "CUDA semantics: memory
management"). At steady state over a sweep it has seen before, a cache that fits the workload
makes no device allocations at all; one that keeps allocating, or keeps more memory reserved
but unallocated with every pass, is fragmenting: ``expandable_segments:True`` lets a segment grow
in place instead (the allocator action).

So this rung returns the cache to the device (``torch.cuda.empty_cache``: the batch-scaling and
profile rungs leave blocks sized for other batches; it runs before the compile rungs, and before
the search's early children start, :mod:`..early_reference`, so no other process's device memory
shares its readings), runs the harness's shapes in
order for :data:`WARM_PASSES` warm pass(es) and then :data:`PASSES` measured passes (a pass is the
sweep, repeated until it holds at least :data:`MIN_STEPS_PER_PASS` steps, so a one-shape harness
still gets the old rung's 3 steady steps), a fresh ``make_inputs`` batch per step as a data
loader gives, and records per step (:func:`sweep`): reserved, allocated, their difference,
the step's peak reserved and allocated, the allocator's device allocations and frees
(``num_device_alloc``/``num_device_free`` where the torch in use reports them, torch 2.13's
``memory_stats`` docs list both; else ``segment.all.allocated``/``freed``, the segment counts),
inactive split bytes, retries and OOMs, and the step's synchronised wall time.

The verdict (:func:`sweep_verdict`, a pure function of those figures) reads the steady passes,
measured passes 2..N (pass 1 may still be filling the cache):

* ``num_alloc_retries`` grew in a measured pass, or an OOM was counted; or
* the allocator made device allocations in *every* steady pass (a converged cache makes none:
  one late allocation is convergence, one in each pass is a cache that cannot serve the sweep); or
* reserved-but-unallocated memory at the end of the pass grew from pass 1 to pass N by
  >= :data:`GROWTH_MIB` without falling in between.

The *level* of reserved-but-unallocated memory is reported but is not a verdict: measured on the
bundled workloads it was higher for workloads that do not fragment than for the fragmentation
workload itself (docs/decisions.md, "Memory rungs"); memory a cache holds costs nothing until an allocation fails for
want of it. A fixed-shape harness converges in its warm pass and gets no verdict.

A varied-shape sweep can converge too, on a cache cut for all its shapes: no device allocation,
no retry, and far more reserved than any one step needs (a best-fit model of the allocator on a
training step over six lengths: 15.6 GiB reserved where the longest length alone needs 10.0 GiB).
So with two or more shapes the rung also runs the largest step alone from an empty cache
(:func:`alone`) and reads the difference (the ``stranded`` rule of :func:`sweep_verdict`).

Needs CUDA (``skipped: no CUDA`` otherwise). When the verdict holds, the search measures the
allocator action as a candidate (:func:`measure_allocator`): the same sweep in two fresh child
processes, without and with ``expandable_segments:True`` in the child's environment (the
variable is read when CUDA's allocator initialises, so only a new process measures it), time per
step and peak reserved of each.

An out-of-memory error is the other evidence, and the stronger: under memory pressure
fragmentation shows as an OOM with the free memory stranded in split segments
(benchmarks/alloc_sim_fragmentation.py; docs/decisions.md, "Memory rungs"). When any rung's
step runs out of memory and the message says it is a fragmentation OOM (:mod:`.oom`), the ladder
stops there and :func:`from_oom` gives this rung's verdict from it: the plan holds the allocator
action, and the rest is measured by running diagnose again with it applied. A compile rung's
fragmentation OOM does not stop the ladder (its failure is the compiled variant's); it replaces a
steady-state "no fragmentation" verdict.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..context import Context
from ..oom import describe
from ..rung import Rung, RungResult

#: Passes of the sweep run before the measured ones (the cache fills; their steps are recorded as pass 0).
WARM_PASSES = 1
#: Measured passes; passes 2..N are the steady state the verdict reads (a trend needs more than one pass).
PASSES = 3
#: A pass repeats the sweep until it holds this many steps (the earlier one-shape rung's 3 steady steps).
MIN_STEPS_PER_PASS = 3
#: Growth of reserved-but-unallocated memory (MiB, pass 1 to pass N) that counts; kept from the
#: earlier steady-state rung's reserved-growth threshold. It is above three of the caching
#: allocator's 20 MiB large-pool segments (c10 CUDACachingAllocator ``kLargeBuffer``), so the
#: rounding of one request is not growth.
GROWTH_MIB = 64.0
MiB = 2**20
#: Steps of the sweep's largest shape run alone for the ``stranded`` rule's yardstick (:func:`alone`):
#: the second is the steady one, as the sweep's warm pass before its measured ones.
ALONE_STEPS = 2
#: Reserved memory the varied-shape sweep holds beyond what its largest step needs alone, as a share
#: of the latter, that counts as stranded (also >= :data:`GROWTH_MIB`). Source: a best-fit model of
#: the caching allocator (benchmarks/alloc_sim_fragmentation.py's) on a GEMM-heavy training step,
#: 8 layers x hidden 2048, batch 8, six lengths 517..2049: the sweep converges (no device allocation
#: after its first pass) at 15.6 GiB reserved, where the longest length alone needs 10.0 GiB (+56%);
#: a one-shape sweep holds what its step alone holds (+0%). A stackpart threshold between the two.
STRANDED_SHARE = 0.25
#: ``torch.cuda.memory_stats()`` keys of the allocator's device allocation and free counts, the
#: first pair the running torch reports is used: ``num_device_alloc``/``num_device_free`` (calls
#: to cudaMalloc/cuMemMap and cudaFree/cuMemUnmap; listed in torch 2.13's ``memory_stats`` docs),
#: else the segment counts ``segment.all.allocated``/``segment.all.freed`` (every torch 2.x).
DEVICE_COUNTERS = (("num_device_alloc", "num_device_free"), ("segment.all.allocated", "segment.all.freed"))

#: The environment variables the caching allocator reads its settings from: torch >= 2.9 reads
#: PYTORCH_ALLOC_CONF and, only where that is unset, the older PYTORCH_CUDA_ALLOC_CONF
#: (c10/core/AllocatorConfig.cpp ``AllocatorConfig::instance``).
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
#: What the allocator action sets (rewriter/actions/allocator.py, ``os.environ.setdefault``).
ACTION_VAR, ACTION_VALUE = "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"

TITLE = "Fragmentation: device allocations, retries or growing reserved-but-unallocated memory at steady state over the shape sweep, or an OOM with the free memory stranded"
IMPLIES = "allocator: expandable_segments:True"


def _mib(n: float) -> float:
    return round(n / MiB, 1)


def counters(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one ``torch.cuda.memory_stats()`` reading that :func:`sweep` records.

    Args:
        stats: the mapping ``torch.cuda.memory_stats()`` returns (bytes and counts; ``{}`` where
            there is no CUDA allocator, then every figure is 0).

    Returns:
        bytes: ``reserved``, ``allocated`` (current), ``peak_reserved``, ``peak_allocated``,
        ``inactive_split`` (current); cumulative counts: ``device_allocs``, ``device_frees``
        (from :data:`DEVICE_COUNTERS`, ``device_counter`` names the key used, None for ``{}``), ``retries``
        (``num_alloc_retries``), ``ooms`` (``num_ooms``).
    """
    alloc_key, free_key = next(((a, f) for a, f in DEVICE_COUNTERS if a in stats), DEVICE_COUNTERS[1])
    counted = alloc_key if stats else None
    return {
        "reserved": stats.get("reserved_bytes.all.current", 0),
        "allocated": stats.get("allocated_bytes.all.current", 0),
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
        "inactive_split": stats.get("inactive_split_bytes.all.current", 0),
        "device_allocs": stats.get(alloc_key, 0),
        "device_frees": stats.get(free_key, 0),
        "device_counter": counted,
        "retries": stats.get("num_alloc_retries", 0),
        "ooms": stats.get("num_ooms", 0),
    }


def step_figures(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """One step's record from :func:`counters` read before and after it (peaks reset before it).

    Returns sizes in MiB (``reserved_mib``, ``allocated_mib``, ``unallocated_mib`` = reserved -
    allocated after the step, ``peak_reserved_mib``, ``peak_allocated_mib`` during the step,
    ``inactive_split_mib`` after it) and the step's counts (``device_allocs``, ``device_frees``,
    ``alloc_retries``, ``ooms``: after - before).
    """
    return {
        "reserved_mib": _mib(after["reserved"]),
        "allocated_mib": _mib(after["allocated"]),
        "unallocated_mib": _mib(after["reserved"] - after["allocated"]),
        "peak_reserved_mib": _mib(after["peak_reserved"]),
        "peak_allocated_mib": _mib(after["peak_allocated"]),
        "inactive_split_mib": _mib(after["inactive_split"]),
        "device_allocs": after["device_allocs"] - before["device_allocs"],
        "device_frees": after["device_frees"] - before["device_frees"],
        "alloc_retries": after["retries"] - before["retries"],
        "ooms": after["ooms"] - before["ooms"],
    }


def sweep_order(shapes: Sequence[Mapping[str, int]], *, warm_passes: int = WARM_PASSES, passes: int = PASSES,
                min_steps: int = MIN_STEPS_PER_PASS) -> list[tuple[int, dict[str, int]]]:
    """``(pass, shape)`` for every step of the sweep, in order: ``warm_passes`` passes numbered 0,
    then passes 1..``passes``; a pass is the harness's shapes in order, repeated until it holds
    at least ``min_steps`` steps.

    Raises:
        ValueError: no shapes, or ``passes`` < 1.
    """
    if not shapes or passes < 1:
        raise ValueError(f"a sweep needs shapes and passes >= 1, got {len(shapes)} shape(s), {passes} pass(es)")
    one = [dict(s) for _ in range(math.ceil(min_steps / len(shapes))) for s in shapes]
    numbers = [0] * warm_passes + list(range(1, passes + 1))
    return [(p, s) for p in numbers for s in one]


def sweep(session: Any, *, warm_passes: int = WARM_PASSES, passes: int = PASSES, min_steps: int = MIN_STEPS_PER_PASS,
          stats: Callable[[], Mapping[str, Any]] | None = None, reset_peaks: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run the harness's shape sweep (:func:`sweep_order`) and record every step.

    Each step gets a fresh ``make_inputs`` batch (built outside the timed region, as a data
    loader's), the allocator's peak counters are reset before it, and its synchronised wall time
    is ``step_ms``. ``stats``/``reset_peaks`` default to ``torch.cuda.memory_stats`` and
    ``torch.cuda.reset_peak_memory_stats`` on CUDA; on CPU every memory figure is 0 (no CUDA
    allocator; the rung itself is skipped there).

    Returns:
        one dict per step: ``pass``, ``index`` (within the pass), ``shape``, ``step_ms`` and
        :func:`step_figures`'s keys, plus ``device_counter`` (the memory_stats key counted).

    Raises:
        HarnessFailure: a harness call failed (an OOM carries the message's figures).
    """
    import torch

    cuda = session.cuda
    if stats is None:
        stats = torch.cuda.memory_stats if cuda else dict
    if reset_peaks is None:
        reset_peaks = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    model = session.model()
    out: list[dict[str, Any]] = []
    index = {}
    for p, shape in sweep_order(session.spec.shapes, warm_passes=warm_passes, passes=passes, min_steps=min_steps):
        _, inputs = session.build(shape)
        step = session.step_fn(model, inputs)
        session.sync()
        reset_peaks()
        before = counters(stats())
        t0 = time.perf_counter()
        session.run(step)  # guarded, synchronised; the output is dropped before the reading
        ms = (time.perf_counter() - t0) * 1e3
        after = counters(stats())
        del inputs, step
        index[p] = index.get(p, -1) + 1
        out.append({"pass": p, "index": index[p], "shape": shape, "step_ms": round(ms, 3),
                    **step_figures(before, after), "device_counter": after["device_counter"]})
    return out


def alone(session: Any, shape: Mapping[str, int], *, steps: int = ALONE_STEPS,
          stats: Callable[[], Mapping[str, Any]] | None = None, reset_peaks: Callable[[], None] | None = None,
          empty_cache: Callable[[], None] | None = None) -> dict[str, Any]:
    """What the sweep's largest step needs on its own: the cache returned to the device
    (``empty_cache``), then ``steps`` steps of ``shape`` alone; reserved after them and the peak
    allocated during them (MiB). The yardstick of the ``stranded`` rule of :func:`sweep_verdict`:
    a cache that fits a varied-shape sweep holds no more than its largest step needs alone.
    ``stats``/``reset_peaks``/``empty_cache`` default to ``torch.cuda``'s (CPU: every figure 0).

    Returns:
        ``{"shape", "steps", "reserved_mib", "peak_allocated_mib"}``.

    Raises:
        HarnessFailure: a harness call failed.
    """
    import torch

    cuda = session.cuda
    if stats is None:
        stats = torch.cuda.memory_stats if cuda else dict
    if reset_peaks is None:
        reset_peaks = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    if empty_cache is None:
        empty_cache = torch.cuda.empty_cache if cuda else (lambda: None)
    model = session.model()
    session.sync()
    empty_cache()
    reset_peaks()
    for _ in range(steps):
        _, inputs = session.build(dict(shape))
        step = session.step_fn(model, inputs)
        session.run(step)
        del inputs, step
    after = counters(stats())
    return {"shape": dict(shape), "steps": steps, "reserved_mib": _mib(after["reserved"]),
            "peak_allocated_mib": _mib(after["peak_allocated"])}


def per_pass(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per pass of :func:`sweep`'s records (warm pass 0 included): steps, the sums of
    ``device_allocs``/``device_frees``/``alloc_retries``/``ooms``, reserved and reserved -
    allocated after its last step (MiB), its largest step peak reserved (MiB) and its mean and
    median ``step_ms``."""
    out = []
    for p in sorted({s["pass"] for s in steps}):
        mine = [s for s in steps if s["pass"] == p]
        out.append({
            "pass": p,
            "steps": len(mine),
            **{k: sum(s[k] for s in mine) for k in ("device_allocs", "device_frees", "alloc_retries", "ooms")},
            "end_reserved_mib": mine[-1]["reserved_mib"],
            "end_unallocated_mib": mine[-1]["unallocated_mib"],
            "peak_reserved_mib": max(s["peak_reserved_mib"] for s in mine),
            "peak_allocated_mib": max(s["peak_allocated_mib"] for s in mine),
            "step_ms_mean": round(statistics.fmean(s["step_ms"] for s in mine), 3),
            "step_ms_median": round(statistics.median(s["step_ms"] for s in mine), 3),
        })
    return out


def sweep_verdict(steps: Sequence[Mapping[str, Any]], largest_alone: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Whether the allocator fragments, from :func:`sweep`'s per-step records (a pure function).

    Rules (module docstring): retries or OOMs in a measured pass (>= 1); device allocations in
    every steady pass (measured passes 2..N, at least one of them); reserved - allocated at the
    end of the pass growing from pass 1 to pass N by >= :data:`GROWTH_MIB` and never falling;
    with ``largest_alone`` (:func:`alone` of the sweep's largest step) and two or more shapes,
    *stranded*: the measured passes' largest end-of-pass reserved exceeds what the largest step
    needs alone by >= :data:`GROWTH_MIB` and >= :data:`STRANDED_SHARE` of it: the cache converged
    on segments cut for other lengths (a varied-length training sweep), which expandable segments
    let grow and shrink in place instead.

    Returns:
        ``{"fragmenting": bool, "rule": "retries" | "device_allocs" | "unallocated_growth" |
        "stranded" | None, "reason": one line stating the figures, "passes": :func:`per_pass` of
        the measured passes, "steady_passes": [2..N], "unallocated_growth_mib": float,
        "stranded_mib": float or None}``.

    Raises:
        ValueError: no measured step (pass >= 1).
    """
    pp = [p for p in per_pass(steps) if p["pass"] >= 1]
    if not pp:
        raise ValueError("no measured pass (pass >= 1) in the sweep's records")
    shapes = len({json.dumps(s["shape"], sort_keys=True) for s in steps})
    counted = next((s["device_counter"] for s in steps if s.get("device_counter")), "no CUDA memory stats")
    n = sum(p["steps"] for p in pp)
    where = f"{len(pp)} measured pass(es) of the {shapes}-shape sweep ({n} steps)"
    steady = pp[1:]
    allocs = [p["device_allocs"] for p in steady]
    ends = [p["end_unallocated_mib"] for p in pp]
    growth = round(ends[-1] - ends[0], 1)
    out: dict[str, Any] = {"fragmenting": False, "rule": None, "passes": pp, "steady_passes": [p["pass"] for p in steady],
                           "unallocated_growth_mib": growth, "device_counter": counted, "stranded_mib": None}
    held_end = max(p["end_reserved_mib"] for p in pp)
    if largest_alone is not None and shapes >= 2:
        out["stranded_mib"] = round(held_end - largest_alone["reserved_mib"], 1)
    stranded = out["stranded_mib"]
    retries, ooms = sum(p["alloc_retries"] for p in pp), sum(p["ooms"] for p in pp)
    if retries or ooms:
        out.update(fragmenting=True, rule="retries", reason=f"{retries} alloc retries, {ooms} OOMs in {where}")
    elif steady and all(a > 0 for a in allocs):
        frees = [p["device_frees"] for p in steady]
        out.update(fragmenting=True, rule="device_allocs", reason=(
            f"the allocator kept allocating device memory at steady state: {allocs} device allocations and {frees} frees "
            f"({counted}) in passes {out['steady_passes']} of {where}; a cache that fits the sweep makes none"))
    elif len(ends) >= 2 and growth >= GROWTH_MIB and all(b >= a for a, b in zip(ends, ends[1:])):
        out.update(fragmenting=True, rule="unallocated_growth", reason=(
            f"reserved but unallocated memory grew {growth:.0f} MiB over {where} (end of pass: {ends} MiB) >= {GROWTH_MIB:.0f} MiB"))
    elif (stranded is not None and stranded >= GROWTH_MIB
          and stranded >= STRANDED_SHARE * largest_alone["reserved_mib"]):  # type: ignore[index]
        out.update(fragmenting=True, rule="stranded", reason=(
            f"the cache converged on segments cut for other shapes: {held_end:.0f} MiB reserved at the end of a pass over "
            f"{where}, where the largest step alone ({largest_alone['shape']}) needs {largest_alone['reserved_mib']:.0f} MiB "
            f"(+{stranded:.0f} MiB, {stranded / max(largest_alone['reserved_mib'], 1e-9):.0%} >= {STRANDED_SHARE:.0%})"))
    else:
        held = max(p["peak_reserved_mib"] - p["peak_allocated_mib"] for p in pp)
        out["reason"] = (
            f"no fragmentation at steady state over {where}: 0 retries, device allocations per steady pass {allocs or 'n/a (one pass)'} "
            f"({counted}), reserved - allocated at the end of each pass {ends} MiB (growth {growth:+.0f} MiB, "
            f"threshold {GROWTH_MIB:.0f}); the cache holds up to {held:.0f} MiB beyond a step's peak allocation, costing nothing while no allocation fails")
    return out


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


def action_env(env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The environment the allocator action leaves (``os.environ.setdefault(ACTION_VAR,
    ACTION_VALUE)`` at the entry), and why it would change nothing there, or None.

    It changes nothing when expandable segments are already on, when ``ACTION_VAR`` is already set
    (``setdefault`` keeps the user's value), or when ``PYTORCH_ALLOC_CONF`` is set (torch >= 2.9
    reads that first and ignores ``PYTORCH_CUDA_ALLOC_CONF``, c10/core/AllocatorConfig.cpp).
    """
    out = dict(env)
    already = expandable_segments_on(env)
    if already:
        return out, f"{already} is already set"
    if env.get(ACTION_VAR):
        return out, f"{ACTION_VAR}={env[ACTION_VAR]} is already set (the action's setdefault keeps it)"
    if env.get("PYTORCH_ALLOC_CONF"):
        return out, f"PYTORCH_ALLOC_CONF={env['PYTORCH_ALLOC_CONF']} is set (torch >= 2.9 reads it before {ACTION_VAR})"
    out[ACTION_VAR] = ACTION_VALUE
    return out, None


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


THRESHOLD = (
    f"the harness's shapes in order, empty_cache, {WARM_PASSES} warm pass, {PASSES} measured passes (>= {MIN_STEPS_PER_PASS} "
    f"steps each): alloc retries > 0, or device allocations in every steady pass (2..{PASSES}), or reserved - allocated "
    f"growing >= {GROWTH_MIB:.0f} MiB from pass 1 to {PASSES}, or (2+ shapes) reserved >= {GROWTH_MIB:.0f} MiB and "
    f">= {STRANDED_SHARE:.0%} above what the largest step needs alone; the level of reserved - allocated is reported, "
    "not judged (PyTorch CUDA semantics: memory management)"
)


def run(ctx: Context) -> RungResult:
    """The rung: :func:`sweep` on the session's model after ``empty_cache``, judged by
    :func:`sweep_verdict`. ``measurement``: ``source: "sweep"``, ``steps`` (every step's
    figures), ``passes`` (per measured pass), ``rule``, ``device_counter``, the sweep's largest
    peak reserved/allocated (MiB) and ``reserved_mib`` after it. Skipped without CUDA.

    Raises:
        HarnessFailure: a step failed (a fragmentation OOM becomes this rung's verdict in the runner).
    """
    r = RungResult("memory", TITLE)
    r.threshold = THRESHOLD
    if not ctx.session.cuda:
        return r.skip("no CUDA")
    import torch

    ctx.session.sync()
    torch.cuda.empty_cache()
    steps = sweep(ctx.session)
    measured = [s for s in steps if s["pass"] >= 1]
    one = None
    if len({json.dumps(s["shape"], sort_keys=True) for s in steps}) >= 2:
        one = alone(ctx.session, max(measured, key=lambda s: s["peak_allocated_mib"])["shape"])
    v = sweep_verdict(steps, one)
    r.measurement = {
        "source": "sweep",
        "shapes": [dict(s) for s in ctx.session.spec.shapes],
        "warm_passes": WARM_PASSES,
        "measured_passes": PASSES,
        "rule": v["rule"],
        "device_counter": v["device_counter"],
        "unallocated_growth_mib": v["unallocated_growth_mib"],
        "peak_reserved_mib": max(s["peak_reserved_mib"] for s in measured),
        "peak_allocated_mib": max(s["peak_allocated_mib"] for s in measured),
        "reserved_mib": steps[-1]["reserved_mib"],
        "alloc_retries": sum(s["alloc_retries"] for s in measured),
        "largest_alone": one,
        "stranded_mib": v["stranded_mib"],
        "passes": v["passes"],
        "steps": steps,
    }
    if v["fragmenting"]:
        r.verdict = f"fragmenting: {v['reason']}"
        r.implies = IMPLIES
    else:
        r.verdict = v["reason"]
    return r


# -- the allocator candidate: the sweep in fresh processes, without and with the action's setting ----

def allocator_effect(without: Mapping[str, Any], with_: Mapping[str, Any]) -> dict[str, Any]:
    """Compare the two arms of :func:`measure_allocator` (each a :func:`arm_summary`).

    The action is kept when, over the steady passes, it makes the mean step faster by more than
    :data:`rewriter.engine.verdict.NOISE` (2%, the search's noise floor), or lowers the peak
    reserved by >= :data:`GROWTH_MIB` without a step slower by more than that floor, or lets a
    sweep run that failed (ran out of memory) without it.

    Returns:
        ``{"keep", "step_ratio", "peak_reserved_saved_mib", "text"}``: ``keep`` True, False or
        None (not judged: an arm ran on CPU, or both failed); ``step_ratio`` the with/without
        ratio of the mean steady step ms, or None; ``peak_reserved_saved_mib`` without - with
        (MiB), or None; ``text`` one line with both arms' figures.
    """
    from ...engine.verdict import NOISE

    cpu = [a.get("device") for a in (without, with_) if a.get("device") and not str(a["device"]).startswith("cuda")]
    if cpu:
        return {"keep": None, "step_ratio": None, "peak_reserved_saved_mib": None,
                "text": f"not judged: measured on {cpu[0]}, where the CUDA allocator's setting changes nothing"}
    if without.get("error") or with_.get("error"):
        if without.get("error") and not with_.get("error"):
            return {"keep": True, "step_ratio": None, "peak_reserved_saved_mib": None,
                    "text": f"without {ACTION_VALUE} the sweep failed ({without['error']}); with it it ran: "
                            f"{with_['step_ms_mean']:.2f} ms/step, peak reserved {with_['peak_reserved_mib']:.0f} MiB"}
        if with_.get("error") and not without.get("error"):
            return {"keep": False, "step_ratio": None, "peak_reserved_saved_mib": None,
                    "text": f"with {ACTION_VALUE} the sweep failed ({with_['error']}); without it it ran: "
                            f"{without['step_ms_mean']:.2f} ms/step, peak reserved {without['peak_reserved_mib']:.0f} MiB"}
        failed = [f"{n}: {a['error']}" for n, a in (("without", without), ("with", with_)) if a.get("error")]
        return {"keep": None, "step_ratio": None, "peak_reserved_saved_mib": None, "text": "not judged: " + "; ".join(failed)}
    ratio = with_["step_ms_mean"] / without["step_ms_mean"] if without["step_ms_mean"] > 0 else None
    saved = None
    if with_.get("peak_reserved_mib") is not None and without.get("peak_reserved_mib") is not None:
        saved = round(without["peak_reserved_mib"] - with_["peak_reserved_mib"], 1)
    faster = ratio is not None and ratio < 1 - NOISE
    slower = ratio is not None and ratio > 1 + NOISE
    smaller = saved is not None and saved >= GROWTH_MIB
    keep = faster or (smaller and not slower)
    figures = (f"steady mean step {without['step_ms_mean']:.2f} ms without, {with_['step_ms_mean']:.2f} ms with {ACTION_VALUE}"
               + (f" (x{ratio:.3f})" if ratio is not None else "")
               + (f"; peak reserved {without['peak_reserved_mib']:.0f} vs {with_['peak_reserved_mib']:.0f} MiB" if saved is not None else "")
               + f"; device allocations in the steady passes {without['steady_device_allocs']} vs {with_['steady_device_allocs']}")
    if keep:
        why = f"faster beyond the {NOISE:.0%} noise floor" if faster else f"peak reserved {saved:.0f} MiB lower (>= {GROWTH_MIB:.0f}) at a step time within the noise floor"
    else:
        why = (f"slower beyond the {NOISE:.0%} noise floor" if slower else f"step time within the {NOISE:.0%} noise floor and peak reserved "
               + ("not measured" if saved is None else f"{saved:+.0f} MiB lower (< {GROWTH_MIB:.0f})"))
    return {"keep": keep, "step_ratio": None if ratio is None else round(ratio, 4), "peak_reserved_saved_mib": saved,
            "text": f"{'kept' if keep else 'no gain'}: {why}: {figures}"}


def arm_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """One arm's figures from its child's result: ``error`` (or None), the setting it ran with
    (``alloc_conf``), the mean and median step ms over the steady passes (2..N), the process's
    peak reserved and allocated (MiB, ``torch.cuda.max_memory_reserved``/``allocated`` over
    build and sweep), device allocations in the steady passes, retries, and the per-pass table."""
    out: dict[str, Any] = {"error": result.get("error"), "alloc_conf": result.get("alloc_conf"),
                           "wall_s": result.get("wall_s"), "device": result.get("device")}
    steps = result.get("steps") or []
    if out["error"] or not steps:
        out["error"] = out["error"] or "the child recorded no step"
        return out
    steady = [s for s in steps if s["pass"] >= 2] or [s for s in steps if s["pass"] >= 1]
    out.update(
        step_ms_mean=round(statistics.fmean(s["step_ms"] for s in steady), 3),
        step_ms_median=round(statistics.median(s["step_ms"] for s in steady), 3),
        steady_steps=len(steady),
        peak_reserved_mib=result.get("peak_reserved_mib"),
        peak_allocated_mib=result.get("peak_allocated_mib"),
        steady_device_allocs=sum(s["device_allocs"] for s in steady),
        alloc_retries=sum(s["alloc_retries"] for s in steps if s["pass"] >= 1),
        passes=per_pass(steps),
        verdict=sweep_verdict(steps)["reason"],
    )
    return out


def measure_allocator(spec: Any, src: str | Path, *, timeout_s: float = 300.0, env: Mapping[str, str] | None = None,
                      warm_passes: int = WARM_PASSES, passes: int = PASSES, min_steps: int = MIN_STEPS_PER_PASS,
                      keep_steps: bool = False) -> dict[str, Any]:
    """Measure the allocator action as a candidate: :func:`sweep` in two fresh child processes
    (``python -m rewriter.diagnose.memory_child``), first without and then with the environment
    the action leaves (:func:`action_env`), since the allocator reads its settings when CUDA
    initialises and only a new process can run under another one.

    Args:
        spec: the harness (:class:`rewriter.plan.Harness`) with its device resolved.
        src: the source tree the harness lives in.
        timeout_s: per child (seconds); a child past it is killed and its arm records the timeout.
        env: the environment both arms start from (default ``os.environ``).
        keep_steps: keep every arm's per-step records under ``steps`` (the benchmark's tables).

    Returns:
        ``{"skipped": why}`` when the action would change nothing (:func:`action_env`); else
        ``{"without": arm, "with": arm, "effect": :func:`allocator_effect`, "protocol": text}``
        (arms: :func:`arm_summary`). A failing child is its arm's ``error``, never an exception.
    """
    base = dict(os.environ if env is None else env)
    with_env, nothing = action_env(base)
    if nothing:
        return {"skipped": f"the allocator action would change nothing: {nothing}"}
    without_env = dict(base)  # no allocator setting in it (action_env said the action changes something)
    if not str(spec.device).startswith("cuda"):
        from ...threads import child_env_threads

        child_env_threads(without_env)
        child_env_threads(with_env)
    out: dict[str, Any] = {"protocol": (
        f"the harness's {len(spec.shapes)} shape(s) in order, {warm_passes} warm + {passes} measured passes (>= {min_steps} steps each), "
        f"one fresh process per arm, without then with {ACTION_VAR}={ACTION_VALUE}; step ms = mean over passes 2..{passes}")}
    with tempfile.TemporaryDirectory(prefix="stackpart-memory-") as tmp:
        for arm, arm_env in (("without", without_env), ("with", with_env)):
            result = _run_child(spec, Path(src), Path(tmp), arm, arm_env, timeout_s, warm_passes, passes, min_steps)
            out[arm] = arm_summary(result)
            if keep_steps:
                out[arm]["steps"] = result.get("steps") or []
    out["effect"] = allocator_effect(out["without"], out["with"])
    return out


def _run_child(spec: Any, src: Path, tmp: Path, arm: str, env: dict[str, str], timeout_s: float,
               warm_passes: int, passes: int, min_steps: int) -> dict[str, Any]:
    """Run one arm's child; its JSON result, or ``{"error": ...}`` (timeout, crash, no result).
    Its environment is every child's (:func:`rewriter.engine.runner.child_env`: stackpart
    importable, no bytecode written, empty compile caches of its own) over ``env``, which holds
    the arm's allocator setting and, on CPU, the thread count."""
    from ...engine.runner import child_env, die_with_parent, package_path

    job = tmp / f"{arm}.job.json"
    result = tmp / f"{arm}.result.json"
    job.write_text(json.dumps({"harness": spec.model_dump(mode="json"), "src": str(Path(src).resolve()), "out": str(result),
                               "timeout_s": timeout_s, "warm_passes": warm_passes, "passes": passes, "min_steps": min_steps}))
    env = child_env(tmp / f"{arm}.caches", [package_path(tmp)], base=env)
    log = tmp / f"{arm}.log"
    t0 = time.perf_counter()
    try:
        with open(log, "wb") as f:
            subprocess.run([sys.executable, "-m", "rewriter.diagnose.memory_child", str(job)], stdout=f, stderr=subprocess.STDOUT,
                           env=env, cwd=str(tmp), timeout=timeout_s, preexec_fn=die_with_parent, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the {arm} arm did not finish within {timeout_s:.0f} s (killed)"}
    if not result.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return {"error": f"the {arm} arm exited without a result after {time.perf_counter() - t0:.1f} s: {tail[:500]}"}
    return json.loads(result.read_text())


RUNG = Rung(name="memory", order=25, run=run, quiet=True)
