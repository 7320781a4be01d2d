"""Target resolution: ``file.py::Qual.name`` → the function a plan action rewrites.

A target names a module-level function, a class (meaning its own ``forward``), a method, or a
nested class's method. Definitions are collected at module and class scope, looking through
``if``/``else``, ``try``, ``with`` and ``match`` blocks (but not into function bodies, nor into the body of
``if TYPE_CHECKING:``, which never runs); a name defined twice at one scope is ambiguous and
refused, since the rewrite could not say which one runs. A ``@typing.overload`` stub is no
definition: the implementation after it replaces it when the scope runs, so a target names the
implementation and the stubs are left as they are.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider

from .errors import StackpartError, near_names


class _LineTable:
    """The ``def``/``class`` lines of one module, computed on first use: a rewrite with no
    ambiguity never needs them, and finding them costs about as much as parsing the file again
    (measured by benchmarks/rewrite_speed.py)."""

    def __init__(self, module: cst.Module, text: str | None) -> None:
        self.module, self.text = module, text
        self._ast: dict[str, list[int]] | None = None
        self._positions: object | None = None

    def line(self, qualname: str, ordinal: int, node: cst.FunctionDef | cst.ClassDef) -> int:
        """1-based line of the ``ordinal``-th definition of ``qualname`` (``node``)."""
        if self._ast is None and self._positions is None:
            self._ast = _def_lines(self.text) if self.text is not None else None
            if self._ast is None:
                wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
                self._positions = wrapper.resolve(PositionProvider)
        if self._ast is not None:
            known = self._ast.get(qualname, [])
            return known[ordinal] if ordinal < len(known) else 0
        return self._positions[node.name].start.line  # type: ignore[index]


@dataclass
class Definition:
    """A function or class definition found at module or class scope.

    Attributes:
        qualname: dotted name from the module (``Block.forward``).
        kind: ``"function"`` or ``"class"``.
        node: the LibCST node.
        decorators: decorator names as written (``torch.compile``, ``T.compiler.disable``).
        line: (property) 1-based line of the ``def``/``class`` keyword, computed on first use.
    """

    qualname: str
    kind: str
    node: cst.FunctionDef | cst.ClassDef
    decorators: list[str] = field(default_factory=list)
    ordinal: int = 0
    table: _LineTable | None = field(default=None, repr=False, compare=False)

    @property
    def line(self) -> int:
        return self.table.line(self.qualname, self.ordinal, self.node) if self.table else 0


@dataclass
class ResolvedTarget:
    """The function an action rewrites.

    Attributes:
        relpath: file relative to SRC.
        qualname: the function's qualname (a class target becomes ``Class.forward``).
        node: the function's LibCST node in the parsed module.
        decorators: the function's decorator names as written.
    """

    relpath: str
    qualname: str
    node: cst.FunctionDef
    decorators: list[str]


def decorator_name(dec: cst.Decorator) -> str:
    """The dotted name of a decorator, without its call (``@torch.compile(...)`` → ``torch.compile``)."""
    expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
    return get_full_name_for_node(expr) or ""


def _decorator_names(node: cst.FunctionDef | cst.ClassDef) -> list[str]:
    return [decorator_name(dec) for dec in node.decorators]


#: The decorators of a typing overload stub (PEP 484): the ``def`` is for type checkers only, and
#: the implementation defined after it is what the name holds at run time.
OVERLOAD_DECORATORS = frozenset({"overload", "typing.overload", "typing_extensions.overload"})


def is_overload(node: cst.FunctionDef | cst.ClassDef) -> bool:
    """Whether ``node`` is a ``@typing.overload`` stub (never the function that runs)."""
    return isinstance(node, cst.FunctionDef) and any(decorator_name(d) in OVERLOAD_DECORATORS for d in node.decorators)


def _ast_is_overload(node: ast.stmt) -> bool:
    """:func:`is_overload` for CPython's tree (:func:`_def_lines`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for dec in node.decorator_list:
        expr = dec.func if isinstance(dec, ast.Call) else dec
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if isinstance(expr, ast.Name) and ".".join([expr.id, *reversed(parts)]) in OVERLOAD_DECORATORS:
            return True
    return False


def is_type_checking(test: cst.BaseExpression | ast.expr) -> bool:
    """Whether an ``if`` test is ``TYPE_CHECKING`` or ``<module>.TYPE_CHECKING`` (False at run
    time: what its body defines exists only for type checkers)."""
    if isinstance(test, cst.Name):
        return test.value == "TYPE_CHECKING"
    if isinstance(test, cst.Attribute):
        return test.attr.value == "TYPE_CHECKING"
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return False


