"""Shape warmers (rewriter.engine.warmers): a static-shape variant's later shapes compile in
processes of their own beside its first, and its own call there loads them from the cache."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewriter.engine import warmers
from rewriter.engine.options import Options, Variant

HARNESS = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def build_model():
    torch.manual_seed(0)
    model = Net().eval()
    return {wrap}


def make_inputs(batch=2, size=16):
    return (torch.randn(batch, 3, size, size),)
"""


def _tree(root: Path, wrap: str) -> Path:
    root.mkdir(parents=True)
    (root / "harness.py").write_text(HARNESS.format(wrap=wrap))
    return root


def _spec():
    from rewriter.plan import Harness

    return Harness.model_validate({"file": "harness.py", "shapes": [{"size": 16}, {"size": 8}],
                                   "mode": "inference", "dtype": "float32", "device": "cpu"})


def _measure(tmp_path: Path, warm: bool):
    from rewriter.engine.measure import Measurement, measure

    original = _tree(tmp_path / "original", "model")
    static = _tree(tmp_path / "static", "torch.compile(model, dynamic=False)")
    variants = [Variant("eager", original, judged=False),
                Variant("whole+static", static, compiles=True, warm_shapes=True)]
    work = tmp_path / "work"
    work.mkdir()
    opts = Options(backend="inductor", replicates=1, warmup=1, reps=2, budget_s=1.0, timeout_s=300.0,
                   overlap=False, warm_shapes=warm)
    m = Measurement()
    env = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        measure(_spec(), variants, opts, work, partial=m)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return m, work


@pytest.mark.slow
def test_a_static_variants_second_shape_compiles_in_a_warmer_and_loads_from_the_cache(tmp_path):
    m, work = _measure(tmp_path, warm=True)
    row = m.results["whole+static"]
    assert not row.get("problems") and not row.get("error"), row
    second = row["per_shape_cold"][1]
    warm_result = json.loads((work / "warm-whole+static-1.result.json").read_text())
    warm_entry = warm_result["shapes"][0]
    assert warm_entry["shape"] == {"size": 8} and warm_entry["new_graphs"] == 1
    # the variant's own call at that shape traced again and loaded the warmer's compiled code
    assert second.get("compiled_by") == "warmer", second
    assert second["compile_s"] == pytest.approx(warm_entry["compile_s"])
    assert second["new_graphs"] == 1
    # a restart still pays both compiles, one after the other
    first = row["per_shape_cold"][0]
    assert row["compile_s_per_start"] == pytest.approx(first["compile_s"] + warm_entry["compile_s"])
    assert row["numerics"] == "ok"


def test_warmers_only_for_a_variant_that_compiles_each_shape_from_scratch_and_where_allowed():
    static = Variant("whole+static", Path("/t"), warm_shapes=True)
    dynamic = Variant("whole", Path("/t"))
    forced = Options(warm_shapes=True)
    assert warmers.warmed_shapes(static, forced, "cpu", 2) == [1]
    assert warmers.warmed_shapes(static, forced, "cpu", 9) == list(range(1, warmers.MAX_WARMERS + 1))
    assert warmers.warmed_shapes(static, forced, "cpu", 1) == []
    assert warmers.warmed_shapes(dynamic, forced, "cuda", 4) == []
    assert warmers.warmed_shapes(static, Options(warm_shapes=False), "cuda", 4) == []
    # by default only where compiles may overlap: never on a CPU device
    assert warmers.warmed_shapes(static, Options(), "cpu", 4) == []


def test_the_search_gives_warmers_to_the_static_twins_only():
    from rewriter.diagnose.candidate import WHOLE, Candidate
    from rewriter.diagnose.kinds.static_shapes import WHOLE_STATIC
    from rewriter.diagnose.search import candidate_variant
    from rewriter.plan import Plan

    plan = Plan.model_validate({"version": 1, "harness": {"file": "h.py", "shapes": [{"b": 1}]}, "actions": []})
    result = type("R", (), {"library_modules": []})()
    assert candidate_variant(Candidate(WHOLE_STATIC, plan), Path("/t"), result).warm_shapes
    assert not candidate_variant(Candidate(WHOLE, plan), Path("/t"), result).warm_shapes


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _entry(out: Path, pid: int, cache: Path | None = None, timeout_s: float = 60.0) -> dict:
    return {"out": str(out), "pid": pid, "cache": str(cache or out.parent / "no-cache"), "timeout_s": timeout_s}


