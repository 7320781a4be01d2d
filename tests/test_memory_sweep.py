"""The memory rung over the harness's shape sweep, on CPU (docs/decisions.md, "Memory rungs").

The verdict is a pure function of per-step figures (:func:`rewriter.diagnose.rungs.memory.sweep_verdict`),
tested on synthetic records; the sweep itself runs the real harness with an injected
``memory_stats`` (no CUDA allocator here); the rung on CPU says it is skipped; the allocator
candidate's two child processes run for real on CPU (the plumbing: which setting each arm saw),
and the search includes or leaves out the allocator from a faked rung result. No CPU timing is
asserted: where figures are compared, they are given.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.diagnose.rungs import memory
from rewriter.diagnose.context import Context
from rewriter.diagnose.rungs.memory import (
    GROWTH_MIB,
    action_env,
    allocator_effect,
    counters,
    sweep,
    sweep_order,
    sweep_verdict,
)
from rewriter.diagnose.rung import RungResult
from rewriter.diagnose.session import Session
from rewriter.harness import load_harness, resolve_device
from rewriter.plan import load_plan

WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
SHAPES = [{"seq": 384}, {"seq": 1024}, {"seq": 2048}]


def records(allocs: list[list[int]], ends: list[float] | None = None, retries: int = 0, reserved: float = 9000.0,
            peak_allocated: float = 8000.0) -> list[dict]:
    """Synthetic :func:`sweep` records: ``allocs[p][i]`` device allocations in step i of pass p
    (pass 0 is the warm pass), ``ends[p]`` reserved - allocated after pass p's last step (MiB)."""
    out = []
    for p, per_step in enumerate(allocs):
        for i, n in enumerate(per_step):
            last = i == len(per_step) - 1
            unalloc = (ends[p] if ends is not None and last else 100.0)
            out.append({"pass": p, "index": i, "shape": SHAPES[i % len(SHAPES)], "step_ms": 10.0,
                        "reserved_mib": reserved, "allocated_mib": reserved - unalloc, "unallocated_mib": unalloc,
                        "peak_reserved_mib": reserved, "peak_allocated_mib": peak_allocated, "inactive_split_mib": 0.0,
                        "device_allocs": n, "device_frees": n, "alloc_retries": retries if (p, i) == (2, 1) else 0, "ooms": 0,
                        "device_counter": "num_device_alloc"})
    return out


def test_a_converged_cache_is_no_fragmentation_however_much_it_holds():
    """Flat device allocations after the warm pass: no verdict, even with reserved far above the
    step's peak allocation (H200 run 3: 1664 MiB reserved for 928 allocated on a GEMM-bound MLP)."""
    v = sweep_verdict(records([[5, 3, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0]], ends=[700, 736, 736, 736],
                              reserved=1664.0, peak_allocated=928.0))
    assert v["fragmenting"] is False and v["rule"] is None
    assert v["steady_passes"] == [2, 3]
    assert "no fragmentation at steady state over 3 measured pass(es) of the 3-shape sweep (9 steps)" in v["reason"]
    assert "device allocations per steady pass [0, 0] (num_device_alloc)" in v["reason"]
    assert "up to 736 MiB beyond a step's peak allocation" in v["reason"]


def test_device_allocations_in_every_steady_pass_are_fragmentation():
    v = sweep_verdict(records([[5, 3, 2], [1, 0, 2], [0, 1, 1], [2, 0, 0]]))
    assert v["fragmenting"] is True and v["rule"] == "device_allocs"
    assert "[2, 2] device allocations and [2, 2] frees (num_device_alloc) in passes [2, 3]" in v["reason"]


def test_one_late_allocation_is_convergence_not_fragmentation():
    v = sweep_verdict(records([[5, 3, 2], [1, 0, 0], [0, 1, 0], [0, 0, 0]]))
    assert v["fragmenting"] is False
    assert "[1, 0]" in v["reason"]


