"""`stackpart validate` end to end on CPU: the planted wrong rewrite fails, the correct one passes,
errors exit 2, and every output says the timings are CPU ones.

Fixtures (fixtures/validate/): the same plan (regional compile with the eager backend + bucketing
the sequence to [16, 32]) on a causal model (right-padding cannot change kept positions: must
pass) and on a bidirectional one (every position attends to the padding: must fail).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from rewriter.cli import main
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite
from rewriter.engine.child import run_cold
from rewriter.engine.materialize import tree_hashes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"
FAST = ["--backend", "eager", "--reps", "3", "--warmup", "1", "--timeout", "120"]


def _case(tmp_path: Path, name: str) -> tuple[Path, Path]:
    shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path / name / "plan.yaml", tmp_path / name / "src"


def _validate(capsys, plan: Path, src: Path, out: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), *FAST, *extra])
    return code, capsys.readouterr().err


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """A private temp dir for validate's work trees, so the test can see that it cleans up."""
    root = tmp_path / "tmpdir"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.mark.slow
def test_correct_rewrite_passes_and_report_is_bound_to_the_diff(tmp_path, capsys, own_tmp):
    plan, src = _case(tmp_path, "causal_bucket")
    before = tree_hashes(src)
    code, err = _validate(capsys, plan, src, tmp_path / "report")
    assert code == 0, err
    report = json.loads((tmp_path / "report" / "validation.json").read_text())
    digest = plan_rewrite(load_plan(plan), src, unsafe=True).digest()
    assert report["diff_sha256"] == digest and report["verdict"]["passed"]
    assert set(report["variants"]) == {"eager", "plan", "whole", "regional"}
    assert report["variants"]["plan"]["numerics"] == "ok"
    # every shape went through the plan's compiled region and the bucket (16 and 32: 2 buckets)
    assert report["variants"]["plan"]["compile"]["unique_graphs"] >= 1
    assert len(report["timing"]) == 3
    # validate's own overhead, broken down; the parts add up to its wall time
    ov = report["overhead"]
    compiled = [report["variants"][v] for v in ("plan", "whole", "regional")]
    assert ov["measured_compile_s"] == pytest.approx(sum(v["compile_s_per_start"] for v in compiled))
    parts = ("materialize_s", "reference_s", "waiting_for_builds_s", "timing_s", "teardown_s", "other_s")
    cold = sum(v["child_wall_s"] for v in compiled)
    assert sum(ov[k] for k in parts) + cold == pytest.approx(ov["validate_wall_s"])
    assert ov["cold_not_compile_s"] == pytest.approx(cold - ov["measured_compile_s"])
    assert ov["high_precision_run_s"] is None  # float32 harness: no float64 re-run
    assert ov["reference_overlapped"] is False  # on CPU the reference never overlaps a compile
    assert 0 <= ov["other_s"] < 0.25 * ov["validate_wall_s"]  # the named parts explain the wall time
    # the explanation of regional compile: share of the eager step inside the 2 repeated blocks
    shares = report["variants"]["eager"]["block_share"]
    assert [row["block_calls"] for row in shares] == [2, 2, 2]
    assert all(0.0 < row["share"] < 1.0 for row in shares)
    # CPU run: said in every output, never presented as GPU timing
    assert report["environment"]["timed_on"] == "cpu" and "NOT GPU timings" in report["timing_note"]
    md = (tmp_path / "report" / "validation.md").read_text()
    assert "CPU RUN" in md and "NOT GPU timings" in md and digest in md
    assert err.count("CPU RUN") == 1 and "ms/step (CPU)" in err  # said once, at the start (two newcomers saw it twice)
    assert (tmp_path / "report" / "validation.png").stat().st_size > 0
    # SRC untouched, temp trees removed, paths in the report are a/ and b/, not the temp dir
    assert tree_hashes(src) == before and not (src / "__pycache__").exists()
    assert list(own_tmp.iterdir()) == []
    assert "stackpart-validate-" not in json.dumps(report["variants"])


@pytest.mark.slow
def test_planted_wrong_rewrite_fails_every_time(tmp_path, capsys):
    plan, src = _case(tmp_path, "bidirectional_bucket")
    for attempt in range(2):
        code, err = _validate(capsys, plan, src, tmp_path / f"r{attempt}", "--baselines", "")
        assert code == 1, err
        report = json.loads((tmp_path / f"r{attempt}" / "validation.json").read_text())
        failures = report["verdict"]["failures"]
        # seq 12 and 20 are padded (to 16 and 32) and differ; seq 16 is a bucket size: untouched
        assert [f.split(": output")[0] for f in failures] == [
            "wrong numbers at shape {'batch': 2, 'seq': 12}",
            "wrong numbers at shape {'batch': 2, 'seq': 20}",
        ], failures
        assert "fail:" in err and "wrong numbers" in err
        assert report["variants"]["plan"]["numerics"] == "FAIL"


