"""Run the ladder: load the harness, run each rung with progress, plan, write every output.

A rung that fails inside stackpart or torch (an ``explain`` crash, say) is recorded as ``error``
and the ladder goes on; a harness failure (the user's code raised, returned no tensors, ran out
of memory or hung past the timeout) stops the ladder: report.json is still written with the rungs
measured so far, and a :class:`~rewriter.errors.StackpartError` naming the rung and the harness
callable is raised (exit 2). Setup builds the model and runs one step at each harness shape
after the first (:meth:`.session.Session.check_shapes`), so a harness that fails only at a later
shape stops there too, before the rungs, instead of in the search.

Bad input writes nothing: the harness, flags and ``--entry``/``--site`` are checked before setup,
what the configuration names on the built model (``harness.call``, a
:class:`~rewriter.errors.ConfigError`) during setup's build, and the report folder is made, the
previous run's artifacts cleared and diagnose.log opened only after setup (:func:`_open_report`).
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StackpartError, src_dir
from ..harness import device_record, load_harness, resolve_device
from ..plan import Amortization, Harness
from ..shapes import with_own_default_shape
from .candidate import AS_IS
from .context import Context
from .declared import read as declared_blocks
from .dynamo_settings import environment as compile_environment
from .dynamo_settings import environment_settings
from .dynamo_settings import read as read_dynamo_config
from .evidence import UNREAD
from .report import charts, default_report_dir, markdown, plan_yaml, terminal, to_json, write_json
from .rung import Rung, RungResult
from .rungs import givers, ladder, memory
from .rungs.granularity import find_blocks
from .session import HarnessFailure, Session

#: After the ladder: the candidate plans measured as wholes (:mod:`.search`); ``only`` may name it.
SEARCH = "search"
#: The least seconds a search's child waits (``--timeout`` below it is raised to it): a child
#: builds, compiles and runs a model, where a harness call only runs it.
SEARCH_MIN_TIMEOUT_S = 120.0
#: What a run writes into its report folder (removed first, so a failed run leaves no mix).
ARTIFACTS = ("report.json", "report.md", "op_mix.png", "blocks.png", "candidates.png", "trace.json", "search.log", "diagnose.log")


@dataclass
class Outcome:
    """What one diagnosis produced."""

    rungs: list[RungResult]
    plan: Any = None
    notes: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: Why the ladder stopped before its last rung with a plan still written (a fragmentation
    #: OOM), or None when every rung ran.
    stopped: str | None = None
    #: The search's outcome (:class:`.search.SearchOutcome`), or None when it did not run.
    search: Any = None


def memory_from_oom(ctx: Context, results: list[RungResult], oom_in: HarnessFailure, stopped: bool) -> None:
    """A fragmentation OOM met in rung ``oom_in.rung`` is the memory rung's verdict
    (:func:`.rungs.memory.from_oom`). ``stopped``: the ladder ended there, so every rung not run is
    recorded as skipped and the planner sees a whole ladder. Mutates ``results`` (kept in ladder
    order) and ``ctx.results``."""
    have = {r.name: r for r in results}
    have["memory"] = memory.from_oom(oom_in.rung, oom_in.oom or {})
    if stopped:
        ctx.evidence.stopped_at = oom_in.rung
        why = f"the ladder stopped at rung {oom_in.rung} (fragmentation OOM)"
        have.update({r.name: r.skipped(why) for r in ladder() if r.reported and r.name not in have})
    results[:] = [have[r.name] for r in ladder() if r.name in have]
    ctx.results.update(have)


def rung_error(exc: BaseException, src: Path) -> str:
    """A rung's own failure (stackpart's or torch's, not a harness call), one line: the
    exception's first full line (:func:`rewriter.tracebacks.headline`) and where it points, the user's
    file:line under SRC when torch names one (:func:`rewriter.tracebacks.user_site`), else the frame that
    raised (``explain.py:123``)."""
    from ..tracebacks import headline, user_site

    path, line, note = user_site(exc, src)
    if path is not None:
        where = f"{path}:{line}" + (f", {note}" if note else "")
    else:
        tb = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    return f"{headline(exc)} ({where})"


def stopped_error(fatal: Any, said: str, harness_file: str, report: Path) -> StackpartError:
    """The one line a harness failure that stops the ladder prints: the user's ``file:line``
    (relative to SRC) first, as the README's ``error: path:line: ...`` says, and not again at the
    end; only Dynamo's note (``in Net.forward, which Dynamo was compiling``) stays there. Without
    a known line it is at the harness file, with no place repeated either."""
    note = f" ({fatal.note})" if fatal.note and fatal.path and fatal.line else ""
    text = f"diagnose stopped at rung {fatal.rung}: {said}{note}; partial results in {report}"
    if fatal.path and fatal.line:
        return StackpartError(text, path=fatal.path, line=fatal.line)
    return StackpartError(text, path=harness_file)


def _ours(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds a previous diagnose report (its report.json is one of ours): only
    then are its artifacts removed; a ``--report-dir`` of the user's (``.``) keeps their files."""
    import json

    try:
        previous = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(previous, dict) and "rungs" in previous and "version" in previous


def default_backend(device: str) -> str:
    """``inductor`` on CUDA (the real gain is measured); ``eager`` on CPU (compile cost only)."""
    return "inductor" if device.startswith("cuda") else "eager"


