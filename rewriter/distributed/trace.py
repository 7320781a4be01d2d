"""One rank's Chrome trace (torch.profiler) -> per-step compute, communication and gaps.

The question is rung 5 of the ladder (docs/design.md): are the gaps in the timeline aligned with
collectives, or with no work at all (host stalls)? It is answered by interval arithmetic on the
trace's complete (``ph: X``) events, per profiled step (``ProfilerStep#N``):

* **communication**: events :func:`~rewriter.distributed.classify.classify_event` names a
  collective. On a GPU trace these are NCCL kernels; on a CPU trace (gloo) they are the
  ``gloo:*`` ranges on gloo's worker threads plus the ``c10d::*`` ops on the calling thread.
* **compute**: on a GPU trace every other kernel, memcpy and memset; on a CPU trace every
  ``cpu_op`` that is not a collective or a wait. Per thread (or stream), time inside a
  communication or wait event is removed, so the copies gloo does inside ``gloo:all_gather``
  and a wait nested in an op are not compute. Python frames (``with_stack``) and
  record-function ranges are never compute: they enclose ops, they are not work.
* **exposed communication** = communication - compute: the time a collective runs with nothing
  to hide it (on the critical path). Overlap share = 1 - exposed / communication.
* **gaps**: maximal intervals of the step with no compute, at least ``min_gap_us`` long. A gap
  at least half covered by communication is *collective-aligned*; otherwise it is a *host stall*
  (on a GPU: no kernel at all, the device waits on the host; on a CPU: the thread runs Python
  between ops). Host stalls are attributed to the innermost user Python frame (file:line), else
  the innermost library frame, when the trace has stacks (``with_stack=True``): at the gap's
  start on a GPU (the host was inside the call that made the device wait), at its middle on a
  CPU.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import intervals as iv
from .classify import classify_event, is_wait

#: Gaps shorter than this (µs) are dispatch overhead between ops, which rungs 1-2 (launch-bound)
#: measure; counting them here would call every step "stalled". A stackpart choice: CPU-side
#: eager dispatch of one aten op costs ~5-20 µs (PyTorch "Performance Tuning Guide"), so 50 µs is
#: several ops' worth of idle time.
MIN_GAP_US = 50.0
#: A gap is collective-aligned when communication covers at least this share of it.
ALIGNED_SHARE = 0.5

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_PYFRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY = re.compile(r"(/|^)(torch|site-packages|dist-packages|lib/python3\.\d+|rewriter)/|^<")


@dataclass
class KindTime:
    """One collective kind's time in a step (µs): union of its events, the part no compute
    overlaps, and the number of events (kernels or backend ranges)."""

    total_us: float = 0.0
    exposed_us: float = 0.0
    count: int = 0

    @property
    def overlap_share(self) -> float:
        """Share of this kind's time hidden under compute (1.0 when it never ran)."""
        return 1.0 - self.exposed_us / self.total_us if self.total_us > 0 else 1.0


@dataclass
class Gap:
    """A stretch of the step with no compute.

    Attributes:
        offset_us: start, relative to the step's start.
        dur_us: length.
        comm_us: how much of it a collective covers.
        kind: ``collective`` (comm covers >= :data:`ALIGNED_SHARE`) or ``host``.
        collective: the kind covering most of it, or None.
        where: ``file:line (function)`` of the innermost user Python frame, when known.
    """

    offset_us: float
    dur_us: float
    comm_us: float
    kind: str
    collective: str | None = None
    where: str | None = None


@dataclass
class StepBreakdown:
    """One profiled step of one rank; all times in µs. ``step_us`` is the ProfilerStep range."""

    step: int
    step_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    by_kind: dict[str, KindTime] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def collective_gap_us(self) -> float:
        return sum(g.dur_us for g in self.gaps if g.kind == "collective")

    @property
    def host_stall_us(self) -> float:
        return sum(g.dur_us for g in self.gaps if g.kind == "host")


@dataclass
class RankTrace:
    """The steps of one rank's trace.

    Attributes:
        rank: from the trace's ``distributedInfo`` (or the caller).
        timeline: ``device`` (a GPU trace: kernels) or ``host`` (a CPU trace: ops).
        steps: one breakdown per ``ProfilerStep#N`` (the whole trace when there is none).
        names: collective event name -> kind, as seen (for the report).
    """

    rank: int
    timeline: str
    steps: list[StepBreakdown]
    names: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read a Chrome trace (``.json`` or ``.json.gz``) as written by
    ``torch.profiler.profile.export_chrome_trace``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _span(e: dict[str, Any]) -> iv.Interval:
    ts = float(e["ts"])
    return (ts, ts + float(e.get("dur", 0.0)))


