"""A pre-forked launcher for the measurement children: one server process that has imported torch,
Dynamo and Inductor once, and forks a child per request (the forkserver pattern of CPython's
``multiprocessing.forkserver``, which cannot serve here as is: its server starts with the parent's
environment, not the children's, and it runs pickled targets).

A child costs seconds of CPU importing torch before any work; forked from the server it starts with
those modules loaded, and everything else as :func:`rewriter.engine.runner.child_env` and
``python -m rewriter.engine.child JOB`` would give it: its own environment (its empty compile cache
directories included; torch reads ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` when it first
compiles, not at import), working directory, ``sys.argv``, ``sys.path[0]``, session (process group),
stdout/stderr file and the command/reply pipes at the descriptor numbers its job names. It
imports the user's code itself: the server never imports any tree's module, and imports
transformers or diffusers only when the child's trees import that library and hold no copy of
their own (:mod:`.preload`; such a server serves only those children).

One server serves one import-time environment: the child environment less the variables that differ
per child and that nothing reads at import (:data:`PER_CHILD`), less the child's own ``PYTHONPATH``
entry for stackpart (:func:`rewriter.engine.runner.package_path`; the server imports ``rewriter`` by
location, with no directory of its own). It starts with the environment of the first child it
serves. A child whose environment differs in anything else (``OMP_NUM_THREADS``, which libgomp reads
when torch is loaded; an allocator setting; ``TMPDIR``) gets a server of its own. The server refuses
to serve (the caller then starts the child with ``subprocess.Popen``) when forking would not give a
clean child: a second thread after the imports (a fork copies only the calling thread), a forked
child unable to use CUDA (the server initialised it, or registered PyTorch's fork poisoning: "Cannot
re-initialize CUDA in forked subprocess"; a driver only loaded, as ``import torch`` maps it with
torch 2.11, is fine: :func:`_fork_cannot_use_cuda`), an open descriptor of a library that a child's
pipes could overwrite, or one of the modules above imported. ``STACKPART_ZYGOTE=0`` turns the server
off. A caller that knows its children's environment before it needs them starts their server ahead
(:func:`prestart`), so the imports overlap its own work.

One difference remains: an environment variable that a tree sets when it is imported, and that
Dynamo's or Inductor's config reads when it is imported (``TORCHINDUCTOR_*``, ``TORCHDYNAMO_*``
defaults), is read by a fresh interpreter (which imports those configs after the tree) and not by a
forked child (whose server imported them first); ``STACKPART_ZYGOTE=0`` gives the former.

Protocol over a ``SOCK_SEQPACKET`` socket pair (one JSON message each way, descriptors passed with
``socket.send_fds``): the server says ``{"ready": true}`` or ``{"refused": why}`` once; then per
request ``{"argv", "env", "cwd", "fds", "module"}`` with the child's stdout file and the
descriptors to place at the numbers ``fds`` lists, it answers ``{"pid"}`` and the read end of a
status pipe on which it writes the child's exit code (negative: the signal that ended it, as
``subprocess.Popen.returncode``) once it has reaped it. Linux only (``/proc``, ``prctl``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The environment variables that differ between the children of one server: torch reads the cache
#: directories each time it looks for a cache (``torch._inductor.runtime.cache_dir_utils``), keeping
#: no path from the server's imports, which ran with its first child's (tests/test_zygote.py holds
#: this); pytest sets
#: ``PYTEST_CURRENT_TEST`` anew for each test, and nothing reads it at import.
CACHE_DIRS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
PER_CHILD = (*CACHE_DIRS, "PYTEST_CURRENT_TEST")

#: What the server imports before it serves, in order: what every child imports before the user's
#: code, then Inductor (whose first ``torch.compile`` a compiled variant pays in its build, before its
#: measured cold phase). Never anything of a user's tree. Where an import leaves a forked child
#: unable to use CUDA (:func:`_fork_cannot_use_cuda`: with torch 2.11 on a CUDA host,
#: ``torch._inductor.compile_fx``'s import initialises the driver; docs/decisions.md, "Children forked
#: from a pre-imported server"), the server refuses and the caller starts one that imports only the
#: modules before it.
PRELOAD = ("torch", "torch._dynamo", "rewriter.engine.child", "rewriter.harness", "rewriter.plan",
           "rewriter.engine.variants", "torch._inductor", "torch._inductor.compile_fx")

#: Modules a server must not have imported unless asked to (a child's tree may hold its own copy):
#: the libraries of :data:`.preload.LIBRARIES`.
NEVER = ("transformers", "diffusers")

#: Set in the server before its imports (unless the environment sets it): ``torch.cuda.is_available()``
#: then asks NVML, not the CUDA runtime, whose device count registers PyTorch's fork poisoning
#: ("Cannot re-initialize CUDA in forked subprocess"); PyTorch's documented remedy for forked
#: processes (docs.pytorch.org, torch_cuda_memory / CUDA environment variables). The children get
#: their own environment, without it.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"

#: The environment variable that turns the server off (``0``).
SWITCH = "STACKPART_ZYGOTE"

#: Seconds the caller waits for a server's imports before it starts its children without one.
START_TIMEOUT_S = 300.0

#: Servers kept per calling process (each holds torch imported, a few hundred MB): room for a plain
#: and a library server (:mod:`.preload`) and one more environment; the least recently used idle
#: one is closed beyond this.
MAX_SERVERS = 3

#: Room in the server's command line for a child's (``/proc/PID/cmdline``, what ``ps`` shows).
_TITLE_ROOM = 1024

#: The module a child runs (``python -m`` of it), unless a request names another.
CHILD_MODULE = "rewriter.engine.child"

#: The ``rewriter`` package directory the server imports by location.
PACKAGE = Path(__file__).resolve().parents[1]

#: The server's ``python -c`` program: ``rewriter`` imported from ``argv[1]`` by location (nothing
#: else of a checkout importable), no working directory on ``sys.path``, then :func:`main`.
_BOOT = (
    "import sys, importlib.util as u\n"
    "del sys.path[0]\n"
    "s = u.spec_from_file_location('rewriter', sys.argv[1] + '/__init__.py', submodule_search_locations=[sys.argv[1]])\n"
    "m = sys.modules['rewriter'] = u.module_from_spec(s)\n"
    "s.loader.exec_module(m)\n"
    "from rewriter.engine.zygote import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def die_with_parent() -> None:
    """``preexec_fn`` for every child (and the children's server, which sets it in each child it
    forks): on Linux, the kernel sends the child SIGKILL when validate's
    process dies, even by SIGKILL or the OOM killer, which no handler of ours sees; a child holding
    GPU memory must not outlive it (``prctl(PR_SET_PDEATHSIG)``, man 2 prctl). Children are
    started from the main thread only (the signal follows the thread that forked them).
    Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


