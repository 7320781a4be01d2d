"""Which files to check, the cheap prefilter, and parallel workers for big trees.

Prefilter: a file is parsed only when its bytes contain ``torch`` and all of some selected rule's
needles (regexes: most rules need a ``compile(`` call or ``@...compile`` decorator, plus what they
look for, e.g. ``.item``), a byte search that costs microseconds against tens of milliseconds
for a LibCST parse: of the installed torch and transformers sources about one file in twenty
passes it, and fewer reach LibCST (the figures per version: docs/decisions.md, "check's speed and
the splice's round trip").

Second stage: a file that passes is parsed with the C ``ast`` module first, and only rules whose
``CALLS`` (``compile``, ``mark_dynamic``...) are actually called or used as decorators in it run
through LibCST; a file that mentions ``torch.compile`` only in a docstring costs an ``ast`` parse.
A rule that reports only in compiled code (``IN_COMPILED``: every rule but SP106) runs only where
the file calls or decorates with ``compile`` or a compile in another file reaches it: torch's own
sources mention ``fullgraph`` and call ``int(``/``range(`` in many files that compile nothing
(docs/decisions.md, "check's speed and the splice's round trip").
LibCST then gets only the top-level statements the rules can reach (:mod:`.reduce`), so a
50,000-line file with one compiled function costs about one LibCST parse of that function.

Parallelism: at :data:`PARALLEL_MIN` parsed files or more, files are parsed in a
``ProcessPoolExecutor`` (LibCST parsing is CPU-bound and holds the GIL). The pool is not worth its
start-up for a pre-commit-sized batch. Should a worker die all the same (a crash in native code),
the files it had not reported are checked again one process each, so one file costs only its own
result (a ``skipped:`` line), never the report of the others.

Project reachability (:mod:`.project`, on unless ``project=False``): before the prefilter, the
project of the given files is read for facts (cached), so a given file whose functions a compile
in another file reaches passes the prefilter without a compile call of its own (the needles that
describe the compile site, :data:`SITE_NEEDLES`, count as met), and the files a given file's
compile reaches (or that compile a given file's model) are checked too, their findings kept only
when a given file causes them (``Finding.caused_by``).

Every file is read once, through :func:`rewriter.source.read_bytes` (regular files only, never
blocking, a size cap), and those bytes serve the project read, the prefilter and the check; a
file that cannot be checked for such a reason, or is nested too deep for the parser, is a
``skipped`` warning and the other files are checked as usual.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..errors import StackpartError
from ..source import TOO_DEEP, Skipped, check_syntax, decode_file, read_bytes
from .engine import check_text
from .reduce import map_lines, reduce_source, statement_facts
from .file_summary import compile_lines
from .project import FileView, local_view
from .rule import COMPILE_NEEDLE, FileResult, Rule
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


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _link_rank(path: str, real: str) -> tuple[bool, bool]:
    """Which of a file's names :func:`discover` keeps (the smaller): one that is no link before
    one that is, and one that passes through no linked directory (``e/m.py``) before one that
    does (``elink/m.py``, ``elink -> e``)."""
    return os.path.islink(path), real != os.path.abspath(path)


def discover(paths: Iterable[str], skipped: list[str] | None = None) -> list[str]:
    """The Python files named by ``paths``: files as given, directories walked for ``*.py``.

    Hidden directories, ``__pycache__`` and ``site-packages`` are skipped (a virtualenv inside
    the tree is not the user's code); explicitly named files are kept, except YAML files (a
    plan passed for the drift check). A walk does not follow links to directories, and leaves
    out a ``*.py`` symlink whose target lies outside the directory walked (``x.py ->
    /dev/zero``), appending ``path: skipped: ...`` to ``skipped`` when given. A file named
    explicitly is kept even when it is a link: reading it (:func:`rewriter.source.read_bytes`)
    accepts only a regular file.

    Raises:
        StackpartError: a path that does not exist.
    """
    out: list[str] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            top = os.path.realpath(path)
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
                for name in sorted(files):
                    if not name.endswith(".py"):
                        continue
                    full = os.path.join(root, name)
                    if os.path.islink(full) and not _inside(os.path.realpath(full), top):
                        if skipped is not None:
                            skipped.append(
                                f"{full}: skipped: a symlink to {os.readlink(full)}, outside {given} "
                                "(a directory walk stays in the tree)"
                            )
                        continue
                    out.append(full)
        elif not path.exists() and not path.is_symlink():  # a broken or looping link: read_bytes says which
            raise StackpartError("no such file or directory", path=given)
        elif path.suffix not in NOT_PYTHON:  # YAML: a plan passed for drift (pre-commit's types_or)
            out.append(given)
    # a file named twice is checked (and reported, and fixed) once, however it is spelt
    # (``m.py``, ``./m.py``, its absolute path, a symlink to it: ``alias.py -> real.py`` found
    # twice with "fixed 2 file(s)" for one file); the first spelling is kept, except that the
    # file's own name wins over a link's. A link whose target is not also named is checked as
    # given (what it leads to is read only if regular).
    first: dict[str, str] = {}
    for f in out:
        key = os.path.realpath(f)
        kept = first.setdefault(key, f)
        if kept != f and _link_rank(f, key) < _link_rank(kept, key):
            first[key] = f
    # said once the names are settled: in a chain a.py -> b.py -> real.py, b.py is checked as
    # real.py (it was 'checked as a.py', a name that was itself skipped)
    said: set[str] = set()
    for f in out:
        checked = first[os.path.realpath(f)]
        if checked != f and f not in said and os.path.islink(f) and skipped is not None:
            said.add(f)
            skipped.append(f"{f}: skipped: a symlink to {os.readlink(f)}, checked as {checked}")
    return list(first.values())


def needle_patterns(rules: Sequence[type[Rule]]) -> list[list[re.Pattern[bytes]]]:
    """Each selected rule's needles, compiled (bytes, multiline)."""
    return [[re.compile(n.encode(), re.M) for n in r.NEEDLES] for r in rules]


