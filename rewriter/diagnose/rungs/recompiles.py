"""Rung 7b: recompiles across the harness shapes, and which dims vary.

The model is compiled once (backend ``eager``: guards and recompiles are decided by Dynamo before
any backend runs, so the cheapest backend gives the same count) and called at every harness
shape; a model that compiles itself (:mod:`.as_run`) is called as the program compiles it, its
backend forced to ``eager`` (:func:`.as_run.compiled_as_run`). Recompiles and their guard failures are read from Dynamo's recompile log
(:mod:`.dynamo_log`). The dims that vary are measured on the model's input tensors and on the
repeated block's input (a forward pre-hook on the first instance of each class a per-block
candidate compiles, every declared class of a model's ``_repeated_blocks`` included, in an eager
pass so that Dynamo never traces it): the block input is the region
boundary where ``mark_dynamic`` belongs (docs/design.md: a mark on ``input_ids`` does not survive the
eager embedding). After the shapes, the reference shape is called again on the same compiled model,
to :data:`.value_guards.CALLS` calls in all: one call per shape fails the new shape's size guard
first and never shows a value that changes every call (a step counter, a cache's fill level), which
those repeated calls do, named with its attribute and line (:mod:`.value_guards`); sharing the
compiled model, Dynamo traces the reference shape once for both readings. Threshold: any recompile after the first
compile (partitioning-the-stack: "Am I recompiling? -> bucket shapes, mark_dynamic").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from ..as_run import compiled_as_run, compiles_itself, marks_eager_only
from ..context import Context
from ..dynamo_log import capture, reset
from ..dynamo_settings import limit_raised, past_limit, under
from ..locate import first_in_src
from ..repeated_calls import capture as inlining, read as read_repeated
from ..rung import Finding, Rung, RungResult
from ..session import tensor_leaves
from ..value_guards import CALLS, describe, remedy, to_json
from .granularity import region_blocks


def varying(shapes: list[list[tuple[int, ...]]]) -> list[dict[str, Any]]:
    """``[{"tensor": i, "dim": d, "sizes": [...]}]`` for dims that differ across calls."""
    named = varying_named([dict(enumerate(call)) for call in shapes])
    return [{"tensor": v["input"], "dim": v["dim"], "sizes": v["sizes"]} for v in named]


def _leaves(args: tuple, kwargs: dict) -> Iterator[tuple[str, Any, bool]]:
    """``(name, leaf, direct)`` for every leaf of a block call's arguments, named like
    ``args[1]``, ``args[2][0]`` or ``position_embeddings[0]``; ``direct``: a positional argument
    itself, the only kind ``mark_dynamic`` at the boundary can reach."""
    from torch.utils import _pytree as pytree

    for path, leaf in pytree.tree_flatten_with_path(args)[0]:
        yield f"args{pytree.keystr(path)}", leaf, len(path) == 1
    for path, leaf in pytree.tree_flatten_with_path(kwargs)[0]:
        key = pytree.keystr(path)  # "['position_embeddings'][0]"
        yield (key[2:].replace("']", "", 1) if key.startswith("['") else key), leaf, False


def nested_tensor_shapes(args: tuple, kwargs: dict) -> dict[str, tuple[int, ...]]:
    """Shapes of the block's tensor inputs that are not a direct positional argument: keyword
    arguments and tensors inside tuples (HF Llama's ``position_embeddings=(cos, sin)``), keyed
    like ``position_embeddings[0]`` or ``args[2][0]``. ``mark_dynamic`` at the boundary cannot
    reach them."""
    import torch

    return {k: tuple(v.shape) for k, v, direct in _leaves(args, kwargs) if isinstance(v, torch.Tensor) and not direct}


def int_inputs(args: tuple, kwargs: dict) -> dict[str, int]:
    """The block's integer inputs (``block(x, seq_len)``, ``position=...``), keyed like
    :func:`nested_tensor_shapes`: a length passed as an int ties the tensor dims it shapes."""
    return {k: v for k, v, _ in _leaves(args, kwargs) if isinstance(v, int) and not isinstance(v, bool)}


def varying_named(shapes: list[dict[Any, tuple[int, ...]]]) -> list[dict[str, Any]]:
    """``[{"input": name, "dim": d, "sizes": [...]}]`` for dims of named inputs that differ
    across calls (names present in every call with one rank)."""
    out = []
    if not shapes:
        return out
    for name in sorted(set.intersection(*(set(s) for s in shapes))):
        ranks = {len(s[name]) for s in shapes}
        if len(ranks) != 1:
            continue
        for d in range(ranks.pop()):
            sizes = [s[name][d] for s in shapes]
            if len(set(sizes)) > 1:
                out.append({"input": name, "dim": d, "sizes": sizes})
    return out


def shapes_stable(ctx: Context) -> bool:
    """True when this rung ran and saw no recompile and no varying input dim across the harness
    shapes (what CUDA graphs and a whole-model ``reduce-overhead`` capture need). A rung that
    errored or was skipped proves nothing: False (treated as varying)."""
    r = ctx.results.get("recompiles")
    if r is None or not r.ok:
        return False
    return not r.measurement.get("recompiles") and not r.measurement.get("varying_input_dims")


#: Dynamo's guard-failure text for a shape (``tensor 'x' size mismatch at index 1. expected 16,
#: actual 24``; strides and rank alike); anything else (``self.layer_idx == 0``) guards a value.
_SHAPE_GUARD = re.compile(r"size mismatch|stride mismatch|rank mismatch|dimensionality|\.size\(\)|\.shape\b|numel")


#: A guard on a tensor property that differs between the first block's input (from the data or an
#: embedding) and the others' (a block's output): ``requires_grad`` in training (an MLP trained
#: from its data), dtype, device. One recompile, then every instance shares the second graph: not
#: per-instance state.
_TENSOR_PROPERTY_GUARD = re.compile(r"requires_grad mismatch|dtype mismatch|device mismatch|dispatch key set mismatch")


def is_tensor_property_guard(guards: list[str]) -> bool:
    """Whether every failed guard is about a tensor property other than its shape
    (:data:`_TENSOR_PROPERTY_GUARD`)."""
    return bool(guards) and all(_TENSOR_PROPERTY_GUARD.search(g) for g in guards)


def tensor_properties(guards: list[str]) -> list[str]:
    """The tensor properties the failed guards name (``requires_grad``, ``dtype``, ``device``,
    ``dispatch key set``), each once, in order."""
    named = [m.group(0).removesuffix(" mismatch") for g in guards for m in [_TENSOR_PROPERTY_GUARD.search(g)] if m]
    return list(dict.fromkeys(named))


def is_shape_guard(guards: list[str]) -> bool:
    """Whether a recompile's failed guards are about tensor shapes (what ``mark_dynamic`` and
    bucketing remove); no guard text counts as a shape (the conservative reading)."""
    return not guards or any(_SHAPE_GUARD.search(g) for g in guards)


def run(ctx: Context) -> RungResult:
    """Compile the model once (backend ``eager``), call it at every harness shape, and report
    Dynamo's recompiles and the dims that vary (module docstring). The block input's dims are
    measured for every class a per-block candidate compiles (:func:`.granularity.region_blocks`):
    ``varying_block_dims``/``varying_block_other_dims`` are the first class's, ``classes`` has
    ``{"class", "varying_block_dims", "varying_block_other_dims"}`` for each."""
    r = RungResult("recompiles", "Recompiles across the harness shapes")
    r.threshold = "any recompile after the first compile (TORCH_LOGS=recompiles)"
    model, _, _ = ctx.reference()
    blocks = region_blocks(ctx.evidence.blocks)
    calls = _block_calls(ctx, model, blocks)
    sweep = _sweep(ctx, model)
    log, input_shapes, how, guards, repeat_error = sweep.log, sweep.input_shapes, sweep.how, sweep.guards, sweep.repeat_error
    per_class = [{"class": b["cls"].__name__, **_block_dims(c, len(input_shapes))} for b, c in zip(blocks, calls)]
    r.findings, by_value = _recompile_findings(ctx, log)
    dynamic_breaks = _dynamic_only_breaks(ctx, log)
    r.findings += [Finding("value_guard", describe(v)[:400], v.file, v.line, v.function) for v in guards]
    r.findings += [Finding("graph_break_dynamic", f"graph break once shapes are dynamic: {reason}"[:300], *site)
                   for site, reason in dynamic_breaks]
    r.measurement = _measurement(ctx, log, input_shapes, per_class, by_value, dynamic_breaks, guards, repeat_error, how)
    r.verdict, r.implies = _sweep_verdict(r.measurement, log, by_value, per_class)
    r.verdict, r.implies = _repeat_verdict(r.verdict, r.implies, guards, repeat_error, dynamic_breaks)
    if log.recompiles:
        r.verdict += _raised_limit(ctx, r, log) + under(ctx.evidence.dynamo_config, ("suppress_errors", "automatic_dynamic_shapes"))
    return r


def _raised_limit(ctx: Context, r: RungResult, log: Any) -> str:
    """Where the program's run raised Dynamo's recompile limit (:func:`.dynamo_settings.limit_raised`):
    the recompiles past torch's default limit, counted in ``r.measurement["recompile_limit_raised"]``
    and said in each of their findings, and the verdict's clause; empty where it did not."""
    raised = limit_raised(ctx.evidence.dynamo_config)
    if raised is None:
        return ""
    past = past_limit(log.recompiles, raised.default)
    for i in past:  # _recompile_findings: one finding per recompile, in the log's order
        r.findings[i].message += f" (past torch's default recompile limit {raised.default}, which the program raised to {raised.value})"
    r.measurement["recompile_limit_raised"] = {"name": raised.name, "value": raised.value, "default": raised.default,
                                               "past_default": len(past)}
    said = (f"{len(past)} of these recompile(s) are past the default, where torch would have run those frames eager"
            if past else f"none of these recompiles is past the default of {raised.default} graphs per code object")
    return f"; the program raised torch._dynamo.config.{raised.name} from {raised.default} to {raised.value}: {said}"


