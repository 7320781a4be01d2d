"""What every action transform shares: finding the target function by qualname while visiting,
the module's own name for ``torch``, decorator matching, and statement insertion.

Each action is one :class:`TargetedCommand` subclass (a LibCST ``VisitorBasedCodemodCommand``):
it overrides :meth:`TargetedCommand.rewrite` and gets the target ``FunctionDef`` once. Imports
are requested through LibCST's ``AddImportsVisitor``, which the codemod framework runs after the
transform, so no action splices import text by hand.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.codemod import Codemod, CodemodContext, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor
from libcst.helpers import get_full_name_for_node, parse_template_statement
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from pathlib import PurePosixPath

from ..plan.schema import _Action
from ..targets import SkipTypeChecking, decorator_name, is_overload
from ..vendor import VendorSite


def _import_lines(module: cst.Module) -> Iterator[cst.SimpleStatementLine]:
    """The module's top-level simple statement lines, those inside a top-level ``try`` included
    (``try: import torch`` / ``except ImportError: torch = None`` binds the module's name as a
    plain import does), in source order."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield stmt
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            blocks = [stmt.body, *(h.body for h in stmt.handlers)]
            blocks += [part.body for part in (stmt.orelse, stmt.finalbody) if part is not None]
            for block in blocks:
                if isinstance(block, cst.IndentedBlock):
                    yield from (s for s in block.body if isinstance(s, cst.SimpleStatementLine))


def torch_alias(module: cst.Module) -> str | None:
    """The name ``torch`` is bound to at module level (``import torch as T`` → ``"T"``), or None.

    ``import torch.nn`` binds ``torch``; ``import torch.nn as nn`` does not. An import inside a
    top-level ``try`` counts (:func:`_import_lines`).
    """
    for stmt in _import_lines(module):
        for small in stmt.body:
            if not isinstance(small, cst.Import):
                continue
            for alias in small.names:
                name = get_full_name_for_node(alias.name) or ""
                if alias.asname is None and (name == "torch" or name.startswith("torch.")):
                    return "torch"
                if alias.asname is not None and name == "torch":
                    return alias.asname.name.value  # type: ignore[union-attr]
    return None


def imported_names(module: cst.Module) -> dict[str, str]:
    """What each module-level import binds: local name → dotted name it stands for.

    ``import torch as T`` → ``{"T": "torch"}``; ``import torch.nn`` → ``{"torch": "torch"}``;
    ``from torch.compiler import disable as off`` → ``{"off": "torch.compiler.disable"}``.
    Relative imports are left out (they never name torch).
    """
    out: dict[str, str] = {}
    for stmt in _import_lines(module):
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = get_full_name_for_node(alias.name) or ""
                    if alias.asname is not None:
                        out[get_full_name_for_node(alias.asname.name) or name] = name
                    else:
                        head = name.split(".")[0]
                        out[head] = head
            elif (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and small.module is not None
                and not isinstance(small.names, cst.ImportStar)
            ):
                base = get_full_name_for_node(small.module) or ""
                for alias in small.names:
                    name = get_full_name_for_node(alias.name) or ""
                    local = get_full_name_for_node(alias.asname.name) if alias.asname else name
                    out[local or name] = f"{base}.{name}"
    return out


class _TopLevel:
    """Where a module's top level defines and binds names, by index of its top-level statements:
    ``defines[name]``, the first statement that holds ``def``/``class name`` (also inside a
    top-level ``if``/``try``/``with``); ``binds[name]``, the first that binds ``name`` by an import
    or an assignment there. Built once per module (:func:`top_level`)."""

    def __init__(self, module: cst.Module) -> None:
        self.defines: dict[str, int] = {}
        self.binds: dict[str, int] = {}
        for i, stmt in enumerate(module.body):
            for node in _top_level_nodes(stmt):
                if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                    self.defines.setdefault(node.name.value, i)
                for name in _bound_names(node):
                    self.binds.setdefault(name, i)


