"""The calls of a top-level function of SRC from SRC's own files, and the class of the module each
passes for one of its parameters, read statically with LibCST.

``own_call: {regional: blocks}`` on a generic helper (``utils/compiling.py::maybe_compile(model)``
holding ``return torch.compile(model)``) writes ``for block in model.blocks: block.compile()``,
which holds only for a caller that passes a model with ``blocks``
(:func:`rewriter.rewrite.regional_path.check` asks every caller this module finds).

* a call is one whose callee LibCST's :class:`~libcst.metadata.QualifiedNameProvider` resolves to
  the function: its own name in its file, or imported from it under SRC (``from utils.compiling
  import maybe_compile as mc``, ``from utils import compiling; compiling.maybe_compile(...)``,
  ``import utils.compiling``, ``from . import maybe_compile`` where it is defined in a package's
  ``__init__.py``), the module found as :func:`rewriter.src_names.module_files` finds it; or
  imported through a re-export (:func:`bindings`: ``from utils import maybe_compile`` where
  ``utils/__init__.py`` holds ``from .compiling import maybe_compile``, or ``from .compiling import
  *`` where the star import exports it, chains of them, and the names they give it);
* the argument is the one passed at the parameter's position or by its keyword; its class is read
  where the source says it: a call of a class defined at the top level of a file of SRC
  (``Net()``, ``Net().eval()``: :data:`SELF_RETURNING` peeled off, the class
  resolved as :meth:`.enclosing.Enclosing.resolve` resolves a construction), or a name the caller's
  own body binds to such a call before it (``net = Net(); maybe_compile(net)``, the last such
  line before the call) and binds in no other way that can reach the call (:meth:`_Finder.other_binding`:
  before it in a branch or a loop, by ``for``, ``with``, ``:=``, an annotated or unpacking
  assignment, or anywhere in a loop around it, which of its values reaches the call is not read;
  ``if flag: net = maybe_compile(net)`` binds the name after the call and counts for nothing).

What is not read says why (:attr:`Call.why`): a parameter of the caller (any model may come in),
a factory (``maybe_compile(make())``, or ``net = make()`` before it), a class of an installed
library, a name bound otherwise too, ``*args``. A use of the function that is no call
(``fns = [maybe_compile]``, ``map(maybe_compile, ...)``) is a :class:`Call` with no argument:
its calls cannot be followed. Files are found by their text first (the function's name, or a
name a re-export gives it), so only those that name it are parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (ImportAssignment, MetadataWrapper, PositionProvider, QualifiedNameProvider,
                             ScopeProvider)

from ..errors import StackpartError
from ..src_names import definition_files, module_files
from .enclosing import ClassRef, Enclosing

_EMPTY = cst.Module([])
#: Methods that return the module they are called on: peeled off ``TinyLM().eval()``.
SELF_RETURNING = {"eval", "train", "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "requires_grad_",
                  "to_empty", "share_memory"}


@dataclass(frozen=True)
class Call:
    """One use of the function in SRC.

    Attributes:
        where: ``file.py:line`` of the call (or of the use as a value).
        code: the argument as written (``Net()``), or the use itself where it is no call.
        cls: the argument's class, ``(file relative to SRC, class name)``, where the source says it.
        why: why ``cls`` is None, in words (``m is a parameter of wrap``).
        called: False where the function is used as a value, not called.
    """

    where: str
    code: str
    cls: ClassRef | None
    why: str
    called: bool = True


def _code(node: cst.CSTNode) -> str:
    return " ".join(_EMPTY.code_for_node(node).split())


def self_returning(value: cst.BaseExpression | None, name: str) -> bool:
    """Whether ``value`` is ``name`` (a name, or a dotted one: ``self.model``) with methods that
    return the module itself called on it (``net.eval()``, ``net.to(device).half()``:
    :data:`SELF_RETURNING`, nn.Module's ``return self``): ``net = net.eval()`` binds ``net`` to the
    object it held, so what it was bound to before (a class's instance, torch.compile's wrapper)
    still holds."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
        return False
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in SELF_RETURNING):
        value = value.func.value
    return isinstance(value, (cst.Name, cst.Attribute)) and get_full_name_for_node(value) == name


def bound_value(scope: cst.FunctionDef | cst.Module | cst.If, name: str, site: cst.CSTNode) -> cst.BaseExpression | None:
    """The value of the last ``name = <value>`` in ``scope``'s own body (a function's, a module's
    top level, or a script's ``if __name__ == "__main__":`` block) before the statement holding
    ``site``, or None where there is none. ``name = name.eval()`` (:func:`self_returning`) keeps the
    value before it."""
    found = None
    stmts: Any = scope.body if isinstance(scope, cst.Module) else (
        scope.body.body if isinstance(scope.body, cst.IndentedBlock) else ())
    for stmt in stmts:
        if m.findall(stmt, m.MatchIfTrue(lambda node: node is site)):
            break
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == name and not self_returning(small.value, name)):
                found = small.value
    return found


