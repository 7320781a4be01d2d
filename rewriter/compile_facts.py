"""Facts about compile calls in source that ``stackpart check``'s rules, the plan's consistency
rules and the ``compile`` action all read, kept here so that each reads them the same way and no
action imports a check rule (docs/design.md, "Where each kind of change goes").

- the ``# stackpart: ignore[CODES]`` comment syntax (:data:`SUPPRESS_RE`, :func:`suppressed_codes`);
- the literal ``fullgraph``/``mode`` of a ``torch.compile(...)`` call (:func:`options`);
- the size of a function's body as SP109 reads it (:func:`body_size`, :data:`SMALL_STATEMENTS`);
- the library's own regional compile, ``x.compile_repeated_blocks(...)`` (:data:`REPEATED_BLOCKS`,
  :func:`is_repeated_blocks_call`), and the ``_repeated_blocks`` lists a class declares for it
  (:func:`declared_blocks`): the program's own compile of those blocks, which a plan must not
  compile a second time;
- the program's compile of a function written as a rebinding, ``f = torch.compile(f, ...)`` at
  module level or in a class body (:func:`rebound_compiles`): that function is compiled as surely
  as by ``@torch.compile``, so a plan may not add a second compile, a ``disable`` or a mark in it;
- a function registered with ``torch.compiler.allow_in_graph(f)`` (or ``torch._dynamo``'s, or as a
  decorator; :func:`allowed_in_graph`): Dynamo puts each call of it into the graph as one opaque
  call and traces it with fake tensors, so a ``torch.compile`` on that function is then traced by
  the outer compile and fails (``Cannot access data pointer of Tensor``);
- how a regional compile walks the repeated blocks' container, ``for block in <container>:
  block.compile()`` (:func:`regional_iterable`, :func:`regional_loop`): the loop the ``own_call``
  rewrite writes and the one ``check``'s SP101 suggests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from .actions.base import canonical
from .targets import decorator_name

#: A suppression comment: ``# stackpart: ignore`` (every code) or ``# stackpart: ignore[SP101,SP109]``.
SUPPRESS_RE = re.compile(r"#\s*stackpart:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")

#: The library's own regional compile (diffusers ``ModelMixin.compile_repeated_blocks``): every
#: submodule whose class name is in the model's ``_repeated_blocks`` is compiled in place with
#: ``submodule.compile(*args, **kwargs)``, the call's arguments passed on to ``torch.compile``.
REPEATED_BLOCKS = "compile_repeated_blocks"
#: The class attribute that call reads: the class names of the model's repeated blocks.
REPEATED_BLOCKS_ATTR = "_repeated_blocks"

#: Containers whose iteration yields their modules: a regional loop walks them as they are.
ITERATES_MODULES = frozenset({"ModuleList", "Sequential"})
#: The container whose iteration yields its keys: a regional loop walks its ``.values()``.
KEYED_CONTAINER = "ModuleDict"
#: The text a suggested loop shows where the container's path is not known from the source.
UNKNOWN_CONTAINER = "<the repeated blocks>"

#: A function of at most this many top-level statements (and no loop) is a small region for SP109.
SMALL_STATEMENTS = 3


def word_matches(pattern: re.Pattern[Any], data: Any) -> Iterator[re.Match[Any]]:
    """Each match of ``pattern`` in ``data`` (``str`` or ``bytes``, as the pattern) that starts a word:
    not ``recompile(`` for a needle ``compile(``. The needles that choose which files of SRC or a
    project are read open with their literal, so the engine jumps between occurrences; the word's
    start is checked here (a leading ``\\b`` or lookbehind makes the engine try every position of
    a file, 10-20x slower over a package tree)."""
    under = b"_" if isinstance(data, bytes) else "_"
    for match in pattern.finditer(data):
        before = data[match.start() - 1:match.start()]
        if not (before and (before.isalnum() or before == under)):
            yield match


def suppressed_codes(match: re.Match[str]) -> set[str] | None:
    """The codes a :data:`SUPPRESS_RE` match names, upper-cased (None: every code)."""
    if match.group(1) is None:
        return None
    return {c.strip().upper() for c in match.group(1).split(",") if c.strip()}


def literal_bool(expr: cst.BaseExpression | None) -> bool | None:
    """``True``/``False`` written as a literal, else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def literal_str(expr: cst.BaseExpression | None) -> str | None:
    """A string written as one literal, else None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name`` of ``call``, or None."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def turned_off(call: cst.Call | None) -> bool:
    """Whether ``call`` (a ``torch.compile``/``module.compile``/``compile_repeated_blocks`` call or
    decorator call) passes a literal ``disable=True``: torch.compile then returns what it was given
    and compiles nothing (torch.compile docs, ``disable``), so no rule reads it as a compile."""
    arg = keyword(call, "disable") if call is not None else None
    return arg is not None and literal_bool(arg.value) is True


def options(call: cst.Call | None) -> tuple[bool | None, str | None]:
    """``(fullgraph, mode)`` literals of a ``torch.compile(...)`` call (None when absent)."""
    if call is None:
        return None, None
    fg, mode = keyword(call, "fullgraph"), keyword(call, "mode")
    return literal_bool(fg.value if fg else None), literal_str(mode.value if mode else None)


def body_size(func: cst.FunctionDef) -> int:
    """Top-level statements of ``func`` (docstring excluded); a loop counts as large: a
    whole-model ``forward`` is ``h = embed(x); for block in self.blocks: ...; return h``."""
    if m.findall(func.body, m.For() | m.While()):
        return SMALL_STATEMENTS + 1
    body = list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else [func.body]
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        body = body[1:]
    return len(body)


def is_repeated_blocks_call(call: cst.Call) -> bool:
    """Whether ``call`` is ``<expr>.compile_repeated_blocks(...)``: the program compiling its model's
    declared blocks itself (:data:`REPEATED_BLOCKS`). Read by the method's name alone, as
    ``module.compile(...)`` is: the receiver's class is seldom known statically."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == REPEATED_BLOCKS


def declared_blocks(module: cst.Module) -> dict[str, list[str]]:
    """``{class name: [block class names]}`` for each class of ``module`` (nested classes included)
    whose body assigns ``_repeated_blocks`` a list or tuple of string literals, in source order: what
    ``compile_repeated_blocks`` compiles on an instance of that class. A value that is not such a
    literal (a name, a call) is left out: its names cannot be read from the source."""
    out: dict[str, list[str]] = {}
    for cls in m.findall(module, m.ClassDef()):
        assert isinstance(cls, cst.ClassDef)
        if not isinstance(cls.body, cst.IndentedBlock):
            continue
        for stmt in cls.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    named = any(m.matches(t.target, m.Name(REPEATED_BLOCKS_ATTR)) for t in small.targets)
                elif isinstance(small, cst.AnnAssign):
                    named = m.matches(small.target, m.Name(REPEATED_BLOCKS_ATTR))
                else:
                    continue
                names = _str_list(small.value) if named else None
                if names is not None:
                    out[cls.name.value] = names
    return out


def _str_list(expr: cst.BaseExpression | None) -> list[str] | None:
    """The strings of a list or tuple of string literals, else None."""
    if not isinstance(expr, (cst.List, cst.Tuple)):
        return None
    out = []
    for el in expr.elements:
        value = literal_str(el.value)
        if value is None:
            return None
        out.append(value)
    return out


#: The spelling of ``torch.compile`` a rebinding calls (:func:`rebound_compiles`).
TORCH_COMPILE = "torch.compile"
#: torch.compile's older spelling, ``torch._dynamo.optimize(backend, nopython=...)(f)``: its call
#: returns the decorator that compiles ``f`` (:func:`rebound_compiles` with ``optimize``).
DYNAMO_OPTIMIZE = "torch._dynamo.optimize"
#: ``torch._dynamo.optimize``'s keywords that are torch.compile's under another name
#: (torch/_dynamo/eval_frame.py, ``_optimize(rebuild_ctx, backend="inductor", *, nopython=False,
#: disable=False, dynamic=None, ...)``; torch.compile calls it with ``nopython=fullgraph``).
OPTIMIZE_KEYS = {"backend": "backend", "nopython": "fullgraph", "disable": "disable", "dynamic": "dynamic"}
#: Registrations that make Dynamo put a function into the graph as one call, untraced.
ALLOW_IN_GRAPH = frozenset({"torch.compiler.allow_in_graph", "torch._dynamo.allow_in_graph"})


@dataclass(frozen=True)
class SourceSite:
    """Where the source does something to a function outside its ``def``.

    Attributes:
        qualname: the function (``train_step``, ``Net.forward``).
        node: the call (``torch.compile(f, ...)``, ``torch.compiler.allow_in_graph(f)``) or the
            decorator that does it.
    """

    qualname: str
    node: cst.CSTNode


def _scopes(body: Sequence[cst.CSTNode], prefix: str = "") -> Iterator[tuple[str, cst.CSTNode]]:
    """``(qualname prefix, statement)`` for each statement at module level and in class bodies,
    those in ``if``/``try``/``with``/loop blocks included; function bodies are not entered."""
    for stmt in body:
        yield prefix, stmt
        if isinstance(stmt, cst.ClassDef):
            if isinstance(stmt.body, cst.IndentedBlock):
                yield from _scopes(stmt.body.body, f"{prefix}{stmt.name.value}.")
            continue
        if isinstance(stmt, cst.FunctionDef):
            continue
        for child in stmt.children:
            blocks = [child] if isinstance(child, cst.IndentedBlock) else []
            if isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.If)):
                blocks = [g for g in child.children if isinstance(g, cst.IndentedBlock)]
                if isinstance(child, cst.If):  # an elif: its own blocks and its else
                    yield from _scopes([child], prefix)
                    continue
            for block in blocks:
                yield from _scopes(block.body, prefix)


