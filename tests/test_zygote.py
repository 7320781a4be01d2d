"""A measurement child forked from the pre-imported server (rewriter.engine.zygote) is the child a
fresh ``python -m rewriter.engine.child`` would have been: its own environment, working directory,
command line, session, compile caches and empty Dynamo counters, the user's modules imported fresh
from its tree; a timeout kills its process group; it dies with the caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rewriter.engine import zygote
from rewriter.engine.runner import ServedChild
from rewriter.plan import Harness

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux-only")

#: A harness whose build_model records what its process sees (into PROBE), then ACTs.
PROBE_HARNESS = """\
import gc, json, os, sys, time
import torch


def _stale():
    # strings naming the compile cache directories of the server's first child, anywhere in this process
    hits, needle = [], STALE + "/"
    for o in gc.get_objects():
        if isinstance(o, dict):
            items = list(o.items())
        elif isinstance(o, (list, tuple, set)):
            items = [(None, v) for v in o]
        else:
            continue
        for k, v in items:
            for s in (k, v):
                if isinstance(s, bytes):
                    s = s.decode(errors="replace")
                if isinstance(s, str) and needle in s and s != needle:
                    hits.append(s)
    return hits


def build_model():
    import torch._dynamo
    from torch._dynamo.package import DynamoCache
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    import click
    import transformers

    rec = {
        "env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "path": list(sys.path),
        "cache": cache_dir(), "dynamo_cache": DynamoCache.path_prefix(),
        "counters": {k: dict(v) for k, v in torch._dynamo.utils.counters.items() if v},
        "hash": hash("stackpart"), "threads": torch.get_num_threads(), "pid": os.getpid(),
        "sid": os.getsid(0), "pgid": os.getpgid(0), "flags": list(sys.flags),
        "click": getattr(click, "MARK", click.__file__), "transformers": getattr(transformers, "MARK", None),
        "stale": _stale(), "cmdline": open("/proc/self/cmdline", "rb").read().decode(errors="replace"),
    }
    with open(PROBE, "w") as f:
        json.dump(rec, f)
    ACT
    return torch.nn.Linear(2, 2)


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 2),)
"""


def _tree(tmp_path: Path, act: str = "pass", stale: str = "/nowhere/") -> tuple[Path, Path]:
    """A tree with the probe harness and its own ``click`` and ``transformers`` (names the test
    process has imported, or that the server must never import)."""
    src = tmp_path / "src"
    (src / "transformers").mkdir(parents=True)
    (src / "click.py").write_text("MARK = 'the tree'\n")
    (src / "transformers" / "__init__.py").write_text("MARK = 'the tree'\n")
    probe = tmp_path / "probe.json"
    (src / "harness.py").write_text(
        PROBE_HARNESS.replace("PROBE", repr(str(probe))).replace("ACT", act).replace("STALE", repr(stale)))
    return src, probe


def _child(tmp_path: Path, src: Path, name: str = "cold-eager", timeout_s: float = 120) -> ServedChild:
    work = tmp_path / f"work-{name}"
    (work / "ref").mkdir(parents=True)
    job = {"harness": Harness(file="harness.py", device="cpu", shapes=[{"batch": 2}]).model_dump(),
           "backend": "eager", "force_backend": None, "seed": 0, "ref": str(work / "ref"), "warmup": 1, "reps": 1,
           "budget_s": None, "construct_on_device": False, "phase": "cold", "variants": ["eager"], "tree": str(src),
           "prepare": "eager", "reference": True, "library_modules": [], "site": None, "stance": None}
    return ServedChild(job, work, name, work / "caches" / name, timeout_s)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids: list[int], within_s: float = 15) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool) -> tuple[dict, ServedChild]:
    """What a child started ``forked`` (else with Popen) records, and its handle; forked, it is the
    second child of a new server, whose imports ran with the first one's environment."""
    import click  # noqa: F401  (the test process has its own click: the child must still get the tree's)

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    if forked:
        monkeypatch.delenv(zygote.SWITCH, raising=False)
    else:
        monkeypatch.setenv(zygote.SWITCH, "0")
    way = "forked" if forked else "popen"
    src, _ = _tree(tmp_path / f"first-{way}")
    first = _child(tmp_path, src, f"first-{way}")
    first.close()
    src, probe = _tree(tmp_path / f"tree-{way}", stale=str(Path(first.stderr_path).parent / "caches" / first.name))
    child = _child(tmp_path, src, f"cold-eager-{way}")
    try:
        assert child.wait_built(), child.wait_cold()
        assert isinstance(first.proc, zygote.Forked) == isinstance(child.proc, zygote.Forked) == forked
        return json.loads(probe.read_text()), child
    finally:
        child.close()


