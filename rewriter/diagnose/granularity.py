"""Rung 8: granularity: repeated blocks (a ModuleList/Sequential of one class) and their share.

Blocks are found structurally (``named_modules``); their time comes from the profiled run, where
forward hooks wrap each instance in a ``stackpart::block::<name>`` range (self-device time under
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
    """Repeated blocks, largest (by parameters) first.

    Returns:
        ``[{"name": "blocks", "cls": Block, "modules": [...], "params": int, "target": str|None,
        "owner": parent module, "owner_target": str|None, "attr": "blocks"}]``.
    """
    import torch.nn as nn

    found = []
    for name, mod in model.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(mod.children())
        if len(children) < 2 or len({type(c) for c in children}) != 1:
            continue
        if not any(True for _ in children[0].children()):
            continue  # a list of leaves (Linear layers) is not a block
        owner_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_name) if owner_name else model
        found.append(
            {
                "name": name,
                "cls": type(children[0]),
                "modules": children,
                "params": sum(p.numel() for p in mod.parameters()),
                "target": target_of(type(children[0]), src),
                "owner": owner,
                "owner_target": target_of(type(owner), src),
                "attr": attr,
            }
        )
    found.sort(key=lambda b: -b["params"])
    return found


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
    prefix = b["name"] + "."
    per = {n: v[key] for n, v in data.blocks.items() if n.startswith(prefix)}
    total = sum(per.values())
    share = total / step if step else 0.0
    r.measurement = {
        "block": b["name"],
        "class": b["cls"].__name__,
        "target": b["target"],
        "instances": len(b["modules"]),
        "basis": "self-device" if key == "device_us" else "CPU time (no CUDA)",
        "share": round(share, 3),
        "per_instance_ms": {n: round(v / max(1, data.steps) / 1e3, 4) for n, v in per.items()},
        "others": [{"name": o["name"], "class": o["cls"].__name__, "instances": len(o["modules"])} for o in blocks[1:4]],
    }
    where = b["target"] or f"{b['cls'].__module__}:{b['cls'].__qualname__} (an installed package's: applied from the plan's site)"
    if share >= BLOCK_SHARE:
        r.verdict = f"{len(b['modules'])} x {b['cls'].__name__} = {share:.0%} of the step"
        r.implies = f"compile per block: {where}"
    else:
        r.verdict = f"{len(b['modules'])} x {b['cls'].__name__} only {share:.0%} of the step"
    if ctx.session.training:
        r.measurement["share_covers"] = "forward only (a lower bound: the blocks' backward runs outside the hooks)"
        r.verdict += " (forward only: a lower bound in training)"
    return r
