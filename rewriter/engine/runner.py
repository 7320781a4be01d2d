"""Run one validation child in its own process: forked from a server with torch imported
(:mod:`.zygote`) or a fresh interpreter, the user's modules imported fresh, its own compile caches,
a timeout after which the whole process group is killed.

Standard library ``subprocess`` with ``start_new_session`` so a timeout can signal the child's
process group (Inductor's compile workers included) rather than only the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .zygote import die_with_parent

#: Exit codes of :mod:`rewriter.engine.child`.
CHILD_HARNESS_ERROR, CHILD_OOM, CHILD_RAISED = 2, 3, 4


@dataclass
class ChildResult:
    """What a child process left behind.

    Attributes:
        code: its exit code (-1 timed out).
        payload: its JSON result (``{"error": {...}}`` when it failed).
        wall_s: seconds from :meth:`ServedChild.go` to the end of the cold phase (from spawn when it
            never got that far: a fresh interpreter's start and imports included).
        stderr_tail: the last lines of its stderr, for error messages.
    """

    code: int
    payload: dict[str, Any]
    wall_s: float
    stderr_tail: str

    @property
    def error(self) -> dict[str, Any] | None:
        return self.payload.get("error")


#: The environment the measurement children start from inside :func:`environment_pinned`, else
#: None (``os.environ`` as it is at each spawn).
_pinned: dict[str, str] | None = None


@contextlib.contextmanager
def environment_pinned() -> Iterator[None]:
    """Within it, a child with no ``base`` (:func:`child_env`) starts from ``os.environ`` as it
    was on entry, not as this process's own work has left it since (torch, a model library or a
    rung may set variables here that a fresh run of the user's program would not have): a child's
    environment, and so the zygote server that serves it (keyed by its import-time environment,
    :mod:`.zygote`; one started ahead, :func:`prestart_server`), does not depend on when it is
    spawned. diagnose runs inside it. Nested, the outermost entry's environment holds."""
    global _pinned
    outer = _pinned
    if outer is None:
        _pinned = dict(os.environ)
    try:
        yield
    finally:
        _pinned = outer


def child_env(cache_root: Path, extra_pythonpath: list[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: empty Inductor and Triton caches under ``cache_root``, no
    bytecode written into the trees, stackpart importable. ``base``: the environment it starts
    from (default ``os.environ``, or the one pinned by :func:`environment_pinned`), e.g. one arm's
    allocator setting."""
    env = dict(base if base is not None else _pinned if _pinned is not None else os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache_root / "triton")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"  # its log is complete even when it is killed at teardown
    env.pop("TORCH_LOGS", None)
    # The variants' processes stay up side by side and take turns for interleaved timing; OpenMP
    # threads that spin after each call (libgomp's default) would steal the cores of the process
    # whose turn it is. Passive waiting keeps the idle ones off the CPU (same for every variant).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parts = extra_pythonpath + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def package_path(workdir: Path) -> str:
    """A directory holding only ``rewriter`` (a symlink to this package), for the children's
    PYTHONPATH: a checkout's root would also expose ``kernels/``, ``tests/``, ``examples/`` as
    namespace packages to the user's code (HF transformers probes for a ``kernels`` package)."""
    pkg = workdir / "_stackpart_path"
    link = pkg / "rewriter"
    if not link.exists():
        pkg.mkdir(exist_ok=True)
        link.symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
    return str(pkg)


def served_env(cache_root: Path, pkg: str, device: str) -> dict[str, str]:
    """A measurement child's environment (:func:`child_env` with ``pkg`` on its path); on a CPU
    a thread count that fits the cores (:func:`rewriter.threads.child_env_threads`: CPU timing)."""
    env = child_env(cache_root, [pkg] if pkg else [])
    if not device.startswith("cuda"):
        from ..threads import child_env_threads

        child_env_threads(env)
    return env


def prestart_server(device: str, trees: list[str | Path]) -> bool:
    """Start the zygote server the measurement children of ``trees`` on ``device`` will be forked
    from, without waiting for its imports (:func:`.zygote.prestart`). The children's compile cache
    directories and stackpart's own path entry are not part of a server's environment; importing
    Inductor creates its cache directory, so the server gets one of its own, removed when this
    process exits. True where one was started."""
    import atexit
    import shutil
    import tempfile

    from . import zygote
    from .preload import libraries_for

    if not zygote.enabled():
        return False
    caches = Path(tempfile.mkdtemp(prefix="stackpart-zygote-"))
    atexit.register(shutil.rmtree, caches, ignore_errors=True)
    return zygote.prestart(served_env(caches, "", device), "", libraries_for(trees))


def _start_child(argv: list[str], env: dict[str, str], workdir: Path, out: int, pass_fds: tuple[int, ...],
                 pkg: str, trees: list[str]) -> "subprocess.Popen[bytes] | Any":
    """``python -m rewriter.engine.child *argv`` in its own session, stdout and stderr into ``out``:
    forked from a server that has torch imported already, and the model libraries ``trees`` import
    (:mod:`.zygote`, :mod:`.preload`; a handle shaped as ``Popen``), or where there is none
    (``STACKPART_ZYGOTE=0``, refused, failed) a fresh interpreter."""
    from . import zygote
    from .preload import libraries_for

    forked = zygote.launch(argv, env, str(workdir), out, pass_fds, pkg, libraries=libraries_for(trees))
    if forked is not None:
        return forked
    return subprocess.Popen(
        [sys.executable, "-m", "rewriter.engine.child", *argv],
        stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(workdir),
        start_new_session=True, pass_fds=pass_fds, preexec_fn=die_with_parent,
    )


def _kill_group(proc: Any) -> None:
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


#: "No early reply": distinct from None, which means the child exited.
_NOTHING = object()


class ServedChild:
    """A cold-phase child that stays up with its warm model and times calls on request.

    The constructor spawns it with two pipes (commands in, replies out, separate from its
    stdout/stderr); ``wait_built``/``go``/``wait_cold`` run its cold phase; ``time`` asks for
    timed calls of one shape; ``terminate`` and ``close`` end it (SIGTERM, then SIGKILL of its
    process group).
    Every wait has a timeout; on timeout the child is killed and a ``timeout`` error returned.
    """

    #: its shape warmers (:mod:`.warmers`, set by :func:`.measure.start_cold`): sent ``go`` with it,
    #: ended with it (rebound, never appended to)
    warmers: tuple["ServedChild", ...] = ()

    def __init__(self, job: dict[str, Any], workdir: Path, name: str, cache_root: Path, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.job = dict(job, out=str(workdir / f"{name}.result.json"), cmd_fd=cmd_r, reply_fd=rep_w)
        # a result left by an earlier child of this name (an early anchor ended and started again)
        # is not this one's: a shape warmer's is read as soon as it exists
        for stale in (Path(self.job["out"]), Path(self.job["out"] + ".partial")):
            stale.unlink(missing_ok=True)
        job_path = workdir / f"{name}.job.json"
        job_path.write_text(json.dumps(self.job, indent=1))
        self.stderr_path = workdir / f"{name}.stderr.txt"
        pkg = package_path(workdir)
        env = served_env(cache_root, pkg, str(job["harness"]["device"]))
        self.started = time.perf_counter()
        self.go_at: float | None = None  # when go was sent (once)
        with open(self.stderr_path, "wb") as err:
            trees = [job.get("tree"), *(job.get("trees") or {}).values()]
            self.proc = _start_child([str(job_path)], env, workdir, err.fileno(), (cmd_r, rep_w), pkg, trees)
        os.close(cmd_r)
        os.close(rep_w)
        self._cmd = os.fdopen(cmd_w, "w")
        self._rep = rep_r
        self._buf = b""
        self.alive = True
        self.timed_out = False
        self._early: Any = _NOTHING  # a reply read while waiting for another one

    def _readline(self, timeout_s: float) -> dict[str, Any] | None:
        """One JSON reply, or None on EOF (the child exited) or timeout (then ``self.timed_out``)."""
        deadline = time.perf_counter() + timeout_s
        self.timed_out = False
        while b"\n" not in self._buf:
            if self._rep is None:
                return None
            # a reply already in the pipe is read even when no time is left
            ready, _, _ = select.select([self._rep], [], [], max(0.0, deadline - time.perf_counter()))
            if not ready:
                if time.perf_counter() >= deadline:
                    self.timed_out = True
                    return None
                continue
            chunk = os.read(self._rep, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def wait_built(self) -> bool:
        """Wait until the child has imported and built its model (it then waits for :meth:`go`).
        False when it exited or timed out instead; :meth:`wait_cold` then returns why."""
        reply = self._readline(self.timeout_s)
        self.built_at = time.perf_counter()
        if reply is not None and reply.get("built"):
            return True
        self._early = reply
        return False

    def wait_weights_saved(self) -> dict[str, Any] | None:
        """The reference only: wait until it has saved its weights and every shape's inputs (what
        a compiled variant needs to start); returns its message (on CUDA with ``allocated``,
        ``free``, ``total`` bytes). None when it exited or timed out first; :meth:`wait_cold`
        then returns why."""
        reply = self._readline(self.timeout_s)
        if reply is not None and reply.get("weights_saved"):
            return reply
        self._early = reply
        return None

    def go(self) -> None:
        """Start the measured cold phase (load weights, compile, run the shapes); once: a child
        sent ``go`` before it built (the search's reference started early,
        :mod:`rewriter.diagnose.early_reference`) is not sent a second one, which it would read as
        its first timing request."""
        if self.go_at is not None:
            return
        for warmer in self.warmers:
            warmer.go()
        self.go_at = time.perf_counter()
        try:
            self._cmd.write(json.dumps({"op": "go"}) + "\n")
            self._cmd.flush()
        except (BrokenPipeError, OSError):
            pass

    def fileno(self) -> int:
        """The reply pipe's descriptor (``select`` waits on several children at once,
        :meth:`rewriter.engine.measure._Run._next_to_record`); -1 once closed."""
        return self._rep if self._rep is not None else -1

    def cold_ended(self) -> bool:
        """Whether the cold phase has ended (the child replied ``ready`` or an error, or exited),
        without waiting: a reply read here is kept for :meth:`wait_cold`, which returns it."""
        if self._early is not _NOTHING or self._rep is None:
            return True
        while True:
            while b"\n" in self._buf:
                line, rest = self._buf.split(b"\n", 1)
                reply = json.loads(line)
                if not (reply.get("weights_saved") or reply.get("built")):
                    return True  # left in the buffer: wait_cold reads it first
                self._buf = rest  # what wait_cold skips too
            ready, _, _ = select.select([self._rep], [], [], 0)
            if not ready:
                return False
            chunk = os.read(self._rep, 65536)
            if not chunk:
                return True  # exited: wait_cold reads the end of the pipe again and reaps it
            self._buf += chunk

    def wait_cold(self, until: float | None = None, waited_s: float = 0.0) -> ChildResult:
        """:meth:`_wait_cold`, then its shape warmers ended: its cold phase has read them, or no
        longer will."""
        try:
            return self._wait_cold(until, waited_s)
        finally:
            self._end_warmers()

    def _end_warmers(self) -> None:
        for warmer in self.warmers:
            warmer.close()
        self.warmers = ()

    def _wait_cold(self, until: float | None = None, waited_s: float = 0.0) -> ChildResult:
        """Wait for the cold phase: the child says ``ready`` (serving) or exits (done or failed).
        ``wall_s`` counts from :meth:`go` (or from spawn when it never got that far).

        ``until``: a ``time.perf_counter()`` value (the search budget's end); a cold phase still
        under way then is ended, with an error of kind ``budget`` (the child is killed). Without
        it, and in any case, the child's timeout ends it with an error of kind ``timeout``;
        ``waited_s``, seconds already waited for it elsewhere (:meth:`cold_ended` polled beside
        other children), count against that timeout."""
        timeout_at = time.perf_counter() + self.timeout_s - waited_s

        def limit() -> float:
            left = timeout_at - time.perf_counter()
            return left if until is None else min(left, until - time.perf_counter())

        if self._early is not _NOTHING:
            reply = self._early
        else:
            reply = self._readline(limit())
            # not waited for (a second process's ``go`` is sent before it has built): skip them
            while reply is not None and (reply.get("weights_saved") or reply.get("built")):
                reply = self._readline(limit())
        wall = time.perf_counter() - (self.go_at if self.go_at is not None else self.started)
        if reply is None and self.timed_out:
            self.close()
            by_budget = until is not None and until < timeout_at
            message = (f"{self.name}: its cold phase had not ended {wall:.0f} s in, when the search budget ran out (killed)"
                       if by_budget else f"{self.name} did not finish within {self.timeout_s:.0f} s (killed)")
            return ChildResult(-1, {"error": {"kind": "budget" if by_budget else "timeout", "message": message}},
                               wall, _tail(self.stderr_path))
        if reply is None:  # exited without serving: an error, or nothing to time
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.close()
                code = -1
            self.alive = False
        else:
            code = 0
        out = Path(self.job["out"])
        payload = json.loads(out.read_text()) if out.exists() else {
            "error": {"kind": "crash", "message": f"{self.name} exited with code {code} and wrote no result"}}
        return ChildResult(code, payload, wall, _tail(self.stderr_path))

    def time(self, shape: int, warmup: int, n: int, burst_ms: float = 0.0, pin: int | None = None) -> dict[str, Any]:
        """``{"samples": [s, ...], "calls", "pinned"}`` of ``n`` timed samples of shape ``shape``
        after ``warmup`` calls (a sample is one call, or with ``burst_ms`` > 0 the per-call time of
        a back-to-back block lasting about that many ms; ``pin``: the CPU core to pin the child's
        main thread to; see :func:`.child.serve`), or ``{"error": {...}}`` (the child raised, ran
        out of memory, exited or timed out)."""
        if not self.alive:
            return {"error": {"kind": "crash", "message": f"{self.name} is not running"}}
        request = {"op": "time", "shape": shape, "warmup": warmup, "n": n, "burst_ms": burst_ms, "pin": pin}
        try:
            self._cmd.write(json.dumps(request) + "\n")
            self._cmd.flush()
        except (BrokenPipeError, OSError):
            self.alive = False
            return {"error": {"kind": "crash", "message": f"{self.name} exited: {_tail(self.stderr_path, 3)}"}}
        reply = self._readline(self.timeout_s)
        if reply is None:
            timed_out = self.timed_out
            self.close()
            if timed_out:
                return {"error": {"kind": "timeout", "message": f"{self.name}: a timed call took over {self.timeout_s:.0f} s (killed)"}}
            return {"error": {"kind": "crash", "message": f"{self.name} exited: {_tail(self.stderr_path, 3)}"}}
        return reply

    def terminate(self) -> None:
        """SIGTERM the child's process group without waiting (its result is already read or no
        longer wanted): a child's own exit (interpreter shutdown, the compile worker pool, the
        CUDA context) took seconds per child; :meth:`close` with ``kill`` then reaps it."""
        for warmer in self.warmers:
            warmer.terminate()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill the child's process group (SIGTERM, SIGKILL after 5 s) and reap it; its result
        is read by then or no longer wanted; its shape warmers too."""
        self._end_warmers()
        try:
            self._cmd.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            _kill_group(self.proc)
        if self._rep is not None:  # once: a second os.close could hit a reused descriptor
            try:
                os.close(self._rep)
            except OSError:
                pass
            self._rep = None
        self.alive = False
