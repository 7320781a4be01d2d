"""Plan drift: the files given must already be as the configured plan rewrites them.

The plan is run exactly as ``stackpart rewrite --check`` runs it (:func:`rewriter.rewrite.transform.plan_rewrite`,
safe actions only), and only the changes to files on the command line count: pre-commit passes
the staged files, and a plan's target that is not being committed is not this commit's drift.
When the plan file itself is on the command line (the commit edits the plan), every change it
asks for is this commit's drift, wherever it lands.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..diff import unified_diff
from ..errors import StackpartError
from ..plan import LoadedPlan
from ..rewrite.transform import FileChange, plan_rewrite


def _targeted(loaded: LoadedPlan, harness: bool = True) -> set[str]:
    """The files the plan names, relative to SRC: its targets' (``net.py`` of ``net.py::Block``),
    its site's, and with ``harness`` the harness file."""
    plan = loaded.plan
    wanted = {str(t).split("::", 1)[0] for t in (getattr(a, "target", None) for a in plan.actions) if t and "::" in str(t)}
    if harness and plan.harness is not None:
        wanted.add(plan.harness.file)
    if plan.site is not None:  # a plan on an installed library edits only its site (and _stackpart/)
        wanted.add(plan.site.split("::", 1)[0])
    return wanted


def infer_src(loaded: LoadedPlan, files: Sequence[str]) -> str | None:
    """SRC for a plan when none is configured (``--src``, ``src = ...``): the folder that, joined
    with a file the plan targets (``net.py`` of ``net.py::Block``, the harness file), gives one of
    ``files`` (``src/net.py`` -> ``src``). None when no file matches or two candidates disagree.
    The same guess whether the plan comes from ``--plan`` or from ``[tool.stackpart] plan``."""
    wanted = _targeted(loaded)
    found = set()
    for f in files:
        real = Path(os.path.realpath(f)).as_posix()
        for t in wanted:
            if real.endswith("/" + t.lstrip("/")):
                found.add(real[: -len(t.lstrip("/")) - 1])
    return os.path.relpath(found.pop()) if len(found) == 1 else None


def folder_holding_targets(loaded: LoadedPlan, files: Sequence[str], stop: str) -> Path | None:
    """A folder under which every file the plan's actions target exists, for the error that asks
    for SRC: the plan's own folder or one of its folders two levels down (``gpt/src`` beside
    ``gpt/plan.yaml``), else a folder holding one of ``files`` or above it, up to ``stop``. None
    where no such folder is found, or the plan targets no file."""
    wanted = _targeted(loaded, harness=False) or _targeted(loaded)
    if not wanted:
        return None
    top = Path(stop).resolve()
    home = Path(loaded.path).resolve().parent
    seen: list[Path] = [home]
    for pattern in ("*", "*/*"):
        seen += sorted(d for d in home.glob(pattern) if d.is_dir() and not any(
            part.startswith((".", "_")) for part in d.relative_to(home).parts))
    for f in files:
        for folder in Path(os.path.realpath(f)).parents:
            if folder not in seen:
                seen.append(folder)
            if folder == top:
                break
    return next((d for d in seen if all((d / t).is_file() for t in wanted)), None)


def plan_drift(loaded: LoadedPlan, src: str, files: Sequence[str]) -> tuple[list[tuple[str, FileChange]], str, list[str]]:
    """The plan's pending changes to ``files`` (to every file when the plan file is one of
    them): ``([(file as given, or relative to the working directory, change)], git-style diff,
    the actions on those files it leaves out)``: the last as ``rewrite`` prints them
    (:func:`rewriter.rewrite.notices.notices`, ``plan.yaml:LINE: actions[i] (ACTION TARGET) not
    written: why``: an unsafe action, which only a validated ``rewrite --apply`` writes, or an
    advisory one), so a drift the check does not see is said, not silent.

    Raises:
        StackpartError: a bad target (the same errors ``rewrite`` raises).
    """
    from ..rewrite.notices import not_written_line

    result = plan_rewrite(loaded, Path(src), unsafe=False, check_library=False)
    root = Path(src).resolve()
    given = {os.path.realpath(f): f for f in files}
    plan_staged = os.path.realpath(loaded.path) in given
    left_out = [not_written_line(loaded, i, why) for i, why in result.skipped
                if plan_staged or os.path.realpath(root / str(loaded.plan.actions[i].target).split("::", 1)[0]) in given]
    drifted = []
    for change in result.changes:
        real = os.path.realpath(root / change.relpath)
        if real in given:
            drifted.append((given[real], change))
        elif plan_staged:
            drifted.append((os.path.relpath(real), change))
    # generated code (``_stackpart/``) that the given files use or are about to use: missing or
    # stale, it is this commit's drift although pre-commit did not pass it (a commit that adds
    # `@apply_plan` without `_stackpart/library.py`, or deletes it, must not pass the hook)
    have = {id(c) for _, c in drifted}
    vendored = [c for c in result.changes if id(c) not in have and is_vendored(c.relpath)]
    if vendored and (drifted or any(_imports_vendored(f) for f in given)):
        drifted += [(os.path.relpath(os.path.realpath(root / c.relpath)), c) for c in vendored]
    return drifted, unified_diff([c for _, c in drifted]), left_out


def first_changed_line(old: bytes | None, new: bytes) -> int:
    """The first line (1-based, of ``old``) that the plan changes, where a drift finding is placed:
    the line replaced or removed, or the one a new line goes before (the last line where it goes
    after the end); 1 for a file the plan creates (``old`` None)."""
    if old is None:
        return 1
    import difflib

    a, b = old.splitlines(), new.splitlines()
    for tag, i1, _, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            return max(1, min(i1 + 1, len(a)))
    return 1  # the bytes differ only in line endings or the final newline: the file as a whole


def is_vendored(relpath: str) -> bool:
    """Whether ``relpath`` lies in a generated ``_stackpart/`` package."""
    from ..vendor import VENDOR_PACKAGE

    return VENDOR_PACKAGE in Path(relpath).parts


def _imports_vendored(path: str) -> bool:
    """Whether the Python file at ``path`` mentions the vendored package (imports generated code),
    read up to the first mention (:func:`rewriter.source.mentions`: a regular file only); a YAML
    file (a plan passed for drift) or a file that cannot be read does not."""
    from ..source import mentions
    from ..vendor import VENDOR_PACKAGE
    from .runner import NOT_PYTHON

    if Path(path).suffix in NOT_PYTHON:
        return False
    try:
        return mentions(path, VENDOR_PACKAGE.encode())
    except StackpartError:
        return False