def _soon(s: float = 60.0) -> float:
    return time.perf_counter() + s


def test_a_warmer_that_exits_without_a_result_is_not_waited_for(tmp_path):
    t0 = time.perf_counter()
    got = warmers.await_warmer(_entry(tmp_path / "none.json", _dead_pid()), _soon())
    assert time.perf_counter() - t0 < 5
    assert got["failed"] == "it exited without a result"


def _exited_after(tmp_path: Path, payload: dict | None, delay_s: float) -> tuple[Path, subprocess.Popen]:
    """A stand-in warmer: writes ``payload`` as its result (whole, as child.main does) after
    ``delay_s`` and exits; a session of its own, as the engine starts its children."""
    out = tmp_path / "w.result.json"
    write = "" if payload is None else (f"p = {str(out)!r}; open(p + '.partial', 'w').write({json.dumps(payload)!r}); "
                                        "os.replace(p + '.partial', p); ")
    return out, subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep({delay_s}); {write}"],
                                 start_new_session=True)


def test_a_failed_warmer_is_said_and_the_shape_keeps_its_own_compile(tmp_path):
    out, proc = _exited_after(tmp_path, {"error": {"kind": "oom", "message": "CUDA out of memory"}}, 0.0)
    proc.wait()
    got = warmers.await_warmer(_entry(out, proc.pid), _soon())
    assert got["failed"].startswith("it failed: oom: CUDA out of memory")
    entry = {"compile_s": 12.5}
    warmers.credit(entry, got, hits=0)
    assert entry["compile_s"] == 12.5 and "compiled_by" not in entry
    assert entry["warmer"].startswith("not used: it failed: oom")


def test_a_finished_warmers_cache_is_copied_into_the_childs_own(tmp_path, monkeypatch):
    """Only a warmer that ended with a result reaches the variant's call, through a copy of its
    cache folder: what one left behind unfinished never does."""
    mine = tmp_path / "mine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(mine / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(mine / "triton"))
    cache = tmp_path / "whole+static.warm-1"
    for sub in ("inductor/fxgraph/ab", "triton/cd"):
        (cache / sub).mkdir(parents=True)
        (cache / sub / "entry").write_text(sub)
    out, proc = _exited_after(tmp_path, {"shapes": [{"compile_s": 7.0}]}, 1.0)
    try:
        got = warmers.await_warmer(_entry(out, proc.pid, cache), _soon(), poll_s=0.05)
    finally:
        proc.kill()
        proc.wait()
    assert got["entry"] == {"compile_s": 7.0} and got["waited_s"] >= 0.5
    assert (mine / "inductor/fxgraph/ab/entry").read_text() == "inductor/fxgraph/ab"
    assert (mine / "triton/cd/entry").read_text() == "triton/cd"
    # a file this process's cache already holds is never written to: it may be a kernel's shared
    # library this process has loaded, which rewriting in place crashes (SIGSEGV)
    loaded = mine / "inductor/fxgraph/ab/entry"
    loaded.write_text("mine")
    inode = loaded.stat().st_ino
    warmers._adopt(cache)
    assert loaded.read_text() == "mine" and loaded.stat().st_ino == inode
    shutil.rmtree(mine)
    (tmp_path / "f").mkdir()
    out2, failed = _exited_after(tmp_path / "f", {"error": {"kind": "oom", "message": "x"}}, 0.0)
    failed.wait()
    warmers.await_warmer(_entry(out2, failed.pid, cache), _soon())
    assert not mine.exists()


