"""SP102: ``x = torch.compile(x)`` on a module whose state_dict is used, or ``self.x = torch.compile(self.x)``;
``self = torch.compile(self)``; a compiled bound method on a module that is pickled."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import PositionProvider

from ...compile_facts import first_positional
from ..facts import COMPILE, PASSTHROUGH
from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

STATE_METHODS = {"state_dict", "load_state_dict"}
#: Calls that pickle their first argument (the whole object, not its state_dict).
PICKLERS = {"torch.save", "torch.serialization.save", "pickle.dump", "pickle.dumps"}
#: Method calls on a module that return it or nothing and keep no reference to it elsewhere: a
#: bare ``x.to(dev)`` or ``x = x.eval()`` between the binding and the compile leaves ``x`` the
#: module's only name.
KEEPS_ALONE = PASSTHROUGH | {"load_state_dict"}
#: What hands an owner's submodules out (``self.apply(fn)``, ``for m in self.modules()``): a use of
#: one refers to ``self.x`` as much as ``self.x`` does.
CHILD_VIEWS = {"apply", "modules", "children", "named_modules", "named_children", "get_submodule", "_modules",
               "__dict__"}


#: Class methods that build a new model (transformers', diffusers' loaders).
CONSTRUCTORS = {"from_pretrained", "from_config", "from_single_file"}


def _constructs(value: cst.Call) -> bool:
    """Whether ``value`` builds a new object no other name holds: a class called (``Net(...)``,
    ``nn.Linear(...)``: a CapWords name, PEP 8's for classes) or a loader of one
    (``AutoModel.from_pretrained(...)``), through :data:`PASSTHROUGH` calls (``Net().eval()``). A
    function's result (``get_model()``) may be a module something else keeps (a cache)."""
    while isinstance(value.func, cst.Attribute) and value.func.attr.value in PASSTHROUGH and isinstance(value.func.value, cst.Call):
        value = value.func.value
    parts = (get_full_name_for_node(value.func) or "").split(".")
    if parts[-1] in CONSTRUCTORS and len(parts) > 1:
        return parts[-2][:1].isupper()
    return parts[-1][:1].isupper()


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

The fix rewrites `x = torch.compile(x, **options)` (annotated or not) to `x.compile(**options)`;
it is offered only where `x` is known to be an `nn.Module` (its `state_dict` is used, or it was
built from an `nn.*` class or a module class of this file), since `.compile()` exists only on
modules.
`--fix` applies it only where `x` is the module's one name: `x.compile()` compiles the object
itself, so any other name holding it (`eager = model`, a list it was appended to, an attribute,
the caller of a function that got it as a parameter) would run compiled where it ran eager. That
is known only where `x` is bound by a class called earlier in the same block (`model = Net(...)`,
`AutoModel.from_pretrained(...)`; a function's result, `get_model()`, may be a module a cache keeps) and
nothing between that binding and the compile refers to it but `x.to(...)`, `x.eval()` and their
like (nor calls a function of this file that reads it); elsewhere the finding says why the fix is
left to you.

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
from torch import nn

model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
model.to("cpu")
model = torch.compile(model)
torch.save(model.state_dict(), "ckpt.pt")
""",
            line=6,
            fixed="""\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
model.to("cpu")
model.compile()
torch.save(model.state_dict(), "ckpt.pt")
""",
        ),
        Invalid(
            """\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
eager = model
model = torch.compile(model)
torch.save(model.state_dict(), "ckpt.pt")
""",
            line=6,
            note="another name holds the module: `model.compile()` would compile `eager` too, so --fix leaves it",
        ),
        Invalid(
            """\
import torch

def train(model):
    model = torch.compile(model)
    torch.save(model.state_dict(), "ckpt.pt")
""",
            line=4,
            note="a parameter: the caller holds the module, which `model.compile()` would compile: no automatic fix",
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
        if len(node.targets) == 1:
            self._compile_assign(node, node.targets[0].target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        """``model: nn.Module = torch.compile(model)``: the same rebinding as without the annotation."""
        if node.value is not None:
            self._compile_assign(node, node.target, node.value)

    def _compile_assign(self, node: cst.Assign | cst.AnnAssign, target: cst.BaseExpression,
                        value: cst.BaseExpression) -> None:
        """``target = torch.compile(...)`` (``node``, plain or annotated): report and fix."""
        f = self.facts
        if not f.is_call(value, COMPILE):
            return
        call = value
        assert isinstance(call, cst.Call)
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
        shared = self._shared(target, node) if fixable else None
        replacement = None
        if fixable and shared is None:
            rest = [a for a in call.args if a is not call.args[0]]
            if rest:
                rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacement = cst.Expr(cst.Call(func=cst.Attribute(value=target, attr=cst.Name("compile")), args=rest))
        why = f"`{tname}.state_dict()` is used here" if state else "the wrapper replaces the module attribute"
        self.report(
            node,
            f"`{tname} = torch.compile({aname})` wraps the module in an OptimizedModule: state_dict keys "
            f"gain the `_orig_mod.` prefix and hooks on the original are skipped ({why}); "
            f"compile in place with `{aname}.compile(...)`"
            + (f" (not applied by --fix: {shared})" if shared is not None else ""),
            replacement,
        )

    def _shared(self, target: cst.Name | cst.Attribute, node: cst.CSTNode) -> str | None:  # noqa: C901
        """Why another name may hold the module ``target`` names at the compile ``node`` (which
        ``target.compile()`` would compile as well), or None when ``target`` is its one name:
        bound by a class called earlier in the same block (:func:`_constructs`), and not referred to between that binding and
        ``node`` but by :data:`KEEPS_ALONE` calls, directly or through a function of this file.
        Conservative: what this cannot see (a binding in an enclosing block) counts as shared."""
        f = self.facts
        name = get_full_name_for_node(target)
        assert name is not None
        line = f.parent(node)
        block = f.parent(line) if line is not None else None
        body = list(getattr(block, "body", ()))
        if not isinstance(line, cst.SimpleStatementLine) or line not in body or len(line.body) != 1:
            body, line = [], None  # a one-line block, `a; b`: what came before is not read here
        readers: set[str] | None = None
        for stmt in reversed(body[: body.index(line)] if line is not None else []):
            value = self._binding(stmt, name)
            if value is not None:
                if self._keeps_alone(value, name):
                    continue  # `x = x.to(dev)`: the same object, bound earlier
                if isinstance(value, cst.Call) and not self._mentions(value, name) and _constructs(value):
                    return None
                return (f"`{name}` is bound to `{self._code(value)}` at line {self._line(stmt)}, which other names "
                        f"may hold too, and `{name}.compile()` would compile it for them as well")
            if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, cst.Expr) and self._keeps_alone(s.value, name) for s in stmt.body
            ):
                continue
            if self._mentions(stmt, name):
                return (f"`{self._code(stmt)}` at line {self._line(stmt)} refers to `{name}` before the compile, so "
                        f"another name may hold the module, and `{name}.compile()` would compile it for that "
                        "name too, where the wrapper leaves it eager")
            calls = m.findall(stmt, m.Call(func=m.Name()))
            if calls and readers is None:
                readers = self._readers(name, f.enclosing_function(node))
            called = next((c.func.value for c in calls if c.func.value in (readers or ())), None)  # type: ignore[attr-defined]
            if called is not None:
                return (f"line {self._line(stmt)} calls `{called}`, which reads `{name}`, before the compile: it "
                        f"may keep the module, and `{name}.compile()` would compile it there too")
        func = f.enclosing_function(node)
        if isinstance(target, cst.Name) and func is not None and any(
            p.name.value == name for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)
        ):
            return (f"`{name}` is a parameter of `{func.name.value}`: its caller holds the same module, and "
                    f"`{name}.compile()` would compile the caller's too")
        return (f"`{name}` is not bound by a call earlier in this block, so another name may hold the module, "
                f"and `{name}.compile()` would compile it for that name too")

    @staticmethod
    def _binding(stmt: cst.CSTNode, name: str) -> cst.BaseExpression | None:
        """The value ``stmt`` binds to ``name`` (``name = value`` alone on its line), else None."""
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target, value = small.target, small.value
        else:
            return None
        if isinstance(target, (cst.Name, cst.Attribute)) and get_full_name_for_node(target) == name:
            return value
        return None

    def _keeps_alone(self, expr: cst.BaseExpression, name: str) -> bool:
        """``name.to(dev)``, ``name.eval()``, ... (:data:`KEEPS_ALONE`) with arguments that do not mention ``name``."""
        return (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in KEEPS_ALONE
            and isinstance(expr.func.value, (cst.Name, cst.Attribute))
            and get_full_name_for_node(expr.func.value) == name
            and not any(self._mentions(a, name) for a in expr.args)
        )

    def _mentions(self, node: cst.CSTNode, name: str) -> bool:
        """Whether ``node`` refers to ``name`` (``x``, or ``self.x`` and what lies under it); for
        an attribute ``name``, a bare use of its owner (``register(self)``) or one that hands its
        submodules out (:data:`CHILD_VIEWS`) counts too."""
        dotted = name + "."
        for found in m.findall(node, m.Name() | m.Attribute()):
            full = get_full_name_for_node(found)
            if full is not None and (full == name or full.startswith(dotted)):
                return True
        if "." not in name:
            return False
        owner = name.rsplit(".", 1)[0]
        for found in m.findall(node, m.Name() | m.Attribute()):
            if get_full_name_for_node(found) != owner:
                continue
            parent = self.facts.parent(found)
            if not (isinstance(parent, cst.Attribute) and parent.value is found) or parent.attr.value in CHILD_VIEWS:
                return True
        return False

    def _readers(self, name: str, scope: cst.FunctionDef | None) -> set[str]:
        """Names of this file's functions (other than ``scope``) whose bodies refer to ``name``:
        a call of one may keep the module as a global or closure variable."""
        out = set()
        for func in m.findall(self.facts.module, m.FunctionDef()):
            assert isinstance(func, cst.FunctionDef)
            if func is not scope and self._mentions(func.body, name):
                out.add(func.name.value)
        return out

    def _line(self, node: cst.CSTNode) -> int:
        return self.facts.wrapper.resolve(PositionProvider)[node].start.line

    def _code(self, node: cst.CSTNode) -> str:
        """The first line of ``node``'s code, shortened for a message."""
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            node = node.with_changes(leading_lines=())  # the comments and blank lines above it
        text = self.facts.module.code_for_node(node).strip().splitlines()[0]
        return text if len(text) <= 50 else text[:47] + "..."

    def _rebinds_self(self, target: cst.Name, node: cst.Assign | cst.AnnAssign, call: cst.Call) -> bool:
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

    def _bound_method(self, target: cst.Attribute, node: cst.Assign | cst.AnnAssign, call: cst.Call) -> bool:
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