def _bound_names(node: cst.CSTNode) -> list[str]:
    """The names one node that :class:`_ImportTime` collects binds in its scope."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return [node.name.value]
    out = []
    if isinstance(node, cst.Import):
        for alias in node.names:
            name = alias.asname.name if alias.asname else None
            out.append(name.value if isinstance(name, cst.Name) else (get_full_name_for_node(alias.name) or "").split(".")[0])
    elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
        for alias in node.names:
            name = alias.asname.name if alias.asname else alias.name
            if isinstance(name, cst.Name):
                out.append(name.value)
    elif isinstance(node, (cst.Assign, cst.AnnAssign)):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        out += [target.value for target in targets if isinstance(target, cst.Name)]
    return out


def class_scope_binds(module: cst.Module, qualname: str, scratch: dict[str, object]) -> set[str]:
    """The names the body of the class that holds ``qualname`` (a method) binds at its own level:
    what a decorator on the method reads there instead of the module's name (a class attribute
    ``torch = torch.float32`` hides the module ``torch`` from ``@torch.compile``). Empty for a
    function outside a class. The module's classes are found once per module (``scratch``)."""
    from ..targets import collect_definitions

    owner, dot, _ = qualname.rpartition(".")
    if not dot:
        return set()
    cached = scratch.get("stackpart.definitions")
    if not (isinstance(cached, tuple) and cached[0] is module):
        cached = (module, collect_definitions(module))
        scratch["stackpart.definitions"] = cached
    hits = cached[1].get(owner) or []
    if len(hits) != 1 or not isinstance(hits[0].node, cst.ClassDef) or not isinstance(hits[0].node.body, cst.IndentedBlock):
        return set()
    return {name for stmt in hits[0].node.body.body for node in _top_level_nodes(stmt) for name in _bound_names(node)}


class _ImportTime(cst.CSTVisitor):
    """Collects the definitions, imports and assignments a top-level statement runs at import
    time (inside a top-level ``if``/``try``/``with`` too; not inside ``def``, ``class`` or
    ``lambda`` bodies)."""

    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def _take(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return False

    visit_FunctionDef = visit_ClassDef = visit_Import = visit_ImportFrom = _take  # type: ignore[assignment]
    visit_Assign = visit_AnnAssign = _take  # type: ignore[assignment]

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _top_level_nodes(stmt: cst.CSTNode) -> list[cst.CSTNode]:
    """What :class:`_ImportTime` finds in one top-level statement."""
    visitor = _ImportTime()
    stmt.visit(visitor)
    return visitor.nodes


def top_level(module: cst.Module, scratch: dict[str, object]) -> _TopLevel:
    """:class:`_TopLevel` of ``module``, kept in ``scratch`` (the codemod context's, which the
    commands of one batched pass share: one walk of the module for all of them)."""
    cached = scratch.get("stackpart.top_level")
    if isinstance(cached, tuple) and cached[0] is module:
        return cached[1]
    facts = _TopLevel(module)
    scratch["stackpart.top_level"] = (module, facts)
    return facts


def canonical(name: str, imports: dict[str, str]) -> str:
    """A decorator's dotted name spelled through the module's imports
    (``T.compile`` → ``torch.compile``; ``off`` → ``torch.compiler.disable``)."""
    head, dot, rest = name.partition(".")
    if head in imports:
        return imports[head] + dot + rest
    return name


def find_decorator(node: cst.FunctionDef, names: set[str], imports: dict[str, str]) -> cst.Decorator | None:
    """The first of ``node``'s decorators whose canonical name (``imports`` from
    :func:`imported_names`) is in ``names``, else None."""
    return next((d for d in node.decorators if canonical(decorator_name(d), imports) in names), None)


def has_decorator(node: cst.FunctionDef, names: set[str], imports: dict[str, str]) -> bool:
    """Whether ``node`` carries any decorator whose canonical name is in ``names``
    (:func:`find_decorator`)."""
    return find_decorator(node, names, imports) is not None


def comments_within(node: cst.CSTNode) -> list[cst.Comment]:
    """Every comment under ``node`` in source order, less those of its own ``leading_lines`` (the
    lines above it, which a replacement keeps as they are): what a rewrite that replaces ``node``
    must carry over so that no comment of the user's is lost."""
    above = {id(e.comment) for e in getattr(node, "leading_lines", ()) if e.comment is not None}

    class _Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.Comment] = []

        def visit_Comment(self, comment: cst.Comment) -> None:
            if id(comment) not in above:
                self.found.append(comment)

    seen = _Collect()
    node.visit(seen)
    return seen.found


