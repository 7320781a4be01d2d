"""SP101: whole-model ``torch.compile`` of a model that repeats a block."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ...compile_facts import first_positional, options, regional_loop
from ..facts import COMPILE, CUDA_GRAPH_MODES, Repeated
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid


class WholeModelCompile(Rule):
    CODE = "SP101"
    NAME = "whole-model-compile"
    SUMMARY = "Whole-model torch.compile of a model that repeats a block: compile per block"
    EXPLANATION = """\
`torch.compile(model)` (or `model.compile()`, or `@torch.compile` on the model's `forward`) where
the model builds an `nn.ModuleList`/`nn.Sequential` of one block class (or an `nn.ModuleDict` of
one, `{f"b{i}": Block() for i in range(n)}`) compiles the whole stack as one unit. Compile time scales with the compiled unit and is paid again on every code change and
every new shape; a whole-model graph guards on everything it touched, so a change anywhere
recompiles everything; a graph break splits the model at an arbitrary point. Nearly all fusion is
local to a block (block boundaries are residual adds and norms, fusion boundaries anyway), so
**regional compilation** (compile each block: `for block in model.layers: block.compile()`,
`model.blocks.values()` for an `nn.ModuleDict`, whose iteration yields its keys, or stackpart's
`compile` action on the block class) keeps most of the gain for a fraction of the cost. The
finding names the container where the source says it; for a `transformers` model, whose layers
sit in a path of the library's (`model.model.layers`, `model.transformer.h`), it does not:
`stackpart diagnose` reads the path from the model it builds.

A container counts as a stack of blocks when a comprehension builds it from one constructor that
is a block, and builds copies: its elements are not single `torch.nn` layers (`nn.Linear`,
`nn.Conv2d`, `nn.LayerNorm`...; a region of one layer holds nothing to fuse, so compiling it alone
gains nothing; torch's own `nn.TransformerEncoderLayer`/`nn.TransformerDecoderLayer` and an inline
`nn.Sequential(...)` are blocks), and they are not built one per item of a collection (the
element's arguments use the variable of a `for` over something other than `range(...)`, as a
multi-task head's `{t: nn.Linear(d, n_classes[t]) for t in tasks}` does). Such elements are
parallel branches or differ in shape: they share no compiled code, so regional compilation would
compile each anyway, and the unit that matters is the model around them. A counted comprehension
is a stack whatever its arguments: `Layer(cfg, i) for i in range(n)` passes the layer's index, as
`transformers`' decoder layers take `layer_idx`.

The exception is real: CUDA graphs prefer one large capture, because many small captures pay the
fixed replay cost each. For latency-critical decode with CUDA graphs (`mode="reduce-overhead"`)
whole-model capture is right, and this rule stays silent for the CUDA-graph modes.

Where `stackpart diagnose` measured it, the measurement decides: when its search chose a plan
that keeps the program's own compile over a candidate it timed (a regional compile of the block,
say), the finding is printed as a note with what was measured (`SP101 note: ... diagnose's
search chose 'as-is' (2.000 ms/step ...) over 'per-block' (2.400 ms/step ...)`) and does not fail
the check or the pre-commit hook. The evidence read is `stackpart-diagnose/report.json` beside the
configured plan or a `plan.yaml` in the compile's folder or one above it, up to the project root
(and the plan's validation report, for a plan that edits the program's own call); the compile is
matched by file and call text. A search that timed nothing else is no evidence.

Source: PyTorch tutorial "Reducing torch.compile cold start compilation time with regional
compilation"; ML Software & Compilers, "Partitioning the stack" (granularity). No fix: the unit
of compilation is a decision to measure (`stackpart diagnose`), not a mechanical edit.
"""
    NEEDLES = (COMPILE_NEEDLE,)
    VALID = [
        Valid(
            """\
import torch
from torch import nn

class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(n)])

model = GPT(12)
for block in model.h:
    block.compile()
""",
            note="regional compilation: each block is its own compiled unit",
        ),
        Valid(
            """\
import torch
from torch import nn

class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(n)])

decode = torch.compile(GPT(12), mode="reduce-overhead")
""",
            note="whole-model capture for CUDA graphs (latency-critical decode) is the exception",
        ),
        Valid(
            """\
import torch
from torch import nn

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

mlp = torch.compile(MLP())
""",
            note="no repeated block: compiling the module is already regional",
        ),
        Valid(
            """\
import torch
from torch import nn

class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([Expert() for _ in range(4)])

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = MoE()

    @torch.compile
    def forward(self, x):
        return x + self.moe(x)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(8)])