@pytest.fixture
def overlap_on(monkeypatch):
    """Force the GPU-only schedule on CPU: the reference's run overlaps the plan's cold phase."""
    from rewriter.engine import measure

    monkeypatch.setattr(measure, "may_overlap", lambda allowed, device: allowed)


@pytest.mark.slow
def test_overlapped_reference_gives_the_same_wrong_numbers_verdict(tmp_path, capsys, overlap_on):
    plan, src = _case(tmp_path, "bidirectional_bucket")
    code, err = _validate(capsys, plan, src, tmp_path / "r", "--baselines", "")
    assert code == 1, err
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    assert report["overhead"]["reference_overlapped"] is True
    assert [f.split(": output")[0] for f in report["verdict"]["failures"]] == [
        "wrong numbers at shape {'batch': 2, 'seq': 12}",
        "wrong numbers at shape {'batch': 2, 'seq': 20}",
    ]
    code, err = _validate(capsys, plan, src, tmp_path / "r2", "--baselines", "", "--no-overlap")
    assert code == 1, err
    assert json.loads((tmp_path / "r2" / "validation.json").read_text())["overhead"]["reference_overlapped"] is False


def test_failed_reference_under_overlap_stops_the_waiting_variant(tmp_path, capsys, overlap_on):
    """The plan's child waits for the reference's outputs; when the original raises instead, the
    run ends with exit 2 naming the reference, and the waiting child is killed, not left hanging."""
    plan, src = _case(tmp_path, "causal_bucket")
    model = src / "model.py"
    # only the original sees unpadded lengths (the plan buckets them to 16/32)
    model.write_text(model.read_text().replace(
        "        b, t, c = x.shape\n", "        b, t, c = x.shape\n        if t % 16:\n            raise ValueError('unpadded')\n"))
    import time

    t0 = time.perf_counter()
    code, err = _validate(capsys, plan, src, tmp_path / "r", "--baselines", "")
    assert code == 2, err
    assert time.perf_counter() - t0 < 90
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    (error,) = report["verdict"]["errors"]
    assert error.startswith("the original model (eager reference) failed") and "unpadded" in error


@pytest.mark.slow
def test_bf16_is_judged_against_a_float64_run_of_the_original(tmp_path, capsys):
    """In bf16 the correct rewrite passes and the planted wrong one fails, both by the fp64_ref
    rule (the original re-run in float64 inside the eager child), with the errors reported."""
    for name, expect in (("causal_bucket", 0), ("bidirectional_bucket", 1)):
        plan, src = _case(tmp_path, name)
        plan.write_text(plan.read_text().replace("dtype: float32", "dtype: bfloat16"))
        code, err = _validate(capsys, plan, src, tmp_path / name, "--baselines", "")
        assert code == expect, err
        report = json.loads((tmp_path / name / "validation.json").read_text())
        assert report["variants"]["eager"]["high_precision_run"]["dtype"] == "float64"
        hp = report["variants"]["plan"]["numerics_vs_high_precision"]
        assert hp["ref_dtype"] == "float64" and hp["multiplier"] == 3.0
        assert 0 < hp["eager_rmse"] < 0.02  # bf16 rounding of the tiny LM's logits
        md = (tmp_path / name / "validation.md").read_text()
        assert "eager vs fp64:" in md and "plan vs fp64:" in md
        if expect == 0:
            assert hp["ok"] and hp["rmse"] <= hp["bound"]
        else:
            assert not hp["ok"] and hp["rmse"] > 3 * hp["bound"]  # far past it, not marginal
            failures = report["verdict"]["failures"]
            assert len(failures) == 2 and all("eager vs fp64" in f for f in failures), failures
    # training in bf16: loss, gradients and the loss after a step of the correct rewrite pass
    plan, src = _case(tmp_path / "train", "causal_bucket")
    plan.write_text(plan.read_text().replace("dtype: float32", "dtype: bfloat16").replace("mode: inference", "mode: training"))
    code, err = _validate(capsys, plan, src, tmp_path / "train-report", "--baselines", "")
    assert code == 0, err
    report = json.loads((tmp_path / "train-report" / "validation.json").read_text())
    assert report["variants"]["eager"]["high_precision_run"]["dtype"] == "float64"
    shape0 = report["variants"]["plan"]
    assert shape0["numerics"] == "ok" and shape0["numerics_vs_high_precision"]["ok"]


@pytest.mark.slow
def test_training_mode_compares_loss_gradients_and_step(tmp_path, capsys):
    plan, src = _case(tmp_path, "causal_bucket")
    plan.write_text(plan.read_text().replace("mode: inference", "mode: training"))
    code, err = _validate(capsys, plan, src, tmp_path / "r", "--baselines", "")
    assert code == 0, err
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    assert report["harness"]["mode"] == "training"
    wrong_plan, wrong_src = _case(tmp_path, "bidirectional_bucket")
    wrong_plan.write_text(wrong_plan.read_text().replace("mode: inference", "mode: training"))
    code, err = _validate(capsys, wrong_plan, wrong_src, tmp_path / "w", "--baselines", "")
    assert code == 1
    failures = json.loads((tmp_path / "w" / "validation.json").read_text())["verdict"]["failures"]
    kinds = {f.split("}: ")[1].split(" ")[0] for f in failures}
    assert {"output", "loss", "grads", "loss_after_step"} <= kinds, failures