def _defined(module: cst.Module) -> set[str]:
    """Qualnames of the functions defined at module level and in class bodies."""
    return {p + s.name.value for p, s in _scopes(module.body) if isinstance(s, cst.FunctionDef)}


def rebound_compiles(module: cst.Module, imports: dict[str, str], optimize: bool = False) -> dict[str, SourceSite]:
    """The functions the source compiles by rebinding their own name, ``f = torch.compile(f, ...)``,
    at module level or in a class body (``forward = torch.compile(forward)``), with the
    ``torch.compile`` call, the one that carries the options; of a name rebound twice, the first.
    ``imports``: :func:`rewriter.actions.base.imported_names`. ``f = torch.compile(mode=...)(f)``
    (torch.compile called without the function returns the decorator, applied by hand) counts too,
    its site the inner ``torch.compile(mode=...)`` call (:func:`rebinding_code` writes the
    statement). With ``optimize``, ``f = torch._dynamo.optimize(...)(f)`` too
    (:data:`DYNAMO_OPTIMIZE`), its site the outer call, whose ``func`` is the
    ``torch._dynamo.optimize(...)`` call that carries the options (:func:`is_optimize_call`).

    Only the function's own name passed back to itself counts: ``step = torch.compile(train_step)``
    compiles a new name and leaves ``train_step`` what it was."""
    defined = _defined(module)
    found: dict[str, SourceSite] = {}
    for prefix, stmt in _scopes(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name) and isinstance(small.value, cst.Call)):
                continue
            name, call = small.targets[0].target.value, small.value
            if _is_torch_compile(call.func, imports):
                site = call  # torch.compile(f, ...)
            elif (isinstance(call.func, cst.Call) and _is_torch_compile(call.func.func, imports)
                  and first_positional(call.func) is None):
                site = call.func  # torch.compile(...)(f): the options are the inner call's
            elif optimize and is_optimize_call(call, imports):
                site = call
            else:
                continue
            first = first_positional(call)
            if first is None or not m.matches(first, m.Name(name)):
                continue
            if prefix + name in defined:
                found.setdefault(prefix + name, SourceSite(prefix + name, site))
    return found