# ---------------------------------------------------------------------------------- the caller


class Forked:
    """The caller's handle on a forked child, shaped as the parts of ``subprocess.Popen`` the
    runner uses: ``pid`` (also its process group: the child called ``setsid``), ``poll()``,
    ``wait(timeout)`` (raises ``subprocess.TimeoutExpired``) and ``returncode`` (negative: the
    signal that ended it). The exit status arrives on a pipe from the server, which reaps the
    child; a server that died first reads as ``-SIGKILL`` (its children die with it)."""

    def __init__(self, pid: int, status_fd: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._status: int | None = status_fd

    def _collect(self) -> None:
        assert self._status is not None
        try:
            data = os.read(self._status, 64)
        except OSError:
            data = b""
        os.close(self._status)
        self._status = None
        self.returncode = int(data) if data.strip() else -int(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def __del__(self) -> None:
        if getattr(self, "_status", None) is not None:
            try:
                os.close(self._status)  # type: ignore[arg-type]
            except OSError:
                pass


class Refused(OSError):
    """A server that started and will not serve; ``cuda_after``: the module whose import loaded the
    CUDA driver, where that was why (None otherwise)."""

    def __init__(self, message: str, cuda_after: str | None = None) -> None:
        super().__init__(message)
        self.cuda_after = cuda_after


def modules_for(libraries: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a server imports, in order: :data:`PRELOAD`, then the modules of ``libraries``
    (:data:`.preload.LIBRARIES`)."""
    from .preload import LIBRARIES

    return (*PRELOAD, *(m for lib in libraries for m in LIBRARIES[lib]))


class Zygote:
    """One running server and the caller's end of its socket."""

    def __init__(self, env: Mapping[str, str], modules: tuple[str, ...] = PRELOAD, wait: bool = True) -> None:
        """Start a server with ``env``: the first child's environment without its own ``PYTHONPATH``
        entry for stackpart (the server imports ``rewriter`` from :data:`PACKAGE` by location
        instead, so it needs no directory of its own and a checkout's root stays off its path).
        ``modules``: what it imports, in order (:func:`modules_for`). ``wait``: read its hello
        here (:meth:`await_hello`); False leaves that to the caller (:func:`prestart`).

        Raises:
            Refused: it refused to serve (why, in the message; ``cuda_after``: the module whose
                import left a forked child unable to use CUDA, if that was why).
            OSError: it did not start.
        """
        self.owner = os.getpid()
        self.env = dict(env)  # what it was started with (a shorter one started ahead gets the same)
        self.lock = threading.Lock()  # one request and its answer at a time on the socket
        self.children: list[weakref.ref[Forked]] = []
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # its own output goes nowhere: the imports' warnings stay out of the terminal and out of
            # the children's logs; what went wrong comes back on the socket
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(PACKAGE), str(theirs.fileno()), ",".join(modules), " " * _TITLE_ROOM],
                env=dict(env), cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, pass_fds=(theirs.fileno(),), preexec_fn=die_with_parent,
            )
        finally:
            theirs.close()
        if wait:
            self.await_hello()

    def await_hello(self) -> None:
        """Wait for the server's hello (its imports done), :data:`START_TIMEOUT_S` at most.

        Raises:
            Refused: it refused to serve (it is closed).
            OSError: it did not start (it is closed).
        """
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            hello = self._receive()[0]
        except (OSError, ValueError) as exc:
            self.close()
            raise OSError(f"the zygote did not start: {exc}") from exc
        if not hello.get("ready"):
            self.close()
            raise Refused(f"the zygote refused: {hello.get('refused', hello)}", hello.get("cuda_after"))
        self.sock.settimeout(None)

    def _receive(self) -> tuple[dict[str, Any], list[int]]:
        msg, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
        if not msg:
            raise OSError("the zygote exited")
        return json.loads(msg), fds

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None and self.sock.fileno() >= 0

    def fork(self, argv: list[str], env: Mapping[str, str], cwd: str, stdout: int, pass_fds: tuple[int, ...],
             module: str = CHILD_MODULE) -> Forked:
        """Fork one child running ``python -m module *argv`` as described in the module docstring.

        Raises:
            OSError: the server is gone or could not fork (the caller falls back to ``Popen``).
        """
        request = {"argv": argv, "env": dict(env), "cwd": cwd, "fds": list(pass_fds), "module": module}
        with self.lock:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [stdout, *pass_fds])
            reply, fds = self._receive()
        if "pid" not in reply or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"the zygote could not fork: {reply.get('error', reply)}")
        os.set_inheritable(fds[0], False)
        child = Forked(int(reply["pid"]), fds[0], [sys.executable, "-m", module, *argv])
        self.children = [c for c in self.children if c() is not None and c().poll() is None]  # type: ignore[union-attr]
        self.children.append(weakref.ref(child))
        return child

    def idle(self) -> bool:
        """No child of this server is still running (closing it would kill them)."""
        return all(c() is None or c().poll() is not None for c in self.children)  # type: ignore[union-attr]

    def close(self) -> None:
        """End the server (it kills the process groups of the children still running)."""
        try:
            self.sock.close()
        except OSError:
            pass
        proc = getattr(self, "proc", None)
        if proc is not None and self.owner == os.getpid():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


