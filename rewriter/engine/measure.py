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

This module is the orchestration only; each other job has its own module: the knobs and variants
(:mod:`.options`), a cold phase read into its row (:mod:`.cold`), the second timed processes
(:mod:`.replicas`), the timing windows (:mod:`.windows`), the noise band (:mod:`.noise`) and the
deadline's rule (:mod:`.budget`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cold import cold_summary, compiles_counted, judge, reference_notes, stderr_hint
from .cost import may_overlap, room_to_overlap
from .options import Options, Variant
from .replicas import Replicas, merge_replicates
from .windows import interleave


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
        config_error: the reference child's :class:`rewriter.errors.ConfigError` (``{"message",
            "field"}``: the harness configuration names a method the built model lacks), or None:
            bad input, which the caller raises with nothing written.
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
    config_error: dict[str, Any] | None = None

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
    started: dict[str, Any] | None = None,
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
        deadline: a ``time.perf_counter()`` value; a variant whose cold phase is not expected to
            end before it (:func:`.budget.too_late`) is not measured (the search's ``--budget``)
            and says why; the variants after it are still considered.
        on_event: progress callback (:data:`Progress`).
        partial: a :class:`Measurement` to fill in place, so a caller that is interrupted
            (Ctrl-C) still holds the variants finished so far.
        started: children already spawned by :func:`start_cold` with :func:`child_job` of this
            ``workdir`` (and perhaps sent ``go``), by variant name: the search's reference started
            before the ladder's compile rungs (:mod:`rewriter.diagnose.early_reference`).

    Every child is terminated on the way out, also on KeyboardInterrupt.
    """
    names = [v.name for v in variants]
    if len(set(names)) != len(names):  # each is a process, a job file and a result named after it
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"measure: variant names must be unique, got {', '.join(dup)} more than once")
    assert variants and variants[0].name == "eager", "the eager reference comes first"
    m = partial if partial is not None else Measurement()
    run = _Run(m, spec_run, variants, opts, workdir, deadline, on_event, started=dict(started or {}))
    try:
        _run(run, amortization, stop_on_wrong_numbers)
    finally:
        t_teardown = time.perf_counter()
        # every result is read by now (or no longer wanted: a child still building, compiling or
        # waiting for a failed reference); all are terminated at once and then reaped
        for child in run.children.values():
            child.terminate()
        for child in run.children.values():
            child.close()
        m.clock["teardown_s"] = time.perf_counter() - t_teardown
    return m


def child_job(spec_run: Any, opts: Options, workdir: Path) -> dict[str, Any]:
    """The job every child of one measurement shares (each adds its variant, tree and phase):
    the harness, the knobs, and ``workdir/ref``, where the reference saves its weights and inputs."""
    ref = workdir / "ref"
    ref.mkdir(exist_ok=True)
    return {
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


def start_cold(job: dict[str, Any], v: Variant, workdir: Path, opts: Options) -> Any:
    """Spawn ``v``'s cold-phase child (:class:`.runner.ServedChild`, caches under
    ``workdir/caches/<name>``); it imports and builds, then waits for ``go``. Where ``v`` compiles
    each shape from scratch, its shape warmers start with it (:mod:`.warmers`): each with a cache
    folder of its own beside it, they go with it and end with it."""
    from . import warmers
    from .runner import ServedChild

    mine = dict(job, phase="cold", variants=[v.name], tree=str(v.tree), prepare=v.prepare, reference=v.name == "eager",
                library_modules=v.library_modules, site=v.site, stance=v.stance)
    cache = workdir / "caches" / v.name
    helpers, extra = warmers.spawn(mine, v, workdir, cache, opts)
    not_started = extra.pop("warmers_not_started", None)
    try:
        child = ServedChild(dict(mine, **extra), workdir, f"cold-{v.name}", cache, opts.timeout_s)
    except BaseException:
        for helper in helpers:
            helper.close()
        raise
    child.warmers = tuple(helpers)
    child.warmers_not_started = not_started
    return child


def _run(run: _Run, amortization: dict[str, Any] | None, stop_on_wrong_numbers: bool) -> None:
    """:func:`measure`'s steps: start every process, run the cold phases, read the reference's
    notes, time what may be timed, and derive each timed variant's step and break-even figures."""
    run.spawn()
    if not run.cold_phases():
        return
    run.note_reference()
    if run.m.errors:
        return
    if stop_on_wrong_numbers and run.wrong_numbers():
        run.m.notes.append("timing skipped: the rewritten model's numbers are wrong")
        return
    timeable = run.timeable()
    if run.time(timeable):
        run.step_figures(timeable, amortization)