def diagnose(
    spec: Harness,
    src: str | Path,
    plan_out: str | Path,
    *,
    report_dir: str | Path | None = None,
    backend: str | None = None,
    amortization_spec: Amortization | None = None,
    timeout_s: float = 300.0,
    steps: int = 3,
    console: Any = None,
    only: set[str] | None = None,
    entry: str | None = None,
    budget_s: float | None = None,
    site: str | None = None,
    overlap: bool = True,
    pin: str = "shared",
    cold_parallel: int | None = None,
    contended: bool = True,
) -> Outcome:
    """Run the ladder on the harness and write plan, report.md, report.json, charts and trace.

    Args:
        spec: the harness section (from flags or a plan).
        src: the source tree (targets are relative to it).
        plan_out: where plan.yaml goes.
        report_dir: where report.md/json, charts and trace.json go (default: ``<plan dir>/stackpart-diagnose``,
            ``stackpart-diagnose-<stem>`` for a plan not named ``plan.yaml``).
        backend: compile backend of the search's candidates (default :func:`default_backend`; a
            backend that cannot optimise, ``eager`` on CPU, is forced on every compile in every
            candidate: failures are measured, gains are not).
        amortization_spec: runs/restarts; None assumes 1e6 runs, 1 restart and says so.
        timeout_s: limit for one call into the harness (a hang becomes an error).
        steps: profiled steps.
        only: run only these rungs (tests); the others are recorded as skipped, and the search
            runs only when ``"search"`` is among them (else the rule's proposal is the plan).
        budget_s: seconds for the search (``--budget``): a cold phase that is not expected to end
            within them (the timing included) is skipped and says why.
        entry: ``file.py::func`` under SRC, the program's entry point (``--entry``): the only
            target for the ``allocator`` action (the harness is scaffolding, not the program).
        site: ``file.py::func`` under SRC that returns the model (``--site``): where actions on an
            installed library's classes are applied (default: the harness's model function).
        overlap: the search's eager reference may overlap the first candidate's cold phase
            (``--no-overlap``: False); :attr:`rewriter.engine.options.Options.overlap`.
        pin: where the search's timed processes run (``--pin``): :attr:`rewriter.engine.options.Options.pin`.
        cold_parallel: candidates' cold phases at a time (``--cold-parallel``), None for the
            default (:attr:`rewriter.engine.options.Options.parallel_cold`).
        contended: on CUDA, also time every candidate with its host core contended and decide on
            both conditions (``--host both``; ``--host quiet``: False):
            :attr:`rewriter.engine.options.Options.contended`.

    Raises:
        StackpartError: the harness cannot be loaded or its configuration names what the built
            model lacks (:class:`rewriter.errors.ConfigError`; nothing written, no folder made), or
            a harness call failed during setup or a rung (report.json written with the partial
            results).
    """
    from ..engine.runner import environment_pinned
    from ..terminal import Feed, stderr

    with environment_pinned():  # the measurement children start from the environment of this call
        started = time.perf_counter()
        feed = console if isinstance(console, Feed) else Feed(console or stderr())  # per-event lines: -v and the log
        run = _load(spec, src, plan_out, report_dir, feed, timeout_s, entry, site)
        run.started = started
        run.ctx = Context(session=run.session, out_dir=run.out_dir, backend=backend or default_backend(run.spec.device),
                          amortization=amortization_spec or Amortization(runs=1_000_000, restarts=1),
                          amortization_assumed=amortization_spec is None, entry=entry, site=site, overlap=overlap, pin=pin,
                          cold_parallel=cold_parallel, contended=contended, steps=steps)
        run.ctx.evidence.requested_device = run.requested  # the harness's own (None: unset), for the validation report
        run.meta = _meta(run)
        _announce(run)
        run.searching = only is None or SEARCH in only
        try:
            _climb(run, only, max(timeout_s, SEARCH_MIN_TIMEOUT_S))
            outcome = _after_ladder(run)
            if run.searching and not outcome.stopped:
                decision, outcome.search = _plan_by_search(run, budget_s, timeout_s)
            else:  # the rules' proposal, unmeasured (the search proposes it as its first candidate otherwise)
                decision = _plan_by_rules(run, stopped=outcome.stopped is not None)
        finally:
            if run.early is not None:
                run.early.close()  # a no-op once the search took it over
        outcome.plan, outcome.notes = decision.plan, _notes(run, decision, outcome, site)
        _write(run, outcome, started)
        terminal(feed.console, outcome.rungs, outcome.notes, outcome.plan, outcome.paths, said=feed.said,
                 dynamo_config=run.meta.get("dynamo_config"),
                 environment_config=run.meta.get("dynamo_config_environment"))
        return outcome


@dataclass
class _Run:
    """One diagnosis under way: what its steps (:func:`diagnose`) read and add to.

    Attributes:
        spec: the harness section, its device resolved (:func:`rewriter.harness.resolve_device`).
        requested: the harness's own device before it was resolved (None: unset).
        src: the source tree.
        plan_out: where plan.yaml goes.
        out_dir: the report folder.
        session: the harness session.
        feed: the terminal and the log (:class:`rewriter.terminal.Feed`).
        ctx: what the rungs read, set once the session is loaded.
        meta: the report's header (harness, device, backend, amortization, CPU threads).
        results: the rungs' results so far, ladder order.
        fatal: the harness failure that stopped the ladder, or None.
        compiled_oom: a compile rung's fragmentation OOM (the ladder goes on), or None.
        started: ``time.perf_counter()`` when diagnose began (the default budget counts from it).
        searching: the search runs after the ladder (not ``--no-search``).
        early: the search's reference started before the compile rungs
            (:class:`.early_reference.EarlyReference`), or None.
        shape_note: where neither ``--shape`` nor ``harness.shapes`` gave a shape, which one
            runs (:func:`rewriter.shapes.own_defaults_text`; ``spec.shapes`` holds it); else None.
    """

    spec: Harness
    requested: str | None
    src: Path
    plan_out: Path
    out_dir: Path
    session: Session
    feed: Any
    ctx: Context = field(init=False)
    meta: dict[str, Any] = field(default_factory=dict)
    results: list[RungResult] = field(default_factory=list)
    fatal: HarnessFailure | None = None
    compiled_oom: HarnessFailure | None = None
    started: float = field(default_factory=time.perf_counter)
    searching: bool = True
    early: Any = None
    shape_note: str | None = None

    def said(self, text: str) -> None:
        """An event line (``-v``, diagnose.log): each rung's start and end, setup's steps."""
        self.feed.event(f"diagnose: {text}")


