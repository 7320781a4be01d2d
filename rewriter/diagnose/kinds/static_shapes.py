"""The search's whole-model compile with static shapes: ``torch.compile(model, dynamic=False)``, one
graph per input resolution, beside the one-line anchor's automatic dynamic shapes.

Under automatic dynamic shapes (torch.compile's default, ``dynamic=None``) the first new size of a
dim recompiles the model with that dim symbolic. For a convolutional model whose image or latent
resolution changes, that one recompile can cost several times the first compile (docs/decisions.md,
"Two whole-model anchors", has the figures). ``dynamic=False`` compiles a static graph per
resolution instead (torch.compile's docstring: "dynamic=False ... never generate dynamic kernels,
always specialize"): each costs about the first compile, and runs static kernels.

Proposed only where every input dim that varies across the harness shapes is a spatial dim (dim
>= 2) of a floating input of rank >= 4 (images, latents, video): the set of resolutions a vision or
diffusion pipeline serves is small and known (a few buckets), where a sequence length or a batch
size takes any value and ``dynamic=False`` would compile once per value. Each resolution outside
the harness compiles again in production, and past Dynamo's ``recompile_limit`` (8) the model runs
eager; the action's ``why`` says so. The twin is measured whatever the search's budget, like the
anchor (:attr:`rewriter.engine.options.Variant.anchor`): the deadline ends whichever of the two is
still compiling once the other has measured every shape (:meth:`rewriter.engine.measure._Run.bounded`).
Where the search's reference starts before the compile rungs, the twin starts with the anchor
(:mod:`..early_reference`), its varying dims read from ``make_inputs`` (:func:`varying_dims`).
"""

from __future__ import annotations

from typing import Any

from ..candidate import WHOLE, Candidate, CandidateKind

#: The whole-model compile with ``dynamic=False`` (the :data:`..candidate.WHOLE` anchor's twin).
WHOLE_STATIC = "whole+static"


def static_why(var: list[dict[str, Any]]) -> str:
    """The ``why`` a ``dynamic=False`` compile adds, naming the varying dims ``var``
    (:func:`varying_dims`) and what a resolution outside them costs."""
    sizes = "; ".join(f"input {v['tensor']} dim {v['dim']}: {sorted(set(v['sizes']))}" for v in var)
    return (f"dynamic=False: one static graph per input resolution ({sizes}) instead of automatic dynamic shapes' "
            "symbolic recompile; a resolution outside these compiles again, and past Dynamo's recompile_limit the model "
            "runs eager")


def varying_dims(ctx: Any) -> list[dict[str, Any]]:
    """The input dims that vary across the harness shapes, ``[{"tensor", "dim", "sizes"}]`` (the
    input's index among the tensor leaves of ``make_inputs``): the recompiles rung's
    ``varying_input_dims`` where it ran ok, else read from ``make_inputs`` at each shape (the
    search's early start runs before that rung; a rung that failed or was not selected proves
    nothing)."""
    rung = ctx.results.get("recompiles")
    if rung is not None and rung.ok:
        return rung.measurement.get("varying_input_dims") or []
    from ..rungs.recompiles import varying
    from ..session import tensor_leaves

    return varying([[tuple(t.shape) for t in tensor_leaves(ctx.session.inputs(s))] for s in ctx.session.spec.shapes])


def why_not_static(ctx: Any, var: list[dict[str, Any]] | None = None) -> str | None:
    """Why ``whole+static`` is not proposed (None: it is; ``""``: nothing varies, no line for the
    report): no input dim varies (the anchor already compiles static graphs), a varying dim is not
    an image's spatial dim, or the harness has more shapes than Dynamo's recompile limit. ``var``:
    :func:`varying_dims`, where the caller has it."""
    import torch

    from ..session import tensor_leaves

    var = varying_dims(ctx) if var is None else var
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


def static_plan(ctx: Any, anchor: Any, var: list[dict[str, Any]] | None = None) -> Any:
    """The anchor's plan (``anchor``, a :class:`rewriter.plan.Plan`) with ``dynamic=False`` on its
    compile and the reason in its ``why``, or None where :func:`why_not_static` says no. ``var``:
    :func:`varying_dims`, where the caller has it."""
    var = varying_dims(ctx) if var is None else var
    if why_not_static(ctx, var) is not None:
        return None
    actions = [a.model_copy(update={
        "options": a.options.model_copy(update={"dynamic": False}),
        "why": "; ".join(filter(None, [a.why, static_why(var)]))}) if a.action == "compile" else a
        for a in anchor.actions]
    return anchor.model_copy(update={"actions": actions})


def with_static_shapes(ctx: Any, cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """``cands`` with ``whole+static`` first (it is measured whatever the budget, so it starts
    first; the last kind, so no other kind twins it), built from the :data:`..candidate.WHOLE`
    anchor's plan by :func:`static_plan`; unchanged with the reason where :func:`why_not_static`
    says no or no anchor is proposed."""
    anchor = next((c for c in cands if c.name == WHOLE), None)
    if anchor is None:
        return cands, []
    var = varying_dims(ctx)
    plan = static_plan(ctx, anchor.plan, var)
    if plan is None:
        why = why_not_static(ctx, var)
        return cands, ([f"{WHOLE_STATIC}: {why}"] if why else [])
    twin = Candidate(WHOLE_STATIC, plan, list(anchor.notes))
    if any(c.key() == twin.key() for c in cands):
        return cands, []
    return [twin, *cands], []


KIND = CandidateKind("static_shapes", 60, with_static_shapes, when_compiles_pruned=False)
