"""One torch.profiler run shared by the profiler rungs (device time, op mix, top ops, gaps, blocks).

The step runs ``steps`` times under ``torch.profiler.profile`` (CPU, plus CUDA when the harness
device is CUDA) with ``with_stack=True``; each step is a ``stackpart::step`` range that ends after
a device synchronise, so device work belongs to its step. Repeated blocks are wrapped in
``stackpart::block::<name>`` ranges by forward hooks (granularity rung). The Chrome trace is
exported for Perfetto.

The program is profiled as it runs, its own ``torch.compile`` included; nothing stackpart adds
enters a compiled frame: the step range is outside the step, and the block hooks return at once
when ``torch.compiler.is_compiling()`` (Dynamo folds it to True while it traces, so a hook inlined
into the program's compiled frame adds nothing to its graph, not even a graph break; see
https://docs.pytorch.org/docs/stable/generated/torch.compiler.is_compiling.html). A block that runs
inside a compiled frame then has no range: ``blocks`` holds only the blocks that ran eager or
in a frame of their own, and ``blocks_unranged`` names the others.

Sums follow torch's own table (``torch.autograd.profiler_util._build_table``): self-device time
sums device events only and skips user annotations (``gpu_user_annotation`` ranges span kernels
and would count them twice); self-CPU time sums operator events (Python-function events of the
stack tracer and user ranges are not operators).
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..locate import relpath
from ..profile_data import KernelEvent, OpEvent, ProfileData
from ..rung import Rung

__all__ = ["KernelEvent", "OpEvent", "ProfileData", "RUNG", "profile_steps"]

if TYPE_CHECKING:
    from ..context import Context

STEP = "stackpart::step"
BLOCK = "stackpart::block::"


def _frames(evt: Any) -> list[str]:
    """Python frames for an event: its ``stack`` or its chain of Python-function parents."""
    if getattr(evt, "stack", None):
        return list(evt.stack)
    out, cur = [], evt.cpu_parent
    while cur is not None:
        if getattr(cur, "is_python_function", False):
            out.append(cur.name)
        cur = cur.cpu_parent
    return out


def _user_function(evt: Any, src: Path) -> str | None:
    """``file.py::Qual`` of the innermost frame under SRC (profiler frames name the def line)."""
    return _first_user_function(tuple(_frames(evt)), str(src))


@lru_cache(maxsize=4096)
def _first_user_function(frames: tuple[str, ...], src_text: str) -> str | None:
    import sys

    from ..locate import frames_from_profiler, function_at

    src = Path(src_text)
    for name, line, _ in frames_from_profiler(list(frames)):
        candidates = [Path(name)] if Path(name).is_absolute() else [Path(src) / name] + [Path(p) / name for p in sys.path if p]
        for cand in candidates:
            if cand.is_file():
                rel = relpath(src, cand)
                if rel is None:
                    break
                qual = function_at(cand, line)
                return f"{rel}::{qual}" if qual else None
    return None


def _kind(name: str) -> str:
    low = name.lower()
    if low.startswith("memcpy") or "memcpy" in low.split(" ")[0]:
        return "memcpy"
    if low.startswith("memset"):
        return "memset"
    return "kernel"


def _aten_parent(evt: Any) -> str | None:
    """The innermost ``aten::``/``c10d::`` operator at or above ``evt`` (the op that launched)."""
    cur = evt
    while cur is not None:
        if cur.name.startswith(("aten::", "c10d::")):
            return cur.name
        cur = cur.cpu_parent
    return None


def frontend_by_id(events: list[Any]) -> dict[int, Any]:
    """The frontend (torch op) CPU events by ``id``: a device kernel's ``linked_correlation_id``.

    torch.autograd.profiler links a kernel to the frontend event whose ``id`` equals the
    kernel's ``linked_correlation_id``. CUDA runtime events (``cudaLaunchKernel``) carry their
    own CUDA correlation ids in ``id``, a separate numbering that collides with the frontend
    ids, and a nonzero ``linked_correlation_id``: only events with linked id 0 are keys (otherwise no
    kernel finds its op, which is what such a collision gives).
    """
    from torch.autograd import DeviceType

    out: dict[int, Any] = {}
    for e in events:
        if e.device_type == DeviceType.CPU and not e.is_async and not getattr(e, "linked_correlation_id", 0):
            out.setdefault(e.id, e)
    return out


def profile_steps(session: Any, step: Any, out_dir: Path, *, steps: int = 3, blocks: list[tuple[str, Any]] | None = None) -> ProfileData:
    """Profile ``steps`` runs of ``step`` (after one warm-up) and collect per-step figures.

    Args:
        session: the :class:`~rewriter.diagnose.session.Session`.
        step: the zero-argument step callable.
        out_dir: where ``trace.json`` goes.
        blocks: ``(name, module)`` pairs to wrap in ``stackpart::block::<name>`` ranges.

    Raises:
        HarnessFailure: the step failed under the profiler.
    """
    handles = _range_blocks(blocks or [])
    try:
        prof, events, wall = _profiled_run(session, step, steps)
    finally:
        for h in handles:
            h.remove()
    trace = _export_trace(prof, out_dir)
    windows = _step_windows(events)
    data = ProfileData(device="cuda" if session.cuda else "cpu", steps=len(windows) or steps, windows=windows, trace=str(trace) if trace else None, profiled_step_ms=wall)
    _collect(data, events, windows, session)
    if _graphs_compiled():  # a block with no range ran inside the program's compiled frame (else it never ran)
        data.blocks_unranged = [name for name, _ in blocks or [] if name not in data.blocks]
    return data


def _range_blocks(blocks: list[tuple[str, Any]]) -> list[Any]:
    """Wrap each ``(name, module)`` call in a ``stackpart::block::<name>`` range by forward hooks
    that add nothing inside a compiled frame (module docstring); the hooks' handles."""
    import torch
    from torch.profiler import record_function

    handles = []
    for name, module in blocks:
        ranges: list[Any] = []

        def pre(mod: Any, args: Any, _n: str = name, _r: list = ranges) -> None:
            if torch.compiler.is_compiling():  # inside the program's compiled frame: add nothing to it
                return
            r = record_function(BLOCK + _n)
            r.__enter__()
            _r.append(r)

        def post(mod: Any, args: Any, output: Any, _r: list = ranges) -> None:
            if torch.compiler.is_compiling():
                return
            if _r:
                _r.pop().__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles


