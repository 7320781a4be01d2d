"""The engine's timing protocol: blocked (back-to-back) samples, core pinning, and second timed
processes that skip the judging their first process did (docs/decisions.md, "Blocked timing on
CUDA", "Pinning the timed processes to the median core", "Two processes per variant")."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from rewriter.engine.cores import core_speeds, pin_plan
from rewriter.engine.options import Options
from rewriter.engine.replicas import REPLICA
from rewriter.engine.windows import interleave
from rewriter.engine.timing import burst_calls, time_burst

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_burst_calls_sizes_a_block_to_the_requested_milliseconds():
    assert burst_calls(0.013, 20.0) == 2  # a 13 ms step: two calls make >= 20 ms
    assert burst_calls(0.002, 20.0) == 10
    assert burst_calls(0.0001, 20.0) == 16  # capped
    assert burst_calls(0.050, 20.0) == 1
    assert burst_calls(0.013, 0.0) == 1  # off: one call per sample


def test_a_burst_sample_is_the_per_call_time_after_one_untimed_lead_in_call():
    calls = []

    def fn():
        calls.append(1)

    per_call = time_burst(fn, "cpu", 4)
    assert len(calls) == 5  # the lead-in, then the four timed calls
    assert per_call >= 0


def test_pin_plan_gives_distinct_top_cores_and_leaves_two_for_the_parent():
    plan = pin_plan(["eager", "whole", "whole#2"], list(range(8)), "own")
    assert plan == {"eager": 7, "whole": 6, "whole#2": 5}
    assert len(set(plan.values())) == 3 and not {0, 1} & set(plan.values())
    assert pin_plan(["a", "b", "c"], [0, 1, 2, 3], "own") == {}  # 3 processes need 5 cores: none pinned
    assert pin_plan(["a", "b", "c"], [0, 1, 2, 3], "shared") == {"a": 3, "b": 3, "c": 3}
    assert pin_plan(["a", "b"], [0, 1], "shared") == {} and pin_plan(["a"], list(range(8)), "off") == {}
    # fastest: the fastest core measured (never one of the lowest two), the highest on a tie
    speeds = {2: 3e-4, 3: 1e-4, 4: 1e-4, 5: 5e-4}
    assert pin_plan(["a", "b"], [0, 1, 2, 3, 4, 5], "fastest", speeds) == {"a": 4, "b": 4}
    assert pin_plan(["a"], [0, 1, 2, 3], "fastest", {0: 1e-9, 3: 1e-3}) == {"a": 3}
    assert pin_plan(["a"], [0, 1, 2, 3], "fastest") == {"a": 3}  # no speeds: the highest core
    # shared: the core of median speed (a typical core; the faster of the middle two for an even
    # count), so neither the fastest core nor a busy one sets the host-bound plans' figures
    assert pin_plan(["a", "b"], [0, 1, 2, 3, 4, 5], "shared", speeds) == {"a": 3, "b": 3}  # order 4, 3, 2, 5
    odd = {2: 9e-4, 3: 1e-4, 4: 5e-4, 5: 7e-4, 6: 3e-4}
    assert pin_plan(["a"], list(range(7)), "shared", odd) == {"a": 4}  # 1, 3, 5, 7, 9 e-4: the median, 5e-4
    assert pin_plan(["a"], list(range(7)), "fastest", odd) == {"a": 3}
    assert pin_plan(["a"], [0, 1, 2, 3], "shared", {0: 1e-9, 3: 1e-3}) == {"a": 3}  # core 0 is the parent's


def test_core_speeds_times_each_core_and_restores_the_affinity():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity")
    before = os.sched_getaffinity(0)
    speeds = core_speeds(sorted(before))
    assert set(speeds) == before and all(s > 0 for s in speeds.values())
    assert os.sched_getaffinity(0) == before


class _Child:
    def __init__(self, ms: float, pins: bool = True):
        self.ms, self.requests, self.pins = ms, [], pins

    def time(self, shape, warmup, n, **kw):
        self.requests.append((shape, warmup, n, kw))
        return {"samples": [self.ms / 1e3] * n, "calls": 3 if kw.get("burst_ms") else 1,
                "pinned": kw.get("pin") if self.pins else None}

    def terminate(self):
        pass


def test_on_cuda_every_sample_is_a_block_and_each_process_is_pinned_once(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    kids = {"eager": _Child(20.0), "whole": _Child(10.0), "whole" + REPLICA: _Child(9.0)}
    notes: list[str] = []
    timed = interleave(kids, [{"batch": 1}, {"batch": 2}], Options(warmup=1, reps=4, budget_s=10.0, pin="own"),
                                   notes=notes, device="cuda")
    rows, _raw, error = timed.rows, timed.samples, timed.error
    assert error is None
    for name, kid in kids.items():
        assert all(kw.get("burst_ms") == 20.0 for *_x, kw in kid.requests), kid.requests
        pins = [kw["pin"] for *_x, kw in kid.requests if "pin" in kw]
        assert len(pins) == 1 and kid.requests[0][3]["pin"] == pins[0]  # once, with the first warm-up
    assert len({kid.requests[0][3]["pin"] for kid in kids.values()}) == 3
    assert rows[0]["timing"]["whole"]["calls_per_sample"] == 3
    assert any("pinned to its own CPU core (3 processes)" in n for n in notes), notes
    assert any("back-to-back block of about 20 ms" in n for n in notes), notes


def test_on_cpu_a_sample_is_one_isolated_call_and_nothing_is_pinned():
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    notes: list[str] = []
    timed = interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3, budget_s=10.0), notes=notes)
    rows, _raw, error = timed.rows, timed.samples, timed.error
    assert error is None and notes == []
    assert all(kw == {} for kid in kids.values() for *_x, kw in kid.requests)
    assert "calls_per_sample" not in rows[0]["timing"]["whole"]


def test_pinning_off_or_too_few_cores_is_said(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    notes: list[str] = []
    interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3, pin="own"), notes=notes, device="cuda")
    assert any("not pinned to cores: 2 processes need 4 cores, 3 available" in n for n in notes), notes
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    notes = []
    interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3), notes=notes, device="cuda")  # the default: one shared core
    assert [kw["pin"] for kid in kids.values() for *_x, kw in kid.requests if "pin" in kw] == [2, 2]
    assert any("all pinned to CPU core 2" in n and "(2 processes" in n for n in notes), notes
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    notes = []
    interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3, pin="off", burst_ms=0), notes=notes, device="cuda")
    assert notes == [] and all(kw == {} for kid in kids.values() for *_x, kw in kid.requests)


class _Channel:
    def __init__(self, requests):
        self.requests, self.sent = list(requests), []

    def send(self, message):
        self.sent.append(message)

    def receive(self):
        return self.requests.pop(0) if self.requests else None


def test_serve_times_blocks_sized_once_per_shape_and_pins_the_main_thread(tmp_path):
    import torch

    from rewriter.engine.child import serve

    ref = tmp_path / "ref"
    ref.mkdir()
    torch.save((torch.randn(2, 4),), ref / "inputs_0.pt")
    model = torch.nn.Linear(4, 4)
    forwards = []
    model.register_forward_hook(lambda *a: forwards.append(1))
    job = {"ref": str(ref), "harness": {"device": "cpu", "mode": "inference"}}
    has_affinity = hasattr(os, "sched_getaffinity")
    before = os.sched_getaffinity(0) if has_affinity else None
    core = min(before) if before else None
    channel = _Channel([
        {"op": "time", "shape": 0, "warmup": 2, "n": 0, "burst_ms": 1e6, "pin": core},
        {"op": "time", "shape": 0, "warmup": 0, "n": 2, "burst_ms": 1e6},
        {"op": "time", "shape": 0, "warmup": 0, "n": 1},
    ])
    try:
        serve(job, channel, model)
        pinned_to = os.sched_getaffinity(0) if has_affinity else None
    finally:
        if before:
            os.sched_setaffinity(0, before)
    ready, sizing, blocks, single = channel.sent
    assert ready == {"ready": True}
    assert sizing["samples"] == [] and sizing["calls"] == 16
    assert len(blocks["samples"]) == 2 and blocks["calls"] == 16
    assert len(single["samples"]) == 1
    # 2 warm-up + 1 sizing call; 2 blocks of (1 lead-in + 16); 1 isolated call
    assert len(forwards) == 2 + 1 + 2 * 17 + 1
    if has_affinity:
        assert sizing["pinned"] == core and pinned_to == {core}


@pytest.mark.slow
def test_a_second_timed_process_records_and_compares_no_outputs(tmp_path):
    """A replica (engine.replicas.Replicas) is timed only: its first process was judged, so it
    saves, loads and compares no outputs and runs neither the block share nor fail_on_recompile."""
    from rewriter.engine.child import run_cold
    from rewriter.plan import load_plan

    shutil.copytree(FIXTURES / "validate" / "causal_bucket", tmp_path / "case")
    plan = load_plan(tmp_path / "case" / "plan.yaml").plan
    src = tmp_path / "case" / "src"
    ref = tmp_path / "ref"
    ref.mkdir()
    base = {"harness": plan.harness.model_dump(), "tree": str(src), "backend": "eager", "seed": 0, "ref": str(ref)}
    import sys

    try:
        reference = run_cold(dict(base, variants=["eager"], reference=True))
        judged = run_cold(dict(base, variants=["whole"], prepare="whole", reference=False))
        replica = run_cold(dict(base, variants=["whole"], prepare="whole", reference=False, replica=True))
        eager_replica = run_cold(dict(base, variants=["eager"], reference=False, replica=True))
    finally:
        sys.modules.pop("model", None)
        sys.modules.pop("harness", None)
    assert "block_share" in reference and "block_share" not in eager_replica
    assert all("compare" in e for e in judged["shapes"]), judged["shapes"]
    assert replica["shapes"] and not any("compare" in e for e in replica["shapes"])
    assert len(replica["shapes"]) == len(plan.harness.shapes)
    if judged["fail_on_recompile"]["supported"]:
        assert "ok" in judged["fail_on_recompile"] and "ok" not in replica["fail_on_recompile"]


class _Replica:
    """A stand-in for runner.ServedChild: records what the engine asks of it."""

    made: list = []

    def __init__(self, job, workdir, name, cache_root, timeout_s):
        self.job, self.name, self.cache_root, self.alive, self.terminated = job, name, cache_root, True, False
        self.go_at = None
        _Replica.made.append(self)

    def go(self):
        self.go_at = 1.0

    slow: set = set()  # variants whose second process is not up before any deadline

    def wait_cold(self, until=None):
        from rewriter.engine.runner import ChildResult

        self.until = until
        if self.job["variants"][0] in _Replica.slow and until is not None:
            self.alive = False
            return ChildResult(-1, {"error": {"kind": "budget", "message": "ran out"}}, 30.0, "")
        fail = self.job["variants"][0] == "broken"
        payload = {"error": {"kind": "oom", "message": "CUDA out of memory"}} if fail else {}
        return ChildResult(0, payload, 0.0, "")

    def terminate(self):
        self.terminated = True
        self.alive = False


def _replicas(monkeypatch, names, deadline=None, caches=Path("/c"), **opts):
    from rewriter.engine.measure import Measurement
    from rewriter.engine.options import Variant
    from rewriter.engine.replicas import Replicas

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Replica)
    _Replica.made = []
    m = Measurement()
    variants = [Variant(n, Path("/tree")) for n in names]
    spec = type("Spec", (), {"device": "cpu"})()
    children: dict = {}
    reps = Replicas(m, spec, variants, {"harness": {}}, Path("/w"), caches, Options(replicates=2, **opts), children, deadline, None)
    return m, reps, children


def test_a_reautotune_replica_compiles_from_a_copy_of_its_variants_caches_without_the_autotune_winners(monkeypatch, tmp_path):
    """H200 runs 32-34: a candidate's two processes agreed within 2% while the candidate moved
    10.8-13.4 ms between runs, because the second process loaded every decision of the first's
    compile, Inductor's stored autotuning winners included. With ``replica_caches="reautotune"``
    the replica gets its own cache directory, filled at its ``go`` (the variant's cold phase is
    over: its caches are complete) with everything but ``*.best_config``, and the child is told
    to benchmark the configs again; the variant's own caches are untouched."""
    own = tmp_path / "c" / "whole" / "inductor" / "ab"
    own.mkdir(parents=True)
    (own / "kernel.py").write_text("triton kernel")
    (own / "kernel.best_config").write_text('{"XBLOCK": 64}')
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole"], caches=tmp_path / "c", replica_caches="reautotune")
    m.results.update(eager={"problems": []}, whole={"problems": []})
    reps.spawn()
    by = {r.job["variants"][0]: r for r in _Replica.made}
    assert by["whole"].job["reautotune"] and by["whole"].cache_root == tmp_path / "c" / "whole.replica"
    assert by["whole"].go_at is None and not by["whole"].cache_root.exists()  # filled only at its go
    reps.started("whole")
    copied = by["whole"].cache_root / "inductor" / "ab"
    assert by["whole"].go_at and (copied / "kernel.py").read_text() == "triton kernel"
    assert not (copied / "kernel.best_config").exists() and (own / "kernel.best_config").exists()
    reps.collect(["eager", "whole"])
    assert any("autotuning run again" in n for n in m.notes), m.notes
    # reautotune is the default; warm shares the variant's own caches
    assert Options().replica_caches == "reautotune"
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole"], caches=tmp_path / "d", replica_caches="warm")
    reps.spawn(), reps.started("whole")
    assert _Replica.made[1].cache_root == tmp_path / "d" / "whole" and not _Replica.made[1].job["reautotune"]
    with pytest.raises(ValueError, match="expected one of warm, reautotune"):
        _replicas(monkeypatch, ["eager", "whole"], replica_caches="fresh")


