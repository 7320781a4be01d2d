"""Run a plan's actions over the files they target, build the diff, apply it atomically.

Only the files a plan names are read and parsed (a plan touching 5 files in a tree of thousands
costs 5 parses). All targets resolve and all consistency rules pass before any transform runs;
nothing is written unless every action succeeded.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from . import consistency
from .actions.allocator import AllocatorCommand
from .actions.base import StatementInsertError, TargetedCommand
from .actions.batch import ActionFailed, plan_passes
from .actions.bucket import BucketCommand
from .actions.cache import CompileCacheCommand
from .actions.compile import CompileCommand
from .actions.disable import DisableCommand
from .actions.dynamic import MarkDynamicCommand
from .actions.branchless import BranchlessCommand
from .actions.dynamo_config import DynamoConfigCommand
from .actions.kernel import KernelCommand
from .actions.site import SiteCommand, site_spec
from .apply import apply_changes
from .errors import StackpartError, src_dir
from .plan import ADVISORY_ACTIONS, LoadedPlan
from .source import SourceFile, read_source, run_deep, safe_relpath
from .splice import splice
from .library_targets import LibraryTarget
from .library_targets import resolve as resolve_library
from .library_targets import resolve_source_only
from .targets import Definition, collect_definitions, resolve
from .vendor import vendor_site

COMMANDS: dict[str, type[TargetedCommand]] = {
    "compile": CompileCommand,
    "disable": DisableCommand,
    "mark_dynamic": MarkDynamicCommand,
    "bucket": BucketCommand,
    "allocator": AllocatorCommand,
    "compile_cache": CompileCacheCommand,
    "dynamo_config": DynamoConfigCommand,
    "kernel": KernelCommand,
    "branchless": BranchlessCommand,
}


@dataclass
class FileChange:
    """One file the rewrite changes or creates.

    Attributes:
        relpath: POSIX path relative to SRC.
        old: the current bytes, or None for a new file.
        new: the bytes the plan asks for.
        mode: permission bits to keep (new files: 0o644).
    """

    relpath: str
    old: bytes | None
    new: bytes
    mode: int = 0o644


@dataclass
class RewriteResult:
    """What a plan does to a tree.

    Attributes:
        changes: files whose bytes differ from what the plan asks, in a stable order.
        skipped: ``(action index, reason)`` for actions not written (unsafe without ``--unsafe``).
        warnings: plan-level warnings (e.g. ``mark_dynamic`` with ``min < 2``).
        read: the files under SRC the plan's targets are in (relative to SRC): an apply also
            clears their directories of temp files a killed apply left.
    """

    changes: list[FileChange] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)

    def diff(self) -> str:
        """The git-style unified diff of all changes (see :mod:`rewriter.diff`)."""
        from .diff import unified_diff

        return unified_diff(self.changes)

    @property
    def library_modules(self) -> list[str]:
        """The generated ``_stackpart/library.py`` files among the changes (the site's actions), which
        the measured candidate must import while its harness builds the model."""
        from .actions.site import LIBRARY_MODULE
        from .vendor import VENDOR_PACKAGE

        return [c.relpath for c in self.changes if c.relpath.endswith(f"{VENDOR_PACKAGE}/{LIBRARY_MODULE}.py")]

    def digest(self) -> str:
        """sha256 of :meth:`diff`: the identity validation reports are bound to."""
        return hashlib.sha256(self.diff().encode("utf-8", "surrogateescape")).hexdigest()


def _in_source(exc: StackpartError) -> str:
    """A source-level error's message prefixed with its ``file[:line[:col]]`` (plan errors carry
    the plan's own line; this keeps the source position too)."""
    if not exc.path:
        return exc.message
    where = exc.path
    if exc.line is not None:
        where += f":{exc.line}" + (f":{exc.col}" if exc.col is not None else "")
    return f"{where}: {exc.message}"


#: The index :func:`_action_error` reads as the plan's ``site`` (not an action).
SITE = -1


def _site_error(loaded: LoadedPlan, message: str, hint: str | None = None) -> StackpartError:
    """An error at the plan's ``site:`` line."""
    return StackpartError(f"site ({loaded.plan.site}): {message}", path=loaded.path, line=loaded.site_line, hint=hint)


def _action_error(loaded: LoadedPlan, index: int, exc: Exception) -> Exception:
    """A command's failure as the plan error at its action (other exceptions pass unchanged)."""
    if index == SITE and isinstance(exc, (StatementInsertError, StackpartError)):
        return _site_error(loaded, str(exc) if isinstance(exc, StatementInsertError) else exc.message,
                           getattr(exc, "hint", None))
    if isinstance(exc, StatementInsertError):
        return loaded.error(index, f"cannot insert a statement: {exc}")
    if isinstance(exc, StackpartError):
        return loaded.error(index, exc.message, exc.hint)
    return exc


def plan_rewrite(loaded: LoadedPlan, src: Path, unsafe: bool = False, check_library: bool = True) -> RewriteResult:
    """Compute what ``loaded`` does to the tree at ``src``, writing nothing.

    Runs in :func:`rewriter.source.run_deep`'s thread (a large stack and a raised recursion
    limit), so a file CPython parses but LibCST recurses deep into (a 1,000-term sum, sympy's
    ``resolvent_lookup.py``) is rewritten rather than refused; nothing here writes, so an
    interrupt while it runs leaves the tree as it was.

    Args:
        loaded: a validated plan (see :func:`rewriter.plan.load_plan`).
        src: the root the plan's targets are relative to.
        unsafe: also write unsafe actions (``bucket``, ``kernel``).
        check_library: also import the installed classes and functions library targets name
            (:func:`rewriter.library_targets.resolve`); ``check``'s drift reads their source where
            the package is installed and takes them as written where it is not.

    Raises:
        StackpartError: a target that leaves SRC, a file that cannot be read or parsed, a
            target that does not resolve, an inconsistent plan — each at the plan's line.
    """
    return run_deep(_plan_rewrite, loaded, src, unsafe, check_library)


def _plan_rewrite(loaded: LoadedPlan, src: Path, unsafe: bool, check_library: bool = True) -> RewriteResult:
    src = src_dir(src)
    result = RewriteResult()
    sources: dict[str, SourceFile] = {}
    modules: dict[str, cst.Module] = {}
    definitions: dict[str, dict[str, list[Definition]]] = {}
    bounds: list[consistency.Bound] = []
    root = src.resolve()
    library: dict[int, LibraryTarget] = {}
    for i, action in enumerate(loaded.plan.actions):
        if action.library:
            try:
                library[i] = (resolve_library(action.module, action.qualname, action.action, by_import=True,
                                              implementation=getattr(action, "implementation", None))
                              if check_library else resolve_source_only(action.module, action.qualname))
            except StackpartError as exc:
                raise loaded.error(i, exc.message, exc.hint) from None
            continue
        try:
            # The file's real path under SRC: a symlink inside SRC is rewritten where it points
            # (the diff names that file, as git sees it), and two spellings of one file are one.
            rel = safe_relpath(src, action.file).relative_to(root).as_posix()
            if rel not in sources:
                source = sources[rel] = read_source(src, rel)
                modules[rel] = source.parse()
                definitions[rel] = collect_definitions(modules[rel], source.text)
            target = resolve(modules[rel], rel, action.qualname, definitions[rel])
        except StackpartError as exc:
            raise loaded.error(i, _in_source(exc), exc.hint) from None
        bounds.append(consistency.Bound(i, action, target, modules[rel], definitions[rel]))
        if action.action == "mark_dynamic" and action.strict and (action.min is None) != (action.max is None):
            result.warnings.append(
                f"{loaded.path}:{loaded.action_lines[i]}: mark_dynamic with only "
                f"{'min' if action.max is None else 'max'}: the other bound is written too (one bound "
                "alone raises AssertionError in Dynamo on the first call, torch 2.13)"
            )
        if action.action == "mark_dynamic" and action.min is not None and action.min < 2:
            result.warnings.append(
                f"{loaded.path}:{loaded.action_lines[i]}: mark_dynamic min={action.min} written as min=2: "
                "sizes 0 and 1 are always specialised by Dynamo (what `stackpart check` SP106 asks too)"
            )
    consistency.check(loaded, bounds)
    consistency.check_library(loaded, library)
    site_at: tuple[str, str] | None = None
    if library:
        site_at = _resolve_site(loaded, src, root, sources, modules, definitions)

    generated: dict[str, str] = {}
    for rel, module in modules.items():
        site = vendor_site(src, rel)
        specs: list[tuple[type[TargetedCommand], tuple]] = []
        indices: list[int] = []
        for b in bounds:
            if b.target.relpath != rel:
                continue
            if b.action.action in ADVISORY_ACTIONS:
                result.skipped.append(
                    (b.index, f"{b.action.action} is advisory (a launcher/wrapper setting, not a "
                     "source edit): apply it where the model is wrapped")
                )
                continue
            if not b.action.safe and not unsafe:
                result.skipped.append(
                    (b.index, f"{b.action.action} is an unsafe action (it changes what runs); "
                     "pass --unsafe or validate first")
                )
                continue
            cls = COMMANDS.get(b.action.action)
            if cls is None:
                raise loaded.error(b.index, f"the {b.action.action!r} action is not supported by this version")
            specs.append((cls, (b.action, b.target.qualname, site)))
            indices.append(b.index)
        if site_at is not None and site_at[0] == rel:
            specs.append((SiteCommand, (site_spec(loaded, library), site_at[1], site)))  # type: ignore[arg-type]
            indices.append(SITE)
        # One pass over the file for each run of actions that only edit their target (one
        # import scan per pass, not per action; see rewriter.actions.batch).
        passes = plan_passes(specs, rel)
        built = [command for _, commands in passes for command in commands]  # in plan order
        index_of = {id(command): index for command, index in zip(built, indices)}
        for runner, commands in passes:
            try:
                module = runner.transform_module(module)
            except ActionFailed as exc:
                raise _action_error(loaded, index_of[id(exc.command)], exc.error) from None
            except (StatementInsertError, StackpartError) as exc:
                raise _action_error(loaded, index_of[id(commands[0])], exc) from None
            for command in commands:
                generated.update(command.generated)
                # Calls an action left alone, and stubs written (kernel), with file:line and why.
                result.warnings.extend(command.notes)
        source, code = sources[rel], splice(sources[rel].text, modules[rel], module)
        if code != source.text:
            new = source.encode(code)
            _fits_the_cap(loaded, rel, len(new), indices)
            result.changes.append(FileChange(rel, source.raw, new, source.mode))
    for rel, text in sorted(generated.items()):
        path = safe_relpath(src, rel)
        old = path.read_bytes() if path.exists() else None
        new = text.encode("utf-8")
        if old != new:
            result.changes.append(FileChange(rel, old, new))
    result.changes.sort(key=lambda c: c.relpath)
    result.read = sorted(sources)
    return result


def _fits_the_cap(loaded: LoadedPlan, rel: str, size: int, indices: list[int]) -> None:
    """Refuse a rewrite whose file would be over the cap on source files stackpart reads
    (:data:`rewriter.source.MAX_SOURCE_BYTES`): a file just under it that the edits push over
    could not be read back by the next step on the same plan (``--check``, ``validate``, a
    second ``--apply``), so the cap holds for the output as for the input.

    Raises:
        StackpartError: at the first action on ``rel`` (the site's line for the site's file).
    """
    from . import source as source_mod

    cap = source_mod.MAX_SOURCE_BYTES
    if size <= cap:
        return
    message = (f"{rel} would be {size:,} bytes once rewritten, over the {cap / 2**20:g} MiB cap on the source files "
               "stackpart reads, so the next run could not read it back; nothing was written")
    index = indices[0] if indices else SITE
    raise _action_error(loaded, index, StackpartError(message, hint="split the file, or leave it out of the plan"))


def _resolve_site(
    loaded: LoadedPlan, src: Path, root: Path, sources: dict[str, SourceFile], modules: dict[str, cst.Module],
    definitions: dict[str, dict[str, list[Definition]]],
) -> tuple[str, str]:
    """``(file, qualname)`` of the plan's site under SRC, parsed into the per-file maps.

    Raises:
        StackpartError: at the ``site:`` line: the file or function is missing (near names), or the
            site is a class (it must be the function that returns the model).
    """
    from .plan import TARGET_RE

    assert loaded.plan.site is not None
    match = TARGET_RE.match(loaded.plan.site)
    assert match is not None
    try:
        rel = safe_relpath(src, match.group("file")).relative_to(root).as_posix()
        if rel not in sources:
            source = sources[rel] = read_source(src, rel)
            modules[rel] = source.parse()
            definitions[rel] = collect_definitions(modules[rel], source.text)
        qual = match.group("qual")
        hits = definitions[rel].get(qual) or []
        if hits and hits[0].kind == "class":
            raise StackpartError(f"{qual} is a class; the site is the function that returns the model",
                                 hint="name the function that builds the model, e.g. train.py::build")
        target = resolve(modules[rel], rel, qual, definitions[rel])
    except StackpartError as exc:
        raise _site_error(loaded, _in_source(exc), exc.hint) from None
    return rel, target.qualname


def _report_covers(loaded: LoadedPlan, src: Path, result: RewriteResult, unsafe: bool, report: str | None) -> bool:
    """Whether ``rewrite --apply`` would write ``result`` by its validation report (a passing
    one for this exact diff and tree): ``--check``'s next step is then ``--apply`` alone, not a
    second validation. Looked up only where a report exists (else no tree is hashed)."""
    from .validate.gate import check_apply
    from .validate.report import default_report_dir, read_report

    where = Path(report) if report else default_report_dir(loaded.path)
    if read_report(where) is None:
        return False
    try:
        return check_apply(loaded, src, result, unsafe, report).result is not None
    except StackpartError:
        return False


def hard_linked(src: Path, changes: list[FileChange]) -> list[tuple[str, int]]:
    """``(relpath, link count)`` of each file to be changed that has more than one hard link:
    :func:`rewriter.apply.apply_changes` renames a new file over the name (atomic, all or
    nothing), so only this name gets the new bytes and the others keep the old file, as with
    ``git checkout`` or an editor's safe save; the apply says so rather than leaving it to be
    found."""
    out = []
    for change in changes:
        if change.old is None:
            continue
        try:
            links = os.stat(src / change.relpath, follow_symlinks=False).st_nlink
        except OSError:
            continue
        if links > 1:
            out.append((change.relpath, links))
    return out


def rewrite_command(
    plan_path: str,
    src: str,
    apply: bool = False,
    check: bool = False,
    unsafe: bool = False,
    validate: bool = True,
    report: str | None = None,
    summary_md: str | None = None,
) -> int:
    """``stackpart rewrite``: print the diff; ``apply`` writes it; ``check`` exits 1 when pending.

    ``summary_md`` also writes a Markdown summary for a pull-request comment there
    (:mod:`rewriter.summary_md`).

    ``apply`` with ``validate`` (the default) writes only a diff that a passing validation report
    (``report``, default ``.stackpart/validation/`` next to the plan) is bound to by sha256; see
    :mod:`rewriter.validate.gate`.

    Returns:
        0 no change or applied (also when SIGINT/SIGTERM arrives after the last file is written);
        1 changes pending under ``check``, or ``apply`` refused (no, failing or stale validation
        report; the reason on stderr); 130 (SIGINT), or 143 / 129 / 131 (SIGTERM / SIGHUP /
        SIGQUIT under :mod:`rewriter.cli`): ``apply`` interrupted, every file was restored,
        nothing changed. Once ``apply`` has written or restored the tree, the deferred signals
        (:data:`rewriter.signals.SIGNALS`) are left ignored so that the outcome reported is the
        exit code (:meth:`rewriter.signals.deferred_signals.settle`; :func:`rewriter.cli.main`
        puts the handlers back when called in-process).

    Raises:
        StackpartError: bad plan, target or source (the CLI prints it and exits 2).
    """
    import signal

    import click

    from .plan import load_plan
    from .terminal import stderr

    loaded = load_plan(plan_path)
    result = plan_rewrite(loaded, Path(src), unsafe=unsafe)
    if apply and validate:
        from .validate.gate import check_apply

        decision = check_apply(loaded, Path(src), result, unsafe, report)
        if decision.result is None:
            stderr().print(f"refused to apply: {decision.refused}", highlight=False, soft_wrap=True)
            return 1
        for note in decision.notes:
            stderr().print(note, highlight=False)
        result = decision.result
    elif not apply and not unsafe and result.skipped:
        # Preview what --apply would write: a passing report for the full plan lets the unsafe
        # actions through, so the diff shown must include them too (only looked up when a report
        # exists, so a plain preview never hashes the tree).
        from .validate.gate import check_apply
        from .validate.report import default_report_dir, read_report

        where = Path(report) if report else default_report_dir(loaded.path)
        if read_report(where) is not None:
            try:
                decision = check_apply(loaded, Path(src), result, unsafe, report)
            except StackpartError:
                # an unsafe action that cannot be written: no report can pass for it, and the
                # preview stays the safe diff with the action listed as not written, as without one
                decision = None
            if decision is not None and decision.result is not None and decision.result is not result:
                stderr().print(
                    "note: unsafe actions shown: the validation report for the full plan passed, so "
                    "--apply will write them",
                    highlight=False,
                )
                result = decision.result
    for warning in result.warnings:
        stderr().print(f"[yellow]warning[/]: {warning}", highlight=False)
    for index, reason in result.skipped:
        action = loaded.plan.actions[index]
        stderr().print(
            f"{loaded.path}:{loaded.action_lines[index]}: actions[{index}] ({action.action} "
            f"{action.target}) not written: {reason}",
            highlight=False,
        )
    def summary() -> None:
        if summary_md is not None:
            from .summary_md import write_rewrite_summary

            write_rewrite_summary(summary_md, loaded, result, src, applied=apply)

    patch = result.diff()
    if apply:
        from .signals import deferred_signals, signal_name

        linked = hard_linked(Path(src), result.changes)
        swept: list[str] = []
        with deferred_signals() as held:
            try:
                swept = apply_changes(Path(src), result.changes, sweep=result.read)
            except (KeyboardInterrupt, SystemExit) as exc:
                stopped: BaseException | None = exc  # raised between two steps, after the rollback
            except StackpartError:
                held.settle(ignore_after=True)  # reported as exit 2 whatever comes now
                raise
            else:
                stopped = None
            # Applied, or rolled back: a signal from here on can change neither, nor the message or
            # the exit code (SIGINT and SIGTERM stay ignored until the process exits;
            # rewriter.cli.main puts the handlers back when called in-process).
            held.settle(ignore_after=True)
            if stopped is not None:
                if isinstance(stopped, KeyboardInterrupt):
                    code = 128 + signal.SIGINT
                else:
                    code = stopped.code if isinstance(stopped.code, int) else 1  # type: ignore[attr-defined]
                why = signal_name(code - 128) if code > 128 else type(stopped).__name__
                stderr().print(
                    f"aborted ({why}): nothing was changed, every file under {src} was restored "
                    f"({len(result.changes)} file(s) were to be written)",
                    highlight=False,
                )
                return code
            summary()  # after the write: a failed apply must not leave a summary saying "applied"
            if swept:
                shown = ", ".join(swept[:5]) + (f" and {len(swept) - 5} more" if len(swept) > 5 else "")
                stderr().print(f"note: removed {len(swept)} temp file(s) an earlier apply left when it was killed: "
                               f"{shown}", highlight=False, soft_wrap=True)
            stderr().print(f"applied: {len(result.changes)} file(s) changed under {src}", highlight=False)
            for rel, links in linked:
                stderr().print(
                    f"note: {rel} had {links} hard links: the apply wrote a new file under this name (an atomic "
                    f"rename), and the other {links - 1} name(s) keep the old bytes", highlight=False)
            if held.late:
                stderr().print(
                    f"note: {signal_name(held.late[0])} received after the last file was written: "
                    "ignored, the apply is complete",
                    highlight=False,
                )
        return 0
    summary()
    if patch:
        # Bytes, not text: a file in another encoding (PEP 263) keeps its exact bytes in the diff.
        click.echo(patch.encode("utf-8", "surrogateescape"), nl=False)
    elif not check:
        if not loaded.plan.actions:
            why = "the plan has no actions"
        elif result.skipped:
            why = f"{len(result.skipped)} action(s) not written (above); {src} already has the rest"
        else:
            why = f"{src} already is what the plan asks"
        stderr().print(f"no changes: {why}", highlight=False)
    if check and result.changes:
        apply_it = f"`stackpart rewrite --plan {plan_path} {src} --apply`"
        if _report_covers(loaded, Path(src), result, unsafe, report):
            step = f"run {apply_it} (the validation report covers this diff, e.g. the one diagnose wrote)"
        else:
            step = f"run `stackpart validate --plan {plan_path} {src}`, then {apply_it}"
        stderr().print(f"{len(result.changes)} file(s) differ from what {plan_path} asks; {step}", highlight=False)
        return 1
    return 0
