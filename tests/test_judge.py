"""The numerics judge of low-precision runs: every floating leaf, cache objects included, against the
high-precision run; eager's own rounding noise where none can run; discrete decisions (MoE top-k
routing) judged by their effect. Fast: tensors and tiny modules, no compile."""

from __future__ import annotations

import json

import pytest
import torch

from rewriter.engine import decisions
from rewriter.engine.compare import compare_trees, high_precision_text
from rewriter.engine.rounding import perturbed_reduction_order


class Layer:
    def __init__(self, keys: torch.Tensor) -> None:
        self.keys, self.values = keys, keys * 0.5


class Cache:
    """Holds tensors as transformers' DynamicCache does (``.layers[i].keys``): not a pytree node."""

    def __init__(self, *keys: torch.Tensor) -> None:
        self.layers = [Layer(k) for k in keys]


def _answer(seed: int, shape=(2, 2, 64, 32)) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _drift(ref: torch.Tensor, seed: int, noise: float) -> torch.Tensor:
    """A bf16 run of the answer ``ref`` that drifted by ``noise`` per element (rounding noise)."""
    g = torch.Generator().manual_seed(seed)
    return (ref + noise * torch.randn(ref.shape, generator=g, dtype=torch.float64)).bfloat16()


def _runs(noise: float = 0.02):
    ref = [_answer(10), _answer(11)]
    eager = Cache(*(_drift(r, 1, noise) for r in ref))
    compiled = Cache(*(_drift(r, 2, noise) for r in ref))
    high = Cache(*(r.float() for r in ref))
    return ref, eager, compiled, high


def test_cache_leaves_are_judged_against_the_high_precision_run():
    # eager and a correct compile drift from the float32 answer alike: 2% per element, so they
    # differ from each other by ~3% relative RMSE, past the fixed 1e-2 fallback
    ref, eager, compiled, high = _runs()
    alone = compare_trees({"cache": compiled}, {"cache": eager})
    assert not alone.ok and "no high-precision reference" in alone.mismatches[0].reason
    judged = compare_trees({"cache": compiled}, {"cache": eager}, {"cache": high}, "float32", "bfloat16")
    assert judged.ok, judged.mismatches
    hp = judged.high_precision
    assert hp["leaves"] == 4 and hp["path"].startswith("['cache'].layers[") and hp["ref_dtype"] == "float32"
    assert hp["rmse"] <= hp["bound"] == pytest.approx(3.0 * hp["eager_rmse"] + 1e-3)


def test_wrong_math_in_a_cache_leaf_fails_against_the_high_precision_run():
    ref, eager, _, high = _runs()
    wrong = Cache(_drift(ref[0], 2, 0.02), (ref[1] * 1.25).bfloat16())  # one layer's keys scaled
    result = compare_trees({"cache": wrong}, {"cache": eager}, {"cache": high}, "float32", "bfloat16")
    assert [m.path for m in result.mismatches] == ["['cache'].layers[1].keys", "['cache'].layers[1].values"]
    assert "further from the high-precision run than eager" in result.mismatches[0].reason
    assert "eager vs fp32:" in result.mismatches[0].reason


def test_without_a_high_precision_run_eager_rounding_noise_is_the_bound():
    ref = _answer(3, (64, 128))
    eager, compiled, perturbed = (_drift(ref, s, 0.02) for s in (1, 2, 4))
    # noise measured from eager: a correct compile's distance from eager is of the same order
    result = compare_trees(compiled, eager, noise=perturbed, precision="bfloat16")
    assert result.ok, result.mismatches
    hp = result.high_precision
    assert hp["ref_dtype"] == "eager" and hp["bound"] == pytest.approx(3.0 * hp["eager_rmse"] + 1e-3)
    assert high_precision_text(hp).startswith("perturbed eager vs eager: ")
    # a quieter model (less accumulated noise) gets a tighter bound: the same 2% drift then fails,
    # where the fixed relative-RMSE fallback would have judged both alike
    quiet = _drift(eager.double(), 5, 0.002)
    tight = compare_trees(compiled, eager, noise=quiet, precision="bfloat16")
    assert not tight.ok and "further from eager than eager's own rounding noise" in tight.mismatches[0].reason
    wrong = (ref * 1.25).bfloat16()
    assert not compare_trees(wrong, eager, noise=perturbed, precision="bfloat16").ok
    # the noise bound never excuses a NaN
    nan = compiled.clone()
    nan[0, 0] = float("nan")
    assert "NaN" in compare_trees(nan, eager, noise=perturbed, precision="bfloat16").mismatches[0].reason


