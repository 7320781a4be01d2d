"""Rung 8: granularity: repeated blocks (the instances of one class across every container that
holds them: ModuleList, Sequential, ModuleDict) and their summed share.

Blocks are found structurally (:mod:`rewriter.engine.blocks`: ResNet's four stages hold one class
of block between them; instances with different parameter shapes are grouped by shape, one
graph each when the class is compiled), or declared by the model itself: a model whose class
lists its repeated blocks in ``_repeated_blocks`` (diffusers' regional-compilation list,
:mod:`.declared`) has those classes as its blocks, first, and their summed share is the
blocks'; their time comes from the profiled run, where
forward hooks wrap every instance of every block class in a ``stackpart::block::<name>`` range (self-device time under
it on CUDA, CPU time without). In training mode only the blocks' forward is inside the ranges
(autograd runs their backward outside the hooks), so the share is a lower bound. Threshold: blocks >= 50% of the step make the block the compile
unit (partitioning-the-stack: "per transformer block: the usual sweet spot"); the class is mapped
to its ``file.py::Class`` target with :mod:`inspect`.
"""

from __future__ import annotations

from typing import Any

from ..context import Context
from ..locate import library_target_of, target_of
from ..rung import Rung, RungResult

BLOCK_SHARE = 0.50


def find_blocks(model: Any, src: Any, declared: Any = None) -> list[dict[str, Any]]:
    """Repeated blocks, largest (parameter elements over all instances) first: one dict per block
    class, over every container that holds it (:func:`rewriter.engine.blocks.find_block_groups`,
    the finder validate's regional baseline uses too).

    ``declared`` (:func:`.declared.read`): where the model declares its repeated blocks
    (``_repeated_blocks``, diffusers' regional-compilation list), the declared classes come
    first, in declaration order, whether or not the finder would pick them (one instance, no
    container, a class it reads as a stage), each with ``"declared"`` set to the declaration;
    a declared class that is neither under SRC nor importable by path is left out (its note is
    in ``declared.unresolved``). A model wrapped by ``torch.compile`` is read through its wrapper:
    names carry no ``_orig_mod.``. The finder's classes follow, less any whose instances hold or
    lie inside a declared block's (the profiled ranges never nest).

    Returns:
        ``[{"name": first container ("" for the root), "cls": Block, "modules": every instance,
        "params": int, "target": "file.py::Class" | None (outside SRC), "owner": the first
        container's owner module, "owner_target": str | None, "attr": its attribute,
        "instances": qualified names (same order as modules), "containers": [{"name", "attr",
        "owner_target", "instances"}], "shapes": [{"signature": short text, "instances": [...],
        "params": int}] (one per parameter/buffer shape signature), "distinct_shapes": int,
        "declared": "Model._repeated_blocks" | None}]``.
    """
    from ...engine.blocks import find_block_groups
    from ...engine.watch import unwrapped

    model = unwrapped(model)  # the program's torch.compile(model): the names a report gives are the model's own
    found = [_as_dict(g, model, src, declared.source) for g in _declared_groups(model, src, declared)] if declared else []
    taken = [n for b in found for n in b["instances"]]

    def overlaps(name: str) -> bool:
        return any(name == t or name.startswith(t + ".") or t.startswith(name + ".") for t in taken)

    for g in find_block_groups(model):
        if any(b["cls"] is g.cls for b in found) or any(overlaps(n) for n in g.instances):
            continue
        found.append(_as_dict(g, model, src, None))
    return found


