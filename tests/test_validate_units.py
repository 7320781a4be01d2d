"""validate's pure parts: the pytree comparison and its tolerances, amortization, the verdict rules."""

from __future__ import annotations

import math

import pytest
import torch

from rewriter.engine.amortize import amortize
from rewriter.engine.compare import TOLERANCES, compare_trees
from rewriter.engine.verdict import numerics_failures, speed_failures


def test_identical_trees_pass_and_count_leaves():
    x = {"logits": torch.randn(2, 3), "aux": (torch.arange(4), 7)}
    result = compare_trees(x, x)
    assert result.ok and result.leaves == 2


def test_nan_where_original_is_finite_fails():
    ref = torch.ones(8)
    bad = ref.clone()
    bad[3] = float("nan")
    result = compare_trees(bad, ref)
    assert not result.ok
    assert "NaN" in result.mismatches[0].reason and "1 non-finite" in result.mismatches[0].reason


def test_inf_reproduced_from_the_original_passes():
    ref = torch.tensor([1.0, float("inf"), 3.0])
    assert compare_trees(ref.clone(), ref).ok
    assert not compare_trees(torch.tensor([1.0, 2.0, 3.0]), ref).ok


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_tolerance_boundary_per_dtype(dtype):
    rtol, atol, _ = TOLERANCES[str(dtype).replace("torch.", "")]
    ref = torch.full((64,), 4.0, dtype=dtype)
    close = (ref.double() * (1 + rtol / 4)).to(dtype)
    assert compare_trees(close, ref).ok
    far = (ref.double() * (1 + 20 * rtol) + 20 * atol).to(dtype)
    result = compare_trees(far, ref)
    assert not result.ok and str(dtype).replace("torch.", "") in result.mismatches[0].reason


def test_bf16_rmse_rule_tolerates_a_few_reordered_elements_but_not_a_wrong_region():
    torch.manual_seed(0)
    ref = torch.randn(4096).bfloat16()
    noisy = ref.double().clone()
    noisy[:3] += 0.06  # 3 elements past the element-wise bound, within 8x of it
    assert compare_trees(noisy.bfloat16(), ref).ok
    wrong = ref.double().clone()
    wrong[:512] += 1.0  # a whole region off: relative RMSE far above 1e-2
    assert not compare_trees(wrong.bfloat16(), ref).ok


def test_structure_shape_dtype_and_integer_mismatches_fail():
    a = torch.zeros(2, 3)
    assert "structure" in compare_trees((a,), (a, a)).mismatches[0].reason
    assert "shape" in compare_trees(torch.zeros(2, 4), a).mismatches[0].reason
    assert "dtype" in compare_trees(a.double(), a).mismatches[0].reason
    assert "integer" in compare_trees(torch.tensor([1, 2]), torch.tensor([1, 3])).mismatches[0].reason


def test_numerics_failures_name_the_shape_and_quantity():
    cold = {"shapes": [{"shape": {"seq": 12}, "compare": {"grads": {"ok": False, "mismatches": [
        {"path": "['blocks.0.fc.weight']", "reason": "3 of 9 elements outside"}]}}}]}
    (msg,) = numerics_failures(cold)
    assert "{'seq': 12}" in msg and "grads" in msg and "blocks.0.fc.weight" in msg


def test_break_even_is_compile_times_compiles_over_saving():
    # 2 compiles per start costing 30 s in all, 10 restarts, saving 1 ms/step:
    # t_compile = 15 s, N_compiles = 20, break-even = 15 * 20 / 0.001 = 300,000 runs.
    a = amortize(0.010, 0.009, 30.0, 2, 2, runs=1_000_000, restarts=10)
    assert a["n_compiles"] == 20 and a["t_compile_s"] == pytest.approx(15.0)
    assert a["break_even_runs"] == pytest.approx(300_000)
    assert a["amortized"] is True
    assert a["pays_back_in"] == ["training", "serving"]
    assert amortize(0.010, 0.009, 30.0, 2, 2, runs=100_000, restarts=10)["amortized"] is False


def test_not_faster_never_pays_back():
    a = amortize(0.010, 0.011, 5.0, 1, 1, runs=10**9, restarts=1)
    assert a["break_even_runs"] == "inf" and a["amortized"] is False and a["pays_back_in"] == []
    assert "never pays back" in a["verdict"]


