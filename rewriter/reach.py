"""What a function in a Python file may call, read with :mod:`ast` without running it: the
functions of a file by qualname and the names a function reaches, transitively within its file.
Shared by diagnose (which helpers a compiled block's code can reach) and the plan's consistency
rules for installed packages (a ``disable`` inside a library ``fullgraph=True`` compile)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=256)
def _functions(path: str) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualname, node) of every function in ``path``, outermost first (parsed once per path)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                out.append((qual, child))
                walk(child, qual + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


@lru_cache(maxsize=256)
def _defs(path: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualname) of every function in ``path``, outermost first."""
    return [(node.lineno, node.end_lineno or node.lineno, qual) for qual, node in _functions(path)]


def names_reached(path: str | Path, qualname: str) -> set[str]:
    """Every name (``f``) and attribute (``self.f``, ``mod.f``) the function ``qualname`` of
    ``path`` refers to, following the functions of the same file it reaches (module-level
    functions by name, methods of its class by ``self.<name>``), transitively. Static and
    over-approximating: what it may call, not what a step did. Empty when the file or function
    cannot be read."""
    funcs = dict(_functions(str(Path(path).resolve())))
    seen: set[str] = set()
    names: set[str] = set()
    todo = [qualname]
    while todo:
        qual = todo.pop()
        if qual in seen or qual not in funcs:
            continue
        seen.add(qual)
        cls = qual.rsplit(".", 1)[0] + "." if "." in qual else ""
        for node in ast.walk(funcs[qual]):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name is None:
                continue
            names.add(name)
            todo += [name, cls + name] if cls else [name]
    return names
