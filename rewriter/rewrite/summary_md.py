"""The Markdown summary ``stackpart rewrite --summary-md PATH`` writes for a pull-request comment.

One table row per plan action (written, already in place, or not written and why), the plan's
warnings, the diff's sha256 (the identity validation reports are bound to) and the diff itself
in a collapsed block. A GitHub comment holds at most 65,536 characters, so the diff is cut at
:data:`MAX_DIFF_CHARS` with a note saying how to get all of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StackpartError

if TYPE_CHECKING:
    from ..plan import LoadedPlan
    from .transform import RewriteResult

MAX_DIFF_CHARS = 60_000  # GitHub's comment limit is 65,536 characters; the rest is the table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _counts(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for l in lines if l.startswith("+") and not l.startswith("+++"))
    removed = sum(1 for l in lines if l.startswith("-") and not l.startswith("---"))
    return added, removed


def _bound_to(loaded: LoadedPlan, result: RewriteResult, src: str) -> str:
    """Which digest a validation report must carry: with unsafe actions held back, the gate
    (:func:`rewriter.rewrite.gate.check_apply`) binds to the full plan's diff, not this one."""
    from .transform import plan_rewrite

    full = plan_rewrite(loaded, Path(src), unsafe=True) if result.skipped else result
    if full.digest() == result.digest():
        return " (validation reports are bound to it)."
    return (
        f"; validation reports are bound to the full plan's diff `{full.digest()[:16]}` "
        "(unsafe actions included), which a passing report lets `--apply` write."
    )


def rewrite_summary(loaded: LoadedPlan, result: RewriteResult, src: str, applied: bool) -> str:
    """The Markdown text (see the module docstring) for ``result`` of ``loaded`` on ``src``."""
    diff = result.diff()
    added, removed = _counts(diff)
    skipped = dict(result.skipped)
    changed = {c.relpath for c in result.changes}
    verb = "applied" if applied else "pending"
    out = [f"### stackpart rewrite: `{loaded.path}` on `{src}`", ""]
    if result.changes:
        out.append(
            f"**{len(result.changes)} file(s) {verb}**, +{added} −{removed} lines; diff sha256 "
            f"`{result.digest()[:16]}`" + _bound_to(loaded, result, src)
        )
    elif result.left_as_written:
        out.append(f"**No changes**: {len(result.left_as_written)} action(s) not written, their targets' own "
                   "decorators left as written (warnings below).")
    else:
        out.append("**No changes**: the tree is already what the plan asks.")
    out += ["", "| # | action | target | status |", "|---|---|---|---|"]
    for i, action in enumerate(loaded.plan.actions):
        if i in skipped:
            status = f"not written: {skipped[i]}"
        elif i in result.left_as_written:
            status = "not written: the target's own decorator has other options (warnings below)"
        elif action.file in changed:
            status = "written" if applied else "in the diff"
        else:
            status = "already in place (or advisory)"
        out.append(f"| {i} | `{action.action}` | `{_cell(action.target)}` | {_cell(status)} |")
    if result.warnings:
        out += ["", "**Warnings**", ""] + [f"- {_cell(w)}" for w in result.warnings]
    if diff:
        shown = diff if len(diff) <= MAX_DIFF_CHARS else diff[:MAX_DIFF_CHARS]
        fence = "````" if "```" in shown else "```"
        out += ["", "<details><summary>Diff</summary>", "", f"{fence}diff", shown.rstrip("\n"), fence, ""]
        if shown is not diff:
            out.append(
                f"_diff cut at {MAX_DIFF_CHARS:,} of {len(diff):,} characters: run "
                f"`stackpart rewrite --plan {loaded.path} {src}` for all of it._"
            )
        out.append("</details>")
    return "\n".join(out) + "\n"


def check_summary_path(path: str) -> None:
    """Refuse a ``--summary-md`` path that cannot be written, before anything is: an ancestor that
    is not a directory, a directory where the file would be, or a nearest existing directory this
    process may not write in (the folders below it are created when the summary is written).

    Raises:
        StackpartError: at ``path``, saying which of those it is.
    """
    target = Path(path)
    if target.is_file() and not os.access(target, os.W_OK):
        raise StackpartError("cannot write the summary: the file is read-only", path=str(path))
    if target.is_dir():
        raise StackpartError("cannot write the summary: it names a directory; expected a file path such as "
                             f"{target / 'summary.md'}", path=str(path))
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise StackpartError(f"cannot write the summary: {parent} is not a directory", path=str(path))
            if not os.access(parent, os.W_OK | os.X_OK):
                raise StackpartError(f"cannot write the summary: no permission to write in {parent}", path=str(path))
            return


def write_rewrite_summary(path: str, loaded: LoadedPlan, result: RewriteResult, src: str, applied: bool) -> None:
    """Write :func:`rewrite_summary` to ``path`` (UTF-8), creating its directory.

    A source file in another encoding (a ``# -*- coding: latin-1 -*-`` cookie) reaches the diff as
    surrogate escapes; those bytes are written back as they were, as ``git diff`` shows them."""
    target = Path(path)
    text = rewrite_summary(loaded, result, src, applied)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8", "surrogateescape"))
    except OSError as exc:  # a full disk or an I/O error has no filename: said here, with the path
        done = f"; the rewrite itself was applied ({len(result.changes)} file(s) changed under {src})" if applied else ""
        raise StackpartError(f"cannot write the summary: {exc.strerror or exc}{done}", path=str(path)) from None
