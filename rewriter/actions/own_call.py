"""``compile`` with ``own_call``: edit the program's own ``torch.compile`` instead of adding a second.

Where the program already compiles the code, a plan changes the program's call (docs/guide.md,
Step 2, on a program that compiles itself; docs/plan-reference.md's ``own_call``). The target is the function that carries it: the function decorated with
``@torch.compile`` / ``@torch.compile(...)``, or the function whose body holds exactly one
``torch.compile(...)``, ``module.compile(...)`` or ``model.compile_repeated_blocks(...)`` call
(``self.block = torch.compile(Block())`` in ``__init__``, ``model.compile(fullgraph=True)`` in
``main``; diffusers' regional compile passes its keyword arguments on to ``torch.compile``, so they
are edited alike). Only that call's keyword arguments
change; everything else keeps its bytes, so the diff is the one line the call is on:

* a key the call has with a literal value gets the new literal (or is removed when the new value
  is torch's default: ``fullgraph: false``, ``mode: default``, ``dynamic: null``, ``backend: inductor``,
  ``disable: false``; ``disable: true`` is torch.compile's own off switch, the call's other options kept);
* a key it lacks is appended after its last argument, in the call's own separator style (a
  trailing comma and one argument per line are kept); a bare ``@torch.compile`` gets ``(...)``;
* a key already at the value asked is left alone (idempotence).

Refused (:class:`OwnCallRefused`, which the rewrite reports at the plan's action with the source's
``file:line``; nothing is written) where the edit cannot be made safely: no compile on the target
or more than one; a compile inside a lambda (:func:`compile_in_lambda`: said so, with the form to
write it in); ``torch.compile`` passed around as a value (``functools.partial(torch.compile,
...)``, ``fn = torch.compile``); ``*args``/``**options`` in the call (the key may come from there);
the key's current value is not a literal (``mode=MODE``); ``mode`` asked where the call passes
``options=`` (torch refuses both); ``disable: true`` on a ``name = torch.compile(module, ...)`` the
source has on where the program reads ``name._orig_mod`` (:func:`check_unwrapped`: torch.compile
then returns the module itself, which has no ``_orig_mod``, so that read would raise
``AttributeError`` when the program runs; ``regional`` refuses the same read).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from ..compile_facts import REPEATED_BLOCKS, container_of, first_positional, regional_iterable, turned_off
from ..plan import OWN_CALL_DEFAULTS
from ..targets import decorator_name
from .base import canonical, comments_within, py_literal

COMPILE = "torch.compile"
_EMPTY = cst.Module([])


class OwnCallRefused(Exception):
    """The program's own compile on the target cannot be edited safely; ``node`` is where."""

    def __init__(self, message: str, node: cst.CSTNode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


@dataclass
class OwnSite:
    """One compile of the program's on the target.

    Attributes:
        node: what is replaced: the ``Decorator``, or the ``Call``.
        call: the call whose arguments are edited (None for a bare ``@torch.compile``).
        kind: ``decorator``, ``call`` (``torch.compile(...)``) or ``method`` (``m.compile(...)``,
            ``m.compile_repeated_blocks(...)``).
    """

    node: cst.CSTNode
    call: cst.Call | None
    kind: str


def _code(node: cst.CSTNode) -> str:
    return " ".join(_EMPTY.code_for_node(node).split())


def _is_compile(expr: cst.BaseExpression, imports: dict[str, str]) -> bool:
    """Whether ``expr`` names ``torch.compile`` in ``imports``' spelling. A call is no name:
    ``get_full_name_for_node`` names ``torch.compile(m)`` by its callee, so ``torch.compile(m)(x)``,
    a call of what the compile returned, would read as a second compile."""
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return False
    name = get_full_name_for_node(expr)
    return name is not None and canonical(name, imports) == COMPILE


class _Finder(cst.CSTVisitor):
    """Compile calls in a function's own body (nested defs, classes and lambdas are theirs), and
    any ``torch.compile`` used as a value rather than called."""

    def __init__(self, imports: dict[str, str]) -> None:
        self.imports = imports
        self.sites: list[OwnSite] = []
        self.values: list[cst.CSTNode] = []
        self._called: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if _is_compile(func, self.imports):
            self._called.add(id(func))
            self.sites.append(OwnSite(node, node, "call"))
        elif isinstance(func, cst.Attribute) and func.attr.value in ("compile", REPEATED_BLOCKS):
            owner = get_full_name_for_node(func.value)
            head = (owner or "").split(".", 1)[0]
            if owner is not None and head in self.imports and head != "self":
                return  # re.compile, torch.compile spelled otherwise, a module's function: not a module's compile
            self.sites.append(OwnSite(node, node, "method"))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._called.add(id(node.attr))  # ``x.compile``'s ``compile`` is an attribute, not a name
        if id(node) not in self._called and _is_compile(node, self.imports):
            self.values.append(node)
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._called and _is_compile(node, self.imports):
            self.values.append(node)

    def visit_Arg(self, node: cst.Arg) -> bool:
        if node.keyword is not None:
            self._called.add(id(node.keyword))  # ``compile=`` is a keyword, not a name
        return True


def find_sites(func: cst.FunctionDef, imports: dict[str, str]) -> list[OwnSite]:
    """The program's own compile of ``func``: its ``torch.compile`` decorator, else the compile
    calls in its own body (``imports``: :func:`rewriter.actions.base.imported_names`).

    Raises:
        OwnCallRefused: ``torch.compile`` is used as a value in the body (a call built dynamically).
    """
    for dec in func.decorators:
        expr = dec.decorator
        if isinstance(expr, cst.Call) and _is_compile(expr.func, imports):
            return [OwnSite(dec, expr, "decorator")]
        if canonical(decorator_name(dec), imports) == COMPILE and not isinstance(expr, cst.Call):
            return [OwnSite(dec, None, "decorator")]
    finder = _Finder(imports)
    func.body.visit(finder)
    if finder.values:
        raise OwnCallRefused(
            f"torch.compile is used as a value here ({_code(finder.values[0])}), not called: a compile built "
            "dynamically cannot be edited safely; change its options by hand", finder.values[0])
    return finder.sites


def compile_in_lambda(func: cst.FunctionDef, imports: dict[str, str]) -> cst.Lambda | None:
    """The first lambda in ``func``'s own body (nested defs and classes are theirs) whose body
    holds a compile call (``lambda m: torch.compile(m)``, ``lambda m: m.compile()``), or None.
    :func:`find_sites` leaves a lambda's calls out: the lambda is a function of its own."""
    for lam in m.findall(func.body, m.Lambda()):
        finder = _Finder(imports)
        lam.body.visit(finder)  # type: ignore[union-attr]
        if finder.sites and _holds_directly(func, lam):
            return lam  # type: ignore[return-value]
    return None


def _holds_directly(func: cst.FunctionDef, node: cst.CSTNode) -> bool:
    """Whether ``node`` is in ``func``'s own body, not in a def or class nested there."""
    nested = m.findall(func.body, m.FunctionDef() | m.ClassDef())
    return not any(_holds(inner, node) for inner in nested)


def _norm(key: str, value: Any) -> Any:
    return "default" if key == "mode" and value is None else value


def _literal(arg: cst.Arg) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(_EMPTY.code_for_node(arg.value).strip())
    except (ValueError, SyntaxError):
        return False, None


def check(call: cst.Call | None, edits: dict[str, Any]) -> None:
    """Raise :class:`OwnCallRefused` where ``edits`` cannot be made to ``call`` safely (see the
    module docstring); nothing otherwise."""
    if call is None:
        return
    for arg in call.args:
        if arg.star:
            raise OwnCallRefused(
                f"the call passes {arg.star}{_code(arg.value)}: its options may come from there, so an edit of "
                f"{', '.join(edits)} cannot be made safely; expected literal keyword arguments", arg)
    by_key = {a.keyword.value: a for a in call.args if a.keyword is not None}
    for key in edits:
        arg = by_key.get(key)
        if arg is not None and not _literal(arg)[0]:
            raise OwnCallRefused(
                f"{key}={_code(arg.value)} is not a literal: the value comes from the program (a variable or an "
                f"expression); expected a literal {key}= to edit; change it by hand", arg)
    if "mode" in edits and _norm("mode", edits["mode"]) != "default" and "options" in by_key:
        raise OwnCallRefused(
            "the call passes options=, and torch.compile refuses mode and options together; expected a call "
            "without options= to set mode on", by_key["options"])


def _new_arg(key: str, value: Any) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(key), value=cst.parse_expression(py_literal(value)),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def _end(arg: cst.Arg) -> cst.BaseParenthesizableWhitespace:
    """The whitespace after ``arg`` and its comma: where its line ends (a comment) and what leads to
    the next token."""
    return arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else arg.whitespace_after_arg


def _lead(line: cst.TrailingWhitespace, lead: cst.BaseParenthesizableWhitespace,
          above: Sequence[cst.EmptyLine] = ()) -> cst.BaseParenthesizableWhitespace:
    """A line ending in ``line`` (its comment), then the comment lines ``above`` and ``lead``'s own,
    then ``lead``'s indent: how one argument's line gives way to the next token in a call laid out
    one argument a line (``lead`` itself where it is not a line break)."""
    if not isinstance(lead, cst.ParenthesizedWhitespace):
        return lead
    return lead.with_changes(first_line=line, empty_lines=[*above, *lead.empty_lines])


def _append(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` with ``arg`` after its last argument, in the call's layout: one argument a line where
    it is so (each comment stays on its own line, a comment line before ``)`` stays last), a
    trailing comma kept or not as the call has it."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    last = args[-1]
    end = _end(last)  # after the last argument: its line's comment, then the lead to ``)``
    step = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else call.whitespace_before_args
    if isinstance(step, cst.ParenthesizedWhitespace):  # one argument a line: the new one on a line of its own
        line = end.first_line if isinstance(end, cst.ParenthesizedWhitespace) else cst.TrailingWhitespace()
        into = step.with_changes(first_line=line, empty_lines=[])
        after = _lead(cst.TrailingWhitespace(), end)  # that line's comment stays with the argument before
    else:  # the new one on the last argument's line, which keeps its end (a comment, the lead to ``)``)
        into = cst.SimpleWhitespace(" ")
        after = end
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the new one takes it
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=into))
        args.append(arg.with_changes(comma=last.comma.with_changes(whitespace_after=after)))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=into), whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(arg.with_changes(whitespace_after_arg=after))
    return call.with_changes(args=args)


def _remove(call: cst.Call, index: int) -> cst.Call:
    """``call`` without its argument ``index``, which takes only its own line's end (its comment)
    with it: the comment lines above and below it, and the line of the one before, stay."""
    args = list(call.args)
    gone = args.pop(index)
    end = _end(gone)
    if index == 0:
        before = call.whitespace_before_args
        if isinstance(before, cst.ParenthesizedWhitespace) and isinstance(end, cst.ParenthesizedWhitespace):
            before = _lead(before.first_line, end, before.empty_lines)
            if not args and before.first_line.comment is None and not before.empty_lines:
                before = cst.SimpleWhitespace("")  # nothing left to hold a line: ``()``
        elif not args:
            before = cst.SimpleWhitespace("")
        return call.with_changes(args=args, whitespace_before_args=before)
    prev = args[index - 1]
    assert isinstance(prev.comma, cst.Comma)
    mine, last = prev.comma.whitespace_after, index == len(args)
    joined = (_lead(mine.first_line, end, mine.empty_lines)
              if isinstance(mine, cst.ParenthesizedWhitespace) and isinstance(end, cst.ParenthesizedWhitespace) else None)
    if last and joined is None and isinstance(mine, cst.ParenthesizedWhitespace):
        # ``m,  # c`` then the argument removed with ``)`` on its line: the line of ``m`` keeps its
        # comment and the comment lines below it, and ``)`` gets a line at the statement's indent
        joined = mine.with_changes(indent=True, last_line=cst.SimpleWhitespace(""))
    if last and not isinstance(gone.comma, cst.Comma):  # the last, without a trailing comma: nor has the one before
        args[index - 1] = prev.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=joined or end)
    else:
        args[index - 1] = prev.with_changes(comma=prev.comma.with_changes(whitespace_after=joined or (end if last else mine)))
    return call.with_changes(args=args)


def edited(site: OwnSite, edits: dict[str, Any]) -> cst.CSTNode | None:
    """``site.node`` with ``edits`` made (a new Decorator or Call), or None when it already is so.

    Raises:
        OwnCallRefused: see :func:`check`.
    """
    check(site.call, edits)
    if site.call is None:  # bare @torch.compile
        assert isinstance(site.node, cst.Decorator)
        wanted = {k: v for k, v in edits.items() if _norm(k, v) != OWN_CALL_DEFAULTS[k]}
        if not wanted:
            return None
        call = cst.Call(func=site.node.decorator, args=[])
        for key, value in wanted.items():
            call = _append(call, _new_arg(key, value))
        return site.node.with_changes(decorator=call)
    call = site.call
    for key, value in edits.items():
        value = _norm(key, value)
        index = next((i for i, a in enumerate(call.args) if a.keyword is not None and a.keyword.value == key), None)
        if index is None:
            if value != OWN_CALL_DEFAULTS[key]:
                call = _append(call, _new_arg(key, value))
            continue
        _, current = _literal(call.args[index])
        if _norm(key, current) == value:
            continue
        if value == OWN_CALL_DEFAULTS[key]:
            call = _remove(call, index)
        else:
            arg = call.args[index]
            call = call.with_changes(args=[*call.args[:index], arg.with_changes(value=cst.parse_expression(py_literal(value))),
                                           *call.args[index + 1:]])
    if call is site.call:
        return None
    if isinstance(site.node, cst.Decorator):
        return site.node.with_changes(decorator=call)
    return call


def current(site: OwnSite, key: str) -> tuple[bool, Any]:
    """``(known, value)`` of ``key`` in the program's call: torch's default when absent, ``known``
    False when it is not a literal or may come from ``**options``."""
    if site.call is None:
        return True, OWN_CALL_DEFAULTS[key]
    if any(a.star for a in site.call.args):
        return False, None
    arg = next((a for a in site.call.args if a.keyword is not None and a.keyword.value == key), None)
    if arg is None:
        return True, OWN_CALL_DEFAULTS[key]
    ok, value = _literal(arg)
    return ok, _norm(key, value) if ok else None


class _Statement(cst.CSTVisitor):
    """The statement line (and its small statement) in a function's own body that holds ``node``."""

    def __init__(self, node: cst.CSTNode) -> None:
        self.node = node
        self.line: cst.SimpleStatementLine | None = None
        self.small: cst.BaseSmallStatement | None = None
        self.loop: cst.For | None = None
        self._loops: list[cst.For] = []
        self._line: cst.SimpleStatementLine | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_For(self, node: cst.For) -> None:
        self._loops.append(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._loops.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is self.node and self._line is not None and self.line is None:
            self.line = self._line
            self.small = next((s for s in self._line.body if _holds(s, node)), None)
            self.loop = self._loops[-1] if self._loops else None
        return super().on_visit(node)


def statement_of(func: cst.FunctionDef | cst.Module, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
    """The small statement of ``func``'s own body (a module's top level for a ``Module``; nested
    defs and classes left out) that holds ``node`` (``model = torch.compile(model)`` for its call),
    or None."""
    where = _Statement(node)
    (func if isinstance(func, cst.Module) else func.body).visit(where)
    return where.small


def module_sites(module: cst.Module, imports: dict[str, str]) -> list[OwnSite]:
    """The compile calls at ``module``'s top level (``model = torch.compile(Net())`` in a script,
    under ``if __name__ == "__main__":`` too), as :func:`find_sites` reads a function's body;
    functions and classes are left out (theirs). No plan target names such a call."""
    finder = _Finder(imports)
    module.visit(finder)
    return finder.sites


def _holds(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    found = []

    class _V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if n is node:
                found.append(n)
            return not found

    tree.visit(_V())
    return bool(found)


def _kwargs(call: cst.Call, skip_first: bool) -> list[str]:
    """``key=value`` for each keyword argument of ``call`` as the program wrote it (``**opts`` kept)."""
    out = []
    for i, arg in enumerate(call.args):
        if skip_first and i == 0 and arg.keyword is None and not arg.star:
            continue
        if arg.keyword is not None:
            out.append(f"{arg.keyword.value}={_EMPTY.code_for_node(arg.value).strip()}")
        else:
            out.append(f"{arg.star}{_EMPTY.code_for_node(arg.value).strip()}")
    return out


def _in_place(func: cst.FunctionDef, site: OwnSite, edits: dict[str, Any]) -> cst.FunctionDef:
    """``func`` with ``edits`` made on the call at ``site`` (``func`` itself where it already is so)."""
    new = edited(site, edits) if edits else None
    return func if new is None else func.deep_replace(site.node, new)  # type: ignore[return-value]


def regional(func: cst.FunctionDef, site: OwnSite, edits: dict[str, Any], path: str,
             kind: str | None = None, cls: cst.ClassDef | None = None) -> cst.FunctionDef:
    """``func`` with the program's whole-model compile at ``site`` turned into regional compilation
    at the call site: ``model = torch.compile(model, **kw)`` (or ``model.compile(**kw)``, or
    ``return torch.compile(model, **kw)``) becomes ``for block in model.<path>: block.compile(**kw)``
    (``model.compile_repeated_blocks(**kw)`` where ``path`` is :data:`REPEATED_BLOCKS`), the call's
    keyword arguments kept and ``edits`` made on them. ``kind`` is the container's class as the
    source says it (:func:`rewriter.rewrite.regional_path.check`), which picks how the loop walks it
    (:func:`rewriter.compile_facts.regional_iterable`: ``model.<path>.values()`` for a
    ``ModuleDict``, ``model.<path>.children()`` where it is not known). Each block is compiled in place
    (``nn.Module.compile``: no block is wrapped, its hooks kept), and the name the program held still
    names the model, now the module itself: where the program's call bound torch.compile's wrapper,
    its state_dict keys lose the ``_orig_mod.`` prefix (the rewrite warns where SRC saves or loads
    them, :mod:`rewriter.rewrite.checkpoint_keys`). Where the compile is regional already, only ``edits`` are made on its call
    (``func`` unchanged where it already is so: idempotence). ``cls``: the class that holds
    ``func``, where the program reads ``self.<attr>._orig_mod`` in its other methods.

    Raises:
        OwnCallRefused: a call that passes ``disable=True`` where ``edits`` do not turn it on
            (``disable: false``), a decorator, a compile whose result is discarded or not a plain
            assignment/return of one module, a statement line holding several statements, or a read
            of ``<model>._orig_mod`` (:func:`_reads_the_wrapper`).
    """
    if site.kind == "decorator" or site.call is None:
        raise OwnCallRefused("regional turns a torch.compile(model) / model.compile() call regional; the target "
                             "carries a @torch.compile decorator: compile the block instead (strategy region on its class)",
                             site.node)
    if turned_off(site.call) and edits.get("disable") is not False:
        raise OwnCallRefused("regional: the program's compile passes disable=True (it compiles nothing), and the "
                             "regional form keeps its keyword arguments, so it would compile no block either; add "
                             "disable: false to own_call to compile each block, or drop regional", site.node)
    where = _Statement(site.call)
    func.body.visit(where)
    line, small = where.line, where.small
    if line is None or small is None:
        raise OwnCallRefused("regional: the compile call is not a statement of the function's own body", site.node)
    if site.kind == "method":
        read = _method_compile(site, where, path)
        if read is None:  # already regional: only the keys change
            return _in_place(func, site, edits)
        model, before, kwargs = read
        first = None
    else:
        model, before, kwargs, first = _function_compile(func, site, small)
    if before and isinstance(first, (cst.Name, cst.Attribute)):
        # compiled = torch.compile(model): the regional form compiles model's own blocks in place
        eager = _calls_the_module(func, _code(first), site.call)
        if eager is not None:
            raise OwnCallRefused(f"regional: the function also calls {_code(first)} itself, which torch.compile left "
                                 f"eager beside {model}; compiled regionally, its blocks are compiled in place and "
                                 f"{_code(first)} would run them compiled too", eager)
    wrapped = _reads_the_wrapper(func, model, cls)
    if wrapped is not None:
        raise OwnCallRefused(f"regional: the function reads {model}._orig_mod, the module torch.compile's wrapper "
                             f"holds; compiled regionally {model} is the module itself and has no _orig_mod", wrapped)
    probe = cst.parse_expression(f"f({', '.join(kwargs)})")
    assert isinstance(probe, cst.Call)
    new_call = (edited(OwnSite(probe, probe, "method"), edits) if edits else None) or probe
    args = _EMPTY.code_for_node(new_call).strip()[2:-1]
    if path == REPEATED_BLOCKS:
        stmts = [*before, f"{model}.{REPEATED_BLOCKS}({args})"]
    else:
        used = {n.value for n in _names_in(func)}
        var = next(v for v in ("block", "layer", "_block", "_stackpart_block") if v not in used)
        stmts = [*before, f"for {var} in {regional_iterable(f'{model}.{path}', kind)}:\n    {var}.compile({args})"]
    if isinstance(small, cst.Return):
        stmts.append(f"return {model}")
    if len(line.body) != 1:
        raise OwnCallRefused("regional: the compile shares its line with other statements; expected it on a "
                             "line of its own", site.node)
    new = [cst.parse_statement(s + "\n") for s in stmts]
    return func.deep_replace(line, cst.FlattenSentinel(_with_comments(new, line, len(before))))  # type: ignore[return-value]


def _method_compile(site: OwnSite, where: "_Statement", path: str) -> tuple[str, list[str], list[str]] | None:
    """``model.compile(**kw)`` at ``site`` read for :func:`regional`: ``(model, statements before the
    loop, keyword arguments)``, or None where the call is regional already over ``path`` (a
    ``for b in model.<path>: b.compile()`` loop, or ``compile_repeated_blocks``).

    Raises:
        OwnCallRefused: a loop of the program's own over another container, or a call that is not a
            statement of its own.
    """
    call, small, loop = site.call, where.small, where.loop
    assert call is not None
    owner = call.func.value if isinstance(call.func, cst.Attribute) else None
    looped = (loop is not None and isinstance(loop.target, cst.Name) and isinstance(owner, cst.Name)
              and owner.value == loop.target.value)
    if looped and (container_of(_code(loop.iter)).endswith("." + path) or container_of(_code(loop.iter)) == path):
        return None
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == REPEATED_BLOCKS:
        return None
    if looped:
        raise OwnCallRefused(f"regional: the program's compile is regional already, over {_code(loop.iter)}; "
                             f"regional: {path} would nest a second loop inside it", site.node)
    if not isinstance(small, cst.Expr) or small.value is not call or owner is None:
        raise OwnCallRefused("regional: expected the module's compile as a statement of its own "
                             "(model.compile(...))", site.node)
    return _code(owner), [], _kwargs(call, skip_first=False)


def _function_compile(func: cst.FunctionDef, site: OwnSite, small: cst.BaseSmallStatement
                      ) -> tuple[str, list[str], list[str], cst.BaseExpression]:
    """``model = torch.compile(model, **kw)`` (or annotated, or ``return torch.compile(m)``) at
    ``site`` read for :func:`regional`: ``(the name the program holds the model by, statements
    before the loop, keyword arguments, torch.compile's first argument)``.

    Raises:
        OwnCallRefused: no module as the first argument, a result not bound to one name nor
            returned, or a compile inside a conditional expression.
    """
    call = site.call
    assert call is not None
    first = first_positional(call)
    if first is None:
        raise OwnCallRefused("regional: expected torch.compile(model, ...) with the model as its first argument",
                             site.node)
    annotated = isinstance(small, cst.AnnAssign) and small.value is call
    if (isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1) or annotated:
        # model = torch.compile(model), or model: nn.Module = torch.compile(model) (its annotation kept)
        target = small.target if annotated else small.targets[0].target  # type: ignore[union-attr]
        if not isinstance(target, (cst.Name, cst.Attribute)):
            raise OwnCallRefused("regional: expected the compiled model bound to one name", site.node)
        model = _code(target)
        note = f": {_code(small.annotation.annotation)}" if annotated else ""  # type: ignore[union-attr]
        before = [] if _code(first) == model else [f"{model}{note} = {_code(first)}"]
        if not before and model.endswith(".forward"):  # model.forward = torch.compile(model.forward)
            model = model.removesuffix(".forward")
    elif isinstance(small, cst.Return) and small.value is call:
        used = {n.value for n in _names_in(func)}
        model = _code(first) if isinstance(first, (cst.Name, cst.Attribute)) else next(
            v for v in ("model", "module", "_model") if v not in used)
        before = [] if model == _code(first) else [f"{model} = {_code(first)}"]
    elif isinstance(small, (cst.Assign, cst.AnnAssign, cst.Return)) and isinstance(small.value, cst.IfExp):
        raise OwnCallRefused("regional: the compile is a branch of a conditional expression, which a loop over the "
                             "blocks cannot replace; expected it as a statement of its own (write the condition "
                             "as an if statement: if compiled: model = torch.compile(model))", site.node)
    else:
        raise OwnCallRefused("regional: the result of torch.compile is not bound to a name (model = "
                             "torch.compile(model)) or returned; such a call compiles nothing the program calls",
                             site.node)
    return model, before, _kwargs(call, skip_first=True), first


def _with_comments(new: list[cst.BaseStatement], line: cst.SimpleStatementLine, compiles: int) -> list[cst.BaseStatement]:
    """``new`` (the statements replacing ``line``) keeping every comment of ``line``: the lines above
    it stay above; a comment inside the call (between its arguments) becomes a line of its own above
    the new code; its end-of-line comment, which annotated the compile, ends the line that compiles
    now, ``new[compiles]`` (the ``block.compile(...)`` inside a loop, not the loop's header, nor an
    assignment written before it), with its own spacing (docs/decisions.md, "A regional edit keeps
    the line's comment on the compile")."""
    trailing = line.trailing_whitespace.comment
    inside = [c for c in comments_within(line) if c is not trailing]
    out = list(new)
    out[0] = out[0].with_changes(leading_lines=[*line.leading_lines,
                                                *(cst.EmptyLine(indent=True, comment=c) for c in inside)])
    if trailing is not None:
        stmt = out[compiles]
        if isinstance(stmt, cst.For) and isinstance(stmt.body, cst.IndentedBlock):
            body = stmt.body.body
            last = body[-1].with_changes(trailing_whitespace=line.trailing_whitespace)
            stmt = stmt.with_changes(body=stmt.body.with_changes(body=[*body[:-1], last]))
        elif isinstance(stmt, cst.SimpleStatementLine):
            stmt = stmt.with_changes(trailing_whitespace=line.trailing_whitespace)
        out[compiles] = stmt
    return out


def _reads_the_wrapper(func: cst.FunctionDef, model: str, cls: cst.ClassDef | None = None) -> cst.CSTNode | None:
    """The first ``<model>._orig_mod`` in ``func`` (the program reaching through torch.compile's
    ``OptimizedModule`` to the module it wraps: ``torch.save(model._orig_mod.state_dict(), ...)``,
    ``raw = model._orig_mod``), then, where ``model`` is an attribute of ``self``
    (``self.block = torch.compile(Block())`` in ``__init__``), in the methods of ``cls``, the class
    that holds ``func``; or None. The regional form and ``disable=True`` leave ``model`` the module
    itself, where that attribute raises ``AttributeError``. Read statically, by the name as written:
    an alias (``m = model; m._orig_mod``) or a read in another file is not seen."""
    scopes: list[cst.CSTNode] = [func]
    if cls is not None and model.startswith("self."):
        scopes.append(cls)
    for scope in scopes:
        for attr in m.findall(scope, m.Attribute(attr=m.Name("_orig_mod"))):
            if _code(attr.value) == model:  # type: ignore[union-attr]
                return attr
    return None


def bound_name(func: cst.FunctionDef, site: OwnSite) -> str | None:
    """The name a ``torch.compile(...)`` call at ``site`` binds its result to in ``func``'s own
    body, as written (``model``, ``self.block``), or None: a decorator, ``module.compile()`` (which
    compiles in place and binds nothing), a result returned or passed on."""
    if site.kind != "call" or site.call is None:
        return None
    small = statement_of(func, site.call)
    if isinstance(small, cst.Assign) and small.value is site.call and len(small.targets) == 1:
        target = small.targets[0].target
    elif isinstance(small, cst.AnnAssign) and small.value is site.call:
        target = small.target
    else:
        return None
    return _code(target) if isinstance(target, (cst.Name, cst.Attribute)) else None


def check_unwrapped(func: cst.FunctionDef, site: OwnSite, edits: dict[str, Any],
                    cls: cst.ClassDef | None = None) -> None:
    """Refuse ``edits`` that turn off (``disable: true``) the program's ``name = torch.compile(module,
    ...)`` at ``site`` (on in the source) where ``func``, or for ``self.<attr>`` a method of ``cls``
    (the class that holds ``func``), reads ``name._orig_mod``: with ``disable=True`` torch.compile
    returns ``module`` itself, not its ``OptimizedModule`` wrapper, and a plain ``nn.Module`` has no
    ``_orig_mod``, so the rewritten program would raise ``AttributeError`` there. Nothing is
    refused for a call already off (the edit changes nothing), a decorator or ``module.compile()``
    (neither binds a wrapper), or a result not bound to a name (:func:`bound_name`).

    Raises:
        OwnCallRefused: at the ``_orig_mod`` read (``node``), naming the call and the way through
            (``getattr(name, "_orig_mod", name)``, which reads the module either way).
    """
    if edits.get("disable") is not True or site.call is None or turned_off(site.call):
        return
    name = bound_name(func, site)
    if name is None:
        return
    read = _reads_the_wrapper(func, name, cls)
    if read is None:
        return
    raise OwnCallRefused(
        f"disable: true makes {_code(site.call)} return the module itself, not torch.compile's wrapper "
        f"(OptimizedModule), and the program reads {name}._orig_mod on this line, the module that wrapper holds: "
        f"a plain module has no _orig_mod, so the rewritten program would raise AttributeError; edit that read "
        f"to work either way (getattr({name}, \"_orig_mod\", {name})), or drop disable: true", read)


def _calls_the_module(func: cst.FunctionDef, module: str, compile_call: cst.Call) -> cst.CSTNode | None:
    """The first call of ``module`` itself in ``func`` (``module(x)``, ``module.forward(x)``) outside
    ``compile_call``, or None: the program runs the module it passed to ``torch.compile`` eager there,
    which a regional compile in place would change."""
    inside = {id(n) for n in m.findall(compile_call, m.Call())}
    for c in m.findall(func, m.Call()):
        if id(c) in inside:
            continue
        callee = c.func  # type: ignore[union-attr]
        if isinstance(callee, cst.Attribute) and callee.attr.value == "forward":
            callee = callee.value
        if _code(callee) == module:
            return c
    return None


def _names_in(func: cst.FunctionDef) -> list[cst.Name]:
    out: list[cst.Name] = []

    class _V(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            out.append(node)

    func.visit(_V())
    return out
