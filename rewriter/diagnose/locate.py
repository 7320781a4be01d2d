"""From running objects and stack frames to source: ``file.py::Qual`` targets and file:line.

Classes and functions are mapped to files with :func:`rewriter.definition.source_file`
(:mod:`inspect`) and ``__qualname__``; a file:line is mapped to its enclosing function with :mod:`ast`. Paths are made
relative to SRC; anything outside SRC (torch, transformers) is not a target.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
import re
from pathlib import Path
from typing import Any

from ..definition import relpath, source_file
from ..reach import _defs, _functions, names_reached  # noqa: F401 - re-exported: the ladder's readers

#: torch.profiler stack entries look like ``/path/model.py(42): forward``.
_PROFILER_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
#: Dynamo's user stack: ``File "/path/model.py", line 42, in forward``.
_TRACEBACK_FRAME = re.compile(r'File "(?P<file>[^"]+\.py)", line (?P<line>\d+), in (?P<func>[\w<>]+)')


def target_of(obj: Any, src: Path) -> str | None:
    """The plan target ``file.py::Qual`` of a class, function or method defined under ``src``.

    ``<locals>`` qualnames (classes defined inside functions) and objects outside SRC give None.
    """
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        obj = type(obj)
    file = source_file(obj)
    if file is None:
        return None
    rel = relpath(src, file)
    qual = getattr(obj, "__qualname__", None)
    if rel is None or not qual or "<locals>" in qual:
        return None
    return f"{rel}::{qual}"


def model_function_target(harness: Any) -> str | None:
    """``file.py::qualname`` under SRC where the harness's model function is defined: the harness
    that imports it (``from train import build_model``) names ``train.py::build_model``, one that
    defines it names ``harness.py::build_model``. None where ``harness`` (a
    :class:`rewriter.harness.LoadedHarness`, or None) has no model function or it is not defined in
    a file under SRC (:func:`target_of`)."""
    fn = getattr(harness, "build_model", None)
    return target_of(fn, Path(harness.src)) if fn is not None and callable(fn) else None


@lru_cache(maxsize=512)
def _importable(module: str) -> bool:
    """Whether ``module`` is found on ``sys.path`` by its own name (without running it)."""
    from ..library_targets import module_file

    return module_file(module)[1]


def library_target_of(obj: Any) -> str | None:
    """The plan target ``package.module:Qual`` of an installed class or function (one a plan
    applies from its ``site``, docs/design.md "Library models"), or None: ``<locals>`` qualnames,
    ``__main__``, and torch's own modules (``torch.nn.Linear`` is not a block to plan).
    """
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        obj = type(obj)
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qual or "<locals>" in qual or module == "__main__" or module.split(".")[0] in ("torch", "builtins"):
        return None
    if not all(part.isidentifier() for part in module.split(".") + qual.split(".")):
        return None
    if not _importable(module):  # the harness's private module name, a module built at run time
        return None
    return f"{module}:{qual}"


def untargetable(obj: Any) -> str:
    """Why ``obj`` (a class or function, not under SRC) has no plan target, as the words after
    "is": the reason :func:`library_target_of` gave None (torch's own, defined in a function,
    in ``__main__``, or a module that does not import by its name)."""
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        obj = type(obj)
    module, qual = getattr(obj, "__module__", None) or "?", getattr(obj, "__qualname__", None) or "?"
    where = f"{module}.{qual}"
    if module.split(".")[0] in ("torch", "builtins"):
        return f"{where}, torch's own (a torch module is not a block to plan)"
    if "<locals>" in qual:
        return f"{where}, defined inside a function (no import path names it)"
    if module == "__main__":
        return f"{where}, defined in __main__ (no import path names it)"
    return f"{where}, neither under SRC nor importable by path"


def unit_target(obj: Any, src: Path) -> str | None:
    """:func:`target_of` (under SRC), else :func:`library_target_of` (an installed package)."""
    return target_of(obj, src) or library_target_of(obj)


def function_at(path: str | Path, line: int) -> str | None:
    """Qualname of the innermost function containing ``line`` of ``path`` (None at module level)."""
    best = None
    for first, last, qual in _defs(str(Path(path).resolve())):
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, qual)
    return best[1] if best else None


def frames_from_profiler(stack: list[str]) -> list[tuple[str, int, str]]:
    """Parse torch.profiler ``with_stack`` entries into (file, line, function), innermost first."""
    out = []
    for entry in stack or []:
        m = _PROFILER_FRAME.match(entry.strip())
        if m:
            out.append((m.group("file"), int(m.group("line")), m.group("func")))
    return out


def frames_from_text(text: str) -> list[tuple[str, int, str]]:
    """Traceback-style frames in ``text`` (Dynamo's user stack), in the order written."""
    return [(m.group("file"), int(m.group("line")), m.group("func")) for m in _TRACEBACK_FRAME.finditer(text)]


def callers_in_src(frames: list[tuple[str, int, str]], src: Path) -> list[str]:
    """Qualnames of the frames under ``src`` (``frames`` innermost first), outermost first: the
    chain of the user's functions that led to the innermost one."""
    out = []
    for file, line, func in reversed(frames):
        if relpath(src, file) is not None:
            out.append(function_at(file, line) or func)
    return out


def first_in_src(frames: list[tuple[str, int, str]], src: Path) -> tuple[str, int, str] | None:
    """The first frame whose file lies under ``src``, as (relative file, line, qualname)."""
    for file, line, func in frames:
        rel = relpath(src, file)
        if rel is not None:
            return rel, line, function_at(file, line) or func
    return None


def _modules_by_file() -> dict[str, str]:
    """Real path of each imported module's file -> the module's name (one walk of ``sys.modules``)."""
    import os
    import sys

    out: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            out.setdefault(os.path.realpath(path), name)
    return out


def first_in_library(frames: list[tuple[str, int, str]], src: Path) -> tuple[str, int, str, str, list[str]] | None:
    """The innermost frame (``frames`` innermost first) in an installed package's function that a
    plan can name from its site: ``(file as the package holds it, line, qualname, target
    "package.module:Qual")``, or None. Frames under ``src`` end the search (that frame is the
    user's, :func:`first_in_src`); torch's own files are skipped (torch internals are not what a
    plan keeps eager); the module is found among the imported ones by its file, the function by
    :mod:`ast` (:func:`function_at`), the target checked as :func:`library_target_of` checks one.
    The fifth item is the chain of qualnames from the outermost frame to that one (what called it:
    whether a compiled unit's code leads there)."""
    import os

    by_file: dict[str, str] | None = None
    for k, (file, line, _func) in enumerate(frames):
        if relpath(src, file) is not None:
            return None
        if by_file is None:
            by_file = _modules_by_file()
        module = by_file.get(os.path.realpath(file))
        if module is None or module.split(".")[0] in ("torch", "builtins", "functorch") or not _importable(module):
            continue
        qual = function_at(file, line)
        if not qual or "<locals>" in qual or not all(part.isidentifier() for part in module.split(".") + qual.split(".")):
            continue
        shown = "/".join(module.split(".")) + ("/__init__.py" if Path(file).name == "__init__.py" else ".py")
        chain = [function_at(f, n) or name for f, n, name in reversed(frames[k:])]
        return shown, line, qual, f"{module}:{qual}", chain
    return None