def _routed(flip_rows: list[int], seed: int) -> torch.Tensor:
    """A (batch, heads, seq, dim) leaf at 1% rounding drift, whose ``flip_rows`` tokens took another
    expert (their rows far off)."""
    ref = _answer(20, (1, 2, 32, 64))
    run = ref + 0.01 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    for t in flip_rows:
        run[:, :, t] += 1.0
    return run.bfloat16()


def _near_ties(count: int) -> dict:
    return {"calls": 1, "rows": 32, "flipped": count, "near_ties": count, "comparable": True,
            "per_call": [{"op": "topk", "rows": 32, "flipped": count, "near_ties": count}]}


def test_a_flipped_routing_decision_is_judged_by_its_effect():
    ref = _answer(20, (1, 2, 32, 64)).float()
    eager, compiled = _routed([], 1), _routed([7], 2)  # the compile flipped token 7's expert
    args = (ref, "float32", "bfloat16")
    without = compare_trees(compiled, eager, *args)
    assert not without.ok  # 2 rows (2 heads) far off: past 3x eager's RMSE on this small leaf
    near = compare_trees(compiled, eager, *args, decisions=_near_ties(1))
    assert near.ok, near.mismatches
    effect = near.high_precision["by_effect"]
    assert effect["outlier_rows"] == 2 and effect["rows_movable"] == 2 and effect["rest_rmse"] <= effect["rest_bound"]
    assert "judged by the discrete decisions' effect" in high_precision_text(near.high_precision)
    # no near tie measured: the same rows fail; more rows off than the near ties can move: fail
    assert not compare_trees(compiled, eager, *args, decisions=_near_ties(0)).ok
    assert not compare_trees(_routed([3, 7], 2), eager, *args, decisions=_near_ties(1)).ok
    # wrong math on every row is not excused by any number of near ties
    wrong = (_answer(20, (1, 2, 32, 64)) * 1.25).bfloat16()
    assert not compare_trees(wrong, eager, *args, decisions=_near_ties(32)).ok


def test_decisions_are_recorded_and_near_ties_counted():
    logits = torch.tensor([[4.0, 3.0, 1.0, 0.0], [2.0, 1.999, 1.0, 0.0], [0.0, 5.0, 4.0, 3.0]])
    with decisions.record() as low:
        torch.topk(logits.bfloat16(), 1, dim=-1)
        logits.argmax(-1)
        torch.topk(torch.arange(4), 1)  # integer input: no rounding, not a decision
    with decisions.record() as high:
        torch.topk(logits.double(), 1, dim=-1)
        logits.double().argmax(-1)
    assert [c["op"] for c in low] == ["topk", "argmax"] and low[0]["rows"] == 3
    matched = decisions.match(low, high)
    # row 1: 2.0 vs 1.999 rounds to a tie in bf16 (margin 0): a near tie; the others are clear
    assert matched["comparable"] and matched["per_call"][0]["near_ties"] == 1
    assert matched["per_call"][1]["near_ties"] == 0 and matched["rows"] == 6
    assert decisions.rows_moved(matched, 6) == 2  # a (3, vocab)-row output: one row per decision row
    whole = {"comparable": True, "per_call": [{"op": "argmax", "rows": 1, "flipped": 0, "near_ties": 1}]}
    assert decisions.rows_moved(whole, 64) == 32  # one argmax over a whole tensor: never more than half the rows
    with decisions.record() as other:
        torch.topk(logits, 1, dim=-1)
    assert decisions.match(low, other)["comparable"] is False
    assert decisions.rows_moved(decisions.match(low, other), 6) == 0


def test_perturbed_reduction_order_changes_low_precision_products_by_rounding_only():
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 64).bfloat16().requires_grad_(False)
    x = torch.randn(32, 256).bfloat16()
    eager = layer(x)
    with perturbed_reduction_order() as count:
        perturbed = layer(x)
        f32 = layer.float()(x.float())
    assert count["perturbed"] == 1  # the bf16 product only; float32's is left alone
    rel = float((perturbed.double() - eager.double()).norm() / eager.double().norm())
    assert 0 < rel < 2 ** -6  # a few bf16 roundings, not another answer
    assert torch.equal(f32, layer(x.float()))


