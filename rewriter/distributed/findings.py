"""Merge the ranks' step breakdowns into findings: per-rank step time, exposed communication,
collective-aligned gaps vs host stalls, stragglers, the dominant collective, a verdict.

Thresholds (each stated in the findings it produces):

* **collective-bound** when exposed communication is at least :data:`COLLECTIVE_BOUND_SHARE`
  of the step on *every* rank, i.e. on the rank that waits least. A rank that waits for a slower
  one sees the wait as exposed communication; the rank that arrives last at each collective
  sees only the transfer, so the minimum over ranks is the collective's own cost.
  0.25 is a stackpart choice: a quarter of the step is the smallest share worth a change to the
  wrapper or the parallelism ("in most real models exactly one ceiling accounts for the majority
  of recoverable time", partitioning-the-stack).
* **straggler**: a rank whose own work (its compute time per step) exceeds the median over
  ranks by more than :data:`STRAGGLER_SHARE`. Step times alone cannot show it: synchronous
  collectives make every rank's step as slow as the slowest, and the faster ranks show the
  difference as waiting. 0.10 is a stackpart choice (one rank 10% slow costs every rank 10%);
  with 2 ranks the median is the mean, so a flagged rank is > 22% slower than the other.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .trace import ALIGNED_SHARE, MIN_GAP_US, RankTrace

COLLECTIVE_BOUND_SHARE = 0.25
STRAGGLER_SHARE = 0.10


@dataclass
class RankSummary:
    """One rank, averaged over its profiled steps (µs unless stated).

    Attributes:
        step_s: median wall time of the timed steps without the profiler (seconds), or None.
        step_us: mean ``ProfilerStep`` length in the trace.
        compute_us: mean compute time per step (the rank's own work).
        comm_us: mean communication time per step (union of collectives).
        exposed_comm_us: mean communication not overlapped by compute.
        collective_gap_us / host_stall_us: mean time in gaps of each class.
    """

    rank: int
    step_s: float | None
    step_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    collective_gap_us: float
    host_stall_us: float

    @property
    def exposed_share(self) -> float:
        return self.exposed_comm_us / self.step_us if self.step_us else 0.0


@dataclass
class CollectiveSummary:
    """One collective kind over all ranks: mean per step and rank.

    Attributes:
        kind: ``all_reduce``, ``all_gather``, ...
        calls_per_step: events per step (NCCL kernels, or gloo ranges).
        time_us / exposed_us: its time per step, and the part no compute hides.
        share_of_step: ``time_us`` over the mean step.
        overlap_share: 1 - exposed / time.
    """

    kind: str
    calls_per_step: float
    time_us: float
    exposed_us: float
    share_of_step: float
    overlap_share: float


@dataclass
class Straggler:
    """A rank whose compute per step exceeds the median over ranks by ``excess_share``."""

    rank: int
    compute_us: float
    median_compute_us: float
    excess_share: float


@dataclass
class HostStall:
    """Host stalls grouped by where the host was (``file:line (function)`` or ``unknown``)."""

    where: str
    total_us_per_step: float
    count: int


@dataclass
class DistributedFindings:
    """What a run on several processes says about collectives on the critical path.

    Attributes:
        nproc, backend (``nccl``/``gloo``), wrap (``ddp``/``fsdp2``/``none``), settings (the
            wrapper's settings used), timeline (``device`` or ``host``), mode, grad_bytes (all gradients),
            largest_grad_bytes (the largest single parameter's).
        ranks: per-rank summaries, by rank.
        collectives: per kind, most exposed first.
        dominant: the collective with the most exposed time, or None when no collective ran.
        exposed_share: the minimum over ranks of exposed communication / step.
        collective_bound: ``exposed_share >= collective_bound_share``.
        stragglers: ranks slower than the median by more than ``straggler_share``.
        host_stalls: the largest host stalls by place.
        thresholds: every threshold used, with its value.
        suggestions: plan entries (``action: distributed``) for a collective-bound step.
        notes: caveats the reader must see (CPU run, gloo's reduce-scatter, ...).
        artifacts: file names written next to the findings.
    """

    nproc: int
    backend: str
    wrap: str
    settings: dict[str, Any]
    timeline: str
    mode: str
    grad_bytes: int
    largest_grad_bytes: int
    ranks: list[RankSummary]
    collectives: list[CollectiveSummary]
    dominant: CollectiveSummary | None
    exposed_share: float
    collective_bound: bool
    stragglers: list[Straggler]
    host_stalls: list[HostStall]
    thresholds: dict[str, float]
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "collective-bound" if self.collective_bound else "not collective-bound"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict
        for r, s in zip(data["ranks"], self.ranks):
            r["exposed_share"] = s.exposed_share
        return data


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def merge(
    traces: list[RankTrace],
    steps: dict[int, dict[str, Any]],
    *,
    straggler_share: float = STRAGGLER_SHARE,
    collective_bound_share: float = COLLECTIVE_BOUND_SHARE,
    min_gap_us: float = MIN_GAP_US,
) -> DistributedFindings:
    """Merge per-rank trace breakdowns (and the ranks' ``steps.json`` records, by rank).

    Raises:
        ValueError: ``traces`` is empty.
    """
    if not traces:
        raise ValueError("no rank traces to merge")
    traces = sorted(traces, key=lambda t: t.rank)
    ranks = []
    kind_time: dict[str, list[float]] = defaultdict(list)
    kind_exposed: dict[str, list[float]] = defaultdict(list)
    kind_calls: dict[str, list[float]] = defaultdict(list)
    stalls: dict[str, list[float]] = defaultdict(list)
    n_steps = 0
    for t in traces:
        record = steps.get(t.rank, {})
        timed = record.get("step_s") or []
        ranks.append(
            RankSummary(
                rank=t.rank,
                step_s=statistics.median(timed) if timed else None,
                step_us=_mean([s.step_us for s in t.steps]),
                compute_us=_mean([s.compute_us for s in t.steps]),
                comm_us=_mean([s.comm_us for s in t.steps]),
                exposed_comm_us=_mean([s.exposed_comm_us for s in t.steps]),
                collective_gap_us=_mean([s.collective_gap_us for s in t.steps]),
                host_stall_us=_mean([s.host_stall_us for s in t.steps]),
            )
        )
        for s in t.steps:
            n_steps += 1
            for kind, kt in s.by_kind.items():
                kind_time[kind].append(kt.total_us)
                kind_exposed[kind].append(kt.exposed_us)
                kind_calls[kind].append(kt.count)
            for g in s.gaps:
                if g.kind == "host":
                    stalls[g.where or "unknown"].append(g.dur_us)
    mean_step = _mean([r.step_us for r in ranks])
    collectives = []
    for kind in kind_time:
        time_us = sum(kind_time[kind]) / n_steps
        exposed = sum(kind_exposed[kind]) / n_steps
        collectives.append(
            CollectiveSummary(
                kind=kind,
                calls_per_step=sum(kind_calls[kind]) / n_steps,
                time_us=time_us,
                exposed_us=exposed,
                share_of_step=time_us / mean_step if mean_step else 0.0,
                overlap_share=1.0 - exposed / time_us if time_us else 1.0,
            )
        )
    collectives.sort(key=lambda c: (-c.exposed_us, -c.time_us, c.kind))
    exposed_share = min(r.exposed_share for r in ranks)
    median_compute = statistics.median(r.compute_us for r in ranks)
    stragglers = [
        Straggler(r.rank, r.compute_us, median_compute, r.compute_us / median_compute - 1.0)
        for r in ranks
        if median_compute > 0 and r.compute_us > median_compute * (1.0 + straggler_share)
    ]
    host_stalls = sorted(
        (HostStall(w, sum(d) / n_steps, len(d)) for w, d in stalls.items()),
        key=lambda h: -h.total_us_per_step,
    )[:5]
    first = steps.get(traces[0].rank, {})
    backends = Counter(str(s.get("backend", "?")) for s in steps.values())
    return DistributedFindings(
        nproc=len(traces),
        backend=backends.most_common(1)[0][0] if backends else "?",
        wrap=str(first.get("wrap", "?")),
        settings=dict(first.get("settings", {})),
        timeline=traces[0].timeline,
        mode=str(first.get("mode", "?")),
        grad_bytes=int(first.get("grad_bytes", 0)),
        largest_grad_bytes=int(first.get("largest_grad_bytes", 0)),
        ranks=ranks,
        collectives=collectives,
        dominant=collectives[0] if collectives else None,
        exposed_share=exposed_share,
        collective_bound=exposed_share >= collective_bound_share,
        stragglers=stragglers,
        host_stalls=host_stalls,
        thresholds={
            "collective_bound_share": collective_bound_share,
            "straggler_share": straggler_share,
            "min_gap_us": min_gap_us,
            "aligned_share": ALIGNED_SHARE,
        },
    )