#: black's default line length: a generated decorator longer than this is split as black splits it.
LINE_LENGTH = 88


def make_decorator(expr: str, comment: str | None = None, indent: int = 0) -> cst.Decorator:
    """A decorator from an expression built of validated identifiers and literals, with an
    optional ``# comment`` on its own line just above it (a trailing comment would move off the
    decorator's first line when a formatter splits a long decorator). Where ``@expr`` at
    ``indent`` columns is longer than :data:`LINE_LENGTH`, its call's arguments go one a line with
    a trailing comma, as black writes it (the generated line only: the user's lines are never
    reformatted)."""
    node = cst.parse_expression(expr)
    if isinstance(node, cst.Call) and node.args and indent + 1 + len(expr) > LINE_LENGTH:
        node = _exploded(node)
    if comment is None:
        return cst.Decorator(decorator=node)
    return cst.Decorator(
        decorator=node,
        leading_lines=[cst.EmptyLine(indent=True, comment=cst.Comment(f"# {comment}"))],
    )


def _exploded(call: cst.Call) -> cst.Call:
    """``call`` with one argument a line, each indented four spaces past the block's indentation
    and ending in a comma, the closing parenthesis back at the block's indentation (black's
    "magic trailing comma" form)."""
    def line(last: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True,
                                           last_line=cst.SimpleWhitespace(last))

    args = [a.with_changes(comma=cst.Comma(whitespace_after=line("    " if i < len(call.args) - 1 else "")))
            for i, a in enumerate(call.args)]
    return call.with_changes(args=args, whitespace_before_args=line("    "))


