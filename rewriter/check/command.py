"""``stackpart check [FILES]``: what the CLI calls.

Exit codes (ruff's contract): 0 clean; 1 findings or plan drift remain; 2 a file could not be read
or parsed, or bad input (unknown rule code, bad plan or config: a StackpartError, printed by the
CLI). An empty file list is a clean pass: pre-commit may call a hook with no files.

A file stackpart does not check (not a regular file, over the 10 MiB cap, nested too deep for the
parser, a symlink leaving a walked directory) is one ``warning: path: skipped: why`` line on
stderr and does not change the exit code; the other files are checked as usual.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StackpartError
from ..source import SourceFile, read_file
from .config import CheckConfig, check_config_plan, load_config
from .output import Outcome, render
from .rule import FileResult
from .runner import NOT_PYTHON, check_files, discover, select_rules

if TYPE_CHECKING:
    from ..plan import LoadedPlan


def _write(changes: list[tuple[str, bytes | None, bytes, int]], outcome: Outcome) -> None:
    """Write ``(path, old, new, mode)`` for files anywhere under one common root, atomically
    (``old`` None: a new file; a file whose bytes are no longer ``old`` is refused), and add them
    to ``outcome.fixed``.

    They are added before a signal that came during the transaction is acted on (it is deferred
    to the end of this block, :class:`rewriter.signals.deferred_signals`): a signal during the
    last rename stops check with every file written, and :func:`check_command` names them.
    """
    if not changes:
        return
    from ..rewrite.apply import apply_changes
    from ..rewrite.transform import FileChange  # LibCST's codemod stack: imported only to write
    from ..signals import deferred_signals

    paths = [os.path.abspath(p) for p, *_ in changes]
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    with deferred_signals():
        apply_changes(
            Path(root),
            [FileChange(Path(os.path.relpath(p, root)).as_posix(), old, new, mode) for p, (_, old, new, mode) in zip(paths, changes)],
        )
        _add_fixed(outcome, [path for path, *_ in changes])


def _diff_name(path: str) -> str:
    """The name a file has in ``--diff``'s headers: its path from the working directory,
    normalized, where it lies under it (``git apply`` refuses ``a//abs/m.py`` as an invalid path
    and ``a/./m.py`` is another spelling), else as given."""
    full = os.path.abspath(path)
    here = os.getcwd()
    if os.path.commonpath([full, here]) == here:
        return Path(os.path.relpath(full, here)).as_posix()
    return path


def _as_checked(r: FileResult, outcome: Outcome) -> SourceFile | None:
    """The file of ``r`` read again to write its fix, or None (an error in ``outcome``) when it
    is no longer the text the fix was made from: an edit made while check ran is kept."""
    from .engine import text_sha256

    try:
        source = read_file(r.path)
    except StackpartError as exc:
        outcome.errors.append(f"{exc}; not fixed")
        return None
    if r.fixed_from is not None and text_sha256(source.text) != r.fixed_from:
        outcome.errors.append(f"{r.path}: changed while it was checked (edited meanwhile?); not fixed (run it again)")
        return None
    return source


def _add_fixed(outcome: Outcome, paths: Sequence[str]) -> None:
    """Add the files just written to ``outcome.fixed``, each file once: the plan's edits and a
    rule's fix in the same file (written one after the other) are one file fixed, under the
    spelling it was first written with."""
    seen = {os.path.realpath(p) for p in outcome.fixed}
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            outcome.fixed.append(path)


def _drift(outcome: Outcome, plan: str | None, src: str | None, files: Sequence[str], fix: bool, validate: bool = True,
           config: CheckConfig | None = None) -> None:
    """Plan drift of ``files``; with ``fix``, write the plan's pending edits under the rule
    ``rewrite --apply`` follows: a passing validation report for this exact diff (the gate of
    :mod:`rewriter.rewrite.gate`), unless ``validate`` is False (``--no-validate``). A refusal
    leaves the drift reported and says why in ``outcome.drift_refused``.

    SRC is ``src`` (``--src``, ``[tool.stackpart] src``), else guessed from ``files``
    (:func:`.drift.infer_src`) alike for a plan from ``--plan`` and one from ``config`` (the
    pyproject.toml the plan came from, or None), else the folder that holds every file the plan
    targets (:func:`.drift.folder_holding_targets`: a commit of other files has no drift and must
    not fail the hook), else the working directory, or that pyproject.toml's folder for its plan."""
    if plan is None:
        return
    from ..plan import load_plan
    from .drift import first_changed_line, folder_holding_targets, infer_src, plan_drift

    outcome.plan = plan
    loaded = load_plan(plan)
    fallback = config.root if config is not None and config.root else "."
    guessed = src is None
    src = src or infer_src(loaded, files)
    if guessed and src is None:
        # no file of the commit is one the plan targets (a commit of other files): SRC is the
        # folder that holds every targeted file, where one does; the commit then has no drift
        held = folder_holding_targets(loaded, files, fallback)
        src = os.path.relpath(held) if held is not None else None
    try:
        drifted, diff, outcome.drift_not_written = plan_drift(loaded, src or fallback, files)
    except StackpartError as exc:
        if guessed and "under SRC" in str(exc):  # targets are relative to SRC, not the working dir
            exc.hint = (f"{exc.hint}; " if exc.hint else "") + _src_advice(loaded, files, fallback, config)
        raise
    if fix and drifted and validate:
        from ..rewrite.gate import check_apply
        from ..rewrite.transform import plan_rewrite

        decision = check_apply(loaded, Path(src or fallback), plan_rewrite(loaded, Path(src or fallback), unsafe=False), False, None)
        if decision.refused:
            outcome.drift_refused = decision.refused
            outcome.drift_files = [path for path, _ in drifted]
            outcome.drift_diff = diff
            outcome.drift_lines = {path: first_changed_line(c.old, c.new) for path, c in drifted}
            return
    if fix and drifted:
        _write([(path, c.old, c.new, c.mode) for path, c in drifted], outcome)  # old None: a new file
        drifted, diff, outcome.drift_not_written = plan_drift(loaded, src or fallback, files)
    outcome.drift_files = [path for path, _ in drifted]
    outcome.drift_diff = diff
    outcome.drift_lines = {path: first_changed_line(c.old, c.new) for path, c in drifted}


