"""Rung 6c: recompiles across the instances of one repeated block, and a hit recompile limit.

The block class's ``forward`` is compiled as one region (backend ``eager``: guards are Dynamo's,
not the backend's) and one step runs, so every instance calls the same compiled code. A guard on
per-instance state (an int attribute such as ``self.layer_idx``, a per-layer cache object) fails
for each new instance and recompiles; past ``torch._dynamo.config.recompile_limit`` (8 by
default) Dynamo runs the rest eager without an error (DESIGN.md rung 6). The guard text and its
source line come from Dynamo's recompile log (:mod:`.dynamo_log`), for ``forward`` and for its
resume functions after a graph break (:func:`is_frame_of`); a failed size guard is a dynamic
shape (counted apart), not per-instance state. Threshold: recompiles >= 1
across instances at one shape: the region does not hold one graph per class.
"""

from __future__ import annotations

import re

from .context import Context
from .dynamo_log import capture, reset
from .recompiles import is_shape_guard, is_tensor_property_guard
from .rung import Finding, RungResult


def is_frame_of(function: str, name: str) -> bool:
    """Whether Dynamo's frame ``function`` is ``name`` itself or one of its resume functions
    (``torch_dynamo_resume_in_forward_at_36``: the rest of ``forward`` after a graph break at
    line 36, compiled as its own frame; a per-instance guard after the break fails there)."""
    return function == name or re.fullmatch(rf"torch_dynamo_resume_in_{re.escape(name)}_at_\d+", function) is not None


def run(ctx: Context) -> RungResult:
    import torch

    r = RungResult("instance_recompiles", "Recompiles across instances of the repeated block")
    r.threshold = "any recompile across instances at one shape; recompile limit hit -> blocks silently eager"
    blocks = ctx.cache.get("blocks") or []
    if not blocks:
        return r.skip("no repeated block (ModuleList/Sequential of one class)")
    block = blocks[0]
    cls = block["cls"]
    _, _, step = ctx.reference()
    reset()
    original = cls.__dict__.get("forward")
    base = cls.forward
    cls.forward = torch.compile(base, backend="eager")
    try:
        with capture() as log:
            ctx.session.run(step)
    finally:
        if original is None:
            del cls.forward
        else:
            cls.forward = original
        reset()
    frames = [rc for rc in log.recompiles if is_frame_of(rc.function, getattr(base, "__name__", "forward"))]
    # A size guard is not per-instance state: an instance whose tensors differ in size (an MoE
    # expert's routed-token count, data-dependent) recompiles once and automatic dynamic shapes
    # absorb it; only guards on values (self.layer_idx == 0) recompile per instance.
    mine = [rc for rc in frames if not (rc.guards and (is_shape_guard(rc.guards) or is_tensor_property_guard(rc.guards)))]
    sized = len(frames) - len(mine)
    guards: dict[str, int] = {}
    for rc in mine:
        site = log.guard_site(ctx.session.src, rc.text)
        g = rc.guards[0] if rc.guards else "no guard text in Dynamo's log"
        key = f"{site[0]}:{site[1]}" if site else g
        if key not in guards:
            r.findings.append(Finding("guard", f"guard failure: {g}"[:300], *(site if site else (None, None, None))))
        guards[key] = guards.get(key, 0) + 1
    limit = None
    if log.limit_hit:
        m = re.search(r"\((\d+)\)", log.limit_hit[0])
        limit = int(m.group(1)) if m else None
        site = log.guard_site(ctx.session.src, log.limit_hit[0])
        r.findings.append(Finding("recompile_limit", f"recompile limit ({limit}) hit: the remaining instances run eager", *(site if site else (None, None, None))))
    r.measurement = {
        "block": block["name"],
        "instances": len(block["modules"]),
        "recompiles": len(mine),
        "shape_recompiles": sized,
        "limit_hit": bool(log.limit_hit),
        "recompile_limit": limit,
    }
    if mine:
        where = ", ".join(f.where for f in r.findings if f.kind == "guard")
        r.verdict = f"{len(mine)} recompile(s) across {len(block['modules'])} instances of {cls.__name__} (guard at {where})" + ("; recompile limit hit: the rest run eager" if log.limit_hit else "")
        r.implies = "disable the per-instance code (keep it eager) or restructure; do not compile the block as is"
    else:
        r.verdict = f"one graph serves all {len(block['modules'])} instances of {cls.__name__}"
        if sized:
            r.verdict += f" ({sized} recompile(s) on tensor sizes that differ between calls: dynamic shapes, not per-instance state)"
    return r
