"""The search when every compile is pruned (a GEMM-dominated model): only the program as it is is
measured, and nothing crashes. On a GPU host the eager reference's run overlaps the next variant's
cold phase; with no variant to follow it must still be recorded and timed (it was never recorded,
and the search died on ``KeyError: 'eager'``, H200)."""

from __future__ import annotations

import pytest

from rewriter.engine.measure import Measurement, measure

from rewriter.engine.options import Options, Variant


class FakeChild:
    """A served child that reports one shape's cold phase and times 10 ms calls."""

    log: list[tuple[str, str]] = []

    def __init__(self, job, workdir, name, caches, timeout_s):  # noqa: ANN001
        self.name, self.alive, self.started, self.built_at = name, True, 0.0, 0.0
        FakeChild.log.append(("spawn", name))

    def wait_built(self):
        return True

    def wait_weights_saved(self):
        return {}  # no device figures: room to overlap

    def go(self):
        FakeChild.log.append(("go", self.name))

    def wait_cold(self, until=None):
        from rewriter.engine.runner import ChildResult

        FakeChild.log.append(("cold", self.name))
        shape = {"shape": {"batch": 1}, "first_call_s": 0.02, "steady_s": 0.01, "compile_s": 0.0, "new_graphs": 0,
                 "new_recompiles": 0}
        return ChildResult(0, {"info": {}, "compile": {"unique_graphs": 0}, "shapes": [shape]}, 0.0, "")

    def time(self, shape, warmup, n, **kw):
        FakeChild.log.append(("time", self.name))
        return {"samples": [0.01] * n, "calls": 1}

    def terminate(self):
        self.alive = False

    def close(self):
        self.alive = False


@pytest.mark.parametrize("overlap", [True, False])
def test_only_the_program_as_it_is_is_measured_without_a_crash(monkeypatch, tmp_path, overlap):
    from rewriter.engine import measure as measure_mod

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", FakeChild)
    monkeypatch.setattr(measure_mod, "may_overlap", lambda allowed, device: overlap)  # a GPU host's schedule
    FakeChild.log = []
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    m = Measurement()
    measure(spec, [Variant("eager", tmp_path, judged=False)], Options(replicates=1, warmup=0, reps=3, budget_s=5.0),
            tmp_path, partial=m)
    assert not m.errors, m.errors
    assert m.results["eager"]["numerics"] == "reference"
    assert m.results["eager"]["step_ms"] == pytest.approx(10.0)
    assert ("cold", "cold-eager") in FakeChild.log and ("time", "cold-eager") in FakeChild.log
    assert not m.reference_overlapped  # nothing to overlap it with


WORKLOAD = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "varied_length_training"


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_varied_length_gemm_heavy_training_diagnoses_with_exit_0(tmp_path, monkeypatch):
    """fp32 training, batch 8, six lengths 517..2049, GEMM-heavy: the search prunes every compile
    and measures the program as it is; diagnose exits 0 and says why nothing is compiled.

    Without CUDA the op mix is self-CPU time, which swings with the machine's load (31% norm +
    elementwise on a loaded CI machine); the mix is held at 90% GEMM of the measured step, so
    this test is about what follows a GEMM-dominated verdict, not about this CPU's timings."""
    import json
    import shutil

    from rewriter.cli import main
    from rewriter.diagnose.rungs import op_mix

    measured_mix = op_mix.mix

    def gemm_heavy(ctx):  # noqa: ANN001, ANN202
        per, basis = measured_mix(ctx)
        total = sum(per.values())
        return {c: (0.9 if c == "gemm" else 0.1 if c == "elementwise" else 0.0) * total for c in per}, basis

    monkeypatch.setattr(op_mix, "mix", gemm_heavy)

    src = tmp_path / "src"
    shutil.copytree(WORKLOAD, src)
    shapes = [a for s in (517, 1024, 771, 2049, 1333, 640) for a in ("--shape", f"batch=8,seq={s}")]
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "out" / "plan.yaml"), "--device", "cpu",
               "--mode", "training", *shapes, "--steps", "2"])
    assert rc == 0
    report = json.loads((tmp_path / "out" / "stackpart-diagnose" / "report.json").read_text())
    by = {r["name"]: r for r in report["rungs"]}
    assert by["op_mix"]["verdict"].startswith("GEMM-dominated")
    assert by["memory"]["verdict"] == "skipped: no CUDA"
    search = by["search"]
    assert search["status"] == "ok", search
    assert any(p.startswith("every compile: GEMM-dominated") for p in search["measurement"]["pruned"])
