"""Rung 7c: recompiles across the instances of a repeated block, and a hit recompile limit.

The block class's ``forward`` is compiled as one region (backend ``eager``: guards are Dynamo's,
not the backend's) and one step runs at every harness shape in order (the reference first), so
every instance calls the same compiled code, as a per-block plan or validate's regional baseline
does. A guard on per-instance state (an int attribute such as ``self.layer_idx``, a per-layer
cache object) fails for each new instance and recompiles; so does each distinct parameter/buffer
shape of the block's instances (ResNet's widths: :mod:`rewriter.engine.blocks` groups them),
one graph per shape, and a new input shape can add a graph per instance shape again. Past
``torch._dynamo.config.recompile_limit`` (8 by default; ``cache_size_limit`` before torch 2.7)
Dynamo runs the rest eager without an error (docs/design.md rung 7). Every class a per-block
candidate compiles is examined (:func:`.granularity.region_blocks`: a model's declared
``_repeated_blocks`` may list several, Flux's double- and single-stream blocks), one sweep each.

Everything counted is Dynamo's own: graphs from ``torch._dynamo.utils.counters["stats"]
["unique_graphs"]`` and the compiled code's cache entries, recompiles and their guard text and
source line from its recompile log (:mod:`.dynamo_log`; for ``forward`` and for its resume
functions after a graph break, :func:`is_frame_of`), the limit from its "hit
config.recompile_limit (N)" warning and from the "recompile limit exceeded" entry of
``counters["unimplemented"]``: nothing is inferred from the block count. A failed size guard is
a shape (counted apart, ``shape_recompiles``), not per-instance state; so is a failed guard on
another tensor property (``requires_grad`` in training, dtype, device: ``property_recompiles``,
the property the recompiles rung names too), and so are up to ``distinct_shapes - 1``
recompiles of one frame at one input shape, whatever guard Dynamo names (``structure_recompiles``: a stride that differs with the width). Threshold: value-guard
recompiles beyond those across instances at the reference shape (the region does not hold one
graph per class and shape), or the recompile limit hit anywhere in the sweep (blocks silently
eager).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...engine.watch import FrameLog, compiles_off, unwrapped
from ..context import Context
from ..dynamo_log import capture, reset
from ..locate import first_in_library, frames_from_text
from ..rung import Finding, Rung, RungResult
from ..session import HarnessFailure
from ..value_guards import limit_remedy
from .granularity import region_blocks
from .recompiles import is_shape_guard, is_tensor_property_guard, tensor_properties


def is_frame_of(function: str, name: str) -> bool:
    """Whether Dynamo's frame ``function`` is ``name`` itself or one of its resume functions
    (``torch_dynamo_resume_in_forward_at_36``: the rest of ``forward`` after a graph break at
    line 36, compiled as its own frame; a per-instance guard after the break fails there)."""
    return function == name or re.fullmatch(rf"torch_dynamo_resume_in_{re.escape(name)}_at_\d+", function) is not None


#: Dynamo's limit warning (torch/_dynamo/convert_frame.py): "torch._dynamo hit
#: config.recompile_limit (8)\n   function: 'forward' (file.py:12)\n   last reason: 0/7: ...".
_LIMIT_TEXT = re.compile(r"hit config\.(?P<config>recompile_limit|cache_size_limit) \((?P<limit>\d+)\)"
                         r"(?:.*?function: '(?P<function>[^']+)' \((?P<where>[^)]*)\))?(?:.*?last reason: (?P<reason>[^\n]*))?", re.S)


def limit_hits(messages: list[str]) -> list[dict[str, Any]]:
    """One dict per "hit config.recompile_limit" warning Dynamo logged, parsed from its text:
    ``{"config", "limit", "function", "where", "last_reason"}`` (None where the text lacks one;
    ``last_reason`` is the failed guard without the ``# source`` comment Dynamo appends)."""
    out = []
    for msg in messages:
        m = _LIMIT_TEXT.search(msg)
        if m:
            out.append({"config": m.group("config"), "limit": int(m.group("limit")), "function": m.group("function"),
                        "where": m.group("where"), "last_reason": (m.group("reason") or "").split("  #")[0].strip()[:300] or None})
    return out


def _dynamo_counts(code: Any) -> dict[str, Any]:
    """Dynamo's counters since the last reset: graphs captured, frames, whether its
    ``unimplemented`` table records the recompile limit, and the cache entries (compiled graphs
    kept) of ``code`` (``_debug_get_cache_entry_list``; None where this torch lacks it)."""
    from torch._dynamo.utils import counters

    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries: int | None = len(_debug_get_cache_entry_list(code))
    except Exception:  # API missing or moved in this torch
        entries = None
    return {
        "unique_graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
        "frames_ok": int(counters.get("frames", {}).get("ok", 0)),
        "limit_in_unimplemented": sum(n for k, n in counters.get("unimplemented", {}).items() if "recompile limit" in k.lower() or "recompile_limit" in k),
        "cache_entries": entries,
    }


def run(ctx: Context) -> RungResult:
    """Examine every class a per-block candidate compiles (:func:`_examine`, one sweep each).
    One class: its result as is. Several: ``recompiles`` and ``limit_hit`` over all of them, the
    other keys the first class's, ``classes`` each class's measurement, the findings of all, and
    one verdict per class."""
    blocks = region_blocks(ctx.evidence.blocks)
    if not blocks:
        return RungResult("instance_recompiles", "Recompiles across instances of the repeated block").skip(
            "no repeated block (instances of one class in ModuleList/Sequential/ModuleDict containers)")
    results = [_examine(ctx, b) for b in blocks]
    if len(results) == 1:
        return results[0]
    r = RungResult("instance_recompiles", "Recompiles across instances of the repeated blocks")
    r.threshold = results[0].threshold
    r.measurement = dict(results[0].measurement, recompiles=sum(x.measurement["recompiles"] for x in results),
                         limit_hit=any(x.measurement["limit_hit"] for x in results),
                         classes=[x.measurement for x in results])
    r.findings = [f for x in results for f in x.findings]
    r.verdict = "; ".join(x.verdict for x in results)
    # what the first class with per-instance recompiles implies, else the first that implies anything
    implied = [x.implies for x in results if x.implies != "none"]
    r.implies = next((x.implies for x in results if x.measurement["recompiles"] and x.implies != "none"), None) \
        or (implied[0] if implied else "none")
    return r


@dataclass
class _Sweep:
    """One block class compiled once and run at every harness shape (:func:`_sweep`): Dynamo's
    recompile log, one entry per shape (``shape``, ``new_graphs``, ``recompiles``,
    ``limit_hits``), the counters after the last shape, the recompiles logged at the
    reference shape, and the frames Dynamo compiled (:meth:`rewriter.engine.watch.FrameLog.frames`:
    the block's own and any the program still compiles, such as a compiled free function the
    model is passed to)."""

    log: Any
    per_shape: list[dict[str, Any]]
    counts: dict[str, Any]
    at_reference: list[Any]
    frames: list[dict[str, Any]]


@dataclass
class _Recompiles:
    """The sweep's recompiles of the block's frame, sorted by cause (module docstring):
    ``mine`` on per-instance state, ``structural`` the distinct shapes explain, ``sized`` on
    tensor sizes, ``property`` on another tensor property (``requires_grad`` in training: the
    first block's input comes from the data, the others' from a block), ``properties`` the
    properties those name, ``by_frame`` the reference shape's recompiles per frame name."""

    mine: list[Any]
    structural: int
    sized: int
    property: int
    properties: list[str]
    by_frame: dict[str, list[Any]]


def _examine(ctx: Context, block: dict[str, Any]) -> RungResult:
    """Compile one block class's ``forward`` once, run one step per harness shape, and report
    Dynamo's graphs, recompiles and recompile-limit hits (module docstring). Measurement:
    ``instances``, ``distinct_shapes`` (parameter/buffer shape signatures), ``recompiles``
    (value guards at the reference shape beyond one graph per distinct shape),
    ``structure_recompiles`` (the recompiles the distinct shapes explain), ``shape_recompiles``
    (size guards, the whole sweep), ``property_recompiles`` and ``properties`` (guards on
    another tensor property, the whole sweep, and the properties they name), ``graphs`` and
    ``graphs_per_shape`` (``unique_graphs``), ``cache_entries``, ``limit_hit``,
    ``recompile_limit`` (the value in Dynamo's warning, else its config), ``limit_hits``."""
    from ...engine.blocks import recompile_limit

    r = RungResult("instance_recompiles", "Recompiles across instances of the repeated block")
    r.threshold = "any value-guard recompile across instances at one shape; recompile limit hit -> blocks silently eager"
    cls = block["cls"]
    config_name, config_limit = recompile_limit()
    base = cls.forward
    name = getattr(base, "__name__", "forward")
    # Dynamo names a frame by its code object, not by ``__name__``: transformers 5's
    # GradientCheckpointingLayer wraps every decoder layer's ``forward`` (functools.wraps keeps
    # the name) in ``forward_with_checkpointing``, the frame that recompiles per instance on
    # the DynamicCache's ``layers[0].is_initialized`` (tiny GPT-2/Llama: 2 + 2 graphs were read
    # as "no recompile across instances")
    frame = getattr(getattr(base, "__code__", None), "co_name", name)
    sweep = _sweep(ctx, cls)
    rc = _sort_recompiles(sweep, frame, block.get("distinct_shapes", 1))
    r.findings.extend(_guard_findings(ctx, sweep.log, rc.mine))
    hits = limit_hits(sweep.log.limit_hit)
    limit_hit = bool(hits) or sweep.counts["limit_in_unimplemented"] > 0
    limit = hits[0]["limit"] if hits else config_limit
    r.findings.extend(_limit_findings(ctx, sweep.log, hits, limit_hit, limit, name))
    r.measurement = _measurement(block, sweep, rc, hits, limit_hit, limit, f"torch._dynamo.config.{config_name} = {config_limit}")
    r.measurement.update(_frames(ctx, sweep.frames, frame, base.__code__))
    r.verdict, r.implies = _verdict(ctx, r, sweep, rc, name, config_name)
    return r


def _sweep(ctx: Context, cls: type) -> _Sweep:
    """Compile ``cls.forward`` (backend ``eager``), run one step per harness shape (the
    reference first) under Dynamo's recompile log, and put ``forward`` back as it was."""
    import torch

    model, inputs, _ = ctx.reference()
    # the program's own compiles on the model's modules (torch.compile(model) or of a child,
    # model.compile(), a compiled forward attribute: engine.watch.compiles_off) are set aside
    # for the sweep and put back after: Dynamo tracing into the block's compiled
    # forward from inside it fails on its own guards (CLOSURE_MATCH on the compiled function's
    # closure; "'CatchErrorsWrapper' object has no attribute '__closure__'" on transformers' Llama),
    # and the sweep asks what the block does compiled by itself. Its classes' decorated methods
    # stay: the sweep sets the block class's forward itself
    model = unwrapped(model)
    step = ctx.session.step_fn(model, inputs)
    shapes = ctx.session.spec.shapes
    reset()
    original = cls.__dict__.get("forward")
    base = cls.forward
    cls.forward = torch.compile(base, backend="eager")
    per_shape: list[dict[str, Any]] = []
    probe = f"stackpart's probe ({cls.__name__}.forward compiled by itself, backend eager, in {ctx.session.forward_name()}"
    frame_log = FrameLog()
    frame_log.install()  # after reset(), which clears Dynamo's callbacks
    try:
        with capture() as log, compiles_off(model, classes=False):
            counts = _dynamo_counts(base.__code__)  # after each shape: the next shape's "before"
            for i, shape in enumerate(shapes):
                before = (counts["unique_graphs"], len(log.recompiles), len(log.limit_hit))
                if i > 0:
                    _, inputs = ctx.session.build(shape)
                    step = ctx.session.step_fn(model, inputs)
                _run_probe(ctx, step, f"{probe} at {dict(shape)})")
                counts = _dynamo_counts(base.__code__)
                per_shape.append({"shape": dict(shape), "new_graphs": counts["unique_graphs"] - before[0],
                                  "recompiles": len(log.recompiles) - before[1], "limit_hits": len(log.limit_hit) - before[2],
                                  "_first": before[1]})
    finally:
        frames = frame_log.frames()  # read while installed: once removed it reads Dynamo's metrics instead
        frame_log.remove()
        if original is None:
            del cls.forward
        else:
            cls.forward = original
        reset()
    at_reference = log.recompiles[: per_shape[1]["_first"]] if len(per_shape) > 1 else log.recompiles
    for e in per_shape:
        e.pop("_first")
    return _Sweep(log, per_shape, counts, at_reference, frames)


def _frames(ctx: Context, frames: list[dict[str, Any]], frame: str, code: Any) -> dict[str, Any]:
    """How the sweep's graphs divide between the probe's compile (the block's ``forward``, whose
    code object is ``code`` and frame name ``frame``, and any frame compiled under it: a helper
    after a graph break) and the frames of the program's own compiles the probe leaves in place
    (a compiled free function the model is passed to, gpt-fast's ``prefill``), which trace the
    block inside them. Read from :meth:`rewriter.engine.watch.FrameLog.frames` (each frame's
    graphs and the function handed to ``torch.compile``; a frame whose entry is not known counts
    as the probe's). ``block_graphs``, and ``program_frames``: one ``{"name", "where", "graphs"}``
    per frame of the program's with a graph, ``where`` its ``file:line``, relative to SRC where
    it is under it."""
    from ..locate import relpath

    def probes(f: dict[str, Any]) -> bool:
        entry = f.get("entry")
        if f["file"] == code.co_filename and is_frame_of(f["name"].rsplit(".", 1)[-1].split(" ")[0], frame):
            return True
        return entry is None or (entry.get("file"), entry.get("line")) == (code.co_filename, code.co_firstlineno)

    others = [{"name": f["name"], "where": f"{relpath(ctx.session.src, f['file']) or f['file']}:{f['line']}", "graphs": f["graphs"]}
              for f in frames if not probes(f) and f["graphs"]]
    return {"block_graphs": sum(f["graphs"] for f in frames if probes(f)), "program_frames": others}


def _run_probe(ctx: Context, step: Any, probe: str) -> None:
    """Run one step of the sweep, named ``probe`` in its failure. A failure raised inside Dynamo or
    its backend is the probe's (the block compiled by the rung), not the model's: the program's
    step ran as the program runs at every harness shape before the compile rungs (setup and the
    first rung), and the message says so.

    Raises:
        HarnessFailure: the step raised; from Dynamo, "failed inside Dynamo" and the exception.
    """
    try:
        ctx.session.run(step, probe)
    except HarnessFailure as exc:
        cause = exc.__cause__
        if cause is None or not type(cause).__module__.startswith(("torch._dynamo", "torch._inductor")):
            raise
        raised = exc.message.removeprefix("raised ")
        said = (f"failed inside Dynamo ({raised}); the program's step ran as the program runs at every "
                "harness shape before this rung, so stackpart's probe failed, not the model")
        raise HarnessFailure(exc.rung, probe, said, exc.path, exc.line, note=exc.note) from cause


def _sized_guard(rc: Any) -> bool:
    """Whether a recompile failed on a tensor's size or property: not per-instance state (an MoE
    expert's routed-token count, data-dependent; a ResNet block's width recompiles once per
    size; only guards on values, ``self.layer_idx == 0``, recompile per instance)."""
    return bool(rc.guards) and (is_shape_guard(rc.guards) or is_tensor_property_guard(rc.guards))


def _sort_recompiles(sweep: _Sweep, frame: str, distinct: int) -> _Recompiles:
    """Sort the recompiles of ``frame`` (and its resume functions) by cause. Instances that
    differ in structure (a width, a stride) need a graph each: up to ``distinct - 1``
    recompiles of one frame at one input shape are theirs, whichever guard Dynamo names first
    (ResNet's "convolution.stride == (1, 1)"). Beyond that, a frame's value-guard recompiles
    are per-instance state."""
    frames = [rc for rc in sweep.log.recompiles if is_frame_of(rc.function, frame)]
    by_frame: dict[str, list[Any]] = {}
    for rc in sweep.at_reference:
        if is_frame_of(rc.function, frame):
            by_frame.setdefault(rc.function, []).append(rc)
    mine = [rc for rcs in by_frame.values() if len(rcs) > distinct - 1 for rc in rcs if not _sized_guard(rc)]
    structural = sum(len(rcs) for rcs in by_frame.values() if len(rcs) <= distinct - 1)
    sized = sum(1 for rc in frames if _sized_guard(rc) and is_shape_guard(rc.guards))
    on_property = [rc for rc in frames if _sized_guard(rc) and not is_shape_guard(rc.guards)]
    properties = list(dict.fromkeys(p for rc in on_property for p in tensor_properties(rc.guards)))
    return _Recompiles(mine, structural, sized, len(on_property), properties, by_frame)


def _guard_findings(ctx: Context, log: Any, mine: list[Any]) -> list[Finding]:
    """One ``guard`` finding per source line (or guard text, where no line is found) of the
    per-instance recompiles, in the order Dynamo logged them. A guard no line under SRC holds
    names the installed package's function its user stack ends in (``library``:
    ``transformers.cache_utils:DynamicLayer.update`` of DynamicCache's ``layers[0].is_initialized``,
    :func:`.locate.first_in_library`); its ``file`` stays None (its ``where`` says no line under SRC):
    no plan edits that line, and the planner reads a guard with no SRC function as no helper to
    disable."""
    findings: list[Finding] = []
    guards: dict[str, int] = {}
    for rc in mine:
        site = log.guard_site(ctx.session.src, rc.text)
        g = rc.guards[0] if rc.guards else "no guard text in Dynamo's log"
        key = f"{site[0]}:{site[1]}" if site else g
        if key not in guards:
            lib = None if site else first_in_library(list(reversed(frames_from_text(rc.text))), ctx.session.src)
            findings.append(Finding("guard", f"guard failure: {g}"[:300], *(site if site else (None, None, None)),
                                    library=lib[3] if lib else None))
        guards[key] = guards.get(key, 0) + 1
    return findings


def _guard_where(f: Finding) -> str:
    """Where a ``guard`` finding is, for the verdict: ``file:line`` under SRC, or the library
    function with no line under SRC (``transformers.cache_utils:DynamicLayer.update, no line
    under SRC``)."""
    return f"{f.library}, {f.where}" if f.library and f.file is None else f.where


def per_instance_implies(guards: list[Finding]) -> str:
    """What per-instance recompiles imply, from the ``guard`` findings: a line under SRC, or none
    found, is code to keep eager (the planner's ``disable`` of a helper) or restructure; where every
    guard is in an installed library's function (``library``, no line under SRC), the user has no
    line to disable, and the message says what the search measures instead (the planner's rules
    plan no compile of the block; the search compiles it despite the guard, with the recompile
    limit raised to instances x shapes where the limit was hit, :mod:`..kinds.recompile_limit`,
    beside the whole-model compile, which traces every instance's call in one frame) and the
    library-target ``disable`` a plan may carry by hand (docs/library-models.md), which the search
    does not propose."""
    libs = list(dict.fromkeys(f.library for f in guards if f.library and f.file is None))
    if not guards or len(libs) == 0 or any(f.file is not None or not f.library for f in guards):
        return "disable the per-instance code (keep it eager) or restructure; do not compile the block as is"
    named = ", ".join(libs)
    return (f"the guard is in {named}, an installed library's code with no line under SRC to disable: keep the "
            "whole-model compile (one frame traces every instance's call), or the block compiled per instance only "
            "where the search measures it holding its graphs (the per-block candidates despite the guard; "
            "+recompile_limit where the limit was hit); a disable action on that library target, applied at the "
            "harness's site (docs/library-models.md), keeps it eager at a graph break in every block: write it "
            "by hand, the search does not propose it")


def _limit_findings(ctx: Context, log: Any, hits: list[dict[str, Any]], limit_hit: bool, limit: int, name: str) -> list[Finding]:
    """The ``recompile_limit`` finding: from Dynamo's first limit warning (located where its
    text names a line), else from its counters alone; none where the limit was not hit."""
    if hits:
        h = hits[0]
        site = log.guard_site(ctx.session.src, next(t for t in log.limit_hit if _LIMIT_TEXT.search(t)))
        what = f"recompile limit ({h['limit']}) hit in {h['function'] or name}" + (f", last reason: {h['last_reason']}" if h["last_reason"] else "")
        return [Finding("recompile_limit", f"{what}: the remaining calls run eager"[:300], *(site if site else (None, None, None)))]
    if limit_hit:
        return [Finding("recompile_limit", f"recompile limit ({limit}) hit (Dynamo's counters; no warning text logged): the remaining calls run eager")]
    return []


def _measurement(block: dict[str, Any], sweep: _Sweep, rc: _Recompiles, hits: list[dict[str, Any]], limit_hit: bool,
                 limit: int, config: str) -> dict[str, Any]:
    """The rung's measurement dict (keys in :func:`_examine`'s docstring)."""
    return {
        "block": block["name"],
        "class": block["cls"].__name__,
        "instances": len(block["modules"]),
        "containers": len(block.get("containers") or [None]),
        "distinct_shapes": block.get("distinct_shapes", 1),
        "shape_groups": [len(s["instances"]) for s in block.get("shapes", [])],
        "shapes_run": len(sweep.per_shape),
        "recompiles": len(rc.mine),
        "shape_recompiles": rc.sized,
        "property_recompiles": rc.property,
        "properties": rc.properties,
        "structure_recompiles": rc.structural,
        "graphs": sweep.counts["unique_graphs"],
        "graphs_per_shape": [e["new_graphs"] for e in sweep.per_shape],
        "cache_entries": sweep.counts["cache_entries"],
        "per_shape": sweep.per_shape,
        "limit_hit": limit_hit,
        "recompile_limit": limit,
        "recompile_limit_config": config,
        "limit_hits": hits,
    }


def _verdict(ctx: Context, r: RungResult, sweep: _Sweep, rc: _Recompiles, name: str, config_name: str) -> tuple[str, str]:
    """The verdict and what it implies, from the measurement: per-instance recompiles first, then
    a hit recompile limit, then distinct parameter shapes, then several graphs per call."""
    m = r.measurement
    n, cname, distinct, limit, hits = m["instances"], m["class"], m["distinct_shapes"], m["recompile_limit"], m["limit_hits"]
    graphs = f"{m['graphs']} graph(s) of {cname}.{name} over {len(sweep.per_shape)} shape(s) ({' + '.join(map(str, m['graphs_per_shape']))})"
    fell = ""
    if m["limit_hit"]:
        fell = (f"recompile limit ({limit}) hit" + (f" in {hits[0]['function']}" if hits and hits[0]["function"] else "")
                + (f" ({hits[0]['last_reason']})" if hits and hits[0]["last_reason"] else "") + ": the rest run eager")
    if rc.mine:
        guards = [f for f in r.findings if f.kind == "guard"]
        where = ", ".join(_guard_where(f) for f in guards)
        return (f"{len(rc.mine)} recompile(s) across {n} instances of {cname} (guard at {where})" + (f"; {fell}" if m["limit_hit"] else ""),
                per_instance_implies(guards))
    if m["limit_hit"]:
        # a higher limit only where the values are bounded: not for a value that changes every call
        # (a step counter, a fill level; .value_guards)
        return (f"{n} instances of {cname} in {distinct} parameter shape(s): {graphs}; {fell}",
                "compile fewer distinct shapes per code object (one region per shape group, or the stage) "
                f"or {limit_remedy(ctx, config_name, hits[0]['last_reason'] if hits else None, cname)}")
    if not m["graphs"]:
        # the step never called the block's forward (harness.call names a method that calls another
        # of its methods, model.inverse -> block.inverse): nothing of the block was compiled to read
        return (f"the step ({ctx.session.forward_name()}) never called {cname}.{name}: {graphs}, so no instance "
                "recompile was measured", r.implies)
    if m["program_frames"]:
        return _in_program_frames(m, cname, name, len(sweep.per_shape)), r.implies
    if distinct > 1:
        return f"{n} instances of {cname} in {distinct} parameter shapes: {graphs}, within the recompile limit ({limit})", r.implies
    return _shared_verdict(ctx, rc, n, cname, graphs, m["graphs_per_shape"], len(sweep.per_shape)), r.implies


def _in_program_frames(m: dict[str, Any], cname: str, name: str, shapes: int) -> str:
    """The verdict where frames of the program's own compiles made graphs in the sweep (a compiled
    free function the model is passed to: the probe sets aside compiles on the model's modules
    only): the graphs each frame made, named, and the block's own; how many graphs one call of the
    block runs is not measured there, so nothing is said of it."""
    frames = ", ".join(f"{f['name']} ({f['where']}, {f['graphs']} graph{'s' if f['graphs'] != 1 else ''})" for f in m["program_frames"])
    held = sum(f["graphs"] for f in m["program_frames"])
    if not m["block_graphs"]:
        return (f"{cname}.{name} compiled into {held} graph(s) of the program's compiled functions {frames} over {shapes} "
                f"shape(s): {cname}.{name} compiled by itself got no graph of its own, so no "
                f"recompile across its {m['instances']} instances was measured")
    return (f"{m['block_graphs']} graph(s) of {cname}.{name} compiled by itself, and {held} graph(s) of the program's "
            f"compiled functions {frames} over {shapes} shape(s), without a recompile across its {m['instances']} instances")


def _shared_verdict(ctx: Context, rc: _Recompiles, n: int, cname: str, graphs: str, per_shape: list[int], shapes: int) -> str:
    """The verdict where all instances share one compiled code: one graph, or several per call (a
    graph break, or tensors of different sizes), with the recompiles on tensor sizes if any."""
    if (per_shape or [0])[0] > 1 and not rc.by_frame:
        # more graphs than shapes with no recompile: each call runs several graphs of the same
        # compiled code (a graph break splits the block)
        gb = ctx.results.get("graph_breaks")
        counted = gb is None or not gb.ok or bool(gb.findings)  # not run (or failed): the graphs are the evidence
        # say a graph break splits the call only where the graph-break rung counted one (a
        # newcomer's tiny Llama on transformers 5.24: 2 + 2 graphs here, "no graph breaks" there)
        verdict = (f"all {n} instances of {cname} share one compiled code, without a recompile across instances; "
                   + (f"{graphs}: a graph break splits each call (see the graph-break rung)" if counted else
                      f"{graphs}: each call ran more than one graph, though the graph-break rung counted no graph break"))
    elif (per_shape or [0])[0] > 1:
        # instances called with tensors of different sizes (or requires_grad, dtype, device) at
        # one input shape recompile on those, not on per-instance state: "one graph serves" would
        # be false over more than one graph per shape
        at_reference = [x for xs in rc.by_frame.values() for x in xs]
        props = list(dict.fromkeys(p for x in at_reference if not is_shape_guard(x.guards) for p in tensor_properties(x.guards)))
        sized = any(is_shape_guard(x.guards) for x in at_reference) or not props
        tensors = ("tensors of different sizes" if not props else
                   f"tensors that differ in {' or '.join((['size'] if sized else []) + props)}")
        verdict = (f"all {n} instances of {cname} share one compiled code, without a recompile on per-instance state; "
                   f"{graphs}: instances called with {tensors} get a graph each")
    else:
        verdict = f"one graph serves all {n} instances of {cname}" + (f" at each input shape ({graphs})" if shapes > 1 else "")
    if rc.sized:
        verdict += f" ({rc.sized} recompile(s) on tensor sizes that differ between calls: dynamic shapes, not per-instance state)"
    if rc.property:
        said = ", ".join(f"{p} mismatch" for p in rc.properties)
        verdict += (f" ({rc.property} recompile(s) on a tensor property that differs between calls ({said}): "
                    "one graph per value, not per-instance state)")
    return verdict


RUNG = Rung(name="instance_recompiles", order=90, run=run, compiles=True)
