"""rewriter/'s imports follow the layer order docs/design.md states ("Layers"), with no circle.

Every ``import`` and ``from ... import`` in ``rewriter/`` counts, at module level and inside
functions (a function-level import is still a dependency; only ``if TYPE_CHECKING:`` blocks are
left out). The layer table is read from docs/design.md itself, so the document and the test
cannot drift apart. :data:`KNOWN` would list an exception with its reason (it is empty); an edge
leaves the list when the code is fixed (the test says when an entry is no longer needed).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rewriter"
DESIGN = ROOT / "docs" / "design.md"

#: Known exceptions: (importer, imported) -> why it is there. Empty: every import follows the layers.
#: An entry is a debt with its reason; it never grows without one, and leaves when the code is fixed.
KNOWN: dict[tuple[str, str], str] = {}


def _layers() -> list[list[str]]:
    """The module prefixes of each layer, top first, from the table under "## Layers"."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| layer")]
    layers = [re.findall(r"`(rewriter(?:\.\w+)*)`", row.split("|")[2]) for row in rows]
    assert layers and all(layers), f"docs/design.md's layer table could not be read: {rows}"
    return layers


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(name: str, path: Path, modules: dict[str, Path], typing: bool = False) -> set[str]:
    """The rewriter modules ``name`` imports (``from .x import y`` counts as ``.x.y`` when that is a module);
    ``typing``: also those imported under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing else _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def _graph(typing: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules, typing) for name, path in modules.items()}


def _layer_of(module: str, layers: list[list[str]]) -> int:
    best = max(((len(p), i) for i, prefixes in enumerate(layers) for p in prefixes
                if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module} is in no layer of docs/design.md's table: add it there"
    return best[1]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_every_module_is_in_a_layer_of_the_design_document():
    layers = _layers()
    for module in _modules():
        _layer_of(module, layers)


def test_no_import_climbs_the_layers():
    layers = _layers()
    names = ["cli", "commands", "stages", "engine", "plan/targets/actions", "foundation"]
    upward = [f"{a} ({names[_layer_of(a, layers)]}) imports {b} ({names[_layer_of(b, layers)]})"
              for a, deps in sorted(_graph().items()) for b in sorted(deps)
              if _layer_of(b, layers) < _layer_of(a, layers) and (a, b) not in KNOWN]
    assert not upward, "imports against docs/design.md's layer order:\n" + "\n".join(upward)


def test_no_import_circle():
    graph = {a: {b for b in deps if (a, b) not in KNOWN} for a, deps in _graph().items()}
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_no_circle_through_type_only_imports():
    """An ``if TYPE_CHECKING:`` import never runs, but a circle through one still ties two modules
    together for a reader (and for any tool that resolves annotations): the types a module names
    live below it too."""
    circles = _circles(_graph(typing=True))
    assert not circles, "import circles through TYPE_CHECKING imports:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_known_exceptions_still_exist():
    """An entry of KNOWN whose import is gone is taken off the list (the list only shrinks)."""
    graph = _graph()
    gone = [f"{a} -> {b}" for a, b in KNOWN if b not in graph.get(a, set())]
    assert not gone, "no longer imported, remove from KNOWN: " + ", ".join(gone)


def test_the_walk_sees_function_level_imports_and_circles(tmp_path):
    """The checker itself: a function-level import counts, TYPE_CHECKING does not, and a circle is found."""
    pkg = tmp_path / "rewriter"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import x\nfrom . import a\n")
    (pkg / "c.py").write_text("")
    modules = {"rewriter": pkg / "__init__.py", "rewriter.a": pkg / "a.py", "rewriter.b": pkg / "b.py",
               "rewriter.c": pkg / "c.py"}
    graph = {n: _imports(n, p, modules) for n, p in modules.items()}
    assert graph["rewriter.a"] == {"rewriter.b"} and graph["rewriter.b"] == {"rewriter.a"}
    assert _circles(graph) == [["rewriter.a", "rewriter.b"]]
