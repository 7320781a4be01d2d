"""SP104: a Python ``if``/``while``/conditional expression on a tensor's value inside a compiled function."""

from __future__ import annotations

import libcst as cst

from ..facts import FileFacts
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

# Tensor methods / torch functions whose result depends on tensor data (not on shapes or dtypes).
VALUE_METHODS = {
    "any", "all", "sum", "max", "min", "mean", "prod", "norm", "abs", "eq", "ne", "gt", "ge", "lt",
    "le", "equal", "allclose", "isclose", "isnan", "isinf", "isfinite", "count_nonzero", "nonzero",
    "argmax", "argmin", "logical_and", "logical_or", "logical_not", "greater", "less",
}
TORCH_VALUE_FUNCS = {f"torch.{name}" for name in VALUE_METHODS} | {"torch.where"}
TENSOR_TYPES = {"torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.BoolTensor"}


def value_dependent(expr: cst.BaseExpression, facts: FileFacts, tensors: set[str]) -> cst.BaseExpression | None:
    """The sub-expression that makes ``expr`` depend on tensor data, or None.

    Data: a value method (``x.any()``, ``x.sum() > 0``), a ``torch.<value function>(...)`` call, or a
    parameter annotated ``torch.Tensor`` used as a truth value or compared. Shapes, dtypes,
    ``is None`` checks and ``isinstance`` are static and never count.
    """
    if isinstance(expr, cst.Call):
        func = expr.func
        if facts.qnames(func) & TORCH_VALUE_FUNCS:
            return expr
        if isinstance(func, cst.Attribute):
            if func.attr.value in VALUE_METHODS and not facts.is_imported(func.value):
                return expr
            if func.attr.value in ("size", "dim", "numel", "item", "tolist", "is_floating_point"):
                return None
        return None
    if isinstance(expr, cst.Name):
        return expr if expr.value in tensors else None
    if isinstance(expr, cst.Attribute):
        return None
    if isinstance(expr, cst.UnaryOperation):
        return value_dependent(expr.expression, facts, tensors)
    if isinstance(expr, cst.BooleanOperation):
        return value_dependent(expr.left, facts, tensors) or value_dependent(expr.right, facts, tensors)
    if isinstance(expr, cst.Comparison):
        if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
            return None
        found = value_dependent(expr.left, facts, tensors)
        for c in expr.comparisons:
            found = found or value_dependent(c.comparator, facts, tensors)
        return found
    return None


def tensor_params(func: cst.FunctionDef, facts: FileFacts) -> set[str]:
    """Parameters annotated ``torch.Tensor`` (the only tensors known without type inference)."""
    out = set()
    for p in [*func.params.posonly_params, *func.params.params, *func.params.kwonly_params]:
        if p.annotation is not None and facts.qnames(p.annotation.annotation) & TENSOR_TYPES:
            out.add(p.name.value)
    return out


class DataDependentBranch(Rule):
    CODE = "SP104"
    NAME = "data-dependent-branch"
    SUMMARY = "Python branch on a tensor's value inside a compiled function: a graph break"
    EXPLANATION = """\
`if x.sum() > 0:` in a compiled function asks Python for a tensor's value while Dynamo traces
with FakeTensors that have none. Dynamo breaks the graph at the branch (an error under
`fullgraph=True`: "Data-dependent branching"), syncs the device, and compiles each side
separately. Keep the choice in the graph (`torch.where(cond, a, b)`, `torch.cond` for
subgraphs, masking), or hoist the branch out of the compiled region.

The branch may be in a helper the compiled function calls (a `def` of the same file, a method of
the same class through `self.`, or a top-level function imported from another file of the
project; up to three calls deep): Dynamo inlines such calls into the caller's graph, so their
branches break it alike; the message names the call chain. A helper under
`@torch.compiler.disable` runs eager and is not followed.

Only value-dependent conditions are reported: a value method (`.any()`, `.sum()`, `.max()`,
comparisons...), a `torch.<value function>`, or a parameter annotated `torch.Tensor` used as a
truth value. Shape checks (`x.shape[0] > 1`, `x.dim()`), `is None` and `isinstance` are static
(guards, not breaks) and never reported. A branch on a number already read out of the tensor
(`if x.sum().item() > 0:`) is a break at the read instead (SP103) and, under `fullgraph=True`, an
error of its own (SP110; `range()` of one is SP111).

Source: PyTorch docs, "torch.compile Troubleshooting" / `torch.cond`; the error text above is
Dynamo's own (torch 2.13, `backend="eager"`, `fullgraph=True`).
"""
    NEEDLES = (COMPILE_NEEDLE, r"\b(?:if|while)\b")
    VALID = [
        Valid(
            """\
import torch

@torch.compile
def f(x, mask=None):
    if mask is not None and x.shape[0] > 1:
        x = x * mask
    return torch.where(x > 0, x, -x)
""",
            note="shape and None checks are guards; torch.where keeps the choice in the graph",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

@torch.compile
def f(x):
    if x.sum() > 0:
        return x
    return -x
""",
            line=5,
        ),
        Invalid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x: torch.Tensor, done: torch.Tensor):
    while not done:
        x = x * 2
    return x
""",
            line=5,
        ),
        Invalid(
            """\
import torch

def g(x):
    return x if torch.any(x < 0) else x.abs()

fast = torch.compile(g)
""",
            line=4,
        ),
        Invalid(
            """\
import torch
from torch import nn

def clip(x):
    if x.abs().max() > 1:
        x = x / x.abs().max()
    return x

class Block(nn.Module):
    def forward(self, x):
        return clip(x) * 2

model = torch.compile(Block())
""",
            line=5,
            note="a branch in a helper the compiled forward calls: Dynamo inlines the call",
        ),
    ]

    def _check(self, owner: cst.CSTNode, test: cst.BaseExpression) -> None:
        traced = self.facts.traced_by(owner)
        if traced is None:
            return
        fn, site = traced
        culprit = value_dependent(test, self.facts, tensor_params(fn, self.facts))
        if culprit is None:
            return
        code = self.facts.module.code_for_node(culprit)
        if site.fullgraph:
            # measured, torch 2.13: torch._dynamo.exc.Unsupported at the first call (SP110 is the
            # branch on a value already read out with .item()/.tolist(), a different error)
            effect = ("with fullgraph=True an error at the first call, not a graph break "
                      "(torch._dynamo.exc.Unsupported: \"Data-dependent branching\")")
        else:
            effect = "a graph break and a device sync"
        self.report(
            test,
            f"Python branch on a tensor's value (`{code}`) inside compiled `{fn.name.value}`: {effect}; "
            "keep it in the graph (torch.where, torch.cond, masking) or move the branch out of the "
            "compiled region",
        )

    def visit_If(self, node: cst.If) -> None:
        self._check(node, node.test)

    def visit_While(self, node: cst.While) -> None:
        self._check(node, node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._check(node, node.test)
