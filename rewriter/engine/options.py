"""What one measurement runs and how: the engine's knobs (:class:`Options`, validate's CLI flags
and the search's own) and the trees to run (:class:`Variant`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
            timed variant gets a second process (:class:`.replicas.Replicas`: spawned once the first
            compiled cold phase is over, started when its own variant's is), warm-started from
            its own compile caches (its compile is not timed), and both are timed in the same
            interleaved rounds; per shape the variant's figure is its faster process's median
            (:func:`.replicas.merge_replicates`). A process that runs slow through a whole shape's rounds
            then no longer decides the plan (docs/decisions.md, "Two processes per variant"),
            and the spread between the two
            processes is the run-to-run noise the decision uses (:func:`.noise.process_noise`).
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
            p10/p90 (the samples of both stay paired for :func:`.noise.ratio_interval`). A host stall that lasts a window
            (docs/decisions.md, "Two timing windows per shape") is a one-sided error like a slow process
            (:func:`.replicas.merge_replicates`): it cannot make a plan faster than it is, so the faster
            window is the estimate. diagnose's search uses 2 on CUDA. It does not cover a
            slowness that both processes of a variant share because it was compiled in: the
            second process is warm-started from the first one's compile caches (Inductor's
            autotuning winners included), so the measured band leaves out compile-to-compile
            variance, which measured smaller than the host's (``benchmarks/compile_variance.py``;
            :attr:`contended`).
        replica_caches: what the second process (:attr:`replicates` 2) compiles from.
            ``reautotune`` (the default): a copy of its variant's caches less Inductor's stored
            autotuning winners (``*.best_config``), with the local autotune cache off in the child
            (:func:`.build.autotune_again`): the compiled code is reused and every Triton kernel's
            configs are benchmarked again, as a re-run would (about 0.5 s more; docs/decisions.md,
            "Replica caches re-autotune").
            ``warm``: the variant's own caches, every compile-time decision shared.
        contended: on CUDA with every timed process on one shared core (``pin`` ``shared`` or
            ``fastest``), :data:`.windows.CONTENDED_WINDOWS` more windows per shape after the
            others with a busy loop pinned to that core (:func:`.cores.contend`): each process's
            median over them is its ``contended_ms`` (each window's in ``contended_windows_ms``,
            whose spread is the contended band, :func:`.noise.process_noise`), the step with the host thread time-sliced, as a data-loader worker
            or a neighbour does it. It never enters ``median_ms``. A launch-heavy plan's
            step moves with a contended host core, not a slower one (``benchmarks/run_drift.py``,
            ``benchmarks/host_sensitivity.py``; docs/decisions.md, "Minimax over host conditions").
            diagnose's search uses it on CUDA, and the decision
            weighs both conditions (:func:`rewriter.diagnose.decide.decide`).
        warm_shapes: whether a variant that compiles each harness shape from scratch
            (:attr:`Variant.warm_shapes`) compiles its later shapes in processes of their own, beside
            its first, whose compiled code its child then loads (:mod:`.warmers`; Inductor only);
            None (the default): where the reference may overlap a compile (:func:`.cost.may_overlap`:
            a GPU, 8 or more CPUs, not ``--no-overlap``), since each warmer is one more compile on
            the host's CPUs.
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
    warm_shapes: bool | None = None


def on_device(opts: Options, device: str) -> Options:
    """``opts`` with its automatic timing knobs (``replicates`` 0, ``windows`` 0: validate's
    ``--processes auto``/``--windows auto``) resolved for ``device`` as diagnose's search sets
    them (:func:`rewriter.diagnose.search.engine_options` calls it too): on CUDA two processes per
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
    #: variants with the same key are expected to compile for about as long (the search's key: the
    #: plan's compile units and options, :func:`rewriter.diagnose.search.cost_key`); the budget's
    #: estimate of a cold phase not run yet (:mod:`.budget`). None: no kin.
    cost_key: str | None = None
    #: measured whatever the budget (:func:`.budget.too_late`): the search's one-line anchor, the
    #: whole-model ``torch.compile`` every plan is held against; a search that measured no compile
    #: would keep the program as it is where that one line is several times faster. Its
    #: static-shape twin (``dynamic=False``) is one too: past the deadline, once one of them has
    #: measured every shape the other is ended (:meth:`.measure._Run.bounded`).
    anchor: bool = False
    #: each harness shape compiles a graph of its own from scratch, as a fresh process would at that
    #: shape (``dynamic=False``: ``whole+static``, ``as-is+static``), so its later shapes may be
    #: compiled beside its first by shape warmers (:mod:`.warmers`) and read from the cache; never
    #: set where a later shape recompiles what an earlier one compiled (automatic dynamic shapes)
    warm_shapes: bool = False


#: :attr:`Options.pin`'s values (:func:`.cores.pin_plan`).
PIN_MODES = ("shared", "fastest", "own", "off")