_servers: OrderedDict[tuple[tuple[str, str], ...], Zygote] = OrderedDict()
#: key -> a server started ahead of its first child (:func:`prestart`) whose hello is not read yet
_starting: dict[tuple[tuple[str, str], ...], Zygote] = {}
#: key -> the module whose import left a forked child unable to use CUDA in its refused server (None: refused otherwise)
_refused: dict[tuple[tuple[str, str], ...], str | None] = {}
#: the server environments (a key less its interpreter and modules) where importing torch itself
#: left a forked child unable to use CUDA: every server of one would refuse, so none is started again (each refusal
#: costs a torch import, seconds, on the caller's thread)
_first_import_refused: set[tuple[tuple[str, str], ...]] = set()
#: the environments (a key less its interpreter and modules) of the servers started ahead
_ahead_envs: list[tuple[tuple[str, str], ...]] = []
#: key -> what became of its server, for :func:`summary` (ready, or why it refused, with the seconds waited)
_said: dict[tuple[tuple[str, str], ...], str] = {}


def summary() -> str:
    """One line for a log: how this process's children start (forked from which server, or why
    each server tried refused), latest last; empty where no server was tried."""
    return "; ".join(_said.values())


def enabled() -> bool:
    """Whether children are forked from a server: Linux, and ``STACKPART_ZYGOTE`` is not ``0``."""
    return sys.platform.startswith("linux") and os.environ.get(SWITCH, "1").strip() != "0"


