"""How much does each Llama plan's step move with the speed of the core its host work runs on?

The H200 runs 29-36 (BENCHMARKS.md) chose per-block in some runs and nested+whole in others on
one machine. Within a run, a plan's two timed processes agreed within 2%; between runs, per-block
moved 10.8-13.4 ms, nested+whole 10.6-11.8, and as-is 17.3-21.1, while the speed of the shared
core at diagnose's calibration loop moved 705-1353 us between runs minutes apart. Run 36 showed
the compile is not what moves: warm processes from three separate compiles of per-block agreed
within 2%. This script tests the other suspect, the host: each plan (as-is, per-block,
nested+whole; HF Llama 16 layers, hidden 2048, bf16, random weights, as ``diagnose_hf.py`` builds
it) is compiled once in a cold process, then timed in a warm process (from the cold one's
caches) with its main thread pinned in turn to

- the fastest, the median and the slowest core at diagnose's calibration loop
  (:func:`rewriter.engine.cores.core_speeds`), and
- the median core with a busy-looping process pinned to the same core (a contended host: a
  data-loader worker, a neighbour),

at 8x512 and 8x384 (median of 10 blocks of 5 calls, CUDA events).

    OUT=$OUT python3 benchmarks/host_sensitivity.py   # ~4-5 min on the H200 (run 37 cut it off at 215 s, after two plans)

Writes ``$OUT/host_sensitivity.json`` and prints one line per plan.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = [(8, 512), (8, 384)]
PLANS = ("as-is", "per-block", "nested+whole")
HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def build(plan: str):  # type: ignore[no-untyped-def]
    """The model with ``plan`` applied, on the GPU, eval, bf16."""
    import torch
    import transformers

    from diagnose_hf import COMMON, MODELS

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**MODELS["llama"][4], **COMMON)
    if plan == "nested+whole":
        layer = transformers.models.llama.modeling_llama.LlamaDecoderLayer
        layer.forward = torch.compiler.nested_compile_region(layer.forward)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    if plan == "per-block":
        for block in model.model.layers:
            block.compile()
    elif plan == "nested+whole":
        model.compile()
    return model


def first_calls_s(model, inputs: dict) -> float:  # type: ignore[no-untyped-def]
    """Seconds of the first call at every shape of ``inputs``, in order (the compiles, cold or
    from the caches), rounded to 10 ms."""
    import torch

    t0 = time.perf_counter()
    with torch.no_grad():
        for x in inputs.values():
            model(x)
    torch.cuda.synchronize()
    return round(time.perf_counter() - t0, 2)


def step_ms(model, x, blocks: int = 10) -> float:  # type: ignore[no-untyped-def]
    """The steady step at ``x`` (ms): 5 warm-up calls, then the median of ``blocks`` blocks of 5
    calls timed by CUDA events (``compile_variance.py`` times with it too)."""
    import torch

    with torch.no_grad():
        for _ in range(5):
            model(x)
        meds = []
        for _ in range(blocks):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            for _ in range(5):
                model(x)
            b.record()
            b.synchronize()
            meds.append(a.elapsed_time(b) / 5)
    return round(statistics.median(meds), 3)


def child(plan: str, warm: bool) -> None:
    """Cold: compile (first call per shape) and exit. Warm: compile from the caches, then time
    under each host condition; prints one JSON line."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rewriter.engine.cores import core_speeds

    model = build(plan)
    inputs = {s: torch.randint(0, 32000, s, device="cuda") for s in SHAPES}
    out: dict = {"plan": plan, "first_calls_s": first_calls_s(model, inputs)}
    if not warm:
        print(json.dumps(out), flush=True)
        return
    cores = sorted(os.sched_getaffinity(0))
    speeds = core_speeds(cores[2:])
    ranked = sorted(speeds, key=speeds.get)
    median = ranked[(len(ranked) - 1) // 2]
    out["loop_us"] = {str(c): round(speeds[c] * 1e6) for c in ranked}
    conditions = [("fastest", ranked[0], False), ("median", median, False), ("slowest", ranked[-1], False),
                  ("median+hog", median, True)]
    for name, core, hog in conditions:
        other = subprocess.Popen([sys.executable, "-c", HOG, str(core)]) if hog else None
        try:
            time.sleep(0.5 if hog else 0.0)
            os.sched_setaffinity(0, {core})
            out[name] = {"core": core, **{f"{s[0]}x{s[1]}": step_ms(model, inputs[s]) for s in SHAPES}}
        finally:
            os.sched_setaffinity(0, set(cores))
            if other is not None:
                other.kill()
                other.wait()
    print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("main", "cold", "warm"), default="main")
    ap.add_argument("--plan", choices=PLANS, default="as-is")
    a = ap.parse_args()
    if a.role != "main":
        return child(a.plan, a.role == "warm")
    rows = []
    for plan in PLANS:
        root = Path(tempfile.mkdtemp(prefix="hs-"))
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"), TRITON_CACHE_DIR=str(root / "triton"))
        for role in ("cold", "warm") if plan != "as-is" else ("warm",):
            proc = subprocess.Popen([sys.executable, __file__, "--role", role, "--plan", plan], env=env,
                                    stdout=subprocess.PIPE, text=True)
            # a `timeout` that stops this script stops the plan's process too: in H200 run 37 the
            # nested+whole process outlived the script into the next benchmark of the call
            signal.signal(signal.SIGTERM, lambda *_: (proc.kill(), sys.exit(124)))
            stdout = proc.communicate()[0]
            if proc.returncode != 0 or not stdout.strip():
                sys.exit(f"host_sensitivity: the {role} process of {plan} exited {proc.returncode} (its stderr is above)")
            row = json.loads(stdout.strip().splitlines()[-1])
            rows_so_far = rows + [row]
            out = Path(os.environ.get("OUT", "out"))
            out.mkdir(parents=True, exist_ok=True)
            (out / "host_sensitivity.json").write_text(json.dumps(rows_so_far, indent=1))  # kept if a later plan is cut off
        shutil.rmtree(root, ignore_errors=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_sensitivity.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
