"""Whether the method a step calls (``harness.call``) reaches a ``forward``, read statically.

A program's ``torch.compile(model)`` compiles the model's ``forward``; its regional form
(``for block in model.layers: block.compile()``) compiles each block's. A method such as a
coupling flow's ``inverse`` that calls neither runs eager under both, so an edit of the
program's call cannot change what the step compiles (docs/decisions.md, "The harness names the
method a step calls").

The reading walks the method's source with :mod:`ast` (``inspect.getsource``) and follows, each
once:

* ``self.m(...)`` where ``m`` is a method of the receiver's class defined under SRC;
* ``x.m(...)`` where ``m`` is a method the block class defines under SRC (``layer.inverse(z)``),
  read with a block as its ``self``.

It reports the model's ``forward`` reached on ``self(...)``, ``self.forward(...)``,
``self.__call__(...)`` or ``super().__call__``/``super().forward`` with the model as ``self``, and
a block's on the same with a block as ``self``, on ``self.sub(...)`` where the submodule ``sub``
holds a block, and on ``x.forward(...)``. It is unsure (and the caller keeps what it would prune)
where ``self`` leaves the method (an argument, a bound name, ``getattr(self, ...)``), a callee is a
local name, a subscript or a call result (``layer(z)``, ``self.layers[0](z)``: it may be a
block), a function of SRC called by name, a callable attribute that is no module, or a method whose
source cannot be read (defined outside SRC).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .locate import target_of

#: Methods that run a module's ``forward``.
FORWARD = frozenset({"forward", "__call__", "_call_impl", "_wrapped_call_impl"})
#: Builtins that take ``self`` without calling it.
INSPECTS = frozenset({"isinstance", "type", "id", "super", "hasattr"})


@dataclass
class Reach:
    """What a method reaches, read statically.

    Attributes:
        model_forward: where it reaches the model's ``forward`` (``file.py::Qual.name``), or None.
        block_forward: where it reaches a block's ``forward``, or None.
        unsure: why the reading is not sure (the first reason met), or None.
        read: the functions read (``file.py::Qual.name``), in the order read.
        block_calls: the block's methods the model's own code calls (``x.m(...)`` read as the
            block class's ``m``), as ``file.py::Qual.name``, in the order met.
    """

    model_forward: str | None = None
    block_forward: str | None = None
    unsure: str | None = None
    read: list[str] = field(default_factory=list)
    block_calls: list[str] = field(default_factory=list)

    def doubt(self, why: str) -> None:
        self.unsure = self.unsure or why


def reach(model: Any, call: str, src: Path, block: Any = None) -> Reach:
    """What ``type(model).<call>`` reaches (module docstring).

    Args:
        model: the module whose method the step calls (unwrapped from ``torch.compile``).
        call: the method's name (``harness.call``).
        src: SRC; a method whose source lies outside it is not read (unsure).
        block: one instance of the model's repeated block (``ctx.evidence.blocks``), or None.
    """
    out = Reach()
    if call in FORWARD:
        out.model_forward = f"{type(model).__name__}.{call}"
        return out
    seen: set[tuple[int, str]] = set()
    _walk(out, model, type(model), call, "model", block, Path(src), seen)
    return out


def _walk(out: Reach, inst: Any, cls: type, name: str, role: str, block: Any, src: Path, seen: set[tuple[int, str]]) -> None:
    fn = inspect.getattr_static(cls, name, None)
    fn = getattr(fn, "__func__", fn)
    where = target_of(fn, src) if inspect.isfunction(fn) else None
    if where is None:
        out.doubt(f"{cls.__name__}.{name} is not a function of SRC whose source can be read")
        return
    if (id(cls), name) in seen:
        return
    seen.add((id(cls), name))
    out.read.append(where)
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.increment_lineno(ast.parse(textwrap.dedent("".join(lines))), first - 1)
    except (OSError, TypeError, SyntaxError):
        out.doubt(f"the source of {where} cannot be read")
        return
    params = fn.__code__.co_varnames[:1]
    me = params[0] if params else "self"
    hits = {"model": "model_forward", "block": "block_forward"}
    callees: list[tuple[Any, type, str, str]] = []
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == me and not isinstance(node.ctx, ast.Store):
            parent = parents.get(id(node))
            if isinstance(parent, ast.Attribute):
                continue
            if isinstance(parent, ast.Call) and parent.func is node:
                setattr(out, hits[role], getattr(out, hits[role]) or f"{where}:{node.lineno}")
                continue
            if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in INSPECTS:
                continue
            out.doubt(f"{where}:{node.lineno}: {me} is passed on or bound to a name")
            continue
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        at = f"{where}:{node.lineno}"
        if isinstance(f, ast.Name):
            if f.id == me:
                continue  # said above
            code = fn.__code__
            if f.id in code.co_varnames + code.co_freevars + code.co_cellvars:
                out.doubt(f"{at}: calls {f.id}(...), a local name, which may be a block")
            elif f.id in fn.__globals__:
                if target_of(fn.__globals__[f.id], src) is not None:
                    out.doubt(f"{at}: calls {f.id}(...), a function or class of SRC, not followed")
            elif not hasattr(builtins, f.id):
                out.doubt(f"{at}: calls {f.id}(...), a name the reading cannot resolve")
            continue
        if not isinstance(f, ast.Attribute):
            out.doubt(f"{at}: calls {ast.unparse(f)}(...), which may be a block")
            continue
        recv = f.value
        if isinstance(recv, ast.Name) and recv.id == me:
            if f.attr in FORWARD:
                setattr(out, hits[role], getattr(out, hits[role]) or at)
            elif _defines(cls, f.attr):
                callees.append((inst, cls, f.attr, role))
            elif not _torch_method(f.attr):  # self.parameters(), self.to(...): nn.Module's own

                _attribute_call(out, inst, f.attr, block, at, role)
            continue
        if isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "super":
            if f.attr in FORWARD:
                setattr(out, hits[role], getattr(out, hits[role]) or at)
            else:
                out.doubt(f"{at}: calls super().{f.attr}(...), not followed")
            continue
        if f.attr in FORWARD:
            out.block_forward = out.block_forward or at
            continue
        if block is not None and _defines(type(block), f.attr):
            callees.append((block, type(block), f.attr, "block"))
    for inst_, cls_, name_, role_ in callees:
        if role == "model" and role_ == "block":
            entry = target_of(getattr(inspect.getattr_static(cls_, name_), "__func__", inspect.getattr_static(cls_, name_)), src)
            if entry is not None and entry not in out.block_calls:
                out.block_calls.append(entry)
        _walk(out, inst_, cls_, name_, role_, block, src, seen)


def _defines(cls: type, name: str) -> bool:
    """Whether ``cls`` (or a base other than torch's ``nn.Module``) defines the method ``name``."""
    import torch.nn as nn

    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            return False
        if name in vars(klass):
            return inspect.isfunction(getattr(vars(klass)[name], "__func__", vars(klass)[name]))
    return False


def _torch_method(name: str) -> bool:
    """Whether ``name`` is a method of torch's ``nn.Module`` other than those that run ``forward``."""
    import torch.nn as nn

    return name not in FORWARD and callable(getattr(nn.Module, name, None))


def _attribute_call(out: Reach, inst: Any, attr: str, block: Any, at: str, role: str) -> None:
    """``self.<attr>(...)`` where ``attr`` is no method of the class: a submodule's ``forward``,
    which reaches a block where the submodule holds one."""
    import torch.nn as nn

    value = getattr(inst, attr, None) if inst is not None else None
    if not isinstance(value, nn.Module):
        out.doubt(f"{at}: calls self.{attr}(...), which is no method of the class and no submodule")
        return
    if block is not None and any(m is block or type(m) is type(block) for m in value.modules()):
        out.block_forward = out.block_forward or at
