"""Generated token ids judged by the teacher-forced logits that chose them (docs/decisions.md,
"Numerics: bf16 drift and generated tokens")."""

from __future__ import annotations

import torch

from rewriter.engine.generation import TEACHER_FORCED, generated_tokens, judge_tokens


def comparison(ok, reason="3 of 16 elements differ (integer tensor)"):
    return {"ok": ok, "leaves": 1, "max_abs": 0.0, "max_rel": 0.0,
            "mismatches": [] if ok else [{"path": "", "reason": reason}], "high_precision": None}


def test_flipped_ids_pass_when_their_logits_are_within_the_float_rule():
    ref = torch.tensor([[5, 6, 7, 8, 9, 10]])
    mine = torch.tensor([[5, 6, 7, 8, 1, 2]])  # a flip at the 5th position, then another path
    out = judge_tokens({"output": comparison(False), TEACHER_FORCED: comparison(True)}, mine, ref, prompt_len=2)
    assert TEACHER_FORCED not in out
    assert out["output"]["ok"] is True and out["output"]["ids_equal"] is False
    assert out["output"]["token_agreement"] == 0.5  # 2 of the 4 generated positions
    assert out["output"]["judged_by"].startswith("teacher-forced logits")


def test_wrong_logits_fail_even_when_the_ids_agree():
    ref = torch.tensor([[5, 6, 7]])
    out = judge_tokens({"output": comparison(True), TEACHER_FORCED: comparison(False, "bound exceeded")}, ref, ref)
    assert out["output"]["ok"] is False and out["output"]["token_agreement"] == 1.0
    assert out["output"]["mismatches"][0]["path"] == TEACHER_FORCED


def test_only_integer_token_matrices_count_as_generated():
    assert generated_tokens(torch.tensor([[1, 2]])) is not None
    assert generated_tokens(torch.randn(2, 3)) is None
    assert generated_tokens(torch.tensor([1, 2])) is None
    assert generated_tokens({"sequences": torch.tensor([[1, 2]])}) is not None