def _without_path(env: Mapping[str, str], package_path: str) -> dict[str, str]:
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != package_path)
    return out


def server_env(env: Mapping[str, str], package_path: str) -> dict[str, str]:
    """The import-time environment of a child's ``env``: without :data:`PER_CHILD`, :data:`SWITCH`
    (read by the caller only) and its own ``package_path`` entry of ``PYTHONPATH`` (the key of the
    server that forks it)."""
    return {k: v for k, v in _without_path(env, package_path).items() if k not in PER_CHILD and k != SWITCH}


def launch(argv: list[str], env: Mapping[str, str], cwd: str, stdout: int, pass_fds: tuple[int, ...],
           package_path: str, module: str = CHILD_MODULE, libraries: tuple[str, ...] = ()) -> Forked | None:
    """``python -m module *argv`` forked from the server of its environment ``env`` (started on first
    use, kept for the life of this process), or None where there is none to use: turned off,
    refused, failed (said in the debug log); the caller then starts the child itself.
    ``libraries``: the model libraries the child's trees import (:func:`.preload.libraries_for`),
    which a server of their own imports too; where that server cannot serve, the child is forked
    from the plain one. A server whose imports left a forked child unable to use CUDA is replaced by one that imports
    only the modules before that one. Servers are started from the main thread only (the death
    signal that ends one with this process follows the thread that started it); beyond
    :data:`MAX_SERVERS`, the least recently used one whose children have all exited is closed."""
    if not enabled():
        return None
    items = tuple(sorted(server_env(env, package_path).items()))
    if items in _first_import_refused:  # no server of this environment can serve: nothing more tried
        return None
    for libs in ((libraries, ()) if libraries else ((),)):
        modules = modules_for(libs)
        while modules:
            key = (("", sys.executable), ("", ",".join(modules))) + items
            server = _server(key, env, package_path, modules)
            if server is not None:
                try:
                    return server.fork(argv, env, cwd, stdout, pass_fds, module)
                except OSError as exc:
                    log.debug("zygote %d failed, this child starts with Popen: %s", server.proc.pid, exc)
                    _servers.pop(key, None)
                    server.close()
                    return None
            shorter = _shorter(key, modules)
            if shorter is None:
                if items in _first_import_refused:
                    return None
                break
            modules = shorter
    return None


def _shorter(key: tuple[tuple[str, str], ...], modules: tuple[str, ...]) -> tuple[str, ...] | None:
    """After ``key``'s server (importing ``modules``) refused: the modules of the server to try
    instead, those before the import that left a forked child unable to use CUDA; None where
    there is none (refused for another reason, or for the first import, which every server of this
    environment makes: the environment is then kept in :data:`_first_import_refused`)."""
    cuda_after = _refused.get(key)
    if cuda_after == PRELOAD[0]:
        _first_import_refused.add(key[2:])
        return None
    if cuda_after not in modules[1:]:
        return None
    return modules[: modules.index(cuda_after)]


def prestart(env: Mapping[str, str], package_path: str, libraries: tuple[str, ...] = ()) -> bool:
    """Start the server that :func:`launch` with this ``env``, ``package_path`` and ``libraries``
    would start first, without waiting for its imports: they run beside the caller's own work (a
    diagnose's setup and quiet rungs), and the first child, seconds later, is forked at once, or
    where the server refused, started with Popen at once (a refusal read at the first launch
    costs that launch a torch import). True where one was started; False where the zygote is off,
    this is not the main thread, or that server runs, is starting or was refused already."""
    if not enabled() or threading.current_thread() is not threading.main_thread():
        return False
    items = tuple(sorted(server_env(env, package_path).items()))
    if items in _first_import_refused:
        return False
    modules = modules_for(libraries)
    key = (("", sys.executable), ("", ",".join(modules))) + items
    if key in _servers or key in _starting or key in _refused:
        return False
    return _start_ahead(key, _without_path(env, package_path), modules)