class SkipTypeChecking:
    """For the transforms that find a target by qualname while visiting: the body of an ``if
    TYPE_CHECKING:`` is not visited (its definitions are no targets, :func:`collect_definitions`),
    so a class defined there and again in ``else:`` is rewritten once, in ``else:``.

    :meth:`skips` is called from ``on_visit``: True for the body to leave out."""

    def skips(self, node: cst.CSTNode) -> bool:
        hidden = self.__dict__.setdefault("_type_checking_bodies", set())
        if isinstance(node, cst.If) and is_type_checking(node.test):
            hidden.add(id(node.body))  # the node is alive for the whole traversal
            return False
        return id(node) in hidden


def _blocks(stmt: cst.CSTNode) -> Sequence[Sequence[cst.CSTNode]]:
    """The statement lists nested in a compound statement at the same scope (never the body of
    ``if TYPE_CHECKING:``, which does not run; its ``else`` does)."""
    out: list[Sequence[cst.CSTNode]] = []
    if isinstance(stmt, (cst.If, cst.With, cst.For, cst.While, cst.Try, cst.TryStar)):
        if not (isinstance(stmt, cst.If) and is_type_checking(stmt.test)):
            out.append(stmt.body.body)
        orelse = getattr(stmt, "orelse", None)
        while orelse is not None:
            out.append(orelse.body.body)
            orelse = getattr(orelse, "orelse", None)
        for handler in getattr(stmt, "handlers", ()):
            out.append(handler.body.body)
        final = getattr(stmt, "finalbody", None)
        if final is not None:
            out.append(final.body.body)
    elif isinstance(stmt, cst.Match):  # as the transforms visit it: a case's def is at this scope
        out.extend(case.body.body for case in stmt.cases if isinstance(case.body, cst.IndentedBlock))
    return out


_AST_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_AST_BLOCKS = (ast.If, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While, ast.Try) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)


_AST_MATCH = getattr(ast, "Match", ())


