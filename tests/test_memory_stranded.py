"""The memory rung over a varied-length training sweep: a cache that converged on segments cut for
other lengths (no device allocation, no retry after the warm pass) holds far more than the longest
length needs alone, and that is fragmentation the allocator setting removes.

On CPU there is no CUDA allocator: the verdict is a pure function of recorded figures, and the
rung's glue runs the real harness (fixtures/workloads/varied_length_training, small lengths) with
the CUDA calls replaced by a fake allocator that strands memory as the best-fit model does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.diagnose.rungs import memory
from rewriter.diagnose.context import Context
from rewriter.diagnose.rungs.memory import STRANDED_SHARE, sweep_verdict
from rewriter.diagnose.session import Session
from rewriter.harness import load_harness, resolve_device
from rewriter.plan import load_plan

WORKLOAD = Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "varied_length_training"
LENGTHS = [517, 1024, 771, 2049, 1333, 640]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def converged(reserved: float, lengths: list[int] = LENGTHS) -> list[dict]:
    """Recorded sweep figures of a cache that converged in the warm pass: device allocations only
    in pass 0, the same ``reserved`` (MiB) after every later step."""
    out = []
    for p in range(4):
        for i, seq in enumerate(lengths):
            out.append({"pass": p, "index": i, "shape": {"batch": 8, "seq": seq}, "step_ms": 10.0,
                        "reserved_mib": reserved, "allocated_mib": 300.0, "unallocated_mib": reserved - 300.0,
                        "peak_reserved_mib": reserved, "peak_allocated_mib": 9988.0 * seq / 2049, "inactive_split_mib": 0.0,
                        "device_allocs": 10 if p == 0 else 0, "device_frees": 0, "alloc_retries": 0, "ooms": 0,
                        "device_counter": "num_device_alloc"})
    return out


def test_a_cache_cut_for_other_lengths_is_stranded_fragmentation():
    # the best-fit allocator model's figures (memory.STRANDED_SHARE): 15640 MiB held, 10038 alone
    steps = converged(15640.0)
    assert sweep_verdict(steps)["fragmenting"] is False  # the other rules see a converged cache
    v = sweep_verdict(steps, {"shape": {"batch": 8, "seq": 2049}, "reserved_mib": 10038.0})
    assert v["fragmenting"] and v["rule"] == "stranded" and v["stranded_mib"] == 5602.0
    assert "15640 MiB reserved" in v["reason"] and "needs 10038 MiB" in v["reason"] and "(+5602 MiB, 56%" in v["reason"]
    # within the share: no verdict; a one-shape sweep holds what its step holds: never stranded
    near = sweep_verdict(steps, {"shape": {"batch": 8, "seq": 2049}, "reserved_mib": 15640.0 / (1 + STRANDED_SHARE) + 1})
    assert near["fragmenting"] is False and 0 < near["stranded_mib"]
    one = sweep_verdict(converged(15640.0, [2049]), {"shape": {"batch": 8, "seq": 2049}, "reserved_mib": 10038.0})
    assert one["fragmenting"] is False and one["stranded_mib"] is None


class StrandingCache:
    """``torch.cuda`` of a caching allocator that keeps a segment cut for each length it served:
    after a step, reserved is the longest length's need plus half of every other length seen, the
    step's peak allocated its own length's need (MiB; need = 32 MiB per unit of sequence length).
    ``empty_cache`` returns the unused segments."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.last = 0

    def step(self, seq: int) -> None:
        self.seen.add(seq)
        self.last = seq

    def reserved(self) -> float:
        if not self.seen:
            return 0.0
        needs = sorted((8 * s * 4 for s in self.seen), reverse=True)
        return needs[0] + sum(needs[1:]) / 2

    def memory_stats(self, *a, **k) -> dict:
        r = int(self.reserved() * 2**20)
        return {"num_device_alloc": 0, "num_device_free": 0, "num_alloc_retries": 0, "num_ooms": 0,
                "reserved_bytes.all.current": r, "allocated_bytes.all.current": 0,
                "reserved_bytes.all.peak": r, "allocated_bytes.all.peak": 8 * self.last * 4 * 2**20}

    def empty_cache(self) -> None:
        self.seen.clear()


def session_of(tmp_path: Path, lengths: list[int]) -> Session:
    src = tmp_path / "varied"
    shutil.copytree(WORKLOAD, src)
    spec = resolve_device(load_plan(src / "plan.yaml").plan.harness)
    spec = spec.model_copy(update={"shapes": [{"batch": 2, "seq": s} for s in lengths]})
    return Session(load_harness(spec, src))


def test_the_rung_finds_stranded_memory_over_a_varied_length_training_sweep(tmp_path, monkeypatch):
    import torch

    session = session_of(tmp_path, [17, 33, 24, 65, 41, 20])
    assert session.spec.mode == "training"
    cache = StrandingCache()
    real_build = session.build

    def build(shape=None):  # the step of this shape is the next one the cache serves
        out = real_build(shape)
        cache.step((shape or session.spec.shapes[0])["seq"])
        return out

    monkeypatch.setattr(session, "build", build)
    monkeypatch.setattr(Session, "cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", cache.empty_cache)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "memory_stats", cache.memory_stats)
    r = memory.run(Context(session=session, out_dir=tmp_path))
    assert r.ok and r.implies == memory.IMPLIES, r.verdict
    assert r.verdict.startswith("fragmenting: the cache converged on segments cut for other shapes"), r.verdict
    m = r.measurement
    # the longest length ran alone from an empty cache: 8 x 65 x 4 MiB = 2080 MiB
    assert m["rule"] == "stranded" and m["largest_alone"]["shape"] == {"batch": 2, "seq": 65}
    assert m["largest_alone"]["reserved_mib"] == 2080.0 and m["stranded_mib"] == 8 * 4 * (41 + 33 + 24 + 20 + 17) / 2


def test_the_rung_on_cpu_is_skipped_and_says_so(tmp_path):
    r = memory.run(Context(session=session_of(tmp_path, [17, 33]), out_dir=tmp_path))
    assert r.status == "skipped" and r.verdict == "skipped: no CUDA"
