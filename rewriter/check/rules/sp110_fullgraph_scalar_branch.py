"""SP110: a Python branch on a value read out of a tensor (``.item()``, ``.tolist()``) in a
``fullgraph=True`` region: an error at the first call.

Source: the error torch 2.13 raises (``backend="eager"``, CPU), ``torch._dynamo.exc.UserError:
Consider annotating your code using torch._check*(). Could not guard on data-dependent expression
zuf0 > 0.0 ...``, for ``if x.sum().item() > 0:`` in a ``@torch.compile(fullgraph=True)`` function;
``torch/_dynamo/variables/tensor.py`` (``Tensor.item``): "We enable capture_scalar_outputs when
full_graph=True by default"; PyTorch docs, "Troubleshooting GuardOnDataDependentSymNode Errors"
(https://docs.pytorch.org/docs/main/compile/dynamic_shapes_troubleshooting_guardon_errors.html).
tests/test_check_fullgraph_rules.py runs every example below under torch.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts import FileFacts
from ..rule import Invalid, Rule, Valid
from .sp104_data_dependent_branch import tensor_params, value_dependent

# The calls that read a tensor into Python; a file that reaches these rules calls one of them.
SCALAR_CALLS = frozenset({"item", "tolist", "int", "float", "bool"})
SCALAR_NEEDLE = r"\.(?:item|tolist)\b|\b(?:int|float|bool)[ \t]*\("
# builtins that turn Python numbers (or a list of them) into a Python number
NUMERIC_BUILTINS = {f"builtins.{name}" for name in ("min", "max", "abs", "round", "sum", "int", "float")}
CONVERSIONS = {"builtins.int", "builtins.float", "builtins.bool"}
CHECKS = {"torch._check", "torch._check_is_size", "torch._check_with"}
MAX_DEPTH = 4


def _bound_in(fn: cst.FunctionDef, name: str, facts: FileFacts) -> cst.BaseExpression | None:
    """What ``name`` was last assigned in ``fn`` itself (not a parameter, not a global), or None."""
    return facts.bindings.get((fn, name))


def _loop_iter(fn: cst.FunctionDef, name: str, facts: FileFacts) -> cst.BaseExpression | None:
    """What ``name`` takes its values from in a ``for`` loop of ``fn``, or None: ``L`` of
    ``for name in L``, ``for i, name in enumerate(L)`` and ``for a, name in zip(A, L)``."""
    for loop in m.findall(fn.body, m.For()):
        assert isinstance(loop, cst.For)
        target, source = loop.target, loop.iter
        if isinstance(target, cst.Name):
            if target.value == name:
                return source
            continue
        if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(source, cst.Call):
            continue
        names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
        if name not in names or not isinstance(source.func, cst.Name):
            continue
        index, args = names.index(name), [a.value for a in source.args if a.keyword is None and not a.star]
        called = facts.qnames(source.func)
        if "builtins.enumerate" in called and index == 1 and args:
            return args[0]
        if "builtins.zip" in called and index < len(args):
            return args[index]
    return None


def list_read(expr: cst.BaseExpression, facts: FileFacts, fn: cst.FunctionDef, depth: int = 0) -> cst.Call | None:
    """The ``.tolist()`` call that ``expr`` is (or a local name holds), or None.

    Any receiver counts: ``.tolist()`` of a tensor argument gives unbacked elements too (torch
    2.13: ``if v.tolist()[0] > 0:`` on a 1-D int64 argument raises).
    """
    if depth > MAX_DEPTH:
        return None
    if isinstance(expr, cst.Call) and m.matches(expr.func, m.Attribute(attr=m.Name("tolist"))) and not expr.args:
        return expr
    if isinstance(expr, cst.Name):
        value = _bound_in(fn, expr.value, facts)
        return list_read(value, facts, fn, depth + 1) if value is not None else None
    return None


def _computed(receiver: cst.BaseExpression, facts: FileFacts, fn: cst.FunctionDef) -> bool:
    """Whether ``receiver`` of ``.item()`` is a tensor the function computes.

    An argument or attribute (``n.item()``, ``self.count.item()``) is not: Dynamo specializes a
    0-d int64 input or buffer on its value (a guard and a recompile, no error; measured, torch
    2.13), and without type information the rule cannot tell it from a float one.
    """
    if isinstance(receiver, cst.Name):
        return _bound_in(fn, receiver.value, facts) is not None
    return not isinstance(receiver, cst.Attribute)


def scalar_read(expr: cst.BaseExpression, facts: FileFacts, fn: cst.FunctionDef, depth: int = 0) -> cst.BaseExpression | None:
    """The tensor read that makes ``expr`` a data-dependent Python number in ``fn``, or None.

    A read is ``<computed tensor>.item()``, an element of a ``.tolist()`` (subscript, ``for``
    variable, ``min``/``max``/``sum`` of it), or ``int``/``float``/``bool`` of a tensor value
    (``int(x.sum())``); arithmetic, comparisons and ``and``/``or`` of a read are reads, and so is
    a local name last assigned one. ``is None``/``in`` tests and ``len`` are static.
    """
    if depth > MAX_DEPTH:
        return None
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "item" and not expr.args:
            return expr if _computed(func.value, facts, fn) else None
        if isinstance(func, cst.Name) and facts.qnames(func) & (NUMERIC_BUILTINS | CONVERSIONS):
            for arg in expr.args:
                found = scalar_read(arg.value, facts, fn, depth + 1) or list_read(arg.value, facts, fn, depth + 1)
                if found is not None:
                    return found
            if facts.qnames(func) & CONVERSIONS and len(expr.args) == 1:
                tensor = value_dependent(expr.args[0].value, facts, set())
                if isinstance(tensor, cst.Call):  # int(x.sum()), bool(x.any()): a value method's result
                    return expr
        return None
    if isinstance(expr, cst.Subscript):
        return list_read(expr.value, facts, fn, depth + 1)
    if isinstance(expr, cst.Name):
        value = _bound_in(fn, expr.value, facts)
        if value is not None:
            return scalar_read(value, facts, fn, depth + 1)
        loop = _loop_iter(fn, expr.value, facts)
        return list_read(loop, facts, fn, depth + 1) if loop is not None else None
    if isinstance(expr, cst.BinaryOperation):
        return scalar_read(expr.left, facts, fn, depth + 1) or scalar_read(expr.right, facts, fn, depth + 1)
    if isinstance(expr, cst.UnaryOperation):
        return scalar_read(expr.expression, facts, fn, depth + 1)
    if isinstance(expr, cst.BooleanOperation):
        return scalar_read(expr.left, facts, fn, depth + 1) or scalar_read(expr.right, facts, fn, depth + 1)
    if isinstance(expr, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
            return None
        found = scalar_read(expr.left, facts, fn, depth + 1)
        for c in expr.comparisons:
            found = found or scalar_read(c.comparator, facts, fn, depth + 1)
        return found
    return None


def fullgraph_function(rule: Rule, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The function tracing ``node`` when it is compiled with a literal ``fullgraph=True``, else None."""
    traced = rule.facts.traced_by(node)
    if traced is None or traced[1].fullgraph is not True:
        return None
    return traced[0]