def py_literal(value: object) -> str:
    """A Python literal for a plan value (bool, int, float, None, str, list of those).

    Strings are written double-quoted with JSON's escapes (a valid subset of Python's: newlines,
    tabs and control characters become ``\\n``-style escapes); non-finite floats become
    ``float("inf")``/``float("-inf")``/``float("nan")``, since ``repr`` gives bare names.
    """
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value!r}")'
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(py_literal(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def call_args(kwargs: dict[str, object]) -> str:
    """``k=v, ...`` for a call, literals rendered with :func:`py_literal`."""
    return ", ".join(f"{k}={py_literal(v)}" for k, v in kwargs.items())


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _split_docstring_line(body: list[cst.BaseStatement]) -> None:
    """Split a first line that holds the docstring and more statements (``'''Doc.'''; return x``)
    into the docstring's line and one for the rest, in place: a statement inserted after the
    docstring goes between them, and one inserted above the line would leave the function with
    no docstring (``f.__doc__`` None)."""
    first = body[0] if body else None
    if not (isinstance(first, cst.SimpleStatementLine) and len(first.body) > 1):
        return
    head = first.body[0]
    if not _is_docstring(first.with_changes(body=[head])):
        return
    doc = first.with_changes(body=[head.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
                             trailing_whitespace=cst.TrailingWhitespace())
    body[0:1] = [doc, first.with_changes(body=first.body[1:], leading_lines=())]


def _norm(code: str) -> str:
    return re.sub(r"\s+", "", code)


class StatementInsertError(Exception):
    """The function body cannot take a statement (a one-line ``def f(): ...`` body)."""


def local_binding(func: cst.FunctionDef, name: str) -> str | None:
    """How ``func`` binds ``name`` in its own scope: ``"param"``, ``"other"`` (an import, an
    assignment, a ``for`` or ``with`` target, a nested ``def`` ... anywhere in its body), or None
    where ``name`` is not local to it (a read of it then finds the module's binding).

    A name bound anywhere in a function is local in all of it (Python's execution model,
    "Resolution of names"): ``import torch.nn.functional`` on its last line makes a
    ``torch._dynamo.mark_dynamic(...)`` on its first raise ``UnboundLocalError``. Read with
    LibCST's scope analysis (``ScopeProvider``) over the function alone; ``global`` and
    ``nonlocal`` declarations are honoured.
    """
    from libcst.metadata import ScopeProvider

    if not isinstance(func.body, cst.IndentedBlock) or not func.body.body:
        return None
    finder = _MayBind(name)
    func.visit(finder)
    if not finder.found:  # the common case, without the scope analysis (about 5 ms a function)
        return None
    try:
        scopes = MetadataWrapper(cst.Module(body=[func]), unsafe_skip_copy=True).resolve(ScopeProvider)
        scope = scopes[func.body.body[0]]
    except Exception:  # noqa: BLE001 - an analysis LibCST cannot do: read as the module's name
        return None
    if scope is None:
        return None
    found = [a for a in scope.assignments[name] if a.scope is scope]
    if not found:
        return None
    return "param" if any(isinstance(getattr(a, "node", None), cst.Param) for a in found) else "other"


class _MayBind(cst.CSTVisitor):
    """Whether a function has any form that can bind ``name`` (an import, an assignment, loop,
    ``with``/``except`` target, walrus, a nested ``def``/``class``, a parameter, a ``global``):
    a quick over-inclusive look before :func:`local_binding`'s scope analysis."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False

    def _names(self, node: cst.CSTNode | None) -> None:
        if node is not None and not self.found:
            self.found = bool(m.findall(node, m.Name(self.name)))

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            if alias.asname is None and (get_full_name_for_node(alias.name) or "").split(".")[0] == self.name:
                self.found = True
        return True

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if isinstance(node.names, cst.ImportStar):
            self.found = True
        elif any(a.asname is None and m.matches(a.name, m.Name(self.name)) for a in node.names):
            self.found = True
        return True

    def visit_AsName(self, node: cst.AsName) -> None:
        self._names(node.name)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._names(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._names(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._names(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._names(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._names(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._names(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        self._names(node.name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._names(node.name)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._names(node.name)

    def visit_Global(self, node: cst.Global) -> None:
        self.found = True

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.found = True

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        self._names(node.name)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        self._names(node.name)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        self._names(node.rest)

    def visit_Del(self, node: cst.Del) -> None:
        self._names(node.target)


def _binds(module: cst.Module, stmt: cst.BaseStatement, binds: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``binds`` (name → import statement) whose import ``stmt`` is."""
    text = _norm(module.code_for_node(stmt))
    return {name: code for name, code in binds.items() if _norm(code) == text}


def insert_statement(
    module: cst.Module,
    func: cst.FunctionDef,
    code: str,
    after: int | None = None,
    replaces: Callable[[cst.BaseStatement], bool] | None = None,
    binds: Mapping[str, str] | None = None,
) -> cst.FunctionDef:
    """Insert one statement into ``func``'s top-level body, unless an equal one is already there.

    Args:
        module: the module (for rendering existing statements when comparing).
        func: the function to change.
        code: the statement's source (one simple or compound statement, built from validated
            names and literals).
        after: index of the top-level statement to insert after; None means at the top,
            after the docstring.
        replaces: a statement it matches is another form of this one: it is replaced in place
            (keeping its leading comments) instead of getting a second, contradicting one.
        binds: the module-level names ``code`` reads, each with the import that binds it
            (``{"torch": "import torch"}``). Where ``func`` binds such a name itself
            (:func:`local_binding`: a later ``import torch.nn.functional``), the module's binding
            is not seen in the function, so the import goes right before the statement (unless
            one already comes before it at the top level).

    Raises:
        StatementInsertError: the body is a one-line suite, or a parameter of ``func`` has the
            name of a module ``code`` reads.
    """
    if not isinstance(func.body, cst.IndentedBlock):
        raise StatementInsertError(f"{func.name.value} has a one-line body")
    body = list(func.body.body)
    present = next((i for i, s in enumerate(body) if _norm(module.code_for_node(s)) == _norm(code)), None)
    own = {}
    for name, imp in (binds or {}).items():
        kind = local_binding(func, name)
        if kind == "param":
            raise StatementInsertError(
                f"{func.name.value} has a parameter named {name!r}, which the inserted `{code.strip()}` would read "
                f"instead of the module {name}")
        if kind is not None:
            own[name] = imp
    if present is not None:
        return _with_imports(module, func, body, present, own)
    stmt = parse_template_statement(code)
    old = next((i for i, s in enumerate(body) if replaces is not None and replaces(s)), None)
    if old is not None:
        body[old] = stmt.with_changes(leading_lines=body[old].leading_lines)
        return _with_imports(module, func, body, old, own)
    if after is None:
        _split_docstring_line(body)
        index = 1 if body and _is_docstring(body[0]) else 0
    else:
        index = after + 1
    index = max(index, _below_declarations(func, body, set(binds or ()), code))
    # another statement's own import already stands here (dynamo_config's lines, each inserted
    # at the top): this one goes after it rather than before it
    while own and index < len(body) and _binds(module, body[index], own):
        index += 1
    body.insert(index, stmt)
    return _with_imports(module, func, body, index, own)


def _below_declarations(func: cst.FunctionDef, body: list[cst.BaseStatement], names: set[str], code: str) -> int:
    """The first index of ``body`` below the ``global``/``nonlocal`` declarations of ``names``
    (0 where there is none).

    A function that reads a name above its ``global`` (``nonlocal``) declaration of it is refused
    by CPython's compiler ("name 'torch' is used prior to global declaration"; ``ast.parse``
    accepts it; https://docs.python.org/3/reference/simple_stmts.html#the-global-statement), so a
    statement reading ``torch`` goes below ``global torch``.

    Raises:
        StatementInsertError: a declaration of one of ``names`` stands below a statement that is
            neither the docstring nor a declaration (or inside a block): below it, the inserted
            statement would run after code it must precede.
    """
    def declares(node: cst.CSTNode) -> bool:
        return any(item.name.value in names for decl in m.findall(node, m.Global() | m.Nonlocal())
                   for item in decl.names)  # type: ignore[attr-defined]

    last = -1
    for i, stmt in enumerate(body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or not declares(stmt):
            continue  # a nested def's declarations are its own
        leading = all((j == 0 and _is_docstring(s)) or m.matches(s, m.SimpleStatementLine(body=[m.AtLeastN(
            m.Global() | m.Nonlocal(), n=1)])) for j, s in enumerate(body[: i + 1]))
        if not leading:
            name = next(iter(sorted(names)))
            raise StatementInsertError(
                f"{func.name.value} declares `global {name}` (or nonlocal) below other statements, and the inserted "
                f"`{code.strip()}` must read {name} above them; move the declaration to the top of {func.name.value}")
        last = i
    return last + 1


def _with_imports(
    module: cst.Module, func: cst.FunctionDef, body: list[cst.BaseStatement], index: int, own: Mapping[str, str]
) -> cst.FunctionDef:
    """``func`` with ``body``, where each import in ``own`` not already among the top-level
    statements before ``body[index]`` is inserted right before it."""
    have: dict[str, str] = {}
    for stmt in body[:index]:
        have.update(_binds(module, stmt, own))
    missing = [parse_template_statement(code) for name, code in own.items() if name not in have]
    if missing:
        first = missing[0].with_changes(leading_lines=body[index].leading_lines)
        body[index] = body[index].with_changes(leading_lines=())
        body[index:index] = [first, *missing[1:]]
    return func.with_changes(body=func.body.with_changes(body=body))


class NoCopyMetadata:
    """Mixin for a LibCST ``Codemod``: resolve metadata on the tree as given, without the
    deep copy LibCST makes by default."""

    @contextmanager
    def _handle_metadata_reference(self, module: cst.Module) -> Iterator[cst.Module]:  # type: ignore[override]
        # LibCST's Codemod wraps the tree in MetadataWrapper(module), which deep-copies it so
        # that metadata keyed by node identity cannot collide across wrappers. That is a full-tree
        # clone per action per file, most of a rewrite's time on a large file (measured:
        # benchmarks/rewrite_speed.py); each of our wrappers is used once, so skip the copy.
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        with self.resolve(wrapper):
            old = self.context.wrapper
            self.context = replace(self.context, wrapper=wrapper)
            try:
                yield wrapper.module
            finally:
                self.context = replace(self.context, wrapper=old)


class TargetedCommand(SkipTypeChecking, NoCopyMetadata, VisitorBasedCodemodCommand):
    """A codemod that rewrites exactly one function, named by its qualname (``Block.forward``).

    Subclasses set ``DESCRIPTION`` and implement :meth:`rewrite`. ``self.torch`` is the module's
    name for torch (an ``import torch`` is requested when the module has none).
    """

    DESCRIPTION: ClassVar[str] = "rewrite one targeted function"
    #: Whether the visitor descends into the target's body (an action that edits calls inside
    #: it does); actions that only decorate it or insert into its top level see the node in
    #: :meth:`rewrite` either way, and skipping the body keeps large functions cheap.
    VISIT_TARGET_BODY: ClassVar[bool] = True

    def __init__(
        self, context: CodemodContext, action: _Action, qualname: str, site: VendorSite,
        known: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(context)
        self._setup(action, qualname, site, known)

    @classmethod
    def for_batch(
        cls, context: CodemodContext, action: _Action, qualname: str, site: VendorSite,
        known: Mapping[str, Any] | None = None,
    ) -> "TargetedCommand":
        """An instance used only through :meth:`prepare` and :meth:`rewrite`, by
        :class:`~rewriter.actions.batch.BatchCommand`: LibCST's visitor set-up (its scan of
        every method for ``@m.visit``/``@m.leave`` matchers, about 10 ms per instance, measured
        with cProfile on libcst 1.9) is skipped, so a plan's per-action cost stays small.
        Such an instance must not be used as a transformer itself.
        """
        obj = cls.__new__(cls)
        Codemod.__init__(obj, context)
        obj._setup(action, qualname, site, known)
        return obj

    def _setup(self, action: _Action, qualname: str, site: VendorSite, known: Mapping[str, Any] | None = None) -> None:
        self.action = action
        self.qualname = qualname
        self.site = site
        #: What the rewrite read for this action in other files under SRC, which the target's own
        #: file cannot say (``{"container": "ModuleDict"}``: the class of an ``own_call`` regional
        #: path's container, :func:`rewriter.rewrite.regional_path.check`).
        self.known: Mapping[str, Any] = known or {}
        #: Files to write into the vendored package, ``{relpath under SRC: text}``; filled by
        #: :meth:`rewrite` when the action generates code (see :meth:`generate`).
        self.generated: dict[str, str] = {}
        #: Lines for the user (``path:line:col: ...``): calls left alone, stubs written.
        self.notes: list[str] = []
        #: Whether the target carries the action's decorator with other options, left as written
        #: (:meth:`leave_as_written`): the plan's edit is not in the tree, nor is it written.
        self.left_as_written = False
        self._stack: list[str] = []
        self.torch = "torch"
        #: The module's imports (:func:`imported_names`), for recognising existing decorators.
        self.imports: dict[str, str] = {}
        self.tree: cst.Module | None = None
        #: ``(module, its node positions)``: :meth:`_positions`' one resolution per module
        self._resolved: tuple[cst.Module, Mapping[cst.CSTNode, CodeRange]] | None = None

    def visit_Module(self, node: cst.Module) -> bool:
        self.prepare(node, imported_names(node), torch_alias(node))
        return True

    def prepare(self, node: cst.Module, imports: dict[str, str], alias: str | None) -> None:
        """Take the module as this action will see it: its tree, its imports
        (:func:`imported_names`) and its name for torch (:func:`torch_alias`; an ``import
        torch`` is requested when it has none and the action needs one)."""
        self.tree = node
        self.imports = imports
        if alias is None and self.needs_torch():
            AddImportsVisitor.add_needed_import(self.context, "torch")
        self.torch = alias or "torch"

    def needs_torch(self) -> bool:
        """Whether the inserted code refers to torch (most actions do)."""
        return True

    def torch_import(self) -> str:
        """The import that binds :attr:`torch` (``import torch``, ``import torch as T``): what a
        statement inserted into a function that binds that name itself gets before it
        (:func:`insert_statement`'s ``binds``)."""
        return "import torch" if self.torch == "torch" else f"import torch as {self.torch}"

    def decorator_torch(self) -> str:
        """The name for torch in a decorator on the target, bound where the decorator runs.

        A decorator runs when its ``def`` does: for a function or a method of a class at the top
        level, at import, when only the module-level statements above it have run. Where the
        module binds its name for torch only further down (``import torch`` on its last line),
        ``@torch.compile`` above it would be a ``NameError`` at import: an ``import torch`` is
        requested at the top (LibCST's ``AddImportsVisitor`` adds it to the leading imports;
        it does not count one further down) and ``torch`` is the name written.

        A method's decorator runs in its class's body, where a class attribute of the same name
        (``torch = torch.float32``) hides the module's: there the decorator uses a module-level
        alias of torch the class does not rebind, bound above the class (``import torch as
        T``), else a fresh one (``import torch as _torch``) requested at the top.
        """
        assert self.tree is not None
        facts = top_level(self.tree, self.context.scratch)
        at = facts.defines.get(self.qualname.split(".")[0])
        hidden = class_scope_binds(self.tree, self.qualname, self.context.scratch)
        bound = facts.binds.get(self.torch)
        if self.torch not in hidden and (at is None or (bound is not None and bound < at)):
            return self.torch
        if "torch" not in hidden:
            AddImportsVisitor.add_needed_import(self.context, "torch")
            return "torch"
        for local, name in sorted(self.imports.items()):
            before = facts.binds.get(local)
            if name == "torch" and local not in hidden and before is not None and (at is None or before < at):
                return local
        alias = "_torch"
        while alias in hidden or alias in facts.binds:
            alias += "_"
        AddImportsVisitor.add_needed_import(self.context, "torch", asname=alias)
        return alias

    def _on_path(self, name: str) -> bool:
        """Whether to descend into the definition ``name`` (at the current stack): those that
        enclose the target, and the target's own body when :attr:`VISIT_TARGET_BODY` says so.
        The rest of the file is skipped."""
        qual = ".".join([*self._stack, name])
        target = self.qualname
        if qual == target or qual.startswith(target + "."):
            return self.VISIT_TARGET_BODY
        return target.startswith(qual + ".")

    def _inside(self) -> bool:
        qual = ".".join(self._stack)
        return bool(qual) and (qual == self.qualname or qual.startswith(self.qualname + "."))

    def on_visit(self, node: cst.CSTNode) -> bool:
        # A simple statement outside the target cannot hold a def; skip its expressions.
        if (isinstance(node, cst.SimpleStatementLine) and not self._inside()) or self.skips(node):
            super().on_visit(node)
            return False
        return super().on_visit(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        on_path = self._on_path(node.name.value)
        self._stack.append(node.name.value)
        return on_path

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._stack.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        on_path = self._on_path(node.name.value)
        self._stack.append(node.name.value)
        return on_path

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        qual = ".".join(self._stack)
        self._stack.pop()
        if qual == self.qualname and not is_overload(original):
            return self.rewrite(updated)
        return updated

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        """Return the rewritten target function (unchanged when already rewritten)."""
        raise NotImplementedError

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return self.rewrite_module(updated)

    def leave_as_written(self, note: str) -> None:
        """Leave the target's own decorator as written though its options are not the plan's
        (:mod:`.written`): ``note``, the warning that says how they differ, goes to :attr:`notes`,
        and the rewrite counts this action as not written (never as applied)."""
        self.notes.append(note)
        self.left_as_written = True

    def rewrite_module(self, module: cst.Module) -> cst.Module:
        """The module once every target is rewritten, with what this action edits outside its
        target (an ``own_call`` edit of ``f = torch.compile(f)`` below the ``def``); ``module``
        itself for an action that edits only its target. Several actions of one file edit it in
        turn, each ``deep_replace`` rebuilding every node: what an action edits here it finds in
        ``module`` as it is, never by a node of :attr:`tree`."""
        return module

    def _line(self, node: cst.CSTNode | None) -> str:
        """``file.py:LINE`` of ``node`` in the module (the file alone where it cannot be placed)."""
        where = self.action.file
        pos = self._positions().get(node) if node is not None else None
        return f"{where}:{pos.start.line}" if pos is not None else where

    def _positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """LibCST's positions of :attr:`tree`'s nodes, resolved once per module this action sees
        (empty without a module, or where they cannot be resolved)."""
        if self.tree is None:
            return {}
        if self._resolved is None or self._resolved[0] is not self.tree:
            try:
                found: Mapping[cst.CSTNode, CodeRange] = MetadataWrapper(
                    self.tree, unsafe_skip_copy=True).resolve(PositionProvider)
            except Exception:  # noqa: BLE001 - a position is a courtesy in an error already being raised
                found = {}
            self._resolved = (self.tree, found)
        return self._resolved[1]

    def generate(self, module_name: str, template: str, **values: object) -> None:
        """Render ``template`` into ``<vendored package>/<module_name>.py`` (and its ``__init__``)."""
        from ..render import render_python

        base = PurePosixPath(self.site.dir)
        self.generated[str(base / "__init__.py")] = render_python("vendor_init.py.j2")
        self.generated[str(base / f"{module_name}.py")] = render_python(template, **values)

    def add_vendored_import(self, module_name: str, name: str) -> None:
        """Request ``from <vendored package>.<module_name> import <name>`` (relative or absolute,
        as the :class:`VendorSite` says), unless the module already imports it.

        LibCST's ``AddImportsVisitor`` does not recognise an existing *relative* import, so a
        second action (or a re-run that adds a call) would write the import twice.
        """
        module = self.site.module(module_name)
        level = self.site.relative
        assert self.tree is not None
        for stmt in self.tree.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if (
                    isinstance(small, cst.ImportFrom)
                    and len(small.relative) == level
                    and small.module is not None
                    and get_full_name_for_node(small.module) == module
                    and not isinstance(small.names, cst.ImportStar)
                    and any(a.asname is None and get_full_name_for_node(a.name) == name for a in small.names)
                ):
                    return
        AddImportsVisitor.add_needed_import(self.context, module, name, relative=level)

    def add_decorator(
        self, func: cst.FunctionDef, expr: str, outermost: bool = False, comment: str | None = None
    ) -> cst.FunctionDef:
        """Add ``@expr`` innermost (next to ``def``), or outermost when asked; ``comment`` goes
        on its own line above it."""
        decs: Sequence[cst.Decorator] = list(func.decorators)
        new = make_decorator(expr, comment, indent=4 * len(self._stack))
        decs = [new, *decs] if outermost else [*decs, new]
        return func.with_changes(decorators=decs)
