"""Where a class or function is defined: its source file, its first line, and that file relative
to SRC. Read with :mod:`inspect`, falling back to the code objects of a class's methods and to
:mod:`ast` for a class whose module is not in ``sys.modules`` (the harness, imported under a
private name, :func:`rewriter.harness.load_harness`), which :mod:`inspect` cannot place.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any


def relpath(src: Path | str, file: str | Path) -> str | None:
    """``file`` relative to ``src`` (posix, both resolved), or None when it lies outside ``src``
    or cannot be resolved."""
    try:
        return Path(file).resolve().relative_to(Path(src).resolve()).as_posix()
    except (ValueError, OSError):
        return None


def source_file(obj: Any) -> str | None:
    """The file defining a class or function, or None (a C extension, code built by ``exec``).

    :func:`inspect.getsourcefile` first; a class of a module no longer in ``sys.modules`` has no
    ``__file__`` to ask, so its methods' code objects (``co_filename``) say where it was defined.
    """
    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        pass
    if inspect.isclass(obj):
        for value in vars(obj).values():
            code = getattr(inspect.unwrap(getattr(value, "__func__", value)), "__code__", None) if callable(value) or hasattr(value, "__func__") else None
            if code is not None and code.co_filename.endswith(".py"):
                return code.co_filename
    return None


def source_line(obj: Any, file: str | None = None) -> int | None:
    """The first line (1-based) of ``obj``'s definition: a decorated function's or class's first
    decorator line, as :func:`inspect.getsourcelines` gives it; None where it cannot be found.

    A class that :mod:`inspect` cannot place (its module not in ``sys.modules``) is looked up by
    ``__qualname__`` among the class statements of ``file`` (else :func:`source_file`), parsed
    with :mod:`ast`; a class defined inside a function (``<locals>``) is not looked up.
    """
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        pass
    if not inspect.isclass(obj):
        return None
    file = file or source_file(obj)
    qual = getattr(obj, "__qualname__", "")
    if file is None or not qual or "<locals>" in qual:
        return None
    return _class_lines(file).get(qual)


def _class_lines(file: str) -> dict[str, int]:
    """Qualname -> first line (its first decorator's where decorated) of every class statement of
    ``file`` outside functions; empty where the file cannot be read or parsed."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                qual = prefix + child.name
                out.setdefault(qual, child.decorator_list[0].lineno if child.decorator_list else child.lineno)
                walk(child, qual + ".")
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, prefix)

    walk(tree, "")
    return out


def defined_at(obj: Any, src: Path | None = None) -> tuple[str, int | None] | None:
    """``(file, line)`` where ``obj``, a class or function, is defined: the file relative to
    ``src`` (posix) where it lies under it, else as found; the line from :func:`source_line`
    (None where only the file is known). None where no source file is found."""
    file = source_file(obj)
    if file is None:
        return None
    shown = (relpath(src, file) if src is not None else None) or file
    return shown, source_line(obj, file)