def analyze_trace(
    trace: dict[str, Any], rank: int | None = None, min_gap_us: float = MIN_GAP_US
) -> RankTrace:
    """Break each profiled step of one rank's trace into compute, communication and gaps.

    Args:
        trace: a loaded Chrome trace (see :func:`load_trace`).
        rank: overrides the trace's ``distributedInfo.rank``.
        min_gap_us: shortest idle stretch counted as a gap (default :data:`MIN_GAP_US`).

    Raises:
        ValueError: the trace has no complete (``ph: X``) events.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    if not events:
        raise ValueError("the trace has no complete events (ph: X); was the profiler active?")
    if rank is None:
        rank = int((trace.get("distributedInfo") or {}).get("rank", 0))
    device = any(e.get("cat") == "kernel" for e in events)
    timeline = "device" if device else "host"

    comm_by_kind: dict[str, list[iv.Interval]] = defaultdict(list)
    comm_count: dict[str, list[float]] = defaultdict(list)
    names: dict[str, str] = {}
    work: dict[Any, list[iv.Interval]] = defaultdict(list)
    blocked: dict[Any, list[iv.Interval]] = defaultdict(list)
    frames: list[tuple[iv.Interval, str, bool]] = []
    windows: list[tuple[int, iv.Interval]] = []
    found: list[tuple[iv.Interval, str, str]] = []  # (span, kind, source) of each collective
    for e in events:
        name = str(e.get("name", ""))
        cat = e.get("cat")
        span = _span(e)
        lane = (e.get("pid"), e.get("tid"))
        m = _STEP.match(name)
        if m and cat == "user_annotation":
            windows.append((int(m.group(1)), span))
            continue
        if cat == "python_function":
            fm = _PYFRAME.match(name)
            if fm:
                user = not _LIBRARY.search(fm.group("file"))
                frames.append((span, f"{fm.group('file')}:{fm.group('line')} ({fm.group('func')})", user))
            continue
        coll = classify_event(e)
        if coll is not None and (not device or coll.source == "nccl_kernel"):
            found.append((span, coll.kind, coll.source))
            names[name.split("(", 1)[0]] = coll.kind
            blocked[lane].append(span)
            continue
        if is_wait(name):
            blocked[lane].append(span)
            continue
        if (device and cat in _DEVICE_CATS) or (not device and cat == "cpu_op"):
            work[lane].append(span)

    for span, kind, source in _issued_kinds(found):
        comm_by_kind[kind].append(span)
        comm_count[f"{kind}/{source}"].append(span[0])
    compute_all = iv.union(
        s for lane, spans in work.items() for s in iv.subtract(spans, blocked.get(lane, []))
    )
    if not windows:
        lo = min(s for s, _ in (_span(e) for e in events))
        hi = max(e for _, e in (_span(e) for e in events))
        windows = [(0, (lo, hi))]
    windows.sort()
    steps = []
    for number, window in windows:
        steps.append(
            _step(number, window, compute_all, comm_by_kind, comm_count, frames, device, min_gap_us)
        )
    return RankTrace(rank=rank, timeline=timeline, steps=steps, names=dict(sorted(names.items())))


def _step(
    number: int,
    window: iv.Interval,
    compute_all: list[iv.Interval],
    comm_by_kind: dict[str, list[iv.Interval]],
    comm_count: dict[str, list[float]],
    frames: list[tuple[iv.Interval, str, bool]],
    device: bool,
    min_gap_us: float,
) -> StepBreakdown:
    compute = iv.clip(compute_all, window)
    kinds: dict[str, list[iv.Interval]] = {k: iv.clip(v, window) for k, v in comm_by_kind.items()}
    comm = iv.union(s for spans in kinds.values() for s in spans)
    by_kind: dict[str, KindTime] = {}
    for kind, spans in sorted(kinds.items()):
        if not spans:
            continue
        # count each collective once: kernels (GPU) or backend ranges (gloo), else host ops
        sources = {key.split("/")[1]: ts for key, ts in comm_count.items() if key.split("/")[0] == kind}
        starts = sources.get("nccl_kernel") or sources.get("backend_range") or sources.get("host_op", [])
        by_kind[kind] = KindTime(
            total_us=iv.length(spans),
            exposed_us=iv.length(iv.subtract(spans, compute)),
            count=sum(window[0] <= t < window[1] for t in starts),
        )
    gaps = []
    for s, e in iv.subtract([window], compute):
        if e - s < min_gap_us:
            continue
        covered = iv.intersect([(s, e)], comm)
        comm_us = iv.length(covered)
        top = max(kinds, key=lambda k: iv.length(iv.intersect([(s, e)], kinds[k])), default=None)
        aligned = comm_us >= ALIGNED_SHARE * (e - s)
        where = None if aligned else _frame_at(frames, s + 1.0 if device else (s + e) / 2)
        gaps.append(
            Gap(
                offset_us=s - window[0],
                dur_us=e - s,
                comm_us=comm_us,
                kind="collective" if aligned else "host",
                collective=top if comm_us > 0 else None,
                where=where,
            )
        )
    return StepBreakdown(
        step=number,
        step_us=window[1] - window[0],
        compute_us=iv.length(compute),
        comm_us=iv.length(comm),
        exposed_comm_us=iv.length(iv.subtract(comm, compute)),
        by_kind=by_kind,
        gaps=gaps,
    )


def _issued_kinds(found: list[tuple[iv.Interval, str, str]]) -> list[tuple[iv.Interval, str, str]]:
    """Give each backend range the kind of the c10d op that issued it.

    A process group runs its work in the order it was issued (gloo's worker threads pop one FIFO
    queue), so the i-th ``gloo:*`` range belongs to the i-th ``c10d::*`` op. This matters where
    the backend implements one collective with another: gloo has no reduce-scatter and runs
    FSDP2's ``c10d::_reduce_scatter_base_`` as ``gloo:all_reduce``. Applied only when the counts
    agree; otherwise the ranges keep their own names.
    """
    issued = sorted((s for s in found if s[2] == "host_op"), key=lambda s: s[0][0])
    ranges = sorted((i for i, s in enumerate(found) if s[2] == "backend_range"), key=lambda i: found[i][0][0])
    if not issued or len(issued) != len(ranges):
        return found
    out = list(found)
    for op, i in zip(issued, ranges):
        span, _, source = found[i]
        out[i] = (span, op[1], source)
    return out


def _frame_at(frames: list[tuple[iv.Interval, str, bool]], t: float) -> str | None:
    """The innermost (shortest) user frame covering time ``t``; else the innermost library frame
    (``torch/optim/sgd.py:...``), which still says where the host was."""
    best: tuple[bool, float, str] | None = None
    for (s, e), where, user in frames:
        key = (not user, e - s, where)
        if s <= t < e and (best is None or key < best):
            best = key
    return best[2] if best else None
