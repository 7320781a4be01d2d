"""The search's candidate that compiles the method the harness calls (``harness.call``), where
nothing compiles it.

A program that wraps its model (``model = torch.compile(Flow())``, ``model.compile()``) compiles
``forward`` alone: ``OptimizedModule.__getattr__`` hands back the wrapped module's attributes, so
``model.inverse(z)``, ``model.sample(n)`` or ``model.encode(x)`` is the original bound method and
runs eager (torch/_dynamo/eval_frame.py; ``module.compile()`` compiles ``__call__`` the same way).
A whole-model or per-block compile of ours compiles ``forward`` too and misses such a method
unless it calls ``forward``. The lever is ``torch.compile`` on the method itself: the ``compile``
action on its ``file.py::Class.method`` target (docs/actions.md, "method target"), which the
program's wrapper leaves alone (a decorated method of the wrapped module is what its
``__getattr__`` returns).

Evidence: one step of the harness's model as it is, its backend forced to ``eager``, compiled no
graph (:func:`..as_run.compiles_itself`: Dynamo's counters). The candidate ``compile-<method>`` is
placed right after ``as-is``, the program as it is with the method compiled; the engine measures
its graphs, frames and numerics like any other. Where the method calls one method of its repeated
block (``layer.inverse(z)`` over a ``ModuleList``, read statically: :mod:`..method_reach`),
``compile-<Block>.<method>`` follows it (:func:`block_method_candidate`), and the edits of the
program's own whole-model call that the reading is sure compile nothing the step runs are pruned
(:func:`without_idle_own_edits`). Pruned, and said: no ``harness.call``; a step that
compiles code already (what compiles is the program's); a method defined outside SRC, inside a
function, already compiled, or a property (which names the method it gives, where it gives one).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ..candidate import AS_IS, Candidate, CandidateKind


def candidate_name(call: str) -> str:
    """The candidate's name: ``compile-inverse``."""
    return f"compile-{call}"


def method_target(ctx: Any) -> tuple[str | None, str]:
    """``(target, why)``: the ``file.py::Class.method`` target under SRC of the method
    ``harness.call`` names on the reference model (the class that defines it, through the
    program's ``torch.compile`` wrapper), and what it is; ``(None, why not)`` where no compile
    action can name it."""
    from ...engine.watch import unwrapped
    from ..locate import target_of, untargetable

    call = ctx.session.spec.call
    model, _, _ = ctx.reference()
    inner = unwrapped(model)
    fn = inspect.getattr_static(type(inner), call, None)
    if fn is None:
        return None, f"{type(inner).__name__}.{call} is an attribute of the instance, not a method of its class"
    if isinstance(fn, (property, functools.cached_property)):
        return None, _property_why(inner, call)
    if hasattr(getattr(fn, "__func__", fn), "_torchdynamo_orig_callable"):
        return None, f"{type(inner).__name__}.{call} is already a torch.compile'd function"
    target = target_of(fn, ctx.session.src)
    if target is None:
        return None, f"{type(inner).__name__}.{call} is {untargetable(fn)}"
    cls = type(inner).__name__
    if model is not inner:
        how = (f"the program's torch.compile wrapper compiles forward only: model.{call} is the wrapped {cls}'s own "
               "method (OptimizedModule.__getattr__) and runs eager")
    elif getattr(inner, "_compiled_call_impl", None) is not None:
        how = f"the program's model.compile() compiles {cls}.__call__ (forward) only: model.{call} runs eager"
    else:
        how = f"nothing compiles {cls}.{call}"
    return target, how


def _property_why(inner: Any, call: str) -> str:
    """Why a property ``call`` of ``inner`` has no target: no compile action decorates a property;
    where the value it gives is a method of the model's class, that method is named as the
    ``harness.call`` to use (its definition is a target)."""
    cls = type(inner).__name__
    why = f"{cls}.{call} is a property, not a method of its class"
    got = getattr(inner, call, None)
    name = getattr(got, "__name__", None)
    if getattr(got, "__self__", None) is inner and name and inspect.getattr_static(type(inner), name, None) is not None:
        why += f" (it gives model.{name}: harness.call: {name} names that method)"
    return why