def _profiled_run(session: Any, step: Any, steps: int) -> tuple[Any, list[Any], float]:
    """One warm-up, then ``steps`` steps under ``torch.profiler.profile``, each in a
    ``stackpart::step`` range ending after a device synchronise: the profiler, its events and the
    wall time per step (ms, profiler overhead included).

    Raises:
        HarnessFailure: the step failed under the profiler.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if session.cuda:
        activities.append(ProfilerActivity.CUDA)
    session.run(step)  # warm-up outside the profile
    for with_stack in (True, False):
        with session.guard(session.forward_name()):
            with profile(activities=activities, with_stack=with_stack) as prof:
                t0 = time.perf_counter()
                for _ in range(steps):
                    with record_function(STEP):
                        step()
                        session.sync()
                wall = (time.perf_counter() - t0) / steps * 1e3
        try:
            return prof, list(prof.events()), wall
        except UnicodeDecodeError:
            # torch.profiler can fail to decode a Python-tracer event name (seen on torch
            # 2.13); the figures do not need stacks, so profile again without them.
            if not with_stack:
                raise
    raise AssertionError("unreachable: the run without stacks returns or raises")


def _export_trace(prof: Any, out_dir: Path) -> Path | None:
    """``out_dir/trace.json`` (Chrome trace, for Perfetto), or None where the export failed: a
    trace is a convenience; the figures do not depend on it."""
    trace = Path(out_dir) / "trace.json"
    try:
        prof.export_chrome_trace(str(trace))
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    return trace


def _step_windows(events: list[Any]) -> list[tuple[float, float]]:
    """The ``stackpart::step`` ranges' ``(start, end)`` (µs), sorted: the CPU range only (on CUDA
    the same name also appears as a ``gpu_user_annotation``)."""
    from torch.autograd import DeviceType

    return sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP and e.device_type == DeviceType.CPU)


def _inside(e: Any, windows: list[tuple[float, float]]) -> bool:
    """Whether event ``e`` lies within a step window (1 µs of slack at the end)."""
    s, t = e.time_range.start, e.time_range.end
    return any(ws <= s and t <= we + 1 for ws, we in windows)


def _collect(data: ProfileData, events: list[Any], windows: list[tuple[float, float]], session: Any) -> None:
    """Fill ``data``'s block ranges, operators and device activities from the events inside a
    step window (user annotations and stackpart's own ranges are not operators or kernels)."""
    from torch.autograd import DeviceType

    by_id = frontend_by_id(events)
    for e in events:
        if e.device_type == DeviceType.CPU:
            if e.is_async or getattr(e, "is_python_function", False) or not _inside(e, windows):
                continue
            _collect_cpu(data, e, session)
        elif not getattr(e, "is_user_annotation", False) and not e.name.startswith("stackpart::"):
            if not _inside(e, windows):
                continue
            parent = by_id.get(getattr(e, "linked_correlation_id", 0))
            data.kernels.append(
                KernelEvent(
                    name=e.name,
                    start_us=e.time_range.start,
                    dur_us=e.time_range.end - e.time_range.start,
                    stream=int(getattr(e, "device_resource_id", 0) or e.thread),
                    kind=_kind(e.name),
                    parent_op=_aten_parent(parent) if parent is not None else None,
                )
            )


def _collect_cpu(data: ProfileData, e: Any, session: Any) -> None:
    """One CPU event inside a step: a block range's CPU and device time into ``data.blocks``, an
    operator into ``data.ops`` (with its innermost user function for ``aten::`` ops)."""
    if e.name.startswith(BLOCK):
        entry = data.blocks.setdefault(e.name[len(BLOCK):], {"cpu_us": 0.0, "device_us": 0.0})
        entry["cpu_us"] += e.cpu_time_total
        entry["device_us"] += e.device_time_total if session.cuda else 0.0
        return
    if getattr(e, "is_user_annotation", False) or e.name == STEP or e.name.startswith("stackpart::"):
        return
    fn = _user_function(e, session.src) if e.name.startswith("aten::") else None
    data.ops.append(OpEvent(e.name, e.self_cpu_time_total, e.time_range.start, e.time_range.end, e.id, fn))


def _graphs_compiled() -> int:
    """Graphs Dynamo compiled in this process so far (``torch._dynamo.utils.counters``): nonzero
    once the program's own ``torch.compile`` ran."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])



def run(ctx: Context) -> None:
    """The profiled run at the reference shape, into ``ctx.evidence.profile`` (``ctx.steps``
    steps, the repeated blocks ranged: :func:`.granularity.profiled`).

    Raises:
        HarnessFailure: the step failed under the profiler.
    """
    from .granularity import profiled

    _, _, step = ctx.reference()
    ctx.evidence.profile = profile_steps(ctx.session, step, ctx.out_dir, steps=ctx.steps, blocks=profiled(ctx.evidence.blocks))


RUNG = Rung(name="profile", order=20, run=run, gives=frozenset({"profile"}), quiet=True, reported=False, missing="the profiled run failed")
