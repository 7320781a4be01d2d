"""``stackpart diagnose --nproc 2`` and ``stackpart validate --nproc 2`` as a user runs them:
exit codes, the plan written (it loads, its entries are advisory ``distributed`` actions with
evidence), the reports, and usage errors that launch nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "distributed"


@pytest.mark.slow
def test_diagnose_nproc_writes_a_plan_with_distributed_entries(tmp_path: Path, capsys, monkeypatch) -> None:
    """The CLI's plumbing from a collective-bound verdict to advisory plan entries. The verdict's
    bar is held at 5% exposed communication (25% by default): on this shared 2-core host the
    fixture's exposed share moved under 25% with the CPU's load once (CI failed on it, the verdict
    "not collective-bound"); its all-reduce is far above 5% whatever the load."""
    from rewriter.distributed import launch

    merge = launch.merge
    monkeypatch.setattr(launch, "merge", lambda *a, **k: merge(*a, **{**k, "collective_bound_share": 0.05}))
    case = FIXTURES / "allreduce_bound"
    code = main(["diagnose", "--harness", str(case / "plan.yaml"), str(case / "before"),
                 "-o", str(tmp_path / "plan.yaml"), "--nproc", "2", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert ": collective-bound: exposed communication" in err and "all_reduce" in err, err
    loaded = load_plan(tmp_path / "plan.yaml")
    assert loaded.plan.harness is not None and loaded.plan.harness.mode == "training"
    assert loaded.plan.actions and all(a.action == "distributed" for a in loaded.plan.actions)
    assert all(a.why and "all_reduce is" in a.why for a in loaded.plan.actions)
    report = tmp_path / "stackpart-diagnose" / "distributed"
    assert json.loads((report / "findings.json").read_text())["verdict"] == "collective-bound"
    assert (report / "rank0.trace.json").is_file() and (report / "rank1.trace.json").is_file()


@pytest.mark.slow
def test_validate_nproc_runs_original_and_plan_settings(tmp_path: Path, capsys) -> None:
    shutil.copytree(FIXTURES / "ddp" / "before", tmp_path / "src")
    shutil.copy(FIXTURES / "ddp" / "plan.yaml", tmp_path / "plan.yaml")
    code = main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path / "src"), "--nproc", "2",
                 "--out", str(tmp_path / "val")])
    err = capsys.readouterr().err
    assert code == 0, err  # CPU: speed reported, not gated (as single-process validate on CPU)
    data = json.loads((tmp_path / "val" / "validation-distributed.json").read_text())
    assert data["settings_run"] == {"bucket_cap_mb": 4} and data["speed_gated"] is False
    assert data["original"]["step_s"] > 0 and data["plan_run"]["step_s"] > 0
    steps = json.loads((tmp_path / "val" / "plan" / "rank0.steps.json").read_text())
    assert steps["settings"] == {"bucket_cap_mb": 4}  # the plan's setting is what ran
    assert json.loads((tmp_path / "val" / "original" / "rank0.steps.json").read_text())["settings"] == {}


def test_wrap_without_nproc_is_a_usage_error(tmp_path: Path, capsys) -> None:
    case = FIXTURES / "ddp"
    code = main(["diagnose", "--harness", str(case / "plan.yaml"), str(case / "before"),
                 "-o", str(tmp_path / "plan.yaml"), "--wrap", "fsdp2"])
    assert code == 2 and "--wrap needs --nproc" in capsys.readouterr().err
    assert not (tmp_path / "plan.yaml").exists()


def test_nproc_with_missing_harness_exits_2_before_launching(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    src.mkdir()
    code = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "plan.yaml"),
                 "--nproc", "2", "--device", "cpu", "--mode", "training"])
    assert code == 2 and "harness file not found" in capsys.readouterr().err
    assert not (tmp_path / "plan.yaml").exists()


def test_without_a_shape_the_plan_states_the_inputs_defaults(tmp_path: Path, capsys, monkeypatch) -> None:
    """With no --shape and no harness.shapes, the plan ``diagnose --nproc`` writes states the shape
    the ranks ran, ``make_inputs()``'s own int defaults, as single-process diagnose's plan does
    (it wrote ``shapes: [{}]``). The torchrun launch is replaced: the plan is the subject."""
    from types import SimpleNamespace

    from rewriter.distributed import command

    ran = []

    def fake_run(spec, src, nproc, out_dir, **kw):
        ran.append(spec)
        return SimpleNamespace(nproc=nproc, backend="gloo", wrap="ddp", verdict="not collective-bound",
                               exposed_share=0.0, thresholds={"collective_bound_share": 0.25}, dominant=None,
                               stragglers=[], host_stalls=[], suggestions=[], notes=[])

    monkeypatch.setattr(command, "run_distributed", fake_run)
    code = main(["diagnose", "--harness", "harness.py", str(FIXTURES / "ddp" / "before"), "-o", str(tmp_path / "plan.yaml"),
                 "--nproc", "2", "--device", "cpu", "--mode", "training"])
    err = capsys.readouterr().err
    assert code == 0, err
    defaults = {"batch": 4, "seq": 32, "vocab": 256}
    assert "diagnose: no --shape given: make_inputs()'s own defaults, batch=4,seq=32,vocab=256 (" in err, err
    assert [s.shapes for s in ran] == [[defaults]]
    loaded = load_plan(tmp_path / "plan.yaml")
    assert loaded.plan.harness is not None and loaded.plan.harness.shapes == [defaults]