def test_the_warmers_are_waited_for_within_one_deadline_and_ended_past_it(tmp_path, monkeypatch):
    """Three stuck warmers cost one bound, not three; each is killed once past it, so none keeps
    compiling beside the child."""
    monkeypatch.setattr(warmers, "MIN_WAIT_S", 1.0)
    stuck = []
    for k in range(3):
        (tmp_path / str(k)).mkdir()
        stuck.append(_exited_after(tmp_path / str(k), {"shapes": [{"compile_s": 7.0}]}, 60.0))
    try:
        waits = warmers.WarmWaits(0.2)  # a first compile shorter than the floor: the floor stands
        t0 = time.perf_counter()
        got = [waits.wait(_entry(out, proc.pid), poll_s=0.05) for out, proc in stuck]
        took = time.perf_counter() - t0
        assert 1.0 <= took < 2.5, took  # one bound, where three would be 3 s
        assert all(g["failed"].startswith("it had not ended after") for g in got)
        for _, proc in stuck:
            assert proc.wait(timeout=10) != 0  # killed
        # half a warmer's timeout bounds it too
        (tmp_path / "h").mkdir()
        out, proc = _exited_after(tmp_path / "h", None, 60.0)
        t0 = time.perf_counter()
        warmers.WarmWaits(30.0).wait(_entry(out, proc.pid, timeout_s=1.0), poll_s=0.05)
        assert time.perf_counter() - t0 < 5  # 0.5 s, where the first compile's bound would be 30 s
        proc.kill()
        proc.wait()
    finally:
        for _, proc in stuck:
            proc.kill()
            proc.wait()


def test_no_warmers_where_the_backend_caches_no_compiled_code(tmp_path):
    static = Variant("whole+static", tmp_path, warm_shapes=True)
    assert warmers.warmed_shapes(static, Options(warm_shapes=True), "cuda", 3, backend="eager") == []
    assert warmers.warmed_shapes(static, Options(warm_shapes=True), "cuda", 3, backend="aot_eager") == []
    job = {"harness": {"device": "cuda", "shapes": [{"s": 1}, {"s": 2}]}, "backend": "inductor", "force_backend": "eager"}
    assert warmers.spawn(job, static, tmp_path, tmp_path / "c", Options(warm_shapes=True)) == ([], {})


def test_a_cache_miss_keeps_the_shapes_own_compile_seconds():
    entry = {"compile_s": 3.0}
    warmers.credit(entry, {"waited_s": 0.1, "entry": {"compile_s": 9.0}}, hits=0)
    assert entry["compile_s"] == 3.0 and "compiled_by" not in entry
    assert "compiled" in entry["warmer"]
    entry = {"compile_s": 0.2}
    warmers.credit(entry, {"waited_s": 0.1, "entry": {"compile_s": 9.0}}, hits=2)
    assert entry == {"compile_s": 9.0, "compile_s_here": 0.2, "compiled_by": "warmer", "waited_for_warmer_s": 0.1}


def test_a_call_that_loaded_some_graphs_and_compiled_others_takes_the_larger_figure():
    entry = {"compile_s": 12.2}
    warmers.credit(entry, {"waited_s": 0.0, "entry": {"compile_s": 20.0}}, hits=1, compiled=1)
    assert entry["compile_s"] == 20.0 and entry["compile_s_here"] == 12.2 and "compiled_by" not in entry
    assert entry["warmer"].startswith("partly used: this call loaded 1 compiled graph(s) from the warmer's cache and compiled 1")
    entry = {"compile_s": 25.0}
    warmers.credit(entry, {"waited_s": 0.0, "entry": {"compile_s": 20.0}}, hits=1, compiled=1)
    assert entry["compile_s"] == 25.0


def test_the_budget_estimate_of_a_warmed_cold_phase_is_its_shapes_in_turn():
    row = {"per_shape_cold": [{"compile_s": 70.0},
                              {"compile_s": 60.0, "compile_s_here": 5.0, "waited_for_warmer_s": 2.0, "compiled_by": "warmer"},
                              {"compile_s": 40.0, "warmer": "not used: it failed: oom: x", "waited_for_warmer_s": 1.0}]}
    assert warmers.serial_cold_s(row, 130.0) == pytest.approx(130.0 + 60.0 - 5.0 - 2.0)
    assert warmers.serial_cold_s({"per_shape_cold": [{"compile_s": 70.0}]}, 80.0) == 80.0


