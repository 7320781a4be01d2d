"""What one ``check`` run reads of the project(s) of the files given, and what it reports.

:func:`plan_project` finds each given file's root, reads each root once as one
:class:`.project.Project`, and returns a :class:`Plan`: the :class:`.project.FileView` of each
given file, and the files not given that a given file causes findings in.

**What is reported** (``check`` given some files, as pre-commit gives it the staged ones): the
findings located in the given files, whoever compiles them; and the findings located in other
project files that a given file causes: code reached by a compile in a given file, or through a
given file's model (``Mark.files``), and SP101 at a compile of a model whose class (or the class
that repeats its blocks) is in a given file. So a commit of ``train.py`` alone shows the
``.item()`` in ``models/layers.py`` that its compile now reaches, and a commit of
``models/layers.py`` alone shows it too. A file not given is never fixed, and its own parse
errors and skips are not reported.

**Root.** The nearest directory at or above the checked file's own folder that holds a
``pyproject.toml`` or a ``.git`` (a folder, or the file a worktree or submodule has): where
pre-commit, ruff and black take the project to start. Files with no such parent share one
fallback root, the common folder of those given (:func:`fallback_root`; not the filesystem root
or the home directory), read without a cache; the summary line names it. ``stackpart check --no-project`` (or ``project = false`` under ``[tool.stackpart]``)
turns the project read off.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .project import FileView, Project, display_path
from .project_files import walked

ROOT_MARKERS = ("pyproject.toml", ".git")


def find_root(path: str) -> str | None:
    """The project root of ``path``: the nearest folder at or above the file's own folder holding
    ``pyproject.toml`` or ``.git`` (see the module docstring), or None."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in ROOT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def fallback_root(paths: Sequence[str]) -> str | None:
    """The project root taken for given files that have none (:func:`find_root` None): their
    common folder, so that files given together (``check train.py models/net.py``) reach each
    other, and a file given alone reaches the files beside it. None without such files, or when
    that folder is the filesystem's root or the home directory (no project is that wide)."""
    if not paths:
        return None
    common = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
    if common in (os.path.abspath(os.sep), os.path.abspath(os.path.expanduser("~"))):
        return None
    return common


@dataclass
class Plan:
    """What :func:`plan_project` decided for one ``check`` run.

    Attributes:
        views: each given file (as given) -> its :class:`FileView` (absent: not in a project).
        extra: files not given but checked for findings a given file causes (displayed path ->
            view with ``report_only`` set), in a stable order.
        parsed: project files parsed in this run (the cache answered for the rest).
        files: ``.py`` files in the projects read.
        data: the bytes of each given file (as given) that was read here (its cache entry was
            not fresh), for ``check`` to use instead of reading it again.
    """

    views: dict[str, FileView] = field(default_factory=dict)
    extra: dict[str, FileView] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    parsed: int = 0
    files: int = 0
    #: the folder taken as the project root of given files with no ``pyproject.toml`` or
    #: ``.git`` above them (:func:`fallback_root`), or None when every file had a root
    fallback_root: str | None = None


def plan_project(paths: Sequence[str], use_cache: bool = True) -> Plan:
    """Read the project(s) of ``paths`` (the files given to ``check``) for facts.

    Each given file's root is found with :func:`find_root`; the files of one root share one
    :class:`Project`. A file of a project that is not given is checked too (its findings filtered
    to those a given file causes) when a compile reach touches both: the compile is in a given
    file, or it goes through a given file's class.

    Returns:
        a :class:`Plan`. Nothing is raised for unreadable project files: they count as empty.
    """
    plan = Plan()
    by_root: dict[str, list[str]] = {}
    roots: dict[str, str | None] = {}
    orphans: list[str] = []
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in roots:
            roots[folder] = find_root(path)
        root = roots[folder]
        if root is not None:
            by_root.setdefault(root, []).append(path)
        else:
            orphans.append(path)
    plan.fallback_root = fallback_root(orphans)
    if plan.fallback_root is not None:
        by_root.setdefault(plan.fallback_root, []).extend(orphans)
    for root, given in by_root.items():
        # a file the walk leaves out (under a hidden folder such as .venv, or site-packages) is
        # not the project's: it is checked alone, and its root is not read for it
        given = [p for p in given if walked(os.path.relpath(os.path.abspath(p), root))]
        if not given:
            continue
        given_abs = frozenset(os.path.abspath(p) for p in given)
        # no cache in a folder that is no project: nothing is written where no marker said so
        fallback = root == plan.fallback_root
        project = Project(root, use_cache=use_cache and not fallback, keep=given_abs)
        if not project.files and fallback:  # too many files under the common folder: the given ones
            project = Project(root, files={os.path.relpath(p, root).replace(os.sep, "/"): p for p in given_abs},
                              keep=given_abs)
        if not project.files:
            continue
        rel_of = {p: os.path.relpath(os.path.abspath(p), root).replace(os.sep, "/") for p in given}
        marks = project.reach()
        for p, rel in rel_of.items():
            if rel in project.files:
                project.summary(rel)
        blocks = project.blocks()
        for p, rel in rel_of.items():
            if rel in project.files:
                plan.views[p] = project.view(rel, marks, blocks)
        touched: set[str] = set()
        for rel, fmarks in marks.items():
            for mark in fmarks.values():
                if mark.files & given_abs:
                    touched.update(mark.files)
            # the file holding a compile whose class is given (SP101 is reported at the compile)
        for rel in project.seeds():
            summ = project.summary(rel)
            for site in summ["sites"] if summ else ():
                ref = project.resolve(site[1], rel)
                if ref is None or project.class_info(ref) is None:
                    continue
                why = project.repeats(ref)
                files = {os.path.abspath(project.files[f]) for f in (why[3] if why else ())} | {os.path.abspath(project.files[ref[0]])}
                if files & given_abs:
                    touched.add(os.path.abspath(project.files[rel]))
        for full in sorted(touched - given_abs):
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel in project.files:
                view = project.view(rel, marks, blocks)
                view.report_only = given_abs
                plan.extra.setdefault(display_path(full), view)
        project.save()
        plan.data.update((p, project.kept[os.path.abspath(p)]) for p in given if os.path.abspath(p) in project.kept)
        plan.parsed += project.parsed
        plan.files += len(project.files)
    return plan

