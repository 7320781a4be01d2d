"""SP102: ``x = torch.compile(x)`` on a module whose state_dict is used, or ``self.x = torch.compile(self.x)``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from ..facts import COMPILE, first_positional
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

STATE_METHODS = {"state_dict", "load_state_dict"}


class CompileWrapsModule(Rule):
    CODE = "SP102"
    NAME = "compile-wraps-module"
    SUMMARY = "torch.compile(module) wraps it: state_dict keys gain `_orig_mod.`; use module.compile()"
    EXPLANATION = """\
`torch.compile(module)` returns an `OptimizedModule` wrapper holding the original as `_orig_mod`.
Rebinding the wrapper (`self.x = torch.compile(self.x)`, `model = torch.compile(model)`) changes
every `state_dict()` key to `_orig_mod.<key>`: checkpoints saved from it do not load into the
eager model (and back), and hooks registered on the original module are skipped when called
through the wrapper. `nn.Module.compile()` compiles the module's `__call__` in place: same keys,
same object, same hooks.

The fix rewrites `x = torch.compile(x, **options)` to `x.compile(**options)`; it is offered only
where `x` is known to be an `nn.Module` (its `state_dict` is used, or it was built from an
`nn.*` class or a module class of this file), since `.compile()` exists only on modules.

Source: torch.compile docs ("Compiling modules"; `nn.Module.compile`, torch >= 2.2);
pytorch/pytorch#101107 (`_orig_mod.` prefix in state_dict).
"""
    NEEDLES = (COMPILE_NEEDLE,)
    VALID = [
        Valid(
            """\
import torch

model = Net()
model.compile()
torch.save(model.state_dict(), "ckpt.pt")
""",
            note="in-place compile keeps the state_dict keys",
        ),
        Valid(
            """\
import torch

fast = torch.compile(step)
""",
            note="compiling a function: no state_dict involved",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.mlp = torch.compile(self.mlp, dynamic=False)
""",
            line=8,
            fixed="""\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.mlp.compile(dynamic=False)
""",
        ),
        Invalid(
            """\
import torch

def train(model):
    model = torch.compile(model)
    torch.save(model.state_dict(), "ckpt.pt")
""",
            line=4,
            fixed="""\
import torch

def train(model):
    model.compile()
    torch.save(model.state_dict(), "ckpt.pt")
""",
        ),
        Invalid(
            """\
import torch

class Wrapper:
    def __init__(self, block):
        self.block = block
        self.block = torch.compile(self.block)
""",
            line=6,
            note="self.x = torch.compile(self.x) on something not known to be a module: no fix",
        ),
    ]

    def _state_used(self, name: str, at: cst.CSTNode) -> bool:
        scope = self.facts.scope_of(at)
        matcher = m.Call(func=m.Attribute(attr=m.OneOf(*(m.Name(s) for s in STATE_METHODS))))
        for call in m.findall(scope, matcher):
            if get_full_name_for_node(call.func.value) == name:  # type: ignore[attr-defined]
                return True
        return False

    def _is_module(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        cls = self.facts.class_of(expr, at)
        if cls is None:
            return False
        name, qnames = cls
        if any(q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper() for q in qnames):
            return True
        info = self.facts.class_info(name, at)
        if info is None:
            return False
        for base in info.node.bases:
            if self.facts.qnames(base.value) & {"torch.nn.Module", "torch.nn.modules.module.Module"}:
                return True
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        f = self.facts
        if len(node.targets) != 1 or not f.is_call(node.value, COMPILE):
            return
        call = node.value
        assert isinstance(call, cst.Call)
        target = node.targets[0].target
        arg = first_positional(call)
        tname = get_full_name_for_node(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
        aname = get_full_name_for_node(arg) if isinstance(arg, (cst.Name, cst.Attribute)) else None
        if tname is None or aname is None:
            return
        state = self._state_used(tname, node)
        same = tname == aname
        if not (state or (same and isinstance(target, cst.Attribute))):
            return
        fixable = same and (state or self._is_module(arg, node))  # type: ignore[arg-type]
        replacement = None
        if fixable:
            rest = [a for a in call.args if a is not call.args[0]]
            if rest:
                rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacement = cst.Expr(cst.Call(func=cst.Attribute(value=target, attr=cst.Name("compile")), args=rest))
        why = f"`{tname}.state_dict()` is used here" if state else "the wrapper replaces the module attribute"
        self.report(
            node,
            f"`{tname} = torch.compile({aname})` wraps the module in an OptimizedModule: state_dict keys "
            f"gain the `_orig_mod.` prefix and hooks on the original are skipped ({why}); "
            f"compile in place with `{aname}.compile(...)`",
            replacement,
        )