def _src_advice(loaded: LoadedPlan, files: Sequence[str], fallback: str, config: CheckConfig | None) -> str:
    """What to do where SRC was guessed and a target is not under it: name SRC, with the folder
    that holds the plan's targets where one is found (:func:`.drift.folder_holding_targets`)."""
    from .drift import folder_holding_targets

    folder = folder_holding_targets(loaded, files, fallback)
    if folder is None:
        return "pass --src DIR (or src = ... under [tool.stackpart])"
    flag = _diff_name(str(folder)) or "."
    if config is not None and config.root:
        rel = Path(os.path.relpath(folder, config.root)).as_posix()
        return f'set src = "{rel}" under [tool.stackpart] in {_diff_name(config.path)}, or pass --src {flag}'
    return f"pass --src {flag} (or src = ... under [tool.stackpart])"


def _measured(findings: list, plan: str | None) -> list:
    """``findings`` with each SP101 that diagnose's search measured and kept turned into a note
    (:mod:`rewriter.check.measured`), and each SP103 whose advised knob diagnose measured at that
    graph break and pruned (:mod:`rewriter.check.measured_config`): its message says what was
    measured; it does not fail."""
    if not any(f.code in ("SP101", "SP103") for f in findings):
        return findings
    from dataclasses import replace

    from .measured import kept_for
    from .measured_config import advised_knob, rejected_for

    out = []
    for f in findings:
        knob = advised_knob(f.message) if f.code == "SP103" else None
        rejected = rejected_for(f.path, f.line, knob, plan) if knob else None
        if rejected is not None:
            out.append(replace(f, severity="note", message=(
                f"{f.message}. Kept by measurement, so not failing: {rejected.text} ({_diff_name(rejected.report)}); "
                "run diagnose again when the model changes")))
            continue
        kept = kept_for(f.path, f.line, lambda f=f: _span(f), plan) if f.code == "SP101" else None
        if kept is not None and not kept.measured:
            f = replace(f, message=f"{f.message}. Not kept by measurement: {kept.text} ({_diff_name(kept.report)})")
        elif kept is not None:
            f = replace(f, severity="note", message=(
                f"{f.message}. Kept by measurement, so not failing: {kept.text} ({_diff_name(kept.report)}); "
                "run diagnose again when the model changes"))
        out.append(f)
    return out


