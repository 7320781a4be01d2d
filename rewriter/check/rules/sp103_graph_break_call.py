"""SP103: ``.item()``, ``.tolist()`` or ``print`` inside a compiled function (graph breaks)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

METHODS = {
    "item": "reads a tensor value into Python: a graph break and a device sync (set "
    "torch._dynamo.config.capture_scalar_outputs = True to keep it in the graph as an unbacked "
    "symbol, or move it out of the compiled region)",
    "tolist": "reads a tensor into a Python list: a graph break and a device sync; keep the data as a "
    "tensor, or move this out of the compiled region",
}

#: What each read is under ``fullgraph=True`` (measured on torch 2.13, ``backend="eager"``, CPU).
FULLGRAPH = {
    ".item()": "torch releases before pytorch/pytorch#163121 (2025) refuse this read under fullgraph=True, an error "
    "at the first call; later ones capture it as an unbacked symbol (torch 2.13 compiles it, measured), still a "
    "device sync inside the graph. Set torch._dynamo.config.capture_scalar_outputs = True where the program "
    "starts, so that every torch version captures it, or keep the value as a tensor",
}


class GraphBreakCall(Rule):
    CODE = "SP103"
    NAME = "graph-break-call"
    SUMMARY = "`.item()`, `.tolist()` or `print` inside a compiled function: a graph break"
    EXPLANATION = """\
Dynamo cannot put a Python value read from a tensor (`.item()`, `.tolist()`) or I/O (`print`) into
an FX graph. It splits the graph there (a **graph break**): the compiled region becomes two graphs
plus eager code between them, and the tensor read forces a device→host sync. Move the call out of
the compiled function, keep the value as a tensor, guard logging with
`if not torch.compiler.is_compiling():`, or for `.item()` set
`torch._dynamo.config.capture_scalar_outputs = True` (the value is then captured in the graph as
an unbacked symbol: no break, measured on torch 2.13; a file that sets it is not reported for
`.item()`).

Under `fullgraph=True` a graph break is an error: `print` is an error at the first call, and
`.item()` is one on torch releases before pytorch/pytorch#163121 (2025), while later ones turn
`capture_scalar_outputs` on for a fullgraph region themselves (torch 2.13 compiles it, measured).
Setting
`torch._dynamo.config.capture_scalar_outputs = True` where the program starts makes `.item()`
compile on every version, and states the unbacked symbol the code relies on. A branch on the value
read is SP110's finding and a `range()` of it SP111's, not reported again here. `.tolist()` is not
reported under `fullgraph=True`: captured for an integer tensor, an error for another (`Unsupported:
Tensor.tolist() with non-integer tensor`, torch 2.13), and the rule cannot see the dtype.

A function counts as compiled when it carries `@torch.compile`, or is passed to `torch.compile`
(a class's `forward` when an instance of the class is, `model.compile()` too), also from another
file of the project, and when it is the `forward` of a block of a compiled model (what Dynamo
inlines); the message then says where that compile is. Calls in branches that only run eager
(`if not torch.compiler.is_compiling():`) are not reported.

Where `stackpart diagnose` measured the advice at that graph break, the measurement decides: when
its graph_breaks rung found the break at this line and every candidate that set
`capture_scalar_outputs` for it was pruned after measurement ("the config kept no graph break in
the graph": a branch on the value read still breaks, at the jump), the finding is printed as a
note with what was measured (`SP103 note: ... Kept by measurement, so not failing: diagnose
measured capture_scalar_outputs for the graph break at model.py:13 and pruned it ...`) and does
not fail the check or the pre-commit hook. The evidence read is `stackpart-diagnose/report.json`
beside the configured plan or a `plan.yaml` in the file's folder or one above it, up to the
project root (as for SP101); the break is matched by file, line and function, so a line that moved
fails again until diagnose runs again. A knob candidate that was chosen, failed or lost on speed
alone is no such evidence.

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
        Valid(
            """\
import torch
import torch._dynamo

torch._dynamo.config.capture_scalar_outputs = True

@torch.compile(fullgraph=True)
def step(x):
    n = x.sum().item()
    return x / n
""",
            note="capture_scalar_outputs set: .item() is captured in the graph on every torch version",
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
import torch

@torch.compile(fullgraph=True)
def step(x):
    n = x.sum().item()
    return x / n
""",
            line=5,
            note="under fullgraph=True: an error on torch before pytorch/pytorch#163121 unless capture_scalar_outputs is set",
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

    _knob: bool | None = None

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
        if what == ".item()" and self._captures_scalars():
            return  # captured as an unbacked symbol: no break (measured, torch 2.13)
        if site.fullgraph and what == ".tolist()":
            # captured for an integer tensor, an error for another (SP110's explanation): the rule
            # cannot see the dtype, so it does not guess
            return
        if site.fullgraph and what == ".item()":
            if self._in_branch_or_bound(node):
                return  # SP110 (a branch on it) or SP111 (a range() of it) reports this read
            self.report(node, f"{what} inside compiled `{fn.name.value}` (fullgraph=True): {FULLGRAPH[what]}")
            return
        strict = " (with fullgraph=True this is an error, not a break)" if site.fullgraph else ""
        self.report(node, f"{what} inside compiled `{fn.name.value}` {why}{strict}")

    def _captures_scalars(self) -> bool:
        """Whether the file sets ``torch._dynamo.config.capture_scalar_outputs = True`` (an
        assignment, or ``capture_scalar_outputs=True`` passed to ``config.patch``)."""
        if self._knob is None:
            module = self.facts.module
            assigned = m.findall(module, m.Assign(
                targets=[m.AssignTarget(target=m.Attribute(attr=m.Name("capture_scalar_outputs")))], value=m.Name("True")))
            patched = m.findall(module, m.Arg(keyword=m.Name("capture_scalar_outputs"), value=m.Name("True")))
            self._knob = bool(assigned or patched)
        return self._knob

    def _in_branch_or_bound(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` lies in an ``if``/``while``/conditional expression's test or a
        ``range(...)`` call (the reads SP110 and SP111 report under fullgraph)."""
        child = node
        for anc in self.facts.ancestors(node):
            if isinstance(anc, (cst.If, cst.While, cst.IfExp)) and anc.test is child:
                return True
            if isinstance(anc, cst.Call) and isinstance(anc.func, cst.Name) and anc.func.value == "range":
                return True
            if isinstance(anc, (cst.BaseStatement, cst.FunctionDef)):
                return False
            child = anc
        return False