def _block_calls(ctx: Context, model: Any, blocks: list[dict[str, Any]]) -> list[list[tuple[list, dict, dict]]]:
    """Per block class, one ``(positional shapes, nested tensor shapes, ints)`` per harness shape
    that reached its first instance, from an eager pass: a hook inside the compiled model would be
    traced, and Dynamo's guards on its closure show up as recompile reasons."""
    import torch

    calls: list[list[tuple[list, dict, dict]]] = [[] for _ in blocks]
    if not blocks:
        return calls
    seen: list[list[tuple[list, dict, dict]]] = [[] for _ in blocks]

    def hook_for(i: int) -> Any:
        def pre(mod: Any, args: tuple, kwargs: dict) -> None:
            seen[i].append(([tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args],
                            nested_tensor_shapes(args, kwargs), int_inputs(args, kwargs)))
        return pre

    hooks = [b["modules"][0].register_forward_pre_hook(hook_for(i), with_kwargs=True) for i, b in enumerate(blocks)]
    try:
        for shape in ctx.session.spec.shapes:
            _, inputs = ctx.session.build(shape)
            for s in seen:
                s.clear()
            with torch.compiler.set_stance("force_eager"):  # eager also where the program compiles itself
                ctx.session.run(ctx.session.step_fn(model, inputs))
            for i, s in enumerate(seen):
                if s:
                    calls[i].append(s[0])
    finally:
        for h in hooks:
            h.remove()
    return calls