def test_speed_rules():
    assert speed_failures({"eager": 10.0, "plan": 10.1, "whole": 12.0}, 0.95, None) == []
    (slow,) = speed_failures({"eager": 10.0, "plan": 11.0}, 0.95, None)
    assert slow.startswith("slower than eager")
    (behind,) = speed_failures({"eager": 10.0, "plan": 8.0, "whole": 5.0, "regional": 9.0}, 0.95, None)
    assert "whole compile" in behind and "0.625" in behind
    assert speed_failures({"eager": 10.0, "plan": 8.0, "whole": 5.0}, 0.6, None) == []
    (amort,) = speed_failures({"eager": 10.0, "plan": 8.0}, 0.95, {"amortized": False, "verdict": "x"})
    assert amort.startswith("not amortized")
    assert math.isfinite(amortize(0.01, 0.005, 0.0, 0, 0, None, 1)["break_even_runs"])


def _bf16_run(ref64: torch.Tensor, seed: int, noise: float) -> torch.Tensor:
    """One bf16 run of the float64 answer ``ref64`` drifting by ``noise`` (absolute, per
    element): the reduction-order drift of a deep bf16 model."""
    g = torch.Generator().manual_seed(seed)
    return (ref64 + noise * torch.randn(ref64.shape, generator=g, dtype=torch.float64)).bfloat16()