def _checked(test: cst.BaseExpression, fn: cst.FunctionDef, facts: FileFacts) -> bool:
    """Whether ``fn`` calls ``torch._check(<test>)`` with the same text as ``test``: the condition is
    then known to the symbolic shapes and the branch on it compiles (measured, torch 2.13)."""
    code = " ".join(facts.module.code_for_node(test).split())
    for call in m.findall(fn.body, m.Call()):
        assert isinstance(call, cst.Call)
        if call.args and call.args[0].keyword is None and facts.is_call(call, CHECKS) and " ".join(facts.module.code_for_node(call.args[0].value).split()) == code:
            return True
    return False


class FullgraphScalarBranch(Rule):
    CODE = "SP110"
    NAME = "fullgraph-scalar-branch"
    SUMMARY = "Branch on `.item()`/`.tolist()` in a fullgraph=True region: an error at the first call"
    EXPLANATION = """\
Under `fullgraph=True` Dynamo does not break the graph at `.item()` or `.tolist()`: it captures
the value as an *unbacked* symbol, a number with no example value (torch enables
`capture_scalar_outputs` itself for a fullgraph region). Arithmetic on it compiles; an `if`,
`while` or `a if cond else b` on it cannot pick a side, and the first call raises

    torch._dynamo.exc.UserError: Consider annotating your code using torch._check*().
    Could not guard on data-dependent expression zuf0 > 0.0 (unhinted: zuf0 > 0.0).

(measured, torch 2.13, `backend="eager"`, CPU; the same for `u0 > 0` from an int64 tensor,
`Eq(u0, 1)` from `bool(x.sum() > 0)`, `Min(3, u0) > 2` from `min(n, 3) > 2`). `.tolist()` of a
non-integer tensor fails one step earlier, at the read (`torch._dynamo.exc.Unsupported:
Tensor.tolist() with non-integer tensor`). Without `fullgraph=True` the read itself is a graph
break, which SP103 reports; so SP110 reports only fullgraph regions, and SP103 stays silent there.

Fixes, in order of preference: keep the choice in the graph (`torch.where(cond, a, b)` on the
tensor, before `.item()`; `torch.cond` for subgraphs); when the condition always holds, say so
with `torch._check(cond)` before the branch (the rule then accepts it); or move the branch out of
the compiled region. A branch on the tensor itself (`if x.sum() > 0:`, `if mask:`) is SP104's
finding (with fullgraph=True an `Unsupported: Data-dependent branching` error), not this rule's.

`torch._dynamo.config.capture_scalar_outputs = True`, the usual advice for `.item()`, changes
nothing here: a fullgraph region already captures scalars (an `.item()` used only in arithmetic
compiles to one graph with the config off, measured), and a branch on the captured value fails
with the config on as well. It matters without `fullgraph=True`, where it removes SP103's break.

Reported: an `if`/`while`/conditional expression, in a function compiled with a literal
`fullgraph=True`, whose test uses `<tensor>.item()`, an element of `.tolist()` (a subscript, a
`for` variable, `min`/`max`/`sum` of the list), `int`/`float`/`bool` of a tensor value, or a local
name last assigned one of these. Not reported: `.item()` of an argument or attribute
(`n.item()`, `self.step.item()`), since Dynamo specializes a 0-d int64 input on its value
(a recompile per value, no error) and the rule cannot see dtypes; `is None` tests; `len()` of a
list; `assert` (compiled into a runtime check). Loop bounds are SP111.

Source: error text from torch 2.13 (`backend="eager"`, `fullgraph=True`);
`torch/_dynamo/variables/tensor.py` ("We enable capture_scalar_outputs when full_graph=True by
default"); PyTorch docs, "Troubleshooting GuardOnDataDependentSymNode Errors".
"""
    NEEDLES = (r"\bfullgraph\b", r"\b(?:if|while)\b", SCALAR_NEEDLE)
    CALLS = SCALAR_CALLS
    VALID = [
        Valid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    n = x.sum().item()
    return x / n
""",
            note="an `.item()` used only in arithmetic compiles under fullgraph=True, no config needed",
        ),
        Valid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    k = x.sum().item()
    torch._check(k > 0)
    if k > 0:
        return x
    return -x
""",
            note="`torch._check` of the same condition first: the branch is decided",
        ),
        Valid(
            """\
import torch

@torch.compile
def f(x):
    if x.sum().item() > 0:
        return x
    return -x
""",
            note="without fullgraph=True the `.item()` is a graph break (SP103's finding), not an error",
        ),
        Valid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    s = x.sum()
    return torch.where(s > 0, x, -x)