def with_called_method(ctx: Any, cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """``cands`` with ``compile-<method>`` right after ``as-is`` (module docstring), and why it
    was not proposed where it was not (nothing where the harness calls the module itself)."""
    from ...plan import CompileAction
    from ..as_run import compiles_itself

    call = ctx.session.spec.call
    if call is None:
        return cands, []
    name = candidate_name(call)
    base = next((c for c in cands if c.name == AS_IS), None)
    if base is None:
        return cands, [f"{name}: no as-is candidate to add the compile of model.{call} to"]
    if compiles_itself(ctx):
        return cands, [f"{name}: one step of model.{call} as the program runs it compiled a graph itself: what it "
                       "compiles is the program's own compile (its edits are the as-is+ candidates)"]
    read = _reading(ctx)
    cands, pruned = without_idle_own_edits(ctx, cands, read)
    target, how = method_target(ctx)
    if target is None:
        return cands, [*pruned, f"{name}: harness.call {call!r}: {how}; no compile action names it"]
    why = (f"harness.call {call}: one step of model.{call} as the program runs it compiled no graph ({how}); "
           f"torch.compile on {target} compiles what the step calls")
    action = CompileAction(action="compile", target=target, strategy="region", why=why)
    cand = Candidate(name, base.plan.model_copy(update={"actions": [*base.plan.actions, action]}), [why])
    block, more = block_method_candidate(ctx, base, read, name)
    keys = {c.key() for c in cands}
    new = [c for c in (cand, block) if c is not None and c.key() not in keys]
    at = cands.index(base) + 1
    return [*cands[:at], *new, *cands[at:]], pruned + more


def _reading(ctx: Any) -> Any:
    """``(model, block, Reach)``: the harness's model (unwrapped from the program's compile), one
    instance of its repeated block (None where the ladder found none) and what ``harness.call``'s
    method reaches (:func:`..method_reach.reach`)."""
    from ...engine.watch import unwrapped
    from ..method_reach import reach

    model, _, _ = ctx.reference()
    inner = unwrapped(model)
    blocks = getattr(ctx.evidence, "blocks", None) or []
    block = next(iter(blocks[0].get("modules") or []), None) if blocks else None
    return inner, block, reach(inner, ctx.session.spec.call, ctx.session.src, block)


def block_method_candidate(ctx: Any, base: Candidate, reading: Any, method_cand: str) -> tuple[Candidate | None, list[str]]:
    """``compile-<Block>.<method>``: ``torch.compile`` on the block's own method that the step's
    method calls (``Coupling.inverse``, called as ``layer.inverse(z)`` in a loop over the
    ``ModuleList``): regional compilation of that method, one compile reused across the blocks,
    the code between the blocks left eager. Measured like the other candidates and placed right
    after ``compile-<method>``, so where the gain is not measured (the ladder's order decides,
    :func:`..decide.decide`) the compile of the whole method stays first, and it is chosen only
    where it measures better. Not proposed, and said, where the method calls two or more block
    methods (which one is the region is not one candidate's choice); nothing said where it calls
    none, or the reading is unsure (the edits it keeps say so)."""
    from ...plan import CompileAction

    _, block, read = reading
    if block is None or read.unsure or not read.block_calls:
        return None, []
    if len(read.block_calls) > 1:
        return None, [f"compile-<block method>: model.{ctx.session.spec.call} calls {len(read.block_calls)} methods of "
                      f"{type(block).__name__} ({', '.join(read.block_calls)}): {method_cand} compiles them all"]
    target = read.block_calls[0]
    qual = target.split("::", 1)[1]
    fn = inspect.getattr_static(type(block), qual.rsplit(".", 1)[1], None)
    if hasattr(getattr(fn, "__func__", fn), "_torchdynamo_orig_callable"):
        return None, [f"compile-{qual}: {qual} is already a torch.compile'd function"]
    why = (f"harness.call {ctx.session.spec.call}: model.{ctx.session.spec.call} calls {qual} on each "
           f"{type(block).__name__} block (read statically: {', '.join(read.read[:3])}); torch.compile on {target} "
           "compiles that method once for the blocks (regional compilation of the method the step calls on them)")
    action = CompileAction(action="compile", target=target, strategy="region", why=why)
    return Candidate(f"compile-{qual}", base.plan.model_copy(update={"actions": [*base.plan.actions, action]}), [why]), []


def without_idle_own_edits(ctx: Any, cands: list[Candidate], reading: Any) -> tuple[list[Candidate], list[str]]:
    """``cands`` without the edits of the program's own compile (``as-is+regional``,
    ``as-is+dynamic``, ...: every action a ``compile`` with ``own_call``; ``as-is+nested``, whose
    ``nested`` regions are a hint to that compile, torch docs ``torch.compiler.nested_compile_region``)
    that are sure to compile nothing the step runs, and one pruned line for them; called where one
    step of the method as the program runs it compiled no graph. An edit of a whole-model call
    compiles the model's ``forward`` (a nested region only inside it), its ``regional`` form the
    blocks' ``forward``; where the static reading
    (:func:`..method_reach.reach`) is sure the method reaches neither, the edit is left out so the
    search's budget goes to ``compile-<method>``. An edit of a block's or a function's call, and
    any edit where the reading is unsure, is kept (measured as before). ``reading``:
    :func:`_reading`'s."""
    from ...plan.schema import REGIONAL_METHOD
    from ..candidate import is_as_is

    call = ctx.session.spec.call
    edits = [c for c in cands if c.name != AS_IS and is_as_is(c.name) and c.plan.actions
             and all(a.action == "compile" and (a.own_call is not None or a.strategy == "nested") for a in c.plan.actions)
             and any(a.own_call is not None for a in c.plan.actions)]
    if not edits:
        return cands, []
    inner, block, read = reading
    if read.model_forward or read.unsure:
        return cands, []
    cls = type(inner).__name__
    idle = []
    for c in edits:
        own = [a for a in c.plan.actions if a.own_call is not None]
        regions = [a.own_call.regional for a in own if a.own_call.regional is not None]
        # a nested region is a hint to the program's compile: it compiles nothing where that compile does not run
        whole = all(a.strategy == "whole" or a.own_call.regional is not None for a in own)
        # a regional edit compiles the blocks' forward; the library's own regional method, blocks unread
        if whole and not (regions and (block is None or read.block_forward or REGIONAL_METHOD in regions)):
            idle.append(c.name)
    if not idle:
        return cands, []
    what = f"{cls}.{call} calls neither {cls}.forward nor a block's forward" if block is not None else \
        f"{cls}.{call} does not call {cls}.forward"
    nested = " (or a nested compile region inside it, a hint to that compile)" if any(
        a.strategy == "nested" for c in edits if c.name in idle for a in c.plan.actions) else ""
    line = (f"{', '.join(idle)}: one step of model.{call} as the program runs it compiled no graph, and {what} "
            f"(read statically: {', '.join(read.read)}): an edit of the program's own compile{nested}, which compiles "
            "forward, would change nothing the step runs")
    return [c for c in cands if c.name not in idle], [line]


KIND = CandidateKind("called_method", 5, with_called_method, when_compiles_pruned=False)