def _bf16_runs(seed: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    ref64 = 2.0 * torch.randn(64, 512, generator=torch.Generator().manual_seed(100), dtype=torch.float64)
    return ref64, _bf16_run(ref64, seed, noise)


def test_bf16_compile_drift_passes_against_the_float64_run_but_not_against_eager_alone():
    # eager and a correct compile each drift from the float64 answer by the same amount, so they
    # differ from each other by relative RMSE ~0.013 (the H200 Llama run): the eager-only rule
    # refuses it, the fp64_ref rule of torch._dynamo.utils.same accepts it
    ref64, eager = _bf16_runs(0, 0.018)
    compiled = _bf16_run(ref64, 1, 0.018)
    old_rule = compare_trees(compiled, eager)
    assert not old_rule.ok and "relative RMSE 0.013" in old_rule.mismatches[0].reason
    result = compare_trees(compiled, eager, ref64)
    assert result.ok, result.mismatches
    hp = result.high_precision
    assert hp["ref_dtype"] == "float64" and hp["multiplier"] == 3.0 and hp["leaves"] == 1
    assert hp["rmse"] <= hp["bound"] == pytest.approx(3.0 * hp["eager_rmse"] + 1e-2 / 10)
    assert result.to_json()["high_precision"]["ok"] is True


def test_bf16_wrong_math_is_further_from_float64_than_eager_and_fails():
    ref64, eager = _bf16_runs(0, 0.018)
    wrong = ref64.clone()
    wrong[:8] += 0.5  # one eighth of the rows off (a planted wrong rewrite), the rest exact
    result = compare_trees(wrong.bfloat16(), eager, ref64)
    assert not result.ok
    reason = result.mismatches[0].reason
    assert "eager vs fp64:" in reason and "rewritten vs fp64:" in reason and "bound" in reason
    assert result.high_precision["rmse"] > result.high_precision["bound"]


def test_float64_reference_does_not_excuse_nan_or_fp32_differences():
    ref64, eager = _bf16_runs(0, 0.018)
    nan = eager.clone()
    nan[0, 0] = float("nan")
    assert "NaN" in compare_trees(nan, eager, ref64).mismatches[0].reason
    # float32 outputs keep the element-wise rule whatever the high-precision run says
    x64 = torch.randn(256, dtype=torch.float64)
    off = (x64 + 1e-2).float()
    assert not compare_trees(off, x64.float(), x64).ok
    # a reference of another structure is ignored (element-wise / fallback rules apply)
    assert compare_trees((eager,), (eager,), (ref64, ref64)).high_precision is None


def test_float32_loss_of_a_bf16_model_gets_the_high_precision_rule():
    # a loss upcast with .float() from bf16 logits drifts by the bf16 math before the upcast
    ref = torch.tensor(1.25, dtype=torch.float64)
    eager, compiled = (ref + 3e-4).float(), (ref - 3e-4).float()
    assert not compare_trees(compiled, eager, ref).ok  # float32 model: element-wise rule only
    result = compare_trees(compiled, eager, ref, precision="bfloat16")
    assert result.ok and result.high_precision["multiplier"] == 3.0
    wrong = compare_trees((ref + 0.01).float(), eager, ref, precision="bfloat16")
    assert not wrong.ok and "eager vs fp64" in wrong.mismatches[0].reason


# Dynamo's message on the H200 (torch 2.11, transformers 5.17 GPT-2, mark_dynamic input_ids dim 1
# min 2 max 1024): the code guards 128 <= seq.
GPT2_CONSTRAINT = (
    "raised: shape {'batch': 8, 'seq': 512}: ConstraintViolationError: Constraints violated "
    "(L['input_ids'].size()[1])! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
    "  - Not all values of L['input_ids'].size()[1] = L['input_ids'].size()[1] in the specified range "
    "L['input_ids'].size()[1] <= 1024 satisfy the generated guard 128 <= L['input_ids'].size()[1] and "
    "L['input_ids'].size()[1] <= 1024\n"
)


def test_constraint_violation_hint_gives_the_range_and_the_plan_line():
    from rewriter.engine.verdict import constraint_hint

    hint = constraint_hint(GPT2_CONSTRAINT, [(30, "attention_mask", 1), (27, "input_ids", 1)], "gpt2.yaml")
    assert hint == (
        "hint: the code requires 128 <= s and s <= 1024 for input_ids dim 1 (gpt2.yaml line 27): "
        "set min: 128, max: 1024 on that mark_dynamic action "
        "(or strict: false on the action, maybe_mark_dynamic: Dynamo keeps what the code needs)"
    )
    assert constraint_hint("raised: shape {}: RuntimeError: boom", [(27, "input_ids", 1)]) is None


# torch 2.13 on CPU: x.view(2, 3, 4) with x dim 1 marked; and x + y with only x marked
SPECIALISED = (
    "raised: shape {'batch': 2, 'seq': 12}: ConstraintViolationError: Constraints violated (L['x'].size()[1])! "
    "For more information, run with TORCH_LOGS=\"+dynamic\".\n"
    "  - You marked L['x'].size()[1] as dynamic but your code specialized it to be a constant (12). If you're "
    "using mark_dynamic, either remove it or use maybe_mark_dynamic. If you're using Dim.DYNAMIC, replace it "
    "with either Dim.STATIC or Dim.AUTO.\n"
    "  - Not all values of L['x'].size()[0] = L['x'].size()[0] in the specified range L['x'].size()[0] <= 64 "
    "satisfy the generated guard L['x'].size()[0] != 5.\n"
)


def test_constraint_violation_hint_covers_every_violation_line():
    from rewriter.engine.verdict import constraint_hint

    hint = constraint_hint(SPECIALISED, [(9, "x", 1), (11, "x", 0)])
    assert hint.startswith("hint: the code fixes x dim 1 (plan.yaml line 9) to 12 (a view to a fixed size")
    assert "; the code requires s != 5 for x dim 0 (plan.yaml line 11) (or strict: false" in hint  # no trailing period
    tied = "Constraints violated (L['x'].size()[1])!\n  - The values of L['x'].size()[1] = L['x'].size()[1] must always be equal to L['y'].size()[1], inferred to be equal to L['y'].size()[1].\n"
    assert "the code ties x dim 1 (plan.yaml line 9) to y dim 1: mark that one too" in constraint_hint(tied, [(9, "x", 1)])


def test_reference_overlaps_the_plan_only_with_room_on_the_device():
    from rewriter.engine.cost import room_to_overlap

    gib = 2**30
    assert room_to_overlap({"weights_saved": True}) is None  # CPU: no memory figures, no limit
    assert room_to_overlap({"allocated": 2 * gib, "free": 120 * gib, "total": 140 * gib}) is None
    why = room_to_overlap({"allocated": 20 * gib, "free": 100 * gib, "total": 140 * gib})
    assert why == "100.0 GiB free on the device < 8 x the 20.0 GiB the reference holds"


def test_repeated_blocks_are_the_outermost_lists_only():
    """A newcomer's MoE: each block holds a ModuleList of experts. Counting the experts' lists
    too put the blocks' share of the eager step at 111-131%, and the naive regional baseline
    compiled regions inside compiled regions."""
    import torch.nn as nn

    from rewriter.engine.variants import repeated_blocks

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(2)])
            self.heads = nn.ModuleList([nn.Linear(4, 2) for _ in range(2)])

    found = repeated_blocks(Model())
    assert [(name, len(children)) for name, children in found] == [("blocks", 2), ("heads", 2)]
    assert [name for name, _ in repeated_blocks(nn.Sequential(Block(), Block()))] == ["<root>"]


