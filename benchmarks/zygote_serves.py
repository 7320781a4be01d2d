"""Does the measurement children's server (:mod:`rewriter.engine.zygote`) serve on this machine, and
what does a child cost forked from it against a fresh interpreter?

Starts the server with a child's environment, then times one child each way from spawn to exit: the
child imports torch and, on a GPU machine, makes a tensor on ``cuda`` (a forked child can use CUDA
only when the server neither initialised CUDA nor registered PyTorch's fork poisoning). Prints one JSON line: whether the server served
(or why it refused), its start seconds, and each child's wall seconds and exit code.

With ``--fork-probe``, also: for each import depth a server could stop at (``torch``, then
``torch._dynamo``, then ``torch._inductor.compile_fx``), a fresh interpreter imports up to it, says
whether ``libcuda.so`` is mapped, how many threads it runs and whether torch initialized CUDA, then
forks a child that makes a CUDA tensor; the last depth once more with the server's
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (:data:`rewriter.engine.zygote.NVML_CHECK`). On the H200 with torch 2.11 (2026-12-04): the driver is
mapped at ``import torch`` and a child forked after ``torch`` or ``torch._dynamo`` uses CUDA; after
``torch._inductor.compile_fx`` it cannot (fork poisoning), which is what the server now checks
(:func:`rewriter.engine.zygote._fork_cannot_use_cuda`).

With ``--step-probe``, also: does a forked child time a model's eager step as a fresh interpreter
does? The zoo's ViT (transformers ``ViTModel``, hidden 768, 12 layers, bf16) is built and timed in
four children one after the other: a fresh interpreter, one forked from the plain server, one
forked from a server that preloaded transformers (as the search's children of a transformers tree
are, :mod:`rewriter.engine.preload`), and a fresh interpreter again. Each pins its thread to the
core :func:`rewriter.engine.cores.pin_plan` gives the timed processes (``shared``), runs 20
warm-up calls per shape and times 100 with :func:`rewriter.engine.timing.time_call` (the engine's
per-call timing) and 5 blocks with ``time_burst``; it reports the medians (ms) and the state a
fork could carry over (nice value, scheduling policy, affinity, thread count, grad mode, trace
hooks, the attention implementation transformers chose, the SDPA backends enabled). On CPU the
same with a tiny config (float32).

Usage: ``python benchmarks/zygote_serves.py [--fork-probe] [--step-probe]`` (results recorded in BENCHMARKS.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = '''\
import sys

def main(argv):
    import torch
    if torch.cuda.is_available():
        x = torch.ones(4, device="cuda") * 2
        torch.cuda.synchronize()
        assert float(x.sum()) == 8.0
    print("cuda" if torch.cuda.is_available() else "cpu", flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


FORK_PROBE = '''\
import importlib, json, os, sys, time
t = time.perf_counter()
for name in sys.argv[1].split(","):
    importlib.import_module(name)
import torch
out = {"imported": sys.argv[1], "import_s": round(time.perf_counter() - t, 2),
       "libcuda_mapped": any("libcuda.so" in line for line in open("/proc/self/maps")),
       "threads": len(os.listdir("/proc/self/task")), "cuda_initialized": torch.cuda.is_initialized()}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        x = torch.ones(4, device="cuda") * 2
        torch.cuda.synchronize()
        msg = "ok" if float(x.sum()) == 8.0 else "wrong sum"
    except Exception as exc:  # noqa: BLE001
        msg = f"{type(exc).__name__}: {exc}"[:300]
    os.write(w, msg.encode())
    os._exit(0)
os.close(w)
said = os.read(r, 4096).decode()
os.waitpid(pid, 0)
out["forked_child_cuda"] = said
print(json.dumps(out))
'''


STEP_PROBE = '''\
import json, os, statistics, sys, time

def main(argv):
    t0 = time.perf_counter()
    import torch
    import transformers
    from rewriter.engine.timing import time_burst, time_call
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    cfg = (dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
           if cuda else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                             image_size=32, patch_size=8))
    model = transformers.ViTModel(transformers.ViTConfig(**cfg)).to(device, torch.bfloat16 if cuda else torch.float32).eval()
    image = cfg.get("image_size", 224)
    pin = int(argv[0]) if argv and argv[0] != "-" else None
    if pin is not None:
        os.sched_setaffinity(0, {pin})
    out = {"how": os.environ.get("PROBE_HOW"), "startup_s": round(time.perf_counter() - t0, 2), "pin": pin,
           "nice": os.nice(0), "sched_policy": os.sched_getscheduler(0), "affinity": sorted(os.sched_getaffinity(0)),
           "threads": len(os.listdir("/proc/self/task")), "torch_threads": torch.get_num_threads(),
           "grad": torch.is_grad_enabled(), "trace": repr(sys.gettrace()), "profile": repr(sys.getprofile()),
           "attn": getattr(model.config, "_attn_implementation", None),
           "sdpa": {k: getattr(torch.backends.cuda, k)() for k in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled") if hasattr(torch.backends.cuda, k)},
           "matmul_precision": torch.get_float32_matmul_precision(),
           "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("CUDA", "PYTORCH", "TORCH", "OMP", "NVIDIA"))},
           "shapes": []}
    for batch in (32, 16):
        x = torch.randn(batch, 3, image, image, device=device, dtype=next(model.parameters()).dtype)
        with torch.no_grad():
            fn = lambda: model(pixel_values=x)
            for _ in range(20):
                fn()
            calls = [time_call(fn, device) * 1e3 for _ in range(100)]
            blocks = [time_burst(fn, device, 10) * 1e3 for _ in range(5)]
        out["shapes"].append({"batch": batch, "call_ms": round(statistics.median(calls), 3),
                              "call_min_ms": round(min(calls), 3), "burst_ms": round(statistics.median(blocks), 3)})
    print(json.dumps(out), flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def step_probe(work: Path, env: dict, pkg: str) -> list[dict]:
    """The four children of ``--step-probe`` (module docstring); each one's JSON line, or its error."""
    from rewriter.engine import zygote
    from rewriter.engine.cores import core_speeds, pin_plan

    (work / "step_probe.py").write_text(STEP_PROBE)
    import os

    cores = sorted(os.sched_getaffinity(0))
    pin = pin_plan(["probe"], cores, "shared", core_speeds(cores)).get("probe")
    argv = [str(pin) if pin is not None else "-"]
    rows = []
    for how in ("popen", "forked_plain", "forked_transformers", "popen_again"):
        env_how = dict(env, PROBE_HOW=how)
        log = work / f"step_{how}.txt"
        t = time.perf_counter()
        with open(log, "wb") as f:
            if how.startswith("forked"):
                libs = ("transformers",) if how == "forked_transformers" else ()
                child = zygote.launch(argv, env_how, str(work), f.fileno(), (), pkg, module="step_probe", libraries=libs)
                code = child.wait(timeout=300) if child is not None else "not served"
            else:
                code = subprocess.run([sys.executable, "-m", "step_probe", *argv], env=env_how, cwd=str(work),
                                      stdout=f, stderr=subprocess.STDOUT, timeout=300).returncode
        said = log.read_text().strip().splitlines()
        try:
            rows.append(json.loads(said[-1]) | {"exit": code, "wall_s": round(time.perf_counter() - t, 1)})
        except (IndexError, ValueError):
            rows.append({"how": how, "exit": code, "error": "\n".join(said[-15:])})
    return rows