def test_a_childs_result_file_left_by_an_earlier_child_of_its_name_is_removed_at_its_start(tmp_path):
    """An early anchor ended and started again with the others reuses its children's names: its
    new shape warmer's result must not be the old one's, which the variant's child would read."""
    from rewriter.engine.runner import ServedChild

    stale = tmp_path / "warm-whole+static-1.result.json"
    stale.write_text(json.dumps({"shapes": [{"compile_s": 99.0}]}))
    (tmp_path / "warm-whole+static-1.result.json.partial").write_text("{")
    harness = {"device": "cpu", "shapes": [{"size": 8}], "mode": "inference"}
    child = ServedChild({"harness": harness, "tree": str(tmp_path)}, tmp_path, "warm-whole+static-1", tmp_path / "c", 30.0)
    try:
        assert not stale.exists() or "99.0" not in stale.read_text()
    finally:
        child.close()


_PARTIAL = r'''
import json, sys, time, torch
from rewriter.engine import warmers
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
    def forward(self, x):  # graph 1 holds torch.cond (the caches bypass it), graph 2 is cached
        y = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (self.a(x),))
        torch._dynamo.graph_break()
        return (y * 2).relu()
torch.manual_seed(0)
m = torch.compile(Net().eval(), dynamic=False)
out = {}
with torch.no_grad():
    for s in map(int, sys.argv[1:]):
        before = warmers.cache_counts()
        t = time.perf_counter(); m(torch.randn(s, 8)); after = warmers.cache_counts()
        out[s] = {"s": time.perf_counter() - t, "hits": after["hits"] - before["hits"], "compiled": after["compiled"] - before["compiled"]}
print(json.dumps(out))
'''


@pytest.mark.slow
def test_a_graph_the_cache_bypassed_is_counted_as_compiled_here(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))

    def run(*sizes):
        done = subprocess.run([sys.executable, "-c", _PARTIAL, *sizes], env=env, check=True, capture_output=True, text=True)
        return json.loads(done.stdout.splitlines()[-1])

    warm = run("4")["4"]  # the warmer: shape 1 only
    mine = run("2", "4")["4"]  # the variant's child: shape 0, then shape 1
    assert mine["hits"] >= 1 and mine["compiled"] >= 1
    entry = {"compile_s": mine["s"]}
    warmers.credit(entry, {"waited_s": 0.0, "entry": {"compile_s": warm["s"]}}, mine["hits"], mine["compiled"])
    assert entry.get("compiled_by") != "warmer" and entry["warmer"].startswith("partly used")


def test_the_search_log_says_which_shapes_warmers_compiled_and_why_one_was_not_used():
    row = {"child_wall_s": 81.4, "per_shape_cold": [
        {"shape": {"latent": 64}, "compile_s": 70.0},
        {"shape": {"latent": 48}, "compile_s": 61.0, "compiled_by": "warmer", "waited_for_warmer_s": 0.0},
        {"shape": {"latent": 32}, "compile_s": 50.0, "waited_for_warmer_s": 3.0, "warmer": "not used: it failed: oom: x"}]}
    text = warmers.summary(row)
    assert text.startswith("1 of its 3 shapes compiled by shape warmers beside its first (the cold phase took 81 s")
    assert "shape {'latent': 32}: warmer not used: it failed: oom" in text
    assert warmers.summary({"per_shape_cold": [{"shape": {}, "compile_s": 1.0}]}) is None


class _FakeChild:
    """Stands in for runner.ServedChild: names its result file as it does, starts nothing."""

    def __init__(self, job, workdir, name, cache_root, timeout_s):
        self.job = dict(job, out=str(Path(workdir) / f"{name}.result.json"))
        self.cache_root = cache_root
        self.proc = type("P", (), {"pid": os.getpid()})()

    def close(self):
        pass