def test_a_forked_child_sees_what_a_fresh_interpreter_would(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "_servers", type(zygote._servers)())  # a new server, started by the first child
    monkeypatch.setattr(zygote, "_refused", {})
    try:
        _compare(tmp_path, monkeypatch)
    finally:
        zygote.close_all()


def _compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = {}
    for forked in (True, False):
        got[forked], child = _probe(tmp_path, monkeypatch, forked)
        rec = got[forked]
        work = Path(child.stderr_path).parent
        caches = work / "caches" / child.name
        assert rec["cwd"] == str(work)
        assert rec["argv"][1:] == [str(work / f"{child.name}.job.json")]
        assert rec["argv"][0].endswith("rewriter/engine/child.py")
        assert "rewriter.engine.child" in rec["cmdline"] and child.name in rec["cmdline"]
        assert rec["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(caches / "inductor")
        assert rec["env"]["TRITON_CACHE_DIR"] == str(caches / "triton")
        assert rec["cache"] == str(caches / "inductor")
        assert rec["dynamo_cache"].startswith(str(caches / "inductor"))
        assert rec["stale"] == []
        assert rec["counters"] == {}
        assert rec["env"]["PYTHONHASHSEED"] == "0"
        assert rec["sid"] == rec["pid"] == rec["pgid"] == child.proc.pid
        assert rec["click"] == "the tree" and rec["transformers"] == "the tree"
    fresh, fork = got[False], got[True]
    for rec in (fresh, fork):
        rec["env"].pop(zygote.SWITCH, None)
    # the same process but for its own paths

    def norm(value, own):
        return json.loads(json.dumps(value).replace(str(tmp_path), "T").replace(own, "X"))

    for key in ("env", "path", "threads", "flags"):
        assert norm(fork[key], "-forked") == norm(fresh[key], "-popen"), key
    assert fork["hash"] == fresh["hash"]  # PYTHONHASHSEED=0 in both


@pytest.mark.parametrize("ignores_sigterm", [False, True], ids=["sigterm", "sigkill"])
def test_a_timed_out_forked_child_is_killed_with_its_process_group(tmp_path, monkeypatch, ignores_sigterm):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    pidfile = tmp_path / "grandchild.pid"
    act = (f"import signal, subprocess\n    g = subprocess.Popen(['sleep', '600'])\n"
           f"    open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
           + ("    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignores_sigterm else "")
           + "    time.sleep(600)")
    src, _ = _tree(tmp_path, act)
    child = _child(tmp_path, src, timeout_s=2)
    assert isinstance(child.proc, zygote.Forked)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():  # hung in its build, with a grandchild
        assert child.proc.poll() is None and time.monotonic() < deadline, child.stderr_path.read_text()
        time.sleep(0.05)
    result = child.wait_cold()  # times out after 2 s: SIGTERM to the group, SIGKILL 5 s later
    assert result.code == -1 and result.error["kind"] == "timeout"
    expected = -signal.SIGKILL if ignores_sigterm else -signal.SIGTERM
    assert child.proc.returncode == expected
    assert _gone([child.proc.pid, int(pidfile.read_text())])


CALLER = """\
import sys, time
from pathlib import Path
from rewriter.engine import zygote
from rewriter.engine.runner import child_env, package_path

work = Path(sys.argv[1])
pkg = package_path(work)
env = child_env(work / "caches", [pkg])
with open(work / "out.txt", "wb") as out:
    child = zygote.launch(["600"], env, str(work), out.fileno(), (), pkg, module="sleeper")
server = zygote._servers[next(iter(zygote._servers))]
(work / "pids").write_text(f"{server.proc.pid} {child.pid}")
time.sleep(600)
"""


def test_the_server_and_its_children_die_with_a_sigkilled_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    (tmp_path / "sleeper.py").write_text("import time\n\ndef main(argv):\n    time.sleep(int(argv[0]))\n")
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path)], cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pids").exists() or not (tmp_path / "pids").read_text():
            assert caller.poll() is None and time.monotonic() < deadline, "the caller never forked its child"
            time.sleep(0.05)
        server, child = map(int, (tmp_path / "pids").read_text().split())
        assert _alive(server) and _alive(child)
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        assert _gone([server, child]), "the server or its child outlived the SIGKILLed caller"
    finally:
        if caller.poll() is None:
            caller.kill()


