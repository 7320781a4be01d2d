"""Does the step time of one compiled plan vary with the conditions its compile ran under?

The H200 runs 32-34 (BENCHMARKS.md) saw one candidate run 10-15% slow in *both* of its timed
processes in one diagnose run and not in the next, while the two processes agreed within 1%:
the second process is warm-started from the first one's compile caches, so whatever the compile
decided is shared by both. Inductor's runtime autotuning (``CachingAutotuner`` benchmarks a
kernel's Triton configs on its first launch and stores the winner as ``*.best_config`` in the
cache) is one such decision, and diagnose's search runs two cold phases at a time on one GPU.

This script compiles HF Llama (16 layers, hidden 2048, bf16, random weights) per block
(``layer.compile()``) in fresh processes, each with empty Inductor and Triton caches, some with
the GPU quiet and some with a contending process running matmuls on the same GPU through the
compile and the first calls (stopped before the timing). Per trial it records the steady-state
step at 8x512 and 8x384 (median of 15 blocks of 5 calls, CUDA events; the main thread is not
pinned, unlike diagnose's timing, so the absolute figures are not diagnose's) and a digest of
the configs the autotuner chose (``*.best_config``).

    OUT=$OUT python3 benchmarks/compile_variance.py --trials 3   # ~3 min on the H200

Writes ``$OUT/compile_variance.json`` and prints one line per trial.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = [(8, 512), (8, 384)]


def trial(flag_dir: str) -> None:
    """One fresh process: build, compile per block, first calls, wait for ``go``, time."""
    import statistics

    import torch
    import transformers

    from diagnose_hf import COMMON, MODELS  # the Llama of the diagnose runs this explains

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**MODELS["llama"][4], **COMMON)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    for layer in model.model.layers:
        layer.compile()
    inputs = {s: torch.randint(0, 32000, s, device="cuda") for s in SHAPES}
    t0 = time.perf_counter()
    with torch.no_grad():
        for s in SHAPES:
            model(inputs[s])
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    Path(flag_dir, "compiled").touch()
    while not Path(flag_dir, "go").exists():
        time.sleep(0.05)
    out = {"compile_s": round(compile_s, 2)}
    with torch.no_grad():
        for s in SHAPES:
            for _ in range(5):
                model(inputs[s])
            meds = []
            for _ in range(15):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                for _ in range(5):
                    model(inputs[s])
                b.record()
                b.synchronize()
                meds.append(a.elapsed_time(b) / 5)
            out[f"{s[0]}x{s[1]}"] = round(statistics.median(meds), 3)
    print(json.dumps(out), flush=True)


def contend() -> None:
    """Matmuls on the GPU until killed (the other cold phase of a parallel search)."""
    import torch

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while True:
        for _ in range(20):
            y = x @ x
        torch.cuda.synchronize()
        del y


def digest(cache: Path) -> tuple[str, int]:
    """A digest of every stored autotune winner (file name and the chosen config: its block sizes,
    warps and stages; the fields that record a timing or a cache hash are left out, run 35 hashed
    them and so could not tell a different winner from a different timing) and their count."""
    files = sorted(cache.rglob("*.best_config"))
    h = hashlib.sha256()
    for f in files:
        try:
            cfg = {k: v for k, v in json.loads(f.read_text()).items() if "time" not in k and "hash" not in k}
        except ValueError:
            cfg = {"unreadable": f.read_text()[:200]}
        h.update(f.name.encode())
        h.update(json.dumps(cfg, sort_keys=True).encode())
    return h.hexdigest()[:12], len(files)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3, help="trials per condition (quiet, contended)")
    ap.add_argument("--role", choices=("main", "trial", "contend"), default="main")
    ap.add_argument("--flags", default="")
    a = ap.parse_args()
    if a.role == "trial":
        return trial(a.flags)
    if a.role == "contend":
        return contend()
    rows = []
    for i in range(2 * a.trials):
        contended = i % 2 == 1
        root = Path(tempfile.mkdtemp(prefix="cv-"))
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"), TRITON_CACHE_DIR=str(root / "triton"))
        other = subprocess.Popen([sys.executable, __file__, "--role", "contend"]) if contended else None
        proc = subprocess.Popen([sys.executable, __file__, "--role", "trial", "--flags", str(root)], env=env,
                                stdout=subprocess.PIPE, text=True)
        while not (root / "compiled").exists() and proc.poll() is None:
            time.sleep(0.05)
        if other is not None:
            other.kill()
            other.wait()
        (root / "go").touch()
        stdout = proc.communicate()[0].strip()
        if proc.returncode != 0 or not stdout:
            sys.exit(f"compile_variance: trial {i} exited {proc.returncode} (its stderr is above); {root} kept")
        row = dict(json.loads(stdout.splitlines()[-1]), trial=i, contended=contended)
        row["best_configs"], row["n_best_configs"] = digest(root)
        shutil.rmtree(root, ignore_errors=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_variance.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