def _load(spec: Harness, src: str | Path, plan_out: str | Path, report_dir: str | Path | None, feed: Any,
          timeout_s: float, entry: str | None, site: str | None) -> _Run:
    """Load the harness and check ``--entry``/``--site``; nothing is written here (the report
    folder opens after setup, :func:`_open_report`). Without a shape (``harness.shapes`` is
    ``[{}]``), the inputs function's own int defaults become the harness's shape
    (:func:`rewriter.shapes.with_own_default_shape`): the rungs, the plan and the report read the
    shape that runs.

    Raises:
        StackpartError: the harness cannot be loaded, or ``--entry``/``--site`` is wrong (nothing written).
    """
    src = src_dir(src)
    requested = spec.device
    spec = resolve_device(spec)
    harness = load_harness(spec, src)
    spec, shape_note = with_own_default_shape(spec, harness.make_inputs)
    if spec is not harness.spec:  # no --shape and no harness.shapes: the inputs function's own defaults are the shape
        from dataclasses import replace

        harness = replace(harness, spec=spec)
    if entry is not None:
        check_entry(entry, src)
    if site is not None:
        check_entry(site, src, flag="--site")
    plan_out = Path(plan_out)
    out_dir = Path(report_dir) if report_dir else default_report_dir(plan_out)
    return _Run(spec, requested, src, plan_out, out_dir, Session(harness, timeout_s=timeout_s), feed, shape_note=shape_note)


def _meta(run: _Run) -> dict[str, Any]:
    """The report's header: harness, device, mode, dtype, reference shape, backend, amortization."""
    spec, ctx = run.spec, run.ctx
    return {
        "harness": spec.model_dump(mode="json"),
        "src": str(run.src),
        **device_record(run.requested, spec.device),
        "mode": spec.mode,
        "dtype": spec.dtype,
        "reference_shape": dict(spec.shapes[0]),
        "backend": ctx.backend,
        "amortization": ctx.amortization.model_dump(),
        "amortization_assumed": ctx.amortization_assumed,
    }


def _announce(run: _Run) -> None:
    """Check a CUDA device is there; on CPU, fit the thread count to the cores and say so; say
    which shape runs where none was given. Writes nothing.

    Raises:
        StackpartError: ``harness.device`` is cuda and torch sees no CUDA device.
    """
    spec, console = run.spec, run.feed.console
    if spec.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise StackpartError("harness.device is cuda but torch sees no CUDA device", path=spec.file, hint="use --device cpu")
    else:  # the ladder times on this process's CPU: a thread count that fits the cores, said in the report
        from ..threads import apply_in_process

        run.meta["cpu_threads"] = apply_in_process()
        console.print(f"diagnose: device cpu ({run.meta['device_rule']}); {run.meta['cpu_threads']['text']}", highlight=False)
    if run.shape_note:  # no --shape and no harness.shapes: say which shape the ladder runs
        console.print(f"diagnose: no --shape given: {run.shape_note}", highlight=False)


def _open_report(run: _Run) -> None:
    """The first write of a diagnosis, once setup has built the model and checked what the
    harness configuration names on it (:func:`rewriter.harness.check_entry`): the previous run's
    artifacts go (a failed run leaves its partial report.json, not a mix with the last run's), the
    report folder is made, and diagnose.log streams into it (what was logged so far included).
    Bad input found before this point (:class:`rewriter.errors.StackpartError`) leaves the file
    system as it was; a harness failure in setup (the user's code raising) gets its report."""
    if _ours(run.out_dir):
        for stale in ARTIFACTS:
            (run.out_dir / stale).unlink(missing_ok=True)
    run.out_dir.mkdir(parents=True, exist_ok=True)
    if run.feed.capturing:  # written when the run ends, also when it stops early (beside report.json)
        run.feed.log = run.out_dir / "diagnose.log"


def _climb(run: _Run, only: set[str] | None, search_timeout_s: float) -> None:
    """Setup, then every rung of :func:`.rungs.ladder` in order, with progress (a bar on a
    terminal; each rung's start and end an event line). ``only``: the rungs to run (the rungs
    that give what they need run too); the others are recorded as skipped. A harness failure
    stops the ladder (``run.fatal``). After the last quiet rung (:attr:`.rung.Rung.quiet`: the
    timed ones, the memory rung) and before the first compile rung, the search's reference starts
    where it may (:func:`_start_reference`): the rungs that only read the recorded profile run
    beside its build."""
    rungs = ladder()
    selected = None if only is None else only | givers(rungs, only)
    gives = {f: r for r in rungs for f in r.gives}
    run.feed.console.print(f"diagnose: the ladder ({len(rungs)} rungs)" + ("" if only is not None and SEARCH not in only
                           else ", then the search over candidate plans") + " ...", highlight=False)
    prestarted = False
    if run.searching:  # the children's server imports beside the setup (a GPU host that overlaps)
        from .early_reference import prestart

        prestarted = prestart(run.ctx)
    with run.feed.progress("setup: building the model", total=len(rungs)):
        _setup(run)
        _open_report(run)
        if prestarted:  # its imports over before the quiet rungs time anything
            from .early_reference import prestarted_ready

            prestarted_ready()
        last_quiet = max((i for i, r in enumerate(rungs, 1) if r.quiet), default=0)
        tried = False  # once: where it did not start, the search starts its own
        for i, rung in enumerate(rungs, 1):
            if run.fatal is not None:
                break
            if (rung.compiles or i > last_quiet) and not tried:
                tried = True
                _start_reference(run, search_timeout_s)
            run.feed.describe(f"rung: {rung.name}")
            run.said(f"rung {rung.name} ({i}/{len(rungs)}) ...")
            _step(run, rung, selected, gives)
            run.feed.advance()