def _is_torch_compile(func: cst.BaseExpression, imports: dict[str, str]) -> bool:
    """Whether ``func`` is a (dotted) name of ``torch.compile`` (:data:`TORCH_COMPILE`); a call is
    none: ``get_full_name_for_node`` names ``torch.compile(...)`` by its callee."""
    return (isinstance(func, (cst.Name, cst.Attribute))
            and canonical(get_full_name_for_node(func) or "", imports) == TORCH_COMPILE)


def first_positional(call: cst.Call) -> cst.BaseExpression | None:
    """The first argument of ``call`` where it is positional (what a compile call compiles:
    ``torch.compile(model, ...)``), else None (a keyword or starred first argument, or none)."""
    first = call.args[0] if call.args else None
    return first.value if first is not None and first.keyword is None and not first.star else None


def rebinding_code(name: str, call: cst.Call) -> str:
    """The rebinding of ``name`` whose :func:`rebound_compiles` site is ``call``, on one line as the
    source writes it: ``f = torch.compile(f, mode="max-autotune")``, ``f =
    torch.compile(mode="max-autotune")(f)`` (the site is the inner call, the ``(f)`` after it),
    ``f = torch._dynamo.optimize("inductor")(f)``."""
    text = " ".join(cst.Module([]).code_for_node(call).split())
    return f"{name} = {text}" + (f"({name})" if first_positional(call) is None else "")