def test_reference_notes_say_why_no_reference_ran_and_what_judged_instead():
    from rewriter.engine.cold import reference_notes

    run = {"dtype": None, "tried": ["float64: RuntimeError: no double kernel", "float32: RuntimeError: bf16 only"],
           "noise": {"perturbed_products": 12},
           "decisions": {"calls": 4, "rows": 256, "flipped": 3, "near_ties": 18, "comparable": True}}
    first, second = reference_notes(run)
    assert "failed in float64 and float32 (float64: RuntimeError: no double kernel; float32" in first
    assert "eager's own rounding noise" in first and "12 matrix product(s)" in first
    assert "3 of 256 rows" in second and "18 near ties" in second
    failed = reference_notes(dict(run, noise={"perturbed_products": 0, "error": "RuntimeError: x"}, decisions=None))
    assert failed == [failed[0]] and "relative-RMSE fallback" in failed[0] and "RuntimeError: x" in failed[0]
    json.dumps(run)  # stays JSON


def test_the_validation_report_says_what_judged_the_low_precision_leaves():
    from rewriter.engine.compare import reference_text

    ran = reference_text({"dtype": "float32", "seconds": 1.5, "tried": ["float64: RuntimeError: x"]})
    assert ran.startswith("The original ran once more in float32") and "rmse(eager, ref)" in ran
    noise = reference_text({"dtype": None, "seconds": 0.2, "tried": ["float64: E", "float32: E"], "noise": {"perturbed_products": 34}})
    assert "neither float64 nor float32 (float64: E; float32: E)" in noise and "34 matrix product(s) perturbed" in noise
    assert "rmse(perturbed, eager)" in noise
    failed = reference_text({"dtype": None, "seconds": 0.2, "tried": ["float64: E"], "noise": {"error": "boom", "perturbed_products": 0}})
    assert "fixed relative-RMSE fallback" in failed


# --- end to end: `stackpart validate` on bf16 models (subprocess children; slow) ---------------

import shutil  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

from rewriter.cli import main  # noqa: E402

BF16_ONLY = Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "bf16_only"
FAST = ["--reps", "3", "--warmup", "1", "--timeout", "300", "--baselines", ""]


def _validate(capsys, plan: Path, src: Path, out: Path, *extra: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), *FAST, *extra])
    err = capsys.readouterr().err
    return code, json.loads((out / "validation.json").read_text()), err


@pytest.mark.slow
def test_bf16_only_model_planted_math_change_fails_against_eager_rounding_noise(tmp_path, capsys):
    """No float64/float32 path: the planted change (padding a bidirectional model to a bucket)
    fails against eager's own rounding noise, and the report says why no reference ran."""
    shutil.copytree(BF16_ONLY, tmp_path / "case")
    code, report, err = _validate(capsys, tmp_path / "case" / "planted.yaml", tmp_path / "case" / "src",
                                  tmp_path / "r", "--backend", "eager")
    assert code == 1, err
    failures = report["verdict"]["failures"]
    assert failures and all("further from eager than eager's own rounding noise" in f for f in failures), failures
    notes = " ".join(report["verdict"]["notes"])
    assert "failed in float64 and float32" in notes and "bf16_gelu: no torch.float32 kernel" in notes
    assert "eager's own rounding noise" in notes
    code, report, err = _validate(capsys, tmp_path / "case" / "correct.yaml", tmp_path / "case" / "src",
                                  tmp_path / "ok", "--backend", "eager")
    assert code == 0, err
    assert report["variants"]["plan"]["numerics_vs_high_precision"]["ref_dtype"] == "eager"


@pytest.mark.slow
def test_bf16_planted_math_change_fails_against_the_float64_run(tmp_path, capsys):
    """The bidirectional model padded to a bucket (tests/test_validate.py's planted wrong rewrite),
    run in bfloat16: a float64 reference runs, and the change lands far past eager's own error."""
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "bidirectional_bucket", tmp_path / "case")
    plan = tmp_path / "case" / "plan.yaml"
    plan.write_text(plan.read_text().replace("dtype: float32", "dtype: bfloat16"))
    code, report, err = _validate(capsys, plan, tmp_path / "case" / "src", tmp_path / "r", "--backend", "eager")
    assert code == 1, err
    failures = report["verdict"]["failures"]
    assert [f.split(": output")[0] for f in failures] == [
        "wrong numbers at shape {'batch': 2, 'seq': 12}", "wrong numbers at shape {'batch': 2, 'seq': 20}"], failures
    assert all("further from the high-precision run than eager: eager vs fp64:" in f for f in failures), failures


