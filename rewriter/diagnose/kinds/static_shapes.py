"""The search's whole-model compile with static shapes: ``torch.compile(model, dynamic=False)``, one
graph per input resolution, beside the one-line anchor's automatic dynamic shapes.

Under automatic dynamic shapes (torch.compile's default, ``dynamic=None``) the first new size of a
dim recompiles the model with that dim symbolic. For a convolutional model whose image or latent
resolution changes that one recompile can cost several times the first compile: on the H200 the
SD-1.5-sized UNet2DConditionModel compiled in 73 s at 64x64 latents, then recompiled for 266 s at
48x48 (BENCHMARKS.md, Model zoo part 11). ``dynamic=False`` compiles a static graph per resolution
instead (torch.compile's docstring: "dynamic=False ... never generate dynamic kernels, always
specialize"): each costs about the first compile, and runs static kernels.

Proposed only where every input dim that varies across the harness shapes is a spatial dim (dim
>= 2) of a floating input of rank >= 4 (images, latents, video): the set of resolutions a vision or
diffusion pipeline serves is small and known (a few buckets), where a sequence length or a batch
size takes any value and ``dynamic=False`` would compile once per value. Each resolution outside
the harness compiles again in production, and past Dynamo's ``recompile_limit`` (8) the model runs
eager; the action's ``why`` says so. The twin is measured whatever the search's budget, like the
anchor (:attr:`rewriter.engine.options.Variant.anchor`): the deadline ends whichever of the two is
still compiling once the other has measured every shape (:meth:`rewriter.engine.measure._Run.bounded`).
"""

from __future__ import annotations

from typing import Any

from ..candidate import Candidate, CandidateKind

#: The whole-model compile with ``dynamic=False`` (the :data:`..candidates.WHOLE` anchor's twin).
WHOLE_STATIC = "whole+static"


#: The ``why`` the twin's compile action adds to the anchor's.
STATIC_WHY = ("dynamic=False: one static graph per input resolution ({sizes}) instead of automatic dynamic shapes' "
              "symbolic recompile; a resolution outside these compiles again, and past Dynamo's recompile_limit the model "
              "runs eager")


def why_not_static(ctx: Any) -> str | None:
    """Why ``whole+static`` is not proposed (None: it is): no input dim varies (the anchor already
    compiles static graphs), a varying dim is not an image's spatial dim, or the harness has more
    shapes than Dynamo's recompile limit. Reads the recompiles rung's ``varying_input_dims``
    (input index among the reference's tensor leaves, dim, sizes)."""
    import torch

    from ..session import tensor_leaves

    var = ctx.measured("recompiles").get("varying_input_dims") or []
    if not var:
        return ""  # nothing varies: no line for the report
    _, inputs, _ = ctx.reference()
    leaves = tensor_leaves(inputs)
    for v in var:
        t = leaves[v["tensor"]] if v["tensor"] < len(leaves) else None
        if t is None or t.dim() < 4 or v["dim"] < 2 or not t.is_floating_point():
            shape = f" of shape {tuple(t.shape)}" if t is not None else ""
            return (f"input {v['tensor']}{shape} varies in dim {v['dim']}, not an image's or latent's spatial dim: "
                    "dynamic=False would compile once per value a batch size or a length takes")
    limit = getattr(torch._dynamo.config, "recompile_limit", None) or getattr(torch._dynamo.config, "cache_size_limit", 8)
    shapes = len(ctx.session.spec.shapes)
    if shapes > limit:
        return f"{shapes} harness shapes, past Dynamo's recompile limit ({limit}): dynamic=False would run the model eager past it"
    return None


def with_static_shapes(ctx: Any, cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """``cands`` with ``whole+static`` first (it is measured whatever the budget, so it starts
    first; the last kind, so no other kind twins it), built from the :data:`..candidates.WHOLE` anchor's plan with ``dynamic=False`` on its
    compile; unchanged with the reason where :func:`why_not_static` says no or no anchor is proposed."""
    from ..candidates import WHOLE

    anchor = next((c for c in cands if c.name == WHOLE), None)
    if anchor is None:
        return cands, []
    why = why_not_static(ctx)
    if why is not None:
        return cands, ([f"{WHOLE_STATIC}: {why}"] if why else [])
    sizes = "; ".join(f"input {v['tensor']} dim {v['dim']}: {sorted(set(v['sizes']))}"
                      for v in ctx.measured("recompiles").get("varying_input_dims"))
    actions = [a.model_copy(update={
        "options": a.options.model_copy(update={"dynamic": False}),
        "why": "; ".join(filter(None, [a.why, STATIC_WHY.format(sizes=sizes)]))}) if a.action == "compile" else a
        for a in anchor.plan.actions]
    twin = Candidate(WHOLE_STATIC, anchor.plan.model_copy(update={"actions": actions}), list(anchor.notes))
    if any(c.key() == twin.key() for c in cands):
        return cands, []
    return [twin, *cands], []


KIND = CandidateKind("static_shapes", 60, with_static_shapes, when_compiles_pruned=False)