@dataclass
class _Sweep:
    """What one compiled model showed over the harness shapes (:func:`_sweep`).

    Attributes:
        log: Dynamo's recompile log over the first call at each harness shape.
        input_shapes: each shape's input tensor shapes, harness order.
        how: how the model was compiled (:func:`.as_run.compiled_as_run`).
        guards: the value guards of the repeated calls at the reference shape (:func:`.value_guards.read`).
        repeat_error: why those repeated calls failed, or None.
    """

    log: Any
    input_shapes: list[list[tuple[int, ...]]]
    how: str
    guards: list[Any]
    repeat_error: str | None


def _sweep(ctx: Context, model: Any) -> _Sweep:
    """Compile the model once as the program does (:func:`.as_run.compiled_as_run`, backend forced
    to ``eager``), call it once at every harness shape under Dynamo's recompile log, then
    :data:`.value_guards.CALLS` - 1 more times at the reference shape (:func:`_repeat`): every
    recompile of those calls is a guard on a value (:mod:`.value_guards`). One compiled model
    serves both readings, so Dynamo traces the reference shape once; the shapes run first, so a
    model whose state cannot take more calls fails the repeated calls, not the sweep."""
    import torch

    input_shapes: list[list[tuple[int, ...]]] = []
    own = compiles_itself(ctx)
    compiled, how = compiled_as_run(model, own, ctx.session.spec.call)
    forward = ctx.session.forward_name()
    reset()
    try:
        # the program's own compile meets its marks as it runs; a whole-model wrap skips them in its graph
        marks = nullcontext() if own else marks_eager_only()
        with torch.compiler.set_stance("default", force_backend="eager"), marks:
            first_step = None
            with capture() as log:
                for shape in ctx.session.spec.shapes:
                    _, inputs = ctx.session.build(shape)
                    input_shapes.append([tuple(t.shape) for t in tensor_leaves(inputs)])
                    step = ctx.session.step_fn(compiled, inputs)
                    # the reference shape's first trace: what Dynamo inlined into each frame, and how often
                    with inlining() if first_step is None else nullcontext() as inlined:
                        ctx.session.run(step, f"{forward} under {how} at {dict(shape)}")
                    if first_step is None:
                        ctx.evidence.repeated_calls = read_repeated(inlined, ctx.session.src)
                    first_step = first_step or step
            guards, repeat_error = _repeat(ctx, first_step, how, forward, ctx.session.spec.shapes[0])
    finally:
        reset()
    return _Sweep(log, input_shapes, how, guards, repeat_error)