def _start_reference(run: _Run, timeout_s: float) -> None:
    """Start the search's reference now, before the compile rungs
    (:mod:`.early_reference`), when the search will run and the host has room; else say why not."""
    from .early_reference import start, why_not

    if not run.searching or run.fatal is not None:
        return
    why = why_not(run.ctx)
    if why is not None:
        run.said(f"the search's reference starts with the search: {why}")
        return
    from ..engine.zygote import summary

    t0 = time.perf_counter()
    try:
        run.early = start(run.ctx, timeout_s)
    except Exception as exc:  # noqa: BLE001 - the search starts its own reference then
        run.said(f"the search's reference starts with the search: starting it early failed ({type(exc).__name__}: {exc})")
        return
    how = summary()
    run.said("the search's reference (the program as it is) started before the compile rungs"
             + (", and the whole-model anchor with it" if run.early.anchor is not None else "")
             + (" and its static-shape twin (whole+static)" if run.early.static is not None else "")
             + f", in {time.perf_counter() - t0:.1f} s" + (f" (measurement children: {how})" if how else ""))


def _setup(run: _Run) -> None:
    """Build the model, run one step at each harness shape after the first, read the
    model's repeated blocks (its own ``_repeated_blocks`` first); a harness failure is ``run.fatal``."""
    run.said("setup: building the model")
    run.session.rung = "setup"
    try:
        _setup_steps(run)
    except HarnessFailure as exc:
        if not _own_compile_set_aside(run, exc):
            run.fatal = exc
            return
        try:
            _setup_steps(run)
        except HarnessFailure as again:
            run.fatal = again


def _setup_steps(run: _Run) -> None:
    ctx = run.ctx
    model, _, _ = ctx.reference()
    if len(run.spec.shapes) > 1:  # every shape once, eager, before the rungs (and the search) rely on them
        run.said(f"setup: one step (the program as it runs, its own compile included) at each of the other {len(run.spec.shapes) - 1} harness shape(s)")
        run.session.check_shapes()
    ctx.evidence.declared = declared_blocks(model)
    ctx.evidence.blocks = find_blocks(model, run.src, ctx.evidence.declared)
    # the program's torch._dynamo.config as it ran (its imports, model function and first steps):
    # the report's setup, and the settings the ladder's compiles run under
    ctx.evidence.dynamo_config = read_dynamo_config()
    run.meta["dynamo_config"] = [s.to_json() for s in ctx.evidence.dynamo_config]
    run.meta["compile_environment"] = compile_environment()
    run.meta["dynamo_config_environment"] = [s.to_json() for s in environment_settings()]


def _own_compile_set_aside(run: _Run, exc: HarnessFailure) -> bool:
    """Whether ``exc`` was the program's own compile raising and the ladder set that compile aside
    (:func:`.own_raised.set_aside`), said in the log; False leaves ``exc`` to stop the diagnosis."""
    from .own_raised import set_aside

    try:
        said = set_aside(run.ctx, exc)
    except HarnessFailure:  # the model fails without its compile too: the first failure says more
        return False
    if said is not None:
        run.said(f"setup: {said}")
    return said is not None


def _step(run: _Run, rung: Rung, selected: set[str] | None, gives: dict[str, Rung]) -> None:
    """Run one rung and record its result. A rung that failed inside stackpart or torch is
    recorded as an error and the ladder goes on; a harness failure outside a compile rung is
    ``run.fatal``; a compile rung's fragmentation OOM is kept as ``run.compiled_oom``."""
    ctx = run.ctx
    if selected is not None and rung.name not in selected and not rung.reported:
        return  # evidence no selected rung needs: not a row of the table either
    run.session.rung = rung.name
    t0 = time.perf_counter()
    missing = [f for f in sorted(rung.needs) if getattr(ctx.evidence, f) is None or getattr(ctx.evidence, f) is UNREAD]
    again = False
    try:
        if selected is not None and rung.name not in selected:
            r = rung.skipped("not selected")
        elif missing:
            r = rung.failed(gives[missing[0]].missing or f"the {gives[missing[0]].name} rung failed")
        else:
            r = rung.run(ctx)
    except HarnessFailure as exc:
        again = not rung.compiles and _own_compile_set_aside(run, exc)
        if not again and not rung.compiles:
            run.fatal = exc
        elif not again and exc.oom and exc.oom.get("fragmentation") and run.compiled_oom is None:
            run.compiled_oom = exc
        r = rung.failed(exc.describe())
    except Exception as exc:  # a rung's own failure: record it, keep climbing
        r = rung.failed(f"rung {rung.name}: {rung_error(exc, run.src)}")
    if again:  # outside the handler: the rung again, on the model without its compile
        _step(run, rung, selected, gives)
        return
    seconds = round(time.perf_counter() - t0, 3)
    if r is None:  # a rung that only gives evidence, given
        run.said(f"rung {rung.name}: ok in {seconds:.1f} s")
        return
    r.seconds = seconds
    run.results.append(r)
    ctx.results[rung.name] = r
    reason = (r.reason or "").removeprefix(f"rung {rung.name}: ")  # the line names the rung once
    run.said(f"rung {rung.name}: {r.status} in {r.seconds:.1f} s" + (f" ({reason})" if reason and not r.ok else ""))


