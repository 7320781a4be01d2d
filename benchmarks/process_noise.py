"""How much one timed process's median differs from another's running the same program, under
each of the engine's core-pinning modes (``Options.pin``: ``off``, ``own``, ``shared``).

The search times every plan in two processes and takes the spread between them as its noise band
(``rewriter.engine.noise.process_noise``). H200 run 24 saw the same eager HF Llama (16 layers,
hidden 2048, bf16) at 8x384 run 14.9 ms in one process and 19.3 in another, in a search where
each process's main thread had its own core: host-heavy plans (as is, per-block) differ by process,
GPU-bound ones do not. This script runs ``--procs`` identical as-is processes of that model per
mode through the engine's own ``measure`` (the same children, the same interleaved rounds and
blocked samples the search uses) and reports, per mode and shape, every process's median and the
spread: max/min and the median |ln(m_i/m_j)| over process pairs, the figure ``process_noise``
reads.

    python benchmarks/process_noise.py                 # H200: $OUT/process_noise.{json,md}
    python benchmarks/process_noise.py --smoke         # CPU dry run, tiny config
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
OUT = Path(os.environ.get("OUT", "out"))


def spread(medians: list[float]) -> dict:
    """max/min and the median |ln(m_i/m_j)| over pairs of ``medians`` (ms)."""
    logs = [abs(math.log(a / b)) for a, b in itertools.combinations(medians, 2) if a > 0 and b > 0]
    return {"max_over_min": max(medians) / min(medians), "median_abs_log": statistics.median(logs) if logs else None}


def one_mode(mode: str, src: Path, shapes: list[dict], device: str, dtype: str, procs: int, budget_s: float) -> dict:
    from rewriter.engine.measure import measure
    from rewriter.engine.options import Options, Variant
    from rewriter.plan import Harness

    spec = Harness(file="harness.py", shapes=shapes, device=device, dtype=dtype)
    variants = [Variant("eager", src, judged=False)] + [Variant(f"copy{k}", src, judged=False) for k in range(1, procs)]
    opts = Options(backend="eager", replicates=1, pin=mode, warmup=3, reps=30, budget_s=budget_s, parallel_cold=1)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"noise-{mode}-") as work:
        m = measure(spec, variants, opts, Path(work))
    res: dict = {"mode": mode, "wall_s": round(time.perf_counter() - t0, 1), "errors": m.errors, "notes": m.notes, "shapes": []}
    for row in m.timing:
        med = {n: t["median_ms"] for n, t in row["timing"].items() if t.get("n")}
        res["shapes"].append({"shape": row["shape"], "median_ms": med, **(spread(list(med.values())) if len(med) > 1 else {})})
    return res


def main(argv: list[str]) -> int:
    import argparse

    from diagnose_hf import build_src, child_env

    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--modes", default="off,own,shared")
    ap.add_argument("--budget", type=float, default=6.0, help="timing seconds per shape")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="process-noise-"))
    device = "cpu" if args.smoke else "cuda"
    src = build_src(work / "src", "llama", smoke=args.smoke, device=device)
    os.environ.update(child_env(args.smoke, work))
    shapes = [{"batch": 2, "seq": 16}, {"batch": 2, "seq": 12}] if args.smoke else [{"batch": 8, "seq": 512}, {"batch": 8, "seq": 384}]
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "procs": args.procs, "shapes": shapes, "modes": []}
    try:
        import torch

        out["torch"] = torch.__version__
        out["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    except Exception:
        pass
    for mode in args.modes.split(","):
        out["modes"].append(one_mode(mode, src, shapes, device, "float32" if args.smoke else "bfloat16", args.procs, args.budget))
        (OUT / "process_noise.json").write_text(json.dumps(out, indent=1, default=str))
    lines = ["# process_noise", "", f"{out.get('device')}, torch {out.get('torch')}, {args.procs} identical as-is processes per mode", "",
             "| mode | shape | per-process medians ms | max/min | median abs ln ratio |", "|---|---|---|---|---|"]
    for r in out["modes"]:
        for s in r["shapes"]:
            meds = ", ".join(f"{v:.2f}" for v in s["median_ms"].values())
            lines.append(f"| {r['mode']} | {s['shape']} | {meds} | {s.get('max_over_min', 0):.3f} | {s.get('median_abs_log') or 0:.4f} |")
        if r["errors"]:
            lines.append(f"| {r['mode']} | errors | {'; '.join(r['errors'])[:300]} | | |")
    (OUT / "process_noise.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