def is_optimize_call(call: cst.Call, imports: dict[str, str]) -> bool:
    """Whether ``call`` is ``torch._dynamo.optimize(...)(f)``: the decorator the inner call returns,
    applied to ``f`` (:data:`DYNAMO_OPTIMIZE`)."""
    inner = call.func
    return isinstance(inner, cst.Call) and not isinstance(inner.func, cst.Call) and canonical(
        get_full_name_for_node(inner.func) or "", imports) == DYNAMO_OPTIMIZE


def as_compile_call(call: cst.Call | None, imports: dict[str, str]) -> cst.Call | None:
    """``call``, the source's compile of a function (a compile decorator's call, or a
    :func:`rebound_compiles` site), as :func:`options` and :func:`turned_off` read a
    ``torch.compile(...)`` call: a ``torch._dynamo.optimize(...)`` call (the decorator's, or the
    ``func`` of a rebinding's ``torch._dynamo.optimize(...)(f)``, :func:`is_optimize_call`) with its
    keywords renamed to torch.compile's (:data:`OPTIMIZE_KEYS`: ``nopython=True`` is
    ``fullgraph=True``; its first positional argument, the backend, as ``backend=``; a keyword of
    its own, ``guard_fail_fn=``, kept); any other call as it is. A node to read, never to write back."""
    if call is None:
        return None
    if is_optimize_call(call, imports):
        call = call.func  # type: ignore[assignment]
    if not (isinstance(call.func, (cst.Name, cst.Attribute))
            and canonical(get_full_name_for_node(call.func) or "", imports) == DYNAMO_OPTIMIZE):
        return call
    renamed = [a.with_changes(keyword=cst.Name(OPTIMIZE_KEYS[a.keyword.value]))
               if a.keyword is not None and a.keyword.value in OPTIMIZE_KEYS else a for a in call.args]
    if renamed and renamed[0].keyword is None and not renamed[0].star:  # optimize("inductor", ...)
        renamed[0] = renamed[0].with_changes(keyword=cst.Name("backend"), equal=cst.AssignEqual())
    return call.with_changes(args=renamed)


def allowed_in_graph(module: cst.Module, imports: dict[str, str]) -> dict[str, SourceSite]:
    """The functions of ``module`` registered with ``allow_in_graph`` (:data:`ALLOW_IN_GRAPH`) in
    the same file: ``torch.compiler.allow_in_graph(f)`` anywhere in it (a list or tuple of
    functions too, as torch takes), ``f`` a module-level function or ``Cls.method``, or the
    decorator on the ``def``; each with its first registration."""
    defined = _defined(module)
    found: dict[str, SourceSite] = {}
    for prefix, stmt in _scopes(module.body):
        if isinstance(stmt, cst.FunctionDef):
            for dec in stmt.decorators:
                if canonical(decorator_name(dec), imports) in ALLOW_IN_GRAPH:
                    found.setdefault(prefix + stmt.name.value, SourceSite(prefix + stmt.name.value, dec))
    for call in m.findall(module, m.Call()):
        assert isinstance(call, cst.Call)
        func = get_full_name_for_node(call.func)
        if func is None or canonical(func, imports) not in ALLOW_IN_GRAPH or not call.args:
            continue
        value = call.args[0].value
        items = [e.value for e in value.elements] if isinstance(value, (cst.List, cst.Tuple)) else [value]
        for item in items:
            qual = get_full_name_for_node(item)
            if qual is not None and qual in defined:
                found.setdefault(qual, SourceSite(qual, call))
    return found


def regional_iterable(container: str, kind: str | None) -> str:
    """What a regional loop iterates to reach each block of ``container`` (the expression's source,
    ``model.layers``), given its class ``kind`` as far as the source says it:

    * ``ModuleList`` / ``Sequential``: the container itself (iterating one yields its modules);
    * ``ModuleDict``: ``<container>.values()`` (iterating one yields its keys, strings that have no
      ``compile``);
    * unknown (None, or another class): ``<container>.children()``, which yields the modules each of
      the three holds, once each, and nothing else: a block compiled twice or a ``None`` entry
      (which iteration yields and ``children()`` skips) would not compile better.
    """
    if kind in ITERATES_MODULES:
        return container
    if kind == KEYED_CONTAINER:
        return f"{container}.values()"
    return f"{container}.children()"


