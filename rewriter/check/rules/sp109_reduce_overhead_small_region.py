"""SP109: ``mode="reduce-overhead"`` (CUDA graphs) on a small or repeated region."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ...compile_facts import SMALL_STATEMENTS, body_size, first_positional, options
from ..facts import COMPILE
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

class ReduceOverheadSmallRegion(Rule):
    CODE = "SP109"
    NAME = "reduce-overhead-small-region"
    SUMMARY = 'mode="reduce-overhead" (CUDA graphs) on a small or per-block region: capture one large region'
    EXPLANATION = """\
`mode="reduce-overhead"` wraps the compiled region in a CUDA graph. A graph replay has a fixed
cost and its own static input/output buffers, so CUDA graphs pay off for one large capture
(the whole decode step), not for many small ones: each small region pays the replay cost and the
copies into its static inputs, and many small CUDA-graph regions are known to fail
(pytorch/pytorch#152887). Use the default mode for small or per-block regions and, where launch
overhead binds (latency-critical decode), capture the whole step once.

Reported where `mode="reduce-overhead"` is applied to a function of at most 3 statements and no
loop (a whole-model `forward` that loops over its blocks is one large region), to the
`forward` of a class this file repeats in an `nn.ModuleList`/`nn.Sequential`, or inside a loop
(one capture per block).

Source: torch.compile docs (modes); ML Software & Compilers, "Partitioning the stack" (CUDA graphs
prefer one large capture); pytorch/pytorch#152887.
"""
    NEEDLES = (COMPILE_NEEDLE, r"reduce-overhead")
    VALID = [
        Valid(
            """\
import torch

decode_step = torch.compile(model, mode="reduce-overhead")
""",
            note="one large capture: the whole decode step",
        ),
        Valid(
            """\
import torch
from torch import nn

class GPT(nn.Module):
    @torch.compile(mode="reduce-overhead")
    def forward(self, x):
        h = self.tok(x)
        for block in self.blocks:
            h = block(h)
        return h
""",
            note="a whole-model forward: few statements, but its loop runs every block (one capture)",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

@torch.compile(mode="reduce-overhead")
def gelu(x):
    return x * torch.sigmoid(1.702 * x)
""",
            line=3,
        ),
        Invalid(
            """\
import torch

for blk in model.layers:
    blk.compile(mode="reduce-overhead")
""",
            line=4,
        ),
        Invalid(
            """\
import torch
from torch import nn

class Block(nn.Module):
    @torch.compile(mode="reduce-overhead")
    def forward(self, x):
        h = self.attn(self.ln1(x))
        x = x + h
        x = x + self.mlp(self.ln2(x))
        return x

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(12)])
""",
            line=5,
        ),
    ]

    def _repeated_block(self, cls_name: str) -> bool:
        return any(r.block.rsplit(".", 1)[-1] == cls_name for c in self.facts.all_classes() for r in c.repeated)

    def _small(self, func: cst.FunctionDef) -> str | None:
        cls = self.facts.enclosing_class(func)
        if cls is not None and func.name.value == "forward" and self._repeated_block(cls.name.value):
            return f"`{cls.name.value}` is a repeated block: one CUDA graph per block"
        size = body_size(func)
        if size <= SMALL_STATEMENTS:
            return f"`{func.name.value}` is {size} statement(s)"
        return None

    def _report(self, node: cst.CSTNode, why: str) -> None:
        self.report(
            node,
            f'mode="reduce-overhead" (CUDA graphs) on a small region ({why}): each capture pays its '
            "own replay cost and static-buffer copies, and many small CUDA-graph regions are known to "
            'fail (pytorch#152887); use the default mode here and capture one large region (the whole '
            "decode step) with CUDA graphs",
        )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for dec in node.decorators:
            is_compile, call = self.facts.compile_call(dec)
            if is_compile and options(call)[1] == "reduce-overhead":
                why = self._small(node)
                if why is not None:
                    self._report(dec, why)

    def visit_Call(self, node: cst.Call) -> None:
        f = self.facts
        method = m.matches(node.func, m.Attribute(attr=m.Name("compile"))) and first_positional(node) is None
        if not (f.is_call(node, COMPILE) or method) or options(node)[1] != "reduce-overhead":
            return
        for anc in f.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(anc, (cst.For, cst.While, cst.CompFor)):
                self._report(node, "compiled inside a loop: one CUDA graph per iteration's module")
                return
        target = f.compile_target(node)[0] if f.is_call(node, COMPILE) else None
        if target is None:
            return
        funcs = f._target_functions(target, node)
        if funcs:
            why = next((w for w in map(self._small, funcs) if w is not None), None)
            if why is not None:
                self._report(node, why)
            return
        cls = f.class_of(target, node)
        if cls is not None and self._repeated_block(cls[0].rsplit(".", 1)[-1]):
            self._report(node, f"`{cls[0]}` is a repeated block: one CUDA graph per block")
