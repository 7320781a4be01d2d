"""The search's attention candidates: transformers' own ``attn_implementation`` lever,
proposed and measured like any other action, never assumed.

Evidence: the harness's model as built (:meth:`..context.Context.reference`), read at run time. For
each outermost transformers ``PreTrainedModel`` in it (the model itself, or the one a wrapper
holds) whose attention implementation (``config._attn_implementation``, its own and its
submodels') is not ``sdpa``, and whose class supports sdpa (``_supports_sdpa``, the flag
transformers' ``set_attn_implementation`` checks), every candidate that compiles, and ``as-is``,
gets a twin with one ``attention`` action (``per-block+sdpa``, ``as-is+sdpa``): the candidate's
actions plus ``set_attn_implementation("sdpa")`` on the model class, applied from the plan's
site. ``flex_attention`` twins are proposed where the class supports it (``_supports_flex_attn``),
this torch has it, and the search runs on CUDA: on CPU the search forces the eager backend, which
runs FlexAttention's unfused reference, so a gain could not be measured (failures could, but a
twin that can only fail is not worth its cold phase).

A twin goes right after the candidate it came from: without a measured gain (CPU's eager backend)
the ladder's order keeps the candidate without the lever. Its outputs differ from eager attention
within float tolerance; the engine judges them by its normal rule, as for any candidate. What is
left out, and why (already sdpa, not supported, not importable by path, no CUDA), is returned for
the report.
"""

from __future__ import annotations

import sys
from typing import Any

from ...plan import AttentionAction
from ..candidate import AS_IS, Candidate, CandidateKind

#: The levers, in the order their twins are placed, each with what it runs.
LEVERS = {
    "sdpa": "torch.nn.functional.scaled_dot_product_attention instead of the materialised attention matrix",
    "flex_attention": "torch's FlexAttention",
}


def _pretrained_models(model: Any) -> list[Any]:
    """The outermost transformers ``PreTrainedModel`` instances in ``model`` (itself included), or
    [] when transformers was never imported (a model that is not from transformers)."""
    modeling = sys.modules.get("transformers.modeling_utils")
    base = getattr(modeling, "PreTrainedModel", None)
    if base is None:
        return []
    found: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        if isinstance(module, base) and not any(name.startswith(f"{outer}.") or outer == "" for outer, _ in found):
            found.append((name, module))
    return [m for _, m in found]


def _implementations(module: Any) -> set[str]:
    """The attention implementations ``module`` runs: its config's and its submodels' (a
    multimodal model's towers have configs of their own)."""
    modeling = sys.modules.get("transformers.modeling_utils")
    base = getattr(modeling, "PreTrainedModel", ())
    out = set()
    for m in module.modules():
        if isinstance(m, base):
            out.add(str(getattr(m.config, "_attn_implementation", None)))
    return out


def model_target(cls: type, src: Any) -> str | None:
    """The plan target of ``cls`` for an ``attention`` action: ``cls`` itself when it is an
    installed package's class, else its nearest base that is (a subclass under SRC of
    ``LlamaForCausalLM`` is matched by ``isinstance`` in the generated module), or None. The
    generic ``transformers.modeling_utils`` bases (``PreTrainedModel``) are never a target: a
    model whose own classes all lie under SRC (a copied modeling file) has none, rather than
    ``PreTrainedModel``, which the plan refuses."""
    from ..locate import library_target_of, target_of

    for klass in cls.__mro__:
        if not callable(getattr(klass, "set_attn_implementation", None)) or klass.__module__ == "transformers.modeling_utils":
            break
        if target_of(klass, src) is None and (target := library_target_of(klass)) is not None:
            return target
    return None


def levers(ctx: Any) -> tuple[list[AttentionAction], list[str]]:
    """The ``attention`` actions worth a twin for the harness's model, and why each other lever is
    left out (one line per model class and lever)."""
    from ...library_targets import ATTENTION_FLAGS, attention_support

    model, _, _ = ctx.reference()
    actions: list[AttentionAction] = []
    pruned: list[str] = []
    seen: set[type] = set()
    for module in _pretrained_models(model):
        cls = type(module)
        if cls in seen:
            continue
        seen.add(cls)
        runs = _implementations(module)
        current = getattr(module.config, "_attn_implementation", None)
        target = model_target(cls, ctx.session.src)
        flags = [ATTENTION_FLAGS[impl] for impl in LEVERS]
        if not any(getattr(cls, flag, False) for flag in flags):
            pruned.append(f"{', '.join('+' + impl for impl in LEVERS)}: {cls.__name__} has no attention implementation to "
                          f"choose (transformers' {' and '.join(flags)} are False)")
            continue
        for impl, what in LEVERS.items():
            label = f"+{impl}"
            if runs == {impl}:
                pruned.append(f"{label}: {cls.__name__} already runs attn_implementation={impl!r}")
                continue
            if impl == "flex_attention" and runs == {"sdpa"}:
                # FlexAttention's gain is on masks SDPA's fused kernels cannot take; on the plain
                # causal/padding masks transformers passes it reaches about 90% of FlashAttention-2's
                # forward (PyTorch blog, "FlexAttention", 2024-08), so against sdpa it is not worth a
                # cold phase per candidate
                pruned.append(f"{label}: {cls.__name__} runs attn_implementation='sdpa' (fused kernels), which "
                              "FlexAttention at best matches on the masks transformers passes")
                continue
            why = attention_support(cls, impl)
            if why is not None:
                pruned.append(f"{label}: {why}")
                continue
            if target is None:
                pruned.append(f"{label}: {cls.__qualname__} is not importable by path (a plan names the model class "
                              "by import path, applied from the site)")
                continue
            if impl == "flex_attention" and not ctx.session.cuda:
                pruned.append(f"{label}: no CUDA: the search's eager backend on CPU runs FlexAttention's unfused "
                              "reference, so its gain cannot be measured")
                continue
            others = sorted(runs - {current})
            actions.append(AttentionAction(
                action="attention", target=target, implementation=impl,
                why=(f"attention: {cls.__name__} runs attn_implementation={current!r}"
                     + (f" (its submodels: {', '.join(map(repr, others))})" if others else "")
                     + f"; the class supports {impl!r} ({what}), set by transformers' set_attn_implementation"),
            ))
    return actions, pruned


def with_attention(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with an attention twin right after each candidate that compiles, after
    ``static-cache`` and after ``as-is`` (config twins, :mod:`.config`, are not twinned again), and what was left
    out (why)."""
    from ..planner import default_site

    actions, pruned = levers(ctx)
    if not actions:
        return cands, pruned
    # the static-cache candidate too: an eager-attention generation model gains from both levers
    twins_of = {c.name for c in cands if (c.compiles or c.name == AS_IS or any(a.action == "generation" for a in c.plan.actions))
                and c.name not in ctx.evidence.config_twins}
    out: list[Any] = []
    keys = {c.key() for c in cands}
    for c in cands:
        out.append(c)
        if c.name not in twins_of:
            continue
        for action in actions:
            site = c.plan.site or getattr(ctx, "site", None) or default_site(ctx)
            plan = c.plan.model_copy(update={"actions": [*c.plan.actions, action], "site": site})
            twin = Candidate(f"{c.name}+{action.implementation}", plan, [*c.notes, action.why or ""], rule=False)
            if twin.key() in keys:
                continue
            keys.add(twin.key())
            out.append(twin)
    return out, pruned


KIND = CandidateKind("attention", 30, with_attention)
