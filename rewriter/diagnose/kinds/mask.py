"""The search's ``+mask-eager`` twins: a whole-model compile with transformers' attention-mask
builders kept eager, where the compiled trace gives SDPA a mask that eager does not.

transformers builds each layer's attention mask once per forward (``create_bidirectional_mask``,
``create_causal_mask`` in ``transformers.masking_utils``) and returns None where SDPA needs none
(no padding, plain causal): SDPA then runs a fused kernel with no mask. Some versions decline that
skip under any trace, ``torch.compile`` included (``_ignore_bidirectional_mask_sdpa`` checks
``is_tracing``; huggingface/transformers#48925): the compiled graph builds an all-true mask and
passes it to SDPA. Flash attention takes no mask, and on CUDA a mask expanded with last-dim stride
0 rules out every fused kernel (``sdp_utils``' ``check_last_dim_stride_equals_1_dense``), so SDPA
runs its math decomposition (``_safe_softmax`` between two batched GEMMs), while a block
compiled alone gets the mask eager built (none) and keeps a fused kernel (docs/decisions.md,
"A whole-model compile can give SDPA a mask eager never builds").

Evidence, measured: the SDPA calls of the graph-break rung's trace of the model
(``torch._dynamo.explain``'s graphs, :func:`..sdpa_masks.traced_masks`) against those of one
eager forward at the reference shape (:func:`..sdpa_masks.eager_masks`). Where the trace passes a
mask to an SDPA call and eager passes none to any, the first candidate with a whole-model compile
of each mode (the ladder's order: the one it expects most of; ``whole`` and, on CUDA,
``whole+cudagraphs``: one or two more cold phases in the search's budget) gets a twin right after
it with the same actions plus ``disable`` on each mask builder the model's transformers modules
call, by the name they call it under
(``transformers.models.bert.modeling_bert:create_bidirectional_mask``), applied from the plan's
site: the builder runs eager at a graph break, where it is not tracing, and skips the mask as
eager does. The twin is measured like any candidate (its graph break costs a graph; its outputs
are judged by the engine's rule); nothing is assumed.

A program that compiles the whole model itself gets the same evidence from the model traced whole
(the graph-break rung, :func:`..rungs.graph_breaks._whole_trace_masks`) and the same lever on its
own compile: ``as-is+mask-eager`` (its compile as written, the builders eager;
:func:`..candidates.own_call_candidates`) and a twin of an edit of its call such as
``as-is+reduce-overhead`` (not where it compiles with ``fullgraph=True``: the disable's graph break
is an error there).
"""

from __future__ import annotations

from typing import Any

from ...plan import DisableAction
from ..candidate import Candidate, CandidateKind
from ..sdpa_masks import builders, eager_masks

SUFFIX = "+mask-eager"


def mask_actions(ctx: Any) -> tuple[list[DisableAction], list[str]]:
    """The ``disable`` actions of the twin, or [] and why not (one line for the report)."""
    traced = ctx.evidence.traced_sdpa_masks
    if not traced or not any(m is not None for m in traced):
        return [], []  # no trace read (Evidence.traced_sdpa_masks says where none is), no SDPA call, or no mask
    model, inputs, _ = ctx.reference()
    if ctx.evidence.eager_sdpa_masks is None:  # one eager forward, for the kind and the own-compile edit alike
        ctx.evidence.eager_sdpa_masks = eager_masks(model, inputs, ctx.session.spec.call)
    eager = ctx.evidence.eager_sdpa_masks
    if any(m is not None for m in eager):
        return [], [f"{SUFFIX[1:]}: eager passes SDPA a mask too ({_said(next(m for m in eager if m))}): "
                    "keeping the builder eager would not drop it"]
    targets = builders(model)
    if not targets:
        return [], [f"{SUFFIX[1:]}: the trace passes SDPA a mask ({_said(next(m for m in traced if m))}) that eager "
                    "does not, built by no transformers mask builder the model's modules call"]
    why = (f"disable: the compiled trace passes {sum(m is not None for m in traced)} SDPA call(s) a mask "
           f"({_said(next(m for m in traced if m))}) where eager passes none: a builder that skips the mask eagerly "
           "builds it while tracing (huggingface/transformers#48925), and on CUDA flash takes no mask and a mask of "
           "last-dim stride 0 no fused kernel (SDPA's math path); kept eager, it skips the mask")
    return [DisableAction(action="disable", target=t, why=why) for t in targets], []


def _said(mask: dict[str, Any]) -> str:
    return f"{mask.get('dtype', '?')} {tuple(mask.get('shape', ()))} strides {tuple(mask.get('stride', ()))}"


def _whole_mode(c: Candidate) -> str | None:
    """The ``mode`` of ``c``'s whole-model compile (``default``, ``reduce-overhead``), or None where
    it has none."""
    for a in c.plan.actions:
        if a.action == "compile" and getattr(a, "strategy", None) == "whole":
            own = getattr(a, "own_call", None)
            if own is not None:  # an edit of the program's own call: the mode it sets, where it stays whole and on
                if own.regional or own.disable or own.fullgraph:
                    return None
                return f"own:{own.mode or 'default'}"
            return str(getattr(getattr(a, "options", None), "mode", None) or "default")
    return None


def _fullgraph_own(ctx: Any) -> bool:
    """Whether one of the program's own compiles passes ``fullgraph=True``: a ``disable`` inside
    what it compiles is an error there, so an edit of its call gets no twin."""
    return any(getattr(r, "fullgraph", False) for r in ctx.evidence.own_regions or ())


def with_mask_eager(ctx: Any, cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    """``cands`` with a ``+mask-eager`` twin right after the first candidate with a whole-model
    compile of each mode, where the evidence asks for one (module docstring), and what was left out
    (why)."""
    from ..planner import default_site

    actions, pruned = mask_actions(ctx)
    if not actions:
        return cands, pruned
    out: list[Candidate] = []
    keys = {c.key() for c in cands}
    twinned: set[str] = set()
    for c in cands:
        out.append(c)
        mode = _whole_mode(c)
        if mode is None or mode in twinned or (mode.startswith("own:") and _fullgraph_own(ctx)):
            continue
        twinned.add(mode)
        site = c.plan.site or getattr(ctx, "site", None) or default_site(ctx)
        plan = c.plan.model_copy(update={"actions": [*c.plan.actions, *actions], "site": site})
        twin = Candidate(f"{c.name}{SUFFIX}", plan, [*c.notes, actions[0].why or ""], rule=False)
        if twin.key() not in keys:
            keys.add(twin.key())
            out.append(twin)
    return out, pruned


KIND = CandidateKind("mask-eager", 28, with_mask_eager, when_compiles_pruned=False)