def test_autotune_again_turns_off_the_local_autotune_cache():
    """Through Inductor's own ``config.patch`` (restored on exit): a monkeypatch of this config
    module deletes the option on undo, which broke every later Inductor compile in the process
    (CI, torch 2.13: "torch._inductor.config.autotune_local_cache does not exist")."""
    import torch._inductor.config as inductor_config

    from rewriter.engine.build import autotune_again

    before = inductor_config.autotune_local_cache
    with inductor_config.patch(autotune_local_cache=True):
        autotune_again()
        assert inductor_config.autotune_local_cache is False
    assert inductor_config.autotune_local_cache == before


def test_second_processes_spawn_after_the_first_compiled_cold_phase_and_go_once_their_variant_is_recorded(monkeypatch):
    m, reps, children = _replicas(monkeypatch, ["eager", "whole", "per-block", "broken"])
    reps.started("eager")  # the reference's cold phase: nothing spawned yet
    assert _Replica.made == []
    m.results["whole"] = {"problems": []}
    reps.started("whole")
    reps.spawn()  # after the first compiled variant: one replica per variant not failed so far
    by = {r.job["variants"][0]: r for r in _Replica.made}
    assert set(by) == {"eager", "whole", "per-block", "broken"} and set(children) == {n + REPLICA for n in by}
    assert all(r.job["replica"] and not r.job["reference"] for r in by.values())
    assert by["eager"].go_at and by["whole"].go_at and by["per-block"].go_at is None  # per-block's caches are not written yet
    reps.spawn()
    assert len(_Replica.made) == 4  # once
    reps.started("per-block")
    assert by["per-block"].go_at
    # 'broken' failed its cold phase (not timeable): its replica never got a go and is ended
    out = reps.collect(["eager", "whole", "per-block"])
    assert set(out) == {"eager" + REPLICA, "whole" + REPLICA, "per-block" + REPLICA}
    assert by["broken"].terminated and by["broken"].go_at is None
    assert any("timed in two processes each (3 of 3 variants" in n for n in m.notes), m.notes


