"""SP107: ``torch.compile`` called inside a loop or on every call."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts import COMPILE
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

# methods that run on every call of a module or every op of a tensor subclass
PER_CALL_METHODS = {"forward", "__call__", "__torch_function__", "__torch_dispatch__"}


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in m.findall(node, m.Name())}


class CompilePerCall(Rule):
    CODE = "SP107"
    NAME = "compile-per-call"
    SUMMARY = "torch.compile called inside a loop or on every call: compile once and reuse"
    EXPLANATION = """\
`torch.compile(f)` builds a wrapper; Dynamo's cache is keyed on `f`'s code object, so wrapping the
same function again does not retrace it, but every call through a fresh wrapper pays the wrapper
setup (measured on torch 2.13, CPU, `backend="eager"`: ~200 µs per call against ~20-40 µs through
a wrapper built once, 6-10×). A lambda compiled in a loop reads values that change each
iteration and **recompiles** when they do: once for a closed-over number (Dynamo then makes it
dynamic), and on every new value of a module-level int until the recompile limit (8), after which
Dynamo runs the function eager without an error (measured, 12 iterations: 2 graphs for a closure,
8 for a global int). Compile once, outside the loop or in `__init__`, and pass the changing value
as an argument.

Reported: `torch.compile(...)(...)` (compile-and-call); `torch.compile` in `forward`, `__call__`,
`__torch_function__` or `__torch_dispatch__` unless it is a lazy initialisation (the result stored
on an attribute or in a container, under an `if`); `torch.compile` in a loop body when it compiles a lambda or a
function defined in the loop, or when nothing it is given changes with the loop variable. Not
reported: compiling a different module each iteration and storing it (`for blk in model.h:
blk.mlp = torch.compile(blk.mlp)` is regional compilation).

Source: measured with benchmarks/check_claims.py (torch 2.13, CPU); torch._dynamo.config.recompile_limit (8).
"""
    NEEDLES = (COMPILE_NEEDLE,)
    VALID = [
        Valid(
            """\
import torch

for blk in model.blocks:
    blk.mlp = torch.compile(blk.mlp)
""",
            note="regional compilation: a different module each iteration, stored",
        ),
        Valid(
            """\
import torch

class M(torch.nn.Module):
    def forward(self, x):
        if self._fast is None:
            self._fast = torch.compile(self._impl)
        return self._fast(x)
""",
            note="lazy initialisation: compiled once",
        ),
        Valid(
            """\
import torch

class Block(torch.nn.Module):
    @torch.compile(fullgraph=True)
    def forward(self, x):
        return x + 1
""",
            note="a decorator runs once, when the class body runs (what the compile action writes)",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch

class Wrapped(torch.Tensor):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.compile_ops:
            func = torch.compile(func)
        return func(*args, **(kwargs or {}))
""",
            line=6,
            note="a flag is not a cache: a local is compiled again on every op",
        ),
        Invalid(
            """\
import torch

for batch in loader:
    step = torch.compile(train_step)
    step(batch)
""",
            line=4,
        ),
        Invalid(
            """\
import torch

def predict(model, x):
    return torch.compile(model)(x)
""",
            line=4,
        ),
        Invalid(
            """\
import torch

for scale in (0.5, 1.0, 2.0):
    f = torch.compile(lambda t: t * scale)
    f(x)
""",
            line=4,
        ),
        Invalid(
            """\
import torch

class M(torch.nn.Module):
    def forward(self, x):
        return torch.compile(self.body, dynamic=True)(x)
""",
            line=5,
        ),
    ]

    def _loop(self, node: cst.CSTNode) -> tuple[cst.CSTNode, set[str]] | None:
        """The nearest loop around ``node`` within its function, with the loop's target names."""
        for anc in self.facts.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(anc, cst.For):
                return anc, _names(anc.target)
            if isinstance(anc, cst.While):
                return anc, set()
            if isinstance(anc, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                targets: set[str] = set()
                comp = anc.for_in
                while comp is not None:
                    targets |= _names(comp.target)
                    comp = comp.inner_for_in
                return anc, targets
        return None

    def _under_if(self, node: cst.CSTNode, func: cst.FunctionDef) -> bool:
        for anc in self.facts.ancestors(node):
            if anc is func:
                return False
            if isinstance(anc, (cst.If, cst.IfExp)):
                return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        f = self.facts
        if not f.is_call(node, COMPILE):
            return
        if any(isinstance(anc, cst.Decorator) for anc in f.ancestors(node)):
            return  # @torch.compile(...) runs once, when the def runs (what stackpart's compile action writes)
        target, site = f.compile_target(node)
        parent = f.parent(site)
        if isinstance(parent, cst.Call) and parent.func is site:
            self.report(
                site,
                "torch.compile(...)(...) builds a new compiled wrapper on every call (6-10x the "
                "call overhead, measured) and recompiles whenever what it closes over changes; compile "
                "once (module level or __init__) and reuse the result",
            )
            return
        func = f.enclosing_function(node)
        if func is not None and func.name.value in PER_CALL_METHODS and f.enclosing_class(node) is not None:
            cached = isinstance(parent, cst.Assign) and all(
                isinstance(t.target, (cst.Attribute, cst.Subscript)) for t in parent.targets
            )
            if not (cached and self._under_if(node, func)):
                self.report(
                    node,
                    f"torch.compile inside `{func.name.value}` runs on every call: compile once in "
                    "__init__ (or lazily behind an `if`) and reuse the compiled callable",
                )
                return
        loop = self._loop(node)
        if loop is None:
            return
        loop_node, targets = loop
        first = target
        defined_in_loop = isinstance(first, cst.Name) and any(
            isinstance(d, cst.FunctionDef) and d.name.value == first.value for d in m.findall(loop_node, m.FunctionDef())
        )
        if isinstance(first, cst.Lambda) or defined_in_loop:
            self.report(
                node,
                "torch.compile of a lambda/closure inside a loop: the values it reads change each "
                "iteration and fail a guard (a recompile; a module-level int recompiles on every value "
                "until the recompile limit (8), then runs eager silently); compile one function once, "
                "outside the loop, and pass the changing value as an argument",
            )
            return
        if isinstance(parent, cst.Assign) and any(
            isinstance(t.target, (cst.Attribute, cst.Subscript)) for t in parent.targets
        ):
            return
        if isinstance(parent, cst.Arg):
            return  # e.g. compiled.append(torch.compile(blk)): stored per item
        args = [*node.args, *(site.args if site is not node else ())]  # type: ignore[attr-defined]
        used = set().union(*(_names(a.value) for a in args)) if args else set()
        if targets and used & targets:
            return
        self.report(
            node,
            "torch.compile inside a loop wraps the same thing again on every iteration (6-10x "
            "the call overhead, measured); compile once before the loop and reuse the result",
        )