def _span(f) -> str:
    """The source text of a finding's span (empty when the file cannot be read)."""
    try:
        lines = read_file(f.path).text.splitlines()
    except StackpartError:
        return ""
    if f.end_line > len(lines):
        return ""
    if f.line == f.end_line:
        return lines[f.line - 1][f.col - 1 : f.end_col - 1]
    return "\n".join([lines[f.line - 1][f.col - 1 :], *lines[f.line : f.end_line - 1], lines[f.end_line - 1][: f.end_col - 1]])


def run_check(
    paths: Sequence[str],
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    fix: bool = False,
    plan: str | None = None,
    src: str | None = None,
    jobs: int | None = None,
    use_config: bool = True,
    diff: bool = False,
    validate: bool = True,
    project: bool | None = None,
    outcome: Outcome | None = None,
) -> tuple[Outcome, list]:
    """Check ``paths`` (files, or directories walked for ``*.py``) and, with ``fix``, write fixes.

    ``project``: read the project of the files for compiles that reach them from other files
    (:mod:`rewriter.check.project_reading`; findings in a project file not given are reported when a
    given file causes them). None: ``[tool.stackpart] project``, default on.

    ``diff`` computes the safe fixes without writing them: their git-style diff (paths as given)
    goes to ``outcome.fix_diff`` (see :mod:`rewriter.diff`).

    Configuration from ``[tool.stackpart]`` fills in what the arguments leave empty.

    ``outcome``: the record to fill (a new one when None); a caller that passes its own can read
    ``outcome.fixed`` (the files ``fix`` wrote so far) when an interrupt stops the run.

    Returns:
        ``(outcome, selected rule classes)``.

    Raises:
        StackpartError: unknown rule code, bad config or plan, a path that does not exist.
    """
    config = load_config() if use_config else None
    planned_by = None  # the pyproject.toml the plan comes from
    if config is not None:
        select = select or config.select
        ignore = ignore or config.ignore
        if plan is None and config.plan is not None:
            check_config_plan(config)
            plan, src, planned_by = config.plan, src or config.src, config
    if project is None:
        project = config.project if config is not None else True
    rules = select_rules(select, ignore)
    skipped: list[str] = []
    files = discover(paths, skipped)
    # a staged plan: drift only; other YAML files (CI configs...) never run the plan
    plans = [p for p in paths if plan is not None and Path(p).suffix in NOT_PYTHON
             and os.path.realpath(p) == os.path.realpath(plan)]
    outcome = outcome if outcome is not None else Outcome()
    outcome.checked, outcome.skipped = len(files), skipped
    if not files and not plans:
        return outcome, rules
    _drift(outcome, plan, src, files + plans, fix, validate, planned_by)
    if not files:
        return outcome, rules
    results = check_files(files, rules, fix=fix or diff, jobs=jobs, project=project, stats=outcome.project)
    if diff and not fix:
        from ..diff import file_diff

        for r in results:
            if r.fixed is not None and (source := _as_checked(r, outcome)) is not None:
                outcome.fix_diff += file_diff(_diff_name(r.path), source.raw, source.encode(r.fixed))
    if fix:
        writes = []
        for r in results:
            if r.fixed is None or (source := _as_checked(r, outcome)) is None:
                continue
            writes.append((r.path, source.raw, source.encode(r.fixed), source.mode))
        _write(writes, outcome)
    for r in results:
        outcome.findings.extend(_measured(r.initial if diff and not fix else r.findings, plan))
        outcome.parsed += r.parsed
        if r.error:
            outcome.errors.append(r.error)
        if r.skipped:
            outcome.skipped.append(r.skipped)
    return outcome, rules