def test_a_replica_that_fails_is_a_note_and_a_spent_budget_ends_them_all(monkeypatch):
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole", "broken"])
    reps.spawn()
    out = reps.collect(["eager", "whole", "broken"])
    assert set(out) == {"eager" + REPLICA, "whole" + REPLICA}
    assert any("no second process for broken (oom: CUDA out of memory)" in n for n in m.notes), m.notes
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole"], deadline=0.0)
    reps.spawn()
    assert _Replica.made == [] and any("budget was spent before second processes could start" in n for n in m.notes)


def test_second_processes_that_do_not_fit_beside_the_pending_cold_phases_wait_for_room(monkeypatch):
    """H200 run 27: spawned after the first compiled cold phase, the replicas did not fit beside
    the memory kept for the three cold phases still to run, and no variant got a second process.
    The spawn is deferred and tried again after each cold phase, and once more when they are over."""
    from rewriter.engine import replicas as replicas_mod

    room = {"free": False}
    monkeypatch.setattr(replicas_mod, "replica_room", lambda results, names, device, processes=None: None if room["free"] or all(
        n in results for n in names) else "no room beside the pending cold phases")
    m, reps, children = _replicas(monkeypatch, ["eager", "whole", "per-block"])
    m.results.update(eager={"problems": []}, whole={"problems": []})
    reps.started("eager"), reps.started("whole")
    reps.spawn()  # per-block's cold phase is still to run: deferred, not given up
    assert _Replica.made == [] and not any("no room" in n for n in m.notes), m.notes
    m.results["per-block"] = {"problems": []}
    reps.started("per-block")
    out = reps.collect(["eager", "whole", "per-block"])  # the last try, with every cold phase over
    assert set(out) == {n + REPLICA for n in ("eager", "whole", "per-block")}
    assert all(r.go_at for r in _Replica.made)
    assert any(n.startswith("second processes started after the cold phases") for n in m.notes), m.notes
    # room that never comes is said once, and every variant keeps its one process
    monkeypatch.setattr(replicas_mod, "replica_room", lambda results, names, device, processes=None: "needs 90 GiB, 20 free")
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole", "per-block"])
    m.results.update(eager={"problems": []}, whole={"problems": []})
    reps.spawn()
    assert _Replica.made == [] and m.notes == []
    m.results["per-block"] = {"problems": []}
    assert reps.collect(["eager", "whole", "per-block"]) == {} and m.notes == ["needs 90 GiB, 20 free"]