def test_a_server_that_cannot_start_leaves_the_child_to_popen_and_says_so_in_the_debug_log(tmp_path, monkeypatch,
                                                                                             caplog):
    import logging

    def refuse(self, *args, **kwargs):
        raise OSError("the zygote refused: 2 threads after the imports (a fork copies one)")

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    monkeypatch.setattr(zygote, "_servers", type(zygote._servers)())
    monkeypatch.setattr(zygote, "_refused", {})
    monkeypatch.setattr(zygote.Zygote, "__init__", refuse)
    src, probe = _tree(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="rewriter.engine.zygote"):
        _one_child(tmp_path, src, probe, subprocess.Popen)
        second = _child(tmp_path, src, "cold-again")  # refused once: not tried again for the same environment
        second.close()
    assert isinstance(second.proc, subprocess.Popen)
    assert [r.getMessage() for r in caplog.records if "no zygote" in r.getMessage()] == [
        "no zygote, children start with Popen: the zygote refused: 2 threads after the imports (a fork copies one)"]


def test_beyond_max_servers_only_a_server_whose_children_have_exited_is_closed(monkeypatch):
    """A third environment starts a third server; the least recently used server is closed only
    once its children have exited (closing a server kills its children)."""
    made = []

    class Fake:
        def __init__(self, env, libraries=()):
            self.env, self.busy, self.closed = env, True, False
            self.proc = type("P", (), {"pid": len(made)})()
            made.append(self)

        def usable(self):
            return not self.closed

        def idle(self):
            return not self.busy

        def fork(self, *args):
            return self

        def close(self):
            self.closed = True

    monkeypatch.delenv(zygote.SWITCH, raising=False)
    monkeypatch.setattr(zygote, "Zygote", Fake)
    monkeypatch.setattr(zygote, "_servers", type(zygote._servers)())
    monkeypatch.setattr(zygote, "MAX_SERVERS", 2)

    def launch(threads):
        return zygote.launch([], {"OMP_NUM_THREADS": threads, "PYTHONPATH": "/p"}, "/", 1, (), "/p")

    a, b = launch("1"), launch("2")
    assert launch("1") is a  # the same import-time environment: the same server
    c = launch("3")  # both others still have children running: none closed
    assert [s.closed for s in made] == [False, False, False]
    b.busy = False
    d = launch("4")
    assert b.closed and not a.closed and not c.closed and not d.closed
    assert [s.env["OMP_NUM_THREADS"] for s in zygote._servers.values()] == ["1", "3", "4"]


OPENBLAS_PROBE = r"""
import os, sys
import numpy as np
from rewriter.engine.zygote import _stop_openblas_threads
a = np.random.rand(512, 512)
a @ a  # OpenBLAS's worker threads run (one per core)
before = len(os.listdir("/proc/self/task"))
_stop_openblas_threads()
after = len(os.listdir("/proc/self/task"))
pid = os.fork()
if pid == 0:  # a forked child still multiplies (OpenBLAS starts its threads again)
    os._exit(0 if abs(float((a @ a).sum()) - float(np.dot(a, a).sum())) < 1e-6 else 1)
_, status = os.waitpid(pid, 0)
print(before, after, os.waitstatus_to_exitcode(status), float((a @ a).sum()) > 0)
"""


def test_the_server_stops_openblas_worker_threads_before_it_forks_and_blas_still_works():
    # On the H200 numpy is imported with torch (Triton installed) and its OpenBLAS starts one thread
    # per core: the server refused ("17 threads after the imports") until it stopped them as
    # OpenBLAS's own fork handler does.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", OPENBLAS_PROBE], env=env, capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    before, after, child, parent_ok = out.stdout.split()
    assert (int(before), int(after)) == (2, 1), out.stdout
    assert child == "0" and parent_ok == "True"