def regional_loop(container: str | None, kind: str | None, var: str = "block", args: str = "") -> str:
    """``for <var> in <what regional_iterable gives>: <var>.compile(<args>)``, on one line; with
    :data:`UNKNOWN_CONTAINER` in place of the iterable where ``container`` is None (the source does
    not say where the blocks are)."""
    iterable = UNKNOWN_CONTAINER if container is None else regional_iterable(container, kind)
    return f"for {var} in {iterable}: {var}.compile({args})"


def container_of(iterable: str) -> str:
    """The container a regional loop's iterable walks (:func:`regional_iterable` read back):
    ``model.layers`` for ``model.layers``, ``model.layers.values()`` and ``model.layers.children()``."""
    for suffix in (".values()", ".children()"):
        if iterable.endswith(suffix):
            return iterable[: -len(suffix)]
    return iterable


#: At most this many ``.py`` files under SRC are read to see whether a name is used anywhere.
TEXT_FILES = 2000
#: Files larger than this (bytes) are not read for names (generated code, data).
TEXT_BYTES = 2_000_000


class SourceTexts:
    """Every ``.py`` file's text under ``src`` (:func:`rewriter.source.python_files`, at most
    :data:`TEXT_FILES` of at most :data:`TEXT_BYTES` bytes each; one that cannot be read left out),
    read once on first use: where a name is used anywhere in SRC (:meth:`uses`)."""

    def __init__(self, src: Any) -> None:
        self.src = src
        self._texts: list[str] | None = None

    def texts(self) -> list[str]:
        if self._texts is None:
            from .errors import StackpartError
            from .source import python_files, read_file

            out: list[str] = []
            for path in python_files(self.src):
                if len(out) >= TEXT_FILES:
                    break
                try:
                    if path.stat().st_size <= TEXT_BYTES:
                        out.append(read_file(path).text)
                except (OSError, StackpartError):
                    continue
            self._texts = out
        return self._texts

    def uses(self, name: str) -> int:
        """How many times ``name`` is written as a word in SRC's files (its ``def`` included)."""
        word = re.compile(rf"(?<![\w.]){re.escape(name)}\b|\.{re.escape(name)}\b")
        return sum(len(word.findall(t)) for t in self.texts())


def loads_after(scope: cst.FunctionDef, name: str, stmt: cst.Assign) -> int:
    """How many times ``name`` is written in ``scope`` (a function, nested code included) other
    than as ``stmt``'s own target or a parameter."""
    skip = {id(t.target) for t in stmt.targets}
    count = 0

    class _V(cst.CSTVisitor):
        def visit_Param(self, node: cst.Param) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            nonlocal count
            if node.value == name and id(node) not in skip:
                count += 1

    scope.body.visit(_V())
    return count


def unused_result(scope: cst.CSTNode, stmt: cst.CSTNode | None, call: cst.Call, texts: SourceTexts) -> str | None:
    """The name ``call``'s result is bound to where nothing uses it, else None: ``stmt`` is
    ``name = <call>`` (one target, a plain name other than ``self``), and ``name`` is never written
    again in ``scope`` where it is a function (:func:`loads_after`), or written once in all of SRC
    (``texts``) where it is a module's top level. torch.compile returns a new object and changes
    nothing in place, so such a call compiles nothing the program runs (torch.compile docs,
    "Compiling modules"); diagnose reads it so (:attr:`rewriter.diagnose.own_compile.OwnCompile.idle_kind`
    ``unused``) and so does the rewrite's refusal of a compile of a class compiled whole
    (:func:`rewriter.rewrite.regional_path.check_compiled_whole`)."""
    if not (isinstance(stmt, cst.Assign) and stmt.value is call and len(stmt.targets) == 1):
        return None
    target = stmt.targets[0].target
    if not isinstance(target, cst.Name) or target.value == "self":
        return None
    if isinstance(scope, cst.FunctionDef):
        return target.value if loads_after(scope, target.value, stmt) == 0 else None
    return target.value if texts.uses(target.value) <= 1 else None