def test_state_dict_key_mismatch_is_a_failure_listing_the_keys(tmp_path):
    plan, src = _case(tmp_path, "causal_bucket")
    loaded = load_plan(plan)
    ref = tmp_path / "ref"
    ref.mkdir()
    import sys

    sys.path.insert(0, str(src))
    sys.modules.pop("model", None)  # another test's fixture may have cached its own model.py
    try:
        from model import TinyLM  # the fixture's model

        torch.manual_seed(0)
        sd = TinyLM().state_dict()
    finally:
        sys.path.remove(str(src))
        sys.modules.pop("model", None)
    sd["head.weight_renamed"] = sd.pop("head.weight")
    torch.save(sd, ref / "state_dict.pt")
    job = {
        "harness": loaded.plan.harness.model_dump(),
        "trees": {"original": str(src), "rewritten": str(src)},
        "variants": ["plan"], "backend": "eager", "seed": 0, "ref": str(ref), "reference": False,
    }
    result = run_cold(job)
    sys.modules.pop("model", None)
    error = result["info"]["state_dict_error"]
    assert "missing ['head.weight_renamed']" in error and "unexpected ['head.weight']" in error


def _broken_tree(tmp_path: Path, harness_body: str) -> tuple[Path, Path]:
    plan, src = _case(tmp_path, "causal_bucket")
    (src / "harness.py").write_text(harness_body)
    return plan, src


def test_harness_error_exits_2_and_names_the_harness(tmp_path, capsys):
    plan, src = _broken_tree(tmp_path, "from model import TinyLM\n\n\ndef build_model():\n    raise RuntimeError('no weights')\n\n\ndef make_inputs(batch=2, seq=12):\n    pass\n")
    code, err = _validate(capsys, plan, src, tmp_path / "r", "--baselines", "")
    assert code == 2, err
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    (error,) = report["verdict"]["errors"]
    assert "harness.model: build_model() raised RuntimeError: no weights" in error and "harness.py:5" in error


def test_timeout_kills_the_child_and_exits_2(tmp_path, capsys):
    plan, src = _broken_tree(tmp_path, "import time\n\n\ndef build_model():\n    time.sleep(120)\n\n\ndef make_inputs(batch=2, seq=12):\n    pass\n")
    capsys.readouterr()
    import time

    t0 = time.perf_counter()
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(tmp_path / "r"), "--baselines", "",
                 "--timeout", "8", "--backend", "eager"])
    assert code == 2 and time.perf_counter() - t0 < 60
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    assert "timeout" in report["verdict"]["errors"][0] and "killed" in report["verdict"]["errors"][0]


def test_a_reference_that_hangs_in_its_build_times_out_once_under_overlap(tmp_path, capsys, overlap_on):
    """Review: with the overlap on, a reference stuck in its build was waited for twice
    (--timeout each: 20 minutes at the default on a GPU host) before the error."""
    plan, src = _broken_tree(tmp_path, "import time\n\n\ndef build_model():\n    time.sleep(120)\n\n\ndef make_inputs(batch=2, seq=12):\n    pass\n")
    import time

    t0 = time.perf_counter()
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(tmp_path / "r"), "--baselines", "",
                 "--timeout", "10", "--backend", "eager"])
    assert code == 2 and time.perf_counter() - t0 < 19  # one timeout (10 s) and start-up, not two


def test_plan_without_harness_is_an_input_error_writing_nothing(tmp_path, capsys):
    plan, src = _case(tmp_path, "causal_bucket")
    text = plan.read_text()
    plan.write_text(text[: text.index("harness:")] + text[text.index("amortization:"):])
    code, err = _validate(capsys, plan, src, tmp_path / "r")
    assert code == 2 and "validate needs a 'harness:' section" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_silent_fallback_to_eager_fails_with_the_guard_that_caused_it(tmp_path, capsys):
    plan, src = _case(tmp_path, "per_layer_guard")
    code, err = _validate(capsys, plan, src, tmp_path / "r", "--baselines", "")
    assert code == 1, err
    report = json.loads((tmp_path / "r" / "validation.json").read_text())
    fallback = [f for f in report["verdict"]["failures"] if f.startswith("silent fallback to eager")]
    assert len(fallback) == 1 and "recompile_limit" in fallback[0] and "b/model.py" in fallback[0]
    assert report["variants"]["plan"]["numerics"] == "ok"  # eager fallback is right, just not compiled
    assert report["variants"]["plan"]["compile"]["recompiles"] == 7
    assert any("self.index == " in r for r in report["variants"]["plan"]["compile"]["recompile_reasons"])
