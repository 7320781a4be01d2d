"""SP102: ``x = torch.compile(x)`` on a module whose state_dict is used, or ``self.x = torch.compile(self.x)``;
``self = torch.compile(self)``; a compiled bound method on a module that is pickled."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from ..facts import COMPILE, first_positional
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

STATE_METHODS = {"state_dict", "load_state_dict"}
#: Calls that pickle their first argument (the whole object, not its state_dict).
PICKLERS = {"torch.save", "torch.serialization.save", "pickle.dump", "pickle.dumps"}


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

Two forms look alike and are something else:

* `model.forward = torch.compile(model.forward)` compiles a **bound method**: no wrapper module,
  the `state_dict` keys are unchanged, and it is not reported for them. What it does change: the
  compiled function is stored on the instance, so pickling the module (`torch.save(model, ...)`,
  `pickle.dump(model, ...)`) fails ("Can't pickle <function Net.forward>: it's not the same object
  as Net.forward", measured on torch 2.13); that is reported where the same scope pickles it, with
  `model.compile(...)` (which pickles) or saving `model.state_dict()` as the fix.
* `self = torch.compile(self)` in a method rebinds the method's **local name** `self`: the object
  the caller holds is not compiled and the wrapper is dropped when the method returns, so the line
  compiles nothing (a method that returns `self` hands the wrapper on, and is read as above). The
  fix is `self.compile(...)`; it is not applied by `--fix`, since it makes compiled what ran eager.

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
        Valid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)

model = Net()
model.forward = torch.compile(model.forward)
torch.save(model.state_dict(), "ckpt.pt")
""",
            note="a compiled bound method: no wrapper module, the state_dict keys are unchanged",
        ),
        Valid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.forward = torch.compile(self.forward)

    def forward(self, x):
        return self.fc(x)
""",
            note="the same from the module's own __init__",
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
        Invalid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self = torch.compile(self)

    def forward(self, x):
        return self.fc(x)
""",
            line=8,
            note="rebinding the local name `self` compiles nothing: no automatic fix (self.compile() would make it compiled)",
        ),
        Invalid(
            """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)

model = Net()
model.forward = torch.compile(model.forward)
torch.save(model, "model.pt")
""",
            line=13,
            note="a compiled bound method on the instance: pickling the module fails",
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
        if tname == aname and isinstance(target, cst.Name) and self._rebinds_self(target, node, call):
            return
        if tname == aname and isinstance(target, cst.Attribute) and self._bound_method(target, node, call):
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

    def _rebinds_self(self, target: cst.Name, node: cst.Assign, call: cst.Call) -> bool:
        """``self = torch.compile(self)`` in a method that does not return ``self``: reported
        here (the line compiles nothing). False for any other assignment."""
        f = self.facts
        func = f.enclosing_function(node)
        params = func.params.params if func is not None else ()
        if func is None or not params or params[0].name.value != target.value or f.enclosing_class(func) is None:
            return False
        name = target.value
        if m.findall(func, m.Return(value=m.Name(name))):
            return False  # the caller gets the wrapper: the ordinary case
        also = ""
        if self._state_used(name, node):
            also = (f" (and `{name}.state_dict()`/`load_state_dict()` after it here run on the wrapper, whose keys carry "
                    "the `_orig_mod.` prefix)")
        self.report(
            node,
            f"`{name} = torch.compile({name})` only rebinds `{func.name.value}`'s local name `{name}`: the module its "
            f"caller holds is not compiled, and the wrapper is dropped when `{func.name.value}` returns, so this line "
            f"compiles nothing{also}; compile the module in place with `{name}.compile(...)`",
        )
        return True

    def _bound_method(self, target: cst.Attribute, node: cst.Assign, call: cst.Call) -> bool:
        """``x.m = torch.compile(x.m)`` where ``m`` is a method of ``x``'s class (``forward``
        of any module): a compiled bound method, no wrapper module. Reported only where the same
        scope pickles ``x`` (what it breaks); True when handled here (reported or not)."""
        f = self.facts
        owner, method = target.value, target.attr.value
        if isinstance(owner, cst.Name) and owner.value == "self":
            cls = f.enclosing_class(node)
            info = f.info_of(cls) if cls is not None else None
        else:
            found = f.class_of(owner, node)
            info = f.class_info(found[0], node) if found is not None else None
        if method != "forward" and (info is None or method not in info.methods):
            return False  # an attribute holding a module (or unknown): the wrapper case
        oname = get_full_name_for_node(owner)
        pickled = self._pickled(oname, node) if oname is not None else None
        if pickled is None:
            return True
        if method == "forward":
            fix = (f"compile the module in place with `{oname}.compile(...)` instead (it compiles the module's call, "
                   f"its hooks included, and pickles), or save `{oname}.state_dict()`")
        else:
            cls_name = info.node.name.value if info is not None else "its class"
            fix = f"save `{oname}.state_dict()` instead, or put `@torch.compile` on `{cls_name}.{method}` where it is defined"
        self.report(
            node,
            f"`{oname}.{method} = torch.compile({oname}.{method})` compiles the bound method (the state_dict keys are "
            f"unchanged) and stores it on the instance: `{pickled}` pickles the module, and that fails for it "
            f"(PicklingError: the instance's `{method}` is not the class's function); {fix}",
        )
        return True

    def _pickled(self, name: str, at: cst.CSTNode) -> str | None:
        """The code of a ``torch.save(name, ...)``/``pickle.dump(name, ...)``/``pickle.dumps(name)``
        in the scope of ``at``, or None."""
        f = self.facts
        for found in m.findall(f.scope_of(at), m.Call()):
            assert isinstance(found, cst.Call)
            if not f.is_call(found, PICKLERS):
                continue
            first = first_positional(found)
            if isinstance(first, (cst.Name, cst.Attribute)) and get_full_name_for_node(first) == name:
                return f.module.code_for_node(found)
        return None