#: A harness that imports the installed transformers and records what its process had imported.
LIBRARY_HARNESS = """\
import json, os, sys
import torch
import transformers


def build_model():
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=32, n_positions=16))
    with torch.no_grad():
        out = model(torch.arange(8).reshape(1, 8)).last_hidden_state
    with open(PROBE, "w") as f:
        json.dump({"transformers": transformers.__file__, "path": list(sys.path), "env": dict(os.environ),
                   "out": out.flatten().tolist(), "pid": os.getpid()}, f)
    return torch.nn.Linear(2, 2)


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 2),)
"""


def test_a_tree_that_imports_transformers_is_forked_from_a_server_that_imported_it(tmp_path, monkeypatch):
    """The child of a tree that imports the installed transformers (and holds no copy of its own)
    comes from a server with transformers imported, and sees what a fresh interpreter would: the
    same transformers, environment, sys.path and outputs."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(zygote, "_servers", type(zygote._servers)())
    monkeypatch.setattr(zygote, "_refused", {})
    got = {}
    try:
        for way in ("forked", "popen"):
            if way == "popen":
                monkeypatch.setenv(zygote.SWITCH, "0")
            src = tmp_path / f"tree-{way}"
            src.mkdir()
            probe = tmp_path / f"probe-{way}.json"
            (src / "harness.py").write_text(LIBRARY_HARNESS.replace("PROBE", repr(str(probe))))
            child = _child(tmp_path, src, f"lib-{way}")
            try:
                assert child.wait_built(), child.wait_cold()
                assert isinstance(child.proc, zygote.Forked) == (way == "forked")
            finally:
                child.close()
            got[way] = json.loads(probe.read_text())
        [(key, server)] = list(zygote._servers.items())
        assert "transformers.modeling_utils" in key[1][1].split(",")  # the library server served it
    finally:
        zygote.close_all()
    fork, fresh = got["forked"], got["popen"]
    assert fork["transformers"] == fresh["transformers"] == transformers.__file__
    assert fork["out"] == fresh["out"]
    fresh["env"].pop(zygote.SWITCH)

    def norm(value, own):
        return json.loads(json.dumps(value).replace(str(tmp_path), "T").replace(own, "X"))

    assert norm(fork["env"], "-forked") == norm(fresh["env"], "-popen")
    assert norm(fork["path"], "-forked") == norm(fresh["path"], "-popen")


def test_a_refusal_for_threads_names_them():
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="probe-thread", daemon=True)
    t.start()
    try:
        said = zygote._thread_names(os.listdir("/proc/self/task"))
    finally:
        stop.set()
        t.join()
    assert "(Python thread 'probe-thread')" in said
    assert str(os.getpid()) not in said.split(", ")


def _fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    """``name`` importable by the servers started from here on (a module on their ``PYTHONPATH``)."""
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / f"{name}.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", f"{lib}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


#: A module after whose import a forked child finds itself in PyTorch's bad fork, as one does after
#: an import that registered the fork poisoning (torch._inductor.compile_fx on an H200 host with
#: torch 2.11: the CUDA runtime's device count).
FAKE_CUDA = """\
import torch.cuda
torch.cuda._is_in_bad_fork = lambda: True
"""

#: A module whose import maps a file named libcuda.so.1, as ``import torch`` maps the driver with
#: torch 2.11 (cu130) without initialising it.
FAKE_DRIVER_LOADED = """\
import ctypes, os
_path = os.path.join(os.path.dirname(__file__), "libcuda.so.1")
with open(_path, "wb") as f:
    f.write(bytes(4096))