#: Needles that describe the compile site (a compile call, its ``fullgraph``): met in a file that
#: a compile in another file reaches.
SITE_NEEDLES = frozenset({COMPILE_NEEDLE, r"\bfullgraph\b"})


def wanted(data: bytes, needles: list[list[re.Pattern[bytes]]], reached: bool = False) -> bool:
    """The prefilter: the file mentions torch and some rule's needles all match. ``reached``: a
    compile elsewhere in the project reaches the file, so :data:`SITE_NEEDLES` (and ``torch``)
    count as met."""
    if reached:
        return any(all(p.pattern.decode() in SITE_NEEDLES or p.search(data) for p in group) for group in needles)
    return b"torch" in data and any(all(p.search(data) for p in group) for group in needles)


def _check_one(args: tuple) -> FileResult:
    """Check one file: ``(path, rule codes, fix, view or None, its bytes)`` (the bytes as
    :func:`check_files` read them for the prefilter: the file is not read again)."""
    path, codes, fix, view, data = args
    try:
        result = _check_viewed(path, codes, fix, view, data)
    except RecursionError:
        # every walk of a tree is iterative or runs in run_deep's thread; one that still runs out
        # of stack is this file's one-line skip, never a traceback that ends the others' check
        shown = path.replace(os.sep, "/")
        return FileResult(path=shown, skipped=f"{shown}: skipped: {TOO_DEEP} (maximum recursion depth exceeded "
                          "reading its facts); split the deepest statement or expression into smaller ones")
    if view is not None and view.report_only is not None:
        # a file not given: only what a given file causes (rewriter.check.project_reading)
        keep = view.report_only
        result.findings = [f for f in result.findings if f.caused_by & keep]
        result.initial = [f for f in result.initial if f.caused_by & keep]
    return result


def _check_viewed(path: str, codes: tuple[str, ...], fix: bool, view: FileView | None, data: bytes) -> FileResult:
    shown = path.replace(os.sep, "/")
    try:
        source = decode_file(data, path, Path(path))
        tree = check_syntax(source.text, shown)  # CPython's parser: the gate before LibCST
    except Skipped as exc:
        return FileResult(path=shown, skipped=str(exc))
    except StackpartError as exc:
        return FileResult(path=shown, error=str(exc), parsed=True)
    rules = [r for r in ALL_RULES if r.CODE in codes]
    if tree is None:  # code for a newer Python, which LibCST alone reads: every rule, the whole text
        return check_text(source.text, shown, rules, fix=fix, view=view)
    facts = [statement_facts(stmt) for stmt in tree.body]  # one walk: the prefilter and the reduction
    names: set[str] = set().union(*(calls for calls, _ in facts))
    if view is None:
        view = local_view(tree, shown, compile_lines(source.text.encode("utf-8", "surrogatepass")))
    if view.marks:
        names.add("compile")  # compiled from elsewhere: as if it had a compile call of its own
    rules = [r for r in rules if r.CALLS & names and ("compile" in names or not r.IN_COMPILED)]
    if not rules:
        return FileResult(path=shown, parsed=False)
    if not fix:
        # LibCST sees only what the rules can reach (rewriter.check.reduce); a fix rewrites the
        # file, so it parses the whole text. A reduced text that LibCST refuses (its positions
        # would be the reduced text's) is checked whole instead.
        text, line_map = reduce_source(source.text, tree, facts, keep=view.top_names())
        if line_map is not None:
            result = check_text(text, shown, rules, tree=ast.parse(text), view=view)
            if result.error is None and result.skipped is None:
                result.findings = map_lines(result.findings, line_map)
                result.initial = map_lines(result.initial, line_map)
                return result
    return check_text(source.text, shown, rules, fix=fix, tree=tree, view=view)


def _check_chunk(paths: list[str], data: dict[str, bytes], codes: tuple[str, ...], fix: bool,
                 views: dict | None = None) -> list[FileResult]:
    """Check ``paths`` in order; ``data``: each one's bytes, as read by :func:`check_files`."""
    views = views or {}
    return [_check_one((path, codes, fix and views.get(path, _NO_VIEW).report_only is None, views.get(path), data[path]))
            for path in paths]


