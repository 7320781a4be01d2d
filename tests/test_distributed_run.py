"""The distributed path end to end on CPU: torchrun launches 2 gloo processes, each rank writes
its trace and step times, and the merge diagnoses an all-reduce-bound step (large gradients,
tiny compute) as collective-bound and a compute-bound one as not. Also: the FSDP2/DDP wrapping
of the transformer fixtures, and bad input failing before anything is launched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.distributed.report import markdown
from rewriter.errors import StackpartError
from rewriter.plan import Harness, load_plan, parse_plan

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "distributed"


def _spec(case: str) -> Harness:
    spec = load_plan(FIXTURES / case / "plan.yaml").plan.harness
    assert spec is not None
    return spec


@pytest.mark.slow
def test_gloo_run_tells_all_reduce_bound_from_compute_bound(tmp_path: Path) -> None:
    """Two torchrun launches (~15-25 s each on 2 shared cores). The all-reduce-bound step
    all-reduces a 64 MB dense gradient that takes almost no arithmetic to produce; the
    compute-bound one reduce-scatters 1 MB after ~0.25 s of GEMMs (8192 tokens: at 2048 the
    collective's latency on two contended cores read as 27% exposed, past the 25% threshold). The compute-bound run uses FSDP2,
    so both wrappers' code paths run."""
    from rewriter.distributed import run_distributed

    bound = run_distributed(_spec("allreduce_bound"), FIXTURES / "allreduce_bound" / "before", 2,
                            tmp_path / "ar", warmup=1, steps=2)
    if not bound.collective_bound:
        # the exposed share is a CPU timing of two gloo ranks; with the suite's other xdist worker
        # on the same two cores it measured 19% once (threshold 25%): measure it once more
        bound = run_distributed(_spec("allreduce_bound"), FIXTURES / "allreduce_bound" / "before", 2,
                                tmp_path / "ar", warmup=1, steps=2)
    compute = run_distributed(_spec("compute_bound"), FIXTURES / "compute_bound" / "before", 2,
                              tmp_path / "cb", wrap="fsdp2", warmup=1, steps=2)
    if compute.collective_bound:
        # the same CPU timing the other way: with the other xdist worker busy, one rank's wait for
        # its peer's GEMMs read as 25% exposed communication once (at the threshold): once more
        compute = run_distributed(_spec("compute_bound"), FIXTURES / "compute_bound" / "before", 2,
                                  tmp_path / "cb", wrap="fsdp2", warmup=1, steps=2)

    assert bound.backend == "gloo" and bound.wrap == "ddp" and bound.nproc == 2
    assert bound.collective_bound, markdown(bound)
    assert bound.dominant is not None and bound.dominant.kind == "all_reduce"
    assert bound.dominant.calls_per_step == 1  # one 64 MB parameter: one bucket
    assert bound.grad_bytes >= bound.largest_grad_bytes > 60 * 2**20
    assert bound.suggestions, "a collective-bound step gets plan entries"
    parse_plan(json.dumps({"version": 1, "actions": bound.suggestions}))  # they load as a plan

    assert compute.wrap == "fsdp2"
    assert not compute.collective_bound, markdown(compute)
    assert compute.suggestions == []
    assert {c.kind for c in compute.collectives} >= {"all_gather"}  # FSDP2 gathers parameters
    assert compute.exposed_share < bound.exposed_share

    for out, f in ((tmp_path / "ar", bound), (tmp_path / "cb", compute)):
        assert [r.rank for r in f.ranks] == [0, 1]
        assert all(r.step_s and r.step_s > 0 and r.step_us > 0 for r in f.ranks)
        for rank in (0, 1):
            steps = json.loads((out / f"rank{rank}.steps.json").read_text())
            assert steps["rank"] == rank and steps["world_size"] == 2 and len(steps["step_s"]) == 2
            trace = json.loads((out / f"rank{rank}.trace.json").read_text())
            assert trace["distributedInfo"]["rank"] == rank
        data = json.loads((out / "findings.json").read_text())
        assert data["verdict"] == f.verdict and data["thresholds"]["straggler_share"] == 0.10
        assert (out / "findings.md").read_text().startswith(f"# Collectives on the critical path: {f.verdict}")
        merged = json.loads((out / "merged.trace.json").read_text())
        names = {e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name" and e.get("ph") == "M"}
        assert any(n.startswith("rank 0") for n in names) and any(n.startswith("rank 1") for n in names)


@pytest.fixture
def one_rank_group():
    """A 1-process gloo group in this process: enough to wrap a model in DDP or FSDP2."""
    import torch.distributed as dist

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("case", ["ddp", "fsdp2"])
def test_transformer_fixtures_wrap_and_train(case: str, one_rank_group) -> None:
    import torch

    from rewriter.distributed.launch import _harness_defaults
    from rewriter.distributed.worker import shard_units, wrap_model
    from rewriter.harness import build, call_model, load_harness

    spec, src = _spec(case), FIXTURES / case / "before"
    defaults = _harness_defaults(spec, src)
    assert defaults["wrap"] == case
    model, inputs = build(load_harness(spec, src))
    blocks = shard_units(model)
    assert len(blocks) == 2 and all(type(b).__name__ == "Block" for b in blocks)
    wrapped = wrap_model(model, defaults["wrap"], defaults.get("settings", {}), None)
    if case == "fsdp2":
        from rewriter.distributed.worker import fully_shard_fn

        fully_shard_fn()
        assert all("FSDP" in type(b).__name__ for b in blocks) and "FSDP" in type(wrapped).__name__
    else:
        assert type(wrapped).__name__ == "DistributedDataParallel"
    loss = call_model(wrapped, inputs).float().mean()
    loss.backward()
    assert all(p.grad is not None for p in wrapped.parameters())
    assert torch.isfinite(loss)


def test_bad_input_fails_before_launching(tmp_path: Path) -> None:
    from rewriter.distributed import run_distributed

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "ddp" / "before", src)
    spec = _spec("ddp")
    with pytest.raises(StackpartError, match="at least 2 processes"):
        run_distributed(spec, src, 1, tmp_path / "out")
    with pytest.raises(StackpartError, match="unknown wrapper 'zero3'"):
        run_distributed(spec, src, 2, tmp_path / "out", wrap="zero3")
    with pytest.raises(StackpartError, match="'gradient_accumulation' is advice for your training loop"):
        run_distributed(spec, src, 2, tmp_path / "out", settings={"gradient_accumulation": 4})
    with pytest.raises(StackpartError, match="'reshard_after_forward' is not a ddp setting"):
        run_distributed(spec, src, 2, tmp_path / "out", settings={"reshard_after_forward": False})
    (src / "harness.py").write_text((src / "harness.py").read_text() + "\nraise RuntimeError('boom')\n")
    with pytest.raises(StackpartError) as err:
        run_distributed(spec, src, 2, tmp_path / "out")
    assert "boom" in err.value.message and err.value.line is not None
    cuda = spec.model_copy(update={"device": "cuda"})
    import torch

    if torch.cuda.device_count() < 2:
        with pytest.raises(StackpartError, match="needs 2 GPUs"):
            run_distributed(cuda, FIXTURES / "ddp" / "before", 2, tmp_path / "out")
    assert not (tmp_path / "out").exists(), "nothing written for bad input"


def test_timeout_ends_torchrun_and_its_workers(tmp_path: Path, monkeypatch) -> None:
    """A hung run must not leave ranks behind: the whole process group is ended."""
    import os
    import sys

    from rewriter.distributed.launch import _run_torchrun

    pidfile = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    with pytest.raises(StackpartError, match="did not finish in 2 s"):
        _run_torchrun([sys.executable, "-c", script], dict(os.environ), 2)
    child = int(pidfile.read_text())
    import time

    def alive(pid: int) -> bool:  # a zombie waiting for init to reap it is not running
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return False
        return state not in ("Z", "X")

    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the worker outlived the timeout")
