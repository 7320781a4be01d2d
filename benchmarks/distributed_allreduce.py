"""Benchmark for issue #7: does `diagnose --nproc 2` tell an all-reduce-bound step from a
compute-bound one on 2 GPUs with NCCL?

NEEDS 2 GPUs (NCCL). It could not run in the session that wrote it (only a single-H200 machine
was lent); on CPU, ``--cpu-smoke`` runs the same path with gloo and the CPU-sized fixtures.

Run (repo root as working directory, 2 x H200, torch >= 2.6)::

    OUT=$OUT python benchmarks/distributed_allreduce.py            # ~2-3 min
    OUT=/tmp/o python benchmarks/distributed_allreduce.py --cpu-smoke --only allreduce_bound,compute_bound

Workloads (fixtures/distributed/*/before, the ``build_model_gpu`` variants, bfloat16, training):

* ``allreduce_bound``: an embedding table of 1M x 256 read at 16 rows with dense gradients:
  512 MB of gradient, almost no arithmetic. Expected: collective-bound.
* ``compute_bound``: a 2048 -> 8192 -> 2048 MLP over 32k tokens: 64 MB of gradient under
  ~6.6 TFLOP per step. Expected: not collective-bound.
* ``ddp_gpt`` / ``fsdp2_gpt``: the small-transformer fixtures scaled up (8 layers, dim 1024,
  8 x 1024 tokens) under DDP and FSDP2: reported, no expectation.

Writes ``$OUT/distributed_allreduce.json`` and ``$OUT/distributed_allreduce.md`` (one row per
workload: verdict, exposed communication share, dominant collective with its share and overlap,
per-rank step time, stragglers, suggested plan entries) and per workload ``$OUT/<name>/``
(findings.md/json, steps JSON, gzipped rank traces). Exit 0 when both expectations hold, 1 when
one does not or fewer than 2 GPUs are visible (the JSON says which).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIX = ROOT / "fixtures" / "distributed"

#: name -> (fixture, GPU model callable, GPU shape, CPU shape, wrap, expected collective_bound)
WORKLOADS = {
    "allreduce_bound": ("allreduce_bound", "build_model_gpu", {"batch": 2, "seq": 8, "rows": 1048576},
                        {"batch": 2, "seq": 8}, "ddp", True),
    "compute_bound": ("compute_bound", "build_model_gpu", {"tokens": 32768, "dim": 2048},
                      {"tokens": 2048, "dim": 128}, "ddp", False),
    "ddp_gpt": ("ddp", "build_model_gpu", {"batch": 8, "seq": 1024, "vocab": 32000},
                {"batch": 4, "seq": 32}, "ddp", None),
    "fsdp2_gpt": ("fsdp2", "build_model_gpu", {"batch": 8, "seq": 1024, "vocab": 32000},
                  {"batch": 4, "seq": 32}, "fsdp2", None),
}


def _row(name: str, f, expected: bool | None, seconds: float) -> dict:
    d = f.dominant
    return {
        "workload": name,
        "wrap": f.wrap,
        "backend": f.backend,
        "verdict": f.verdict,
        "expected_collective_bound": expected,
        "holds": None if expected is None else f.collective_bound == expected,
        "exposed_share": round(f.exposed_share, 4),
        "dominant": None if d is None else {
            "kind": d.kind, "share_of_step": round(d.share_of_step, 4),
            "overlap_share": round(d.overlap_share, 4), "calls_per_step": d.calls_per_step,
        },
        "grad_mb": round(f.grad_bytes / 2**20, 1),
        "step_ms_per_rank": [round((r.step_s or 0) * 1e3, 3) for r in f.ranks],
        "exposed_ms_per_rank": [round(r.exposed_comm_us / 1e3, 3) for r in f.ranks],
        "stragglers": [s.rank for s in f.stragglers],
        "suggestions": [e["settings"] for e in f.suggestions],
        "thresholds": f.thresholds,
        "wall_s": round(seconds, 1),
    }


def _shrink(out: Path) -> None:
    """Keep the per-rank traces gzipped and drop the merged copy (result size limits)."""
    (out / "merged.trace.json").unlink(missing_ok=True)
    for trace in out.glob("rank*.trace.json"):
        with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace.unlink()


def _markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "# diagnose --nproc: all-reduce-bound vs compute-bound",
        "",
        f"{meta['nproc']} processes, {meta['device']}, torch {meta['torch']}"
        + (f", {meta['gpu']}" if meta.get("gpu") else "")
        + f"; collective-bound when exposed communication >= "
        f"{rows[0]['thresholds']['collective_bound_share']:.0%} of the step on every rank." if rows else "",
        "",
        "| workload | wrap | grad MB | verdict | expected | holds | exposed | dominant (share, overlap, calls) "
        "| step ms per rank | stragglers | suggested settings |",
        "|---|---|---:|---|---|---|---:|---|---|---|---|",
    ]
    for r in rows:
        d = r["dominant"]
        dom = "-" if d is None else f"{d['kind']} ({d['share_of_step']:.0%}, {d['overlap_share']:.0%}, {d['calls_per_step']:.0f})"
        exp = {True: "collective-bound", False: "not", None: "-"}[r["expected_collective_bound"]]
        holds = {True: "yes", False: "**no**", None: "-"}[r["holds"]]
        lines.append(
            f"| {r['workload']} | {r['wrap']} | {r['grad_mb']} | {r['verdict']} | {exp} | {holds} | "
            f"{r['exposed_share']:.0%} | {dom} | {', '.join(map(str, r['step_ms_per_rank']))} | "
            f"{r['stragglers'] or '-'} | {r['suggestions'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cpu-smoke", action="store_true", help="gloo on CPU with the CPU-sized fixtures")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)

    import torch

    from rewriter.distributed import run_distributed
    from rewriter.plan import load_plan

    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.cpu_smoke else "cuda"
    meta = {"nproc": args.nproc, "device": device, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    result: dict = {"meta": meta, "rows": []}
    if device == "cuda" and torch.cuda.device_count() < args.nproc:
        result["skipped"] = (f"needs {args.nproc} GPUs, {torch.cuda.device_count()} visible: "
                             "the multi-GPU claim is not measured (blocked)")
        (out / "distributed_allreduce.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "distributed_allreduce.md").write_text(f"# diagnose --nproc: not run\n\n{result['skipped']}\n")
        print(result["skipped"])
        return 1
    ok = True
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        case, model, gpu_shape, cpu_shape, wrap, expected = WORKLOADS[name]
        spec = load_plan(FIX / case / "plan.yaml").plan.harness
        if device == "cuda":
            spec = spec.model_copy(update={"model": model, "shapes": [gpu_shape], "dtype": "bfloat16", "device": "cuda"})
        else:
            spec = spec.model_copy(update={"shapes": [cpu_shape]})
        t0 = time.perf_counter()
        try:
            f = run_distributed(spec, FIX / case / "before", args.nproc, out / name, wrap=wrap,
                                warmup=3, steps=args.steps, with_stack=False, timeout_s=300)
        except Exception as exc:  # record and go on: one failed workload must not hide the others
            result["rows"].append({"workload": name, "error": f"{type(exc).__name__}: {exc}"})
            ok = ok and expected is None
            print(f"{name}: failed: {exc}")
            continue
        row = _row(name, f, expected, time.perf_counter() - t0)
        result["rows"].append(row)
        ok = ok and row["holds"] is not False
        _shrink(out / name)
        print(f"{name}: {f.verdict}, exposed {f.exposed_share:.0%}, {row['wall_s']} s")
    good = [r for r in result["rows"] if "error" not in r]
    result["claims_hold"] = ok
    (out / "distributed_allreduce.json").write_text(json.dumps(result, indent=2) + "\n")
    md = _markdown(good, meta) + "".join(f"\n- {r['workload']}: {r['error']}" for r in result["rows"] if "error" in r)
    (out / "distributed_allreduce.md").write_text(md)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
