"""Which files to check, the cheap prefilter, and parallel workers for big trees.

Prefilter: a file is parsed only when its bytes contain ``torch`` and at least one selected rule's
needle (every rule needs ``compile``, ``mark_dynamic``, ``fullgraph`` or ``reduce-overhead`` in the
text to fire), a substring search that costs microseconds against milliseconds for a LibCST parse.
In the installed torch and transformers sources about one file in ten passes it (see
benchmarks/check_speed.py).

Parallelism: at :data:`PARALLEL_MIN` parsed files or more, files are parsed in a
``ProcessPoolExecutor`` (LibCST parsing is CPU-bound and holds the GIL). The pool is not worth its
start-up for a pre-commit-sized batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..errors import StackpartError
from ..source import read_source
from .engine import check_text
from .rule import FileResult, Rule
from .rules import ALL_RULES

PARALLEL_MIN = 24
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def select_rules(select: Sequence[str] = (), ignore: Sequence[str] = ()) -> list[type[Rule]]:
    """The rules ``--select``/``--ignore`` leave, matching by code prefix as ruff does (``SP1`` = all SP1xx).

    Raises:
        StackpartError: a code or prefix that matches no rule (with near codes).
    """
    from ..errors import near_names

    codes = [r.CODE for r in ALL_RULES]
    for given in [*select, *ignore]:
        if not any(c.startswith(given.upper()) for c in codes) and given.upper() != "ALL":
            raise StackpartError(
                f"unknown rule code {given!r}; expected one of {', '.join(codes)} or a prefix (SP1)",
                hint=near_names(given.upper(), codes),
            )

    def hit(code: str, prefixes: Sequence[str]) -> bool:
        return any(p.upper() == "ALL" or code.startswith(p.upper()) for p in prefixes)

    return [r for r in ALL_RULES if (not select or hit(r.CODE, select)) and not hit(r.CODE, ignore)]


def discover(paths: Iterable[str]) -> list[str]:
    """The Python files named by ``paths``: files as given, directories walked for ``*.py``.

    Hidden directories, ``__pycache__`` and ``site-packages`` are skipped (a virtualenv inside
    the tree is not the user's code); explicitly named files are always kept.

    Raises:
        StackpartError: a path that does not exist.
    """
    out: list[str] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
                out.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(".py"))
        elif path.exists():
            out.append(given)
        else:
            raise StackpartError("no such file or directory", path=given)
    return out


def wanted(data: bytes, needles: Sequence[bytes]) -> bool:
    """The prefilter: the file mentions torch and one of the selected rules' needles."""
    return b"torch" in data and any(n in data for n in needles)


def _check_one(args: tuple[str, tuple[str, ...], bool]) -> FileResult:
    path, codes, fix = args
    rules = [r for r in ALL_RULES if r.CODE in codes]
    p = Path(path)
    try:
        source = read_source(p.parent, p.name)
    except StackpartError as exc:
        return FileResult(path=path, error=f"{path}: {exc.message}", parsed=True)
    result = check_text(source.text, path.replace(os.sep, "/"), rules, fix=fix)
    return result


def check_files(
    files: Sequence[str], rules: Sequence[type[Rule]], fix: bool = False, jobs: int | None = None
) -> list[FileResult]:
    """Check ``files`` with ``rules``; results in the order of ``files``.

    Args:
        files: paths as given (printed as given).
        rules: the selected rule classes.
        fix: compute the fixed text of each file (nothing is written here).
        jobs: worker processes; None = ``os.cpu_count()``; 1 = in this process. Workers are
            used only for :data:`PARALLEL_MIN` or more files that pass the prefilter.
    """
    needles = sorted({n.encode() for r in rules for n in r.NEEDLES})
    codes = tuple(r.CODE for r in rules)
    results: dict[str, FileResult] = {}
    todo: list[str] = []
    for path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            results[path] = FileResult(path=path, error=f"{path}: cannot read: {exc.strerror}")
            continue
        if rules and wanted(data, needles):
            todo.append(path)
        else:
            results[path] = FileResult(path=path)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers > 1 and len(todo) >= PARALLEL_MIN:
        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            chunk = max(1, len(todo) // (workers * 4))
            for path, result in zip(todo, pool.map(_check_one, [(p, codes, fix) for p in todo], chunksize=chunk)):
                results[path] = result
    else:
        for path in todo:
            results[path] = _check_one((path, codes, fix))
    return [results[path] for path in files]