def _cover_text(covered: str) -> str:
    """The compile that covered an anchor (:meth:`_Run._covering_anchor`), as its row names it."""
    if covered == "eager":
        return "the program as it is, its own compile,"
    return f"{covered!r}, the other whole-model compile,"


#: What torch's ``eager`` backend raises for a ``nested_compile_region`` (an ``invoke_subgraph``
#: higher-order op) in a training step: AOTAutograd, which every other backend runs, sets up the
#: fake mode that op's backward needs.
_EAGER_HOP = "fake_mode should be enabled for HOPs"


def _eager_backend_limit(message: str, forced: str | None) -> str:
    """What to say first about a candidate's error that only the forced ``eager`` backend raises
    (the search on CPU forces it): the plan itself compiles on AOTAutograd's backends, so the
    failure is the measurement's, not the model's; empty for any other error. First, so that the
    terminal's one-line note, cut to its width, still shows it."""
    if forced != "eager" or _EAGER_HOP not in message:
        return ""
    return (" under the eager backend forced on this run, which cannot run a nested_compile_region in a training step "
            "(Inductor and the other AOTAutograd backends can: --backend aot_eager measures it)")


@dataclass
class _Run:
    """One :func:`measure` call: what it runs, the processes it started and what it has read so
    far; each step of :func:`_run` is a method.

    Every variant's process starts at once: their interpreter starts, imports and model builds
    (CPU work, tens of seconds for an HF model) overlap the eager reference's cold phase, which
    compiles nothing. Before the first measured compile every child must have built (and now
    waits for its ``go``), so no build runs beside a compile being timed; the compiled variants
    then run their cold phases one after the other (:attr:`Options.parallel_cold` at a time). With
    ``overlap`` the reference's own run (outputs, block share, the float64 run) goes on during the
    first compiled variant's cold phase, which waits for it only before its first comparison: the
    reference then holds one core and the GPU's spare time while the compile runs on the others.
    """

    m: Measurement
    spec_run: Any
    variants: list[Variant]
    opts: Options
    workdir: Path
    deadline: float | None
    on_event: Progress | None
    #: children spawned before :func:`measure` (``measure(started=...)``)
    started: dict[str, Any] = field(default_factory=dict)
    children: dict[str, Any] = field(default_factory=dict)
    #: each recorded variant's cold-phase payload (the child's JSON)
    cold: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: seconds from ``go`` to the recorded end of each cold phase that did not raise or crash
    #: (the budget's estimates, :mod:`.budget`)
    cold_s: dict[str, float] = field(default_factory=dict)
    built: dict[str, bool] = field(default_factory=dict)
    #: the reference, while its run overlaps the next variant's cold phase
    pending: Any = None
    #: compiled variants whose cold phase is under way, with their ``go`` time
    running: list[tuple[str, Any, float]] = field(default_factory=list)
    replicas: Replicas | None = None
    t_spawn: float = 0.0

    @property
    def by_name(self) -> dict[str, Variant]:
        return {v.name: v for v in self.variants}

    def emit(self, name: str, event: str, detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(name, event, detail)

    def spawn(self) -> None:
        """Start one child per variant (they import and build at once), but for those already
        started (:attr:`started`), and the replicas' keeper."""
        job = child_job(self.spec_run, self.opts, self.workdir)
        self.m.clock["waiting_for_builds_s"] = 0.0
        self.t_spawn = time.perf_counter()
        for v in self.variants:
            self.children[v.name] = self.started.get(v.name) or start_cold(job, v, self.workdir, self.opts)
        self.replicas = Replicas(self.m, self.spec_run, self.variants, job, self.workdir, self.workdir / "caches", self.opts,
                                 self.children, self.deadline, self.emit, self.cold_s)

    def record(self, name: str, child: Any, until: float | None = None, waited_s: float = 0.0) -> bool:
        """Collect ``name``'s cold phase into its result row; False when the measurement cannot go on
        (the reference failed). ``until``: the deadline, for a cold phase the budget bounds; one
        still under way then is ended and not measured (:data:`.budget.RAN_OUT`). ``waited_s``:
        seconds already waited for it (:meth:`_next_to_record`), counted against its timeout."""
        from .budget import RAN_OUT
        from .verdict import numerics_failures

        kw: dict[str, Any] = {"waited_s": waited_s} if waited_s else {}  # only a ServedChild is ever waited for beside others
        warmed = len(getattr(child, "warmers", ()))
        res = child.wait_cold(until=until, **kw)
        if warmed and res.error and res.error.get("kind") == "oom":
            res.error["message"] += (f" ({warmed} shape warmer(s) held a copy of the model on the device beside it: "
                                     "--no-overlap runs without them)")
        if res.error and res.error.get("kind") == "budget":
            covered = self._covering_anchor(name)
            why = f"{RAN_OUT} ({res.wall_s:.0f} s after its start; ended" + (
                f": {_cover_text(covered)} had measured every shape)" if covered else ")")
            self.m.results[name] = {"skipped": why, "problems": [], "child_wall_s": res.wall_s}
            assert self.replicas is not None
            self.replicas.end(name)
            self.emit(name, "skipped", why)
            return True
        row = self.m.results[name] = {
            "child_wall_s": res.wall_s,
            "startup_s": getattr(child, "built_at", child.started) - child.started,
            "problems": [],
            **({"warmers_not_started": why} if (why := getattr(child, "warmers_not_started", None)) else {}),
        }
        if res.error:
            return self._record_error(name, row, res)
        v = self.by_name[name]
        self.cold[name] = res.payload
        row.update(cold_summary(res.payload))
        sd_err = res.payload.get("info", {}).get("state_dict_error")
        if sd_err:
            row["error"] = sd_err
            row["problems"].append(f"the rewritten model does not load the original's weights: {sd_err}")
        elif name != "eager":
            judge(row, v, res.payload, numerics_failures)
        if name != "eager" and not v.judged:
            row["numerics"] = "ok" if not numerics_failures(res.payload) else "differs"
        self.emit(name, "cold", row)
        assert self.replicas is not None
        if not row["problems"] and not row.get("error"):
            self.replicas.started(name)
        else:
            self.replicas.end(name)
        if name != "eager":
            self.replicas.spawn()
        return True

    def _record_error(self, name: str, row: dict[str, Any], res: Any) -> bool:
        """A cold phase that ended in an error: the reference's stops the measurement, a
        variant's is its problem (with a hint: the child's output tail, a violated mark)."""
        from .verdict import constraint_hint, cudagraph_overwrite_hint

        m, err = self.m, res.error
        text = f"{err['kind']}: {err['message']}"
        row["error"] = text
        row["error_kind"] = err["kind"]
        if name == "eager":
            m.config_error = err.get("config") if err["kind"] == "config" else None
            m.errors.append(f"the original model (eager reference) failed: {text}")
            m.hints.setdefault("eager", []).extend(stderr_hint(res))
            self.emit(name, "cold", row)
            return False
        v = self.by_name[name]
        # a baseline runs the original tree (compiled in place, or as it runs), a candidate the rewritten one
        what = (f"the original model with the {v.prepare} compile" if v.prepare else "the original model as it runs"
                if not v.judged else "the rewritten model")
        if err["kind"] == "raised":
            row["problems"].append(f"{what} raised{_eager_backend_limit(err['message'], self.opts.force_backend)}: "
                                   f"{err['message']}")
            hint = constraint_hint(err.get("detail") or err["message"], v.mark_dynamic, v.plan_name)
            if hint:
                m.hints.setdefault(name, []).append(hint)
        else:
            row["problems"].append(f"the rewritten tree failed: {text}" if v.judged else f"{what} failed: {text}")
            m.hints.setdefault(name, []).extend(stderr_hint(res))
        graphs = cudagraph_overwrite_hint(err["message"])
        if graphs:
            m.hints.setdefault(name, []).append(graphs)
        self.emit(name, "cold", row)
        assert self.replicas is not None
        self.replicas.end(name)
        return True

    def settle(self, keep: int) -> bool:
        """Record running cold phases until at most ``keep`` run (the reference first when it
        overlapped), each as it ends (:meth:`_next_to_record`); False when the measurement cannot
        go on. A cold phase other than the anchor's is waited for until the deadline at most
        (:data:`.budget.RAN_OUT`)."""
        while len(self.running) > keep:
            if not self._settle_reference():
                return False
            if not self._record_running(*self._next_to_record()):
                return False
        if keep == 0:  # no compiled variant was left to overlap it with
            return self._settle_reference()
        return True

    def _record_running(self, index: int, waited_s: float = 0.0) -> bool:
        """Record the running cold phase at ``index`` (:meth:`record`) and, unless it raised or
        crashed, its seconds for the budget's estimates; False when the measurement cannot go on."""
        name, child, went = self.running.pop(index)
        ok = self.record(name, child, until=self.deadline if self.bounded(name) else None, waited_s=waited_s)
        # a cold phase that raised or crashed says nothing of how long a compile takes; one
        # killed at the timeout or the deadline does (at least that long)
        row = self.m.results[name]
        if not row.get("error") or row.get("error_kind") == "timeout":
            self.cold_s[name] = self._cold_seconds(name, went)
        return ok

    def bounded(self, name: str) -> bool:
        """Whether the deadline ends ``name``'s cold phase: any variant's but an anchor's
        (:attr:`.options.Variant.anchor`), and an anchor's once another anchor has measured every
        shape (:meth:`_covering_anchor`): the whole-model anchor and its static-shape twin
        (:mod:`rewriter.diagnose.kinds.static_shapes`) each run whatever the budget until one of
        them has a measured compile, so the plan is compared with a whole-model compile."""
        if self.deadline is None:
            return False
        return not self.by_name[name].anchor or self._covering_anchor(name) is not None

    def _covering_anchor(self, name: str) -> str | None:
        """Another anchor than ``name`` (or the reference where the program compiles itself,
        :meth:`_compiled_anchor`) whose cold phase was recorded with no error and no problem (it
        compiled every shape, passed numerics and fell back nowhere) and whose child is alive to be
        timed, or None; None too where ``name`` is not an anchor."""
        if not self.by_name[name].anchor:
            return None
        return next((other for other in self.cold if other != name and self._compiled_anchor(other)
                     and not self.m.results[other].get("problems") and not self.m.results[other].get("error")
                     and getattr(self.children.get(other), "alive", True)), None)

    def _compiled_anchor(self, name: str) -> bool:
        """An anchor, or the reference where the program compiles itself (its cold phase compiled
        Dynamo graphs): the program's own compile, which ``as-is+static`` edits, covers that twin as
        the anchor covers ``whole+static``."""
        if name == "eager":
            return bool((self.cold.get("eager") or {}).get("compile", {}).get("unique_graphs"))
        return self.by_name[name].anchor

    def _await_kin(self, name: str) -> bool:
        """Before ``name``'s cold phase is weighed against the deadline (:meth:`_late`): record the
        running cold phases of its kin (:func:`.budget.kin_of`: its base, the whole-model anchor
        under a nested plan). It takes at least as long as they do, so it is not started beside
        them on a guess: their measured seconds are its estimate. False when the measurement
        cannot go on."""
        from .budget import kin_of

        v = self.by_name[name]
        while True:
            index = next((i for i, (other, _, _) in enumerate(self.running) if kin_of(v, self.by_name[other])), None)
            if index is None:
                return True
            if not self._settle_reference() or not self._record_running(index):
                return False

    def _next_to_record(self) -> tuple[int, float]:
        """The index in :attr:`running` of the cold phase to record next, and the seconds waited
        here (they count against that child's timeout in :meth:`record`): the first that has ended,
        so a slot frees when any cold phase ends, not only the oldest (docs/decisions.md, "The
        search's budget and its cold phases": an anchor compiling for minutes would otherwise hold
        every later candidate behind it, and the budget's estimates would go without the kin that
        ended beside it). None ended yet: it waits for the first to end, on the children's reply
        pipes; past the deadline it takes the first cold phase the budget bounds (:meth:`record`
        ends it there). Children without :meth:`.runner.ServedChild.cold_ended` (stand-ins) and
        a single running cold phase are taken oldest first; once the shortest child timeout has
        passed with none ended, that child is taken (its wait then times it out at once)."""
        import select

        children = [child for _, child, _ in self.running]
        if len(children) == 1 or not all(hasattr(c, "cold_ended") for c in children):
            return 0, 0.0
        bounded = [i for i, (name, _, _) in enumerate(self.running) if self.bounded(name)]
        waited_from = time.perf_counter()
        patience, first_out = min((c.timeout_s, i) for i, c in enumerate(children))
        while True:
            for i, child in enumerate(children):
                if child.cold_ended():
                    return i, 0.0
            now = time.perf_counter()
            if self.deadline is not None and bounded and now >= self.deadline:
                return bounded[0], 0.0
            if now - waited_from >= patience:
                return first_out, now - waited_from
            wait = patience - (now - waited_from)
            if self.deadline is not None and bounded:
                wait = min(wait, self.deadline - now)
            select.select(children, [], [], max(0.0, min(wait, 5.0)))

    def _cold_seconds(self, name: str, went: float) -> float:
        """Seconds from ``name``'s ``go`` (``went``) to the end of its cold phase, for the budget's
        estimates (:func:`.budget.expected_cold_s`). A child started before the measurement (the
        search's early anchor) went before the ladder's compile rungs, waited for the reference's
        weights and may have ended long before it is read: its own phases after ``go`` but that
        wait (its child's ``phases_s``) stand for it. Where shape warmers compiled some of its
        shapes (:mod:`.warmers`), the seconds one process would have taken, its shapes in turn
        (:func:`.warmers.serial_cold_s`): what the estimate of another candidate's cold phase needs."""
        from .warmers import serial_cold_s

        row = self.m.results[name]
        phases = row.get("phases_s") or {}
        if name in self.started and name != "eager" and phases.get("first_calls") is not None:
            after_go = set(phases) - {"import_torch", "run", "build", "waited_for_weights"}
            return serial_cold_s(row, sum(phases[k] or 0.0 for k in after_go))
        return serial_cold_s(row, time.perf_counter() - went)

    def _settle_reference(self) -> bool:
        if self.pending is None:
            return True
        reference, self.pending = self.pending, None
        return self.record("eager", reference)

    def cold_phases(self) -> bool:
        """Run every cold phase in order (the reference first), :attr:`Options.parallel_cold` at a
        time; a variant whose cold phase is not expected to end before the deadline is skipped
        (:meth:`_late`). False when the measurement cannot go on."""
        width = max(1, self.opts.parallel_cold)
        if width > 1:
            self.m.notes.append(
                f"cold phases ran {width} at a time: a compile's seconds include what the other compile "
                "took from the host's CPUs (validate times each alone)"
            )
        for k, v in enumerate(self.variants):
            if k == 1:
                self._wait_for_builds()
            if k > 0 and self.deadline is not None and not self._await_kin(v.name):
                return False
            if k > 0 and self._late(v.name):
                continue
            if not self._go(k, v.name, width):
                return False
        if not self.settle(0):
            return False
        self.m.clock["spawn_to_cold_phases_done_s"] = time.perf_counter() - self.t_spawn
        return True

    def _wait_for_builds(self) -> None:
        """Before the first compiled cold phase: every other child has built its model."""
        self.m.clock["reference_s"] = time.perf_counter() - self.t_spawn
        t_wait = time.perf_counter()
        for other in self.variants[1:]:
            child = self.children[other.name]
            self.built[other.name] = child.wait_built()
            for warmer in getattr(child, "warmers", ()):  # its shape warmers build too (engine.warmers)
                warmer.wait_built()
        self.m.clock["waiting_for_builds_s"] = time.perf_counter() - t_wait

    def _late(self, name: str) -> bool:
        """Skip ``name`` (terminated, its row says why) when its cold phase would not end before
        the deadline (:func:`.budget.too_late`), or, an anchor, when the deadline has passed and
        the other anchor has measured every shape (:meth:`bounded`)."""
        from .budget import SPENT, too_late

        if self.deadline is None:
            return False
        left_s = self.deadline - time.perf_counter()
        why = too_late(self.by_name[name], left_s, self.cold_s, self.by_name)
        # an anchor past the deadline whose twin has measured every shape; one started before the
        # measurement is read instead (its cold phase may have ended: record() ends it otherwise)
        covered = self._covering_anchor(name) if why is None and left_s <= 0 and name not in self.started else None
        if covered is not None:
            why = f"{SPENT} ({_cover_text(covered)} had measured every shape)"
        if why is None:
            return False
        self.m.results[name] = {"skipped": why, "problems": []}
        self.children[name].terminate()
        assert self.replicas is not None
        self.replicas.end(name)
        self.emit(name, "skipped", why)
        return True

    def _go(self, k: int, name: str, width: int) -> bool:
        """Start ``name``'s cold phase (the ``k``-th); the reference's is recorded at once unless it
        overlaps the next one (:meth:`_overlaps`). False when the measurement cannot go on."""
        child = self.children[name]
        started = self.built.get(name, False) or (name not in self.built and child.wait_built())
        if started:
            child.go()
        # a child started before the measurement went earlier (measure(started=...))
        went = (getattr(child, "go_at", None) if name in self.started else None) or time.perf_counter()
        if k == 0:
            if self._overlaps(child, started):
                self.pending = child
                return True
            return self.record(name, child)
        self.running.append((name, child, went))
        return self.settle(width - 1)

    def _overlaps(self, child: Any, started: bool) -> bool:
        """Whether the reference's run overlaps the next variant's cold phase: with none to follow
        (every compile pruned, only the program as it is measured) it runs on its own."""
        overlap = may_overlap(self.opts.overlap, self.spec_run.device)
        if not (overlap and started and len(self.variants) > 1):
            return False
        saved = child.wait_weights_saved()
        if saved is None:
            return False
        room = room_to_overlap(saved)
        if room is not None:
            self.m.notes.append(f"reference not overlapped with the first compiled variant's cold phase: {room}")
            return False
        self.m.reference_overlapped = True
        self.m.notes.append(
            "the eager reference's run overlapped the first compiled variant's cold phase (one CPU core, "
            "spare GPU time); --no-overlap times that compile alone"
        )
        return True

    def note_reference(self) -> None:
        """The reference's notes: its high-precision run, and the random numbers of a training step."""
        m, eager = self.m, self.cold.get("eager") or {}
        hp_run = eager.get("high_precision")
        if hp_run:
            m.notes.extend(reference_notes(hp_run))
        m.results["eager"]["numerics"] = "reference"
        rng = eager.get("info", {}).get("rng")
        if rng:
            m.notes.append(
                f"training step draws random numbers ({rng['count']} source(s): {', '.join(rng['sources'][:3])}"
                f"{', ...' if rng['count'] > 3 else ''}): made comparable with {rng['made_comparable']}; compiled "
                "timings include eager's random kernels"
            )

    def wrong_numbers(self) -> bool:
        """A judged variant's numbers are wrong."""
        return any(self.m.results.get(v.name, {}).get("numerics") == "FAIL" for v in self.variants if v.judged)

    def timeable(self) -> list[str]:
        """The variants to time: cold phase recorded, weights loaded, still alive, and (a judged
        one) without problems."""
        by_name, results = self.by_name, self.m.results
        return [
            v.name for v in self.variants
            if v.name in self.cold and "state_dict_error" not in self.cold[v.name].get("info", {})
            and self.children[v.name].alive
            and not (by_name[v.name].judged and v.name != "eager" and results[v.name]["problems"])
        ]

    def timing_options(self, now: float) -> Options:
        """The options the timing rounds run with at ``now`` (``time.perf_counter()``): the
        engine's, less the contended window (:attr:`.options.Options.contended`) when the cold
        phases ended after the deadline (an anchor's is waited for past it, :mod:`.budget`): the
        deadline kept the timing's reserve, and the quiet windows alone still fit what is left of
        it; said in ``m.notes``. The decision then weighs the quiet condition alone, as it does
        where no contended figure exists (:func:`rewriter.diagnose.decide.contended_standing`)."""
        if not self.opts.contended or self.deadline is None or now <= self.deadline:
            return self.opts
        self.m.notes.append(f"not timed with a contended host core: the cold phases ended {now - self.deadline:.0f} s "
                            "after the search budget's deadline (the whole-model anchor's is waited for); the quiet "
                            "windows alone were timed")
        return dataclasses.replace(self.opts, contended=False)

    def time(self, timeable: list[str]) -> bool:
        """Time ``timeable`` interleaved, with their second processes (:class:`.replicas.Replicas`),
        into ``m.timing`` and ``m.samples``; False when the timing run failed."""
        m = self.m
        assert self.replicas is not None
        timed = {n: self.children[n] for n in timeable}
        t_rep = time.perf_counter()
        timed.update(self.replicas.collect(timeable))
        if self.replicas.spawned:
            m.clock["replicates_s"] = time.perf_counter() - t_rep  # the wait after the cold phases only
        t_timing = time.perf_counter()
        got = interleave(timed, self.spec_run.shapes, self.timing_options(t_timing), self.emit, m.notes,
                         device=self.spec_run.device)
        m.timing_wall_s = time.perf_counter() - t_timing
        if got.error:
            m.errors.append(f"the timing run failed: {got.error}")
            return False
        merged = merge_replicates(got, timeable)
        m.timing, m.samples = merged.rows, merged.samples
        return True

    def step_figures(self, timeable: list[str], amortization: dict[str, Any] | None) -> None:
        """Each timed variant's ``step_ms`` (the mean over shapes of its per-shape medians: a
        variant timed in two processes has its faster process's, shape by shape), its contended
        step, its speed-up over eager and its break-even (:func:`.amortize.amortize`)."""
        from .amortize import amortize

        m = self.m
        mean_ms = {n: statistics.fmean(row["timing"][n]["median_ms"] for row in m.timing) for n in timeable}
        # the reference's own compile (diagnose's search: the program as it runs, which may compile
        # itself): a variant pays back only what it compiles beyond it, as the search's net counts it
        own = float((m.results.get("eager") or {}).get("compile_s_per_start") or 0.0)
        for n in timeable:
            row = m.results[n]
            row["step_ms"] = mean_ms[n]
            loaded = [t["timing"][n].get("contended_ms") for t in m.timing]
            if loaded and all(loaded):  # every shape timed with the host core contended (Options.contended)
                row["contended_step_ms"] = statistics.fmean(loaded)
            row["speedup_vs_eager"] = mean_ms["eager"] / mean_ms[n] if mean_ms[n] > 0 else None
            if n != "eager":
                row["amortization"] = amortize(
                    mean_ms["eager"] / 1e3,
                    mean_ms[n] / 1e3,
                    row["compile_s_per_start"],
                    compiles_counted(self.cold[n]),
                    row["shape_buckets"],
                    amortization["runs"] if amortization else None,
                    amortization["restarts"] if amortization else 1,
                    own,
                    "the program as it is" if own > 0 else "eager",
                )


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