_fd = os.open(_path, os.O_RDONLY)
_libc = ctypes.CDLL(None)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
MAPPED = _libc.mmap(None, 4096, 1, 2, _fd, 0)  # PROT_READ, MAP_PRIVATE: mapped, no descriptor kept
os.close(_fd)
assert any("libcuda.so.1" in line for line in open("/proc/self/maps"))
"""


def test_a_server_whose_import_loads_the_cuda_driver_is_replaced_by_one_importing_less(tmp_path, monkeypatch, caplog):
    import logging

    _fake_module(tmp_path, monkeypatch, "fakecuda", FAKE_CUDA)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "PRELOAD", ("torch", "torch._dynamo", "fakecuda", "torch._inductor"))
    src, probe = _tree(tmp_path)
    try:
        with caplog.at_level(logging.DEBUG, logger="rewriter.engine.zygote"):
            _one_child(tmp_path, src, probe, zygote.Forked)
            again = _child(tmp_path, src, "cold-again")  # straight to the server that serves
            again.close()
        assert isinstance(again.proc, zygote.Forked)
        [key] = list(zygote._servers)
        assert key[1][1] == "torch,torch._dynamo"
        said = [r.getMessage() for r in caplog.records if "no zygote" in r.getMessage()]
        assert said == ["no zygote importing up to torch._inductor (the zygote refused: importing fakecuda registered "
                        "PyTorch's fork poisoning (a forked child could not use CUDA)); one importing up to "
                        "torch._dynamo is tried"], said
    finally:
        zygote.close_all()


def test_where_importing_torch_itself_loads_the_cuda_driver_no_second_server_is_started(tmp_path, monkeypatch, caplog):
    """The first module every server imports leaves a forked child unable to use CUDA: the server a
    transformers child asks for refuses, and neither
    the plain server nor any later child's starts one again (each refusal cost a torch import on the
    caller's thread, before the child itself was started); the children start with Popen."""
    import logging

    _fake_module(tmp_path, monkeypatch, "fakecuda", FAKE_CUDA)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "PRELOAD", ("fakecuda", "torch"))
    starts = _count_starts(monkeypatch)
    pkg = str(Path(zygote.__file__).resolve().parents[2])
    env = dict(os.environ)
    try:
        with caplog.at_level(logging.DEBUG, logger="rewriter.engine.zygote"):
            got = [zygote.launch(["job.json"], env, str(tmp_path), 1, (), pkg, libraries=libs)
                   for libs in (("transformers",), (), ("transformers",))]
        assert got == [None, None, None]
        assert starts == [(zygote.modules_for(("transformers",)), True)], starts  # one server tried, then none
        assert not zygote._servers
    finally:
        zygote.close_all()
    # real children (their own environment: one refused server for it, then none) run, with Popen
    starts.clear()
    src, probe = _tree(tmp_path)
    _two_children_start_with_popen(tmp_path, src)
    assert len(starts) == 1, starts


def _one_child(tmp_path: Path, src: Path, probe: Path, kind: type, name: str = "cold-eager") -> ServedChild:
    """One child of ``src`` run through its cold phase: started as ``kind`` (``zygote.Forked`` or
    ``subprocess.Popen``), the very process that built the model (its pid in ``probe``); closed."""
    child = _child(tmp_path, src, name)
    try:
        assert isinstance(child.proc, kind)
        assert child.wait_built(), child.wait_cold()
        assert json.loads(probe.read_text())["pid"] == child.proc.pid
    finally:
        child.close()
    return child


def _two_children_start_with_popen(tmp_path: Path, src: Path) -> None:
    """Two children of ``src`` run their cold phase, each started with Popen (no server serves)."""
    for name in ("cold-eager", "cold-again"):
        child = _child(tmp_path, src, name)
        try:
            assert not isinstance(child.proc, zygote.Forked)
            assert child.wait_built(), child.wait_cold()
        finally:
            child.close()


def _count_starts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], bool]]:
    """Every server start from here on: (modules, whether its hello was waited for there)."""
    starts: list[tuple[tuple[str, ...], bool]] = []
    init = zygote.Zygote.__init__

    def counted(self, env, modules=zygote.PRELOAD, wait=True):  # noqa: ANN001, ANN202
        starts.append((tuple(modules), wait))
        init(self, env, modules, wait)

    monkeypatch.setattr(zygote.Zygote, "__init__", counted)
    return starts


