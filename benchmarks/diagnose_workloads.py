"""All diagnose workloads on one GPU: does each get the verdict and action its ceiling calls for?

Run from the repository root on a machine with one CUDA GPU (H200 reference):

    python benchmarks/diagnose_workloads.py                       # all 10, writes $OUT/diagnose_workloads.{json,md}
    python benchmarks/diagnose_workloads.py --only dominant_op,recompile_storm --timeout 60
    python benchmarks/diagnose_workloads.py --smoke --only graph_break   # CPU dry run of the script

Each workload of ``fixtures/workloads/`` (``WORKLOAD_SIZE=large``, bf16) runs the whole ladder
in its own subprocess (``stackpart diagnose``, Inductor for the measured compiles, 2 profiled
steps) and the table checks the rung verdict and the plan action the workload was built to
provoke; every workload but ``fragmentation`` must also *not* be called fragmenting.
``fragmentation`` runs out of memory under its cap with the free memory stranded in split
segments: diagnose must stop there with the allocator action planned (exit 1);
``fragmentation_fixed`` is the same workload with that action applied
(``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``): the whole ladder must run. Each row is
printed (and the JSON/Markdown rewritten) as soon as its workload finishes. A workload is killed
after ``--timeout`` seconds (default 60; fusible took 44 s on the H200 run 2) and the run starts
no workload after ``--budget`` seconds (default 250): expected wall time about 4-5 minutes for
all 10 (H200 run 2: 16-44 s each), at most budget + timeout; about 3 minutes for six.
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
    # one shape: the memory rung measures steady state at the reference shape, and every other
    # shape would be one more Inductor compile of a 12-20 iteration unrolled loop
    ("fragmentation", ["batch=8,steps=12"], ["--entry", "train.py::main"]),
    ("fragmentation_fixed", ["batch=8,steps=12"], ["--entry", "train.py::main"]),
]
#: Runs of a workload under another name: (its folder, extra environment).
VARIANTS = {"fragmentation_fixed": ("fragmentation", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})}
#: The exit code each workload's diagnose must end with (0 unless listed): 1 = plan written, the
#: ladder stopped at a fragmentation OOM.
EXPECTED_RC = {"fragmentation": 1}


def rung(report: dict, name: str) -> dict:
    return next((r for r in report.get("rungs", []) if r["name"] == name), {})


def actions(plan: dict | None) -> list[dict]:
    return list((plan or {}).get("actions") or [])


def check(name: str, report: dict, plan: dict | None) -> tuple[bool, str]:
    """(verdict right and action right, what was checked)."""
    acts = actions(plan)
    kinds = {(a["action"], a["target"]) for a in acts}
    m = lambda r: rung(report, r).get("measurement", {})  # noqa: E731
    fragmenting = rung(report, "memory").get("implies", "").startswith("allocator")
    if name != "fragmentation" and fragmenting:
        return False, "memory rung must not call it fragmenting"
    if name == "fragmentation_fixed":
        ok = report.get("complete") is True and rung(report, "memory").get("status") == "ok" and not any(a["action"] == "allocator" for a in acts)
        return ok, "with expandable_segments: whole ladder runs, no OOM, not fragmenting"
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
        # only the idle right after the syncs is theirs (the rest is the host launching)
        ok = m("gaps").get("after_sync_share", 0) >= 0.05 and any(f["kind"] == "host_sync" and f["file"] == "model.py" for f in g.get("findings", []))
        return ok, "gaps: idle after the .item() syncs >= 5% of the step, at model.py"
    if name == "graph_break":
        ok = m("graph_breaks").get("graph_break_count", 0) >= 1 and ("disable", "model.py::route") in kinds
        return ok, "graph break in route; disable model.py::route"
    if name == "recompile_storm":
        # Rung 10 picks the unit by the amortization rule's net saving. Per-block compile must
        # carry mark_dynamic at the block input; a whole-model compile (H200 run 3's choice)
        # relies on Dynamo's automatic dynamic shapes: one recompile, then a dynamic graph.
        per_block = ("compile", "model.py::Block") in kinds and any(a["action"] == "mark_dynamic" for a in acts)
        whole = ("compile", "model.py::SeqNet") in kinds
        ok = m("recompiles").get("recompiles", 0) >= 1 and (per_block or whole)
        return ok, "recompiles across shapes; compile per block + mark_dynamic at block input, or whole-model compile (automatic dynamic)"
    if name == "instance_recompiles":
        ok = m("instance_recompiles").get("recompiles", 0) >= 1 and ("disable", "model.py::Block.residual_scale") in kinds
        return ok, "per-instance recompiles; disable model.py::Block.residual_scale"
    if name == "fragmentation":
        ok = fragmenting and m("memory").get("source") == "oom" and ("allocator", "train.py::main") in kinds
        return ok, "fragmentation OOM; allocator at --entry train.py::main, ladder stopped (exit 1)"
    return False, "?"


def main(argv: list[str]) -> int:
    """``--only a,b``: these workloads; ``--timeout S``: per workload; ``--budget S``: start no
    workload after S seconds; ``--smoke``: CPU dry run on the small sizes (no GPU needed)."""
    import argparse

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per workload")
    ap.add_argument("--budget", type=float, default=250.0, help="start no workload after this many seconds")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("names", nargs="*", help="workload names (same as --only)")
    args = ap.parse_args(argv)
    only = {n for n in args.only.split(",") if n} | set(args.names)
    unknown = only - {c[0] for c in CASES}
    if unknown:
        print(f"unknown workload(s): {', '.join(sorted(unknown))}; known: {', '.join(c[0] for c in CASES)}", file=sys.stderr)
        return 2
    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke for a CPU dry run)", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WORKLOAD_SIZE="small" if smoke else "large", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    payload = {"torch": torch.__version__, "device": "cpu (smoke)" if smoke else torch.cuda.get_device_name(), "rows": []}
    started = time.perf_counter()
    for name, shapes, extra in CASES:
        if only and name not in only:
            continue
        left = args.budget - (time.perf_counter() - started)
        out = OUT / "workloads" / name
        out.mkdir(parents=True, exist_ok=True)
        if left <= 5:
            row = {"workload": name, "rc": None, "pass": False, "expected": "", "wall_s": 0.0, "actions": [], "notes": [], "verdicts": {}, "error": f"not run: --budget {args.budget:g} s spent"}
            payload["rows"].append(row)
            print(f"{name:22s} SKIPPED (budget spent)", flush=True)
            continue
        limit = min(args.timeout, left)
        folder, extra_env = VARIANTS.get(name, (name, {}))
        cmd = [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))",
               "diagnose", str(WORKLOADS / folder), "-o", str(out / "plan.yaml"), "--report-dir", str(out),
               "--timeout", str(max(10, int(limit) - 5)), "--steps", str(args.steps), *extra]
        if smoke:
            cmd += ["--harness", str(WORKLOADS / folder / "plan.yaml")]
        else:
            cmd += ["--harness", "harness.py", "--device", "cuda", "--dtype", "bfloat16"]
            for s in shapes:
                cmd += ["--shape", s]
        for stale in ("report.json", "plan.yaml"):
            (out / stale).unlink(missing_ok=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env={**env, **extra_env}, capture_output=True, text=True, timeout=limit)
            rc, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            err = (exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")) + f"\ntimeout after {limit:.0f} s"
        wall = time.perf_counter() - t0
        (out / "stderr.txt").write_text(err or "")
        report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
        plan = yaml.safe_load((out / "plan.yaml").read_text()) if (out / "plan.yaml").is_file() else None
        want = EXPECTED_RC.get(name, 0)
        ok, what = check(name, report, plan) if rc == want else (False, f"diagnose exited {rc}, expected {want}" if rc != 124 else f"timeout after {limit:.0f} s")
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
            "rung_seconds": {r["name"]: r.get("seconds") for r in report.get("rungs", [])},
            "error": report.get("error") or (err.strip().splitlines()[-1] if rc and err and err.strip() else None),
        }
        payload["rows"].append(row)
        print(f"{name:22s} rc={rc} {'PASS' if ok else 'FAIL'} {wall:5.1f}s  {'; '.join(row['actions']) or '(no actions)'}  [{what}]", flush=True)
        write(payload)
    write(payload)
    print(f"total {time.perf_counter() - started:.0f} s", flush=True)
    print((OUT / "diagnose_workloads.md").read_text())
    return 0 if payload["rows"] and all(r["pass"] for r in payload["rows"]) else 1


KEYS = {"launch_bound": "batch_scaling", "fusible": "op_mix", "gemm_bound": "op_mix", "dominant_op": "top_ops", "host_stall": "gaps",
        "graph_break": "graph_breaks", "recompile_storm": "recompiles", "instance_recompiles": "instance_recompiles", "fragmentation": "memory",
        "fragmentation_fixed": "memory"}


def write(payload: dict) -> None:
    """diagnose_workloads.json and .md under $OUT (rewritten after every workload)."""
    (OUT / "diagnose_workloads.json").write_text(json.dumps(payload, indent=2))
    md = [f"# diagnose workloads on {payload['device']} (torch {payload['torch']})", "",
          "| workload | pass | expected | plan actions | key verdict | memory verdict | wall s |", "|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        v = r["verdicts"].get(KEYS[r["workload"]], r["error"] or "")
        mem = r["verdicts"].get("memory", "")
        md.append(f"| {r['workload']} | {'PASS' if r['pass'] else 'FAIL'} | {r['expected']} | {'<br>'.join(r['actions']) or '(none)'} | {str(v).replace('|', '/')[:300]} | {str(mem).replace('|', '/')[:200]} | {r['wall_s']} |")
    md += ["", "Full per-rung verdicts and rung seconds: diagnose_workloads.json; per-workload report.md/report.json/trace.json under workloads/<name>/."]
    (OUT / "diagnose_workloads.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
