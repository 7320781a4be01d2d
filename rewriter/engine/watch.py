"""Compile behaviour from Dynamo's own bookkeeping: graphs, graph breaks, recompiles, and frames
that hit the recompile limit and silently fell back to eager.

Sources (torch >= 2.6): ``torch._dynamo.utils.counters`` (``stats.unique_graphs``,
``graph_break`` reasons, ``frames``), ``torch._dynamo.utils.guard_failures`` (the guard-failure
reasons, keyed by code object) with the code's cache entries for the recompile count and the warning Dynamo logs on
``torch._dynamo.convert_frame`` when a frame hits ``config.recompile_limit`` (named
``cache_size_limit`` before torch 2.7); after it the frame runs eager with no error.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from ..dynamo_messages import GraphBreak, artifact_logs, parse_graph_break

LIMIT_RE = re.compile(r"hit config\.(recompile_limit|cache_size_limit|accumulated_\w+)")


class _LimitHandler(logging.Handler):
    """Recompile-limit warnings and graph breaks (with their user file:line) from Dynamo's log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.hits: list[str] = []
        self.breaks: list[GraphBreak] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must not break the run
            return
        if LIMIT_RE.search(msg):
            lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
            self.hits.append(" | ".join(lines[:3])[:400])
        elif (b := parse_graph_break(msg)) is not None:
            self.breaks.append(b)


@dataclass
class CompileStats:
    """What Dynamo did during a run.

    Attributes:
        unique_graphs: graphs captured (``counters["stats"]["unique_graphs"]``).
        graph_breaks: total graph breaks, and the most frequent reasons (first line each).
        graph_break_sites: ``file:line: reason`` per distinct site, from Dynamo's graph-break log
            (the counters have no location).
        recompiles: recompilations (guard failures that compiled a new entry), with reasons.
        recompile_limit_hits: one line per frame that hit the recompile limit and fell back to
            eager from then on (function, limit, last guard that failed).
        frames_total, frames_ok: frames Dynamo was asked to convert / converted.
    """

    unique_graphs: int = 0
    graph_breaks: int = 0
    graph_break_reasons: list[str] = field(default_factory=list)
    graph_break_sites: list[str] = field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    recompile_limit_hits: list[str] = field(default_factory=list)
    frames_total: int = 0
    frames_ok: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CompileWatch:
    """Reset Dynamo, then read its counters: ``with CompileWatch() as w: ...; w.stats()``.

    Resetting (``torch._dynamo.reset()``) drops compiled code and counters, so create the watch
    before the first compiled call of the variant it measures.
    """

    def __init__(self) -> None:
        self._handler = _LimitHandler()
        self._logs: Any = None

    def __enter__(self) -> "CompileWatch":
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        self._guard_failures().clear()
        self._logs = artifact_logs(self._handler, "graph_breaks")
        self._logs.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._logs.__exit__(None, None, None)

    @property
    def breaks(self) -> list[GraphBreak]:
        """Every graph break Dynamo logged since ``__enter__`` (file as Dynamo printed it, line,
        one-line reason), in the order logged."""
        return list(self._handler.breaks)

    @staticmethod
    def _guard_failures() -> dict[Any, list[Any]]:
        from torch._dynamo import utils

        return getattr(utils, "guard_failures", {})

    def stats(self) -> CompileStats:
        """A snapshot of the counters since ``__enter__``."""
        from torch._dynamo.utils import counters

        breaks = counters.get("graph_break", {})
        reasons = sorted(breaks.items(), key=lambda kv: -kv[1])
        failures = self._guard_failures()
        recompile_reasons: list[str] = []
        for code, items in failures.items():
            name = getattr(code, "co_name", str(code))
            where = f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}"
            for item in items[:3]:
                first = str(item).strip().splitlines()[0] if str(item).strip() else ""
                recompile_reasons.append(f"{name} ({where}): {first[:200]}")
        unimpl = counters.get("unimplemented", {})
        limit_hits = list(self._handler.hits)
        if not limit_hits:
            limit_hits = [k.splitlines()[0] for k in unimpl if "recompile limit" in k.lower()]
        return CompileStats(
            unique_graphs=int(counters.get("stats", {}).get("unique_graphs", 0)),
            graph_breaks=int(sum(breaks.values())),
            graph_break_reasons=[f"{n}x {r.splitlines()[0][:200]}" for r, n in reasons[:5]],
            graph_break_sites=list(dict.fromkeys(f"{b.file}:{b.line}: {b.reason}" for b in self._handler.breaks))[:5],
            recompiles=sum(_recompiles(code, items) for code, items in failures.items()),
            recompile_reasons=recompile_reasons[:10],
            recompile_limit_hits=limit_hits,
            frames_total=int(counters.get("frames", {}).get("total", 0)),
            frames_ok=int(counters.get("frames", {}).get("ok", 0)),
        )


def _recompiles(code: Any, failures: list[Any]) -> int:
    """Recompilations of one code object: its cache entries minus the first. ``guard_failures``
    holds one reason per failed *entry* (a third compile fails two entries), so it overcounts;
    without the cache-entry API, count the failures of entry ``N/0``, which every recompilation
    of the frame checks and fails."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return max(0, len(_debug_get_cache_entry_list(code)) - 1)
    except Exception:  # API missing or moved in this torch
        return sum(1 for r in failures if re.match(r"^\[?\d+/0\]?:", str(r)))


def fail_on_recompile_supported() -> bool:
    """Whether this torch has ``torch.compiler.set_stance("fail_on_recompile")`` (torch >= 2.6)."""
    import torch

    return hasattr(torch, "compiler") and hasattr(torch.compiler, "set_stance")