def _repeat(ctx: Context, step: Any, how: str, forward: str, shape: Any) -> tuple[list[Any], str | None]:
    """Call ``step`` (the compiled model at the reference shape, after the sweep)
    :data:`.value_guards.CALLS` - 1 more times and read the value guards its recompiles show
    (:func:`.value_guards.read`), and None; or ``[]`` and why those calls failed (a model whose
    state cannot take more calls): the sweep's reading stands. Dynamo's recompile limit is raised
    by those calls for their duration: the shapes may have used it up, and a call past it would
    run eager and show no guard."""
    from ..value_guards import read

    try:
        with capture() as log, _limit_raised_by(CALLS):
            for i in range(1, CALLS):
                ctx.session.run(step, f"{forward} under {how}, call {i + 1} of {CALLS} at {dict(shape)}")
    except Exception as exc:  # noqa: BLE001 - recorded; the sweep measured the shapes
        return [], " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return read(log, ctx.session.src, CALLS), None


def _limit_raised_by(added: int) -> Any:
    """Dynamo's recompile limit raised by ``added`` graphs for the duration (a no-op where the
    torch in use has no limit to read)."""
    import contextlib

    import torch._dynamo.config as config

    from ...engine.blocks import recompile_limit

    name, limit = recompile_limit()
    if not added or limit is None:
        return contextlib.nullcontext()
    return config.patch(**{name: limit + added})


def _frame_site(src: Any, rc: Any) -> tuple[str, int, str] | None:
    """``(file relative to SRC, line, function)`` of the frame Dynamo recompiled (its ``def``, as
    the "Recompiling function f in path:line" message names it), None where it is not under SRC."""
    from ..locate import relpath

    rel = relpath(src, rc.file) if rc.file else None
    return (rel, rc.line, rc.function) if rel is not None else None


