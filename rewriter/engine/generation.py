"""Generated tokens, judged by the logits that chose them.

A greedy ``generate`` returns token ids: integers chosen by an argmax over low-precision logits. A
correct compile of a bf16 model drifts from eager by reduction-order noise, and where two logits
are within that noise the argmax flips and every later token follows another path (docs/decisions.md,
"Numerics: bf16 drift and generated tokens": a fifth of the ids of a bf16 Llama's greedy run
differed under a correct whole-model compile). Comparing the ids
element-wise fails a correct rewrite; comparing nothing misses a wrong one.

So the ids are judged by what decided them: each variant runs its model's language-model forward
once more, teacher-forced on the *reference's* tokens (``model(input_ids=reference_tokens,
use_cache=False).logits``, no sampling), and those logits are compared with the float rule of
:mod:`rewriter.engine.compare`. The token agreement rate (the share of generated positions where the
variant chose the reference's token) is reported beside the verdict. A rewrite that changes the math
moves the teacher-forced logits far past the bf16 bound; a correct one stays within it.
"""

from __future__ import annotations

from typing import Any

#: The record key holding the teacher-forced logits.
TEACHER_FORCED = "teacher_forced_logits"


def generator_of(model: Any) -> Any | None:
    """The outermost module of ``model`` that generates (has ``generate`` and a
    ``generation_config``: a transformers ``GenerationMixin`` model), or None."""
    for _, module in model.named_modules():
        if callable(getattr(module, "generate", None)) and getattr(module, "generation_config", None) is not None:
            return module
    return None


def generated_tokens(out: Any) -> Any | None:
    """The ``(batch, length)`` integer token ids in a step's output (a tensor, or a transformers
    ``GenerateOutput``'s ``sequences``), or None when the output is not generated tokens."""
    import torch

    tokens = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    if isinstance(out, dict) and tokens is None:
        tokens = out.get("sequences")
    if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 and not tokens.is_floating_point() and tokens.dtype != torch.bool:
        return tokens
    return None


def teacher_forced_logits(generator: Any, tokens: Any) -> Any:
    """``generator(input_ids=tokens, use_cache=False).logits`` without gradients: the logits every
    position of ``tokens`` gets from this variant's model (shape ``(batch, length, vocab)``)."""
    import torch

    with torch.no_grad():
        out = generator(input_ids=tokens, use_cache=False)
    return out.logits if hasattr(out, "logits") else out[0]


def judge_tokens(compare: dict[str, Any], mine: Any, expected: Any, prompt_len: int | None = None) -> dict[str, Any]:
    """The ``output`` comparison of generated tokens, judged by the teacher-forced logits'.

    ``compare``: the per-key comparisons (:meth:`~rewriter.engine.compare.Comparison.to_json`) with
    ``output`` and :data:`TEACHER_FORCED`; ``mine``/``expected``: the two token tensors. Returns
    ``compare`` with ``output`` replaced: ok when the logits passed (whatever the ids), with
    ``judged_by`` and ``token_agreement`` (the share of equal ids after the prompt, 0..1).
    """
    logits = compare.get(TEACHER_FORCED)
    out = dict(compare)
    if logits is None:
        return out
    same_shape = tuple(mine.shape) == tuple(expected.shape)
    start = prompt_len or 0
    agreement = float((mine[:, start:] == expected[:, start:]).float().mean()) if same_shape else 0.0
    verdict = dict(compare["output"])
    verdict.update(
        ok=bool(logits["ok"]),
        judged_by="teacher-forced logits on the reference's tokens (generated ids from low-precision logits)",
        token_agreement=round(agreement, 4),
        ids_equal=bool(compare["output"]["ok"]),
    )
    if logits["ok"]:
        verdict["mismatches"] = []
    else:
        verdict["mismatches"] = [{"path": f"{TEACHER_FORCED}{m['path']}", "reason": m["reason"]} for m in logits["mismatches"]]
    out["output"] = verdict
    del out[TEACHER_FORCED]
    return out