""",
            note="the repeated block is the regional unit, even when it holds a list of experts (an MoE model)",
        ),
        Valid(
            """\
import torch
from torch import nn

class MultiTask(nn.Module):
    def __init__(self, d, n_classes, tasks):
        super().__init__()
        self.backbone = Encoder(d)
        self.heads = nn.ModuleDict({t: nn.Linear(d, n_classes[t]) for t in tasks})

model = torch.compile(MultiTask(256, {"a": 3, "b": 5}, ["a", "b"]))
""",
            note="a multi-task head: one layer per task, parallel branches rather than a stack of blocks",
        ),
        Valid(
            """\
import torch
from torch import nn

class MLP(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])

mlp = torch.compile(MLP(64, 4))
""",
            note="a list of single torch.nn layers: a region of one layer holds nothing to fuse",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch
from torch import nn

class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(n)])

model = GPT(12).cuda()
model = torch.compile(model)
""",
            line=10,
        ),
        Invalid(
            """\
import torch
import torch.nn as nn

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
        ))

class Classifier(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.backbone = GPT(config)

clf = torch.compile(Classifier(config))
""",
            line=17,
            note="blocks inside an nn.ModuleDict, one class down",
        ),
        Invalid(
            """\
import torch as T
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2")
model.compile()
""",
            line=5,
            note="a transformers model is a stack of decoder layers",
        ),
        Invalid(
            """\
import torch
from torch import nn

class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(n)])

model = GPT(12)
model.forward = torch.compile(model.forward)
""",
            line=10,
            note="compiling the bound forward is compiling the model",
        ),
        Invalid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = nn.ModuleDict({f"b{i}": Block() for i in range(n)})

model = torch.compile(Net(3))
""",
            line=9,
            note="blocks in an nn.ModuleDict: the suggested loop walks model.blocks.values()",
        ),
        Invalid(
            """\
import torch
import torch.nn as nn

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[Layer() for _ in range(6)])

    @torch.compile
    def forward(self, x):
        return self.layers(x)
""",
            line=9,
        ),
    ]

    def _message(self, what: str, why: str, repeated: Repeated | None) -> str:
        """The finding's text; its loop walks the container as the ``own_call`` rewrite's does
        (:func:`rewriter.compile_facts.regional_loop`), with no path where the source does not say
        where the blocks are (a ``transformers`` model's ``model.layers`` or ``transformer.h``)."""
        container = kind = None
        if repeated is not None and repeated.attr.startswith("self."):
            container = "model." + repeated.attr.removeprefix("self.").replace(".self.", ".")
            kind = repeated.container.rsplit(".", 1)[-1]
        return (
            f"whole-model torch.compile of {what}: {why}; compile each block instead (regional "
            f"compilation, e.g. `{regional_loop(container, kind)}`): most fusion is local "
            "to a block, and compile time, recompiles and graph breaks then stay per block. "
            'Whole-model capture is right for latency-critical decode with CUDA graphs (mode="reduce-overhead")'
        )

    def visit_Call(self, node: cst.Call) -> None:
        f = self.facts
        at: cst.CSTNode = node
        if f.is_call(node, COMPILE):
            target, at = f.compile_target(node)
        elif m.matches(node.func, m.Attribute(attr=m.Name("compile"))) and first_positional(node) is None:
            target = node.func.value  # type: ignore[attr-defined]
        else:
            return
        if target is None or options(node)[1] in CUDA_GRAPH_MODES:
            return
        if m.matches(target, m.Attribute(attr=m.Name("forward"))):
            target = target.value  # type: ignore[attr-defined]  # torch.compile(model.forward): the model
        cls = f.class_of(target, node)
        if cls is None:
            return
        why, files = f.repeats_with_files(cls, node)  # a class the enclosing function defines first
        if why is None or f.is_repeated_block(cls[0], cls[1]):
            return
        self.report(at, self._message(cls[0].rsplit(".", 1)[-1], why, f.repeated(cls, node)), related=files)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value != "forward":
            return
        cls = self.facts.enclosing_class(node)
        info = self.facts.info_of(cls) if cls is not None else None
        if info is None or not info.repeated or self.facts.is_repeated_block(info.node.name.value):
            return
        for dec in node.decorators:
            is_compile, call = self.facts.compile_call(dec)
            if is_compile and options(call)[1] not in CUDA_GRAPH_MODES:
                r = info.repeated[0]
                why = f"{r.attr} is an {r.container} of {r.block}"
                self.report(dec, self._message(f"{info.node.name.value}.forward", why, r))