def _start_ahead(key: tuple[tuple[str, str], ...], env: Mapping[str, str], modules: tuple[str, ...]) -> bool:
    _ahead_envs.append(key[2:])
    try:
        _starting[key] = Zygote(env, modules, wait=False)
    except OSError as exc:
        log.debug("no zygote started ahead: %s", exc)
        return False
    log.debug("zygote %d started ahead (importing up to %s)", _starting[key].proc.pid, modules[-1])
    return True


def _unlike_ahead(items: tuple[tuple[str, str], ...]) -> str:
    """Where servers were started ahead for another environment than ``items``, the names of the
    variables that differ from the last one (``; not the environment started ahead: A, B``): why
    a child's server had to start on its path after all; empty otherwise."""
    others = [dict(e) for e in _ahead_envs if e != items]
    if not others or items in _ahead_envs:
        return ""
    mine, theirs = dict(items), others[-1]
    names = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    return f"; not the environment started ahead: {', '.join(names)}"


def await_started() -> None:
    """Wait for every server :func:`prestart` started to be ready or to refuse (kept as
    :func:`launch` would keep it), so that its imports are over before the caller measures
    anything the host's CPUs would disturb. One refused because an import left a forked child
    unable to use CUDA is replaced at once, ahead again, by one importing only the modules before
    that one (:func:`launch` would start it on the first child's path, synchronously)."""
    for key in list(_starting):
        env = _starting[key].env
        modules = tuple(key[1][1].split(","))  # key: (interpreter, modules, *environment)
        if _server(key, {}, "", modules) is None and (shorter := _shorter(key, modules)) is not None:
            _start_ahead((key[0], ("", ",".join(shorter)), *key[2:]), env, shorter)


def _server(key: tuple[tuple[str, str], ...], env: Mapping[str, str], package_path: str,
            modules: tuple[str, ...]) -> Zygote | None:
    """The running server of ``key``, else a new one importing ``modules`` (None where it is refused
    or cannot start here; :data:`_refused` keeps why)."""
    server = _servers.get(key)
    if server is not None and not server.usable():
        _servers.pop(key)
        server.close()
        server = None
    if server is None:
        ahead = _starting.pop(key, None)  # started by prestart(): its hello is read here, on any thread
        if ahead is None and (key in _refused or threading.current_thread() is not threading.main_thread()):
            return None
        t0 = time.perf_counter()
        unlike = "" if ahead is not None else _unlike_ahead(key[2:])

        def waited() -> str:
            return f"({'started ahead, ' if ahead is not None else ''}{time.perf_counter() - t0:.1f} s waited{unlike})"

        try:
            if ahead is not None:
                ahead.await_hello()
                server = ahead
            else:
                server = Zygote(_without_path(env, package_path), modules)
        except OSError as exc:
            _refused[key] = cuda_after = getattr(exc, "cuda_after", None)
            _said[key] = f"{exc} {waited()}"
            if cuda_after in modules[1:]:
                log.debug("no zygote importing up to %s (%s); one importing up to %s is tried", modules[-1], exc,
                          modules[modules.index(cuda_after) - 1])
            elif set(modules) <= set(PRELOAD):
                log.debug("no zygote, children start with Popen: %s", exc)
            else:
                log.debug("no zygote with %s imported, the plain one is tried: %s", modules[-1], exc)
            return None
        log.debug("zygote %d ready %s %.1f s (imported up to %s)", server.proc.pid,
                  "(started ahead) after a wait of" if ahead is not None else "in", time.perf_counter() - t0, modules[-1])
        _servers[key] = server
        _said[key] = f"forked from a server importing up to {modules[-1]} {waited()}"
        for old in [k for k, z in _servers.items() if k != key and z.idle()][: max(0, len(_servers) - MAX_SERVERS)]:
            _servers.pop(old).close()
    _servers.move_to_end(key)
    return server


@atexit.register
def close_all() -> None:
    """Close every server this process started."""
    while _servers:
        _servers.popitem()[1].close()
    while _starting:
        _starting.popitem()[1].close()
    _ahead_envs.clear()


# ---------------------------------------------------------------------------------- the server