def parameter_names(func: cst.FunctionDef) -> list[str]:
    """``func``'s parameters that a positional argument fills, in order (``self`` included)."""
    return [p.name.value for p in (*func.params.posonly_params, *func.params.params)]


def rebound_in(func: cst.FunctionDef, name: str) -> bool:
    """Whether ``func``'s body binds the parameter ``name`` again (an assignment, a loop or ``with``
    target, a walrus), other than to a method of it that returns the module itself
    (``model = model.eval()``, :func:`self_returning`): then what it holds at a later call is not
    the argument."""
    rebound = m.Name(name)
    kept = {id(t) for a in m.findall(func.body, m.Assign()) if self_returning(a.value, name)  # type: ignore[attr-defined]
            for t in a.targets}  # type: ignore[attr-defined]
    return any(id(n) not in kept for n in m.findall(
        func.body, m.AssignTarget(target=rebound) | m.AnnAssign(target=rebound) | m.AugAssign(target=rebound)
        | m.For(target=rebound) | m.AsName(name=rebound) | m.NamedExpr(target=rebound)))


def _words(names: set[str]) -> re.Pattern[bytes]:
    """A whole-word match of any of ``names`` in a file's bytes."""
    return re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")


#: A ``from M import *`` in a file's bytes: such a file may bind a name without writing it.
_STAR = re.compile(rb"\bimport\s*\*")


def _star_modules(module: cst.Module) -> list[str]:
    """The modules each top-level ``from M import *`` of ``module`` reads, as
    :func:`rewriter.src_names.module_files` takes them (``.compiling`` for ``from .compiling import *``)."""
    return ["." * len(small.relative) + ((get_full_name_for_node(small.module) or "") if small.module is not None else "")
            for stmt in module.body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar)]


def _star_exports(module: cst.Module, name: str) -> bool:
    """Whether ``from <module> import *`` binds ``name``: listed in the module's ``__all__`` where its
    last top-level ``__all__ = [...]`` (or tuple) is a literal of strings, else a name not starting
    with ``_`` (https://docs.python.org/3/reference/simple_stmts.html#the-import-statement)."""
    listed: set[str] | None = None
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name("__all__"))], value=m.List() | m.Tuple())):
                items = [e.value for e in small.value.elements]  # type: ignore[attr-defined]
                strings = all(isinstance(v, cst.SimpleString) for v in items)
                listed = {v.evaluated_value for v in items} if strings else None  # type: ignore[attr-defined]
    return name in listed if listed is not None else not name.startswith("_")


def bindings(texts: dict[str, bytes], wrapper: Callable[[str], MetadataWrapper | None], rel: str,
             name: str) -> set[tuple[str, str]]:
    """``(file, name there)`` of each top-level binding under SRC of the top-level function ``name``
    of file ``rel``: its definition, and each name a file binds at its top level by importing one of
    these (``from .compiling import maybe_compile as mc`` in ``utils/__init__.py`` binds ``("utils/
    __init__.py", "mc")``; ``from utils import mc`` elsewhere binds that file's ``mc`` in turn), to
    the end of every chain: an import binds the name as the importing module's attribute, which a
    further import reads (https://docs.python.org/3/reference/simple_stmts.html#import). A top-level
    ``from .compiling import *`` binds each name found in a file of that module that the star
    import exports (:func:`_star_exports`: its literal ``__all__``, else a public name).

    An imported name is read from LibCST's global scope (:class:`~libcst.metadata.ScopeProvider`:
    an import inside a function binds nothing here) and mapped to its files by
    :func:`rewriter.src_names.definition_files`, as a call's callee is. ``texts``: SRC's files'
    bytes (only those naming a binding found are parsed); ``wrapper``: a file's parse, None where it
    cannot be read."""
    found = {(rel, name)}
    new = {name}
    while new:
        pattern, new = _words(new), set()
        for file, data in texts.items():
            if not (pattern.search(data) or _STAR.search(data)) or (wrapped := wrapper(file)) is None:
                continue
            for source in (f for dotted in _star_modules(wrapped.module) for f in module_files(dotted, file)):
                star = wrapper(source) if source in texts else None
                for bound in {b for f, b in found if f == source and (file, b) not in found}:
                    if star is not None and _star_exports(star.module, bound):
                        found.add((file, bound))
                        new.add(bound)
            scope = wrapped.resolve(ScopeProvider)[wrapped.module]
            for assignment in scope.assignments:
                bound = assignment.name
                if not isinstance(assignment, ImportAssignment) or "." in bound or (file, bound) in found:
                    continue
                for q in scope.get_qualified_names_for(bound):
                    where = definition_files(q, file)
                    if where is not None and any((f, where[1]) in found for f in where[0]):
                        found.add((file, bound))
                        new.add(bound)
                        break
    return found