MIXTRAL = textwrap.dedent("""\
    import torch
    import transformers


    def build_model():
        torch.manual_seed(0)
        config = transformers.MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                            num_experts_per_tok=2)
        return transformers.MixtralForCausalLM(config).eval()


    def make_inputs(batch: int = 2, seq: int = 32):
        return {"input_ids": torch.randint(0, 256, (batch, seq))}
""")


@pytest.mark.slow
def test_tiny_bf16_mixtral_whole_compile_passes_validate_with_inductor(tmp_path, capsys):
    """The library's defaults (the DynamicCache returned): every cache leaf is judged against the
    float32 run (float64 has no grouped-GEMM kernel), and Inductor's whole compile, as close to
    float32 as eager is, passes; with Inductor on CPU (minutes)."""
    pytest.importorskip("transformers")
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(MIXTRAL)
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""\
        version: 1
        harness:
          file: harness.py
          shapes: [{batch: 2, seq: 32}]
          dtype: bfloat16
          device: cpu
        site: harness.py::build_model
        actions:
          - action: compile
            target: transformers.models.mixtral.modeling_mixtral:MixtralForCausalLM
            strategy: whole
    """))
    code, report, err = _validate(capsys, plan, src, tmp_path / "r")
    assert code == 0, err
    hp = report["variants"]["plan"]["numerics_vs_high_precision"]
    assert hp["ref_dtype"] == "float32" and hp["leaves"] == 5  # the logits and 2 layers' keys and values
    assert "high-precision reference ran in float32 (float64:" in " ".join(report["verdict"]["notes"])


class TinyMoE(torch.nn.Module):
    """A router picking 2 of 4 experts per token with ``topk``, then the experts (linear layers)."""

    def __init__(self, bf16_only: bool = False) -> None:
        super().__init__()
        self.router = torch.nn.Linear(32, 4)
        self.experts = torch.nn.ModuleList([torch.nn.Linear(32, 32) for _ in range(4)])
        self.bf16_only = bf16_only

    def forward(self, x):
        if self.bf16_only and x.dtype != torch.bfloat16:
            raise RuntimeError(f"no {x.dtype} kernel")
        weights, chosen = torch.topk(self.router(x).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + expert(x) * (weights * (chosen == e)).sum(-1, keepdim=True)
        return out


@pytest.mark.parametrize("bf16_only", [False, True])
def test_the_reference_child_saves_the_high_precision_run_or_eager_noise_with_the_decisions(tmp_path, bf16_only):
    from rewriter.engine.reference import high_precision_reference

    torch.manual_seed(0)
    model = TinyMoE(bf16_only).bfloat16().eval()
    torch.save((torch.randn(4, 16, 32).bfloat16(),), tmp_path / "inputs_0.pt")
    job = {"harness": {"shapes": [{"batch": 4}], "device": "cpu"}, "seed": 0}
    run = high_precision_reference(job, model, tmp_path, training=False)
    saved = torch.load(tmp_path / "high_precision_0.pt", weights_only=False)
    decided = saved["decisions"]
    assert decided["comparable"] and decided["calls"] == 1 and decided["rows"] == 64  # one topk over 4 x 16 tokens
    assert run["decisions"]["rows"] == 64
    if not bf16_only:
        assert run["dtype"] == saved["dtype"] == "float64" and "noise" not in run
        assert saved["record"]["output"].dtype == torch.float32  # stored narrower
        return
    assert run["dtype"] is None and [t.split(":")[0] for t in run["tried"]] == ["float64", "float32"]
    assert saved["kind"] == "noise" and saved["record"]["output"].dtype == torch.bfloat16
    assert run["noise"]["perturbed_products"] == 5  # the router and the 4 experts
    with torch.no_grad():
        eager = model(torch.load(tmp_path / "inputs_0.pt")[0])
    noise = saved["record"]["output"]
    assert 0 < float((noise.double() - eager.double()).abs().max()) and not torch.equal(noise, eager)
