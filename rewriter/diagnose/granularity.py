"""Rung 8: granularity: repeated blocks (the instances of one class across every container that
holds them: ModuleList, Sequential, ModuleDict) and their summed share.

Blocks are found structurally (:mod:`rewriter.engine.blocks`: ResNet's four stages hold one class
of block between them; instances with different parameter shapes are grouped by shape, one
graph each when the class is compiled); their time comes from the profiled run, where
forward hooks wrap every instance of every block class in a ``stackpart::block::<name>`` range (self-device time under
it on CUDA, CPU time without). In training mode only the blocks' forward is inside the ranges
(autograd runs their backward outside the hooks), so the share is a lower bound. Threshold: blocks >= 50% of the step make the block the compile
unit (partitioning-the-stack: "per transformer block: the usual sweet spot"); the class is mapped
to its ``file.py::Class`` target with :mod:`inspect`.
"""

from __future__ import annotations

from typing import Any

from .context import Context
from .locate import target_of
from .rung import RungResult

BLOCK_SHARE = 0.50


def find_blocks(model: Any, src: Any) -> list[dict[str, Any]]:
    """Repeated blocks, largest (parameter elements over all instances) first: one dict per block
    class, over every container that holds it (:func:`rewriter.engine.blocks.find_block_groups`,
    the finder validate's regional baseline uses too).

    Returns:
        ``[{"name": first container ("" for the root), "cls": Block, "modules": every instance,
        "params": int, "target": "file.py::Class" | None (outside SRC), "owner": the first
        container's owner module, "owner_target": str | None, "attr": its attribute,
        "instances": qualified names (same order as modules), "containers": [{"name", "attr",
        "owner_target", "instances"}], "shapes": [{"signature": short text, "instances": [...],
        "params": int}] (one per parameter/buffer shape signature), "distinct_shapes": int}]``.
    """
    from ..engine.blocks import find_block_groups

    found = []
    for g in find_block_groups(model):
        first = g.containers[0]
        owner = model.get_submodule(first.owner_name) if first.owner_name else model
        found.append(
            {
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
                     "owner_target": target_of(type(model.get_submodule(c.owner_name) if c.owner_name else model), src)}
                    for c in g.containers
                ],
                "shapes": [{"signature": s.describe(), "instances": s.instances, "params": s.params} for s in g.shapes],
                "distinct_shapes": len(g.shapes),
            }
        )
    return found


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
    blocks = ctx.cache.get("blocks") or []
    if not blocks:
        r.measurement = {"blocks": []}
        r.verdict = "no repeated block: the model is the unit"
        return r
    data = ctx.cache["profile"]
    key = "device_us" if ctx.session.cuda and data.kernels else "cpu_us"
    step = data.self_device_us * data.steps if key == "device_us" else sum(e - s for s, e in data.windows)
    b = blocks[0]
    share, per = _share(data, b["instances"], key, step)
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
                   for o in blocks[1:4]],
    }
    where = b["target"] or f"{b['cls'].__module__}:{b['cls'].__qualname__} (an installed package's: applied from the plan's site)"
    held = f" in {len(b['containers'])} containers ({', '.join(c['name'] for c in b['containers'][:4])}{', ...' if len(b['containers']) > 4 else ''})" if len(b["containers"]) > 1 else ""
    shapes = f"; {b['distinct_shapes']} distinct parameter shapes: one graph each when compiled" if b["distinct_shapes"] > 1 else ""
    if share >= BLOCK_SHARE:
        r.verdict = f"{len(b['modules'])} x {b['cls'].__name__}{held} = {share:.0%} of the step{shapes}"
        r.implies = f"compile per block: {where}"
    else:
        r.verdict = f"{len(b['modules'])} x {b['cls'].__name__}{held} only {share:.0%} of the step{shapes}"
    if ctx.session.training:
        r.measurement["share_covers"] = "forward only (a lower bound: the blocks' backward runs outside the hooks)"
        r.verdict += " (forward only: a lower bound in training)"
    return r