def _recompile_findings(ctx: Context, log: Any) -> tuple[list[Finding], list[str]]:
    """One ``recompile`` finding per recompile Dynamo logged, located in the source where it can
    be, and the first failed guard (with its site) of each recompile that guards a value, not a
    shape (no guard text reads as a shape guard: :func:`is_shape_guard`)."""
    findings: list[Finding] = []
    by_value: list[str] = []
    for rc in log.recompiles:
        # the guard's user line, else the recompiled frame's own def where it is under SRC (a shape
        # guard on the frame's argument has no line of its own)
        guard = log.guard_site(ctx.session.src, rc.text)
        site = guard or _frame_site(ctx.session.src, rc)
        # Dynamo lists one failed guard per cache entry it checked: after an automatic-dynamic
        # recompile the static and the dynamic entry fail on the same guard, written twice
        text = f"recompiled {rc.function}: " + "; ".join(list(dict.fromkeys(rc.guards))[:2])
        findings.append(Finding("recompile", text[:300], *(site if site else (None, None, None))))
        if not is_shape_guard(rc.guards):
            by_value.append(rc.guards[0] + (f" at {guard[0]}:{guard[1]}" if guard else ""))
    return findings, by_value


def _measurement(ctx: Context, log: Any, input_shapes: list[list[tuple[int, ...]]], per_class: list[dict[str, Any]],
                 by_value: list[str], dynamic_breaks: list[Any], guards: list[Any], repeat_error: str | None,
                 how: str) -> dict[str, Any]:
    """The rung's measurement dict (the keys :func:`run`'s docstring and the verdict read)."""
    spec = ctx.session.spec
    return {
        "shapes": len(spec.shapes),
        "dynamic_only_graph_breaks": len(dynamic_breaks),
        "recompiles": len(log.recompiles),
        "value_guard_recompiles": len(by_value),
        "varying_shape_keys": sorted({k for s in spec.shapes for k in s if len({s.get(k) for s in spec.shapes}) > 1}),
        "varying_input_dims": varying(input_shapes),
        "varying_block_dims": per_class[0]["varying_block_dims"] if per_class else [],
        "varying_block_other_dims": per_class[0]["varying_block_other_dims"] if per_class else [],
        "classes": per_class,
        "limit_hit": bool(log.limit_hit),
        # the reference shape called value_guards.CALLS times on one compiled model: the values
        # that changed between calls at one shape (a step counter, a fill level)
        "repeated_calls": CALLS,
        "value_guards": to_json(guards),
        "value_guards_error": repeat_error,
        "compiled_by": how,
        # functions of SRC Dynamo inlined many times into one traced frame (:mod:`..repeated_calls`)
        "repeated_calls": [r.to_json() for r in ctx.evidence.repeated_calls or []],
    }


def _sweep_verdict(m: dict[str, Any], log: Any, by_value: list[str], per_class: list[dict[str, Any]]) -> tuple[str, str]:
    """The verdict on the shape sweep and what it implies: the recompiles and the dims that vary
    (and how many guard values, which ``mark_dynamic`` does not remove), else stable."""
    keys, n = m["varying_shape_keys"], m["shapes"]
    if not log.recompiles:
        return (f"no recompiles across {n} shapes (varying {', '.join(keys)})" if keys
                else f"stable: no recompiles across {n} shape(s)"), "none"
    dims = _dims_text(per_class) or ", ".join(f"input {v['tensor']} dim {v['dim']}" for v in m["varying_input_dims"])
    verdict = f"{len(log.recompiles)} recompile(s) across {n} shapes; varying: {dims or 'no tensor dim (a guard on a value)'}"
    if by_value:
        verdict += (f"; {len(by_value)} of them from guards on values, not shapes ({'; '.join(sorted(set(by_value))[:2])}): "
                    "mark_dynamic does not remove those")
    implies = "mark_dynamic at the region boundary (or bucket)" if len(by_value) < len(log.recompiles) else "keep the guarded value out of compiled code"
    return verdict, implies


