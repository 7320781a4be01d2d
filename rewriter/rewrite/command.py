"""``stackpart rewrite``: the command around the pure rewrite (:mod:`.transform`).

It loads the plan, computes the rewrite, passes it through the gate (:mod:`.gate`) when it is to
be applied, prints the plan's warnings and the actions not written, then either applies the diff
(:mod:`.apply`), prints it, or (``--check``) says that the tree differs and what to run next.
Exit codes follow ruff's and black's: 0 nothing to do or applied, 1 changes pending or apply
refused, 2 bad input.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import click

from ..errors import StackpartError
from ..plan import LoadedPlan, load_plan
from ..signals import deferred_signals, signal_name
from ..terminal import stderr
from .apply import Applied, apply_changes, hard_linked
from .notices import add_checkpoint_key_warnings
from .transform import RewriteResult, plan_rewrite


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
    (:mod:`rewriter.rewrite.summary_md`).

    ``apply`` with ``validate`` (the default) writes only a diff that a passing validation report
    (``report``, default ``.stackpart/validation/`` next to the plan) is bound to by sha256; see
    :mod:`rewriter.rewrite.gate`.

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
    if summary_md is not None:
        from .summary_md import check_summary_path

        check_summary_path(summary_md)  # before anything is written: an apply then never ends in exit 2
    loaded = load_plan(plan_path)
    result = plan_rewrite(loaded, Path(src), unsafe=unsafe)
    if apply and validate:
        gated = _gated(loaded, src, result, unsafe, report)
        if gated is None:
            return 1
        result = gated
    elif not apply and not unsafe and result.skipped:
        result = _preview(loaded, src, result, unsafe, report)
    add_checkpoint_key_warnings(loaded, Path(src), result)  # printed, and in --summary-md
    _print_warnings_and_skipped(loaded, result)
    if apply:
        return _apply(loaded, src, result, summary_md)
    _write_summary(summary_md, loaded, result, src, applied=False)
    _print_diff(loaded, result, src, check)
    if check and result.changes:
        _print_next_step(plan_path, loaded, src, result, unsafe, report)
        return 1
    return 0


def _gated(loaded: LoadedPlan, src: str, result: RewriteResult, unsafe: bool, report: str | None) -> RewriteResult | None:
    """The rewrite ``--apply`` may write by its validation report (the full plan's when the
    report covers the unsafe actions), or None when the gate refuses (the reason on stderr)."""
    from .gate import check_apply

    decision = check_apply(loaded, Path(src), result, unsafe, report)
    if decision.result is None:
        stderr().print(f"refused to apply: {decision.refused}", highlight=False, soft_wrap=True)
        return None
    for note in decision.notes:
        stderr().print(note, highlight=False)
    return decision.result


def _preview(loaded: LoadedPlan, src: str, result: RewriteResult, unsafe: bool, report: str | None) -> RewriteResult:
    """What ``--apply`` would write, for the preview: a passing report for the full plan lets the
    unsafe actions through, so the diff shown includes them too. Looked up only when a report
    exists, so a plain preview never hashes the tree."""
    from ..validate.report import default_report_dir, read_report
    from .gate import check_apply

    where = Path(report) if report else default_report_dir(loaded.path)
    if read_report(where) is None:
        return result
    try:
        decision = check_apply(loaded, Path(src), result, unsafe, report)
    except StackpartError:
        # an unsafe action that cannot be written: no report can pass for it, and the preview
        # stays the safe diff with the action listed as not written, as without one
        return result
    if decision.result is None or decision.result is result:
        return result
    stderr().print(
        "note: unsafe actions shown: the validation report for the full plan passed, so "
        "--apply will write them",
        highlight=False,
    )
    return decision.result


def _print_warnings_and_skipped(loaded: LoadedPlan, result: RewriteResult) -> None:
    """The plan's warnings, then each action not written with its plan line and why, on stderr
    (:func:`.notices.notices`)."""
    from .notices import notices

    for notice in notices(loaded, result):
        stderr().print(notice.markup, highlight=False)


def _write_summary(summary_md: str | None, loaded: LoadedPlan, result: RewriteResult, src: str, applied: bool) -> None:
    """Write the pull-request summary where ``--summary-md`` asks (nothing without it)."""
    if summary_md is not None:
        from .summary_md import write_rewrite_summary

        write_rewrite_summary(summary_md, loaded, result, src, applied=applied)


def _apply(loaded: LoadedPlan, src: str, result: RewriteResult, summary_md: str | None) -> int:
    """Write ``result`` to SRC with signals deferred (:func:`rewriter.rewrite.apply.apply_changes`),
    then say what was done.

    Returns:
        0 applied, or nothing to write (SRC already holds the plan's edits); ``128 + signal`` (or a ``SystemExit``'s code) when interrupted: every file
        restored.

    Raises:
        StackpartError: the apply failed (a file changed since it was read, a write error);
            nothing was changed.
    """
    linked = hard_linked(Path(src), result.changes)
    with deferred_signals() as held:
        try:
            applied = apply_changes(Path(src), result.changes, sweep=result.read)
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
            return _aborted(stopped, src, result)
        # The summary after the write: a failed apply must not leave a summary saying "applied".
        _write_summary(summary_md, loaded, replace(result, changes=[]) if applied.already else result, src,
                       applied=True)
        _print_applied(loaded, src, result, applied, linked, held.late)
    return 0


def _aborted(stopped: BaseException, src: str, result: RewriteResult) -> int:
    """Say that an interrupted apply changed nothing; the exit code (``128 + signal``)."""
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


def _print_applied(loaded: LoadedPlan, src: str, result: RewriteResult, applied: Applied,
                   linked: list[tuple[str, int]], late: list[int]) -> None:
    """What the apply did: temp files of a killed apply removed, files changed (or none: every
    file already held its new bytes, SRC had the plan's edits before this apply read it, or the
    plan writes nothing), hard links that keep the old bytes, a signal received after the last
    write."""
    swept = applied.swept
    if swept:
        shown = ", ".join(swept[:5]) + (f" and {len(swept) - 5} more" if len(swept) > 5 else "")
        stderr().print(f"note: removed {len(swept)} temp file(s) an earlier apply left when it was killed: "
                       f"{shown}", highlight=False, soft_wrap=True)
    if applied.already:
        stderr().print(f"already applied: {src} holds {_edits(result)}, written after this apply read it "
                       "(by another apply?); nothing was written", highlight=False, soft_wrap=True)
        return
    if not result.changes:
        if not loaded.plan.actions:
            said = "no changes: the plan has no actions; nothing was written"
        elif len(_not_written(result)) == len(loaded.plan.actions):
            said = f"no changes: {len(loaded.plan.actions)} action(s) not written (above); nothing was written"
        else:
            said = f"already applied: {src} holds {_edits(result)}; no change to write"
        stderr().print(said, highlight=False, soft_wrap=True)
        return
    stderr().print(f"applied: {len(result.changes)} file(s) changed under {src}", highlight=False)
    for rel, links in linked:
        stderr().print(
            f"note: {rel} had {links} hard links: the apply wrote a new file under this name (an atomic "
            f"rename), and the other {links - 1} name(s) keep the old bytes", highlight=False)
    if late:
        stderr().print(
            f"note: {signal_name(late[0])} received after the last file was written: "
            "ignored, the apply is complete",
            highlight=False,
        )


def _not_written(result: RewriteResult) -> set[int]:
    """The indices of the actions whose edit is not in the tree and not written
    (:func:`.notices.not_written`)."""
    from .notices import not_written

    return set(not_written(result))


def _edits(result: RewriteResult) -> str:
    """Whose edits SRC holds: the plan's, or its other actions' where some were not written (the
    lines above name them)."""
    if _not_written(result):
        return f"the edits of this plan's other actions ({len(_not_written(result))} action(s) not written, above)"
    return "this plan's edits"


def _print_diff(loaded: LoadedPlan, result: RewriteResult, src: str, check: bool) -> None:
    """The diff on stdout, or (not under ``check``) why there is none on stderr."""
    patch = result.diff()
    if patch:
        # Bytes, not text: a file in another encoding (PEP 263) keeps its exact bytes in the diff.
        click.echo(patch.encode("utf-8", "surrogateescape"), nl=False)
    elif not check:
        if not loaded.plan.actions:
            why = "the plan has no actions"
        elif _not_written(result):
            why = f"{len(_not_written(result))} action(s) not written (above); {src} already has the rest"
        else:
            why = f"{src} already is what the plan asks"
        stderr().print(f"no changes: {why}", highlight=False)


def _print_next_step(plan_path: str, loaded: LoadedPlan, src: str, result: RewriteResult, unsafe: bool,
                     report: str | None) -> None:
    """Under ``--check`` with changes pending: how many files differ and what to run next."""
    from .gate import report_covers, report_file

    apply_it = f"`stackpart rewrite --plan {plan_path} {src} --apply`"
    if report_covers(loaded, Path(src), result, unsafe, report):
        step = f"run {apply_it} (the passing validation report {report_file(loaded, report)} covers this diff)"
    else:
        step = f"run `stackpart validate --plan {plan_path} {src}`, then {apply_it}"
    stderr().print(f"{len(result.changes)} file(s) differ from what {plan_path} asks; {step}", highlight=False)