""",
            note="the choice kept in the graph",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

class Net(torch.nn.Module):
    @torch.compile(fullgraph=True)
    def forward(self, x):
        if x.sum().item() > 0:
            return x
        return -x
""",
            line=6,
            note="the decorator on a module's `forward`",
        ),
        Invalid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    lengths = (x > 0).sum(-1).tolist()
    for n in lengths:
        if n > 2:
            x = x * 2
    return x
""",
            line=7,
            note="an element of `.tolist()` through a `for` variable",
        ),
        Invalid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    total = int(x.sum())
    i = 0
    while i < total:
        x = x * 0.5
        i += 1
    return x
""",
            line=7,
            note="`int()` of a tensor value",
        ),
        Invalid(
            """\
import torch

def f(x):
    k = x.argmax().item()
    return x if k == 0 else -x

fast = torch.compile(f, fullgraph=True)
""",
            line=5,
            note="a conditional expression on a local name",
        ),
    ]

    def _check(self, test: cst.BaseExpression) -> None:
        fn = fullgraph_function(self, test)
        if fn is None:
            return
        if value_dependent(test, self.facts, tensor_params(fn, self.facts)) is not None:
            return  # a branch on the tensor itself: SP104 reports it
        read = scalar_read(test, self.facts, fn)
        if read is None or _checked(test, fn, self.facts):
            return
        code = self.facts.module.code_for_node(read)
        self.report(
            test,
            f"branch on a value read from a tensor (`{code}`) inside `{fn.name.value}`, compiled with "
            "fullgraph=True: an error at the first call (torch._dynamo.exc.UserError: \"Could not guard on "
            "data-dependent expression\"); keep the choice in the graph (torch.where, torch.cond), "
            "state it with torch._check(...) if it always holds, or branch outside the compiled region",
        )

    def visit_If(self, node: cst.If) -> None:
        self._check(node.test)

    def visit_While(self, node: cst.While) -> None:
        self._check(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._check(node.test)
