"""SP111: ``range()`` over a value read out of a tensor (``.item()``, ``.tolist()``) in a
``fullgraph=True`` region: an error at the first call.

Source: the error torch 2.13 raises (``backend="eager"``, CPU), ``torch._dynamo.exc.UserError:
Consider annotating your code using torch._check*(). Could not extract specialized integer from
data-dependent expression u0 ...``, for ``for _ in range(n):`` with ``n`` from ``.item()`` or an
element of ``.tolist()`` in a ``@torch.compile(fullgraph=True)`` function; PyTorch docs,
"Troubleshooting GuardOnDataDependentSymNode Errors". tests/test_check_fullgraph_rules.py runs
every example below under torch.
"""

from __future__ import annotations

import libcst as cst

from ..rule import Invalid, Rule, Valid
from .sp110_fullgraph_scalar_branch import SCALAR_NEEDLE, fullgraph_function, scalar_read


class FullgraphScalarLoopBound(Rule):
    CODE = "SP111"
    NAME = "fullgraph-scalar-loop-bound"
    SUMMARY = "`range()` of `.item()`/`.tolist()` in a fullgraph=True region: an error at the first call"
    EXPLANATION = """\
A Python loop runs a concrete number of times while Dynamo traces it. Under `fullgraph=True` a
value read from a tensor (`.item()`, an element of `.tolist()`) is an *unbacked* symbol with no
example value, so `range(n)` cannot be unrolled and the first call raises

    torch._dynamo.exc.UserError: Consider annotating your code using torch._check*().
    Could not extract specialized integer from data-dependent expression u0 (unhinted: u0).

(measured, torch 2.13, `backend="eager"`, CPU). `torch._check` does not help: the loop needs the
number itself. Without `fullgraph=True` the read is a graph break instead (SP103's finding).

Fixes: loop over a static bound (a shape, a config value) and mask the extra iterations, express
the loop as tensor operations (`torch.repeat_interleave`, `cumsum`, a batched op over the
lengths), or move the loop out of the compiled region. Using the same values as *sizes* is fine:
`torch.zeros(n)`, `x[:n]`, `x.view(n, -1)`, `x.split(lengths)` and `x.new_zeros(lengths)` all
compile under fullgraph=True (measured), so they are not reported. Iterating over the list itself
(`for n in lengths:`) is fine too: its length is the tensor's shape.

Reported: a `range(...)` call, in a function compiled with a literal `fullgraph=True`, with an
argument that uses `<tensor>.item()`, an element of `.tolist()`, `int()` of a tensor value, or a
local name last assigned one of these (the same reads as SP110, with the same exception for
`.item()` of an argument or attribute).

Source: error text from torch 2.13 (`backend="eager"`, `fullgraph=True`); PyTorch docs,
"Troubleshooting GuardOnDataDependentSymNode Errors" and "Backed vs Unbacked Symints".
"""
    NEEDLES = (r"\bfullgraph\b", r"\brange[ \t]*\(", SCALAR_NEEDLE)
    CALLS = frozenset({"range"})
    VALID = [
        Valid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    n = (x > 0).sum().item()
    for i in range(x.shape[0]):
        x = x + 1
    return x[:n]
""",
            note="a static bound; the read used as a size",
        ),
        Valid(
            """\
import torch

@torch.compile
def f(x):
    for _ in range(x.sum().long().item()):
        x = x + 1
    return x
""",
            note="without fullgraph=True the `.item()` is a graph break (SP103's finding), not an error",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

@torch.compile(fullgraph=True)
def f(x):
    steps = x.sum().long().item()
    for _ in range(steps):
        x = x * 0.5
    return x
""",
            line=6,
        ),
        Invalid(
            """\
import torch

class Pool(torch.nn.Module):
    @torch.compile(fullgraph=True)
    def forward(self, x):
        lengths = (x > 0).sum(-1).tolist()
        total = x.new_zeros(())
        for row, n in zip(x, lengths):
            for i in range(n):
                total = total + row[i]
        return total
""",
            line=9,
            note="an element of `.tolist()`, through `zip`",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Name) and self.facts.qnames(func) == {"builtins.range"}):
            return
        fn = fullgraph_function(self, node)
        if fn is None:
            return
        for arg in node.args:
            read = scalar_read(arg.value, self.facts, fn)
            if read is not None:
                break
        else:
            return
        code = self.facts.module.code_for_node(read)
        self.report(
            node,
            f"`range()` over a value read from a tensor (`{code}`) inside `{fn.name.value}`, compiled with "
            "fullgraph=True: an error at the first call (torch._dynamo.exc.UserError: \"Could not extract "
            "specialized integer from data-dependent expression\"); loop over a static bound and mask, "
            "use tensor operations, or loop outside the compiled region",
        )