def test_a_deferred_spawn_makes_no_replica_for_a_variant_that_failed_meanwhile_nor_after_the_deadline(monkeypatch):
    """While the spawn waits for room, a variant whose cold phase then fails (or has a problem) is
    ended: the spawn that finally fits makes replicas for the others only; and a deadline passed
    while waiting makes none, said once."""
    from rewriter.engine import replicas as replicas_mod

    monkeypatch.setattr(replicas_mod, "replica_room", lambda results, names, device, processes=None: None if all(
        n in results for n in names) else "no room beside the pending cold phases")
    m, reps, children = _replicas(monkeypatch, ["eager", "whole", "per-block", "nested"])
    m.results.update(eager={"problems": []}, whole={"problems": []})
    reps.started("eager"), reps.started("whole")
    reps.spawn()
    assert _Replica.made == []
    m.results["per-block"] = {"problems": ["the rewritten model raised: boom"]}
    reps.end("per-block")
    reps.spawn()  # nested's cold phase is still to run: still deferred
    assert _Replica.made == []
    m.results["nested"] = {"problems": []}
    reps.started("nested")
    reps.spawn()  # every cold phase over: fits now
    assert sorted(r.job["variants"][0] for r in _Replica.made) == ["eager", "nested", "whole"]
    out = reps.collect(["eager", "whole", "nested"])
    assert set(out) == {n + REPLICA for n in ("eager", "whole", "nested")}
    assert sum("second processes started" in n for n in m.notes) == 1, m.notes
    # the deadline passes while the spawn waits: no replica at collect, one note
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole", "per-block"], deadline=float("inf"))
    m.results.update(eager={"problems": []}, whole={"problems": []})
    reps.spawn()
    assert _Replica.made == [] and m.notes == []
    reps.deadline = 0.0
    m.results["per-block"] = {"skipped": "not measured: the search budget was spent before its cold phase", "problems": []}
    reps.end("per-block")
    assert reps.collect(["eager", "whole"]) == {} and _Replica.made == []
    assert m.notes == ["one process per variant timed: the search budget was spent before second processes could start"], m.notes


class _Served:
    """A stand-in for runner.ServedChild through a whole :func:`measure` run: each variant's
    behaviour comes from ``_Served.script`` (``"fail"``: its cold phase raises; ``"interrupt"``:
    Ctrl-C lands while its cold phase is awaited), and every call is logged in order."""

    log: list = []
    script: dict = {}
    made: list = []

    def __init__(self, job, workdir, name, cache_root, timeout_s):
        self.job, self.name, self.alive, self.started = job, name, True, 0.0
        self.variant = job["variants"][0]
        self.replica = bool(job.get("replica"))
        _Served.made.append(self)
        _Served.log.append(("spawn", name))

    def wait_built(self):
        return True

    def wait_weights_saved(self):
        return None

    def go(self):
        self.go_at = 1.0
        _Served.log.append(("go", self.name))

    def wait_cold(self, until=None):
        from rewriter.engine.runner import ChildResult

        what = None if self.replica else _Served.script.get(self.variant)
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "fail":
            self.alive = False
            return ChildResult(4, {"error": {"kind": "raised", "message": "RuntimeError: boom"}}, 0.0, "")
        shape = {"shape": {"batch": 1}, "first_call_s": 1.0, "steady_s": 0.01, "compile_s": 0.9, "new_graphs": 1,
                 "new_recompiles": 0}
        return ChildResult(0, {"info": {}, "compile": {"unique_graphs": 1}, "shapes": [shape],
                               "max_memory_allocated_bytes": 1 << 20}, 0.0, "")

    def time(self, shape, warmup, n, **kw):
        _Served.log.append(("time", self.name))
        return {"samples": [0.01] * n, "calls": 1}

    def terminate(self):
        self.alive = False
        _Served.log.append(("terminate", self.name))

    def close(self):
        self.alive = False
        _Served.log.append(("close", self.name))


def _measure_with_fakes(monkeypatch, tmp_path, names, script, **opts):
    from rewriter.engine.measure import Measurement, measure
    from rewriter.engine.options import Variant

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Served)
    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    _Served.log, _Served.script, _Served.made = [], dict(script), []
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    variants = [Variant(n, tmp_path, judged=n != "eager", compiles=n != "eager") for n in names]
    m = Measurement()
    options = Options(replicates=2, overlap=False, warmup=0, reps=3, budget_s=10.0, **opts)
    try:
        measure(spec, variants, options, tmp_path, partial=m)
    except KeyboardInterrupt:
        pass
    return m


def test_the_replica_of_a_variant_whose_cold_phase_fails_is_ended_then_and_never_timed(monkeypatch, tmp_path):
    m = _measure_with_fakes(monkeypatch, tmp_path, ["eager", "whole", "broken", "per-block"], {"broken": "fail"})
    log = _Served.log
    assert "the rewritten model raised" in " ".join(m.results["broken"]["problems"])
    # ended as soon as its variant's cold phase is recorded: before the next cold phase starts
    assert log.index(("terminate", "replica-broken")) < log.index(("go", "cold-per-block")), log
    assert ("go", "replica-broken") not in log and ("time", "replica-broken") not in log
    assert ("time", "replica-per-block") in log and m.ok("per-block")


