"""The whole ladder on a ~1B-parameter Llama-style model on one GPU, timed; the plan rewritten.

Run from the repository root on a machine with one CUDA GPU (H200 reference):

    python benchmarks/diagnose_llama.py      # writes $OUT/diagnose_llama.{json,md} and the report
    python benchmarks/diagnose_llama.py --smoke   # CPU dry run on the small config

Model: ``fixtures/workloads/llama`` at ``WORKLOAD_SIZE=large`` (16 layers, hidden 2048, GQA 16/8
heads, SwiGLU 5632, vocab 32000: ~1.0B parameters), bf16, inference, shapes batch 8 x seq 512
(reference) and 8 x 384; compile candidates measured with Inductor from cold caches. Targets:
the whole ladder within 180 s; the profiler's own overhead is reported (profiled vs unprofiled
step). The plan is then rewritten with ``stackpart rewrite`` (diff saved). transformers is not
needed. Expected wall time: ~2-3 minutes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "fixtures" / "workloads" / "llama"
OUT = Path(os.environ.get("OUT", "out"))
BUDGET_S = 180.0


def main(argv: list[str]) -> int:
    """``--smoke``: a CPU dry run on the small config (checks the script, not the budget)."""
    smoke = "--smoke" in argv
    os.environ["WORKLOAD_SIZE"] = "small" if smoke else "large"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cold-"))
    sys.path.insert(0, str(ROOT))
    import torch

    from rewriter.diagnose.runner import diagnose
    from rewriter.plan import Amortization, Harness

    if not smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke for a CPU dry run)", file=sys.stderr)
        return 2
    out = OUT / "llama"
    out.mkdir(parents=True, exist_ok=True)
    if smoke:
        spec = Harness(file="harness.py", shapes=[{"batch": 2, "seq": 32}, {"batch": 2, "seq": 24}], device="cpu")
    else:
        spec = Harness(file="harness.py", shapes=[{"batch": 8, "seq": 512}, {"batch": 8, "seq": 384}], mode="inference", dtype="bfloat16", device="cuda")
    t0 = time.perf_counter()
    outcome = diagnose(spec, SRC, out / "plan.yaml", report_dir=out, backend="eager" if smoke else "inductor", amortization_spec=Amortization(runs=1_000_000, restarts=30), timeout_s=170, steps=2)
    wall = time.perf_counter() - t0
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))", "rewrite", "--plan", str(out / "plan.yaml"), str(SRC)],
        cwd=ROOT, capture_output=True, text=True,
    )
    rc = proc.returncode
    diff = proc.stdout + (proc.stderr if rc else "")
    (out / "plan.diff").write_text(diff)
    report = json.loads((out / "report.json").read_text())
    rungs = {r["name"]: r for r in report["rungs"]}
    dt = rungs.get("device_time", {}).get("measurement", {})
    params = None
    try:
        sys.path.insert(0, str(SRC))
        from harness import build_model  # noqa: E402

        params = sum(p.numel() for p in build_model().parameters())
    except Exception:
        pass
    payload = {
        "device": "cpu (smoke)" if smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "params": params,
        "wall_s": round(wall, 1),
        "within_budget": wall <= BUDGET_S,
        "profiler_overhead": dt.get("profiler_overhead"),
        "profiled_step_ms": dt.get("profiled_step_ms"),
        "eager_step_ms": dt.get("eager_step_ms"),
        "rung_seconds": {n: r["seconds"] for n, r in rungs.items()},
        "verdicts": {n: r.get("verdict") or r.get("reason") for n, r in rungs.items()},
        "actions": [f"{a.action} {a.target}" for a in outcome.plan.actions],
        "notes": outcome.notes,
        "rewrite_rc": rc,
    }
    (OUT / "diagnose_llama.json").write_text(json.dumps(payload, indent=2))
    md = [
        f"# diagnose on a Llama-style model ({(params or 0) / 1e9:.2f}B params, 16 layers, hidden 2048, bf16, 8x512) on {payload['device']}",
        "",
        f"- whole ladder: **{payload['wall_s']} s** (budget {BUDGET_S:.0f} s: {'met' if payload['within_budget'] else 'MISSED'})",
        f"- profiler overhead: {dt.get('profiler_overhead')} (profiled step {dt.get('profiled_step_ms')} ms vs eager {dt.get('eager_step_ms')} ms)",
        f"- `stackpart rewrite` exit code: {rc} (0 = diff printed; diff in llama/plan.diff)",
        "",
        "| rung | seconds | verdict |",
        "|---|---|---|",
    ]
    md += [f"| {n} | {payload['rung_seconds'][n]} | {str(v).replace('|', '/')} |" for n, v in payload["verdicts"].items()]
    md += ["", "Plan actions:", ""] + [f"- {a}" for a in payload["actions"]] + [""] + [f"- note: {n}" for n in outcome.notes]
    md += ["", "```diff", diff.rstrip(), "```"]
    (OUT / "diagnose_llama.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if rc == 0 and payload["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
