"""All diagnose workloads on one GPU: does each get the verdict and action its ceiling calls for?

Run from the repository root on a machine with one CUDA GPU (H200 reference):

    python benchmarks/diagnose_workloads.py            # writes $OUT/diagnose_workloads.{json,md}
    python benchmarks/diagnose_workloads.py --smoke graph_break   # CPU dry run of the script

Each workload of ``fixtures/workloads/`` (``WORKLOAD_SIZE=large``, bf16) runs the whole ladder
in its own subprocess (``stackpart diagnose``, Inductor for the measured compiles) and the table
checks the rung verdict and the plan action the workload was built to provoke. Expected wall
time: about 3-4 minutes (9 workloads, ~20 s each including Inductor compiles).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "fixtures" / "workloads"
OUT = Path(os.environ.get("OUT", "out"))

# (name, GPU shapes, extra flags)
CASES = [
    ("launch_bound", ["batch=2"], []),
    ("fusible", ["batch=64,seq=1024"], []),
    ("gemm_bound", ["batch=8192"], []),
    ("dominant_op", ["batch=64"], []),
    ("host_stall", ["batch=32"], []),
    ("graph_break", ["batch=64,seq=512"], []),
    ("recompile_storm", ["batch=16,seq=256", "batch=16,seq=384", "batch=16,seq=520", "batch=16,seq=800"], []),
    ("instance_recompiles", ["batch=32768"], []),
    ("fragmentation", ["batch=8,steps=12", "batch=8,steps=16", "batch=8,steps=20"], []),
]


def rung(report: dict, name: str) -> dict:
    return next((r for r in report.get("rungs", []) if r["name"] == name), {})


def actions(plan: dict | None) -> list[dict]:
    return list((plan or {}).get("actions") or [])


def check(name: str, report: dict, plan: dict | None) -> tuple[bool, str]:
    """(verdict right and action right, what was checked)."""
    acts = actions(plan)
    kinds = {(a["action"], a["target"]) for a in acts}
    m = lambda r: rung(report, r).get("measurement", {})  # noqa: E731
    if name == "launch_bound":
        ok = m("batch_scaling").get("fixed_share", 0) >= 0.15 and any(
            a["action"] == "compile" and a.get("strategy") == "whole" and a.get("options", {}).get("mode") == "reduce-overhead" for a in acts
        )
        return ok, "batch scaling launch-bound; compile whole + reduce-overhead"
    if name == "fusible":
        ok = m("op_mix").get("fusible_share", 0) >= 0.30 and ("compile", "model.py::NormBlock") in kinds
        return ok, "op mix fusible; compile model.py::NormBlock (region)"
    if name == "gemm_bound":
        ok = m("op_mix").get("gemm_share", 0) >= 0.80 and not any(a["action"] == "compile" for a in acts)
        return ok, "op mix GEMM-dominated; no compile"
    if name == "dominant_op":
        dom = m("top_ops").get("dominant") or {}
        ok = "topk" in dom.get("op", "") and any(a["action"] == "kernel" and a["call"] == "torch.topk" for a in acts)
        return ok, "top ops: topk dominant; kernel torch.topk"
    if name == "host_stall":
        g = rung(report, "gaps")
        ok = m("gaps").get("host_stall_share", 0) >= 0.05 and any(f["kind"] == "host_sync" and f["file"] == "model.py" for f in g.get("findings", []))
        return ok, "gaps: host stall >= 5% attributed to model.py (.item())"
    if name == "graph_break":
        ok = m("graph_breaks").get("graph_break_count", 0) >= 1 and ("disable", "model.py::route") in kinds
        return ok, "graph break in route; disable model.py::route"
    if name == "recompile_storm":
        ok = m("recompiles").get("recompiles", 0) >= 1 and any(a["action"] == "mark_dynamic" for a in acts)
        return ok, "recompiles across shapes; mark_dynamic at block input"
    if name == "instance_recompiles":
        ok = m("instance_recompiles").get("recompiles", 0) >= 1 and ("disable", "model.py::Block.residual_scale") in kinds
        return ok, "per-instance recompiles; disable model.py::Block.residual_scale"
    if name == "fragmentation":
        ok = rung(report, "memory").get("implies", "").startswith("allocator") and any(a["action"] == "allocator" for a in acts)
        return ok, "memory fragmenting; allocator"
    return False, "?"


def main(argv: list[str]) -> int:
    """``--smoke NAME...``: a CPU dry run of the script on the small sizes (no GPU needed)."""
    import torch

    smoke = "--smoke" in argv
    only = [a for a in argv if not a.startswith("--")]
    if not smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke for a CPU dry run)", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WORKLOAD_SIZE="small" if smoke else "large", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    for name, shapes, extra in CASES:
        if only and name not in only:
            continue
        out = OUT / "workloads" / name
        cmd = [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))",
               "diagnose", str(WORKLOADS / name), "-o", str(out / "plan.yaml"), "--report-dir", str(out), "--timeout", "120", "--steps", "3", *extra]
        if smoke:
            cmd += ["--harness", str(WORKLOADS / name / "plan.yaml")]
        else:
            cmd += ["--harness", "harness.py", "--device", "cuda", "--dtype", "bfloat16"]
            for s in shapes:
                cmd += ["--shape", s]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
            rc, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            rc, err = 124, "timeout after 240 s"
        wall = time.perf_counter() - t0
        (out).mkdir(parents=True, exist_ok=True)
        (out / "stderr.txt").write_text(err or "")
        report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
        plan = yaml.safe_load((out / "plan.yaml").read_text()) if (out / "plan.yaml").is_file() else None
        ok, what = check(name, report, plan) if rc == 0 else (False, "diagnose failed")
        verdicts = {r["name"]: r.get("verdict") or r.get("reason") for r in report.get("rungs", [])}
        row = {
            "workload": name,
            "rc": rc,
            "pass": ok,
            "expected": what,
            "wall_s": round(wall, 1),
            "actions": [f"{a['action']} {a['target']}" + (f" ({a.get('strategy', 'region')}, {a.get('options', {}).get('mode', 'default')})" if a["action"] == "compile" else "") for a in actions(plan)],
            "notes": report.get("notes", []),
            "verdicts": verdicts,
            "error": report.get("error") or (err.strip().splitlines()[-1] if rc and err and err.strip() else None),
        }
        rows.append(row)
        print(f"{name:22s} rc={rc} pass={ok} {wall:.0f}s  {row['actions']}", flush=True)
    payload = {"torch": torch.__version__, "device": "cpu (smoke)" if smoke else torch.cuda.get_device_name(), "rows": rows}
    (OUT / "diagnose_workloads.json").write_text(json.dumps(payload, indent=2))
    md = [f"# diagnose workloads on {payload['device']} (torch {payload['torch']})", "",
          "| workload | pass | expected | plan actions | key verdicts | wall s |", "|---|---|---|---|---|---|"]
    keys = {"launch_bound": "batch_scaling", "fusible": "op_mix", "gemm_bound": "op_mix", "dominant_op": "top_ops", "host_stall": "gaps",
            "graph_break": "graph_breaks", "recompile_storm": "recompiles", "instance_recompiles": "instance_recompiles", "fragmentation": "memory"}
    for r in rows:
        v = r["verdicts"].get(keys[r["workload"]], r["error"] or "")
        md.append(f"| {r['workload']} | {'PASS' if r['pass'] else 'FAIL'} | {r['expected']} | {'<br>'.join(r['actions']) or '(none)'} | {str(v).replace('|', '/')} | {r['wall_s']} |")
    md += ["", "Full per-rung verdicts: diagnose_workloads.json; per-workload report.md/report.json/trace.json under workloads/<name>/."]
    (OUT / "diagnose_workloads.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