def test_the_replica_of_a_variant_skipped_by_the_deadline_is_ended_then(monkeypatch, tmp_path):
    import time as time_mod

    from rewriter.engine import measure as measure_mod
    from rewriter.engine.measure import Measurement, measure
    from rewriter.engine.options import Variant

    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Served)
    _Served.log, _Served.script, _Served.made = [], {}, []
    real, late = time_mod.perf_counter, []
    # the budget runs out right after the second processes are spawned (after whole's cold phase)
    monkeypatch.setattr(measure_mod.time, "perf_counter", lambda: real() + (1e6 if late else 0.0))
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    variants = [Variant(n, tmp_path, compiles=n != "eager") for n in ["eager", "whole", "late", "later"]]
    m = Measurement()
    measure(spec, variants, Options(replicates=2, overlap=False, warmup=0, reps=3), tmp_path, deadline=real() + 3600,
            on_event=lambda name, event, detail: late.append(1) if event == "replicates" else None, partial=m)
    log = _Served.log
    assert m.results["late"].get("skipped") and m.results["later"].get("skipped"), m.results
    for name in ("late", "later"):
        assert ("go", f"replica-{name}") not in log and ("time", f"replica-{name}") not in log
    # ended with its variant's own process, not left up until the cold phases are over
    assert log.index(("terminate", "replica-late")) < log.index(("terminate", "cold-later")), log


def test_ctrl_c_during_a_cold_phase_ends_every_child_replicas_included(monkeypatch, tmp_path):
    _measure_with_fakes(monkeypatch, tmp_path, ["eager", "whole", "stuck", "per-block"], {"stuck": "interrupt"})
    assert any(c.replica for c in _Served.made)
    for child in _Served.made:
        assert ("terminate", child.name) in _Served.log and ("close", child.name) in _Served.log, child.name


