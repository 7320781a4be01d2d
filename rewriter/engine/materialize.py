"""Materialise the original and the rewritten tree side by side in a temp dir (SRC untouched)."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..plan import LoadedPlan
from ..rewrite.apply import apply_changes
from ..rewrite.transform import RewriteResult, plan_rewrite

#: Never copied: caches and VCS data the harness cannot need (``.stackpart_cache`` is
#: ``stackpart check``'s project cache).
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".stackpart", ".stackpart_cache", ".mypy_cache",
                                ".pytest_cache", ".ruff_cache")

#: Folders :func:`tree_hashes` does not read: VCS data, caches that tools write as they run (a
#: ``stackpart check`` between diagnose and ``rewrite --apply``, the pre-commit hook, writes
#: ``.stackpart_cache/``; mypy and pytest write JSON), and stackpart's own outputs.
_NOT_SOURCE = {"__pycache__", ".git", ".stackpart", ".stackpart_cache", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


def _not_source(part: str) -> bool:
    """A folder name whose files are never the program's: :data:`_NOT_SOURCE`, and diagnose's
    default report folders (``stackpart-diagnose/``, ``stackpart-diagnose-<stem>/`` for another
    plan's run in the same SRC)."""
    return part in _NOT_SOURCE or part == "stackpart-diagnose" or part.startswith("stackpart-diagnose-")


@dataclass
class Trees:
    """The two trees a validation runs.

    Attributes:
        original: a copy of SRC as it is.
        rewritten: a copy of SRC with the plan's changes applied (unsafe actions included: a
            passing validation is what allows them to be written).
        result: the rewrite; ``result.digest()`` is the hash the report is bound to.
    """

    original: Path
    rewritten: Path
    result: RewriteResult


def materialize(loaded: LoadedPlan, src: Path, workdir: Path) -> Trees:
    """Copy ``src`` to ``workdir/original`` and ``workdir/rewritten`` and rewrite the latter.

    The rewrite is computed on SRC (:func:`~rewriter.rewrite.transform.plan_rewrite`, ``unsafe=True``) and
    written to the copy with :func:`~rewriter.rewrite.apply.apply_changes`, so the diff validated is
    byte-for-byte the diff ``rewrite --apply`` writes.

    Raises:
        StackpartError: the plan does not apply to SRC (bad target, parse error, ...).
    """
    src = Path(src)
    result = plan_rewrite(loaded, src, unsafe=True)
    original = workdir / "original"
    rewritten = workdir / "rewritten"
    shutil.copytree(src, original, ignore=IGNORE, symlinks=True)
    shutil.copytree(src, rewritten, ignore=IGNORE, symlinks=True)
    apply_changes(rewritten, result.changes, own_copy=True)
    return Trees(original=original, rewritten=rewritten, result=result)


def tree_hashes(src: Path) -> dict[str, str]:
    """sha256 of every ``.py``/``.yaml``/``.json``/``.txt`` file under ``src`` (POSIX relpaths),
    so a stale report can say which files changed since it was written; files in folders that are
    not the program's (:func:`_not_source`) are left out, so a cache a tool writes or another
    diagnose's report does not make a report stale."""
    src = Path(src)
    out: dict[str, str] = {}
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(_not_source(part) for part in rel.parts[:-1]):
            continue
        if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".json", ".txt", ".cfg", ".toml"}:
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def file_sha256(path: Path) -> str:
    """sha256 of one file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