def region_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks a per-block candidate compiles (:func:`find_blocks` entries): the first, and
    with it every other declared one when the first is declared (a model's
    ``_repeated_blocks`` may list several classes: Flux's double- and single-stream blocks)."""
    if not blocks:
        return []
    first = blocks[0]
    return [first, *(b for b in blocks[1:] if b.get("declared"))] if first.get("declared") else [first]


def _declared_groups(model: Any, src: Any, declared: Any) -> list[Any]:
    """:class:`rewriter.engine.blocks.BlockGroup` s for the declared classes (``declared.classes``
    with their instances), grouped into containers by parent module and into shape groups by
    :func:`rewriter.engine.blocks.shape_signature`; a class with no plan target (neither under SRC
    nor importable by path) is dropped, with a line in ``declared.unresolved``."""
    import torch.nn as nn

    from ...engine.blocks import BlockGroup, Container, ShapeGroup, shape_signature
    from ..locate import library_target_of, untargetable

    groups = []
    for cls, inst in zip(declared.classes, declared.instances):
        if not (target_of(cls, src) or library_target_of(cls)):
            line = f"{cls.__name__!r} ({declared.source}) is {untargetable(cls)}: not a compile target"
            if line not in declared.unresolved:
                declared.unresolved.append(line)
            continue
        conts: dict[str, Any] = {}
        shapes: dict[tuple, Any] = {}
        for name, module in inst:
            parent, _, key = name.rpartition(".")
            holder = model.get_submodule(parent) if parent else model
            if isinstance(holder, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
                where, owner, attr = parent, parent.rpartition(".")[0] if parent else None, parent.rpartition(".")[2]
            else:  # held directly as an attribute (no container): its owner is its parent module
                where, owner, attr = name, parent, key
            if where not in conts:
                conts[where] = Container(where, owner, attr)
            conts[where].instances.append(name)
            sig = shape_signature(module)
            shapes.setdefault(sig, ShapeGroup(sig, params=sum(p.numel() for p in module.parameters()))).instances.append(name)
        groups.append(BlockGroup(cls=cls, instances=[n for n, _ in inst], modules=[m for _, m in inst],
                                 containers=list(conts.values()), shapes=list(shapes.values()),
                                 params=sum(p.numel() for _, m in inst for p in m.parameters())))
    return groups


def _as_dict(g: Any, model: Any, src: Any, declared: str | None) -> dict[str, Any]:
    """One :func:`find_blocks` entry for a :class:`rewriter.engine.blocks.BlockGroup`."""
    from ...engine.watch import unwrapped

    first = g.containers[0]
    owner = unwrapped(model.get_submodule(first.owner_name)) if first.owner_name else model
    return {
        "name": first.name,
        "cls": g.cls,
        "modules": g.modules,
        "params": g.params,
        "target": target_of(g.cls, src),
        "owner": owner,
        "owner_target": target_of(type(owner), src),
        "attr": first.attr,
        "instances": g.instances,
        "containers": [
            {"name": c.name or "<root>", "attr": c.attr, "instances": len(c.instances),
             "owner_target": target_of(type(unwrapped(model.get_submodule(c.owner_name)) if c.owner_name else model), src)}
            for c in g.containers
        ],
        "shapes": [{"signature": s.describe(), "instances": s.instances, "params": s.params} for s in g.shapes],
        "distinct_shapes": len(g.shapes),
        "declared": declared,
    }


def profiled(blocks: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``(qualified name, module)`` of every instance of every block class, for the profiled
    run's ``stackpart::block::<name>`` ranges (the finder's instances never nest)."""
    return [(n, m) for b in blocks for n, m in zip(b["instances"], b["modules"])]


def _share(data: Any, names: list[str], key: str, step: float) -> tuple[float, dict[str, float]]:
    per = {n: data.blocks[n][key] for n in names if n in data.blocks}
    return (sum(per.values()) / step if step else 0.0), per


def run(ctx: Context) -> RungResult:
    r = RungResult("granularity", "Repeated blocks and their share of the step")
    r.threshold = "blocks >= 50% of the step: per-block compile (partitioning-the-stack granularity table)"
    blocks = ctx.evidence.blocks
    if not blocks:
        r.measurement = {"blocks": []}
        r.verdict = "no repeated block: the model is the unit"
        return r
    data = ctx.evidence.profile
    key = "device_us" if ctx.session.cuda and data.kernels else "cpu_us"
    step = data.self_device_us * data.steps if key == "device_us" else sum(e - s for s, e in data.windows)
    b = blocks[0]
    # the model's declared blocks (_repeated_blocks) are one unit: their summed share
    group = [x for x in blocks if x.get("declared")] if b.get("declared") else [b]
    share, per = _share(data, [n for x in group for n in x["instances"]], key, step)
    unranged = [n for x in group for n in x["instances"] if n in data.blocks_unranged]
    r.measurement = {
        "block": b["name"],
        "class": b["cls"].__name__,
        "target": b["target"],
        "instances": len(b["modules"]),
        "containers": [c["name"] for c in b["containers"]],
        "distinct_shapes": b["distinct_shapes"],
        "basis": "self-device" if key == "device_us" else "CPU time (no CUDA)",
        "share": round(share, 3),
        "per_instance_ms": {n: round(v / max(1, data.steps) / 1e3, 4) for n, v in per.items()},
        "others": [{"name": o["name"], "class": o["cls"].__name__, "instances": len(o["modules"]),
                    "containers": len(o["containers"]), "share": round(_share(data, o["instances"], key, step)[0], 3)}
                   for o in blocks[len(group):len(group) + 3]],
    }
    if b.get("declared"):
        r.measurement["declared"] = {"by": b["declared"], "classes": [x["cls"].__name__ for x in group],
                                     "targets": [x["target"] or library_target_of(x["cls"]) for x in group]}
    where = b["target"] or f"{b['cls'].__module__}:{b['cls'].__qualname__} (an installed package's: applied from the plan's site)"
    held = f" in {len(b['containers'])} containers ({', '.join(c['name'] for c in b['containers'][:4])}{', ...' if len(b['containers']) > 4 else ''})" if len(b["containers"]) > 1 else ""
    shapes = f"; {b['distinct_shapes']} distinct parameter shapes: one graph each when compiled" if b["distinct_shapes"] > 1 else ""
    what = f"{len(b['modules'])} x {b['cls'].__name__}{held}"
    if b.get("declared"):  # the targets come from the model's own list, not from the finder
        what = " + ".join(f"{len(x['modules'])} x {x['cls'].__name__}" for x in group) + f" (declared by {b['declared']})"
        where = ", ".join(x["target"] or library_target_of(x["cls"]) for x in group)
    if unranged:
        # the program compiles a frame around the blocks: stackpart's ranges stay out of it, so
        # the blocks' time is inside that frame's and not split out (profile.py)
        r.measurement["share"] = None
        r.measurement["share_unmeasured"] = (f"{len(unranged)} of {len(b['modules'])} instance(s) ran inside the program's own "
                                             "compiled frame, where stackpart adds no profiler range")
        r.verdict = f"{what}: share of the step not measured ({r.measurement['share_unmeasured']}){shapes}"
    elif share >= BLOCK_SHARE:
        r.verdict = f"{what} = {share:.0%} of the step{shapes}"
        r.implies = f"compile per block: {where}"
    else:
        r.verdict = f"{what} only {share:.0%} of the step{shapes}"
    if ctx.session.training:
        r.measurement["share_covers"] = "forward only (a lower bound: the blocks' backward runs outside the hooks)"
        r.verdict += " (forward only: a lower bound in training)"
    return r


RUNG = Rung(name="granularity", order=110, run=run, needs=frozenset({"profile"}))