def test_growing_reserved_but_unallocated_is_fragmentation_and_must_not_fall_between():
    grows = sweep_verdict(records([[5, 3, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0]], ends=[0, 100, 150, 100 + GROWTH_MIB + 64]))
    assert grows["fragmenting"] is True and grows["rule"] == "unallocated_growth"
    assert grows["unallocated_growth_mib"] == 128.0  # pass 1 (100) to pass 3 (228); the warm pass is not counted
    assert "grew 128 MiB" in grows["reason"] and "[100, 150, 228] MiB" in grows["reason"].replace(".0", "")
    wobbles = sweep_verdict(records([[5, 3, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0]], ends=[0, 100, 50, 100 + GROWTH_MIB + 64]))
    assert wobbles["fragmenting"] is False
    small = sweep_verdict(records([[5, 3, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0]], ends=[0, 100, 120, 100 + GROWTH_MIB - 1]))
    assert small["fragmenting"] is False


def test_retries_are_fragmentation_and_the_warm_pass_is_not_judged():
    v = sweep_verdict(records([[5, 3, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0]], retries=2))
    assert v["rule"] == "retries" and v["reason"].startswith("2 alloc retries, 0 OOMs in 3 measured pass(es)")
    warm_only = sweep_verdict(records([[9, 9, 9], [0, 0, 0], [0, 0, 0], [0, 0, 0]]))
    assert warm_only["fragmenting"] is False
    with pytest.raises(ValueError, match="no measured pass"):
        sweep_verdict(records([[1, 2, 3]]))


def test_device_counts_come_from_num_device_alloc_else_the_segment_counts():
    new = counters({"num_device_alloc": 7, "num_device_free": 2, "segment.all.allocated": 5, "segment.all.freed": 1,
                    "reserved_bytes.all.current": 3 * 2**20, "allocated_bytes.all.current": 2**20})
    assert (new["device_allocs"], new["device_frees"], new["device_counter"]) == (7, 2, "num_device_alloc")
    old = counters({"segment.all.allocated": 5, "segment.all.freed": 1})
    assert (old["device_allocs"], old["device_frees"], old["device_counter"]) == (5, 1, "segment.all.allocated")
    assert counters({})["device_counter"] is None


