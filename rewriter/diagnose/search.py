"""The search: every candidate plan rewritten into its own tree, measured by the engine validate
uses, and the measurement decides (docs/design.md, "The search").

Each candidate (:mod:`.candidates`) goes through the real rewrite path (:func:`rewriter.rewrite.transform.plan_rewrite`,
unsafe actions included, as validate materialises a plan) into a copy of SRC; the engine
(:func:`rewriter.engine.measure.measure`) then runs the original tree as the eager reference and
every candidate tree in its own child process with clean compile caches: cold compile per shape,
the compile each new shape costs, graph breaks, recompiles, recompile-limit fallbacks, numerics
against the reference, interleaved steady-state timing. :mod:`.decide` picks the plan. The chosen
candidate's measurement is written as its validation report (bound to the diff's sha256), so
``stackpart rewrite --apply`` follows diagnose without a second measurement.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StackpartError
from ..terminal import Feed, event, progress_line
from .candidate import AS_IS, COMPILE_TIME, NO_GAIN_BACKENDS, Candidate
from .candidates import WHOLE, propose
from .context import Context
from .decide import AS_RUN, COMPILATION_OFF, Choice, compile_text, decide, when_as_is_raises
from .evidence import where_raised
from .kinds.static_shapes import WHOLE_STATIC
from .own_candidates import STATIC as OWN_STATIC
from .pruned import merge

#: Default ``--budget`` (s) from the search's start: a candidate's cold phase starts only when it is
#: expected to end within it, less the timing rounds' own seconds (:mod:`.search_budget`); the
#: others are skipped and say why. Sized for ladder + search within 3 minutes on a ~1B model
#: (docs/decisions.md, "The search's budget and its cold phases").
DEFAULT_BUDGET_S = 120.0
#: On a GPU, what a diagnose with the default budget aims for, from the command's start to its end
#: (s): the search gets what the setup and the ladder left of it, less :data:`FINISH_S` (the
#: interpreter's start before diagnose runs, the allocator sweep, the twins' judges, the decision
#: and the reports after the last timing round, and the few seconds a search runs past its budget),
#: within [:data:`MIN_BUDGET_S`, :data:`DEFAULT_BUDGET_S`] (docs/decisions.md, "The search's
#: budget and its cold phases").
DIAGNOSE_TARGET_S = 180.0
FINISH_S = 20.0
MIN_BUDGET_S = 60.0


def default_budget(elapsed_s: float, cuda: bool) -> float:
    """The search's budget (s) when ``--budget`` is not given: on CUDA what is left of
    :data:`DIAGNOSE_TARGET_S` after ``elapsed_s`` seconds of diagnose before the search (loading
    the harness, building the model, the ladder: wall time, not only the rungs' own seconds) and
    :data:`FINISH_S`, clamped to
    [:data:`MIN_BUDGET_S`, :data:`DEFAULT_BUDGET_S`]; on a CPU (tests, a numerics check, no speed
    decided) :data:`DEFAULT_BUDGET_S`."""
    if not cuda:
        return DEFAULT_BUDGET_S
    return max(MIN_BUDGET_S, min(DEFAULT_BUDGET_S, DIAGNOSE_TARGET_S - elapsed_s - FINISH_S))


#: ``file.py:LINE`` in a message: the place a child's error already names.
_PLACE_RE = re.compile(r"(?:^|[\s(])[\w./-]+\.py:\d+")


def _as_is_failed(errors: list[str], original: Path, harness_file: str) -> StackpartError:
    """The search's error when the program as it is could not be measured: the user's files
    relative to SRC (not the search's temporary copy), as diagnose's other errors name them, and
    at the harness file only when no error names a place of its own (said once)."""
    from ..engine.measure import relabel

    said = "; ".join(relabel(errors, {f"{original}/": ""}))
    return StackpartError("the search could not measure the program as it is: " + said,
                          path=None if _PLACE_RE.search(said) else harness_file)


@dataclass
class SearchOutcome:
    """What the search measured and chose.

    Attributes:
        candidates: the proposed candidates, in measurement order.
        rows: per candidate name, the engine's row (``as-is`` is the eager reference's).
        choice: the decision (:class:`.decide.Choice`).
        pruned: candidates left out by evidence, each with why.
        timing: the engine's per-shape timing, keyed by candidate name.
        notes: what the report says beside the table (the program's own compile setup, overlap).
    """

    candidates: list[Candidate]
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    choice: Choice | None = None
    pruned: list[str] = field(default_factory=list)
    timing: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The compile setup already in SRC (:func:`.own_compile.compile_setup`): ``file:line: call``.
    own_setup: list[str] = field(default_factory=list)
    #: The program's compile calls that pass ``disable=True`` (:func:`.own_compile.off_compiles`),
    #: each ``file:line: call (turned off: ...)`` (:attr:`.own_compile.OwnCompile.setup_line`).
    own_off_setup: list[str] = field(default_factory=list)
    #: The program's own compiles as the harness ran them in the as-is process (:func:`.runtime_compile.seen`):
    #: ``Block.forward (model.py:20), 3 graphs``.
    runtime_setup: list[str] = field(default_factory=list)
    #: The program's ``torch._dynamo.config`` settings as it ran (:attr:`.dynamo_settings.Setting.text`).
    own_config: list[str] = field(default_factory=list)
    #: Where the static reading and the run-time one disagree (:func:`.runtime_compile.disagreements`),
    #: one sentence each.
    runtime_disagreements: list[str] = field(default_factory=list)
    backend: str = "inductor"
    gain_measured: bool = True
    #: The model's method each step calls (``harness.call``), None for the module itself.
    call: str | None = None
    #: The program as it is raises (:mod:`.own_raised`): the ``as-is`` row is the program with
    #: compilation off, and the plan's figures are said against it.
    as_is_raises: bool = False
    #: The allocator candidate's measurement (:func:`.memory.measure_allocator`, or
    #: ``{"skipped": why}``), or None where the memory rung found no fragmentation.
    allocator: dict[str, Any] | None = None
    #: The process-to-process noise the decision used (:func:`rewriter.engine.noise.process_noise`),
    #: None when each plan was timed in one process.
    noise: dict[str, Any] | None = None
    #: Where the measurement's wall time went, seconds per phase (the engine's
    #: :attr:`rewriter.engine.measure.Measurement.clock`, plus ``timing_s``).
    clock: dict[str, float] = field(default_factory=dict)
    #: The rewrites made so far (:func:`candidate_rewrite`), ``(reading, plan key, result)``: a plan
    #: rewritten again with the same reading of SRC (the chosen one, checked by :func:`_decided` and
    #: written by diagnose's writer) reuses its result (:func:`kept_rewrite`).
    rewrites: list[tuple[Any, str, Any]] = field(default_factory=list)

    @property
    def chosen(self) -> Candidate | None:
        if self.choice is None:
            return None
        return next(c for c in self.candidates if c.name == self.choice.chosen)

    def _unrun(self) -> str:
        """`` (in the source, not run by the harness)`` where the program as it is compiled no graph
        though its source compiles (a script's ``main``), else ``""``: the as-is row lists the
        setup as the source writes it, and must not read as what ran. With ``harness.call`` the
        program's compile may run and still compile nothing the step calls (a wrapper compiles
        ``forward``), and the words say that. Where the program as it is raises
        (:attr:`as_is_raises`), the harness ran its compile, and the row is the program with
        compilation off: the words say that, not that the harness never ran it."""
        comp = (self.rows.get(AS_IS) or {}).get("compile") or {}
        ran = comp.get("unique_graphs")
        if not (self.own_setup and ran == 0):
            return ""
        if self.as_is_raises:
            return " (it raised as the harness ran it: this row has compilation off)"
        if self.call is not None:  # the call may run; what it compiles is not what the step calls
            return f" (in the source; compiled nothing the harness's step model.{self.call} runs)"
        return " (in the source, not run by the harness)"

    def table(self) -> list[dict[str, Any]]:
        """One row per candidate for the report: plan, step ms per shape, cold compile, new-shape
        compile, graphs, graph breaks, recompiles, fallbacks, numerics, net saving, status, and
        the seconds of its child's phases."""
        out = []
        status = self.choice.status if self.choice else {}
        net = self.choice.net_s if self.choice else {}
        for c in self.candidates:
            r = self.rows.get(c.name) or {}
            cold = r.get("per_shape_cold") or []
            comp = r.get("compile") or {}
            per_shape = {str(row["shape"]): round(row["timing"][c.name]["median_ms"], 4)
                         for row in self.timing if (row["timing"].get(c.name) or {}).get("n")}
            out.append({
                "candidate": c.name,
                "actions": ([f"the program's own{self._unrun()}: {x}" for x in self.own_setup + self.own_off_setup]
                            + [f"the program's own: {x}" for x in self.own_config]
                            + [f"seen at run time: {x}" for x in self.runtime_setup]
                            if c.name == AS_IS else []) + [action_text(a) for a in c.plan.actions],
                # where the program's compile raises, as-is is the baseline with compilation off, nobody's
                # proposal; a row the search dropped actions of the proposal from is not the proposal
                "rule": c.rule and not c.rule_dropped and not (c.name == AS_IS and self.as_is_raises),
                "rule_dropped": [action_text(a) for a in c.rule_dropped] if c.rule else [],
                "baseline": "the program with compilation off" if c.name == AS_IS and self.as_is_raises else None,
                "step_ms": None if r.get("step_ms") is None else round(r["step_ms"], 4),
                "step_ms_per_shape": per_shape,
                # both processes' medians where the plan was timed twice (the faster one stands)
                "process_ms_per_shape": {str(row["shape"]): [round(x, 4) for x in row["timing"][c.name]["processes_ms"]]
                                         for row in self.timing if (row["timing"].get(c.name) or {}).get("processes_ms")},
                # the step with a busy loop on the timed processes' shared core (engine Options.contended)
                "contended_step_ms": None if r.get("contended_step_ms") is None else round(r["contended_step_ms"], 4),
                "contended_ms_per_shape": {str(row["shape"]): round(row["timing"][c.name]["contended_ms"], 4)
                                           for row in self.timing if (row["timing"].get(c.name) or {}).get("contended_ms")},
                # each contended window's median (engine.windows.CONTENDED_WINDOWS): their spread sets the contended band
                "contended_windows_ms_per_shape": {
                    str(row["shape"]): [round(x, 4) for x in row["timing"][c.name]["contended_windows_ms"]]
                    for row in self.timing if (row["timing"].get(c.name) or {}).get("contended_windows_ms")},
                # as-is: the program's own compile's cost, where it compiles itself (else none of ours)
                "cold_compile_s": round(cold[0]["compile_s"], 3) if cold and (c.name != AS_IS or comp.get("unique_graphs")) else None,
                "new_shape_compile_s": [round(e["compile_s"], 3) for e in cold[1:] if e["new_graphs"] or e["new_recompiles"]]
                                       if c.name != AS_IS or comp.get("unique_graphs") else [],
                "compile_s_per_start": r.get("compile_s_per_start") if c.name != AS_IS or comp.get("unique_graphs") else None,
                "graphs": comp.get("unique_graphs"),
                "graph_breaks": comp.get("graph_breaks"),
                "recompiles": comp.get("recompiles"),
                "fallbacks": len(comp.get("recompile_limit_hits", [])) if comp else None,
                "numerics": r.get("numerics"),
                "net_s": None if net.get(c.name) is None else round(net[c.name], 1),
                "status": status.get(c.name, r.get("skipped") or "not measured"),
                "chosen": status.get(c.name) == "chosen",
                # where its child's seconds went (build, weights, first calls, the reference's extras)
                "phases_s": {k: round(v, 2) for k, v in (r.get("phases_s") or {}).items() if v is not None} or None,
            })
        return out


def action_text(a: Any) -> str:
    """One action as the candidates table lists it: the kind and target, a compile's strategy and
    mode or its edit of the program's own call, a config action's settings."""
    text = f"{a.action} {a.target}"
    if a.action == "compile":
        if getattr(a, "own_call", None):
            return text + " (the program's own compile, edited: " + ", ".join(f"{k}={v!r}" for k, v in a.own_call.model_dump().items()) + ")"
        return text + f" ({a.strategy}{', ' + a.options.mode if a.options.mode != 'default' else ''})"
    if a.action == "attention":
        return text + f" (set_attn_implementation({a.implementation!r}))"
    if a.action == "branchless":
        return text + f" (the if at line {a.line} as torch.where)"
    if a.action == "dynamo_config":
        settings = a.settings if isinstance(a.settings, dict) else a.settings.model_dump(exclude_none=True)
        return text + " (" + ", ".join(f"torch._dynamo.config.{k} = {v}" for k, v in settings.items()) + ")"
    return text


def allocator_wanted(ctx: Context) -> str | None:
    """Why the allocator action is a candidate to measure (the memory rung's fragmentation verdict),
    or None: the rung found none, or did not run."""
    r = ctx.results.get("memory")
    if r is None or not r.ok or not r.implies.startswith("allocator"):
        return None
    return r.verdict


def measure_allocator_candidate(ctx: Context, out: SearchOutcome, timeout_s: float, say: Any) -> None:
    """Measure the allocator action where the memory rung asks for it (:func:`allocator_wanted`):
    the sweep without and with its setting, each in a fresh process (:func:`.memory.measure_allocator`;
    the engine's children run the harness, never the entry the action rewrites, so only the
    setting in the child's environment measures it). Fills ``out.allocator`` and says the result."""
    from .rungs.memory import measure_allocator

    why = allocator_wanted(ctx)
    if why is None:
        return
    say("allocator: measuring the shape sweep without and with expandable_segments:True, one fresh process each")
    try:
        out.allocator = measure_allocator(ctx.session.spec, ctx.session.src, timeout_s=timeout_s)
    except Exception as exc:  # ours (a child's failure is its arm's error): the search goes on without it
        out.allocator = {"error": f"not measured: {type(exc).__name__}: {exc}"}
    out.allocator["evidence"] = why
    text = out.allocator.get("skipped") or out.allocator.get("error") or out.allocator["effect"]["text"]
    if (out.allocator.get("effect") or {}).get("keep") and not ctx.entry:
        text += ("; not planned: the setting goes where your program starts, before its first CUDA allocation: "
                 "pass --entry file.py::func to plan the allocator action there")
    out.notes.append(f"allocator candidate: {text}")
    say(f"allocator: {text}")


def engine_options(ctx: Context, timeout_s: float) -> Any:
    """Engine options for the search: the session's backend forced on every compile when it
    cannot optimise (CPU: ``eager``); shorter timing on CPU, where speed is not what is decided."""
    from ..engine.options import Options, on_device

    from ..engine.cost import may_overlap

    cuda = ctx.session.cuda
    return on_device(Options(
        backend=ctx.backend,
        force_backend=ctx.backend if ctx.backend in NO_GAIN_BACKENDS else None,
        warmup=3 if cuda else 1,
        reps=30 if cuda else 5,
        # seconds of rounds per shape: with blocked samples (engine.timing.time_burst) 6 s is ~12
        # paired rounds per shape on a ~1B model (docs/decisions.md, "The search's budget and its
        # cold phases")
        budget_s=6.0 if cuda else 1.0,
        timeout_s=timeout_s,
        # Two compiles at a time on a GPU host with the CPUs for it: Dynamo's and Inductor's front
        # ends are single-threaded (docs/decisions.md, "The search's budget and its cold phases").
        parallel_cold=ctx.cold_parallel or (2 if may_overlap(True, "cuda" if cuda else "cpu") else 1),  # --cold-parallel
        # two processes per plan and two windows per shape on CUDA, one of each on a CPU (on_device)
        replicates=0,
        windows=0,
        # each shape in two more windows with a busy loop on the shared core (engine.windows.CONTENDED_WINDOWS), and the decision weighs both
        # host conditions (docs/decisions.md, "Minimax over host conditions")
        contended=cuda and ctx.contended,  # --host both (default) / quiet
        overlap=ctx.overlap,  # --no-overlap
        pin=ctx.pin,  # --pin
    ), "cuda" if cuda else "cpu")


def run_search(ctx: Context, *, budget_s: float = DEFAULT_BUDGET_S, timeout_s: float = 600.0,
               console: Any = None, log: Path | None = None, outcome: SearchOutcome | None = None,
               early: Any = None) -> SearchOutcome:
    """Propose, materialise, measure and decide. ``outcome`` (when given) is filled in place, so an
    interrupted search (Ctrl-C) still leaves the candidates measured so far with the caller.
    ``early``: the reference started before the compile rungs
    (:class:`.early_reference.EarlyReference`), taken over here (its folder and child included).

    ``budget_s`` bounds the search from its start: no cold phase starts that is expected to end
    after the budget less the timing's own seconds (:mod:`.search_budget`); one that does not fit
    is skipped and says why in the candidates table and search.log.

    Raises:
        StackpartError: the original tree cannot be copied, or the program as it is could not be
            measured (a candidate whose rewrite fails is a failed candidate, not an error).
    """
    started = time.perf_counter()
    out = _proposed(ctx, outcome)
    say = _sayer(console, log)
    workdir = early.workdir if early is not None else Path(tempfile.mkdtemp(prefix="stackpart-search-"))
    if early is not None:
        early.taken = True
    try:
        trees = _materialised(ctx, out, workdir, say, early)
        _say_what_is_measured(ctx, out, trees, say)
        ahead = _say_early(out, early, trees, say) if early is not None else None
        m = _measured(ctx, out, trees, started + budget_s, timeout_s, console, say, started, trees.started)
        if ahead is not None:
            out.clock["reference_started_before_search_s"] = ahead
        _read_the_program_as_it_is(ctx, out, m, trees, say)
        if not m.errors:
            measure_allocator_candidate(ctx, out, timeout_s, say)
        if m.errors:
            raise _as_is_failed(m.errors + m.hints.get("eager", []), trees.original, ctx.session.spec.file)
        _judge_twins(ctx, out, say)
        _decided(ctx, out, m, say)
    finally:
        if early is not None:  # ended by the engine once it ran; not if the search failed before
            early.end_children()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


@dataclass
class _Trees:
    """The search's temporary trees: the original (the eager reference's), the engine's variants
    (the reference first, then the candidates in proposal order) and the path prefixes that read
    as SRC in reports."""

    original: Path
    variants: list[Any]
    prefixes: dict[str, str]
    #: children started before the search (:mod:`.early_reference`), by variant name
    started: dict[str, Any] = field(default_factory=dict)


def _proposed(ctx: Context, outcome: SearchOutcome | None) -> SearchOutcome:
    """The program's own compile setup read once, the candidates proposed from the ladder's
    evidence, and the outcome started with them."""
    from .own_compile import compile_setup, harness_entries, off_compiles, own_compiles, parsed_setup

    src = ctx.session.src
    # read once: the report's setup lines here, what each compile covers in propose's compose step
    ctx.evidence.own_parsed = parsed_setup(src)
    own = compile_setup(src, parsed=ctx.evidence.own_parsed)
    entries = harness_entries(ctx.session.spec)
    ctx.evidence.own_regions = own_compiles(src, parsed=ctx.evidence.own_parsed,  # what each covers: propose and the run-time comparison
                                            entries=entries)
    # the calls a plan turned off (disable=True): listed as off, and candidates to turn back on
    ctx.evidence.own_off = off_compiles(src, parsed=ctx.evidence.own_parsed, entries=entries)
    cands, pruned = propose(ctx, own)
    out = outcome if outcome is not None else SearchOutcome(cands)
    out.candidates, out.pruned = cands, merge(pruned)
    out.own_setup = own
    out.own_config = [x.text for x in ctx.evidence.dynamo_config or ()]
    out.own_off_setup = [o.setup_line for o in ctx.evidence.own_off]
    out.backend = ctx.backend
    out.gain_measured = ctx.backend not in NO_GAIN_BACKENDS
    out.call = ctx.session.spec.call
    return out


def _sayer(console: Any, log: Path | None) -> Any:
    """``say(text)``: one search line to the console's ``-v`` stream and diagnose.log, and to
    ``log`` (search.log) with the time of day."""

    def say(text: str) -> None:
        event(console, f"search: {text}")  # -v and diagnose.log; the summary table says the outcome
        if log is not None:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    return say


def _materialised(ctx: Context, out: SearchOutcome, workdir: Path, say: Any, early: Any = None) -> _Trees:
    """SRC copied as the reference's tree (``early``'s copy where it started early), and each
    candidate (in proposal order: the expected-value order the cold phases run in) rewritten by
    the real rewrite path into a tree of its own; one that does not rewrite, or changes nothing,
    gets its row now and no tree. The anchor ``early`` started takes its place where its rewrite
    is the proposal's byte for byte (else, or where the proposal's anchor does not rewrite, it is
    ended, and the anchor starts with the others)."""
    from ..engine.materialize import IGNORE
    from ..engine.options import Variant

    src = ctx.session.src
    original = workdir / "original"
    if early is None:
        shutil.copytree(src, original, ignore=IGNORE, symlinks=True)
    trees = _Trees(original, [early.variant if early is not None else Variant("eager", original, judged=False,
                                                                              stance=reference_stance(ctx))],
                   {f"{original}/": ""}, {"eager": early.child} if early is not None else {})
    for i, c in enumerate(out.candidates):
        if c.name == AS_IS:
            continue
        try:
            result = candidate_rewrite(c, src, candidate_reading(ctx), out)
        except StackpartError as exc:
            refused(out, c.name, exc)  # search.log says it with the other pruned lines
            continue
        if not result.changes:
            out.rows[c.name] = {"skipped": f"changes nothing in SRC: the same as {AS_IS!r}"}
            continue
        held = early.started_anchor(c.name) if early is not None else None
        if held is not None:
            if held.same_rewrite(result.changes):
                trees.variants.append(held.variant)
                trees.started[c.name] = held.child
                trees.prefixes[f"{held.variant.tree}/"] = ""
                continue
            early.drop_anchor(c.name)
            say(f"{c.name}: the anchor started before the compile rungs is not the proposal's rewrite "
                "(the rungs after it changed the plan); it starts again with the others")
        tree = workdir / f"cand{i}"
        materialise(c, src, tree, result)
        trees.prefixes[f"{tree}/"] = ""
        trees.variants.append(candidate_variant(c, tree, result))
    for name in (WHOLE, WHOLE_STATIC):
        if early is not None and name not in trees.started:
            early.drop_anchor(name)  # no proposal's candidate took it: it must not compile beside the measured ones
    return trees


def candidate_rewrite(c: Candidate, src: Path, reading: Any = False, out: SearchOutcome | None = None) -> Any:
    """``c``'s plan through the real rewrite path (:func:`rewriter.rewrite.transform.plan_rewrite`,
    unsafe: the search measures what a user would apply). ``reading``: SRC's whole-model compiles
    a compile of a class would be inlined into, as ``stackpart rewrite`` reads them
    (:func:`candidate_reading`, :func:`src_reading`), or False not to read them (the early anchor,
    :mod:`.early_reference`, started before the search knows whether its 'whole' stands in for a
    compile of the program's the harness does not run). ``out``: the search's outcome, whose
    :attr:`SearchOutcome.rewrites` gives the result of the same plan rewritten with the same
    ``reading`` before and keeps this one. Raises StackpartError when it does not rewrite."""
    from ..plan import parse_plan
    from ..rewrite.transform import plan_rewrite
    from .report import plan_yaml

    kept = kept_rewrite(out, c.plan, reading) if out is not None else None
    if kept is not None:
        return kept
    result = plan_rewrite(parse_plan(plan_yaml(c.plan), f"candidate {c.name}"), src, unsafe=True, read_src=reading)
    if out is not None:
        out.rewrites.append((reading, _rewrite_key(c.plan), result))
    return result


def _rewrite_key(plan: Any) -> str:
    """``plan`` as the rewrite reads it, as text: every field but the actions' ``why:`` (the
    evidence the search's figures are appended to, which no action writes into the source)."""
    return json.dumps(plan.model_dump(mode="json", exclude={"actions": {"__all__": {"why"}}}), sort_keys=True)


def kept_rewrite(out: SearchOutcome, plan: Any, reading: Any, renamed: bool = False) -> Any:
    """The rewrite of ``plan`` (its actions' ``why:`` aside) with ``reading`` (the same object,
    :func:`src_reading`'s or :func:`candidate_reading`'s) that :func:`candidate_rewrite` made in
    this search, or None. Its ``changes`` are the diff ``plan`` makes; its ``warnings`` name the
    plan as ``candidate <name>`` and its lines there. ``renamed``: the plan is written under
    another name (diagnose's ``plan.yaml``): a result with generated ``_stackpart/library.py``
    files is not reused then, since their text names the plan (templates/library.py.j2), so
    its bytes, and the digest a validation report binds, differ from ``stackpart rewrite``'s."""
    key = _rewrite_key(plan)
    found = next((result for r, k, result in out.rewrites if r is reading and k == key), None)
    return None if found is not None and renamed and found.library_modules else found


def src_reading(ctx: Context) -> Any:
    """SRC's whole-model compile calls of a class instance
    (:class:`rewriter.rewrite.program_compiles.ProgramCompiles`), walked once per diagnose and kept in
    ``ctx.evidence``: what ``stackpart rewrite`` reads to refuse a compile of a class the program
    compiles whole itself, so that no plan diagnose measures or writes is one it refuses."""
    from ..rewrite.program_compiles import ProgramCompiles

    if ctx.evidence.program_compiles is None:
        ctx.evidence.program_compiles = ProgramCompiles(ctx.session.src)
    return ctx.evidence.program_compiles


def candidate_reading(ctx: Context) -> Any:
    """:func:`src_reading` for the candidates' rewrites: the program's call measured through
    stand-ins (:func:`.own_candidates.standin`) left out, since the plan written edits that call
    instead of compiling beside it (:func:`.own_candidates.translate`), and that plan is checked
    with the call read (:func:`_decided`)."""
    stand = ctx.evidence.own_standin
    reading = src_reading(ctx)
    return reading.measuring(frozenset({stand.where})) if stand is not None else reading


#: How a pruned line of a candidate whose plan ``stackpart rewrite`` refuses goes on after its name.
REFUSED = "stackpart rewrite refuses its plan: "


def refused(out: SearchOutcome, name: str, exc: StackpartError) -> str:
    """Candidate ``name``, whose plan ``stackpart rewrite`` refuses (``exc``), is out: failed, as
    :func:`.decide.decide` excludes a failed candidate (a ``problems`` row), and pruned with the
    refusal's message (the report's pruned list and the notes); returns that pruned line, for
    search.log where the pruned lines were said already."""
    out.rows[name] = {**{k: v for k, v in (out.rows.get(name) or {}).items() if k != "problems"},
                      "problems": [f"the plan does not rewrite: {exc}"]}
    line = f"{name}: {REFUSED}{exc}"
    out.pruned = merge([*out.pruned, line])
    return line


def materialise(c: Candidate, src: Path, tree: Path, result: Any) -> None:
    """SRC copied to ``tree`` with ``c``'s rewrite (``result``) applied."""
    from ..engine.materialize import IGNORE
    from ..rewrite.apply import apply_changes

    shutil.copytree(src, tree, ignore=IGNORE, symlinks=True)
    apply_changes(tree, result.changes, own_copy=True)


def candidate_variant(c: Candidate, tree: Path, result: Any) -> Any:
    """The engine's :class:`~rewriter.engine.options.Variant` for ``c`` rewritten into ``tree``."""
    from ..engine.options import Variant
    from .search_budget import cost_key

    mark = [(None, a.arg, a.dim) for a in c.plan.actions if a.action == "mark_dynamic"]
    site = {"target": c.plan.site, "option": "diagnose --site"} if c.plan.site else None
    return Variant(c.name, tree, compiles=c.compiles, mark_dynamic=mark, library_modules=result.library_modules,
                   site=site, cost_key=cost_key(c), anchor=c.name in (WHOLE, WHOLE_STATIC, OWN_STATIC),
                   warm_shapes=c.name in (WHOLE_STATIC, OWN_STATIC))


def _say_what_is_measured(ctx: Context, out: SearchOutcome, trees: _Trees, say: Any) -> None:
    """search.log's opening: the candidates to measure in their order, the pruned ones, and the
    program's own compile setup."""
    variants = trees.variants
    say(f"{len(variants) - 1} candidate plan(s) to measure ({', '.join(v.name for v in variants[1:])}) beside the program as it is; "
        f"backend {ctx.backend}" + ("" if out.gain_measured else f" (forced on every compile: failures measured, gains not)"))
    for p in out.pruned:
        say(f"pruned {p}")
    if out.own_setup:
        say(f"the program as it is (the baseline) carries its own compile setup: {'; '.join(out.own_setup[:5])}"
            + (f" (+{len(out.own_setup) - 5} more)" if len(out.own_setup) > 5 else ""))
    if out.own_off_setup:
        say(f"the program as it is carries compile calls turned off: {'; '.join(out.own_off_setup[:5])}"
            + (f" (+{len(out.own_off_setup) - 5} more)" if len(out.own_off_setup) > 5 else ""))


def _say_early(out: SearchOutcome, early: Any, trees: _Trees, say: Any) -> float:
    """The note and the search.log line of a reference (and an anchor) started before the compile
    rungs; returns how many seconds before the search it was started."""
    ahead = round(time.perf_counter() - early.started_at, 2)
    text = (f"the program as it is (the reference) was started {ahead:.0f} s before the search, before the ladder's "
            "compile rungs: its build, run and float64 reference overlapped them")
    early_ones = [n for n in (WHOLE, WHOLE_STATIC) if n in trees.started]
    if len(early_ones) == 2:
        text += (f"; so were the whole-model anchor ({WHOLE!r}) and its static-shape twin ({WHOLE_STATIC!r}), whose "
                 "cold phases ran beside them: their compile seconds include what the compile rungs took from the host's CPUs")
    elif early_ones:
        what = f"the whole-model anchor ({WHOLE!r})" if early_ones[0] == WHOLE else f"the static-shape twin ({WHOLE_STATIC!r})"
        text += (f"; so was {what}, whose cold phase ran beside them: its compile seconds "
                 "include what the compile rungs took from the host's CPUs")
    out.notes.append(text)
    say(text)
    return ahead


def _measured(ctx: Context, out: SearchOutcome, trees: _Trees, end: float, timeout_s: float, console: Any, say: Any,
              started: float, children: dict[str, Any] | None = None) -> Any:
    """Every variant measured by the engine (:func:`rewriter.engine.measure.measure`), its cold
    phases before ``end`` less the timing's seconds; the rows, timing, notes and clock copied
    into ``out`` also when interrupted. Returns the engine's :class:`~rewriter.engine.measure.Measurement`."""
    from ..engine.measure import Measurement, measure, relabel
    from .search_budget import timing_reserve_s

    opts = engine_options(ctx, timeout_s)
    feed = console if isinstance(console, Feed) else None
    if feed is not None:  # one step per cold phase, one for the timing rounds
        feed.start("search: cold phases", total=len(trees.variants) + 1)
    m = Measurement()
    try:
        measure(ctx.session.spec, trees.variants, opts, trees.original.parent,
                amortization=ctx.amortization.model_dump(), deadline=end - timing_reserve_s(opts, len(ctx.session.spec.shapes)),
                on_event=_progress(feed, say, opts, trees.prefixes), partial=m, started=children)
    finally:
        if feed is not None:
            feed.stop()
        for name, row in relabel(m.results, trees.prefixes).items():
            out.rows[AS_IS if name == "eager" else name] = row
        out.timing = [{"shape": row["shape"], "timing": {(AS_IS if k == "eager" else k): v for k, v in row["timing"].items()}}
                      for row in m.timing]
        out.notes.extend(m.notes)
        out.clock = {k: round(v, 2) for k, v in m.clock.items()} | {"timing_s": round(m.timing_wall_s, 2)}
        out.seconds = round(time.perf_counter() - started, 2)
    return m


def _progress(feed: Feed | None, say: Any, opts: Any, prefixes: dict[str, str]) -> Any:
    """The engine's ``on_event``: the progress feed advanced per cold phase, and one search.log
    line per cold phase, skip, timing window and replica start."""
    from ..engine import warmers
    from ..engine.options import REPLICA_TEXT

    def on_event(name: str, event: str, detail: Any) -> None:
        label = AS_IS if name == "eager" else name
        if feed is not None and event in ("skipped", "cold"):
            feed.advance(f"search: {label} measured")
        elif feed is not None and event == "timing":
            feed.describe("search: timing rounds")
        if event == "skipped":
            say(f"{label}: {detail}")
        elif event == "timing":
            say(f"timing every candidate interleaved at {detail}")
        elif event == "replicates":
            say(f"starting a second process for each of {detail} timed plan(s), {REPLICA_TEXT[opts.replica_caches]}")
        elif event == "cold":
            comp = detail.get("compile") or {}
            failed = f"failed: {detail['error']}" if detail.get("error") else ""  # the reference's error: no problems list
            what = " ".join(("; ".join(detail.get("problems") or []) or failed).split()) or (
                f"{compile_text(detail)} (all shapes), {comp.get('unique_graphs', 0)} graph(s), "
                f"{comp.get('recompiles', 0)} recompile(s), numerics {'reference' if name == 'eager' else detail.get('numerics', '-')}")
            warmed = warmers.summary(detail)
            if warmed and not detail.get("problems"):
                what += f"; {warmed}"
            for tree_prefix in prefixes:
                what = what.replace(tree_prefix, "")
            say(f"{label}: {progress_line(what)}")

    return on_event


def reference_stance(ctx: Context) -> str | None:
    """The stance the search's reference runs under: ``force_eager`` where the program's own
    compile raised (:mod:`.own_raised`: the program with compilation off is the one that runs, as
    validate's eager reference), else None (the program as it runs, its compile included)."""
    return "force_eager" if ctx.evidence.own_raised is not None else None


def _read_the_program_as_it_is(ctx: Context, out: SearchOutcome, m: Any, trees: _Trees, say: Any) -> None:
    """What the as-is process saw of the program's own compiles (each own call, then each frame;
    where the static and run-time readings disagree), the notes that follow (it compiles itself,
    or its compile lives where the harness does not run it; a recompile limit it hits), and each
    variant's hints on its row."""
    from ..engine.measure import relabel

    if ctx.evidence.own_raised is not None:
        _said_it_raises(ctx, out, say)
    else:
        _compiles_as_run(ctx, out, say)
    for name, hints in relabel(m.hints, trees.prefixes).items():
        label = AS_IS if name == "eager" else name
        if label in out.rows:
            out.rows[label].setdefault("hints", []).extend(hints)


def _said_it_raises(ctx: Context, out: SearchOutcome, say: Any) -> None:
    """The note where the program's own compile raised (:mod:`.own_raised`): what ``as-is`` measured."""
    raised = ctx.evidence.own_raised
    note = (f"the program as it is raises: its own torch.compile raised{where_raised(raised)} ({raised['message'][:200]}); "
            f"'{AS_IS}' is the program with compilation off (torch.compiler.set_stance('force_eager')), the reference "
            "every candidate is compared with, and the plan cannot leave that compile as it is")
    out.notes.append(note)
    say(note)


def _compiles_as_run(ctx: Context, out: SearchOutcome, say: Any) -> None:
    """The as-is row's reading of the program's own compiles (see :func:`_read_the_program_as_it_is`)."""
    from .runtime_compile import disagreements, per_call, seen

    asis = out.rows.get(AS_IS) or {}
    graphs = (asis.get("compile") or {}).get("unique_graphs") or 0
    runtime = asis.get("runtime_compiles")
    out.runtime_setup = per_call(ctx.evidence.own_regions, runtime) + seen(runtime)  # each own call, then each frame
    out.runtime_disagreements = disagreements(ctx.evidence.own_regions, runtime)
    if out.runtime_setup:
        say(f"the program as it is, seen at run time: {'; '.join(out.runtime_setup[:5])}")
    if graphs:
        out.notes.append(f"the program as it is compiles itself ({graphs} graph(s) at run time"
                         + (f"; {'; '.join(out.own_setup[:3])}" if out.own_setup else "")
                         + (f"; seen at run time: {'; '.join(out.runtime_setup[:3])}" if out.runtime_setup else "")
                         + "): every candidate is measured on top of it")
    elif out.own_setup:
        # the compile lives in the program's own script (train.py's apply_compile), which the
        # harness does not run: candidates were composed with it statically (candidates.compose);
        # which compile did not run, and why, is the run-time reading's (below) where there is one
        out.notes.append(f"the program compiles code itself ({'; '.join(out.own_setup[:3])}), but the harness's model ran "
                         "0 graphs" + ("" if out.runtime_disagreements else ": that compile is in a script the harness does not run")
                         + "; every candidate was composed with it from the source (no second compile, no disable in its "
                         "fullgraph region, no mark inside it) and measured on the harness's model")
    for line in out.runtime_disagreements:  # the static and the run-time readings disagree: one sentence each
        out.notes.append(f"the program as it is: {line}")
        say(f"the program as it is: {line}")
    hits = (asis.get("compile") or {}).get("recompile_limit_hits") or []
    if hits:
        knob = ctx.evidence.value_guard_twins  # .value_guards: a changing int kept out of the guards
        out.notes.append(f"the program as it is hits the recompile limit in its own compiled code ({hits[0][:200]}): "
                         "those frames already run eager; candidates that keep that code compiled fail the same way"
                         + (f", unless they keep the changing int out of the guards ({', '.join(knob)})" if knob else ""))


def _judge_twins(ctx: Context, out: SearchOutcome, say: Any) -> None:
    """Twins that did not do what they were proposed for are pruned after measurement, each
    candidate kind by its own judge (:func:`.kinds.judge`: a config twin that kept no break in the
    graph, a knob twin that recompiled no less, a ``+branchless`` twin that removed no break)."""
    from .kinds import judge

    for line in judge(ctx, out.rows):
        if line not in out.pruned:
            say(f"pruned {line}")
        out.pruned = merge([*out.pruned, line])


def _decided(ctx: Context, out: SearchOutcome, m: Any, say: Any) -> None:
    """The decision (:func:`.decide.decide`) over the rows in proposal order with the measured
    noise band; a plan measured through stand-ins for the program's own compile is written as the
    edit of that call. The chosen plan, as written, is rewritten with SRC read as ``stackpart
    rewrite`` reads it (:func:`src_reading`); one it refuses is out (:func:`refused`) and the
    decision is made again without it, down to the program as it is (a plan that changes nothing)."""
    from ..engine.noise import process_noise

    samples = [{(AS_IS if k == "eager" else k): v for k, v in per.items()} for per in m.samples]
    a = ctx.amortization
    out.noise = process_noise(m.timing)
    order = [c.name for c in out.candidates]
    raised = ctx.evidence.own_raised
    if raised is None and ctx.evidence.own_standin is not None:
        from .own_candidates import standin_raises

        raised = standin_raises(ctx, ctx.evidence.own_standin)  # that call raises as it is
    out.as_is_raises = raised is not None  # the as-is row is then the program with compilation off
    baseline = COMPILATION_OFF if out.as_is_raises else AS_RUN
    while True:
        out.choice = decide(out.rows, order, samples, a.runs, a.restarts, out.gain_measured, out.noise, baseline)
        if raised is not None:
            out.choice = when_as_is_raises(out.choice, out.rows, order, raised, out.noise)
        cand = out.chosen
        measured = cand.plan if cand is not None else None
        note = None
        if ctx.evidence.own_standin is not None:  # the program's compile measured through stand-ins: its call edited
            from .own_candidates import translate

            note = translate(ctx, out, ctx.evidence.own_standin)
        if cand is None or cand.name == AS_IS:
            break
        try:  # the plan written, as `stackpart rewrite` reads it (the stand-in's call read too)
            candidate_rewrite(cand, ctx.session.src, src_reading(ctx), out)
            break
        except StackpartError as exc:  # out, and the decision falls to the next candidate by the same rule
            cand.plan = measured
            say(f"pruned {refused(out, cand.name, exc)}")
    if note:
        out.notes.append(note)
        say(note)
    say(f"chose {out.choice.text}")


def _unmeasured(out: SearchOutcome, name: str, asis: dict[str, Any]) -> str:
    """What the chosen candidate's figures leave unmeasured, said after its compile per start:
    nothing where the backend optimises; the step-time gain where it does not, and for a candidate
    whose gain is compile time (:data:`.candidate.COMPILE_TIME`) the program's own compile per
    start it was judged against (:func:`.decide.decide`); and where the recompiles over the
    harness's shapes decided, those counts (:attr:`.decide.Choice.decided_by`)."""
    if out.gain_measured:
        return ""
    decided = f"; {out.choice.decided_by}" if out.choice is not None and out.choice.decided_by else ""
    if name in COMPILE_TIME:
        return (f" vs {compile_text(asis)} as is (backend {out.backend}: the step-time gain is not measured; its gain is "
                "compile time, which is)" + decided)
    return f" (backend {out.backend}: gain not measured)" + decided


def annotated(out: SearchOutcome) -> Any:
    """The chosen candidate's plan, each action's ``why:`` ending with the candidate's figures."""
    cand = out.chosen
    assert cand is not None and out.choice is not None
    row = out.rows.get(cand.name) or {}
    asis = out.rows.get(AS_IS) or {}
    timed = sum(1 for r in out.rows.values() if r.get("step_ms") is not None)
    failed = sum(1 for s in out.choice.status.values() if s.startswith("failed"))
    if row.get("step_ms") is not None and asis.get("step_ms"):
        cite = (f"search: {cand.name!r} chosen of {timed} plans timed"
                + (f" ({failed} more failed)" if failed else "") + f": {row['step_ms']:.3f} ms/step vs "
                f"{asis['step_ms']:.3f} " + ("with compilation off (as it is, the program raises)" if out.as_is_raises else "as is")
                + (f" ({row['contended_step_ms']:.3f} vs {asis['contended_step_ms']:.3f} with the host core contended)"
                   if row.get("contended_step_ms") and asis.get("contended_step_ms") else "")
                + f", {compile_text(row)}" + _unmeasured(out, cand.name, asis))
    else:
        cite = f"search: {cand.name!r} chosen ({out.choice.text})"
    if not cand.name.startswith("per-block"):
        # a repeated block existed and was measured as its own candidate: say how it fared
        blocks = [(n, r) for n, r in out.rows.items() if n.startswith("per-block") and r.get("step_ms") is not None]
        if blocks:
            name, best = min(blocks, key=lambda nr: nr[1]["step_ms"])
            cite += f"; {name!r} measured {best['step_ms']:.3f} ms/step: {out.choice.status.get(name, 'not chosen')}"
    actions = [a.model_copy(update={"why": ((a.why + "; ") if a.why else "") + cite}) for a in cand.plan.actions]
    # the allocator action goes to the program's entry (--entry), which the harness never runs:
    # it is measured apart (:func:`measure_allocator_candidate`, the setting in a child's
    # environment) and kept whichever compile candidate wins, unless that measurement found no
    # gain for a verdict read off the sweep (an OOM's evidence is kept: the fresh sweep may not
    # meet the pressure the OOM did)
    have = {(a.action, a.target) for a in actions}
    rule = next((c for c in out.candidates if c.rule), None)
    measured = out.allocator or {}
    effect = measured.get("effect") or {}
    cite_alloc = (f"; search: {effect['text']}" if effect else
                  f"; search: {measured.get('skipped') or measured['error']}" if measured.get("skipped") or measured.get("error") else
                  "; not measured by the search (the harness does not run the entry point)")
    for a in rule.plan.actions if rule is not None else []:
        if a.action == "allocator" and (a.action, a.target) not in have:
            actions.insert(0, a.model_copy(update={"why": a.why}))
    drop = effect.get("keep") is False and not str(measured.get("evidence", "")).startswith("fragmenting: out of memory")
    kept = []
    for a in actions:
        if a.action != "allocator":
            kept.append(a)
        elif not drop:
            base = a.why.split("; search: ")[0]  # the ladder's evidence, then the allocator's own measurement
            kept.append(a.model_copy(update={"why": base + cite_alloc}))
    return cand.plan.model_copy(update={"actions": kept})


def validation_report(out: SearchOutcome, ctx: Context, plan_path: Path, result: Any = None) -> dict[str, Any] | None:
    """The chosen candidate's measurement as a validation report (the format ``validate`` writes
    and ``rewrite --apply`` checks), bound to its diff's sha256, the plan file as written and SRC's
    hashes now. ``result``: that plan's rewrite already made (diagnose's writer makes it before
    anything is written), else made here. None when the chosen plan changes nothing (nothing to
    gate).

    Raises:
        StackpartError: the plan as written does not rewrite (:func:`_decided` rewrote it first: a
            bug of ours).
    """
    from ..engine.measure import environment
    from ..engine.verdict import Verdict, contended_band, speed_failures
    from ..plan import load_plan
    from ..rewrite.transform import plan_rewrite
    from ..validate.report import report_header
    from .evidence import UNREAD

    cand = out.chosen
    if cand is None or cand.name == AS_IS:
        return None
    src = ctx.session.src
    loaded = load_plan(plan_path)
    if result is None:  # the plan as written: its diff is what --apply checks
        result = plan_rewrite(loaded, src, unsafe=True, read_src=src_reading(ctx))
    if not result.changes:
        return None
    spec = ctx.session.spec
    cuda = ctx.session.cuda
    variants: dict[str, Any] = {"eager": dict(out.rows[AS_IS])}
    variants["plan"] = dict(out.rows[cand.name], compiled=f"search candidate {cand.name!r}")
    for c in out.candidates:
        if c.name not in (AS_IS, cand.name) and c.name in out.rows:
            variants[c.name] = dict(out.rows[c.name])
    for v in variants.values():
        for k in ("problems", "hints", "error_kind"):
            v.pop(k, None)
    timing = [{"shape": row["shape"], "timing": {("plan" if k == cand.name else "eager" if k == AS_IS else k): t
                                                 for k, t in row["timing"].items()}} for row in out.timing]
    report = report_header(loaded, src, result, spec, out.backend, environment("cuda" if cuda else "cpu", spec.device if ctx.evidence.requested_device is UNREAD else ctx.evidence.requested_device))
    report.update(written_by="stackpart diagnose (the search's measurement of the chosen candidate)",
                  variants=variants, timing=timing)
    verdict = Verdict(notes=[f"measured by diagnose's search: {out.choice.text}"] + list(out.notes))
    verdict.failures.extend((out.rows[cand.name].get("problems") or []))
    mean = {"plan": variants["plan"].get("step_ms"), "eager": variants["eager"].get("step_ms")}
    busy = {"plan": variants["plan"].get("contended_step_ms"), "eager": variants["eager"].get("contended_step_ms")}
    busy = {k: v for k, v in busy.items() if v is not None}
    band = contended_band(out.noise)
    if len(busy) == 2:
        report["contended_band"] = band
    speed = speed_failures({k: v for k, v in mean.items() if v is not None}, 0.0, variants["plan"].get("amortization"),
                           busy if len(busy) == 2 else None, band, (COMPILATION_OFF if out.as_is_raises else AS_RUN).name)
    if cuda and out.gain_measured:
        verdict.failures.extend(speed)
    else:
        verdict.notes.append("speed and amortization were reported but not gated: "
                             + ("the backend does not optimise" if not out.gain_measured else "timings are CPU wall-clock, not GPU"))
    report["verdict"] = verdict.to_json()
    return report