def _after_ladder(run: _Run) -> Outcome:
    """The ladder's outcome. A harness failure stops the diagnosis (report.json written with the
    rungs so far); a fragmentation OOM is the memory rung's verdict instead, the ladder stopped
    there (``Outcome.stopped``) or, met in a compile rung, going on.

    Raises:
        StackpartError: the harness failed (not a fragmentation OOM), at the user's file:line.
    """
    outcome = Outcome(rungs=run.results)
    fatal = run.fatal
    if fatal is not None:
        # the harness's own errors name the callable already ("harness.inputs: make_inputs(batch=2) raised ...")
        said = fatal.message if fatal.message.startswith("harness.") else f"harness {fatal.callable}: {fatal.message}"
        error = f"diagnose stopped at rung {fatal.rung}: {said}{fatal.where}"
        if not (fatal.oom and fatal.oom.get("fragmentation")):
            write_json(run.out_dir / "report.json", to_json(run.meta, run.results, None, [], error))
            raise stopped_error(fatal, said, run.spec.file, run.out_dir / "report.json")
        # A fragmentation OOM is a finding with a fix, not a broken harness: plan the allocator
        # action; the rungs after it are measured by running diagnose again with it applied.
        outcome.stopped = error
        memory_from_oom(run.ctx, run.results, fatal, stopped=True)
    elif run.compiled_oom is not None and not run.ctx.results["memory"].implies.startswith("allocator"):
        # a compiled variant ran out of memory with the free memory stranded: the eager steady
        # state did not show it, the compiled step (its own buffers) did; that is the evidence
        memory_from_oom(run.ctx, run.results, run.compiled_oom, stopped=False)
    return outcome


def _plan_by_search(run: _Run, budget_s: float | None, timeout_s: float) -> tuple[Any, Any]:
    """The search's chosen plan with its notes, and the search's outcome."""
    from .planner import Decision
    from .search import annotated

    if budget_s is None:  # --budget not given: what the setup and the ladder left of the target
        from .search import default_budget

        budget_s = default_budget(time.perf_counter() - run.started, run.ctx.session.cuda)
    found = _search(run.ctx, run.results, run.meta, run.out_dir, run.feed, budget_s, timeout_s, run.early)
    return Decision(annotated(found), _search_notes(found)), found


def _plan_by_rules(run: _Run, stopped: bool) -> Any:
    """The rules' proposal (:func:`.planner.plan`), unmeasured; where the ladder ran to its end,
    composed with the program's own compiles as every search candidate is."""
    from .planner import Decision
    from .planner import plan as make_plan

    decision = make_plan(run.ctx)
    if stopped:
        return decision
    from .candidates import OwnScope, compose, own_off
    from .own_compile import own_compiles

    own = own_compiles(run.ctx.session.src)
    off = own_off(run.ctx)
    if not own and not off:
        return decision
    composed, why = compose(decision.plan, OwnScope.of(run.ctx, own, off), rule=True)
    decision = Decision(composed if composed is not None else decision.plan,
                        decision.notes + [f"not planned: {w}" for w in dict.fromkeys(why)])
    return _rewrites(run, decision)


def _rewrites(run: _Run, decision: Any) -> Any:
    """``decision``, where ``stackpart rewrite`` takes its plan as written (SRC read as it reads it,
    :func:`.search.src_reading`); else a plan that changes nothing, its note saying why (the rules'
    proposal is not measured: no other candidate stands in)."""
    from ..plan import parse_plan
    from ..rewrite.transform import plan_rewrite
    from .planner import Decision
    from .search import src_reading

    if not decision.plan.actions:
        return decision
    try:
        plan_rewrite(parse_plan(plan_yaml(decision.plan), "the rules' proposal"), run.ctx.session.src, unsafe=True,
                     read_src=src_reading(run.ctx))
    except StackpartError as exc:
        return Decision(decision.plan.model_copy(update={"actions": []}),
                        decision.notes + [f"not planned: stackpart rewrite refuses the rules' proposal ({exc}): the plan "
                                          "changes nothing"])
    return decision


def _notes(run: _Run, decision: Any, outcome: Outcome, site: str | None) -> list[str]:
    """The plan's notes, then where library actions go, why the ladder stopped, the assumed amortization."""
    notes = list(decision.notes)
    if decision.plan.site is not None and site is None:
        notes.append(
            f"library actions applied at {decision.plan.site} (the harness's model function, the plan's site); if your "
            "program builds the model elsewhere, pass --site file.py::func (a function the harness's model function "
            "calls, so that the search measures what your program runs)"
        )
    if outcome.stopped:
        notes.insert(0, f"{outcome.stopped}; apply the plan's allocator action and run diagnose again to measure the rungs after it")
    found = outcome.search
    if run.ctx.amortization_assumed and found is not None and found.gain_measured:
        notes.append(
            "amortization not given: assumed 1,000,000 runs and 1 restart (pass --runs/--restarts, which also writes "
            "the plan's `amortization:` section so that validate gates the break-even on it)"
        )
    return notes


