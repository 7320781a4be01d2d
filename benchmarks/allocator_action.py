"""Does the allocator action, as ``stackpart rewrite`` writes it, remove the fragmentation OOM?

Copies fixtures/workloads/fragmentation to a temp dir, runs its entry point (``python train.py``,
WORKLOAD_SIZE=large: 10 steps alternating 12 and 16 buffers per call under the harness's 2 GiB
cap), applies a plan with the one action ``allocator`` at ``train.py::main`` (``stackpart
rewrite --apply --no-validate``), and runs it again. Needs a CUDA GPU:

    OUT=/tmp/a python benchmarks/allocator_action.py     # writes $OUT/allocator_action.json

Expected (benchmarks/alloc_sim_fragmentation.py): before, an OOM on the first step with the
free memory stranded in split segments; after, all steps run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = """version: 1
actions:
  - action: allocator
    target: train.py::main
    why: fragmentation OOM (benchmarks/diagnose_workloads.py, fragmentation)
"""


def run_entry(src: Path) -> dict:
    code = (
        "import torch, train\n"
        "try:\n"
        "    train.main()\n"
        "except torch.OutOfMemoryError as exc:\n"
        "    print('OOM:', str(exc).split(' If reserved')[0]); raise SystemExit(3)\n"
        "print('ok: max reserved MiB', torch.cuda.max_memory_reserved() // 2**20, 'max allocated MiB', torch.cuda.max_memory_allocated() // 2**20)\n"
    )
    env = dict(os.environ, WORKLOAD_SIZE="large")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=src, env=env, capture_output=True, text=True, timeout=300)
    return {"rc": proc.returncode, "said": (proc.stdout.strip().splitlines() or [proc.stderr.strip()[-300:]])[-1]}


def main() -> int:
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "fragmentation"
        shutil.copytree(ROOT / "fixtures" / "workloads" / "fragmentation", src)
        (Path(tmp) / "plan.yaml").write_text(PLAN)
        before = run_entry(src)
        cli = [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))", "rewrite", "--plan", str(Path(tmp) / "plan.yaml"), str(src)]
        diff = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True).stdout
        rw = subprocess.run([*cli, "--apply", "--no-validate"], cwd=ROOT, capture_output=True, text=True)
        after = run_entry(src)
        result = {"before": before, "rewrite_rc": rw.returncode, "diff": diff, "after": after}
    (out / "allocator_action.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if before["rc"] == 3 and rw.returncode == 0 and after["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
