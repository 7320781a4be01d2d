"""SP106: ``mark_dynamic(..., min=0)`` or ``min=1``: sizes 0 and 1 are always specialised."""

from __future__ import annotations

import libcst as cst

from ..facts import keyword
from ..rule import Invalid, Rule, Valid
from .sp105_mark_dynamic_in_compiled import MARKS


class MarkDynamicMin(Rule):
    CODE = "SP106"
    NAME = "mark-dynamic-min"
    SUMMARY = "mark_dynamic with min=0 or min=1: Dynamo specialises sizes 0 and 1, so the bound is 2"
    EXPLANATION = """\
Dynamo specialises sizes 0 and 1 (the "0/1 specialization": broadcasting and contiguity
differ there), so a dimension marked dynamic is never 0 or 1 inside the dynamic graph. A size of 1
at a `mark_dynamic` call raises `ConstraintViolationError` ("You marked ... as dynamic but your
code specialized it to be a constant (1)") whatever `min` says. `min=0`/`min=1` therefore
promise something that cannot hold; `min=2` states what actually happens, and behaves the same
(checked: min=1 and min=2 give identical results for sizes 1, 5, 7 on torch 2.13). Use
`maybe_mark_dynamic` when a size-1 input must be accepted.

Safe fix: `min=2`.

Source: PyTorch docs, "Dynamic shapes" (0/1 specialization); measured on torch 2.13.
"""
    NEEDLES = (r"\bmark_dynamic\b", r"\bmin\s*=\s*[01]\b")
    CALLS = frozenset({"mark_dynamic", "maybe_mark_dynamic", "mark_static"})
    VALID = [
        Valid(
            """\
import torch

torch._dynamo.mark_dynamic(x, 1, min=2, max=4096)
""",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

torch._dynamo.mark_dynamic(x, 1, min=1, max=4096)
""",
            line=3,
            fixed="""\
import torch

torch._dynamo.mark_dynamic(x, 1, min=2, max=4096)
""",
        ),
        Invalid(
            """\
import torch._dynamo as dynamo

dynamo.mark_dynamic(x, 0, min=0)
""",
            line=3,
            fixed="""\
import torch._dynamo as dynamo

dynamo.mark_dynamic(x, 0, min=2)
""",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if not self.facts.is_call(node, MARKS):
            return
        arg = keyword(node, "min")
        if arg is None or not isinstance(arg.value, cst.Integer) or arg.value.evaluated_value not in (0, 1):
            return
        self.report(
            arg,
            f"min={arg.value.value}: Dynamo always specialises sizes 0 and 1, so the dynamic range starts "
            "at 2 (a size-1 input raises ConstraintViolationError either way); write min=2, or use "
            "maybe_mark_dynamic to accept size 1",
            arg.with_changes(value=cst.Integer("2")),
        )