def check_command(
    paths: Sequence[str],
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    fix: bool = False,
    fmt: str = "text",
    plan: str | None = None,
    src: str | None = None,
    jobs: int | None = None,
    output: str | None = None,
    diff: bool = False,
    validate: bool = True,
    project: bool | None = None,
) -> int:
    """``stackpart check``: print the report (or write it to ``output``) and return the exit code."""
    import click
    from rich.markup import escape

    from ..terminal import stderr

    outcome = Outcome()
    try:
        outcome, rules = run_check(paths, select, ignore, fix=fix, plan=plan, src=src, jobs=jobs, diff=diff,
                                   validate=validate, project=project, outcome=outcome)
    except (KeyboardInterrupt, SystemExit):
        if outcome.fixed:  # the plan's edits and the rules' fixes are two transactions
            stderr().print(f"interrupted after --fix wrote {len(outcome.fixed)} file(s) (each whole): "
                           f"{', '.join(outcome.fixed)}; nothing else was written", highlight=False, soft_wrap=True)
        raise
    report = render(outcome, fmt, rules)
    if output is not None:
        try:
            Path(output).write_text(report, encoding="utf-8")
        except OSError as exc:  # a full disk or an I/O error has no filename: said here, with the path
            raise StackpartError(f"cannot write the report: {exc.strerror or exc}", path=str(output)) from None
    elif report:
        click.echo(report, nl=False)
    for error in outcome.errors:
        stderr().print(f"[red]error[/]: {error}", highlight=False)
    for line in outcome.skipped:
        stderr().print(f"[yellow]warning[/]: {escape(line)}", highlight=False)
    fixable = sum(f.fixable for f in outcome.findings)
    failing = [f for f in outcome.findings if f.severity != "note"]
    notes = len(outcome.findings) - len(failing)
    summary = (
        f"{len(failing)} finding(s)"
        + (f" ({fixable} fixable with --fix)" if fixable else "")
        + (f", {notes} kept by measurement (not failing)" if notes else "")
        + (f", {len(outcome.drift_files)} file(s) drifted from {outcome.plan}" if outcome.drift_files else "")
        + (f", fixed {len(outcome.fixed)} file(s)" if outcome.fixed else "")
        + f"; {outcome.checked} file(s) checked, {outcome.parsed} parsed"
        + (f", {len(outcome.skipped)} skipped" if outcome.skipped else "")
        + (f"; project: {outcome.project['project_files']} file(s), "
           + (f"facts of {outcome.project['project_parsed']} read now" if outcome.project["project_parsed"] else "facts from the cache")
           + (f", {outcome.project['extra']} more file(s) checked for what the given ones cause" if outcome.project["extra"] else "")
           + (f" (root {_diff_name(outcome.project['fallback_root']) or '.'}: no pyproject.toml or .git above the files, "
              "so their common folder)" if outcome.project.get("fallback_root") else "")
           if outcome.project.get("project_files") else "")
    )
    from rich.markup import escape

    for line in outcome.drift_not_written:  # what the drift check leaves out, as rewrite says it
        stderr().print(escape(line), highlight=False)
    stderr().print(summary, highlight=False)
    if outcome.drift_refused:
        stderr().print(f"plan edits not written: {outcome.drift_refused}", highlight=False)
    if outcome.errors:
        return 2
    return 1 if failing or outcome.drift_files else 0
