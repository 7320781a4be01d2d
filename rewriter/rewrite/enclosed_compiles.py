"""A plan's ``compile`` of a class whose compiled ``forward`` runs code that another compile already
covers: Dynamo traces that code inside the plan's compile and inlines it, so the inner compile
gets no graph of its own and its options are never used (pinned with
``torch._dynamo.testing.CompileCounter`` on CPU torch in tests/test_compile_around_a_decorated_method.py).
It is the other side of :mod:`.decorated_enclosers` (the source's decorator around the plan's
compile): here the plan's compile is the one around.

What the plan's compile of ``Net`` (``model.py::Net``, its ``forward``; ``whole`` or ``region``)
runs, read statically (a refusal must be sure):

* the methods ``Net.forward`` calls on ``self`` where it runs (``self._attn(x)``, not in a nested
  ``def`` or ``lambda``: :func:`.enclosing.self_calls`) that ``Net``'s own body defines;
* for each class an instance of ``Net`` builds and holds, at any depth
  (:meth:`.enclosing.Enclosing.holds`): the ``forward`` it runs (its own, or one it inherits from a
  base of SRC: :meth:`.enclosing.Enclosing.forward_owner`), and the methods that ``forward`` calls
  on ``self`` that the class (or the base that defines its ``forward``) defines.

Such a method is refused where the source compiles it with a decorator that is on once the plan
is applied (``@torch.compile``, ``@torch._dynamo.optimize(...)``; not ``disable=True``, the
source's or the plan's ``own_call``; not the plan's own: :func:`.decorated_enclosers.decorator_on`),
at the plan's compile; or where the plan compiles it too with a compile that is no ``strategy:
nested`` hint, at that inner compile's line, naming the outer one's.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ..plan import CompileAction, LoadedPlan
from .decorated_enclosers import decorator_on, writes_decorator
from .enclosing import ClassRef, defined_method, self_calls
from .regional_path import builds


def check(loaded: LoadedPlan, bounds: list[Any], reading: Any) -> None:
    """Refuse a plan's ``compile`` of a class's ``forward`` whose compiled region runs a method
    another compile covers (the module docstring says which). ``bounds``: the plan's resolved file
    targets (:class:`rewriter.consistency.Bound`); ``reading``: SRC's reading
    (:class:`.program_compiles.ProgramCompiles`); with None only the compiled class's own methods
    are read (no class it builds).

    Raises:
        StackpartError: at the plan's compile, naming the source's decorator (``file:line`` and
            its code), the constructions that hold the class that runs it, and the ways through
            (drop the action, or turn that decorator off with ``own_call: {disable: true}``); or, for
            two compiles of the plan, at the inner one's line, naming the outer action's line and
            the ways through (keep one, or make the inner one ``strategy: nested`` under a
            ``strategy: whole`` compile).
    """
    compiles = [b for b in bounds if isinstance(b.action, CompileAction) and b.action.own_call is None
                and not b.action.library]
    outers = [b for b in compiles if b.action.strategy != "nested"
              and b.target.qualname.endswith(".forward") and b.target.qualname.count(".") == 1]
    if not outers:
        return
    planned = {(b.target.relpath, b.target.qualname): b for b in compiles}
    own_off = {(b.target.relpath, b.target.qualname): b.action.own_call.disable for b in bounds
               if isinstance(b.action, CompileAction) and b.action.own_call is not None
               and b.action.own_call.disable is not None}
    enclosing = reading.enclosing() if reading is not None else None
    if enclosing is not None and len(compiles) == 1 and not writes_decorator(enclosing):
        enclosing = None  # nothing the classes it builds run can be compiled otherwise: not read
    for c in outers:
        cls = (c.target.relpath, c.target.qualname.split(".")[0])
        node = next((s for s in c.module.body if isinstance(s, cst.ClassDef) and s.name.value == cls[1]), None)
        if node is None:
            continue
        runs: list[tuple[ClassRef, list[Any], list[tuple[ClassRef, cst.ClassDef, cst.Module, str]]]] = [
            (cls, [], _reached_in([(cls, node, c.module)], c.target.node))]
        for inner, chain in (enclosing.holds(cls).items() if enclosing is not None else ()):
            owner = enclosing.forward_owner(inner)
            owner_node = enclosing.class_def(owner) if owner is not None else None
            forward = defined_method(owner_node, "forward") if owner_node is not None else None
            if forward is None:
                continue
            defining = [(ref, n, mod) for ref in dict.fromkeys((inner, owner))
                        if (n := enclosing.class_def(ref)) is not None and (mod := enclosing.module(ref[0])) is not None]
            runs.append((inner, chain, [(owner, owner_node, enclosing.module(owner[0]), "forward"),  # type: ignore[list-item]
                                        *_reached_in(defining, forward)]))
        for inner, chain, methods in runs:
            for ref, class_node, module, name in methods:
                key = (ref[0], f"{ref[1]}.{name}")
                other = planned.get(key)
                if other is not None and other is not c:
                    if other.action.strategy != "nested":
                        _refuse_plan(loaded, reading, c, other, cls, inner, chain, ref, name)
                    continue
                dec = decorator_on(ref, class_node, module, name, own_off, set(planned))
                if dec is not None:
                    _refuse_source(loaded, reading, c, cls, inner, chain, ref, name, dec, module)


def _reached_in(defining: list[tuple[ClassRef, cst.ClassDef, cst.Module]],
                forward: cst.FunctionDef) -> list[tuple[ClassRef, cst.ClassDef, cst.Module, str]]:
    """``(class, its node, its file, method)`` for each method ``forward`` calls on ``self`` where it
    runs (:func:`.enclosing.self_calls`), found in the first of ``defining`` (the instance's class
    first, then the class that defines its ``forward``) whose own body defines it; a method neither
    defines (inherited from elsewhere, or bound otherwise) is not read."""
    out = []
    for name in self_calls(forward):
        hit = next(((ref, n, mod) for ref, n, mod in defining if defined_method(n, name) is not None), None)
        if hit is not None and name != "forward":
            out.append((*hit, name))
    return out


def _how(reading: Any, cls: ClassRef, inner: ClassRef, chain: list[Any], ref: ClassRef, name: str) -> str:
    """How the compiled class ``cls`` runs method ``name`` of ``ref``: the constructions that hold
    ``inner`` (``Net encloses Block: Net.__init__ builds Block at model.py:17: ...``), then the call
    that reaches the method where it is not ``forward`` (``Block.forward calls self._attn``)."""
    parts = [f"{cls[1]} encloses {inner[1]}: {builds(reading, chain, cls[1])}"] if chain else []
    if name != "forward":
        parts.append(f"{inner[1]}.forward calls self.{name}")
    return "; ".join(parts)


def _refuse_source(loaded: LoadedPlan, reading: Any, c: Any, cls: ClassRef, inner: ClassRef, chain: list[Any],
                   ref: ClassRef, name: str, dec: cst.Decorator, module: cst.Module) -> None:
    """Refuse the plan's compile ``c`` of class ``cls``, whose compiled ``forward`` runs method
    ``name`` of class ``ref`` that the source compiles with the decorator ``dec`` (in ``module``).

    Raises:
        StackpartError: always, at ``c``'s plan line.
    """
    method = f"{ref[1]}.{name}"
    code = " ".join(cst.Module([]).code_for_node(dec.decorator).split())[:120]
    raise loaded.error(
        c.index,
        f"compile of {cls[1]}: the source compiles {method} with a decorator at {_at(reading, ref[0], module, dec)}: "
        f"@{code}, and {_how(reading, cls, inner, chain, ref, name)}; Dynamo traces {method} inside this compile of "
        f"{cls[1]}.forward and inlines it, so that decorator's compile and its options would never be used",
        hint=f"drop this action ({method} stays compiled by its decorator), or keep this action and turn that "
             f"decorator off (action compile, target {ref[0]}::{method}, own_call: {{disable: true}})",
    )


def _refuse_plan(loaded: LoadedPlan, reading: Any, c: Any, other: Any, cls: ClassRef, inner: ClassRef,
                 chain: list[Any], ref: ClassRef, name: str) -> None:
    """Refuse the plan's compile ``other`` of method ``name`` of class ``ref``, which the plan's
    compile ``c`` of class ``cls`` runs inside its compiled ``forward``.

    Raises:
        StackpartError: always, at ``other``'s plan line, naming ``c``'s.
    """
    method = f"{ref[1]}.{name}"
    compiled = ref[1] if name == "forward" else method
    nested = ("strategy: nested on this action, beside actions[{i}]'s strategy: whole" if c.action.strategy == "whole"
              else "strategy: nested on this action, with strategy: whole on actions[{i}]").format(i=c.index)
    raise loaded.error(
        other.index,
        f"compile of {compiled}: actions[{c.index}] ({loaded.path}:{loaded.action_lines[c.index]}) compiles {cls[1]}, "
        f"and {_how(reading, cls, inner, chain, ref, name)}; Dynamo traces {method} inside that compile of "
        f"{cls[1]}.forward and inlines it, so this compile and its options would never be used",
        hint=f"keep one: drop this action (actions[{c.index}]'s compile covers {compiled}), or drop actions[{c.index}] "
             f"({compiled} compiled on its own); or make this action a hint to that compile ({nested})",
    )


def _at(reading: Any, rel: str, module: cst.Module, node: cst.CSTNode) -> str:
    """``file.py:line`` of ``node`` in ``module`` (file ``rel``)."""
    if reading is not None:
        return reading.enclosing().at(rel, module, node)
    from libcst.metadata import MetadataWrapper, PositionProvider

    pos = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider).get(node)
    return f"{rel}:{pos.start.line}" if pos is not None else rel
