"""The search's per-block candidate that survives per-instance guards: the block compiled as one
region with ``torch._dynamo.config.recompile_limit`` raised to bound instances x shapes.

A repeated block whose instances each read their own state while traced (a transformers decoder
layer updating the KV cache passed through every layer: ``past_key_values.layers[i].is_initialized``
and ``self.layer_idx`` are guarded per instance) gets one graph per instance from one code object.
At Dynamo's recompile limit (8 by default) the remaining calls run eager without an error
(docs/design.md rung 7), so a plain regional compile of 8+ instances over two shapes, which is what
accelerate's ``compile_regions`` and diffusers' ``compile_repeated_blocks`` one-liners do, silently
runs the blocks eager from the second shape on. Measured with backend ``eager`` on a tiny 8-layer
transformers 5.24 Llama with the cache on (3 sequence lengths): per-block hits the limit at the
9th graph; with the limit at 8 x 2 + 1 it holds 16 graphs (one per instance, static then dynamic
shapes under automatic dynamic) and no fallback; ``torch.compiler.disable`` on
``DynamicCache.update`` breaks every layer's graph twice and still hits the limit (its resume
frames guard on the deprecation wrapper's arguments), so it is not proposed.

Evidence: the instance rung (:mod:`..instance_recompiles`) saw the recompile limit hit. For every
per-block candidate (a ``region`` compile) a twin ``<name>+recompile_limit`` is proposed, with one
``dynamo_config`` action setting the limit to ``instances x shapes`` of the harness (every graph
the rung could need: one per instance and input shape), placed just before the candidate it came
from; measurement decides (the extra graphs' compile seconds are counted like any other). The line
goes where the config twins' goes (:func:`.config.config_target`).
"""

from __future__ import annotations

from typing import Any

from ..candidate import Candidate, CandidateKind, place_twin

#: The most graphs the twin asks of one code object: Dynamo's ``accumulated_recompile_limit`` (256,
#: torch/_dynamo/config.py, torch 2.7-2.13), which caps a code object's graphs whatever
#: ``recompile_limit`` says; past it the twin falls back too, and its measurement says so.
MAX_LIMIT = 256


def limit_evidence(ctx: Any) -> dict[str, Any] | None:
    """``{"instances", "shapes", "limit", "class", "hit"}`` when the instance rung saw the recompile
    limit hit (the blocks fall back to eager), else None. ``instances`` is the largest instance
    count among the classes it examined; ``limit`` the limit it ran under."""
    r = ctx.results.get("instance_recompiles")
    if r is None or not r.ok or not r.measurement.get("limit_hit"):
        return None
    classes = r.measurement.get("classes") or [r.measurement]
    hit = [c for c in classes if c.get("limit_hit")] or classes
    worst = max(hit, key=lambda c: c.get("instances", 0))
    # the per-instance guard the rung found (the limit's own "last reason" may be a size guard of a
    # later shape, which says nothing about why each instance compiled)
    guard = next((f.message.replace("guard failure: ", "", 1) for f in getattr(r, "findings", []) if f.kind == "guard"), None)
    return {"instances": int(worst.get("instances", 0)), "shapes": len(ctx.session.spec.shapes),
            "limit": worst.get("recompile_limit"), "class": worst.get("class"),
            "hit": guard or (worst.get("limit_hits") or [{}])[0].get("last_reason")}


def silent_fallback_note(evidence: dict[str, Any]) -> str:
    """What a plain regional compile does here (the report's sentence)."""
    return (f"plain regional compile of {evidence['class']} (accelerate's compile_regions, diffusers' "
            f"compile_repeated_blocks): falls back to eager silently here: {evidence['instances']} instances guard on "
            f"their own state" + (f" ({evidence['hit']})" if evidence.get("hit") else "")
            + f"; past the recompile limit ({evidence['limit']}) the remaining calls run eager without an error")


def with_recompile_limit(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with a ``+recompile_limit`` twin before each per-block candidate (see the module
    docstring), and the lines for the report (why none was proposed, or what a plain regional
    compile does). Unchanged where the instance rung saw no limit hit."""
    from ...plan import DynamoConfigAction, DynamoSettings
    from .config import config_target

    evidence = limit_evidence(ctx)
    if evidence is None:
        return cands, []
    notes = [silent_fallback_note(evidence)]
    import torch

    if not hasattr(torch._dynamo.config, "recompile_limit"):  # torch 2.6 names it cache_size_limit
        notes.append(f"+recompile_limit: the torch in use ({torch.__version__}) has no torch._dynamo.config.recompile_limit "
                     "(torch >= 2.7), so no twin raises it")
        return cands, notes
    need = max(evidence["instances"] * evidence["shapes"], (evidence["limit"] or 8) + 1)
    limit = min(MAX_LIMIT, need)
    if need > MAX_LIMIT:
        notes.append(f"+recompile_limit: {evidence['instances']} instances x {evidence['shapes']} shape(s) may need {need} graphs, "
                     f"past Dynamo's accumulated_recompile_limit ({MAX_LIMIT}); the twin asks for {MAX_LIMIT} and its measurement "
                     "shows whether the blocks still fall back")
    target, why_there = config_target(ctx)
    why = (f"recompile limit: {evidence['instances']} instances x {evidence['shapes']} shape(s) of per-instance guards "
           f"need up to {limit} graphs of one code object; at the limit ({evidence['limit']}) the blocks run eager without "
           f"an error; set in {target}, {why_there}")
    keys = {c.key() for c in cands}
    out: list[Any] = []
    made = 0
    for c in cands:
        if not any(a.action == "compile" and a.strategy == "region" for a in c.plan.actions) or any(
                a.action == "dynamo_config" and a.settings.recompile_limit is not None for a in c.plan.actions):
            out.append(c)
            continue
        action = DynamoConfigAction(action="dynamo_config", target=target, settings=DynamoSettings(recompile_limit=limit), why=why)
        twin = Candidate(f"{c.name}+recompile_limit", c.plan.model_copy(update={"actions": [action, *c.plan.actions]}),
                         [*c.notes, notes[0]])
        made += place_twin(out, keys, {}, twin, c)
    if not made:
        notes.append("+recompile_limit: no per-block candidate to raise the limit for")
    return out, notes


KIND = CandidateKind("recompile_limit", 40, with_recompile_limit)