_NO_VIEW = FileView()


def _died(path: str) -> FileResult:
    return FileResult(
        path=path.replace(os.sep, "/"),
        skipped=f"{path}: skipped: the process checking it died (a crash in native code, e.g. the "
        "parser); please report it with the file",
    )


def _check_alone(path: str, data: bytes, codes: tuple[str, ...], fix: bool, views: dict | None = None) -> FileResult:
    """``path`` checked in a process of its own: its crash is this file's result only."""
    view = (views or {}).get(path)
    try:
        with ProcessPoolExecutor(max_workers=1) as pool:
            [result] = pool.submit(_check_chunk, [path], {path: data}, codes, fix, {path: view} if view else None).result()
            return result
    except BrokenProcessPool:
        return _died(path)


def _check_in_pool(todo: list[str], data: dict[str, bytes], codes: tuple[str, ...], fix: bool, workers: int,
                   views: dict | None = None) -> dict[str, FileResult]:
    """Check ``todo`` in ``workers`` processes, in chunks; if a worker dies (the pool breaks), the
    files without a result yet are checked one process each (:func:`_check_alone`)."""
    results: dict[str, FileResult] = {}
    chunk = max(1, len(todo) // (workers * 4))
    chunks = [todo[i : i + chunk] for i in range(0, len(todo), chunk)]
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            futures = {pool.submit(_check_chunk, part, {p: data[p] for p in part}, codes, fix,
                                   {p: views[p] for p in part if p in views} if views else None): part
                       for part in chunks}
            wait(futures)
            for future, part in futures.items():
                if not isinstance(future.exception(), BrokenProcessPool):
                    results.update(zip(part, future.result()))  # another exception is a bug: raised
    except BrokenProcessPool:  # a worker died while the chunks were still being submitted
        pass
    for path in todo:
        if path not in results:
            results[path] = _check_alone(path, data[path], codes, fix, views)
    return results


def check_files(
    files: Sequence[str], rules: Sequence[type[Rule]], fix: bool = False, jobs: int | None = None,
    project: bool = True, stats: dict | None = None,
) -> list[FileResult]:
    """Check ``files`` with ``rules``; results in the order of ``files``, then one result for
    each project file checked for the findings a given file causes (never fixed).

    Args:
        files: paths as given (printed as given).
        rules: the selected rule classes.
        fix: compute the fixed text of each given file (nothing is written here).
        jobs: worker processes; None = ``os.cpu_count()``; 1 = in this process. Workers are
            used only for :data:`PARALLEL_MIN` or more files that pass the prefilter.
        project: read the files' project for facts (:mod:`.project_reading`); False: each file alone.
        stats: when given, filled with ``project_files`` (``.py`` files of the projects read),
            ``project_parsed`` (of them parsed in this run: the cache had no fresh summary) and
            ``extra`` (project files checked besides ``files``).

    A file that cannot be read or parsed has ``error`` set; one that is not checked for a reason
    of its kind (not a regular file, over the size cap, nested too deep for the parser, or its
    worker process died) has ``skipped`` set. Neither stops the other files.
    """
    needles = needle_patterns(rules)
    codes = tuple(r.CODE for r in rules)
    results: dict[str, FileResult] = {}
    todo: list[str] = []
    views: dict[str, FileView] = {}
    extra: list[str] = []
    data: dict[str, bytes] = {}  # each file's bytes, read once: the prefilter and the check
    if project and rules and files:
        from .project_reading import plan_project

        # a cache file that is not JSON, of another version or with an entry of another shape is
        # read afresh by the project itself (ProjectFiles._load, _is_summary); any error here is a bug
        plan = plan_project(files)
        views.update(plan.views)
        extra = [p for p in plan.extra if p not in views]
        views.update({p: plan.extra[p] for p in extra})
        data.update(plan.data)  # given files the project read (their cache entry was not fresh)
        if stats is not None:
            stats.update(project_files=plan.files, project_parsed=plan.parsed, extra=len(extra))
            if plan.fallback_root is not None:
                stats["fallback_root"] = plan.fallback_root
    for path in [*files, *extra]:
        if path not in data:
            try:
                data[path], _ = read_bytes(path)
            except Skipped as exc:
                results[path] = FileResult(path=path, skipped=str(exc))
                continue
            except StackpartError as exc:
                results[path] = FileResult(path=path, error=str(exc))
                continue
        view = views.get(path)
        if rules and wanted(data[path], needles, reached=bool(view and view.marks)):
            todo.append(path)
        else:
            results[path] = FileResult(path=path)
            del data[path]  # not checked: its bytes are not kept
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers > 1 and len(todo) >= PARALLEL_MIN:
        results.update(_check_in_pool(todo, data, codes, fix, workers, views))
    else:
        results.update(zip(todo, _check_chunk(todo, data, codes, fix, views)))
    # a file not given adds only the findings a given file causes: its own errors and skips
    # are not this commit's
    more = [results[path] for path in extra if results[path].findings]
    for r in more:
        r.parsed = False  # "parsed" counts the given files; the summary counts these apart
    return [results[path] for path in files] + more