def test_the_sweep_runs_the_shapes_in_order_with_a_warm_pass():
    order = sweep_order(SHAPES, warm_passes=1, passes=3)
    assert [p for p, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert [s for _, s in order[:3]] == SHAPES and [s for _, s in order[-3:]] == SHAPES
    one = sweep_order([{"batch": 8}], warm_passes=1, passes=3, min_steps=3)
    assert len(one) == 12 and {p for p, _ in one[:3]} == {0}


def frag_session(tmp_path: Path) -> Session:
    src = tmp_path / "fragmentation"
    shutil.copytree(WORKLOADS / "fragmentation", src)
    spec = resolve_device(load_plan(src / "plan.yaml").plan.harness)
    return Session(load_harness(spec, src))


class FakeAllocator:
    """``memory_stats`` of an allocator that makes one device allocation in every step of shape
    ``steps=20`` and none otherwise (read twice per step: before and after)."""

    def __init__(self, session: Session) -> None:
        self.session, self.allocs, self.reads = session, 0, 0

    def __call__(self) -> dict:
        self.reads += 1
        return {"num_device_alloc": self.allocs, "num_device_free": 0, "reserved_bytes.all.current": 2**30,
                "allocated_bytes.all.current": 2**29}


def test_sweep_records_each_step_of_the_real_harness(tmp_path, monkeypatch):
    session = frag_session(tmp_path)
    fake = FakeAllocator(session)
    real_build = session.build

    def build(shape=None):  # an allocation happens in the steps at steps=20 (its inputs are built just before)
        out = real_build(shape)
        fake.allocs += 1 if shape and shape["steps"] == 20 else 0
        return out

    monkeypatch.setattr(session, "build", build)
    steps = sweep(session, stats=fake, reset_peaks=lambda: None)
    assert [s["shape"]["steps"] for s in steps] == [12, 16, 20] * 4
    assert [s["pass"] for s in steps] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    # the allocation counted between build and step is outside the step: the step's delta is 0
    assert all(s["device_allocs"] == 0 for s in steps) and fake.reads == 24
    assert steps[0]["reserved_mib"] == 1024.0 and steps[0]["unallocated_mib"] == 512.0
    assert all(s["step_ms"] > 0 for s in steps)


def test_the_rung_says_no_cuda_on_cpu(tmp_path):
    ctx = Context(session=frag_session(tmp_path), out_dir=tmp_path)
    r = memory.run(ctx)
    assert r.status == "skipped" and r.verdict == "skipped: no CUDA" and r.implies == "none"


def test_the_rung_on_cuda_reads_the_sweep(tmp_path, monkeypatch):
    """The rung's glue with the CUDA calls replaced: an allocator that allocates in every step of
    every pass gets the fragmentation verdict and the allocator implication."""
    import torch

    session = frag_session(tmp_path)
    monkeypatch.setattr(Session, "cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None)
    count = {"n": 0}

    def stats(*a, **k):
        count["n"] += 1  # two reads per step: +1 allocation inside every step
        return {"num_device_alloc": count["n"] // 2, "num_device_free": 0, "num_alloc_retries": 0,
                "reserved_bytes.all.current": 2**30, "allocated_bytes.all.current": 2**29,
                "reserved_bytes.all.peak": 2**30, "allocated_bytes.all.peak": 2**29}

    monkeypatch.setattr(torch.cuda, "memory_stats", stats)
    r = memory.run(Context(session=session, out_dir=tmp_path))
    assert r.ok and r.implies == memory.IMPLIES, r.verdict
    assert r.verdict.startswith("fragmenting: the allocator kept allocating device memory at steady state: [3, 3] device allocations")
    m = r.measurement
    assert m["source"] == "sweep" and m["rule"] == "device_allocs" and len(m["steps"]) == 12
    assert [p["device_allocs"] for p in m["passes"]] == [3, 3, 3]


ARM = {"error": None, "device": "cuda", "steady_device_allocs": 0}


@pytest.mark.parametrize("without, with_, keep, text", [
    (dict(ARM, step_ms_mean=130.0, peak_reserved_mib=30000.0, steady_device_allocs=14),
     dict(ARM, step_ms_mean=100.0, peak_reserved_mib=30000.0), True, "kept: faster beyond the 2% noise floor: steady mean step 130.00 ms without, 100.00 ms with"),
    (dict(ARM, step_ms_mean=100.0, peak_reserved_mib=30000.0), dict(ARM, step_ms_mean=101.0, peak_reserved_mib=25000.0),
     True, "kept: peak reserved 5000 MiB lower (>= 64) at a step time within the noise floor"),
    (dict(ARM, step_ms_mean=100.0, peak_reserved_mib=30000.0), dict(ARM, step_ms_mean=101.0, peak_reserved_mib=29990.0),
     False, "no gain: step time within the 2% noise floor and peak reserved +10 MiB lower (< 64)"),
    (dict(ARM, step_ms_mean=100.0, peak_reserved_mib=30000.0), dict(ARM, step_ms_mean=110.0, peak_reserved_mib=20000.0),
     False, "no gain: slower beyond the 2% noise floor"),
    (dict(ARM, error="rung memory (allocator candidate): ran out of memory"), dict(ARM, step_ms_mean=100.0, peak_reserved_mib=20000.0),
     True, "without expandable_segments:True the sweep failed"),
    (dict(ARM, device="cpu", step_ms_mean=100.0), dict(ARM, device="cpu", step_ms_mean=50.0),
     None, "not judged: measured on cpu"),
])
def test_the_allocator_candidate_is_kept_only_on_a_measured_gain(without, with_, keep, text):
    effect = allocator_effect(without, with_)
    assert effect["keep"] is keep and text in effect["text"], effect


def test_the_action_environment_is_setdefault_and_torch_reads_pytorch_alloc_conf_first():
    env, nothing = action_env({"HOME": "/h"})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True" and nothing is None
    assert "setdefault keeps it" in action_env({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})[1]
    assert "torch >= 2.9 reads it" in action_env({"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"})[1]
    assert "already set" in action_env({"PYTORCH_ALLOC_CONF": "expandable_segments:True"})[1]


def test_measure_allocator_runs_each_arm_in_its_own_process_with_its_setting(tmp_path, monkeypatch):
    session = frag_session(tmp_path)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    out = memory.measure_allocator(session.spec, session.src, timeout_s=120, passes=2, keep_steps=True)
    assert out["without"]["error"] is None and out["with"]["error"] is None, out
    assert out["without"]["alloc_conf"] == {}
    assert out["with"]["alloc_conf"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert [s["pass"] for s in out["with"]["steps"]] == [0] * 3 + [1] * 3 + [2] * 3
    assert out["effect"]["keep"] is None and "not judged: measured on cpu" in out["effect"]["text"]
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert memory.measure_allocator(session.spec, session.src)["skipped"].startswith("the allocator action would change nothing")


def test_each_arms_child_gets_every_childs_environment_over_its_setting(tmp_path, monkeypatch):
    """The memory child's environment is rewriter.engine.runner.child_env over the arm's: its
    allocator setting, a CPU thread count, stackpart importable first, no bytecode, no TORCH_LOGS,
    compile caches of its own (the arms do not share them)."""
    import json
    import os
    import subprocess
    from types import SimpleNamespace

    seen: dict[str, dict] = {}

    def fake_run(cmd, env, **kw):
        job = json.loads(Path(cmd[-1]).read_text())
        seen[Path(cmd[-1]).name.split(".")[0]] = env
        Path(job["out"]).write_text(json.dumps({"steps": []}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(memory.subprocess, "run", fake_run)
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    monkeypatch.setenv("PYTHONPATH", "/user/path")
    spec = SimpleNamespace(device="cpu", shapes=[{"batch": 2}], model_dump=lambda mode: {"device": "cpu"})
    memory.measure_allocator(spec, tmp_path)
    assert set(seen) == {"without", "with"}
    assert "PYTORCH_CUDA_ALLOC_CONF" not in seen["without"]
    assert seen["with"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    for arm, env in seen.items():
        assert env["OMP_NUM_THREADS"].isdigit(), env  # CPU: the thread rule's count
        paths = env["PYTHONPATH"].split(os.pathsep)
        assert paths[0].endswith("_stackpart_path") and paths[1:] == ["/user/path"], paths
        assert env["PYTHONDONTWRITEBYTECODE"] == "1" and "TORCH_LOGS" not in env
        assert Path(env["TORCHINDUCTOR_CACHE_DIR"]).parent.name == f"{arm}.caches"
    assert seen["with"]["TRITON_CACHE_DIR"] != seen["without"]["TRITON_CACHE_DIR"]


def test_measure_allocator_reports_a_child_that_fails(tmp_path, monkeypatch):
    session = frag_session(tmp_path)
    (session.src / "harness.py").write_text("def build_model():\n    raise RuntimeError('no model today')\n\ndef make_inputs(batch=8, steps=12):\n    return ()\n")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    out = memory.measure_allocator(session.spec, session.src, timeout_s=120)
    assert "no model today" in out["without"]["error"] and "no model today" in out["with"]["error"]
    assert out["effect"]["keep"] is None


def search_ctx(tmp_path: Path, verdict: RungResult | None) -> Context:
    ctx = Context(session=frag_session(tmp_path), out_dir=tmp_path, backend="eager", entry="train.py::main")
    if verdict is not None:
        ctx.results["memory"] = verdict
    return ctx


FRAG = RungResult("memory", memory.TITLE, verdict="fragmenting: the allocator kept allocating device memory at steady state: [2, 2]",
                  implies=memory.IMPLIES, measurement={"source": "sweep"})


@pytest.mark.parametrize("verdict, wanted", [(FRAG, True), (RungResult("memory", memory.TITLE, verdict="no fragmentation"), False),
                                             (RungResult("memory", memory.TITLE).skip("no CUDA"), False), (None, False)])
def test_the_search_measures_the_allocator_only_on_a_fragmentation_verdict(tmp_path, monkeypatch, verdict, wanted):
    from rewriter.diagnose import search

    calls = []

    def fake(spec, src, **kw):
        calls.append(spec.file)
        return {"without": {}, "with": {}, "effect": {"keep": True, "text": "kept: faster beyond the 2% noise floor: 130 vs 100 ms"}}

    monkeypatch.setattr(memory, "measure_allocator", fake)
    ctx = search_ctx(tmp_path, verdict)
    out = search.SearchOutcome([])
    said = []
    search.measure_allocator_candidate(ctx, out, 60.0, said.append)
    assert bool(calls) is wanted
    assert (out.allocator is not None) is wanted
    if wanted:
        assert out.allocator["evidence"] == FRAG.verdict
        assert "allocator candidate: kept: faster beyond the 2% noise floor: 130 vs 100 ms" in out.notes
        assert said[-1] == "allocator: kept: faster beyond the 2% noise floor: 130 vs 100 ms"
    # the engine never times an allocator-only tree: the harness does not run the entry it rewrites
    from rewriter.diagnose.candidates import propose

    cands, _ = propose(ctx)
    assert "allocator" not in [c.name for c in cands]


def test_an_allocator_kept_without_an_entry_says_it_is_not_planned_and_how_to_plan_it(tmp_path, monkeypatch):
    """The sweep measured the allocator better but no --entry was given: the plan cannot carry the
    action (the harness is not the program), and the note says so instead of a bare "kept"."""
    from rewriter.diagnose import search

    monkeypatch.setattr(memory, "measure_allocator", lambda spec, src, **kw: {
        "without": {}, "with": {}, "effect": {"keep": True, "text": "kept: peak reserved 2654 MiB lower"}})
    ctx = search_ctx(tmp_path, FRAG)
    ctx.entry = None
    out = search.SearchOutcome([])
    search.measure_allocator_candidate(ctx, out, 60.0, lambda _: None)
    note = next(n for n in out.notes if n.startswith("allocator candidate: kept"))
    assert "not planned" in note and "--entry file.py::func" in note


@pytest.mark.parametrize("keep, evidence, kept", [
    (True, FRAG.verdict, True), (False, FRAG.verdict, False), (None, FRAG.verdict, True),
    (False, "fragmenting: out of memory in rung recompiles: asked for 448 MiB", True),
])
def test_the_plan_keeps_the_allocator_as_its_measurement_says(tmp_path, keep, evidence, kept):
    from rewriter.diagnose.candidates import Candidate
    from rewriter.diagnose.decide import Choice
    from rewriter.diagnose.planner import plan
    from rewriter.diagnose.search import SearchOutcome, annotated

    ctx = search_ctx(tmp_path, RungResult("memory", memory.TITLE, verdict=evidence, implies=memory.IMPLIES))
    rule = plan(ctx, "none")
    assert [a.action for a in rule.plan.actions] == ["allocator"]
    asis = Candidate("as-is", rule.plan.model_copy(update={"actions": []}))
    out = SearchOutcome([Candidate("rule", rule.plan, rule=True), asis], choice=Choice("as-is", "the program as it is"))
    out.allocator = {"evidence": evidence, "effect": {"keep": keep, "text": f"keep={keep}: 130 vs 100 ms"}}
    actions = annotated(out).actions
    assert bool(actions) is kept
    if kept:
        [a] = actions
        assert a.target == "train.py::main" and f"search: keep={keep}: 130 vs 100 ms" in a.why and evidence in a.why


def test_report_md_shows_the_sweep_per_pass_and_the_allocator_arms():
    from rewriter.diagnose.rungs.memory import per_pass
    from rewriter.diagnose.report import memory_markdown

    steps = records([[5, 3, 2], [1, 0, 2], [0, 1, 1], [2, 0, 0]])
    mem = RungResult("memory", memory.TITLE, measurement={"passes": per_pass(steps)[1:], "device_counter": "num_device_alloc"})
    arm = {"error": None, "step_ms_mean": 130.0, "peak_reserved_mib": 30000.0, "steady_device_allocs": 4, "alloc_retries": 0}
    search = RungResult("search", "s", measurement={"allocator": {
        "protocol": "the sweep, one fresh process per arm", "without": arm,
        "with": dict(arm, step_ms_mean=100.0, steady_device_allocs=0), "effect": {"text": "kept: faster beyond the 2% noise floor"}}})
    text = "\n".join(memory_markdown(mem, search))
    assert "## Memory over the shape sweep (num_device_alloc)" in text
    assert "| 2 | 3 | 2 | 2 | 0 | 9000 | 100 | 9000 | 10.00 |" in text
    assert "| with expandable_segments | 100.0 | 30000.0 | 0 | 0 |  |" in text and "kept: faster beyond the 2% noise floor" in text
    assert memory_markdown(None, None) == []