def _stop_openblas_threads() -> None:
    """Stop the worker threads of each OpenBLAS loaded here (numpy's starts one per core when it
    loads, and numpy is imported with torch where Triton is installed), as OpenBLAS's own
    ``pthread_atfork`` handler does before every fork (``blas_thread_shutdown_``); it starts them
    again at its next call, in this process or a child."""
    import ctypes

    with open("/proc/self/maps") as maps:
        libs = {f[-1] for f in (line.split() for line in maps)
                if len(f) >= 6 and f[-1].startswith("/") and "openblas" in os.path.basename(f[-1]).lower()}
    for path in sorted(libs):
        try:
            shutdown = getattr(ctypes.CDLL(path), "blas_thread_shutdown_", None)
        except OSError:
            continue
        if shutdown is not None:
            shutdown()


def _thread_names(tids: list[str]) -> str:
    """The threads other than the main one, as ``ps -L`` names them (``/proc/self/task/TID/comm``),
    with the Python name of those that run Python code (``threading.enumerate``)."""
    py = {t.native_id: t.name for t in threading.enumerate() if t is not threading.main_thread()}
    out = []
    for tid in tids:
        if int(tid) == os.getpid():
            continue
        comm = _comm(tid)
        out.append(f"{comm} (Python thread {py[int(tid)]!r})" if int(tid) in py else comm)
    return ", ".join(out)


def _comm(tid: str) -> str:
    """Thread ``tid``'s name as ``ps -L`` shows it (``/proc/self/task/TID/comm``; ``?`` where it is gone)."""
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _cuda_driver_threads() -> list[str]:
    """The names of this process's threads that the CUDA driver starts when it is initialised
    (``cuda00001c00008``: ``/proc/self/task/*/comm``)."""
    return [comm for comm in map(_comm, os.listdir("/proc/self/task")) if comm.startswith("cuda")]


def _fork_cannot_use_cuda(timeout_s: float = 10.0) -> str | None:
    """Why a child forked from this process now could not use CUDA (None: it could): this process
    initialised CUDA, the driver started its thread (:func:`_cuda_driver_threads`: the driver is
    initialised, by whatever called ``cuInit``), or a forked probe finds itself in PyTorch's bad fork
    (``torch.cuda._is_in_bad_fork()``: the parent registered the fork poisoning, as the CUDA
    runtime's device count does). A driver loaded but not initialised is no reason: torch 2.11
    (cu130) maps ``libcuda.so`` at ``import torch``, and a child forked after ``torch`` and
    ``torch._dynamo`` makes CUDA tensors (``benchmarks/zygote_serves.py --fork-probe``; docs/decisions.md,
    "Children forked from a pre-imported server").
    Nothing to check before torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_initialized():
        return "initialised CUDA (a forked child could not use it)"
    driver = _cuda_driver_threads()
    if driver:  # cuInit ran (torch 2.11's compile_fx import on a CUDA host): a fork copies one thread
        return f"started a CUDA driver thread ({', '.join(driver)}; a forked child would not have it)"
    pid = os.fork()
    if pid == 0:  # the probe: one flag read, then out without any exit handler of the server
        try:
            os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return None
    if code == 1:
        return "registered PyTorch's fork poisoning (a forked child could not use CUDA)"
    return f"left a forked probe unable to read PyTorch's fork state (exit {code})"


def _prepare(modules: tuple[str, ...]) -> dict[str, Any] | None:
    """Import ``modules`` in order; None when this process may fork clean children, else the
    refusal: ``{"refused": why}``, with ``"cuda_after"``: the module whose import loaded the CUDA
    driver."""
    import importlib

    os.environ.setdefault(NVML_CHECK, "1")
    for name in modules:
        importlib.import_module(name)
        why = _fork_cannot_use_cuda()
        if why is not None:
            return {"refused": f"importing {name} {why}", "cuda_after": name}
    _stop_openblas_threads()
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        return {"refused": f"{len(threads)} threads after the imports (a fork copies one): {_thread_names(threads)}"}
    allowed = {m.split(".", 1)[0] for m in modules}
    imported = [m for m in NEVER if m in sys.modules and m not in allowed]
    if imported:
        return {"refused": f"{', '.join(imported)} imported (a child's tree may hold its own)"}
    return None


def _open_fds(keep: set[int]) -> list[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.fstat(fd)
            except OSError:  # the listing's own descriptor, closed by now
                continue
            fds.append(fd)
    return fds


def _set_title(words: list[str]) -> None:
    """Show ``words`` as this process's command line (``/proc/self/cmdline``, ``ps``): written over
    the argument area the kernel reads it from (``arg_start``..``arg_end`` of ``/proc/self/stat``,
    man 5 proc), as setproctitle does; cut to the room the server's padded command line left."""
    import ctypes

    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # fields 48 and 49
    room = end - start
    title = "\0".join(words).encode(errors="replace")[: room - 1]
    ctypes.memmove(start, title + b"\0" * (room - len(title)), room)


