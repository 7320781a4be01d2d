"""``branchless``: a data-dependent ``if`` inside compiled code rewritten as ``torch.where``.

Dynamo cannot trace ``if <tensor condition>:`` (torch 2.13: "Data-dependent branching ... Hint: Use
`torch.cond` to express dynamic control flow", its reason ``generic_jump TensorVariable``): the
frame breaks at the ``if`` and each side resumes in a graph of its own. Where both sides only
assign plain names, the branch is the same as evaluating both sides and selecting elementwise
(the torch.compile tutorial's ``bar_fixed``; ``torch.where`` is the hint's branchless form)::

    if b.sum() < 0:                      b = torch.where(b.sum() < 0, b * -1, b)
        b = b * -1

One ``name = torch.where(cond, value, other)`` per name the ``if`` assigns, in the order of the
``if`` body (then names only the ``else`` assigns): ``value`` is the body's value (or the old name
where only the ``else`` assigns it), ``other`` the ``else`` value or the old name, which must then
be bound before the ``if`` (a parameter or an earlier assignment in the function). With more than
one name, or a condition over several lines, the condition is evaluated once into a fresh name
first (``cond = ...``). ``x += e`` is read as ``x = x + e``.

Refused, with one line each: an ``elif``; a statement other than ``name = expr``/``name op= expr``
(or ``pass``) in either branch: ``return``, an expression statement (a call for its side
effect), an attribute or subscript target, unpacking; an in-place call (``x.add_(...)``, a method
ending in ``_``) in a value, since it would now run on both sides; a name assigned twice in one
branch; an ``else`` value that reads a name the rewrite would have reassigned out of its order.

A call in a value is kept (``h = self.norm(h)``) and now runs whichever side is taken: a module
that updates state when called (a BatchNorm's running statistics in training) updates it on both
sides, which validation, comparing outputs, may not see.

Unsafe (:data:`rewriter.plan.UNSAFE_ACTIONS`): both sides are evaluated, so an inf or NaN the
side not taken computes can reach gradients: ``torch.where`` passes the unselected side a zero
gradient, and zero times an infinite local derivative is NaN (measured, torch 2.13:
``torch.where(x > 0, x.sqrt(), torch.zeros_like(x))`` at ``x = 0`` gives ``x`` the gradient NaN,
though the side selected there is the constant);
a side that raises for the other case (an index out of range) now always runs. Validation (the
numerics judge) decides; written only with ``--unsafe`` or after a passing validation.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..errors import StackpartError
from ..plan import BranchlessAction
from .base import TargetedCommand, comments_within

#: ``x op= e`` → the binary operator of ``x = x op e``.
_OPS: dict[type, type] = {
    cst.AddAssign: cst.Add, cst.SubtractAssign: cst.Subtract, cst.MultiplyAssign: cst.Multiply,
    cst.DivideAssign: cst.Divide, cst.FloorDivideAssign: cst.FloorDivide, cst.ModuloAssign: cst.Modulo,
    cst.PowerAssign: cst.Power, cst.MatrixMultiplyAssign: cst.MatrixMultiply, cst.BitAndAssign: cst.BitAnd,
    cst.BitOrAssign: cst.BitOr, cst.BitXorAssign: cst.BitXor, cst.LeftShiftAssign: cst.LeftShift,
    cst.RightShiftAssign: cst.RightShift,
}
#: Expressions that bind tighter than any binary operator: written without parentheses on the right.
_ATOMS = (cst.Name, cst.Call, cst.Attribute, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString)


class Refused(Exception):
    """Why an ``if`` cannot be made branchless (one clause, no location)."""


def _names_read(node: cst.CSTNode) -> set[str]:
    """Plain names an expression mentions (attribute names after a dot left out)."""
    found: set[str] = set()

    class _V(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

    node.visit(_V())
    return found


def _in_place_call(node: cst.CSTNode) -> str | None:
    """The first in-place method call (``x.add_(...)``: torch's trailing-underscore convention) in
    ``node``, as its method name, or None."""
    for call in m.findall(node, m.Call(func=m.Attribute())):
        attr = call.func.attr.value  # type: ignore[attr-defined]
        if attr.endswith("_") and not attr.endswith("__"):
            return attr
    return None


def branch_assignments(block: cst.BaseSuite, side: str) -> list[tuple[str, cst.BaseExpression]]:
    """``[(name, value)]`` the branch ``block`` assigns, in order (``x += e`` as ``x = x + e``).

    Raises:
        Refused: a statement other than a plain-name assignment or ``pass``, an in-place call, a
            tuple value, a name assigned twice.
    """
    if isinstance(block, cst.SimpleStatementSuite):
        smalls = list(block.body)
    else:
        smalls = []
        for stmt in block.body:  # type: ignore[attr-defined]
            if not isinstance(stmt, cst.SimpleStatementLine):
                raise Refused(f"the {side} holds a compound statement ({type(stmt).__name__.lower()}); "
                              "expected only `name = expr` assignments")
            smalls += list(stmt.body)
    out: list[tuple[str, cst.BaseExpression]] = []
    for small in smalls:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Assign):
            if len(small.targets) != 1:
                raise Refused(f"the {side} chains assignments (`a = b = ...`); expected one target per statement")
            target, value = small.targets[0].target, small.value
        elif isinstance(small, cst.AugAssign) and type(small.operator) in _OPS:
            target = small.target
            if not isinstance(target, cst.Name):
                raise Refused(f"the {side} assigns to {_what(target)}; only plain names can be selected with torch.where")
            right = small.value
            if not isinstance(right, _ATOMS) and not right.lpar:
                right = right.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            value = cst.BinaryOperation(cst.Name(target.value), _OPS[type(small.operator)](), right)
        else:
            kind = {cst.Return: "a return", cst.Expr: "an expression statement (a call for its side effect)",
                    cst.AnnAssign: "an annotated assignment", cst.Raise: "a raise", cst.Del: "a del",
                    cst.Break: "a break", cst.Continue: "a continue"}.get(type(small), type(small).__name__.lower())
            raise Refused(f"the {side} holds {kind}; expected only `name = expr` assignments")
        if not isinstance(target, cst.Name):
            raise Refused(f"the {side} assigns to {_what(target)}; only plain names can be selected with torch.where")
        if isinstance(value, cst.Tuple) and not value.lpar:
            raise Refused(f"the {side} assigns a tuple to {target.value}; torch.where selects tensors")
        if m.findall(value, m.Yield() | m.Await() | m.NamedExpr()):
            raise Refused(f"the {side}'s value for {target.value} has a yield, await or `:=`")
        inplace = _in_place_call(value)
        if inplace:
            raise Refused(f"the {side} calls the in-place {inplace}() for {target.value}: both sides would run")
        if any(name == target.value for name, _ in out):
            raise Refused(f"the {side} assigns {target.value} twice")
        out.append((target.value, value))
    return out


def _what(target: cst.BaseExpression) -> str:
    if isinstance(target, cst.Attribute):
        return "an attribute"
    if isinstance(target, cst.Subscript):
        return "a subscript"
    if isinstance(target, (cst.Tuple, cst.List)):
        return "several names (unpacking)"
    return type(target).__name__.lower()


def bound_before(func: cst.FunctionDef, stop: cst.CSTNode) -> set[str]:
    """Names ``func`` binds before the statement ``stop`` in source order: its parameters and the
    targets of assignments, ``for``, ``with ... as`` and imports in statements before it (nested
    ``def``/``class`` bodies aside)."""
    names = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
    for star in (func.params.star_arg, func.params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    done = False

    def targets(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for e in node.elements:
                targets(e.value)
        elif isinstance(node, cst.StarredElement):
            targets(node.value)

    class _V(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal done
            if node is stop:
                done = True
            if done:
                return False
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not func:
                names.add(node.name.value)
                return False
            if isinstance(node, cst.AssignTarget):
                targets(node.target)
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                targets(node.target)
            elif isinstance(node, (cst.For, cst.CompFor)):
                targets(node.target)
            elif isinstance(node, cst.AsName):
                targets(node.name)
            elif isinstance(node, cst.NamedExpr):
                targets(node.target)
            return True

    func.body.visit(_V())
    return names


def _fresh(func: cst.FunctionDef, base: str = "cond") -> str:
    """``base`` (``cond``), or ``cond_2``, ``cond_3``... where the function already uses the name."""
    used = _names_read(func.body) | bound_before(func, cst.Pass())
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}_{i}"
    return name


def branchless_statements(func: cst.FunctionDef, node: cst.If, torch: str, cond_code: str) -> list[cst.BaseStatement]:
    """The statements that replace ``node`` (see the module docstring).

    Raises:
        Refused: the ``if`` is not of the accepted form.
    """
    if isinstance(node.orelse, cst.If):
        raise Refused("it has an elif; expected an if with at most an else")
    body = branch_assignments(node.body, "if body")
    other = branch_assignments(node.orelse.body, "else branch") if isinstance(node.orelse, cst.Else) else []
    if not body and not other:
        raise Refused("neither branch assigns a name; nothing to select")
    other_map = dict(other)
    order = [n for n, _ in body] + [n for n, _ in other if n not in dict(body)]
    bound = bound_before(func, node)
    for name in order:
        if name not in bound and not (name in dict(body) and name in other_map):
            side = "else branch" if name in dict(body) else "if body"
            raise Refused(f"{name} is not assigned in the {side} and not bound before the if: there is no old value to keep")
    # an else value reads a name the else assigns: it must see the value the else gives it at that
    # point, and the rewrite has by then reassigned exactly the names emitted before it
    else_at = {n: i for i, (n, _) in enumerate(other)}
    for i, name in enumerate(order):
        if name not in other_map:
            continue
        for read in _names_read(other_map[name]) & set(else_at):
            if read != name and (else_at[read] < else_at[name]) != (order.index(read) < i):
                raise Refused(f"the else branch's value for {name} reads {read}, which the rewrite would assign "
                              "in another order than the else branch")
    multi_line = "\n" in cond_code
    cond: cst.BaseExpression = node.test
    out: list[cst.BaseStatement] = []
    if len(order) > 1 or multi_line:
        temp = _fresh(func)
        out.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(temp))], node.test)]))
        cond = cst.Name(temp)
    where = cst.Attribute(cst.Name(torch), cst.Name("where"))
    body_map = dict(body)
    for name in order:
        value = body_map.get(name, cst.Name(name))
        alt = other_map.get(name, cst.Name(name))
        call = cst.Call(where, [cst.Arg(cond), cst.Arg(value), cst.Arg(alt)])
        out.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], call)]))
    # the if's own comments (its lines, its branches') go above the selections, none lost
    kept = [cst.EmptyLine(indent=True, comment=c) for c in comments_within(node)]
    out[0] = out[0].with_changes(leading_lines=[*node.leading_lines, *kept])
    return out


def _already(func: cst.FunctionDef, stmt: cst.BaseStatement, torch: str) -> bool:
    """Whether ``stmt`` is what this action writes: ``x = torch.where(...)``, or ``cond = ...`` (the
    condition's fresh name, :func:`_fresh`) read as the first argument of a ``torch.where`` in the
    function: the ``if`` was made branchless already."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return False
    assign = stmt.body[0]
    where = m.Attribute(m.Name(torch), m.Name("where"))
    if m.matches(assign.value, m.Call(func=where)):
        return True
    target = assign.targets[0].target if len(assign.targets) == 1 else None
    if not isinstance(target, cst.Name) or not target.value.startswith("cond"):
        return False
    return bool(m.findall(func, m.Call(func=where, args=[m.Arg(m.Name(target.value)), m.ZeroOrMore()])))


class BranchlessCommand(TargetedCommand):
    """Replace the ``if`` at the plan's ``line`` in the target with ``torch.where`` selections."""

    VISIT_TARGET_BODY = False
    DESCRIPTION = "data-dependent if rewritten as torch.where"
    action: BranchlessAction

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        assert self.tree is not None
        positions = self._positions()
        at: list[cst.BaseStatement] = []
        lines: list[int] = []

        class _Find(cst.CSTVisitor):
            def on_visit(inner, node: cst.CSTNode) -> bool:  # noqa: N805
                if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not func:
                    return False
                if isinstance(node, (cst.If, cst.SimpleStatementLine)) and node in positions:
                    line = positions[node].start.line
                    if isinstance(node, cst.If):
                        lines.append(line)
                    if line == self.action.line and not at:
                        at.append(node)
                return True

        func.visit(_Find())
        where = f"{self.action.file}:{self.action.line}"
        if not at or not isinstance(at[0], cst.If):
            if at and _already(func, at[0], self.torch):
                return func
            near = sorted(lines, key=lambda n: abs(n - self.action.line))[:3]
            raise StackpartError(f"{where}: no if statement at line {self.action.line} of {self.qualname}"
                                 + (f"; its ifs are at line(s) {', '.join(map(str, sorted(near)))}" if near else "; it has no if"))
        node = at[0]
        try:
            new = branchless_statements(func, node, self.torch, self.tree.code_for_node(node.test))
        except Refused as exc:
            raise StackpartError(f"{where}: cannot make this if branchless: {exc}") from None

        class _Swap(cst.CSTTransformer):
            def on_leave(inner, original: cst.CSTNode, updated: cst.CSTNode):  # noqa: N805, ANN202
                if original is node:
                    return cst.FlattenSentinel(new)
                return updated

        return func.visit(_Swap())  # type: ignore[return-value]