def fork_probe() -> list[dict]:
    """One fresh interpreter per import depth (see the module docstring); its JSON line each."""
    import os

    from rewriter.engine.zygote import NVML_CHECK

    rows = []
    inductor = "torch,torch._dynamo,torch._inductor,torch._inductor.compile_fx"
    for depth, nvml in (("torch", False), ("torch,torch._dynamo", False), (inductor, False), (inductor, True)):
        env = dict(os.environ, **({NVML_CHECK: "1"} if nvml else {}))
        got = subprocess.run([sys.executable, "-c", FORK_PROBE, depth], capture_output=True, text=True, timeout=300, env=env)
        try:
            rows.append(json.loads(got.stdout.strip().splitlines()[-1]) | {"nvml_check": nvml})
        except (IndexError, ValueError):
            rows.append({"imported": depth, "nvml_check": nvml, "error": (got.stdout + got.stderr)[-500:]})
    return rows


def main() -> int:
    from rewriter.engine import zygote
    from rewriter.engine.runner import child_env, package_path

    work = Path(tempfile.mkdtemp(prefix="zygote-serves-"))
    (work / "probe.py").write_text(PROBE)
    pkg = package_path(work)
    env = child_env(work / "caches", [pkg, str(work)])
    out: dict = {}
    t = time.perf_counter()
    with open(work / "forked.txt", "wb") as f:
        child = zygote.launch([], env, str(work), f.fileno(), (), pkg, module="probe")
    out["served"] = child is not None
    out["servers"] = [key[1][1] for key in zygote._servers]  # the modules each serving server imported
    out["refused_after"] = {key[1][1]: why for key, why in zygote._refused.items()}  # why: in the debug log above
    if child is None:
        out["refused"] = "why is in the debug log above (rewriter.engine.zygote)"
    else:
        out["forked_exit"] = child.wait(timeout=300)
        out["server_and_forked_child_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        with open(work / "forked2.txt", "wb") as f:
            again = zygote.launch([], env, str(work), f.fileno(), (), pkg, module="probe")
            out["second_forked_exit"] = again.wait(timeout=300)
        out["second_forked_child_s"] = round(time.perf_counter() - t, 2)
        out["forked_said"] = (work / "forked2.txt").read_text().strip()[-200:]
    t = time.perf_counter()
    with open(work / "popen.txt", "wb") as f:
        code = subprocess.run([sys.executable, "-m", "probe"], env=env, cwd=str(work), stdout=f,
                              stderr=subprocess.STDOUT).returncode
    out.update(popen_exit=code, popen_child_s=round(time.perf_counter() - t, 2),
               popen_said=(work / "popen.txt").read_text().strip()[-200:])
    if "--fork-probe" in sys.argv[1:]:
        out["fork_probe"] = fork_probe()
    if "--step-probe" in sys.argv[1:]:
        out["step_probe"] = step_probe(work, env, pkg)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    sys.exit(main())
