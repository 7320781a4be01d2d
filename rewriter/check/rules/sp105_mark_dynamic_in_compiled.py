"""SP105: ``torch._dynamo.mark_dynamic`` inside a compiled function."""

from __future__ import annotations

import libcst as cst

from ..facts import MARK_DYNAMIC
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

MARKS = MARK_DYNAMIC | {"torch._dynamo.maybe_mark_dynamic", "torch._dynamo.mark_static"}
#: The marks SP105 reports: :data:`MARKS` and ``mark_unbacked`` (also ``@forbid_in_graph``,
#: torch 2.13 torch/_dynamo/decorators.py).
FORBIDDEN = MARKS | {"torch._dynamo.decorators.mark_unbacked"}


class MarkDynamicInCompiled(Rule):
    CODE = "SP105"
    NAME = "mark-dynamic-in-compiled"
    SUMMARY = "torch._dynamo.mark_dynamic inside a compiled function: forbidden in a graph"
    EXPLANATION = """\
`mark_dynamic` annotates a real tensor *before* Dynamo sees it; inside a compiled function the
tensor is already a FakeTensor with its shape fixed by the frame's guards. Dynamo refuses the call
("Attempt to trace forbidden callable"): on torch 2.13 an `AssertionError` at the first call with or
without `fullgraph=True` (measured, `backend="eager"`), not a graph break. The same holds for
`maybe_mark_dynamic`, `mark_static` and `torch._dynamo.decorators.mark_unbacked`. Call it on the tensor that crosses the region boundary,
in eager code just before the compiled call (stackpart's `mark_dynamic` action places it there).

Source: `torch._dynamo.mark_dynamic` docstring ("must be called before the tensor is passed to
the compiled function"); error text verified with torch 2.13, `backend="eager"`.
"""
    NEEDLES = (COMPILE_NEEDLE, r"\b(?:mark_dynamic|maybe_mark_dynamic|mark_static|mark_unbacked)\b")
    CALLS = frozenset({"mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_unbacked"})
    VALID = [
        Valid(
            """\
import torch

@torch.compile
def block(x):
    return x * 2

def forward(x):
    torch._dynamo.mark_dynamic(x, 1, min=2, max=4096)
    return block(x)
""",
            note="marked in eager code before the compiled call",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch
from torch._dynamo import mark_dynamic

@torch.compile
def block(x):
    mark_dynamic(x, 0)
    return x * 2
""",
            line=6,
        ),
        Invalid(
            """\
import torch

class Block(torch.nn.Module):
    def forward(self, x):
        torch._dynamo.decorators.mark_unbacked(x, 0)
        return x * 2

model = torch.compile(Block())
""",
            line=5,
            note="mark_unbacked in a whole-model compile (no fullgraph): an error all the same",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if not self.facts.is_call(node, FORBIDDEN):
            return
        traced = self.facts.traced_by(node)
        if traced is None:
            return
        fn, _ = traced
        name = sorted(self.facts.qnames(node.func) & FORBIDDEN)[0].rsplit(".", 1)[-1]
        self.report(
            node,
            f"{name} inside compiled `{fn.name.value}` is forbidden in a graph (Dynamo: \"Attempt to "
            "trace forbidden callable\"); mark the tensor in eager code before it enters the compiled region",
        )
