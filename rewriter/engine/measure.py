"""Run a set of variants side by side and measure each: the one measurement engine of ``validate``
and of diagnose's search (docs/design.md, "The search").

Every variant is its own child process (:class:`.runner.ServedChild`) with empty Inductor and Triton
caches, built from its own tree (the original, a rewritten candidate) or compiled in place
(``whole``/``regional`` baselines). All start at once; their cold phases (first call per shape = the
compile each new shape costs, Dynamo's counters, numerics against the eager reference, the
``fail_on_recompile`` pass) run one after the other once every process has built, so no build
competes with a compile being timed; then the still-running warm processes are timed interleaved,
one call per variant per round in a rotating order, so machine drift hits every variant alike.

A variant is judged by what it did, never by a rule: an error (it raised, a build or harness
failure, a timeout, an out-of-memory), wrong numbers, weights that do not load, a silent fallback
to eager (no graph captured where the tree asks for torch.compile, a frame that hit the recompile
limit) or a recompilation after warm-up are its ``problems``; a variant with problems is not timed
and is never a plan.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cost import may_overlap, room_to_overlap

#: z of a two-sided 95% normal interval (the paired log-ratio interval of :func:`ratio_interval`).
Z95 = 1.96


@dataclass
class Options:
    """Knobs of one measurement (validate's CLI flags; the search sets its own).

    Attributes:
        backend: ``torch.compile`` backend of the in-place baselines (``whole``, ``regional``).
        force_backend: when set, every ``torch.compile`` in every child (the trees' own decorators
            and the user's calls included) uses this backend: diagnose's search on CPU measures
            Dynamo's capture, guards and recompiles with ``eager`` without Inductor's ~20 s CPU
            compiles. None: the trees compile as written.
        min_speedup, speed_gate: validate's speed gate (see :mod:`rewriter.validate.command`).
        timeout_s: per child process wait.
        warmup, reps, budget_s: timing: warm-up calls, max interleaved rounds, seconds per shape.
        seed: torch seed for model and inputs.
        keep: keep the temp dir (trees, job files, child stderr) for debugging.
        variants: which baselines validate runs besides eager and plan.
        overlap: let the reference's run overlap the first compiled variant's cold phase (on
            CUDA with >= 8 CPUs only; see :func:`.cost.may_overlap`).
        construct_on_device: build each child's model with the harness device as the default
            device (parameter init on the GPU; host build when that raises), see
            :func:`rewriter.harness.build_model`.
        parallel_cold: how many compiled variants run their cold phases at once (1: one after
            the other, each compile timed alone, as validate reports it). diagnose's search uses 2
            on a CUDA host with >= 8 CPUs (:func:`.cost.may_overlap`): Dynamo's and Inductor's
            front ends are single-threaded Python, so two compiles share a 16-core host with
            little contention, and the search's cold phases take about half the wall time.
        replicates: processes timed per variant (1: the cold-phase process only). With 2, every
            timed variant gets a second process (:class:`Replicas`: spawned once the first
            compiled cold phase is over, started when its own variant's is), warm-started from
            its own compile caches (its compile is not timed), and both are timed in the same
            interleaved rounds; per shape the variant's figure is its faster process's median
            (:func:`merge_replicates`). A process that runs slow through a whole shape's rounds
            then no longer decides the plan (docs/decisions.md, "Two processes per variant"),
            and the spread between the two
            processes is the run-to-run noise the decision uses (:func:`process_noise`).
            diagnose's search uses 2 on CUDA where the GPU has the memory for it.
        burst_ms: on CUDA, a timed sample is the per-call time of a back-to-back block of calls
            lasting about this many ms after one untimed lead-in call (:func:`.timing.time_burst`,
            ``torch.utils.benchmark``'s blocked measurement), so every variant is timed in the
            steady state of a loop rather than as one isolated call from a process woken cold;
            0: one isolated call per sample (:func:`.timing.time_call`). On CPU always one call.
        pin: on CUDA, where each timed process's main thread runs during the timing
            (:func:`.child.serve`, :func:`.cores.pin_plan`): ``shared``, all on one core, the one of
            median speed at a pure-Python loop (:func:`.cores.core_speeds`: a typical core of the
            host; the rounds run one process at a time, so they never contend for it, and every
            variant's host work runs on the same core: per-core speed, which differs on a shared
            VM host, is paired out like the drift the rotating rounds pair out); ``fastest``, all
            on the fastest core; ``own``, each on its own core; ``off``, where the scheduler puts
            them. A note says what was done.
        windows: timing windows per shape. With 2, the shapes are timed in two passes (8x512,
            8x384, 8x512, 8x384), each window with half of ``budget_s`` and ``reps``, and a
            process's figure per shape is the lower of its windows' medians, with that window's
            p10/p90 (the samples of both stay paired for :func:`ratio_interval`). A host stall that lasts a window
            (docs/decisions.md, "Two timing windows per shape") is a one-sided error like a slow process
            (:func:`merge_replicates`): it cannot make a plan faster than it is, so the faster
            window is the estimate. diagnose's search uses 2 on CUDA. It does not cover a
            slowness that both processes of a variant share because it was compiled in: the
            second process is warm-started from the first one's compile caches (Inductor's
            autotuning winners included), so the measured band leaves out compile-to-compile
            variance, which measured smaller than the host's (``benchmarks/compile_variance.py``;
            :attr:`contended`).
        replica_caches: what the second process (:attr:`replicates` 2) compiles from.
            ``reautotune`` (the default): a copy of its variant's caches less Inductor's stored
            autotuning winners (``*.best_config``), with the local autotune cache off in the child
            (:func:`.child.autotune_again`): the compiled code is reused and every Triton kernel's
            configs are benchmarked again, as a re-run would (about 0.5 s more; docs/decisions.md,
            "Replica caches re-autotune").
            ``warm``: the variant's own caches, every compile-time decision shared.
        contended: on CUDA with every timed process on one shared core (``pin`` ``shared`` or
            ``fastest``), one more window per shape after the others with a busy loop pinned to
            that core (:func:`.cores.contend`): each process's median there is its
            ``contended_ms``, the step with the host thread time-sliced, as a data-loader worker
            or a neighbour does it. It never enters ``median_ms``. A launch-heavy plan's
            step moves with a contended host core, not a slower one (``benchmarks/run_drift.py``,
            ``benchmarks/host_sensitivity.py``; docs/decisions.md, "Minimax over host conditions").
            diagnose's search uses it on CUDA, and the decision
            weighs both conditions (:func:`rewriter.diagnose.decide.decide`).
    """

    out: Path | None = None
    backend: str = "inductor"
    force_backend: str | None = None
    min_speedup: float = 0.95
    speed_gate: str = "auto"
    timeout_s: float = 600.0
    warmup: int = 3
    reps: int = 30
    budget_s: float = 10.0
    seed: int = 0
    keep: bool = False
    variants: tuple[str, ...] = ("eager", "plan", "whole", "regional")
    overlap: bool = True
    construct_on_device: bool = True
    parallel_cold: int = 1
    replicates: int = 1
    burst_ms: float = 20.0
    pin: str = "shared"
    windows: int = 1
    replica_caches: str = "reautotune"
    contended: bool = False


def on_device(opts: Options, device: str) -> Options:
    """``opts`` with its automatic timing knobs (``replicates`` 0, ``windows`` 0: validate's
    ``--processes auto``/``--windows auto``) resolved for ``device`` as diagnose's search sets
    them (:func:`rewriter.diagnose.search._options` calls it too): on CUDA two processes per
    variant, where the timing decides (one slow process can flip the choice), and two windows per
    shape (a host stall through one window; docs/decisions.md, "Two processes per variant" and
    "Two timing windows per shape"); on a CPU one of each
    (the timing there decides nothing). So a plan validate passes was timed the way the search
    timed it. Knobs already set are kept."""
    import dataclasses

    cuda = device.startswith("cuda")
    change: dict[str, Any] = {}
    if opts.replicates <= 0:
        change["replicates"] = 2 if cuda else 1
    if opts.windows <= 0:
        change["windows"] = 2 if cuda else 1
    return dataclasses.replace(opts, **change) if change else opts


#: :attr:`Options.replica_caches` values, and what the report says of each second process.
REPLICA_TEXT = {
    "warm": "warm-started from the first's compile caches",
    "reautotune": "from the first's compiled code with Inductor's autotuning run again (its stored winners left out)",
}
REPLICA_CACHES = tuple(REPLICA_TEXT)


@dataclass
class Variant:
    """One tree to run.

    Attributes:
        name: its key in the results (``eager`` is the reference and must come first).
        tree: the source tree the child imports the harness from.
        prepare: ``whole``/``regional`` to compile in place in the child (:func:`.variants.prepare`),
            None when the tree's own code does the compiling.
        judged: a candidate (its problems are failures) rather than a baseline (validate reports a
            baseline's failure as a note and leaves it out).
        compiles: the tree asks for ``torch.compile``: capturing no graph is a silent fallback.
        mark_dynamic: ``(plan line, arg, dim)`` of its plan's mark_dynamic actions, for the hint a
            ``ConstraintViolationError`` gets.
        plan_name: its plan file's name, for that hint.
        library_modules: the generated library modules of its plan (see the attribute).
        site: where its plan names the ``site:`` of those modules, ``{"target", "path", "line"}``
            (the plan file as given and the line of ``site:``), for the error a site the harness
            never calls gets; for the search's candidates ``{"target", "option"}``, the option
            that chose the site (no plan file says it); None where nothing names one.
    """

    name: str
    tree: Path
    prepare: str | None = None
    judged: bool = True
    compiles: bool = False
    mark_dynamic: list[tuple[int | None, str, int]] = field(default_factory=list)
    plan_name: str = "plan.yaml"
    #: the generated ``_stackpart/library.py`` files of its plan (relative to ``tree``), which its
    #: child checks were applied while the harness built the model
    library_modules: list[str] = field(default_factory=list)
    site: dict[str, Any] | None = None
    #: a ``torch.compiler.set_stance`` stance its child runs under from the start, its timing
    #: included: ``force_eager`` for validate's eager reference (the program with compilation
    #: off, also where its own code calls torch.compile); None: the default stance.
    stance: str | None = None


@dataclass
class Measurement:
    """What :func:`measure` found.

    Attributes:
        results: per variant name: the cold summary (``compile``, ``per_shape_cold``,
            ``compile_s_per_start``, ``shape_buckets``, ...), ``error``, ``numerics``,
            ``problems`` (sentences), and once timed ``step_ms`` (mean over shapes of the
            per-shape medians, ms), ``speedup_vs_eager`` and ``amortization``
            (:func:`.amortize.amortize`).
        timing: per shape ``{"shape", "timing": {name: summarize(...)}}``.
        samples: per shape ``{name: [seconds, ...]}`` in round order (paired across variants).
        errors: what stopped the measurement (the reference failed, the timing run failed).
        notes: what the reader should know (overlap, high-precision run, skipped variants).
        hints: extra lines for a failing judged variant (child output tail, constraint hints).
        clock: where the wall time went (see :func:`.cost.breakdown`).
    """

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    timing: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, list[float]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hints: dict[str, list[str]] = field(default_factory=dict)
    clock: dict[str, float] = field(default_factory=dict)
    reference_overlapped: bool = False
    timing_wall_s: float = 0.0

    def ok(self, name: str) -> bool:
        """The variant ran, has no problems and was timed."""
        r = self.results.get(name) or {}
        return not r.get("error") and not r.get("problems") and r.get("step_ms") is not None


#: ``on_event(name, event, detail)``: ``event`` is ``cold`` (its cold phase ended; ``detail`` is its
#: result row) or ``skipped`` (``detail`` says why) or ``timing`` (``detail`` is the shape).
Progress = Callable[[str, str, Any], None]


def measure(
    spec_run: Any,
    variants: list[Variant],
    opts: Options,
    workdir: Path,
    *,
    amortization: dict[str, Any] | None = None,
    stop_on_wrong_numbers: bool = False,
    deadline: float | None = None,
    on_event: Progress | None = None,
    partial: Measurement | None = None,
) -> Measurement:
    """Measure ``variants`` (the first must be ``eager``, the reference) and return what was seen.

    Args:
        spec_run: the harness (:class:`rewriter.plan.Harness`) with the device it runs on.
        variants: what to run, cold phases in this order (the caller orders by expected value).
        opts: timing and process knobs.
        workdir: a temp dir (job files, child stderr, the reference's saved weights and inputs).
        amortization: ``{"runs", "restarts"}`` for the break-even figures, or None.
        stop_on_wrong_numbers: skip the timing when a judged variant's numbers are wrong
            (validate: nothing to time once the plan is wrong).
        deadline: a ``time.perf_counter()`` value; a variant whose cold phase would start after it
            is not measured (the search's ``--budget``) and says so.
        on_event: progress callback (:data:`Progress`).
        partial: a :class:`Measurement` to fill in place, so a caller that is interrupted
            (Ctrl-C) still holds the variants finished so far.

    Every child is terminated on the way out, also on KeyboardInterrupt.
    """
    names = [v.name for v in variants]
    if len(set(names)) != len(names):  # each is a process, a job file and a result named after it
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"measure: variant names must be unique, got {', '.join(dup)} more than once")
    m = partial if partial is not None else Measurement()
    children: dict[str, Any] = {}
    try:
        _run(m, spec_run, variants, opts, workdir, children, amortization, stop_on_wrong_numbers, deadline, on_event)
    finally:
        t_teardown = time.perf_counter()
        # every result is read by now (or no longer wanted: a child still building, compiling or
        # waiting for a failed reference); all are terminated at once and then reaped
        for child in children.values():
            child.terminate()
        for child in children.values():
            child.close()
        m.clock["teardown_s"] = time.perf_counter() - t_teardown
    return m


def _run(m, spec_run, variants, opts, workdir, children, amortization, stop_on_wrong_numbers, deadline, on_event):  # type: ignore[no-untyped-def]
    from .runner import ServedChild
    from .verdict import constraint_hint, numerics_failures

    by_name = {v.name: v for v in variants}
    assert variants and variants[0].name == "eager", "the eager reference comes first"
    ref = workdir / "ref"
    ref.mkdir(exist_ok=True)
    caches = workdir / "caches"
    job = {
        "harness": spec_run.model_dump(),
        "backend": opts.backend,
        "force_backend": opts.force_backend,
        "seed": opts.seed,
        "ref": str(ref),
        "warmup": opts.warmup,
        "reps": opts.reps,
        "budget_s": opts.budget_s,
        "construct_on_device": opts.construct_on_device,
    }
    results = m.results
    cold: dict[str, dict[str, Any]] = {}
    # Every variant's process starts at once: their interpreter starts, imports and model builds
    # (CPU work, tens of seconds for an HF model) overlap the eager reference's cold phase, which
    # compiles nothing. Before the first measured compile every child must have built (and now
    # waits for its ``go``), so no build runs beside a compile being timed; the compiled variants
    # then run their cold phases one after the other. With ``overlap`` the reference's own run
    # (outputs, block share, the float64 run) goes on during the first compiled variant's cold
    # phase, which waits for it only before its first comparison: the reference then holds one
    # core and the GPU's spare time while the compile runs on the others.
    clock = m.clock
    clock["waiting_for_builds_s"] = 0.0
    t_spawn = time.perf_counter()
    for v in variants:
        children[v.name] = ServedChild(
            dict(job, phase="cold", variants=[v.name], tree=str(v.tree), prepare=v.prepare, reference=v.name == "eager",
                 library_modules=v.library_modules, site=v.site, stance=v.stance),
            workdir, f"cold-{v.name}", caches / v.name, opts.timeout_s,
        )
    overlap = may_overlap(opts.overlap, spec_run.device)
    built: dict[str, bool] = {}

    def emit(name: str, event: str, detail: Any) -> None:
        if on_event is not None:
            on_event(name, event, detail)

    def record(name: str, child: Any) -> bool:
        """Collect ``name``'s cold phase; False when the measurement cannot go on."""
        v = by_name[name]
        res = child.wait_cold()
        row = results[name] = {
            "child_wall_s": res.wall_s,
            "startup_s": getattr(child, "built_at", child.started) - child.started,
            "problems": [],
        }
        if res.error:
            err = res.error
            text = f"{err['kind']}: {err['message']}"
            row["error"] = text
            row["error_kind"] = err["kind"]
            if name == "eager":
                m.errors.append(f"the original model (eager reference) failed: {text}")
                m.hints.setdefault("eager", []).extend(_stderr_hint(res))
                emit(name, "cold", row)
                return False
            if err["kind"] == "raised":
                row["problems"].append(f"the rewritten model raised: {err['message']}")
                hint = constraint_hint(err.get("detail") or err["message"], v.mark_dynamic, v.plan_name)
                if hint:
                    m.hints.setdefault(name, []).append(hint)
            else:
                row["problems"].append(f"the rewritten tree failed: {text}")
                m.hints.setdefault(name, []).extend(_stderr_hint(res))
            emit(name, "cold", row)
            replicas.end(name)
            return True
        cold[name] = res.payload
        row.update(cold_summary(res.payload))
        sd_err = res.payload.get("info", {}).get("state_dict_error")
        if sd_err:
            row["error"] = sd_err
            row["problems"].append(f"the rewritten model does not load the original's weights: {sd_err}")
        elif name != "eager":
            _judge(row, v, res.payload, numerics_failures)
        if name != "eager" and not v.judged:
            row["numerics"] = "ok" if not numerics_failures(res.payload) else "differs"
        emit(name, "cold", row)
        if not row["problems"] and not row.get("error"):
            replicas.started(name)
        else:
            replicas.end(name)
        if name != "eager":
            replicas.spawn()
        return True

    replicas = Replicas(m, spec_run, variants, job, workdir, caches, opts, children, deadline, emit)
    pending = None  # the reference, when its run overlaps the next variant's cold phase
    names = [v.name for v in variants]
    running: list[tuple[str, Any]] = []  # compiled variants whose cold phase is under way
    width = max(1, opts.parallel_cold)

    def settle(keep: int) -> bool:
        """Record the oldest running cold phases until at most ``keep`` run (the reference first
        when it overlapped); False when the measurement cannot go on."""
        nonlocal pending
        while len(running) > keep:
            if pending is not None:
                pending, reference = None, pending
                if not record("eager", reference):
                    return False
            oldest, child_ = running.pop(0)
            if not record(oldest, child_):
                return False
        if keep == 0 and pending is not None:  # no compiled variant was left to overlap it with
            pending, reference = None, pending
            if not record("eager", reference):
                return False
        return True

    if width > 1:
        m.notes.append(
            f"cold phases ran {width} at a time: a compile's seconds include what the other compile "
            "took from the host's CPUs (validate times each alone)"
        )
    for k, name in enumerate(names):
        child = children[name]
        if k == 1:
            clock["reference_s"] = time.perf_counter() - t_spawn
            t_wait = time.perf_counter()
            for other in names[1:]:
                built[other] = children[other].wait_built()
            clock["waiting_for_builds_s"] = time.perf_counter() - t_wait
        if k > 0 and deadline is not None and time.perf_counter() > deadline:
            why = "not measured: the search budget was spent before its cold phase"
            results[name] = {"skipped": why, "problems": []}
            child.terminate()
            replicas.end(name)
            emit(name, "skipped", why)
            continue
        started = built.get(name, False) or (name not in built and child.wait_built())
        if started:
            child.go()
        # the reference overlaps the *next* variant's cold phase: with none to follow (every compile
        # pruned, only the program as it is measured) it runs on its own
        saved = child.wait_weights_saved() if k == 0 and overlap and started and len(names) > 1 else None
        if saved is not None:
            room = room_to_overlap(saved)
            if room is None:
                pending = child
                m.reference_overlapped = True
                m.notes.append(
                    "the eager reference's run overlapped the first compiled variant's cold phase (one CPU core, "
                    "spare GPU time); --no-overlap times that compile alone"
                )
                continue
            m.notes.append(f"reference not overlapped with the first compiled variant's cold phase: {room}")
        if k == 0:
            if not record(name, child):
                return
            continue
        running.append((name, child))
        if not settle(width - 1):
            return
    if not settle(0):
        return
    clock["spawn_to_cold_phases_done_s"] = time.perf_counter() - t_spawn
    hp_run = (cold.get("eager") or {}).get("high_precision")
    if hp_run:
        m.notes.extend(reference_notes(hp_run))
    results["eager"]["numerics"] = "reference"
    rng = (cold.get("eager") or {}).get("info", {}).get("rng")
    if rng:
        m.notes.append(
            f"training step draws random numbers ({rng['count']} source(s): {', '.join(rng['sources'][:3])}"
            f"{', ...' if rng['count'] > 3 else ''}): made comparable with {rng['made_comparable']}; compiled "
            "timings include eager's random kernels"
        )
    if m.errors:
        return
    if stop_on_wrong_numbers and any(results.get(v.name, {}).get("numerics") == "FAIL" for v in variants if v.judged):
        m.notes.append("timing skipped: the rewritten model's numbers are wrong")
        return
    timeable = [
        n for n in names
        if n in cold and "state_dict_error" not in cold[n].get("info", {}) and children[n].alive
        and not (by_name[n].judged and n != "eager" and results[n]["problems"])
    ]
    timed = {n: children[n] for n in timeable}
    t_rep = time.perf_counter()
    timed.update(replicas.collect(timeable))
    if replicas.spawned:
        clock["replicates_s"] = time.perf_counter() - t_rep  # the wait after the cold phases only
    t_timing = time.perf_counter()
    timing, samples, error = interleave(timed, spec_run.shapes, opts, emit, m.notes, device=spec_run.device)
    m.timing_wall_s = time.perf_counter() - t_timing
    if error:
        m.errors.append(f"the timing run failed: {error}")
        return
    m.timing, m.samples = merge_replicates(timing, samples, timeable)
    # the step of a variant timed in two processes is its faster process's, shape by shape
    mean_ms = {n: statistics.fmean(row["timing"][n]["median_ms"] for row in m.timing) for n in timeable}
    from .amortize import amortize

    for n in timeable:
        results[n]["step_ms"] = mean_ms[n]
        loaded = [row["timing"][n].get("contended_ms") for row in m.timing]
        if loaded and all(loaded):  # every shape timed with the host core contended (Options.contended)
            results[n]["contended_step_ms"] = statistics.fmean(loaded)
        results[n]["speedup_vs_eager"] = mean_ms["eager"] / mean_ms[n] if mean_ms[n] > 0 else None
        if n != "eager":
            results[n]["amortization"] = amortize(
                mean_ms["eager"] / 1e3,
                mean_ms[n] / 1e3,
                results[n]["compile_s_per_start"],
                compiles_counted(cold[n]),
                results[n]["shape_buckets"],
                amortization["runs"] if amortization else None,
                amortization["restarts"] if amortization else 1,
            )


#: :attr:`Options.pin`'s values (:func:`.cores.pin_plan`).
PIN_MODES = ("shared", "fastest", "own", "off")
#: The key of a variant's second timed process in :func:`interleave`'s results, before
#: :func:`merge_replicates` folds it into the variant's own.
REPLICA = "#2"
#: GPU memory a replicate may take, as a share of what is free once every variant's process is
#: up: each needs about its variant's peak allocated bytes again, plus a CUDA context.
REPLICA_MEMORY_SHARE = 0.8
#: Variance of the smaller of two standard normal draws (the variance of a two-process figure,
#: in units of one process's variance): 1 - 1/pi.
MIN_OF_TWO_VARIANCE = 1 - 1 / math.pi
#: Bytes of a CUDA context and allocator slack per process (about 0.5-1 GiB on a datacenter GPU).
CONTEXT_BYTES = 1 << 30


def replica_room(results: dict[str, dict[str, Any]], names: list[str], device: str) -> str | None:
    """Why second processes of ``names`` would not fit on the device (None: they fit, or the
    device is a CPU): each needs its variant's peak allocated bytes (the cold phase's
    ``max_memory_allocated_bytes``; for a variant whose cold phase has not run yet, the largest
    peak measured so far) x 1.25 plus :data:`CONTEXT_BYTES`, all within
    :data:`REPLICA_MEMORY_SHARE` of the device's free memory now (``torch.cuda.mem_get_info``;
    the variants still to run have their processes up and their models built already). A variant
    whose cold phase has not run yet (no row in ``results``) will still grow to its own peak
    (activations, compile workspace), which the replicas must not take: the largest peak measured
    so far x 1.25 is kept free for each."""
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index or 0
    free, _total = torch.cuda.mem_get_info(index)
    peaks = {n: (results.get(n) or {}).get("max_memory_allocated_bytes") for n in names}
    known = max((p for p in peaks.values() if p), default=0)
    need = sum(int((peaks[n] or known) * 1.25) + CONTEXT_BYTES for n in names)
    pending = [n for n in names if n not in results]
    keep = len(pending) * int(known * 1.25)
    if need + keep > REPLICA_MEMORY_SHARE * free:
        kept = (f" (besides {keep / 2**30:.1f} GiB kept for the {len(pending)} cold phase(s) still to run)"
                if pending else "")
        return (f"a second process per variant needs about {need / 2**30:.1f} GiB{kept} and the device has "
                f"{free / 2**30:.1f} GiB free: each variant is timed in its cold-phase process only")
    return None


class Replicas:
    """The second timed process of each variant (:attr:`Options.replicates` > 1), started early.

    They are spawned together once the first compiled variant's cold phase is over (:meth:`spawn`,
    sized by :func:`replica_room` with the peak memory measured so far), so their interpreter
    starts, imports and model builds overlap the later cold phases instead of following them
    (docs/decisions.md, "Replicas spawned early, deferred when memory is short"). A replica gets
    its ``go`` once its own variant's cold phase has been recorded
    without a problem (:meth:`started`): it then compiles from that variant's caches, warm, and
    records nothing to judge (the child's ``replica`` job flag). A variant whose cold phase fails,
    has a problem or is skipped by the deadline has its replica ended then (:meth:`end`), so it
    holds no memory through the later cold phases; :meth:`collect` waits for the replicas of the
    variants that will be timed and ends the others. Their builds and warm
    compiles share the host with the cold phases still running, which the note says. With
    ``replicates`` 1 (CPU) nothing is spawned."""

    def __init__(self, m, spec_run, variants, job, workdir, caches, opts, children, deadline, emit):  # type: ignore[no-untyped-def]
        self.m, self.spec_run, self.job, self.workdir, self.caches = m, spec_run, job, workdir, caches
        self.opts, self.children, self.deadline, self.emit = opts, children, deadline, emit
        self.variants = {v.name: v for v in variants}
        self.wanted = opts.replicates > 1 and len(variants) > 1
        self.spawned = False
        self.deferred = False  # the spawn waited for room (:meth:`spawn`)
        self.procs: dict[str, Any] = {}
        self.ready: set[str] = set()  # variants whose cold phase was recorded without a problem
        self.ended: set[str] = set()  # variants that will not be timed (:meth:`end`)
        if opts.replica_caches not in REPLICA_CACHES:
            raise ValueError(f"replica_caches={opts.replica_caches!r}: expected one of {', '.join(REPLICA_CACHES)}")
        self.mode = opts.replica_caches

    def cache_root(self, name: str) -> Path:
        """The compile caches ``name``'s replica compiles from: its variant's own (``warm``) or a
        directory of its own (``reautotune``, filled by :meth:`started`)."""
        return self.caches / name if self.mode == "warm" else self.caches / f"{name}.replica"

    def _seed_caches(self, name: str) -> None:
        """For ``reautotune``: copy ``name``'s caches into its replica's directory, less the stored
        autotuning winners (``*.best_config``), before the replica's ``go`` (it has not compiled
        yet: the caches are read on its first call)."""
        if self.mode != "reautotune" or not (self.caches / name).is_dir():
            return
        shutil.copytree(self.caches / name, self.cache_root(name), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.best_config"), symlinks=True)

    def spawn(self, final: bool = False) -> None:
        """Spawn a replica of every variant not failed so far (once; later calls do nothing).

        Where they do not fit yet only because memory is kept for cold phases still to run
        (:func:`replica_room`), the spawn is deferred: each later call (after each cold phase, and
        ``final`` from :meth:`collect` once they are all over) tries again: memory kept for the cold phases
        still to run can leave no room for any replica at the first try while the same replicas
        fit once those are over (docs/decisions.md, "Replicas spawned early, deferred when memory
        is short")."""
        from .runner import ServedChild

        if not self.wanted or self.spawned:
            return
        m = self.m
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.spawned = True
            m.notes.append("one process per variant timed: the search budget was spent before second processes could start")
            return
        names = [n for n in self.variants if n not in self.ended
                 and not (m.results.get(n) or {}).get("problems") and not (m.results.get(n) or {}).get("error")]
        if len(names) < 2:
            self.spawned = True
            return
        why = replica_room(m.results, names, self.spec_run.device)
        if why and not final and any(n not in m.results for n in names):
            self.deferred = True
            return
        self.spawned = True
        if why:
            m.notes.append(why)
            return
        if self.deferred:
            waited = sum(1 for n in names if n not in m.results)
            m.notes.append(
                "second processes started " + (f"with {waited} cold phase(s) still to run" if waited else "after the cold phases")
                + ": earlier they did not fit beside the memory kept for the cold phases still to run"
            )
        for n in names:
            v = self.variants[n]
            self.procs[n] = self.children[n + REPLICA] = ServedChild(
                dict(self.job, phase="cold", variants=[n], tree=str(v.tree), prepare=v.prepare, reference=False, replica=True,
                     library_modules=v.library_modules, site=v.site, reautotune=self.mode == "reautotune"),
                self.workdir, f"replica-{n}", self.cache_root(n), self.opts.timeout_s,
            )
        if self.emit is not None:
            self.emit("*", "replicates", len(self.procs))
        for n in list(self.ready):
            self.started(n)

    def started(self, name: str) -> None:
        """``name``'s cold phase was recorded without a problem: its replica may compile from
        its caches now (the ``go`` waits in the pipe while the replica still builds)."""
        self.ready.add(name)
        child = self.procs.get(name)
        if child is not None and getattr(child, "go_at", None) is None:
            self._seed_caches(name)
            child.go()

    def end(self, name: str) -> None:
        """``name`` will not be timed (its cold phase failed, had a problem, or was skipped by the
        deadline): its replica, if spawned, is ended now rather than holding its host memory and
        GPU memory through the later cold phases; one spawned later is never made
        (:meth:`spawn` skips failed variants, :meth:`collect` ends any other)."""
        self.ended.add(name)
        self.ready.discard(name)
        child = self.procs.pop(name, None)
        if child is not None:
            child.terminate()

    def collect(self, timeable: list[str]) -> dict[str, Any]:
        """The replicas that came up for the variants in ``timeable``, keyed ``name + REPLICA``;
        every other replica is ended. One that failed is a note; its variant keeps one process.
        A spawn deferred for room (:meth:`spawn`) is tried a last time first, for ``timeable``."""
        if self.wanted and not self.spawned:
            for n in [n for n in self.variants if n not in timeable]:
                self.ended.add(n)
            self.spawn(final=True)
        if not self.procs:
            return {}
        m = self.m
        late = self.deadline is not None and time.perf_counter() > self.deadline
        wanted = [n for n in self.procs if n in timeable] if len(timeable) > 1 and not late else []
        out: dict[str, Any] = {}
        failed = []
        for n, child in self.procs.items():
            if n not in wanted:
                child.terminate()
                continue
            self.started(n)
            res = child.wait_cold()
            if not res.error and child.alive:
                out[n + REPLICA] = child
            else:
                err = res.error or {"kind": "crash", "message": "it did not stay up to be timed"}
                failed.append(f"{n} ({err['kind']}: {' '.join(str(err['message']).split())[:160]})")
                child.terminate()
        if late:
            m.notes.append("one process per variant timed: the search budget was spent before the second processes were up")
        elif wanted:
            m.notes.append(
                f"timed in two processes each ({len(out)} of {len(wanted)} variants; the second {REPLICA_TEXT[self.mode]}, "
                "built while later cold phases ran): per shape a variant's figure is its faster process's median"
                + (f"; no second process for {', '.join(failed)}" if failed else "")
            )
        return out


def merge_replicates(
    timing: list[dict[str, Any]], samples: list[dict[str, list[float]]], names: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, list[float]]]]:
    """Fold each variant's second process (key ``name + REPLICA``) into its own figures: per shape
    the process with the lower median stands for the variant (its summary and its samples, which
    stay paired round by round with every other variant's), and the summary gains
    ``processes_ms`` (both medians, the cold-phase process first) and ``process`` (0 or 1, which
    one stood). A slow process is a one-sided error (a busy core, a slow placement: it cannot make
    the program faster than it is), so the faster one is the estimate. Variants without a second
    process are left as they are. Returns new ``(timing, samples)`` keyed by ``names`` only."""
    out_t, out_s = [], []
    for row, per in zip(timing, samples):
        t, s = {}, {}
        for n in names:
            first, second = row["timing"].get(n), row["timing"].get(n + REPLICA)
            if second is None or not second.get("n") or not (first or {}).get("n"):
                t[n], s[n] = first, per.get(n, [])
                continue
            pick = 1 if second["median_ms"] < first["median_ms"] else 0
            chosen = (first, second)[pick]
            t[n] = dict(chosen, processes_ms=[first["median_ms"], second["median_ms"]], process=pick)
            both = [x["contended_ms"] for x in (first, second) if x.get("contended_ms")]
            if both:  # the contended window's too: the faster process's (the same one-sided error)
                t[n]["contended_ms"] = min(both)
                if len(both) == 2:
                    t[n]["contended_processes_ms"] = both
            s[n] = per[n + REPLICA] if pick else per[n]
        out_t.append(dict(row, timing=t))
        out_s.append(s)
    return out_t, out_s


def process_noise(timing: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Run-to-run noise from the variants timed in two processes: ``d = ln(m1 / m2)`` of the two
    medians per variant and shape is what a re-run would move that figure by. A robust scale
    (median absolute ``d``, so one slow process does not set it: it is filtered by
    :func:`merge_replicates` already) gives sigma of one process's log-median,
    ``median|d| / (0.6745 x sqrt 2)``. A variant's figure is the faster of its two processes, whose
    variance is 0.682 sigma^2 for normal errors (the expected minimum of two, e.g. David & Nagaraja,
    *Order Statistics*, table of normal order-statistic moments), so two candidates differ beyond
    the noise when their log ratio exceeds ``1.96 x sqrt(2 x 0.682) x sigma`` (= ``2.40 x
    median|d|``), the ``share`` returned.

    ``contended_share``, where the variants were also timed with their host core contended
    (:attr:`Options.contended`) in both processes, is the band of those figures, computed the same
    way. Returns ``{"share", "median_abs_log", "pairs"[, "contended_share"]}``, or None with fewer
    than 3 pairs."""
    ds = []
    for row in timing:
        for t in row["timing"].values():
            ms = (t or {}).get("processes_ms")
            if ms and ms[0] > 0 and ms[1] > 0:
                ds.append(abs(math.log(ms[0] / ms[1])))
    if len(ds) < 3:
        return None
    med = statistics.median(ds)
    sigma = med / (0.6745 * math.sqrt(2))
    out = {"share": Z95 * math.sqrt(2 * MIN_OF_TWO_VARIANCE) * sigma, "median_abs_log": med, "pairs": len(ds)}
    loaded = [abs(math.log(ms[0] / ms[1])) for row in timing for t in row["timing"].values()
              if (ms := (t or {}).get("contended_processes_ms")) and ms[0] > 0 and ms[1] > 0]
    if len(loaded) >= 3:  # the same band for the contended window's figures (Options.contended)
        lmed = statistics.median(loaded)
        out["contended_share"] = Z95 * math.sqrt(2 * MIN_OF_TWO_VARIANCE) * lmed / (0.6745 * math.sqrt(2))
    return out


def environment(device: str, requested: str | None) -> dict[str, Any]:
    """Where a measurement ran (``timed_on`` cpu/cuda, the device asked for and why this one was
    used, the CPU threads of a CPU run, the device name, torch and Python versions), for every
    report the engine's figures go into. ``requested``: the harness's device, None when unset."""
    import platform

    import torch

    from ..harness import device_record
    from ..threads import cpu_threads

    cuda = device.startswith("cuda")
    return {
        "timed_on": "cuda" if cuda else "cpu",
        **{k: v for k, v in device_record(requested, device).items() if k != "device"},
        **({} if cuda else {"cpu_threads": cpu_threads()}),
        "device_name": torch.cuda.get_device_name(0) if cuda else (platform.processor() or platform.machine()) + " CPU",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
    }


def relabel(obj: Any, prefixes: dict[str, str]) -> Any:
    """Replace temp-dir paths in every string of ``obj`` (``{old prefix: new}``): validate's original
    tree reads ``a/``, its rewritten ``b/`` (the diff's convention), the search's trees read as
    paths under SRC, so a report names files the reviewer can find."""
    if isinstance(obj, str):
        for old, new in prefixes.items():
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, dict):
        return {k: relabel(v, prefixes) for k, v in obj.items()}
    if isinstance(obj, list):
        return [relabel(v, prefixes) for v in obj]
    return obj


def _judge(row: dict[str, Any], v: Variant, payload: dict[str, Any], numerics_failures: Any) -> None:
    """A judged variant's problems from its cold phase: wrong numbers, silent fallbacks to eager,
    recompiles after warm-up (each a sentence in ``row["problems"]``)."""
    if not v.judged:
        return
    fails = numerics_failures(payload)
    row["problems"].extend(fails)
    row["numerics"] = "FAIL" if fails else "ok"
    compile_ = payload.get("compile", {})
    if v.compiles and not compile_.get("unique_graphs"):
        row["problems"].append("silent fallback to eager: the plan asks for torch.compile but Dynamo captured no graph")
    for hit in compile_.get("recompile_limit_hits", []):
        row["problems"].append(f"silent fallback to eager: a plan region hit the recompile limit: {hit}")
    stance = payload.get("fail_on_recompile", {})
    if stance.get("ok") is False:
        row["problems"].append(f"recompiles after warm-up (fail_on_recompile): {stance.get('error', '')}")
    elif not stance.get("supported"):
        row.setdefault("notes", []).append("torch.compiler.set_stance is missing in this torch: fail_on_recompile check skipped")


def interleave(
    children: dict[str, Any], shapes: list[dict[str, int]], opts: Options, emit: Callable[[str, str, Any], None] | None = None,
    notes: list[str] | None = None, device: str = "cpu",
) -> tuple[list[dict[str, Any]], list[dict[str, list[float]]], str | None]:
    """Time every variant per shape: warm-up calls each, then rounds of one sample per variant in
    a rotating order (each in its own warm process), until ``opts.reps`` rounds or
    ``opts.budget_s`` seconds (at least 3 rounds). On CUDA a sample is a back-to-back block of
    about ``opts.burst_ms`` (:func:`.timing.time_burst`) and the processes' main threads are
    pinned as ``opts.pin`` says (:func:`.cores.pin_plan`: by default all on the core of median speed);
    on CPU one isolated call. Returns per-shape
    summaries, the raw samples per shape (round order, paired across variants; seconds per
    call), or an error. A variant's second process (``name + REPLICA``) that fails is dropped from
    then on, said in ``notes``: it is there to make the figures robust, and its variant keeps its
    first process's."""
    from .timing import summarize

    names = list(children)
    rows, raw = [], []
    cuda = device.startswith("cuda")
    burst = {"burst_ms": opts.burst_ms} if cuda and opts.burst_ms > 0 else {}
    pins: dict[str, int] = {}
    if opts.pin not in PIN_MODES:
        raise ValueError(f"Options.pin: expected one of {', '.join(PIN_MODES)}, got {opts.pin!r}")
    if cuda and opts.pin != "off" and hasattr(os, "sched_getaffinity"):
        from .cores import ONE_CORE_MODES, core_speeds, pin_plan

        cores = sorted(os.sched_getaffinity(0))
        have = len(cores)
        speeds = core_speeds(cores[2:]) if opts.pin in ONE_CORE_MODES and have >= 3 else {}
        pins = pin_plan(names, cores, opts.pin, speeds)
        if notes is not None:
            if pins and opts.pin in ONE_CORE_MODES:
                core = next(iter(pins.values()))
                which = "the fastest" if opts.pin == "fastest" else "the one of median speed"
                speed = (f", {which} of {len(speeds)} at a pure-Python loop ({speeds[core] * 1e6:.0f} us a loop; fastest "
                         f"{min(speeds.values()) * 1e6:.0f} us, median {statistics.median(speeds.values()) * 1e6:.0f} us)") if core in speeds else ""
                notes.append(f"the timed processes' main threads all pinned to CPU core {core}{speed} "
                             f"({len(pins)} processes, one running at a time): per-core speed is the same for every variant")
            elif pins:
                notes.append(f"each timed process's main thread pinned to its own CPU core ({len(pins)} processes)")
            else:
                need = 3 if opts.pin in ONE_CORE_MODES else len(names) + 2
                notes.append(f"timed processes not pinned to cores: {len(names)} processes need {need} cores, {have} available")

    def failed(n: str, reply: dict[str, Any], samples: dict[str, list[float]]) -> str | None:
        """The error that stops the timing, or None when ``n`` was a second process (dropped)."""
        why = f"{n}: {reply['error']['kind']}: {reply['error']['message']}"
        if not n.endswith(REPLICA):
            return why
        names.remove(n)
        samples.pop(n, None)
        children[n].terminate()
        if notes is not None:
            which = ("its contended figures are its first process's, its quiet ones still both processes'"
                     if quiet is not names else "that variant's figures are its first process's")  # quiet: set below
            notes.append(f"the second process of {n[: -len(REPLICA)]} failed while timing and was dropped "
                         f"({' '.join(why.split())[:200]}): {which}")
        return None

    windows = max(1, int(opts.windows))
    reps = max(1, math.ceil(opts.reps / windows))
    budget = opts.budget_s / windows
    contended: list[dict[str, float]] = [{} for _ in shapes]  # the contended window's median per process
    spans: list[dict[str, list[list[float]]]] = [{n: [] for n in names} for _ in shapes]  # each quiet window's samples
    calls: list[dict[str, int]] = [{} for _ in shapes]  # calls per block: each shape's own (sized once per shape in the child)
    shared = sorted(set(pins.values())) if len(set(pins.values())) == 1 and len(pins) == len(names) else []
    passes = windows + (1 if opts.contended and shared else 0)
    if opts.contended and not shared and notes is not None and cuda:
        notes.append("not timed with a contended host core: the timed processes are not all pinned to one core (--pin)")
    quiet = names  # the processes the quiet windows timed (a second process dropped there is gone from every shape)
    for w in range(passes):
        loaded = w == windows  # the contended window, after the quiet ones
        hog = None
        if loaded:
            quiet = list(names)  # one dropped in the contended window keeps its quiet figures: median_ms never moves with it
            from .cores import contend

            try:
                hog = contend(shared[0])
            except OSError as exc:
                if notes is not None:
                    notes.append(f"not timed with a contended host core: the busy loop could not start ({exc})")
                break
        try:
            if hog is not None:
                time.sleep(0.2)  # the loop pinned and running before the first round (inside the try: killed on an interrupt)
            err = _window(children, shapes, opts, emit, notes, names, pins, burst, reps, budget, w, windows, loaded,
                          spans, contended, calls, failed)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        if err and loaded:  # the contended window is supplementary: the quiet figures stand without it
            for per in contended:
                per.clear()
            if notes is not None:
                notes.append(f"no contended-core figures: the timing with the busy loop stopped ({' '.join(err.split())[:200]}); "
                             "the quiet windows' figures stand")
            break
        if err:
            return [], [], err
    for i, shape in enumerate(shapes):
        # every window's samples, paired round by round (a dropped second process is gone from every shape)
        per = {n: [x for span in spans[i][n] for x in span] for n in quiet}
        for n in set(contended[i]) - set(names):  # dropped in the contended window: none of its contended figures
            del contended[i][n]
        summary = {n: summarize(v) for n, v in per.items()}
        for n, t in summary.items():
            medians = [statistics.median(span) * 1e3 for span in spans[i][n]]
            if windows > 1 and t.get("n") and medians:
                t["windows_ms"] = medians
                # the spread of the window that stands, so p10 <= median <= p90 in every report
                standing = summarize(spans[i][n][medians.index(min(medians))])
                t.update(median_ms=standing["median_ms"], p10_ms=standing["p10_ms"], p90_ms=standing["p90_ms"])
            if t.get("n") and n in contended[i]:
                t["contended_ms"] = contended[i][n]
            if burst and t.get("n"):
                t["calls_per_sample"] = calls[i].get(n, 1)
        rows.append({"shape": shape, "timing": summary})
        raw.append(per)
    if windows > 1 and notes is not None:
        notes.append(f"each shape was timed in {windows} windows apart in time (the shapes in turn); a process's figure "
                     "per shape is its faster window's median (a host stall through one window cannot make a plan faster)")
    if any(contended) and notes is not None:
        notes.append(f"then each shape once more with a busy loop on the shared core {shared[0]} (a contended host core: "
                     "a data-loader worker or a neighbour time-slicing with the main thread): each plan's 'contended' step")
    if burst and notes is not None:
        notes.append(
            f"each timing sample is the per-call time of a back-to-back block of about {opts.burst_ms:.0f} ms after "
            "one untimed call (steady state of a loop, torch.utils.benchmark's blocked measurement)"
        )
    return rows, raw, None


def _window(children, shapes, opts, emit, notes, names, pins, burst, reps, budget, w, windows, loaded,  # type: ignore[no-untyped-def]
            spans, contended, calls, failed) -> str | None:
    """One timing window of :func:`interleave` over every shape; the error that stops the timing,
    or None. A quiet window's samples per process go to ``spans`` (one list per window); a
    ``loaded`` window's median goes to ``contended`` only (its samples are not paired with the
    quiet rounds)."""
    for i, shape in enumerate(shapes):
        if emit is not None:
            label = (f"{shape} (host core contended)" if loaded
                     else shape if windows == 1 else f"{shape} (window {w + 1} of {windows})")
            emit("*", "timing", label)
        got: dict[str, list[float]] = {n: [] for n in names}
        unpinned = []
        for n in list(names):
            extra = dict(burst, pin=pins[n]) if i == 0 and w == 0 and n in pins else burst
            reply = children[n].time(i, opts.warmup, 0, **extra)
            if "error" in reply and (error := failed(n, reply, got)):
                return error
            if "pin" in extra and "error" not in reply and reply.get("pinned") != pins[n]:
                unpinned.append(n)
        if unpinned and notes is not None:  # the child could not pin itself (os.sched_setaffinity refused)
            notes.append(f"not pinned as planned: {', '.join(unpinned)} (the child could not set its CPU affinity)")
        started = time.perf_counter()
        for rep in range(reps):
            k = rep % len(names)
            for n in names[k:] + names[:k]:
                reply = children[n].time(i, 0, 1, **burst)
                if "error" in reply:
                    if error := failed(n, reply, got):
                        return error
                    continue
                got[n].extend(reply["samples"])
                calls[i][n] = int(reply.get("calls", 1))
            if rep >= 2 and time.perf_counter() - started > budget:
                break
        for n, v in got.items():
            if v and loaded:
                contended[i][n] = statistics.median(v) * 1e3
            elif v:
                spans[i][n].append(v)
    return None


def ratio_interval(samples: list[dict[str, list[float]]], a: str, b: str) -> dict[str, float] | None:
    """The step-time ratio ``a / b`` with a 95% interval, from interleaved rounds.

    Rounds are paired (one call of each variant per round, :func:`interleave`), so per round
    ``log(t_a / t_b)`` cancels the drift both saw. Per shape the estimate is the median of those
    log ratios and its interval the distribution-free one of a median (order statistics
    ``n/2 -+ 1.96 sqrt(n)/2`` of the sorted values, the sign test's interval): a few rounds hit by
    a host hiccup move neither, where a mean and standard error can (docs/decisions.md, "A median
    ratio interval, not a mean and standard error"). Over
    shapes (each equally frequent, as ``step_ms`` is): the mean of the medians, with a standard
    error combined from each shape's interval (its half-width / 1.96). Returns ``{"ratio", "low",
    "high", "rounds"}``, or None without paired samples.
    """
    means, variances, rounds = [], [], 0
    for per_shape in samples:
        xs, ys = per_shape.get(a) or [], per_shape.get(b) or []
        logs = sorted(math.log(x / y) for x, y in zip(xs, ys) if x > 0 and y > 0)
        if not logs:
            continue
        n = len(logs)
        rounds += n
        means.append(statistics.median(logs))
        half = Z95 * math.sqrt(n) / 2
        lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
        variances.append(((logs[hi] - logs[lo]) / (2 * Z95)) ** 2 if n > 1 else 0.0)
    if not means:
        return None
    mean = statistics.fmean(means)
    se = math.sqrt(sum(variances)) / len(means)
    return {"ratio": math.exp(mean), "low": math.exp(mean - Z95 * se), "high": math.exp(mean + Z95 * se), "rounds": rounds}


def compiles_counted(payload: dict[str, Any]) -> int:
    """Compiles of one cold process start, as Dynamo counted them: the graphs it captured over
    the shape sweep (the per-shape ``new_graphs``, deltas of ``counters["stats"]
    ["unique_graphs"]``, so the count agrees with the per-shape figures the report prints: 7 + 1
    graphs are 8 compiles, not the 2 shapes that compiled), at least one per
    recompilation of the first code object plus its first compile, and at least one per shape
    that compiled. 0 when nothing compiled."""
    compile_ = payload.get("compile") or {}
    shapes = payload.get("shapes", [])
    graphs = sum(int(e.get("new_graphs") or 0) for e in shapes) or int(compile_.get("unique_graphs") or 0)
    if not graphs:
        return 0
    buckets = sum(1 for e in shapes if e.get("new_graphs") or e.get("new_recompiles"))
    return max(graphs, 1 + int(compile_.get("recompiles") or 0), buckets)


def cold_summary(payload: dict[str, Any]) -> dict[str, Any]:
    """The report row of one child's cold phase: what was compiled, Dynamo's counters, the
    first-call and compile seconds per shape, ``compile_s_per_start`` (the shapes that compiled,
    summed), ``shape_buckets`` (how many shapes compiled) and ``runtime_compiles`` (which frames
    and modules compiled: :func:`.child.runtime_compiles`)."""
    shapes = payload.get("shapes", [])
    out: dict[str, Any] = {
        "compiled": payload.get("info", {}).get("compiled"),
        **({"rng": payload["info"]["rng"]} if payload.get("info", {}).get("rng") else {}),
        "compile": payload.get("compile"),
        "fail_on_recompile": payload.get("fail_on_recompile"),
        "per_shape_cold": [
            {k: e[k] for k in ("shape", "first_call_s", "steady_s", "compile_s", "new_graphs", "new_recompiles")}
            for e in shapes
        ],
    }
    judged = [{"shape": e["shape"], "token_agreement": e["compare"]["output"]["token_agreement"],
               "ids_equal": e["compare"]["output"]["ids_equal"]}
              for e in shapes if "judged_by" in e.get("compare", {}).get("output", {})]
    if judged:
        out["generated_tokens"] = {"judged_by": "teacher-forced logits on the reference's tokens", "per_shape": judged}
    if shapes:
        out["cold_first_call_s"] = shapes[0]["first_call_s"]
        compiled = [e for e in shapes if e["new_graphs"] or e["new_recompiles"]]
        out["compile_s_per_start"] = sum(e["compile_s"] for e in compiled)
        out["shape_buckets"] = len(compiled)
    if payload.get("block_share"):
        out["block_share"] = payload["block_share"]
    if payload.get("high_precision"):
        out["high_precision_run"] = payload["high_precision"]
    worst = _worst_high_precision(shapes)
    if worst:
        out["numerics_vs_high_precision"] = worst
    if "phases_s" in payload:
        out["phases_s"] = payload["phases_s"]
    if "max_memory_allocated_bytes" in payload:
        out["max_memory_allocated_bytes"] = payload["max_memory_allocated_bytes"]
    if payload.get("runtime_compiles"):
        # which code compiled in the cold phase (engine.child.runtime_compiles)
        out["runtime_compiles"] = payload["runtime_compiles"]
    return out


def reference_notes(hp_run: dict[str, Any]) -> list[str]:
    """What the eager reference's high-precision run (:func:`.child.high_precision_reference`)
    says: which dtype it ran in and why another did not, or, when none ran, why and what judged
    the low-precision outputs instead; and how many discrete decisions flipped or were near ties."""
    notes = []
    noise = hp_run.get("noise") or {}
    if hp_run["dtype"] is None:
        why = "; ".join(hp_run["tried"])
        if noise and not noise.get("error"):
            notes.append(
                f"no high-precision reference: the original failed in float64 and float32 ({why}); low-precision "
                "outputs judged against eager's own rounding noise: the original run again with the reduction "
                f"order of its {noise['perturbed_products']} matrix product(s) perturbed (split-K, rounded halves); "
                "a leaf passes when rmse(variant, eager) <= multiplier x rmse(perturbed, eager) + tol/10"
            )
        else:
            extra = f"; the rounding-noise run failed too ({noise['error']})" if noise.get("error") else ""
            notes.append(
                f"no high-precision reference: the original failed in float64 and float32 ({why}){extra}; "
                "low-precision outputs judged by the relative-RMSE fallback"
            )
    elif hp_run["tried"]:
        notes.append(f"high-precision reference ran in {hp_run['dtype']} ({'; '.join(hp_run['tried'])})")
    dec = hp_run.get("decisions")
    if dec and dec.get("rows"):
        against = hp_run["dtype"] or "perturbed eager"
        if dec.get("comparable"):
            notes.append(
                f"discrete decisions (top-k routing, argmax): {dec['flipped']} of {dec['rows']} rows chose otherwise in "
                f"eager than in the {against} run, {dec['near_ties']} near ties; rows those can move are judged by effect"
            )
        else:
            notes.append(f"discrete decisions (top-k routing, argmax): the {against} run dispatched other decision ops "
                         "than eager; none judged by effect")
    return notes


def _worst_high_precision(shapes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over every shape and quantity, the leaf closest to its bound under the high-precision
    rule (see :mod:`.compare`), with the shape and quantity it came from."""
    worst = None
    for entry in shapes:
        for what, comp in entry.get("compare", {}).items():
            hp = comp.get("high_precision")
            if not hp or not isinstance(hp.get("bound"), float) or not isinstance(hp.get("rmse"), float):
                continue
            ratio = hp["rmse"] / hp["bound"] if hp["bound"] > 0 else float("inf")
            if worst is None or ratio > worst["ratio"]:
                worst = dict(hp, shape=entry["shape"], quantity=what, ratio=ratio)
    return worst


def _stderr_hint(res: Any) -> list[str]:
    tb = res.error.get("traceback") if res.error else None
    tail = (tb or res.stderr_tail or "").strip().splitlines()[-3:]
    return ["child output tail: " + " | ".join(t.strip() for t in tail)] if tail else []
