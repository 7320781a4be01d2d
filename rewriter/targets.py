"""Target resolution: ``file.py::Qual.name`` → the function a plan action rewrites.

A target names a module-level function, a class (meaning its own ``forward``), a method, or a
nested class's method. Definitions are collected at module and class scope, looking through
``if``/``else``, ``try`` and ``with`` blocks (but not into function bodies); a name defined twice
at one scope is ambiguous and refused, since the rewrite could not say which one runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider

from .errors import StackpartError, near_names


@dataclass
class Definition:
    """A function or class definition found at module or class scope.

    Attributes:
        qualname: dotted name from the module (``Block.forward``).
        kind: ``"function"`` or ``"class"``.
        line: 1-based line of the ``def``/``class`` keyword.
        node: the LibCST node.
        decorators: decorator names as written (``torch.compile``, ``T.compiler.disable``).
    """

    qualname: str
    kind: str
    line: int
    node: cst.FunctionDef | cst.ClassDef
    decorators: list[str] = field(default_factory=list)


@dataclass
class ResolvedTarget:
    """The function an action rewrites.

    Attributes:
        relpath: file relative to SRC.
        qualname: the function's qualname (a class target becomes ``Class.forward``).
        line: the function's 1-based line.
        node: the function's LibCST node in the parsed module.
        decorators: the function's decorator names as written.
        via_class: the class name when the target named a class.
        params: the function's parameter names, in order.
    """

    relpath: str
    qualname: str
    line: int
    node: cst.FunctionDef
    decorators: list[str]
    via_class: str | None = None
    params: list[str] = field(default_factory=list)


def _decorator_names(node: cst.FunctionDef | cst.ClassDef) -> list[str]:
    names = []
    for dec in node.decorators:
        expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
        names.append(get_full_name_for_node(expr) or "")
    return names


def _blocks(stmt: cst.CSTNode) -> Sequence[Sequence[cst.CSTNode]]:
    """The statement lists nested in a compound statement at the same scope."""
    out: list[Sequence[cst.CSTNode]] = []
    if isinstance(stmt, (cst.If, cst.With, cst.For, cst.While, cst.Try, cst.TryStar)):
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
    return out


def collect_definitions(module: cst.Module) -> dict[str, list[Definition]]:
    """All targetable definitions in ``module``, by qualname (a list: more than one = ambiguous)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    found: dict[str, list[Definition]] = {}

    def walk(body: Sequence[cst.CSTNode], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                qual = prefix + stmt.name.value
                kind = "class" if isinstance(stmt, cst.ClassDef) else "function"
                line = positions[stmt.name].start.line
                found.setdefault(qual, []).append(
                    Definition(qual, kind, line, stmt, _decorator_names(stmt))
                )
                if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
                    walk(stmt.body.body, qual + ".")
            else:
                for block in _blocks(stmt):
                    walk(block, prefix)

    walk(module.body, "")
    return found


def _params(node: cst.FunctionDef) -> list[str]:
    p = node.params
    names = [x.name.value for x in (*p.posonly_params, *p.params)]
    if isinstance(p.star_arg, cst.Param):
        names.append(p.star_arg.name.value)
    names += [x.name.value for x in p.kwonly_params]
    if p.star_kwarg is not None:
        names.append(p.star_kwarg.name.value)
    return names


def resolve(module: cst.Module, relpath: str, qualname: str) -> ResolvedTarget:
    """Resolve ``qualname`` in ``module`` (the file ``relpath``) to the function it names.

    Raises:
        StackpartError: not found (with near names from the file), defined more than once at
            one scope (with the lines), or a class without a ``forward`` of its own.
    """
    defs = collect_definitions(module)
    hits = defs.get(qualname)
    if not hits:
        raise StackpartError(
            f"no class or function {qualname!r} in {relpath}",
            hint=near_names(qualname, defs) or f"{relpath} defines {len(defs)} targetable names",
        )
    if len(hits) > 1:
        lines = ", ".join(str(d.line) for d in hits)
        raise StackpartError(
            f"{qualname!r} is defined {len(hits)} times in {relpath} (lines {lines}); "
            "the rewrite cannot tell which one runs",
            hint="move the definitions apart or target a name defined once",
        )
    hit = hits[0]
    via_class = None
    if hit.kind == "class":
        forward = defs.get(qualname + ".forward")
        if not forward:
            raise StackpartError(
                f"class {qualname!r} in {relpath} defines no forward of its own",
                hint="target the class that defines forward, or a method by name",
            )
        if len(forward) > 1:
            raise StackpartError(f"{qualname}.forward is defined {len(forward)} times in {relpath}")
        via_class, hit = qualname, forward[0]
    assert isinstance(hit.node, cst.FunctionDef)
    return ResolvedTarget(
        relpath=relpath,
        qualname=hit.qualname,
        line=hit.line,
        node=hit.node,
        decorators=hit.decorators,
        via_class=via_class,
        params=_params(hit.node),
    )
