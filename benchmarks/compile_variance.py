"""Is the step time of one compiled plan decided by the compile, and by its autotuning?

The H200 runs 32-34 (BENCHMARKS.md) saw one candidate run 10-15% slow in *both* of its timed
processes in one diagnose run and not in the next, while the two processes agreed within 1%:
the second process is warm-started from the first one's compile caches, so whatever the compile
decided is shared by both. Run 35 (this script's first version) compiled per-block Llama fresh
six times and saw 8x384 run 9.95-16.45 ms. Inductor's runtime autotuning (``CachingAutotuner``
benchmarks a kernel's Triton configs on its first launch and stores the winner as
``*.best_config`` next to the kernel) is the compile-time decision suspected.

This script compiles HF Llama (16 layers, hidden 2048, bf16, random weights) per block
(``layer.compile()``) ``--trials`` times, each in a fresh process with empty Inductor and Triton
caches (``cold``), and after each trial runs two more processes from copies of that trial's
caches:

- ``warm``: the caches as they are (what diagnose's second process does today);
- ``reautotune``: the same caches less every ``*.best_config``, with
  ``torch._inductor.config.autotune_local_cache = False``: the compiled code is reused and only
  the autotuning runs again.

Every process pins its main thread to one core (``--core``, as diagnose's timing does) before it
times the steady step at 8x512 and 8x384 (median of 15 blocks of 5 calls, CUDA events), and lists
the winner of every autotuned kernel (the live ``CachingAutotuner`` objects' remaining launcher:
block sizes, warps, stages), so a process's winners can be compared kernel by kernel with its
trial's cold process. If ``warm`` matches ``cold`` and ``reautotune`` moves with its winners, the
compile-to-compile spread is autotuning's.

    OUT=$OUT python3 benchmarks/compile_variance.py --trials 4   # ~4 min on the H200

Writes ``$OUT/compile_variance.json`` and prints one line per process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES = [(8, 512), (8, 384)]


def winners() -> dict[str, str]:
    """``kernel name, size hints#i -> winner`` for every live Inductor autotuner (``i`` numbers the
    instances of one key). A winner starts with ``tuned`` where the process benchmarked more than one
    config (a warm process that hit its stored winner holds only that one)."""
    import gc

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    out: dict[str, str] = {}
    for a in gc.get_objects():
        # type(), not isinstance(): a dead weakref.proxy raises ReferenceError on __class__
        # (H200 run 36's first try); a module's deprecated attributes warn on isinstance too
        if not issubclass(type(a), CachingAutotuner):
            continue
        name = (getattr(a.fn, "__name__", None) or str((a.inductor_meta or {}).get("kernel_name"))) + " " + json.dumps(
            getattr(a, "size_hints", None), sort_keys=True, default=str)
        tuned = len(getattr(a, "configs", []) or []) > 1  # a warm hit holds only its stored winner
        launchers = getattr(a, "launchers", None) or []
        if len(launchers) != 1:
            win = f"{len(launchers)} launchers"
        else:
            try:
                c = launchers[0].config
                win = json.dumps(dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages), sort_keys=True, default=str)
            except AttributeError as exc:  # a launcher without its config on this torch: say so
                win = f"unreadable ({exc})"
        win = ("tuned " if tuned else "") + win
        i = 0
        while f"{name}#{i}" in out:
            i += 1
        out[f"{name}#{i}"] = win
    return dict(sorted(out.items()))


def trial(core: int, reautotune: bool) -> None:
    """One process: build, compile per block (from whatever caches its environment names), first
    calls, pin, time; prints one JSON line."""
    import torch

    from host_sensitivity import build, first_calls_s, step_ms  # the Llama of the diagnose runs, per block

    if reautotune:
        torch._inductor.config.autotune_local_cache = False
    model = build("per-block")
    inputs = {s: torch.randint(0, 32000, s, device="cuda") for s in SHAPES}
    out: dict = {"compile_s": first_calls_s(model, inputs)}
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    for s in SHAPES:
        out[f"{s[0]}x{s[1]}"] = step_ms(model, inputs[s], blocks=15)
    out["winners"] = winners()
    print(json.dumps(out), flush=True)


def run(mode: str, root: Path, core: int) -> dict:
    """Run one process of ``mode`` with its caches under ``root``; its JSON row."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"), TRITON_CACHE_DIR=str(root / "triton"))
    cmd = [sys.executable, __file__, "--role", "trial", "--core", str(core)] + (["--reautotune"] if mode == "reautotune" else [])
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        sys.exit(f"compile_variance: a {mode} process exited {proc.returncode} (its stderr is above); {root} kept")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4, help="fresh compiles (each followed by a warm and a reautotune process)")
    ap.add_argument("--role", choices=("main", "trial"), default="main")
    ap.add_argument("--core", type=int, default=2, help="the core every process's main thread is pinned to for the timing")
    ap.add_argument("--reautotune", action="store_true")
    a = ap.parse_args()
    if a.role == "trial":
        return trial(a.core, a.reautotune)
    rows = []
    for i in range(a.trials):
        root = Path(tempfile.mkdtemp(prefix="cv-"))
        cold = run("cold", root / "cold", a.core)
        for mode in ("cold", "warm", "reautotune"):
            if mode == "cold":
                row = cold
            else:
                shutil.copytree(root / "cold", root / mode)
                if mode == "reautotune":
                    for f in (root / mode).rglob("*.best_config"):
                        f.unlink()
                row = run(mode, root / mode, a.core)
            w = row.pop("winners")
            ref = cold.get("winners_", w)
            strip = lambda v: v.removeprefix("tuned ")  # noqa: E731
            row.update(trial=i, mode=mode, kernels=len(w), tuned_here=sum(v.startswith("tuned ") for v in w.values()),
                       winners_differ_from_cold=sum(1 for k, v in w.items()
                                                    if ref.get(k, "").startswith("tuned ") and strip(ref[k]) != strip(v)))
            if mode == "cold":
                cold["winners_"] = w
            else:
                row["winners_missing_vs_cold"] = len(set(cold["winners_"]) ^ set(w))
            rows.append({k: v for k, v in row.items() if k != "winners_"} | {"winners": w})
            print(json.dumps({k: v for k, v in row.items() if k != "winners_"}), flush=True)
        shutil.rmtree(root, ignore_errors=True)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_variance.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