def test_calls_per_sample_is_each_shapes_own(monkeypatch):
    """A block is sized per shape (engine.child.serve): a small shape's 16 calls are not the
    large shape's figure."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)

    class Sized(_Child):
        def time(self, shape, warmup, n, **kw):
            return dict(super().time(shape, warmup, n, **kw), calls=(16, 2)[shape])

    kids = {"eager": Sized(20.0), "whole": Sized(10.0)}
    timed = interleave(kids, [{"batch": 1}, {"batch": 64}], Options(warmup=1, reps=3), device="cuda")
    rows, _raw, error = timed.rows, timed.samples, timed.error
    assert error is None
    assert [row["timing"]["whole"]["calls_per_sample"] for row in rows] == [16, 2]


def test_replica_room_keeps_room_for_the_cold_phases_still_to_run(monkeypatch):
    """Second processes spawned during the cold phases must leave the memory a later variant's own
    cold phase grows into (its activations and compile workspace): its model is built, its peak
    is not reached yet."""
    import torch

    from rewriter.engine.replicas import CONTEXT_BYTES, replica_room

    gib = 1 << 30
    results = {"eager": {"max_memory_allocated_bytes": 8 * gib}, "whole": {"max_memory_allocated_bytes": 8 * gib}}
    per = int(8 * gib * 1.25) + CONTEXT_BYTES  # one replica
    free = int(3 * per / 0.8) + gib  # three replicas fit, with nothing kept for per-block's cold phase
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (free, 4 * free))
    assert replica_room(results, ["eager", "whole"], "cuda") is None  # every cold phase is over
    why = replica_room(results, ["eager", "whole", "per-block"], "cuda")  # per-block's is still to run
    assert why and "cold phase" in why, why
    # a static twin still to run with two shape warmers grows to three peaks at once
    free = int((3 * per + int(8 * gib * 1.25)) / 0.8) + gib  # room for three replicas and one pending peak
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (free, 4 * free))
    assert replica_room(results, ["eager", "whole", "whole+static"], "cuda") is None
    assert replica_room(results, ["eager", "whole", "whole+static"], "cuda", {"whole+static": 1}) is None
    why = replica_room(results, ["eager", "whole", "whole+static"], "cuda", {"whole+static": 3})
    assert why and "kept for the 1 cold phase(s) still to run" in why and f"besides {3 * int(8 * gib * 1.25) / gib:.1f} GiB" in why


def test_a_child_that_could_not_pin_itself_is_said_and_an_unknown_pin_mode_is_refused(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    kids = {"eager": _Child(20.0), "whole": _Child(10.0, pins=False)}
    notes: list[str] = []
    interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3), notes=notes, device="cuda")
    assert any(n.startswith("not pinned as planned: whole ") for n in notes), notes
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    notes = []
    interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3), notes=notes, device="cuda")
    assert not any("not pinned as planned" in n for n in notes), notes
    with pytest.raises(ValueError, match="Options.pin: expected one of shared, fastest, own, off, got 'Own'"):
        interleave(kids, [{"batch": 1}], Options(pin="Own"), device="cuda")


class _StalledChild(_Child):
    """Times ``ms`` per call, but ``stall`` x slower through its requests number ``first..last`` (a
    host stall through one timing window)."""

    def __init__(self, ms: float, stall: float, first: int, last: int):
        super().__init__(ms)
        self.stall, self.first, self.last = stall, first, last

    def time(self, shape, warmup, n, **kw):
        self.requests.append((shape, warmup, n, kw))
        slow = self.first <= len(self.requests) <= self.last
        return {"samples": [self.ms * (self.stall if slow else 1.0) / 1e3] * n, "calls": 1}


def test_two_windows_per_shape_the_faster_window_stands_and_every_sample_is_kept():
    """H200 run 33a: a host stall through the 8x384 window slowed as-is and per-block 40% in both
    of their processes; with two windows apart in time the stalled window no longer sets the
    figure. Order: shape 0, shape 1, shape 0, shape 1 (each: warm-up, 3 rounds)."""
    kids = {"eager": _Child(20.0), "per-block": _StalledChild(10.0, 1.4, first=5, last=8)}
    notes: list[str] = []
    timed = interleave(kids, [{"seq": 512}, {"seq": 384}], Options(warmup=1, reps=6, budget_s=0.0, windows=2), notes=notes)
    rows, raw, error = timed.rows, timed.samples, timed.error
    assert error is None
    order = [req[0] for req in kids["eager"].requests]
    assert order == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], order
    stalled = rows[1]["timing"]["per-block"]
    assert stalled["windows_ms"] == pytest.approx([14.0, 10.0])  # window 1 of shape 1 was the stall
    assert stalled["median_ms"] == pytest.approx(10.0)
    # the reported spread is the standing window's: p10 <= median <= p90 (both windows' samples
    # would put p90 at the stall's 14 ms)
    assert stalled["p10_ms"] == pytest.approx(10.0) and stalled["p90_ms"] == pytest.approx(10.0)
    assert rows[0]["timing"]["per-block"]["median_ms"] == pytest.approx(10.0)
    assert len(raw[1]["per-block"]) == 6 and len(raw[1]["eager"]) == 6  # both windows' rounds, paired
    assert any("timed in 2 windows" in n for n in notes), notes


def test_one_window_is_the_default_and_reports_no_windows():
    kids = {"eager": _Child(20.0), "whole": _Child(10.0)}
    timed = interleave(kids, [{"batch": 1}], Options(warmup=1, reps=3, budget_s=0.0))
    rows, raw, error = timed.rows, timed.samples, timed.error
    assert error is None and "windows_ms" not in rows[0]["timing"]["whole"] and len(raw[0]["whole"]) == 3


def test_validate_times_as_the_search_does_on_the_device_it_runs_on():
    """validate's --processes/--windows auto (0) resolve per device as diagnose's search sets
    them: on CUDA two processes per variant (the second autotuning again) and two windows per
    shape; on a CPU one of each; a knob set by hand is kept."""
    from rewriter.engine.options import on_device

    auto = Options(replicates=0, windows=0)
    cuda = on_device(auto, "cuda:0")
    assert (cuda.replicates, cuda.windows, cuda.replica_caches) == (2, 2, "reautotune")
    cpu = on_device(auto, "cpu")
    assert (cpu.replicates, cpu.windows) == (1, 1)  # no second process on a CPU: its caches mode is moot
    mine = on_device(Options(replicates=1, windows=0), "cuda")
    assert (mine.replicates, mine.windows) == (1, 2)
    assert on_device(Options(), "cuda") == Options()  # nothing automatic: unchanged


def test_the_validate_cli_passes_its_timing_knobs(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import rewriter.validate.command as command
    from rewriter.cli import cli

    seen = []
    monkeypatch.setattr(command, "validate_command", lambda plan, src, opts: seen.append(opts) or 0)
    (tmp_path / "plan.yaml").write_text("actions: []\n")
    r = CliRunner().invoke(cli, ["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (seen[0].replicates, seen[0].windows) == (0, 0)  # auto: resolved on the device
    r = CliRunner().invoke(cli, ["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--processes", "1", "--windows", "2"])
    assert r.exit_code == 0, r.output
    assert (seen[1].replicates, seen[1].windows) == (1, 2)
    r = CliRunner().invoke(cli, ["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--processes", "3"])
    assert r.exit_code == 2 and "3" in r.output


class _HostBound(_Child):
    """Times ``ms`` per call, ``x`` times that while ``loop`` (the ``busy_loop`` fixture) runs."""

    def __init__(self, ms: float, x: float, loop):
        super().__init__(ms)
        self.x, self.loop = x, loop

    def time(self, shape, warmup, n, **kw):
        self.requests.append((shape, warmup, n, kw))
        ms = self.ms * (self.x if self.loop.on else 1.0)
        return {"samples": [ms / 1e3] * n, "calls": 1, "pinned": kw.get("pin")}


def test_a_contended_window_times_each_plan_with_a_busy_loop_on_the_shared_core(busy_loop):
    """H200 run 37: a busy loop on the main thread's core made as-is 2.2-2.8x and per-block
    1.6-2.4x slower. With Options.contended every process is timed once more per shape with the
    loop on the one core they share: that window's median is ``contended_ms``, it never sets
    ``median_ms``, its samples are not paired with the quiet rounds, and the loop is stopped."""
    started = busy_loop.started
    kids = {"eager": _HostBound(20.0, 2.5, busy_loop), "whole": _HostBound(10.0, 1.1, busy_loop)}
    notes: list[str] = []
    timed = interleave(kids, [{"seq": 512}, {"seq": 384}],
                                  Options(warmup=1, reps=4, budget_s=0.0, windows=2, contended=True), notes=notes, device="cuda")
    rows, raw, error = timed.rows, timed.samples, timed.error
    assert error is None and not busy_loop.on and len(started) == 1
    for row in rows:
        assert row["timing"]["eager"]["median_ms"] == pytest.approx(20.0)
        assert row["timing"]["eager"]["contended_ms"] == pytest.approx(50.0)
        assert row["timing"]["whole"]["contended_ms"] == pytest.approx(11.0)
    assert all(len(r["whole"]) == 4 for r in raw)  # the two quiet windows' rounds only
    assert any("busy loop on the shared core" in n for n in notes), notes
    # without one shared core (--pin own) there is no contended window, and the note says why
    notes = []
    timed = interleave({"eager": _HostBound(20.0, 2.5, busy_loop), "whole": _HostBound(10.0, 1.1, busy_loop)}, [{"seq": 512}],
                               Options(warmup=1, reps=2, budget_s=0.0, contended=True, pin="own"), notes=notes, device="cuda")
    rows, _raw, _ = timed.rows, timed.samples, timed.error
    assert "contended_ms" not in rows[0]["timing"]["whole"] and len(started) == 1
    assert any("not timed with a contended host core" in n for n in notes), notes


class _Drifting(_HostBound):
    """A host-bound child whose slowdown under the busy loop moves between contended windows:
    ``xs[k]`` in the ``k``-th contended window (a window is a shape's rounds under the loop)."""

    def __init__(self, ms: float, xs: list[float], loop, shapes: int):
        super().__init__(ms, xs[0], loop)
        self.xs, self.shapes, self.loaded_requests = xs, shapes, 0

    def time(self, shape, warmup, n, **kw):
        if self.loop.on:
            if warmup:  # each window starts with the shape's warm-up request
                self.loaded_requests += 1
            self.x = self.xs[min((self.loaded_requests - 1) // self.shapes, len(self.xs) - 1)]
        return super().time(shape, warmup, n, **kw)


def test_two_contended_windows_pool_their_samples_and_their_spread_sets_the_contended_band(busy_loop):
    """The two processes of one contended window run under one busy loop and agree; two contended
    windows apart in time differ as a re-run does, so that spread is the band a contended figure
    is judged within (rewriter.engine.noise.process_noise, ``contended_share``)."""
    from rewriter.engine.noise import process_noise
    from rewriter.engine.windows import CONTENDED_WINDOWS

    assert CONTENDED_WINDOWS == 2
    shapes = [{"seq": 512}, {"seq": 384}]
    kids = {"eager": _Drifting(20.0, [2.0, 2.2], busy_loop, 2), "eager" + REPLICA: _Drifting(20.0, [2.0, 2.2], busy_loop, 2),
            "pb": _Drifting(10.0, [2.0, 2.4], busy_loop, 2), "pb" + REPLICA: _Drifting(10.0, [2.0, 2.4], busy_loop, 2)}
    notes: list[str] = []
    timed = interleave(kids, shapes, Options(warmup=1, reps=6, budget_s=0.0, windows=2, contended=True), notes=notes,
                       device="cuda")
    assert timed.error is None and not busy_loop.on and len(busy_loop.started) == 1  # one loop for both windows
    for row in timed.rows:
        pb = row["timing"]["pb"]
        assert pb["median_ms"] == pytest.approx(10.0)
        assert pb["contended_windows_ms"] == pytest.approx([20.0, 24.0])
        assert pb["contended_ms"] == pytest.approx(22.0)  # the median of both windows' samples pooled
    # each contended window has half a quiet window's rounds (3 of 6), the quiet rounds are the only paired ones
    loaded = [r for r in kids["pb"].requests if r[2] and r[3].get("burst_ms") is not None]
    assert len(loaded) == 2 * 6 + 2 * 2 * 3
    assert any("in 2 more windows with a busy loop" in n for n in notes), notes
    from rewriter.engine.replicas import merge_replicates

    noise = process_noise(merge_replicates(timed, ["eager", "pb"]).rows)
    # the processes agree to the digit (contended share 0); per shape the windows moved pb by ln(24/20) and
    # eager by ln(2.2/2.0): each is ln(1.2/1.1)/2 from their median, the shift both saw taken out
    d = math.log(1.2 / 1.1) / 2
    assert noise["contended_window_share"] == pytest.approx(1.96 * d / (0.6745 * math.sqrt(2)))
    assert noise["contended_share"] == noise["contended_window_share"]
    # a shift every variant saw alike (the loop's share of the core moving between windows) is no band
    same = {"eager": _Drifting(20.0, [2.0, 2.4], busy_loop, 2), "eager" + REPLICA: _Drifting(20.0, [2.0, 2.4], busy_loop, 2),
            "pb": _Drifting(10.0, [2.0, 2.4], busy_loop, 2), "pb" + REPLICA: _Drifting(10.0, [2.0, 2.4], busy_loop, 2)}
    timed = interleave(same, shapes, Options(warmup=1, reps=6, budget_s=0.0, windows=2, contended=True), device="cuda")
    assert process_noise(merge_replicates(timed, ["eager", "pb"]).rows)["contended_window_share"] == 0.0


def test_the_contended_figure_of_a_plan_timed_twice_is_its_faster_process():
    from rewriter.engine.noise import process_noise
    from rewriter.engine.replicas import REPLICA, merge_replicates
    from rewriter.engine.timing import Timed

    row = {"shape": {"seq": 512}, "timing": {
        "eager": {"n": 3, "median_ms": 20.0, "contended_ms": 52.0}, "eager" + REPLICA: {"n": 3, "median_ms": 20.2, "contended_ms": 48.0},
        "whole": {"n": 3, "median_ms": 10.1, "contended_ms": 11.0}, "whole" + REPLICA: {"n": 3, "median_ms": 10.0, "contended_ms": 11.2},
        "pb": {"n": 3, "median_ms": 9.0, "contended_ms": 20.0}, "pb" + REPLICA: {"n": 3, "median_ms": 9.1, "contended_ms": 19.0}}}
    samples = [{k: [0.01] * 3 for k in row["timing"]}]
    merged = merge_replicates(Timed([row], samples), ["eager", "whole", "pb"]).rows
    t = merged[0]["timing"]
    assert t["eager"]["contended_ms"] == 48.0 and t["whole"]["contended_ms"] == 11.0 and t["pb"]["contended_ms"] == 19.0
    assert t["whole"]["contended_processes_ms"] == [11.0, 11.2]
    noise = process_noise(merged)
    assert noise["contended_share"] == pytest.approx(2.40 * math.log(20.0 / 19.0) / 1.0, rel=0.01)


def test_contend_starts_a_busy_loop_on_the_core_and_is_killed(monkeypatch):
    """The real busy loop (not a stand-in): it runs pinned to the core asked for until killed."""
    import time as _time

    from rewriter.engine.cores import contend

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity")
    core = max(os.sched_getaffinity(0))
    hog = contend(core)
    try:
        _time.sleep(0.3)
        assert hog.poll() is None  # still looping
        assert os.sched_getaffinity(hog.pid) == {core}
    finally:
        hog.kill()
        hog.wait()
    assert hog.returncode is not None


def test_second_processes_that_would_start_after_the_cold_phases_wait_for_time_left_for_them(monkeypatch):
    """A spawn deferred until every cold phase is over starts the second processes only when the
    budget left holds the longest cold phase (about what a second process's build and warm compile
    take beside the others); with less left each variant is timed in its one process, said once,
    and the search does not run past its budget by their start."""
    import time

    from rewriter.engine import replicas as replicas_mod

    monkeypatch.setattr(replicas_mod, "replica_room", lambda results, names, device, processes=None: None if all(
        n in results for n in names) else "no room beside the pending cold phases")
    for left, spawned in ((8.0, False), (60.0, True)):
        m, reps, _ = _replicas(monkeypatch, ["eager", "whole", "nested"], deadline=time.perf_counter() + left)
        reps.cold_s.update(whole=27.1, nested=22.3)
        m.results.update(eager={"problems": []}, whole={"problems": []})
        reps.spawn()  # nested's cold phase still to run: deferred
        m.results["nested"] = {"problems": []}
        out = reps.collect(["eager", "whole", "nested"])
        assert bool(out) is spawned and bool(_Replica.made) is spawned, (left, m.notes)
        said = [n for n in m.notes if "expected to take about 27 s" in n]
        assert len(said) == (0 if spawned else 1), m.notes


def test_a_second_process_not_up_by_the_deadline_is_ended_there_and_its_variant_keeps_one(monkeypatch):
    """Replicas spawned beside a later cold phase compile again from their caches; one still
    compiling at the deadline is waited for until then only (it held T5's timing 25 s past the
    cold phases once), ended, and its variant is timed in its one process; the others keep two."""
    import time as real_time

    deadline = real_time.perf_counter() + 60.0
    m, reps, _ = _replicas(monkeypatch, ["eager", "whole", "per-block"], deadline=deadline)
    _Replica.slow = {"per-block"}
    try:
        reps.spawn()
        out = reps.collect(["eager", "whole", "per-block"])
    finally:
        _Replica.slow = set()
    assert set(out) == {"eager" + REPLICA, "whole" + REPLICA}
    by = {r.job["variants"][0]: r for r in _Replica.made}
    assert by["per-block"].terminated and all(r.until == deadline for r in by.values())
    assert any("(2 of 3 variants" in n and n.endswith("; one process for per-block: its second was not up when the "
                                                          "search budget ran out (ended)") for n in m.notes), m.notes


def test_a_baseline_that_raises_is_said_as_the_original_model(monkeypatch, tmp_path):
    """validate's baselines run the original tree (compiled in place, or as it runs): their failure
    named "the rewritten model", which the plan's own failure is called."""
    from rewriter.engine.measure import Measurement, measure
    from rewriter.engine.options import Variant

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Served)
    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    _Served.log, _Served.script, _Served.made = [], {"whole": "fail", "as-is": "fail"}, []
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    variants = [Variant("eager", tmp_path, judged=False), Variant("plan", tmp_path, compiles=True),
                Variant("whole", tmp_path, prepare="whole", judged=False), Variant("as-is", tmp_path, judged=False)]
    m = Measurement()
    measure(spec, variants, Options(replicates=0, overlap=False, warmup=0, reps=3, budget_s=10.0), tmp_path, partial=m)
    assert m.results["whole"]["problems"][0].startswith("the original model with the whole compile raised"), m.results["whole"]
    assert m.results["as-is"]["problems"][0].startswith("the original model as it runs raised"), m.results["as-is"]


def test_serve_writes_the_host_state_of_its_timing_only_when_asked(tmp_path, monkeypatch):
    """STACKPART_HOST_STATE (docs/measuring-on-a-gpu.md, "When two processes time one computation
    apart"): a served child writes its state, one profiled step and a row per timed request."""
    import json

    import torch

    from rewriter.engine.child import serve
    from rewriter.engine.host_state import ENV

    ref = tmp_path / "ref"
    ref.mkdir()
    torch.save((torch.randn(2, 4),), ref / "inputs_0.pt")
    job = {"ref": str(ref), "harness": {"device": "cpu", "mode": "inference"}, "variants": ["per-block"], "replica": True}
    requests = [{"op": "time", "shape": 0, "warmup": 1, "n": 0}, {"op": "time", "shape": 0, "warmup": 0, "n": 3}]

    monkeypatch.delenv(ENV, raising=False)
    serve(job, _Channel(list(requests)), torch.nn.Linear(4, 4))
    assert not list(tmp_path.glob("**/*.json"))

    monkeypatch.setenv(ENV, str(tmp_path / "state"))
    serve(job, _Channel(list(requests)), torch.nn.Linear(4, 4))
    (written,) = (tmp_path / "state").glob("*.json")
    assert written.name == f"per-block_2-{os.getpid()}.json"
    state = json.loads(written.read_text())
    assert [r["n"] for r in state["requests"]] == [0, 3]
    assert state["requests"][1]["median_ms"] > 0 and "median_ms" not in state["requests"][0]
    assert state["first"]["param"] == {"dtype": "torch.float32", "device": "cpu"}
    assert state["first"]["torch"]["dispatch_modes"] == 0 and state["first"]["profiled_step"]["cpu_events"] > 0
    assert state["delta"]["wall_s"] >= 0
    if hasattr(os, "sched_getaffinity"):  # Linux: a pinned core's busy and steal seconds, steal counted in busy
        from rewriter.engine.host_state import _core_times

        busy, steal = _core_times(min(os.sched_getaffinity(0)))
        assert busy >= steal >= 0 and busy > 0
