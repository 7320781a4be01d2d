"""SP106: ``mark_dynamic(..., min=0)`` or ``min=1``: sizes 0 and 1 are always specialised."""

from __future__ import annotations

import libcst as cst

from ...compile_facts import keyword
from ..rule import Invalid, Rule, Valid
from .sp105_mark_dynamic_in_compiled import MARKS


class MarkDynamicMin(Rule):
    CODE = "SP106"
    NAME = "mark-dynamic-min"
    SUMMARY = "mark_dynamic with min=0 or min=1: a size-1 input raises; maybe_mark_dynamic accepts it"
    EXPLANATION = """\
Dynamo specialises sizes 0 and 1 (the "0/1 specialization": broadcasting and contiguity
differ there), so a dimension marked dynamic is never 0 or 1 inside the dynamic graph. A size of 1
at a `mark_dynamic` call raises whatever `min` says (torch 2.13: an `AssertionError` from the
symbolic-shape solver, older versions `ConstraintViolationError`: "You marked ... as dynamic but
your code specialized it to be a constant (1)"), and `min=2` raises the same. `min=0`/`min=1`
therefore say the author expects sizes 0 or 1 there.

Safe fix: `maybe_mark_dynamic(x, dim)`: sizes >= 2 share one dynamic graph and a size-1 call
gets its own specialised graph instead of an error (checked on torch 2.13: sizes 1, 5, 7, 9 give
2 graphs and no error). It takes no `min`/`max`, so both are dropped. When sizes 0/1 must stay in
the dynamic graph, `torch._dynamo.decorators.mark_unbacked(x, dim)` does that (sizes 1, 5, 7 in
one graph; a plan writes it with `unbacked: true`), but code that broadcasts the dim against a
fixed size then fails at size 1 (torch 2.13: `torch.ones(3, 5) + x` raises an `AssertionError`,
"Guard failed on the same frame it was created"): not a safe fix.

Source: PyTorch docs, "Dynamic shapes" (0/1 specialization; mark_dynamic, maybe_mark_dynamic,
mark_unbacked); measured on torch 2.13.
"""
    NEEDLES = (r"\bmark_dynamic\b", r"\bmin\s*=\s*[01]\b")
    CALLS = frozenset({"mark_dynamic", "maybe_mark_dynamic", "mark_static"})
    IN_COMPILED = False  # the call is wrong wherever it is made
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

torch._dynamo.maybe_mark_dynamic(x, 1)
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

dynamo.maybe_mark_dynamic(x, 0)
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
            node,
            f"min={arg.value.value}: Dynamo always specialises sizes 0 and 1, so a size-1 input raises at this "
            "mark whatever min says; maybe_mark_dynamic(x, dim) accepts it (its own specialised graph; "
            "sizes >= 2 stay dynamic), mark_unbacked keeps 0/1 dynamic if the code never branches on the size",
            _maybe(node),
        )


def _maybe(call: cst.Call) -> cst.Call:
    """``mark_dynamic(x, d, min=.., max=..)`` -> ``maybe_mark_dynamic(x, d)`` (same module prefix)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "mark_dynamic":
        func = func.with_changes(attr=cst.Name("maybe_mark_dynamic"))
    elif isinstance(func, cst.Name) and func.value == "mark_dynamic":
        func = cst.Name("maybe_mark_dynamic")
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value in ("min", "max"))]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=func, args=args)