def _write(run: _Run, outcome: Outcome, started: float) -> None:
    """Write plan.yaml (checked to load, and the search's to rewrite, first), the charts,
    report.md, report.json and the chosen candidate's validation report; fill ``outcome.paths``
    and ``outcome.seconds``.

    Raises:
        StackpartError: the plan does not load or (the search's) does not rewrite as ``stackpart
            rewrite`` reads it, before anything is written (the search and the rules checked it:
            a bug of ours).
    """
    from ..plan import parse_plan

    text = plan_yaml(outcome.plan)
    loaded = parse_plan(text, str(run.plan_out))  # the plan we write must load: a bug here is ours, fail loudly
    rewritten = _rewritten(run, loaded, outcome)
    run.plan_out.parent.mkdir(parents=True, exist_ok=True)
    run.plan_out.write_text(text, encoding="utf-8")
    out_dir = run.out_dir
    images, chart_note = charts(out_dir, run.ctx.results)
    outcome.seconds = round(time.perf_counter() - started, 2)
    run.meta["seconds"] = outcome.seconds
    (out_dir / "report.md").write_text(markdown(run.meta, run.results, text, outcome.notes, images, chart_note, outcome.stopped),
                                       encoding="utf-8")
    write_json(out_dir / "report.json", to_json(run.meta, run.results, outcome.plan, outcome.notes, outcome.stopped))
    outcome.paths = {"plan": str(run.plan_out), "report": str(out_dir / "report.md"), "json": str(out_dir / "report.json")}
    prof = run.ctx.evidence.profile
    if prof is not None and prof.trace:
        outcome.paths["trace (Perfetto)"] = prof.trace
    for what, log in (("search log", out_dir / "search.log"), ("log", run.feed.log)):
        if log is not None and (log is run.feed.log or log.exists()):
            outcome.paths[what] = str(log)
    if outcome.search is not None:
        _write_validation(outcome.search, run.ctx, run.plan_out, outcome, rewritten)


def _rewritten(run: _Run, loaded: Any, outcome: Outcome) -> Any:
    """The search's chosen plan as written (``loaded``), rewritten with SRC read as ``stackpart
    rewrite`` reads it (:func:`.search.src_reading`): the diff its validation report binds; None
    for the rules' plan and a plan that changes nothing. Where it is the plan the search's
    decision rewrote (its actions' ``why:`` aside), that rewrite is reused
    (:func:`.search.kept_rewrite`).

    Raises:
        StackpartError: the plan does not rewrite.
    """
    found = outcome.search
    if found is None or found.chosen is None or found.chosen.name == AS_IS:
        return None
    from ..rewrite.transform import plan_rewrite
    from .search import kept_rewrite, src_reading

    reading = src_reading(run.ctx)
    # the plan the search's decision rewrote (:func:`.search._decided`), its actions' why: aside
    kept = kept_rewrite(found, loaded.plan, reading, renamed=True)
    return kept if kept is not None else plan_rewrite(loaded, run.ctx.session.src, unsafe=True, read_src=reading)


def _search(ctx: Context, results: list[RungResult], meta: dict[str, Any], out_dir: Path, console: Any,
            budget_s: float, timeout_s: float, early: Any = None) -> Any:
    """Run the search and record it as the ``search`` entry of the ladder; on Ctrl-C, report.json
    keeps the candidates measured so far, then the interrupt goes on."""
    from .search import SearchOutcome, run_search

    found = SearchOutcome([])
    r = RungResult(SEARCH, "Which complete plan wins, measured as a whole?")
    r.threshold = ("net = (t_as_is - t_plan) x runs - compile per start x restarts, largest wins; a step difference within the "
                   "noise (95% interval of the paired ratio contains 1, or < 2%), or nets within 3% of t_best x runs, go to the "
                   "cheaper compile (docs/design.md, the search)")
    t0 = time.perf_counter()
    try:
        run_search(ctx, budget_s=budget_s, timeout_s=max(timeout_s, SEARCH_MIN_TIMEOUT_S), console=console,
                   log=out_dir / "search.log", outcome=found, early=early)
    except (KeyboardInterrupt, SystemExit, StackpartError) as exc:
        # Ctrl-C, SIGTERM (the CLI raises SystemExit(143)) or the program as it is failing to run
        # in the engine: report.json keeps the ladder and the candidates measured so far
        if isinstance(exc, StackpartError):
            r.reason = f"the search stopped: {exc.message}"
        else:
            from ..signals import signal_name  # the CLI raises SystemExit(128 + n) for SIGTERM, SIGHUP, SIGQUIT

            code = getattr(exc, "code", None)
            why = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else (
                signal_name(code - 128) if isinstance(code, int) and code > 128 else "SIGTERM")
            r.reason = f"interrupted ({why}): the candidates measured so far are kept"
        r.status = "error"
        r.measurement = {"candidates": found.table(), "pruned": found.pruned, "backend": found.backend}
        results.append(r)
        write_json(out_dir / "report.json", to_json(meta, results, None, [], r.reason))
        raise
    r.seconds = round(time.perf_counter() - t0, 3)
    r.measurement = {"candidates": found.table(), "pruned": found.pruned, "backend": found.backend,
                     "own_compile_setup": found.own_setup, "own_compile_off": found.own_off_setup, "own_compile_runtime": found.runtime_setup,
                     "own_compile_disagreements": found.runtime_disagreements, "gain_measured": found.gain_measured, "allocator": found.allocator, "noise": found.noise, "chosen": found.choice.chosen, "decision": found.choice.text,
                     "budget_s": budget_s, "notes": found.notes, "clock": found.clock}
    r.verdict = found.choice.text
    chosen = found.chosen
    r.implies = "no change" if chosen is None or not chosen.plan.actions else f"the {chosen.name!r} plan"
    results.append(r)
    ctx.results[SEARCH] = r
    return found


