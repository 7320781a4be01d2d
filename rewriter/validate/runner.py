"""Run one validation child in its own process: fresh interpreter (clean module cache), its own
compile caches, a timeout after which the whole process group is killed.

Standard library ``subprocess`` with ``start_new_session`` so a timeout can signal the child's
process group (Inductor's compile workers included) rather than only the child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Exit codes of :mod:`rewriter.validate.child`.
CHILD_HARNESS_ERROR, CHILD_OOM, CHILD_RAISED = 2, 3, 4


@dataclass
class ChildResult:
    """What a child process left behind.

    Attributes:
        code: its exit code (-1 timed out).
        payload: its JSON result (``{"error": {...}}`` when it failed).
        wall_s: seconds from spawn to exit, interpreter start and imports included.
        stderr_tail: the last lines of its stderr, for error messages.
    """

    code: int
    payload: dict[str, Any]
    wall_s: float
    stderr_tail: str

    @property
    def error(self) -> dict[str, Any] | None:
        return self.payload.get("error")


def child_env(cache_root: Path, extra_pythonpath: list[str]) -> dict[str, str]:
    """The environment of a child: empty Inductor and Triton caches under ``cache_root``, no
    bytecode written into the trees, stackpart importable."""
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache_root / "triton")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env.pop("TORCH_LOGS", None)
    parts = extra_pythonpath + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run_child(job: dict[str, Any], workdir: Path, name: str, cache_root: Path, timeout_s: float) -> ChildResult:
    """Write ``job`` to ``workdir/name.job.json`` and run it in a new process.

    On timeout the child's process group gets SIGTERM, then SIGKILL after 5 s; the result has
    ``code == -1`` and an ``error`` of kind ``timeout``.
    """
    job = dict(job, out=str(workdir / f"{name}.result.json"))
    job_path = workdir / f"{name}.job.json"
    job_path.write_text(json.dumps(job, indent=1))
    stderr_path = workdir / f"{name}.stderr.txt"
    package_root = str(Path(__file__).resolve().parents[2])
    env = child_env(cache_root, [package_root])
    started = time.perf_counter()
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rewriter.validate.child", str(job_path)],
            stdout=err,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(workdir),
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            wall = time.perf_counter() - started
            return ChildResult(
                -1,
                {"error": {"kind": "timeout", "message": f"{name} did not finish within {timeout_s:.0f} s (killed)"}},
                wall,
                _tail(stderr_path),
            )
    wall = time.perf_counter() - started
    out = Path(job["out"])
    if out.exists():
        payload = json.loads(out.read_text())
    else:
        payload = {"error": {"kind": "crash", "message": f"{name} exited with code {code} and wrote no result"}}
    return ChildResult(code, payload, wall, _tail(stderr_path))


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, SIGKILL it if it is still there after 5 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