def calls_of(src: Path, rel: str, name: str, param: str, position: int | None, limit: int) -> list[Call]:
    """Every use under ``src`` of the top-level function ``name`` of file ``rel`` (by any name
    :func:`bindings` gives it), with the class of what each call passes for parameter ``param`` (at
    ``position`` where it may be passed positionally, None for a keyword-only one). ``limit``: the
    most files of SRC read. Raises nothing: a file that cannot be read or parsed says nothing."""
    from ..source import parse_module, read_file

    reading = Enclosing(src, limit)
    parsed: dict[str, MetadataWrapper | None] = {}

    def wrapper(caller: str) -> MetadataWrapper | None:
        if caller not in parsed:
            try:
                module = parse_module(read_file(src / caller, caller).text, caller)
            except (OSError, StackpartError):
                parsed[caller] = None
            else:
                parsed[caller] = MetadataWrapper(module, unsafe_skip_copy=True)
        return parsed[caller]

    homes = bindings(reading.files(), wrapper, rel, name)
    pattern = _words({bound for _, bound in homes})
    out: list[Call] = []
    for caller, data in reading.files().items():
        if not pattern.search(data) or (wrapped := wrapper(caller)) is None:
            continue
        finder = _Finder(reading, caller, homes, param, position)
        wrapped.visit(finder)
        out += finder.found
    return out