def _search_notes(found: Any) -> list[str]:
    """The plan's notes from the search: the chosen candidate's (and the rule's), the decision, what
    the search read of the program, the pruned lines (a plan ``stackpart rewrite`` refuses among
    them, said there once) and the failed candidates."""
    from .search import REFUSED

    cand = found.chosen
    notes = list(cand.notes if cand is not None else [])
    rule = next((c for c in found.candidates if c.rule), None)
    if rule is not None and rule is not cand:  # why the ladder's own proposal is not the plan starts with its notes
        notes.extend(n for n in rule.notes if n not in notes)
    notes.append(f"search: {found.choice.text}")
    # the program's own whole-model compile measured through a stand-in: what the plan does with
    # that call (kept as it is, or edited) is why a chosen 'whole' can come with no action
    notes.extend(f"search: {n}" for n in found.notes
                 if n.startswith(("the program as it is", "allocator candidate", "the program's own whole-model compile")))
    notes.extend(f"search: pruned {p}" for p in found.pruned)
    failed = [f"{n}: {s}" for n, s in found.choice.status.items() if s.startswith("failed")
              and not any(p.startswith(f"{n}: {REFUSED}") or f"; also {n}: {REFUSED}" in p for p in found.pruned)]
    if failed:
        notes.append("search: left out as failed (never written): " + " | ".join(failed)[:1500])
    return notes


def _write_validation(found: Any, ctx: Context, plan_out: Path, outcome: Outcome, result: Any = None) -> None:
    """The chosen candidate's measurement as its validation report (``rewrite --apply`` checks it);
    ``result``: the plan's rewrite already made (:func:`_rewritten`)."""
    from ..validate.report import default_report_dir as validation_dir
    from ..validate.report import write_report
    from .search import validation_report

    report = validation_report(found, ctx, plan_out, result)
    if report is None:
        return
    paths = write_report(report, validation_dir(plan_out))
    outcome.paths["validation report (the chosen candidate's measurement)"] = str(paths[0])


def harness_from_flags(
    harness: str,
    src: str | Path,
    *,
    model: str | None,
    inputs: str | None,
    shapes: list[dict[str, int]],
    mode: str | None,
    dtype: str | None,
    device: str | None,
    call: str | None = None,
) -> tuple[Harness, Amortization | None]:
    """The harness section from ``--harness`` (a .py file or a plan.yaml) and the other flags.

    A ``.yaml``/``.yml`` path is a plan whose ``harness:`` (and ``amortization:``) are used; flags
    given as well override its fields. A ``.py`` path may be relative to SRC or to the current
    directory (it must lie under SRC).

    Raises:
        StackpartError: the plan has no harness section, or the file lies outside SRC, or a
            field is invalid (pydantic's message, naming the field).
    """
    from pydantic import ValidationError

    from ..plan import load_plan

    src = Path(src)
    amort = None
    if harness.endswith((".yaml", ".yml")):
        loaded = load_plan(harness)
        if loaded.plan.harness is None:
            raise StackpartError("the plan has no 'harness:' section", path=harness, line=1, hint="add one or pass --harness harness.py")
        from ..harness import check_harness_file

        check_harness_file(loaded, src)  # at the plan's `file:` line, as validate says it
        base = loaded.plan.harness.model_dump()
        amort = loaded.plan.amortization
    else:
        path = Path(harness)
        rel = harness
        if path.is_absolute() or path.exists():
            try:
                rel = path.resolve().relative_to(src.resolve()).as_posix()
            except ValueError:
                if (src / harness).is_file():
                    rel = harness
                else:
                    raise StackpartError(
                        f"--harness must lie under SRC ({src}): the children import it with SRC as their tree",
                        path=harness,
                        hint=f"move it into {src}, or pass the folder that holds both it and the model as SRC") from None
        base = {"file": rel}  # no --device: unset, resolved where it runs (resolve_device)
    for key, value in (("model", model), ("inputs", inputs), ("call", call), ("mode", mode), ("dtype", dtype), ("device", device)):
        if value is not None:
            base[key] = value
    if shapes:
        base["shapes"] = shapes
    try:
        return Harness.model_validate(base), amort
    except ValidationError as exc:
        e = exc.errors()[0]
        flag = ".".join(str(p) for p in e["loc"]).replace("file", "harness", 1)  # the field's flag
        raise StackpartError(f"--{flag}: {e['msg'].removeprefix('Value error, ')}") from None


def check_entry(entry: str, src: Path, flag: str = "--entry") -> None:
    """Check ``--entry file.py::func`` (or ``--site``, ``flag``): the file lies under SRC and defines ``func``.

    Raises:
        StackpartError: not ``file.py::func``, the file is missing, or no such function (with
            near names), before anything is measured or written.
    """
    from ..source import read_source
    from ..targets import resolve

    file, sep, func = entry.partition("::")
    if not sep or not file.endswith(".py") or not func:
        raise StackpartError(f"{flag}: expected file.py::func, got {entry!r}")
    path = Path(src) / file
    if not path.is_file():
        raise StackpartError(f"{flag}: no file {file!r} under SRC", path=str(src))
    try:  # as rewrite reads it: PEP 263 encodings, a path that stays under SRC
        module = read_source(Path(src), file).parse()
        if flag == "--site":  # the function that returns the model: what rewrite's site check refuses
            from ..targets import collect_definitions

            hits = collect_definitions(module).get(func) or []
            if hits and hits[0].kind == "class":
                raise StackpartError(f"{func} is a class; the site is the function that returns the model",
                                     hint="name the function that builds the model, e.g. train.py::build")
        target = resolve(module, file, func)
        if flag == "--site" and target.node.asynchronous is not None:
            raise StackpartError(f"{func} is an async function; the site must return the model itself",
                                 hint="name the synchronous function that builds the model")
    except StackpartError as exc:
        raise StackpartError(f"{flag}: {exc.message}", path=str(path), hint=exc.hint) from None


