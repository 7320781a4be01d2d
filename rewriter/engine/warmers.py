"""Shape warmers: a static-shape variant's later shapes compiled beside its first.

A variant that compiles each harness shape from scratch (:attr:`.options.Variant.warm_shapes`:
``torch.compile(model, dynamic=False)``, one static graph per input resolution) pays its compiles
one after the other in its cold phase: for an SD-1.5-sized UNet at two latent sizes, about two
minutes (docs/decisions.md, "Shape warmers", has the figures). The graph its second shape compiles is the
graph a fresh process compiles at that shape, so a warmer, a child of its own started with the
variant's (same job, same tree, a compile cache folder of its own), compiles shape ``i`` while the
variant compiles shape 0; when the variant reaches shape ``i`` it waits for that warmer to end,
copies its cache into its own, and its first call there loads the compiled code from Inductor's
FX graph cache and AOTAutograd's cache (a fresh Dynamo trace, then a cache hit: "Compile Time
Caching in torch.compile", PyTorch tutorials), so its cold phase ends about one compile sooner.
Only the ``inductor`` backend's compiled code is cached, so only there are warmers started.

What the report says is unchanged in kind: a shape's ``compile_s`` is its own compile's, measured
where it ran (the warmer, beside the variant's first shape: like :attr:`.options.Options.parallel_cold`,
its seconds include what the other compile took from the host's CPUs; the backend's first-compile
costs it pays beforehand, on a throwaway function), and ``compile_s_per_start`` sums them: an upper
bound of what one process pays one after the other at a restart (docs/decisions.md, "Shape warmers").
A shape whose call found no cache hit (the warmer failed, or compiled other code) keeps the
variant's own compile seconds and says why (``warmer``). Warmers run only where
:attr:`.options.Options.warm_shapes` allows (by default where compiles may overlap,
:func:`.cost.may_overlap`); each exits once its shape has compiled.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from .cost import may_overlap
from .options import Options, Variant

#: At most this many warmers per variant (shapes 1..MAX_WARMERS); later shapes compile in the
#: variant's own process, as without warmers. Each is a compile on the host's CPUs and a copy of
#: the model on the device while it runs.
MAX_WARMERS = 3

#: How often the variant's child looks for its warmer's result, in seconds.
POLL_S = 0.2


#: The backends whose compiled code Inductor's FX graph cache and AOTAutograd's cache hold: a
#: warmer's work reaches the variant through them, so under any other backend (``eager``,
#: ``aot_eager``) a warmer would compile for nothing.
CACHED_BACKENDS = ("inductor",)


def warmed_shapes(v: Variant, opts: Options, device: str, shapes: int, backend: str = "inductor") -> list[int]:
    """The shape indices whose compile a warmer runs for ``v`` (``shapes``: how many the harness
    has; ``backend``: the one its compiles use, a forced one included): 1..min(shapes - 1,
    :data:`MAX_WARMERS`) where ``v`` compiles each shape from scratch, the backend's compiled code
    is cached (:data:`CACHED_BACKENDS`) and warmers are allowed (``opts.warm_shapes``, or by default
    :func:`.cost.may_overlap`); else none."""
    if not v.warm_shapes or shapes < 2 or backend not in CACHED_BACKENDS or caches_off():
        return []
    allowed = opts.warm_shapes if opts.warm_shapes is not None else may_overlap(opts.overlap, device)
    return list(range(1, min(shapes, MAX_WARMERS + 1))) if allowed else []


def caches_off() -> bool:
    """Whether this environment turns Inductor's compiled-code caches off
    (``TORCHINDUCTOR_FX_GRAPH_CACHE=0``, ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``): a warmer's work
    could not reach the variant then."""
    return os.environ.get("TORCHINDUCTOR_FX_GRAPH_CACHE") == "0" or os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") == "1"


#: Warmers start on a GPU only while at least this share of its memory is free: each holds a copy
#: of the model and its activations until it exits, beside the variant's own child and the search's
#: other children (a stackpart heuristic; docs/decisions.md, "Shape warmers").
FREE_SHARE = 0.5


def device_room(device: str) -> str | None:
    """None when warmers may start on ``device`` (a CPU, or a GPU with :data:`FREE_SHARE` of its
    memory free now, ``torch.cuda.mem_get_info``); else why not."""
    if not device.startswith("cuda"):
        return None
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device).index or 0)
    if free < FREE_SHARE * total:
        return f"{free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB free on the device, under {FREE_SHARE:.0%}"
    return None


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), which
    tells it from a later process given the same pid; None without /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def spawn(job: dict[str, Any], v: Variant, workdir: Path, cache_root: Path, opts: Options) -> tuple[list[Any], dict[str, Any]]:
    """Start ``v``'s warmers (:func:`warmed_shapes`), each a :class:`.runner.ServedChild` with
    ``job`` plus ``warm_shape`` and a compile cache folder of its own beside the variant's
    ``cache_root`` (the variant's child copies it into its own once the warmer has ended with a
    result: what a warmer left half-written or failed to finish never reaches the variant's
    call); they build and wait for ``go`` as the variant's child does. Returns them and what the
    variant's job adds: ``{"warmers": {"<i>": {"out": result path, "pid": pid, "started": its
    :func:`_start_time`, "cache": its folder, "timeout_s": its wait}}}``; empty when none were
    wanted, and ``{"warmers_not_started": why}`` when some were but the device was short of memory
    (:func:`device_room`), for the variant's row to say."""
    from .runner import ServedChild

    if not v.warm_shapes:
        return [], {}
    import shutil

    harness = job["harness"]
    device = str(harness.get("device", "cpu"))
    backend = str(job.get("force_backend") or job.get("backend") or "inductor")
    shapes = warmed_shapes(v, opts, device, len(harness.get("shapes") or []), backend)
    if not shapes:
        return [], {}
    if (short := device_room(device)) is not None:
        return [], {"warmers_not_started": f"{short}; its {len(shapes) + 1} shapes compiled one after the other"}
    children: list[Any] = []
    caches = [cache_root.parent / f"{cache_root.name}.warm-{i}" for i in shapes]
    try:
        for i, cache in zip(shapes, caches):
            # empty, as every child's cache starts: a twin started again (an early anchor ended and
            # restarted) must not find the first one's compiled code there
            shutil.rmtree(cache, ignore_errors=True)
            children.append(ServedChild(dict(job, warm_shape=i), workdir, f"warm-{v.name}-{i}", cache, opts.timeout_s))
    except BaseException:
        for child in children:
            child.close()
        raise
    return children, {"warmers": {str(i): {"out": c.job["out"], "pid": c.proc.pid, "started": _start_time(c.proc.pid),
                                           "cache": str(cache), "timeout_s": opts.timeout_s}
                                  for i, c, cache in zip(shapes, children, caches)}}


