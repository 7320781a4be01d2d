"""diagnose on timm models as their users have them (issues 13 and 14), on one GPU.

timm ResNet-50 and ViT-B/16 (``timm.create_model(name, pretrained=False)``: random weights, no
download), bf16, two batch sizes (32 and 16 at 224 px), Inductor. The blocks live in the installed
timm, so the plan targets them by import path and applies them from the harness's model function
(the plan's site). Recorded per model: the granularity rung (blocks across every stage, their summed
share, distinct parameter shapes), the per-instance rung (graphs per shape, the recompile limit as
Dynamo reports it), the search's candidates and choice, the plan, and whether ``rewrite`` takes it.

timm needs torchvision, whose PyPI wheels do not load with the CPU torch of the development
machine, so this runs only on the GPU machine (timm installed there):
``OUT=$OUT python3 benchmarks/diagnose_timm.py`` (about 3 minutes a model; ``--only resnet50``).
Writes ``$OUT/diagnose_timm.{json,md}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out"))
CLI = "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))"
MODELS = {"resnet50": "resnet50", "vit_b16": "vit_base_patch16_224"}

HARNESS = '''"""Harness: timm {name} from the installed package, random weights."""
import timm
import torch


def build_model():
    torch.manual_seed(0)
    return timm.create_model({name!r}, pretrained=False).eval()


def make_inputs(batch: int = 32):
    g = torch.Generator().manual_seed(batch)
    return (torch.randn(batch, 3, 224, 224, generator=g),)
'''


def one(key: str, timeout: float, budget: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"timm-{key}-"))
    src = work / "src"
    src.mkdir()
    (src / "harness.py").write_text(HARNESS.format(name=MODELS[key]))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"), TRITON_CACHE_DIR=str(work / "triton"))
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", CLI, "diagnose", "--harness", "harness.py", str(src), "-o", str(work / "plan.yaml"),
           "--shape", "batch=32", "--shape", "batch=16", "--dtype", "bfloat16", "--device", "cuda",
           "--budget", str(budget), "--runs", "1000000", "--restarts", "30"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = 124, (exc.stderr or "") if isinstance(exc.stderr, str) else ""
    row: dict = {"model": MODELS[key], "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "stderr_tail": err[-2000:]}
    report = work / "stackpart-diagnose" / "report.json"
    if report.exists():
        data = json.loads(report.read_text())
        rungs = {r["name"]: r for r in data["rungs"]}
        for name in ("granularity", "instance_recompiles", "recompiles", "batch_scaling", "op_mix", "search"):
            r = rungs.get(name, {})
            m = r.get("measurement", {}) or {}
            if name == "search":
                m = {k: m.get(k) for k in ("chosen", "candidates", "pruned")}
            row[name] = {"status": r.get("status"), "verdict": r.get("verdict"), "measurement": m}
        row["notes"] = data.get("notes")
    if (work / "plan.yaml").exists():
        row["plan"] = (work / "plan.yaml").read_text()
        rw = subprocess.run([sys.executable, "-c", CLI, "rewrite", "--plan", str(work / "plan.yaml"), str(src)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
        row["rewrite_rc"] = rw.returncode
        row["diff_files"] = sorted({ln[6:] for ln in rw.stdout.splitlines() if ln.startswith("+++ b/")})
    return row


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--timeout", type=float, default=260.0)
    ap.add_argument("--budget", type=float, default=90.0)
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.time()
    rows = {}
    for key in args.only.split(","):
        try:
            rows[key] = one(key, args.timeout, args.budget)
        except Exception as exc:
            rows[key] = {"error": f"{type(exc).__name__}: {exc}"}
        (OUT / "diagnose_timm.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "models": rows}, indent=1, default=str))
    md = ["# diagnose_timm", ""]
    for key, row in rows.items():
        md += [f"## {key}", "", "```json", json.dumps({k: v for k, v in row.items() if k != "plan"}, indent=1, default=str)[:12000], "```"]
        if row.get("plan"):
            md += ["```yaml", row["plan"], "```"]
    (OUT / "diagnose_timm.md").write_text("\n".join(md) + "\n")
    print(json.dumps({k: {"rc": v.get("rc"), "wall_s": v.get("wall_s"), "granularity": (v.get("granularity") or {}).get("verdict")} for k, v in rows.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