def _def_lines(text: str) -> dict[str, list[int]] | None:
    """``{qualname: [def line, ...]}`` from CPython's parser, walking the same scopes as
    :func:`collect_definitions`; None when ``text`` does not parse there.

    LibCST's PositionProvider computes every node's position by generating the whole file's
    code; ``ast`` gives the same ``def``/``class`` lines at a fraction of the cost (measured by
    benchmarks/rewrite_speed.py), which matters on large model files.
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    lines: dict[str, list[int]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, _AST_DEFS):
                if _ast_is_overload(stmt):
                    continue  # as collect_definitions: a stub, not a definition
                qual = prefix + stmt.name
                lines.setdefault(qual, []).append(stmt.lineno)
                if isinstance(stmt, ast.ClassDef):
                    walk(stmt.body, qual + ".")
            elif isinstance(stmt, _AST_BLOCKS):
                for name in ("body", "orelse", "finalbody"):
                    if name == "body" and isinstance(stmt, ast.If) and is_type_checking(stmt.test):
                        continue  # as collect_definitions: never runs
                    walk(getattr(stmt, name, []), prefix)
                for handler in getattr(stmt, "handlers", []):
                    walk(handler.body, prefix)
            elif isinstance(stmt, _AST_MATCH):
                for case in stmt.cases:
                    walk(case.body, prefix)

    walk(tree.body, "")
    return lines


def collect_definitions(module: cst.Module, text: str | None = None) -> dict[str, list[Definition]]:
    """All targetable definitions in ``module``, by qualname (a list: more than one = ambiguous);
    ``@typing.overload`` stubs are none.

    ``text``, the module's source, lets the ``def`` lines come from :mod:`ast` (faster);
    without it they come from LibCST's PositionProvider. Either way only when first asked for.
    """
    found: dict[str, list[Definition]] = {}
    table = _LineTable(module, text)

    def walk(body: Sequence[cst.CSTNode], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                if is_overload(stmt):
                    continue
                qual = prefix + stmt.name.value
                kind = "class" if isinstance(stmt, cst.ClassDef) else "function"
                seen = found.setdefault(qual, [])
                seen.append(Definition(qual, kind, stmt, _decorator_names(stmt), len(seen), table))
                if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
                    walk(stmt.body.body, qual + ".")
            else:
                for block in _blocks(stmt):
                    walk(block, prefix)

    walk(module.body, "")
    return found


def _type_checking_line(module: cst.Module, qualname: str) -> int:
    """The line of a definition of ``qualname`` inside an ``if TYPE_CHECKING:`` body (0: none),
    for the error that says why such a target is not one (only on that error's path)."""
    try:
        tree = ast.parse(module.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0
    found = 0

    def walk(body: list[ast.stmt], prefix: str, hidden: bool) -> None:
        nonlocal found
        for stmt in body:
            if found:
                return
            if isinstance(stmt, _AST_DEFS):
                qual = prefix + stmt.name
                if hidden and qual == qualname:
                    found = stmt.lineno
                    return
                if isinstance(stmt, ast.ClassDef):
                    walk(stmt.body, qual + ".", hidden)
            elif isinstance(stmt, _AST_BLOCKS):
                skip = isinstance(stmt, ast.If) and is_type_checking(stmt.test)
                walk(getattr(stmt, "body", []), prefix, hidden or skip)
                for name in ("orelse", "finalbody"):
                    walk(getattr(stmt, name, []), prefix, hidden)
                for handler in getattr(stmt, "handlers", []):
                    walk(handler.body, prefix, hidden)
            elif isinstance(stmt, _AST_MATCH):
                for case in stmt.cases:
                    walk(case.body, prefix, hidden)

    walk(tree.body, "", False)
    return found


def _defined(relpath: str, defs: dict[str, list[Definition]], show: int = 8) -> str:
    """What ``relpath`` does define, for an error with no near name: the names, or the first
    ``show`` of them and how many more."""
    if not defs:
        return f"{relpath} defines no class or function"
    names = sorted(defs)
    more = f" and {len(names) - show} more" if len(names) > show else ""
    return f"{relpath} defines {', '.join(names[:show])}{more}"


def _inherited_forward(hit: Definition, defs: dict[str, list[Definition]]) -> str | None:
    """The class of the same file whose ``forward`` the class ``hit`` inherits, through its bases
    written as plain names (first base first, as the method resolution order starts), or None."""
    seen: set[str] = set()
    todo = [hit]
    while todo:
        node = todo.pop(0).node
        if not isinstance(node, cst.ClassDef):
            continue
        for arg in node.bases:
            name = get_full_name_for_node(arg.value) or ""
            found = defs.get(name)
            if name in seen or not found or len(found) != 1 or found[0].kind != "class":
                continue
            seen.add(name)
            if defs.get(name + ".forward"):
                return name
            todo.append(found[0])
    return None


def _ambiguous(qualname: str, hits: list[Definition], relpath: str) -> StackpartError:
    """The error for a name defined more than once at one scope, with the lines of each."""
    lines = ", ".join(str(d.line) for d in hits)
    return StackpartError(
        f"{qualname!r} is defined {len(hits)} times in {relpath} (lines {lines}); "
        "the rewrite cannot tell which one runs",
        hint="move the definitions apart or target a name defined once",
    )


def resolve(
    module: cst.Module,
    relpath: str,
    qualname: str,
    defs: dict[str, list[Definition]] | None = None,
) -> ResolvedTarget:
    """Resolve ``qualname`` in ``module`` (the file ``relpath``) to the function it names.

    ``defs``: :func:`collect_definitions` of ``module``, when the caller resolves several
    targets in one file (computed here otherwise).

    Raises:
        StackpartError: not found (with near names from the file), defined more than once at
            one scope (with the lines), or a class without a ``forward`` of its own.
    """
    if defs is None:
        defs = collect_definitions(module)
    hits = defs.get(qualname)
    if not hits:
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            outer = defs.get(".".join(parts[:i]))
            if outer and outer[0].kind == "function":
                raise StackpartError(
                    f"no class or function {qualname!r} in {relpath}: {'.'.join(parts[:i])!r} is a "
                    "function, and what its body defines is made anew at every call, out of a plan's reach",
                    hint=f"move {parts[i]!r} to module or class scope to target it",
                )
        line = _type_checking_line(module, qualname)
        if line:
            raise StackpartError(
                f"{qualname!r} is defined only under `if TYPE_CHECKING:` (line {line}) in {relpath}, "
                "which never runs: a rewrite of it would change nothing at run time",
                hint="target the definition the program runs",
            )
        raise StackpartError(
            f"no class or function {qualname!r} in {relpath}",
            hint=near_names(qualname, defs) or _defined(relpath, defs),
        )
    if len(hits) > 1:
        raise _ambiguous(qualname, hits, relpath)
    hit = hits[0]
    if hit.kind == "class":
        forward = defs.get(qualname + ".forward")
        if not forward:
            base = _inherited_forward(hit, defs)
            raise StackpartError(
                f"class {qualname!r} in {relpath} defines no forward of its own",
                hint=(f"it inherits forward from {base}: target {relpath}::{base}.forward, which compiles "
                      "it for every class that inherits it" if base
                      else "target the class that defines forward, or a method by name"),
            )
        if len(forward) > 1:
            raise _ambiguous(qualname + ".forward", forward, relpath)
        hit = forward[0]
    assert isinstance(hit.node, cst.FunctionDef)
    return ResolvedTarget(
        relpath=relpath,
        qualname=hit.qualname,
        node=hit.node,
        decorators=hit.decorators,
    )