def _repeat_verdict(verdict: str, implies: str, guards: list[Any], repeat_error: str | None,
                    dynamic_breaks: list[Any]) -> tuple[str, str]:
    """``verdict`` and ``implies`` with what the repeated calls at the reference shape found (the
    values that changed, or why those calls failed) and the graph breaks only dynamic shapes show."""
    changing = [v for v in guards if v.every_call]
    if guards:
        verdict += (f"; {CALLS} calls at the reference shape: " + "; ".join(
            f"{v.name} at {v.where} " + (f"changes every call ({v.recompiles} recompile(s), values "
                                         f"{', '.join(map(str, v.values[:4]))})" if v.every_call else
                                         f"changed {v.recompiles} time(s), then held") for v in guards[:3]))
    if changing:
        implies = remedy(changing[0]) if implies == "none" else f"{implies}; and for {changing[0].name}: {remedy(changing[0])}"
    if repeat_error:
        verdict += f"; the {CALLS} calls at the reference shape that find values changing between calls failed ({repeat_error[:160]})"
    if dynamic_breaks:
        (file, line, _), reason = dynamic_breaks[0]
        verdict += (f"; {len(dynamic_breaks)} graph break(s) appear only once shapes are dynamic "
                    f"(at {file}:{line}: {reason[:120]}): marking those dims dynamic would break the graph every call")
    return verdict, implies


def _block_dims(calls: list[tuple[list, dict, dict]], n: int) -> dict[str, list[dict[str, Any]]]:
    """The varying dims of one block class's input over the harness shapes (``calls``: one
    ``(positional shapes, nested tensor shapes, ints)`` per shape; none unless all ``n`` shapes
    reached the block): ``varying_block_dims`` (``{"arg", "dim", "sizes"}``) and
    ``varying_block_other_dims`` (``{"input", "dim", "sizes"}``, ``dim`` None for an int)."""
    if len(calls) != n:
        return {"varying_block_dims": [], "varying_block_other_dims": []}
    positional = [{"arg": v["tensor"], "dim": v["dim"], "sizes": v["sizes"]} for v in varying([c[0] for c in calls])]
    other = varying_named([c[1] for c in calls])
    # an int as a 0-d "shape": dim 0 is its value
    other += [dict(v, dim=None) for v in varying_named([{k: (x,) for k, x in c[2].items()} for c in calls])]
    return {"varying_block_dims": positional, "varying_block_other_dims": other}


def _dims_text(per_class: list[dict[str, Any]]) -> str:
    """The block dims that vary, for the verdict: ``block arg 0 dim 1, block input x dim 0`` for
    one class; for several (a model's declared blocks) each class named, classes whose dims read
    the same together: ``A, B: arg 0 dim 1; C: input x dim 0``."""
    groups: dict[str, list[str]] = {}
    for c in per_class:
        prefix = "block " if len(per_class) == 1 else ""
        text = ", ".join([f"{prefix}arg {v['arg']} dim {v['dim']}" for v in c["varying_block_dims"]]
                         + [f"{prefix}input {v['input']}" + (f" dim {v['dim']}" if v["dim"] is not None else "")
                            for v in c["varying_block_other_dims"]])
        if text:
            groups.setdefault(text, []).append(c["class"])
    if len(per_class) == 1:
        return next(iter(groups), "")
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in groups.items())


def _dynamic_only_breaks(ctx: Context, log: Any) -> list[tuple[tuple[str | None, int | None, str | None], str]]:
    """Graph breaks Dynamo logged while compiling across the shapes that the static ``explain``
    of the graph-breaks rung did not see: code that traces with static shapes and breaks once a
    dim is symbolic (``is_causal=(t > 1)`` becomes a SymBool, as in a KV-cache decoder).
    ``[((file, line, qualname), reason)]``, one per site; empty when the graph-breaks
    rung did not run ok (nothing to tell them apart by)."""
    static = ctx.results.get("graph_breaks")
    if static is None or not static.ok:
        return []
    seen = {(f.file, f.line) for f in static.findings}
    out: list = []
    for b in log.graph_breaks:
        site = first_in_src([(b.file, b.line, "?")], ctx.session.src)
        key = (site[0], site[1]) if site else (b.file, b.line)
        if key in seen:
            continue
        seen.add(key)
        out.append(((site if site else (None, None, None)), b.reason))
    return out


RUNG = Rung(name="recompiles", order=80, run=run, compiles=True)
