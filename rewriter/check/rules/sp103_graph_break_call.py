"""SP103: ``.item()``, ``.tolist()`` or ``print`` inside a compiled function (graph breaks)."""

from __future__ import annotations

import libcst as cst

from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

METHODS = {
    "item": "reads a tensor value into Python: a graph break and a device sync (set "
    "torch._dynamo.config.capture_scalar_outputs = True to keep it in the graph as an unbacked "
    "symbol, or move it out of the compiled region)",
    "tolist": "reads a tensor into a Python list: a graph break and a device sync; keep the data as a "
    "tensor, or move this out of the compiled region",
}


class GraphBreakCall(Rule):
    CODE = "SP103"
    NAME = "graph-break-call"
    SUMMARY = "`.item()`, `.tolist()` or `print` inside a compiled function: a graph break"
    EXPLANATION = """\
Dynamo cannot put a Python value read from a tensor (`.item()`, `.tolist()`) or I/O (`print`) into
an FX graph. It splits the graph there (a **graph break**): the compiled region becomes two graphs
plus eager code between them, and the tensor read forces a device→host sync. Under
`fullgraph=True`, `print` is an error; `.item()`/`.tolist()` are captured instead (measured on
torch 2.13, so the rule does not report them there). Move the call out of the compiled function, keep
the value as a tensor, guard logging with `if not torch.compiler.is_compiling():`, or for `.item()`
set `torch._dynamo.config.capture_scalar_outputs = True`.

A function counts as compiled when it carries `@torch.compile`, or is passed to `torch.compile`
(a class's `forward` when an instance of the class is, `model.compile()` too), also from another
file of the project, and when it is the `forward` of a block of a compiled model (what Dynamo
inlines); the message then says where that compile is. Calls in branches that only run eager
(`if not torch.compiler.is_compiling():`) are not reported.

Source: PyTorch docs, "torch.compile Troubleshooting" (graph breaks) and
`torch._dynamo.config.capture_scalar_outputs`; verified with `backend="eager"`, torch 2.13.
"""
    NEEDLES = (COMPILE_NEEDLE, r"\b(?:item|tolist|print)\b")
    VALID = [
        Valid(
            """\
import torch

@torch.compile
def step(x):
    return (x * 2).sum()

loss = step(torch.ones(3)).item()
""",
            note=".item() outside the compiled region",
        ),
        Valid(
            """\
import torch

@torch.compile
def step(x):
    if not torch.compiler.is_compiling():
        print("eager only")
    return x * 2
""",
            note="a branch that runs only eager",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

@torch.compile(fullgraph=False)
def step(x):
    n = x.sum().item()
    return x / n
""",
            line=5,
        ),
        Invalid(
            """\
import torch

def forward(x):
    print(x.shape)
    return x.relu()

fast = torch.compile(forward)
""",
            line=4,
        ),
        Invalid(
            """\
import torch
from torch import nn

class Block(nn.Module):
    def forward(self, x):
        return x / x.sum().item()

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

model = torch.compile(Model())
""",
            line=6,
            note="a block of a compiled model is traced with it (in another file of the project too)",
        ),
        Invalid(
            """\
import torch as T

class Head(T.nn.Module):
    @T.compile
    def forward(self, x):
        return x.argmax(-1).tolist()
""",
            line=6,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in METHODS and not node.args:
            what, why = f".{func.attr.value}()", METHODS[func.attr.value]
        elif isinstance(func, cst.Name) and func.value == "print" and self.facts.qnames(func) == {"builtins.print"}:
            what = "print()"
            why = ("is I/O Dynamo cannot trace into a graph (a graph break, or the frame skipped); remove "
                   "it or guard it with `if not torch.compiler.is_compiling():`")
        else:
            return
        traced = self.facts.traced_by(node)
        if traced is None:
            return
        fn, site = traced
        if site.fullgraph and what != "print()":
            # measured, torch 2.13: under fullgraph=True Dynamo captures .item()/.tolist() (no break)
            return
        strict = " (with fullgraph=True this is an error, not a break)" if site.fullgraph else ""
        self.report(node, f"{what} inside compiled `{fn.name.value}` {why}{strict}")