def parse_shape(text: str | dict[str, int]) -> dict[str, int]:
    """``batch=8,seq=512`` -> ``{"batch": 8, "seq": 512}`` (:func:`rewriter.shapes.parse_shape`); a
    shape the CLI already parsed (a dict) is returned as it is.

    Raises:
        StackpartError: not ``name=int`` pairs, each name once.
    """
    from ..shapes import SHAPE_SYNTAX
    from ..shapes import parse_shape as parse

    if isinstance(text, dict):
        return text
    try:
        return parse(text)
    except ValueError as exc:
        raise StackpartError(f"--shape {text!r}: {exc}; expected {SHAPE_SYNTAX}") from None


def check_output(harness: str, output: str) -> None:
    """Refuse an ``-o`` that would overwrite a plan diagnose did not write.

    A plan diagnose wrote starts with its header line (:func:`~.report.plan_yaml`) and may be
    replaced by a new run; any other existing file at ``-o`` (a hand-written or hand-edited plan,
    including the one ``--harness`` reads) would lose its actions and comments.

    Raises:
        StackpartError: at the file's first action line (or line 1), with the way out.
    """
    out = Path(output)
    if not out.is_file():
        return
    from .report import PLAN_HEADER

    try:
        first = out.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
    except OSError:
        return  # unreadable: the write itself reports it
    if first == [PLAN_HEADER.rstrip("\n")]:
        return
    line = 1
    if out.suffix in (".yaml", ".yml"):
        from ..plan import load_plan

        try:
            loaded = load_plan(out)
            line = loaded.action_lines[0] if loaded.plan.actions else 1
        except StackpartError:
            pass
    same = harness.endswith((".yaml", ".yml")) and out.resolve() == Path(harness).resolve()
    raise StackpartError(
        f"-o {output} exists and was not written by diagnose"
        + (" (it is the plan --harness reads)" if same else "")
        + "; diagnose would replace its actions and comments",
        path=str(output), line=line,
        hint="pass -o with another path, e.g. -o plan.diagnosed.yaml, and compare",
    )


def diagnose_command(harness: str, src: str, output: str, *, model: str | None, inputs: str | None, call: str | None = None, shapes: tuple[str | dict[str, int], ...], mode: str | None, dtype: str | None, device: str | None, report_dir: str | None, backend: str | None, runs: int | None, restarts: int | None, timeout: float, steps: int, entry: str | None = None, budget: float | None = None, no_search: bool = False, site: str | None = None, no_overlap: bool = False, pin: str = "shared", cold_parallel: int | None = None, host: str = "both", verbose: bool = False) -> int:
    """The ``stackpart diagnose`` command: returns 0 (plan written), 1 (plan written, but the ladder
    stopped at a fragmentation OOM: apply the allocator action and run again); raises
    StackpartError (exit 2)."""
    src_dir(src)  # SRC first: the harness path is read relative to it
    check_output(harness, output)
    spec, amort = harness_from_flags(harness, src, model=model, inputs=inputs, shapes=[parse_shape(s) for s in shapes], mode=mode, dtype=dtype, device=device, call=call)
    if runs is not None or restarts is not None:
        base = amort.model_dump() if amort is not None else {"runs": 1_000_000, "restarts": 1}
        if runs is not None:
            base["runs"] = runs
        if restarts is not None:
            base["restarts"] = restarts
        amort = Amortization.model_validate(base)
    only = {r.name for r in ladder()} if no_search else None
    from ..terminal import Feed, stderr

    with Feed(stderr(), verbose) as feed:  # third-party stderr and the event lines go to diagnose.log
        try:
            outcome = diagnose(spec, src, output, report_dir=report_dir, backend=backend, amortization_spec=amort, timeout_s=timeout, steps=steps, entry=entry, budget_s=budget, only=only, site=site,
                               overlap=not no_overlap, pin=pin, cold_parallel=cold_parallel, contended=host == "both", console=feed)
        except StackpartError as exc:
            flags = {"call": call, "model": model, "inputs": inputs, "shapes": bool(shapes)}
            if (isinstance(exc, ConfigError) and harness.endswith((".yaml", ".yml"))
                    and not flags.get((exc.field or "").split("[", 1)[0])):
                from ..harness import config_error_at
                from ..plan import load_plan

                # the plan's field, at its line
                exc = config_error_at(load_plan(harness), exc.message, exc.field, exc.hint)
            raise flagged(exc, model=model, inputs=inputs, shapes=bool(shapes), call=call)
    return 1 if outcome.stopped else 0


#: A harness field as :func:`rewriter.harness.load_harness`'s errors name it, at their start.
_FIELD_RE = re.compile(r"^harness\.(model|inputs|call|shapes\[(\d+)\])")


def flagged(exc: StackpartError, *, model: str | None, inputs: str | None, shapes: bool,
            call: str | None = None) -> StackpartError:
    """``exc`` naming the flag the user typed instead of the plan field it set: ``--model: ...``
    for ``harness.model: ...`` when ``--model`` was given, ``--shape #2 (harness.shapes[1]): ...``
    when the shapes came from ``--shape``; ``exc`` itself otherwise (the value came from a plan's
    ``harness:`` section, whose field the message already names)."""
    m = _FIELD_RE.match(exc.message)
    if m is None:
        return exc
    field, index = m.group(1), m.group(2)
    given = {"model": model, "inputs": inputs, "call": call}.get(field) if index is None else shapes
    if not given:
        return exc
    label = f"--{field}" if index is None else f"--shape #{int(index) + 1} ({m.group(0)})"
    exc.message = label + exc.message[m.end():]
    return exc
