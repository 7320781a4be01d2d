"""``mark_dynamic``: ``torch._dynamo.mark_dynamic(arg, dim, min=, max=)`` (``strict: false``:
``maybe_mark_dynamic(arg, dim)``; ``unbacked: true``:
``torch._dynamo.decorators.mark_unbacked(arg, dim)``) right after ``arg`` is bound, so the compiled region it enters
is traced once with a symbolic size instead of recompiling per size (torch.compiler "Dynamic
shapes" docs).

A parameter is marked at the top of the body (after the docstring); a local at its first
top-level binding. The call must run eagerly: marking inside a compiled frame is an error in
Dynamo, which :mod:`rewriter.consistency` refuses before anything is written.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..errors import StackpartError, near_names
from ..plan import MarkDynamicAction
from .base import TargetedCommand, call_args, insert_statement


def _binding_index(func: cst.FunctionDef, name: str) -> int | None:
    """Index of the first top-level statement that assigns ``name`` (plain, annotated, tuple)."""
    target = m.Name(name)
    binds = m.OneOf(
        m.Assign(targets=[m.ZeroOrMore(), m.AssignTarget(target=target | m.Tuple(elements=[m.ZeroOrMore(), m.Element(target), m.ZeroOrMore()])), m.ZeroOrMore()]),
        m.AnnAssign(target=target, value=m.DoNotCare()),
    )
    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else ()
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(m.matches(s, binds) for s in stmt.body):
            return i
    return None


def _top_level_names(func: cst.FunctionDef) -> list[str]:
    """Names assigned by the top-level statements of ``func`` (the candidates for near names)."""
    names = []
    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else ()
    for stmt in body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
            if isinstance(small, cst.AnnAssign):
                targets = [small.target]
            for target in targets:
                elements = [e.value for e in target.elements] if isinstance(target, cst.Tuple) else [target]
                names += [e.value for e in elements if isinstance(e, cst.Name)]
    return names


MARK_CALLS = {"mark_dynamic", "maybe_mark_dynamic", "mark_unbacked"}
#: The upper bound written when a plan gives only ``min``: the largest int64 (sizes are int64).
OPEN_MAX = 2**63 - 1


def _mark_of(stmt: cst.BaseStatement) -> tuple[str, int] | None:
    """``(arg, dim)`` of a ``(maybe_)mark_dynamic(arg, dim, ...)`` statement, also inside the
    ``if arg is not None:`` guard this action writes for an optional parameter."""
    if isinstance(stmt, cst.If) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock) and len(stmt.body.body) == 1:
        inner = _mark_of(stmt.body.body[0])
        guarded = m.matches(stmt.test, m.Comparison(left=m.Name(inner[0]) if inner else m.DoNotCare(),
                                                    comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))]))
        return inner if inner and guarded else None
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    call = stmt.body[0].value
    if not isinstance(call, cst.Call) or len(call.args) < 2:
        return None
    name = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", None)
    first, second = call.args[0].value, call.args[1].value
    if name in MARK_CALLS and isinstance(first, cst.Name) and isinstance(second, cst.Integer):
        return first.value, int(second.value)
    return None


def _defaults_to_none(func: cst.FunctionDef, arg: str) -> bool:
    """Whether ``arg`` is a parameter whose default is ``None`` (T5Stack.forward's
    ``encoder_hidden_states=None``: the encoder stack calls it without one)."""
    params = (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)
    return any(p.name.value == arg and m.matches(p.default, m.Name("None")) for p in params)


def mark_dynamic_call(torch: str, action: MarkDynamicAction) -> str:
    """The statement text, e.g. ``torch._dynamo.mark_dynamic(x, 1, min=2, max=4096)``, or
    ``torch._dynamo.maybe_mark_dynamic(x, 1)`` for ``strict: false``, or
    ``torch._dynamo.decorators.mark_unbacked(x, 1)`` for ``unbacked: true`` (where torch defines
    it: ``torch._dynamo`` itself does not export the name, torch 2.13 checked, and Dynamo's own
    0/1-specialisation message names this path)."""
    if action.unbacked:
        return f"{torch}._dynamo.decorators.mark_unbacked({action.arg}, {action.dim})"
    if not action.strict:
        return f"{torch}._dynamo.maybe_mark_dynamic({action.arg}, {action.dim})"
    # min < 2 is written as 2: Dynamo specialises sizes 0 and 1 whatever the mark says (SP106)
    low = None if action.min is None else max(action.min, 2)
    high = action.max
    # one bound alone raises "AssertionError: not simple sympy type NoneType" on the first
    # compiled call (torch 2.13, measured): the other is written as Dynamo's own open end
    if (low is None) != (high is None):
        low, high = (2 if low is None else low), (OPEN_MAX if high is None else high)
    kwargs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
    extra = ", " + call_args(kwargs) if kwargs else ""
    return f"{torch}._dynamo.mark_dynamic({action.arg}, {action.dim}{extra})"


class MarkDynamicCommand(TargetedCommand):
    """Insert one ``mark_dynamic`` statement where ``arg`` is bound in the target."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "mark a dim dynamic where the input enters compiled code"
    action: MarkDynamicAction

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        assert self.tree is not None
        params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
        after = None
        if self.action.arg not in params:
            after = _binding_index(func, self.action.arg)
            if after is None:
                near = near_names(self.action.arg, [*params - {"self", "cls"}, *_top_level_names(func)])
                raise StackpartError(
                    f"{self.action.arg!r} is neither a parameter of {self.qualname} nor bound "
                    "at its top level",
                    hint=(f"{near} " if near else "")
                    + "mark_dynamic needs a name bound before the compiled region is called",
                )
        code = mark_dynamic_call(self.torch, self.action)
        if _defaults_to_none(func, self.action.arg):
            # marking None raises AttributeError on the first call (T5's encoder stack, found by
            # running rewritten transformers models); only a tensor is marked
            code = f"if {self.action.arg} is not None:\n    {code}\n"
        # one mark per (arg, dim): the plan's call replaces another form of it (strict <-> maybe,
        # other bounds) rather than stacking a second, contradicting call beside it
        key = (self.action.arg, self.action.dim)
        return insert_statement(self.tree, func, code, after, replaces=lambda stmt: _mark_of(stmt) == key,
                                binds={self.torch: self.torch_import()})
