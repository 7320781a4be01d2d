"""SP108: a ``@torch.compiler.disable`` function called inside a ``fullgraph=True`` region."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts import DISABLE
from ..rule import Invalid, Rule, Valid


class DisableInFullgraph(Rule):
    CODE = "SP108"
    NAME = "disable-in-fullgraph"
    SUMMARY = "@torch.compiler.disable called inside a fullgraph=True region: an error at compile time"
    EXPLANATION = """\
`@torch.compiler.disable` makes Dynamo skip a function, which means a graph break at the call.
`fullgraph=True` promises there is none, so the first compile raises
`torch._dynamo.exc.Unsupported: Skip calling torch.compiler.disable()d function`. Either drop
`fullgraph=True` on the region (accepting the break), or compile the parts around the disabled
call as their own regions and keep the disabled code between them eager.

Reported where a `fullgraph=True` compiled function of this file calls a function (or method via
`self.`) of this file decorated with `torch.compiler.disable`/`torch._dynamo.disable`, or calls
`torch.compiler.disable(fn)(...)` directly. stackpart's planner refuses the same combination
(a `disable` target inside a `fullgraph` compile target is a plan error).

Source: error text from torch 2.13 (`backend="eager"`); torch.compiler.disable docs.
"""
    NEEDLES = (r"\bfullgraph\b", r"\bdisable\b")
    VALID = [
        Valid(
            """\
import torch

@torch.compiler.disable
def route(x):
    return x

@torch.compile
def block(x):
    return route(x) * 2
""",
            note="without fullgraph=True the disable is an accepted graph break",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

@torch.compiler.disable
def route(x):
    return x

@torch.compile(fullgraph=True)
def block(x):
    return route(x) * 2
""",
            line=9,
        ),
        Invalid(
            """\
import torch

class MoE(torch.nn.Module):
    @torch._dynamo.disable
    def dispatch(self, x):
        return x

    @torch.compile(fullgraph=True, dynamic=False)
    def forward(self, x):
        return self.dispatch(x)
""",
            line=10,
        ),
    ]

    def _disabled_target(self, call: cst.Call, fn: cst.FunctionDef) -> str | None:
        f = self.facts
        func = call.func
        if isinstance(func, cst.Call) and f.is_call(func, DISABLE):
            return f.module.code_for_node(func.args[0].value) if func.args else "a function"
        target = None
        if isinstance(func, cst.Name):
            nested = [d for d in m.findall(fn, m.FunctionDef(name=m.Name(func.value))) if d is not fn]
            target = nested[0] if nested else f.functions.get(func.value)
        elif m.matches(func, m.Attribute(value=m.Name("self"))):
            cls = f.enclosing_class(call)
            info = f.info_of(cls) if cls is not None else None
            target = info.methods.get(func.attr.value) if info is not None else None  # type: ignore[attr-defined]
        if target is not None and target in f.disabled:
            return f.module.code_for_node(func)
        return None

    def visit_Call(self, node: cst.Call) -> None:
        traced = self.facts.traced_by(node)
        if traced is None or traced[1].fullgraph is not True:
            return
        fn = traced[0]
        name = self._disabled_target(node, fn)
        if name is None:
            return
        self.report(
            node,
            f"`{name}` is @torch.compiler.disable but is called inside `{fn.name.value}`, compiled with "
            "fullgraph=True: the graph break it forces is an error at compile time (Dynamo: \"Skip "
            "calling torch.compiler.disable()d function\"); drop fullgraph=True, or compile the parts "
            "around the call as separate regions",
        )
