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

Usage: ``python benchmarks/zygote_serves.py [--fork-probe]`` (results recorded in BENCHMARKS.md).
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
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    sys.exit(main())