def _run_child(request: dict[str, Any], fds: list[int], private: list[int], server_pid: int) -> None:
    """In a freshly forked child: become what ``Popen([python, -m, module, *argv], ...)`` would have
    started, run the module's ``main(argv)``, exit with its code. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in private:
            os.close(fd)
        os.setsid()
        die_with_parent()
        if os.getppid() != server_pid:  # the server died before the death signal was set
            os._exit(1)
        # the passed descriptors onto the numbers the job names: moved above them all first, so
        # placing one never closes another
        targets = [int(t) for t in request["fds"]]
        floor = max([*targets, *fds, 2]) + 1
        high = [_dup_above(fd, floor) for fd in fds]
        for fd in fds:
            os.close(fd)
        out, passed = high[0], high[1:]
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(out, 2)
        for fd, target in zip(passed, targets):
            os.dup2(fd, target)
        for fd in high:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # what ``python -m`` gives: the working directory, then PYTHONPATH (the server's, with the
        # child's own entry for stackpart), then the rest
        mine = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:] = [os.getcwd(), *mine, *sys.path]
        import importlib

        importlib.invalidate_caches()
        module_name = request.get("module") or CHILD_MODULE
        module = importlib.import_module(module_name)
        sys.argv = [str(getattr(module, "__file__", module_name)), *request["argv"]]
        _set_title([sys.executable, "-m", module_name, *request["argv"]])
        try:
            result = module.main(list(request["argv"]))
            code = result if isinstance(result, int) else (0 if result is None else 1)
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
            import traceback

            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()  # the interpreter's exit: logging flushed, compile workers shut down
        except BaseException:  # noqa: BLE001
            pass
    except BaseException:  # noqa: BLE001 - becoming the child failed: said on its stderr (or the server's)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _dup_above(fd: int, floor: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, floor)


def serve(sock: socket.socket) -> None:
    """Fork a child per request until the caller closes its end; reap them and report each exit
    status on its own pipe. At the end, kill the process groups of the children still running."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, int] = {}  # pid -> write end of its status pipe
    me = os.getpid()

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            w = children.pop(pid, None)
            if w is not None:
                try:
                    os.write(w, f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                os.close(w)

    try:
        while True:
            ready = select.select([sock, wake_r], [], [])[0]
            if wake_r in ready:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
            if sock not in ready:
                continue
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            if not msg:
                return
            try:
                request = json.loads(msg)
                status_r, status_w = os.pipe()
                pid = os.fork()
            except (ValueError, OSError) as exc:
                for fd in fds:
                    os.close(fd)
                socket.send_fds(sock, [json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()], [])
                continue
            if pid == 0:
                _run_child(request, fds, [sock.fileno(), wake_r, wake_w, status_r, status_w, *children.values()], me)
            for fd in fds:
                os.close(fd)
            children[pid] = status_w
            socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [status_r])
            os.close(status_r)
            reap()  # one that exited before its status pipe was registered
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def main(argv: list[str]) -> int:
    """The server (started by :class:`Zygote` as ``python -c _BOOT PACKAGE SOCKET_FD MODULES padding``,
    MODULES comma-separated)."""
    sock = socket.socket(fileno=int(argv[0]))
    _set_title([sys.executable, "-m", "rewriter.engine.zygote", "(stackpart's measurement children are forked from here)"])
    why: dict[str, Any] | None
    try:
        why = _prepare(tuple(n for n in argv[1].split(",") if n))
    except Exception as exc:  # noqa: BLE001 - said to the caller, which starts its children itself
        import traceback

        why = {"refused": f"an import failed: {type(exc).__name__}: {exc} ({traceback.format_exc(limit=-3)[-1500:]})"}
    if why is None:
        fds = _open_fds({sock.fileno()})
        if fds:
            why = {"refused": f"descriptors {fds} open after the imports (a child's pipes could land on them)"}
    socket.send_fds(sock, [json.dumps(why or {"ready": True}).encode()], [])
    if why is None:
        serve(sock)
    return 0