def _ended(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` has exited: gone, a zombie not reaped yet, or (``started``, its
    :func:`_start_time`) the pid now another process's."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    fields = stat.rpartition(")")[2].split()
    return fields[0] == "Z" or (started is not None and len(fields) > 19 and fields[19] != started)


def _result(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError):  # not written (the child writes it whole, os.replace)
        return None


#: The least the shape warmers are waited for, in seconds, whatever the first shape's compile took.
MIN_WAIT_S = 10.0

#: How long a warmer killed at the deadline is given to exit (its device memory goes with it).
KILL_WAIT_S = 5.0


class WarmWaits:
    """The variant's child's waits for its shape warmers, all within one deadline: it is set at the
    first wait, ``limit_s`` (this child's own compile seconds at its first shape, at least
    :data:`MIN_WAIT_S`) after it, and never more than half a warmer's timeout after it. Every
    warmer began its shape when this child began its first, so waiting longer than compiling here
    would take is not worth it; one deadline for all keeps several stuck warmers from adding up,
    and a hung warmer cannot carry the child to its own timeout."""

    def __init__(self, limit_s: float | None) -> None:
        self.limit_s = max(float(limit_s or 0.0), MIN_WAIT_S)
        self.deadline: float | None = None

    def wait(self, warmer: dict[str, Any], poll_s: float = POLL_S) -> dict[str, Any]:
        """:func:`await_warmer` within the shared deadline."""
        if self.deadline is None:
            self.deadline = time.perf_counter() + min(self.limit_s, float(warmer["timeout_s"]) / 2)
        return await_warmer(warmer, self.deadline, poll_s)


def _kill(pid: int) -> None:
    """End a warmer past the deadline, its process group with it (it runs in a session of its own)."""
    import signal

    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
            return
        except (ProcessLookupError, PermissionError):
            continue


def _copy_new(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` unless ``dst`` exists, through a temporary name and ``os.replace``.
    An existing file is never written to: the caches name their entries by content hash, so it holds
    the same bytes, and this process may have it loaded (a compiled kernel's shared library, mapped:
    rewriting it in place crashes the process)."""
    import shutil

    if os.path.exists(dst):
        return
    tmp = f"{dst}.warmer-{os.getpid()}"
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _adopt(cache: Path) -> None:
    """Copy a finished warmer's compile cache (its ``inductor`` and ``triton`` folders) into this
    process's (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), so the next call at its shape
    finds the compiled code there; only the files this process's cache lacks (:func:`_copy_new`)."""
    import shutil

    for sub, var in (("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("triton", "TRITON_CACHE_DIR")):
        source, target = cache / sub, os.environ.get(var)
        if target and source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True, copy_function=_copy_new)


def await_warmer(warmer: dict[str, Any], deadline: float, poll_s: float = POLL_S) -> dict[str, Any]:
    """In the variant's child, before shape ``i``'s first call: wait until shape ``i``'s warmer
    (``warmer``: :func:`spawn`'s entry) has ended, its process gone (its device memory freed with
    it), or until ``deadline`` (``time.perf_counter()``; :class:`WarmWaits` sets it), when it is
    killed. A warmer that ended with a result has its compile cache copied into this process's
    (:func:`_adopt`). Returns ``{"waited_s", "entry"}`` (the warmer's shape entry: its
    ``compile_s``, ...) or ``{"waited_s", "failed"}`` (why it has none: the shape is compiled
    here, from this process's own cache only)."""
    out = Path(warmer["out"])
    pid, started = int(warmer["pid"]), warmer.get("started")
    t0 = time.perf_counter()
    ended = _ended(pid, started)
    while not ended and time.perf_counter() < deadline:
        time.sleep(poll_s)
        ended = _ended(pid, started)
    waited = time.perf_counter() - t0
    if not ended:
        _kill(pid)
        # its device memory is freed with its process: give it a moment to go
        gone = time.perf_counter() + KILL_WAIT_S
        while not _ended(pid, started) and time.perf_counter() < gone:
            time.sleep(poll_s)
        return {"waited_s": time.perf_counter() - t0,
                "failed": f"it had not ended after {waited:.0f} s, about what compiling here takes (ended)"}
    payload = _result(out)
    if payload is None:
        return {"waited_s": waited, "failed": "it exited without a result"}
    if payload.get("error"):
        return {"waited_s": waited, "failed": f"it failed: {payload['error'].get('kind')}: {payload['error'].get('message', '')[:300]}"}
    shapes = payload.get("shapes") or []
    if not shapes:
        return {"waited_s": waited, "failed": "it compiled nothing"}
    try:
        _adopt(Path(warmer["cache"]))
    except OSError as exc:
        # part of it may be in: the call's cache hits and misses decide (credit)
        return {"waited_s": waited, "entry": shapes[0], "copy_error": str(exc)[:300]}
    return {"waited_s": waited, "entry": shapes[0]}


def cache_counts() -> dict[str, int]:
    """This process's compiled-code cache lookups so far (``torch._dynamo.utils.counters``):
    ``hits``, Inductor's FX graph cache and AOTAutograd's cache hits, and ``compiled``, their
    misses and bypasses (a graph compiled here, one the cache could not hold included)."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {"hits": int(inductor["fxgraph_cache_hit"]) + int(aot["autograd_cache_hit"]),
            "compiled": int(inductor["fxgraph_cache_miss"]) + int(inductor["fxgraph_cache_bypass"])
            + int(aot["autograd_cache_miss"]) + int(aot["autograd_cache_bypass"])}


def credit(entry: dict[str, Any], warmed: dict[str, Any], hits: int, compiled: int = 0) -> None:
    """Shape entry ``entry`` of the variant's child, after its first call at a warmed shape:
    ``warmed`` from :func:`await_warmer`; ``hits`` and ``compiled``, that call's cache hits and
    misses or bypasses (:func:`cache_counts`). Only a call that loaded every graph it needed
    (hits, no miss or bypass) and a warmer with an entry make ``compile_s`` the warmer's
    (``compile_s_here``: this call's, a trace and a cache load) and set ``compiled_by``; one that
    loaded some and compiled others takes the larger of its seconds and the warmer's ("partly
    used"); otherwise this call compiled, its own seconds stand, and ``warmer`` says why."""
    entry["waited_for_warmer_s"] = round(warmed["waited_s"], 3)
    if "entry" not in warmed:
        entry["warmer"] = f"not used: {warmed['failed']}"
        return
    if hits <= 0:
        entry["warmer"] = ("not used: its compile cache could not be copied: " + warmed["copy_error"] if warmed.get("copy_error")
                           else "not used: this call found no compiled code of it in the cache and compiled")
        return
    if compiled > 0:
        # the loaded graphs' compile is the warmer's, the rest this call's: the larger of the two
        # is the shape's figure (an upper bound, as with the warmer's seconds alone)
        entry["compile_s_here"] = entry["compile_s"]
        entry["compile_s"] = max(entry["compile_s"], float(warmed["entry"]["compile_s"]))
        entry["warmer"] = (f"partly used: this call loaded {hits} compiled graph(s) from the warmer's cache and compiled "
                           f"{compiled} itself; the larger of its seconds and the warmer's stands")
        return
    entry["compile_s_here"] = entry["compile_s"]
    entry["compile_s"] = float(warmed["entry"]["compile_s"])
    entry["compiled_by"] = "warmer"


def serial_cold_s(row: dict[str, Any], wall_s: float) -> float:
    """A cold phase's seconds as one process would have taken them, its shapes one after the other:
    ``wall_s`` plus, for each shape its warmer compiled, the warmer's compile less this process's
    own call there and its wait (the budget's estimate of a cold phase, :mod:`.budget`, is of a
    candidate that compiles its shapes in turn)."""
    extra = sum(e["compile_s"] - e.get("compile_s_here", 0.0) - e.get("waited_for_warmer_s", 0.0)
                for e in row.get("per_shape_cold") or [] if e.get("compiled_by") == "warmer")
    return wall_s + max(0.0, extra)


def summary(row: dict[str, Any]) -> str | None:
    """One clause on what a variant's shape warmers did (its report row, :func:`.cold.cold_summary`),
    or None where it had none: which shapes they compiled, and which a call compiled itself and why."""
    warmed = [e for e in row.get("per_shape_cold") or [] if "waited_for_warmer_s" in e]
    if not warmed:
        return f"shape warmers not started: {row['warmers_not_started']}" if row.get("warmers_not_started") else None
    used = [e for e in warmed if e.get("compiled_by") == "warmer"]
    parts = []
    if used:
        parts.append(f"{len(used)} of its {len(row['per_shape_cold'])} shapes compiled by shape warmers beside its first "
                     f"(the cold phase took {row.get('child_wall_s') or 0:.0f} s of wall time; the compile per start, "
                     "their seconds summed, is an upper bound)")
    parts += [f"shape {e['shape']}: warmer {e['warmer']}" for e in warmed if "warmer" in e]
    return "; ".join(parts)
