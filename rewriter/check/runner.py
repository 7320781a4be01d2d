"""Which files to check, the cheap prefilter, and parallel workers for big trees.

Prefilter: a file is parsed only when its bytes contain ``torch`` and all of some selected rule's
needles (regexes: most rules need a ``compile(`` call or ``@...compile`` decorator, plus what they
look for, e.g. ``.item``), a byte search that costs microseconds against tens of milliseconds
for a LibCST parse. In a 3,000-file tree of the installed
transformers and torch sources 82 files pass it and 10 reach LibCST (BENCHMARKS.md, check speed).

Second stage: a file that passes is parsed with the C ``ast`` module first, and only rules whose
``CALLS`` (``compile``, ``mark_dynamic``...) are actually called or used as decorators in it run
through LibCST; a file that mentions ``torch.compile`` only in a docstring costs an ``ast`` parse.

Parallelism: at :data:`PARALLEL_MIN` parsed files or more, files are parsed in a
``ProcessPoolExecutor`` (LibCST parsing is CPU-bound and holds the GIL). The pool is not worth its
start-up for a pre-commit-sized batch.
"""

from __future__ import annotations

import ast
import os
import re
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


#: Named files that are never Python source: skipped by :func:`discover`.
NOT_PYTHON = frozenset({".yaml", ".yml"})


def discover(paths: Iterable[str]) -> list[str]:
    """The Python files named by ``paths``: files as given, directories walked for ``*.py``.

    Hidden directories, ``__pycache__`` and ``site-packages`` are skipped (a virtualenv inside
    the tree is not the user's code); explicitly named files are kept, except YAML files (a
    plan passed for the drift check).

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
        elif not path.exists():
            raise StackpartError("no such file or directory", path=given)
        elif path.suffix not in NOT_PYTHON:  # YAML: a plan passed for drift (pre-commit's types_or)
            out.append(given)
    return list(dict.fromkeys(out))  # a file named twice is checked (and reported) once


def needle_patterns(rules: Sequence[type[Rule]]) -> list[list[re.Pattern[bytes]]]:
    """Each selected rule's needles, compiled (bytes, multiline)."""
    return [[re.compile(n.encode(), re.M) for n in r.NEEDLES] for r in rules]


def wanted(data: bytes, needles: list[list[re.Pattern[bytes]]]) -> bool:
    """The prefilter: the file mentions torch and some rule's needles all match."""
    return b"torch" in data and any(all(p.search(data) for p in group) for group in needles)


def called_names(text: str) -> set[str] | None:
    """Last components of every called or decorating name in ``text`` (``re.compile`` excluded),
    from the C ``ast`` parser (an order of magnitude faster than a LibCST parse with metadata).
    None when ``ast`` cannot parse the text (LibCST then reports the error)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for dec in node.decorator_list:
                dec = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(dec, ast.Attribute):
                    names.add(dec.attr)
                elif isinstance(dec, ast.Name):
                    names.add(dec.id)
            continue
        else:
            continue
        if isinstance(func, ast.Attribute):
            if not (func.attr == "compile" and isinstance(func.value, ast.Name) and func.value.id in ("re", "regex")):
                names.add(func.attr)
        elif isinstance(func, ast.Name):
            names.add(func.id)
    return names


def _check_one(args: tuple[str, tuple[str, ...], bool]) -> FileResult:
    path, codes, fix = args
    p = Path(path)
    try:
        source = read_source(p.parent, p.name)
    except StackpartError as exc:
        return FileResult(path=path, error=f"{path}: {exc.message}", parsed=True)
    rules = [r for r in ALL_RULES if r.CODE in codes]
    names = called_names(source.text)
    if names is not None:
        rules = [r for r in rules if r.CALLS & names]
        if not rules:
            return FileResult(path=path.replace(os.sep, "/"), parsed=False)
    return check_text(source.text, path.replace(os.sep, "/"), rules, fix=fix)


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
    needles = needle_patterns(rules)
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