class _Finder(cst.CSTVisitor):
    """The uses of one function in one file (:func:`calls_of`)."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ScopeProvider)

    def __init__(self, reading: Enclosing, rel: str, homes: set[tuple[str, str]], param: str,
                 position: int | None) -> None:
        super().__init__()
        self.reading, self.rel, self.homes = reading, rel, homes
        self.names = {bound for _, bound in homes}
        self.param, self.position = param, position
        self.scopes: list[cst.FunctionDef | cst.Module] = []
        self.called: set[int] = set()
        self.found: list[Call] = []

    def visit_Module(self, node: cst.Module) -> None:
        self.scopes.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.called.add(id(node.name))  # its own name is a definition, not a use
        self.scopes.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def _where(self, node: cst.CSTNode) -> str:
        return f"{self.rel}:{self.get_metadata(PositionProvider, node).start.line}"

    def _is_it(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` names the function (:func:`rewriter.src_names.definition_files` of one
        of its qualified names holds one of its :func:`bindings`)."""
        for q in self.get_metadata(QualifiedNameProvider, node, set()):
            where = definition_files(q, self.rel)
            if where is not None and any((f, where[1]) in self.homes for f in where[0]):
                return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, (cst.Name, cst.Attribute)) or not self._is_it(node.func):
            return
        self.called.add(id(node.func))
        if isinstance(node.func, cst.Attribute):
            self.called.add(id(node.func.attr))
        self.found.append(self._argument(node))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.called and node.value in self.names and self._is_it(node):
            self.found.append(Call(self._where(node), _code(node), None, f"{node.value} is used as a value", False))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if id(node) not in self.called and node.attr.value in self.names and self._is_it(node):
            self.called.add(id(node.attr))
            self.found.append(Call(self._where(node), _code(node), None, f"{node.attr.value} is used as a value",
                                   False))

    def _argument(self, call: cst.Call) -> Call:
        """The argument ``call`` passes for the parameter, and its class where the source says it."""
        where = self._where(call)
        positional = [a for a in call.args if a.keyword is None and not a.star]
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == self.param), None)
        if arg is None and self.position is not None and self.position < len(positional) \
                and all(not a.star for a in call.args[:self.position + 1]):
            arg = positional[self.position]
        if arg is None:
            starred = next((a for a in call.args if a.star), None)
            why = (f"it passes {starred.star}{_code(starred.value)}, which may hold it" if starred is not None
                   else f"it passes no {self.param}")
            return Call(where, _code(call), None, why)
        value = arg.value
        code = _code(value)
        scope = self.scopes[-1]
        if isinstance(value, cst.Name):
            if isinstance(scope, cst.FunctionDef) and value.value in {
                    p.name.value for p in (*scope.params.posonly_params, *scope.params.params,
                                           *scope.params.kwonly_params)}:
                return Call(where, code, None, f"{code} is a parameter of {scope.name.value}")
            other = self.other_binding(scope, value)
            if other is not None:
                owner = scope.name.value if isinstance(scope, cst.FunctionDef) else self.rel
                return Call(where, code, None, f"{code} is bound at {self._where(other)} by more than a plain "
                            f"`{code} = ...` of {owner}'s own lines, so which value reaches the call is not read")
            bound = bound_value(scope, value.value, call)
            if bound is None:
                return Call(where, code, None, f"{code} is not bound to a call of a class in {self.rel}'s own lines before")
            value = bound
        cls = self._class(value)
        if cls is None:
            return Call(where, code, None, f"{_code(value)} is not a call of a class of SRC")
        return Call(where, code, cls, "")

    def other_binding(self, scope: cst.FunctionDef | cst.Module, name: cst.Name) -> cst.CSTNode | None:
        """The first binding of ``name`` (an argument's name) that it may read (LibCST's
        :class:`~libcst.metadata.ScopeProvider`), in ``scope`` or a scope between it and the name (a
        comprehension, a ``lambda``), that is no plain ``name = <value>`` line of ``scope``'s own
        body (:func:`bound_value` reads those): one in a branch or a loop (a later line of a loop
        around the call included), a ``for``/``with``/``except`` target, ``:=``, an annotated,
        augmented or unpacking assignment, an import, a ``def``; of ``scope``'s own, only one that can
        reach the call (:meth:`_reaches`); None where there is none. A
        binding outside ``scope`` (the module's, read in a function) is :func:`bound_value`'s to
        refuse."""
        stmts: Any = scope.body if isinstance(scope, cst.Module) else (
            scope.body.body if isinstance(scope.body, cst.IndentedBlock) else ())
        plain = {id(small.targets[0].target) for stmt in stmts if isinstance(stmt, cst.SimpleStatementLine)
                 for small in stmt.body if isinstance(small, cst.Assign) and len(small.targets) == 1}
        own = self.get_metadata(ScopeProvider, scope if isinstance(scope, cst.Module) else scope.body, None)
        found = at = self.get_metadata(ScopeProvider, name, None)
        chain = []  # the scopes from the name's out to ``scope``'s
        while at is not None and at is not own:
            chain.append(at)
            at = None if at.parent is at else at.parent  # a GlobalScope is its own parent
        if found is None or at is None:
            return None
        chain.append(own)
        others = [a.node for a in found[name.value] if id(a.node) not in plain and any(a.scope is c for c in chain)
                  and (a.scope is not own or self._reaches(scope, a.node, name))]
        return min(others, key=lambda node: self.get_metadata(PositionProvider, node).start, default=None)

    def _reaches(self, scope: cst.FunctionDef | cst.Module, bound: cst.CSTNode, name: cst.Name) -> bool:
        """Whether a binding ``bound`` of ``scope``'s own may give ``name`` (the argument) its value:
        it sits in a loop (``for``, ``while``) around the argument, or it comes before the argument
        and is neither the target of the statement whose value holds the argument
        (``net = maybe_compile(net)``: bound after the call returns) nor a bare annotation
        (``net: nn.Module``, which binds nothing:
        https://docs.python.org/3/reference/simple_stmts.html#annotated-assignment-statements)."""
        def holds(node: cst.CSTNode, inner: cst.CSTNode) -> bool:
            return bool(m.findall(node, m.MatchIfTrue(lambda n: n is inner)))

        if any(holds(loop, bound) and holds(loop, name) for loop in m.findall(scope, m.For() | m.While())):
            return True
        def start(node: cst.CSTNode) -> tuple[int, int]:
            pos = self.get_metadata(PositionProvider, node).start
            return pos.line, pos.column

        if start(bound) >= start(name):
            return False
        for stmt in m.findall(scope, m.Assign() | m.AnnAssign() | m.AugAssign()):
            targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
            if any(holds(t, bound) for t in targets):
                return stmt.value is not None and not holds(stmt.value, name)
        return True

    def _class(self, value: cst.BaseExpression) -> ClassRef | None:
        """The class of SRC ``value`` calls (``Net()``, ``model.Net().eval()``), else None."""
        while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
               and value.func.attr.value in SELF_RETURNING):
            value = value.func.value
        if not isinstance(value, cst.Call):
            return None
        try:
            names = self.get_metadata(QualifiedNameProvider, value.func, set())
        except KeyError:
            return None
        return self.reading.resolve(self.rel, names) if names else None