def test_a_graph_break_is_listed_once_with_its_site_when_the_log_gave_one():
    from rewriter.validate.report import graph_break_lines

    comp = {"graph_break_reasons": ["2x TypeError when making fake tensor call"],
            "graph_break_sites": ["b/model.py:36: 'is_causal' must be bool, not SymBool"]}
    assert graph_break_lines(comp) == ["  - graph break at b/model.py:36: 'is_causal' must be bool, not SymBool"]
    assert graph_break_lines({"graph_break_reasons": ["2x generic_jump"]}) == ["  - graph break: 2x generic_jump"]
    assert graph_break_lines({}) == []


def test_a_speedup_just_below_the_bound_is_printed_below_it():
    from rewriter.engine.verdict import below, speed_failures

    assert below(0.9496, 0.95) == "0.9496" and below(0.9, 0.95) == "0.900"
    [fail] = speed_failures({"plan": 10.0, "eager": 20.0, "whole": 9.496}, 0.95, None)
    assert "speedup 0.9496 < 0.95" in fail


def test_an_empty_diff_is_said_for_what_it_is():
    """validate of a plan whose diff is empty: a tree `rewrite --apply` wrote already holds the
    plan's edits, which is not a plan that changes nothing."""
    from rewriter.rewrite.transform import RewriteResult
    from rewriter.validate.command import unchanged_note

    applied = unchanged_note(1, RewriteResult())
    assert applied.startswith("SRC already holds this plan's edits"), applied
    assert "changes nothing" not in applied
    assert unchanged_note(0, RewriteResult()) == "the plan has no actions: the plan variant is the original tree"
    held = unchanged_note(2, RewriteResult(skipped=[(0, "unsafe")], left_as_written=[1]))
    assert held.startswith("the plan changes nothing in SRC (2 action(s) not written)"), held
    partly = unchanged_note(2, RewriteResult(skipped=[(0, "unsafe")]))
    assert partly.startswith("SRC already holds this plan's edits"), partly


# torch 2.11 on an H100: Llama's whole compile with mode reduce-overhead, after a graph break
OVERWRITTEN = (
    "RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. "
    "Stack trace: File \"modeling_llama.py\", line 403, in torch_dynamo_resume_in_forward_at_391 hidden_states = "
    "decoder_layer(. To prevent overwriting, clone the tensor outside of torch.compile() or call "
    "torch.compiler.cudagraph_mark_step_begin() before each model invocation."
)


def test_cudagraph_overwrite_hint_names_the_cause_and_what_avoids_it():
    from rewriter.engine.verdict import cudagraph_overwrite_hint

    hint = cudagraph_overwrite_hint(OVERWRITTEN)
    assert hint.startswith("hint: CUDA graphs (mode 'reduce-overhead') reused the memory of a tensor")
    assert "pytorch#152887" in hint and "without CUDA graphs" in hint and "cudagraph_mark_step_begin()" in hint
    assert cudagraph_overwrite_hint("RuntimeError: CUDA out of memory") is None


def test_a_candidate_that_hits_the_cudagraph_overwrite_gets_the_hint_on_its_row():
    """The search's row of a CUDA-graphs candidate that crashed this way carries the hint beside
    the child's output tail (the report prints a row's hints under it)."""
    from types import SimpleNamespace

    from rewriter.engine.measure import Measurement, _Run

    m = Measurement()
    cold = _Run.__new__(_Run)
    cold.m = m
    cold.variants = [SimpleNamespace(name="whole+cudagraphs", judged=True, prepare=None, mark_dynamic=[], plan_name="p")]
    cold.on_event = None
    cold.replicas = SimpleNamespace(end=lambda name: None)
    cold.opts = SimpleNamespace(force_backend=None)
    res = SimpleNamespace(error={"kind": "crash", "message": OVERWRITTEN, "traceback": "t\nlast line"}, stderr_tail="")
    row: dict = {"problems": []}
    assert cold._record_error("whole+cudagraphs", row, res) is True
    assert row["problems"] == [f"the rewritten tree failed: crash: {OVERWRITTEN}"]
    hints = m.hints["whole+cudagraphs"]
    assert hints[0] == "child output tail: t | last line"
    assert hints[1].startswith("hint: CUDA graphs (mode 'reduce-overhead')")