_JOB = {"harness": {"device": "cuda", "shapes": [{"size": 16}, {"size": 8}]}, "backend": "inductor"}


def test_a_warmers_cache_folder_starts_empty_when_a_twin_is_started_again(tmp_path, monkeypatch):
    """An early anchor ended and restarted reuses its warmers' names: the first one's compiled code
    must not be found by the second, whose compile would then read as a cache load."""
    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _FakeChild)
    monkeypatch.setattr(warmers, "device_room", lambda device: None)
    old = tmp_path / "caches" / "whole+static.warm-1" / "inductor"
    old.mkdir(parents=True)
    (old / "entry").write_text("the dropped twin's")
    v = Variant("whole+static", tmp_path, warm_shapes=True)
    children, extra = warmers.spawn(_JOB, v, tmp_path, tmp_path / "caches" / "whole+static", Options(warm_shapes=True))
    assert [c.cache_root.name for c in children] == ["whole+static.warm-1"]
    assert not old.exists() and extra["warmers"]["1"]["cache"] == str(tmp_path / "caches" / "whole+static.warm-1")


def test_no_warmers_where_the_caches_are_off_or_the_device_is_short_of_memory(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _FakeChild)
    v = Variant("whole+static", tmp_path, warm_shapes=True)
    monkeypatch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    assert warmers.warmed_shapes(v, Options(warm_shapes=True), "cuda", 3) == []
    monkeypatch.delenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (40 << 30, 100 << 30))
    assert warmers.device_room("cuda") == "40.0 GiB of 100.0 GiB free on the device, under 50%"
    short = "40.0 GiB of 100.0 GiB free on the device, under 50%; its 2 shapes compiled one after the other"
    assert warmers.spawn(_JOB, v, tmp_path, tmp_path / "c", Options(warm_shapes=True)) == ([], {"warmers_not_started": short})
    # the search.log line of the twin says so (what it said nothing of before)
    assert warmers.summary({"per_shape_cold": [{"shape": {}, "compile_s": 1.0}], "warmers_not_started": short}) == (
        f"shape warmers not started: {short}")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (60 << 30, 100 << 30))
    assert warmers.device_room("cuda") is None and warmers.device_room("cpu") is None


def test_a_pid_given_to_another_process_counts_as_the_warmers_end():
    me = warmers._start_time(os.getpid())
    assert me is not None
    assert warmers._ended(os.getpid(), me) is False
    assert warmers._ended(os.getpid(), str(int(me) + 1)) is True


def test_a_cache_copy_that_fails_leaves_no_temporary_file_and_the_calls_hits_decide(tmp_path, monkeypatch):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_text("kernel")

    def broken(a, b):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        warmers._copy_new(str(src), str(dst))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    # part of the cache may be in: with no hit the call compiled and says why; with hits, the warmer's
    warmed = {"waited_s": 0.0, "entry": {"compile_s": 9.0}, "copy_error": "disk full"}
    entry = {"compile_s": 4.0}
    warmers.credit(entry, warmed, hits=0)
    assert entry["compile_s"] == 4.0 and entry["warmer"] == "not used: its compile cache could not be copied: disk full"
    entry = {"compile_s": 0.3}
    warmers.credit(entry, warmed, hits=2)
    assert entry["compile_s"] == 9.0 and entry["compiled_by"] == "warmer"


def test_a_twin_whose_warmers_did_not_start_for_memory_carries_why_to_its_row(tmp_path, monkeypatch):
    from rewriter.engine import measure

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _FakeChild)
    monkeypatch.setattr(warmers, "device_room", lambda device: "10.0 GiB of 100.0 GiB free on the device, under 50%")
    v = Variant("whole+static", tmp_path, warm_shapes=True)
    child = measure.start_cold(dict(_JOB, harness=dict(_JOB["harness"], file="harness.py")), v, tmp_path, Options(warm_shapes=True))
    assert child.warmers == () and child.warmers_not_started.startswith("10.0 GiB of 100.0 GiB free")
    assert "warmers_not_started" not in child.job  # what the child process is sent stays as before