def _fresh_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    monkeypatch.setattr(zygote, "_servers", type(zygote._servers)())
    monkeypatch.setattr(zygote, "_starting", {})
    monkeypatch.setattr(zygote, "_refused", {})
    monkeypatch.setattr(zygote, "_first_import_refused", set())
    monkeypatch.setattr(zygote, "_ahead_envs", [])
    monkeypatch.setattr(zygote, "_said", {})


def test_a_server_started_ahead_serves_the_first_child_of_its_environment(tmp_path, monkeypatch):
    """diagnose starts the children's server before its setup (runner.prestart_server, on a GPU
    host): prestart returns at once, without the server's imports; the first measurement child of
    that device and tree is forked from that very server, and no other is started."""
    from rewriter.engine.runner import prestart_server

    _fresh_servers(monkeypatch)
    starts = _count_starts(monkeypatch)
    src, probe = _tree(tmp_path)
    try:
        t0 = time.perf_counter()
        assert prestart_server("cpu", [src]) is True
        assert time.perf_counter() - t0 < 2.0  # torch is imported by the server, not waited for here
        assert prestart_server("cpu", [src]) is False  # starting already: not a second one
        [ahead] = zygote._starting.values()
        _one_child(tmp_path, src, probe, zygote.Forked)
        assert starts == [(zygote.PRELOAD, False)], starts
        assert list(zygote._servers.values()) == [ahead] and not zygote._starting
    finally:
        zygote.close_all()


def test_a_refusal_of_a_server_started_ahead_is_read_before_the_first_child(tmp_path, monkeypatch):
    """The server started ahead refuses (importing torch itself loads the CUDA driver, as torch
    2.11 on an H200 host does): await_started reads the refusal, and the children start with
    Popen at once, no server started again."""
    from rewriter.engine.runner import prestart_server

    _fake_module(tmp_path, monkeypatch, "fakecuda", FAKE_CUDA)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "PRELOAD", ("fakecuda", "torch"))
    starts = _count_starts(monkeypatch)
    src, _ = _tree(tmp_path)
    try:
        assert prestart_server("cpu", [src]) is True
        zygote.await_started()
        assert not zygote._starting and not zygote._servers
        assert list(zygote._refused.values()) == ["fakecuda"]
        _two_children_start_with_popen(tmp_path, src)
        assert starts == [(("fakecuda", "torch"), False)], starts
    finally:
        zygote.close_all()


def test_a_server_started_ahead_and_never_used_is_closed_with_the_others(monkeypatch):
    from rewriter.engine.runner import prestart_server

    _fresh_servers(monkeypatch)
    assert prestart_server("cpu", []) is True
    [ahead] = zygote._starting.values()
    zygote.close_all()
    assert not zygote._starting and ahead.proc.poll() is not None


def test_a_driver_loaded_but_not_initialised_does_not_stop_the_server(tmp_path, monkeypatch):
    """torch 2.11 maps libcuda.so at ``import torch`` and initialises nothing: a child forked then
    uses CUDA (benchmarks/zygote_serves.py --fork-probe on the H200), so the server serves."""
    _fake_module(tmp_path, monkeypatch, "fakedriver", FAKE_DRIVER_LOADED)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "PRELOAD", ("torch", "fakedriver", "torch._dynamo"))
    src, probe = _tree(tmp_path)
    try:
        child = _child(tmp_path, src)
        try:
            assert isinstance(child.proc, zygote.Forked), zygote._refused
            assert child.wait_built(), child.wait_cold()
        finally:
            child.close()
    finally:
        zygote.close_all()


def test_a_fork_that_could_not_use_cuda_is_named(monkeypatch):
    """In the server after each import: CUDA initialised here, or a forked probe in PyTorch's bad
    fork, is a reason to refuse; neither is none."""
    import torch

    assert zygote._fork_cannot_use_cuda() is None
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    assert zygote._fork_cannot_use_cuda() == "registered PyTorch's fork poisoning (a forked child could not use CUDA)"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert zygote._fork_cannot_use_cuda() == "initialised CUDA (a forked child could not use it)"


