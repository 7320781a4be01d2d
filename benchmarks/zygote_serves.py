"""Does the measurement children's server (:mod:`rewriter.engine.zygote`) serve on this machine, and
what does a child cost forked from it against a fresh interpreter?

Starts the server with a child's environment, then times one child each way from spawn to exit: the
child imports torch and, on a GPU machine, makes a tensor on ``cuda`` (a forked child can use CUDA
only when the server never loaded the CUDA driver). Prints one JSON line: whether the server served
(or why it refused), its start seconds, and each child's wall seconds and exit code.

Usage: ``python benchmarks/zygote_serves.py`` (results recorded in BENCHMARKS.md).
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
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    sys.exit(main())