def test_a_server_started_ahead_that_refuses_after_an_import_is_replaced_ahead(tmp_path, monkeypatch):
    """Started ahead, the server refuses after an import leaves a forked child unable to use CUDA:
    await_started starts, ahead again, the one importing only the modules before it, and the first
    child is forked from that one: no server start waits on the child's path."""
    from rewriter.engine.runner import prestart_server

    _fake_module(tmp_path, monkeypatch, "fakecuda", FAKE_CUDA)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "PRELOAD", ("torch", "torch._dynamo", "fakecuda", "torch._inductor"))
    starts = _count_starts(monkeypatch)
    src, _ = _tree(tmp_path)
    try:
        assert prestart_server("cpu", [src]) is True
        zygote.await_started()
        [key] = list(zygote._starting)
        assert key[1][1] == "torch,torch._dynamo" and not zygote._servers
        child = _child(tmp_path, src)
        try:
            assert isinstance(child.proc, zygote.Forked)
            assert child.wait_built(), child.wait_cold()
        finally:
            child.close()
        assert starts == [(zygote.PRELOAD, False), (("torch", "torch._dynamo"), False)], starts
    finally:
        zygote.close_all()


def test_the_summary_says_how_children_start(tmp_path, monkeypatch):
    """diagnose's log line for the early start says whether its children were forked, or why each
    server tried refused, with the seconds it waited."""
    _fake_module(tmp_path, monkeypatch, "fakecuda", FAKE_CUDA)
    _fresh_servers(monkeypatch)
    monkeypatch.setattr(zygote, "_said", {})
    monkeypatch.setattr(zygote, "PRELOAD", ("torch", "fakecuda", "torch._dynamo"))
    assert zygote.summary() == ""
    src, _ = _tree(tmp_path)
    try:
        _child(tmp_path, src).close()
    finally:
        zygote.close_all()
    said = zygote.summary()
    assert said.startswith("the zygote refused: importing fakecuda registered PyTorch's fork poisoning (a forked child "
                           "could not use CUDA) (") and "; forked from a server importing up to torch (" in said, said
    assert said.count(" s waited)") == 2 and "started ahead" not in said


def test_a_cuda_driver_thread_is_a_reason_not_to_fork(monkeypatch):
    """cuInit starts a driver thread (``cuda00001c00008`` after torch 2.11's compile_fx import on the
    H200); a fork would not copy it: the import that started it is named, so a server importing
    only the modules before it is tried."""
    import torch  # noqa: F401  (nothing is checked before torch is imported)

    monkeypatch.setattr(zygote, "_cuda_driver_threads", lambda: ["cuda00001c00008"])
    assert zygote._fork_cannot_use_cuda() == "started a CUDA driver thread (cuda00001c00008; a forked child would not have it)"
    monkeypatch.undo()
    assert zygote._cuda_driver_threads() == []  # none here: the CPU build of torch never starts the driver


def test_a_child_whose_environment_is_not_the_one_started_ahead_says_which_variables_differ(tmp_path, monkeypatch):
    """A variable set in the caller after its server was started ahead: the child's server starts
    on its path (its environment is another key), and the summary names the variable (not its
    value), which is what to look for when that start costs the first child seconds."""
    from rewriter.engine.runner import prestart_server

    _fresh_servers(monkeypatch)
    src, _ = _tree(tmp_path)
    try:
        assert prestart_server("cpu", [src]) is True
        monkeypatch.setenv("STACKPART_TEST_LATE", "1")
        child = _child(tmp_path, src)
        child.close()
        said = zygote.summary()
        assert said.endswith("s waited; not the environment started ahead: STACKPART_TEST_LATE)"), said
    finally:
        zygote.close_all()


def test_inside_environment_pinned_children_start_from_the_environment_on_entry(tmp_path, monkeypatch):
    """diagnose pins the children's environment at its start: a variable this process sets later
    (torch, a library, a rung) is not in a child's environment, nor in its server's key."""
    from rewriter.engine.runner import child_env, environment_pinned

    monkeypatch.delenv("STACKPART_TEST_LATE", raising=False)
    with environment_pinned():
        monkeypatch.setenv("STACKPART_TEST_LATE", "1")
        with environment_pinned():  # nested: the outermost entry's holds
            assert "STACKPART_TEST_LATE" not in child_env(tmp_path, [])
        assert child_env(tmp_path, [], base={"A": "1"})["A"] == "1"  # an explicit base wins
    assert child_env(tmp_path, [])["STACKPART_TEST_LATE"] == "1"
