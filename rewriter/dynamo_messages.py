"""What Dynamo's log messages say, for diagnose and validate alike.

Dynamo reports a graph break on its ``graph_breaks`` logging artifact (``TORCH_LOGS=graph_breaks``)
as "Graph break in user code at <file>:<line>", then "Graph Break Reason: ...", and, since torch
2.7, a "Developer debug context: ..." line that states the cause in one line (``argument
'is_causal' must be bool, not SymBool``). ``torch._dynamo.utils.counters["graph_break"]`` keeps
only the reason, without the location, which is why the log is read.

:func:`artifact_logs` turns artifacts on for a block and keeps torch's own console handler from
echoing them (the report carries them instead); the settings are reset on exit.

:func:`knob_for` names the ``torch._dynamo.config`` knob torch's own hint gives for a break reason
(diagnose's config candidates propose it; ``check`` reads what diagnose measured of it).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

_BREAK = re.compile(r"Graph break in user code at (?P<file>.+?):(?P<line>\d+)")
_BREAK_REASON = re.compile(r"Graph Break Reason:(?P<reason>.*?)(?:\n\s*\n|$)", re.S)
_DEBUG_CONTEXT = re.compile(r"Developer debug context:\s*(?P<context>[^\n]+)")


@dataclass
class GraphBreak:
    """One graph break as Dynamo logged it: the user file (as Dynamo printed it), line, the
    reason in one line (at most 300 characters) and the whole message."""

    file: str
    line: int
    reason: str
    text: str


def parse_graph_break(msg: str) -> GraphBreak | None:
    """The graph break a ``graph_breaks`` log message reports, or None for any other message."""
    b = _BREAK.search(msg)
    if b is None:
        return None
    context = _DEBUG_CONTEXT.search(msg)
    reason = _BREAK_REASON.search(msg)
    said = context.group("context") if context else (reason.group("reason") if reason else msg)
    return GraphBreak(b.group("file"), int(b.group("line")), " ".join(said.split())[:300], msg)


#: Break reasons a scalar read gives (torch 2.6-2.13 wordings: explain's reason with its hint,
#: the graph-break log's ``call_method ... item``, the counters' ``Unsupported Tensor.item()``).
SCALAR_RE = re.compile(
    r"capture_scalar_outputs|Tensor\.item\b|\bitem \(\)|\.item\(\)|\btolist\b|_local_scalar_dense|"
    r"[Dd]ata[- ]dependent operator|scalar output",
)
#: Break reasons of an operator with a data-dependent output shape.
DYNAMIC_RE = re.compile(
    r"capture_dynamic_output_shape_ops|[Dd]ynamic shape operator|\bnonzero\b|\b_?unique\w*\b|masked_select|"
    r"[Dd]ynamic output shape"
)


#: ``(break reason pattern, knob)``, tried in order: the knob torch's own hint names for a break
#: with that reason. A new knob is one more row here and its key in
#: :data:`rewriter.plan.DYNAMO_CONFIG_KEYS` (the plan's whitelist).
KNOBS: list[tuple[re.Pattern[str], str]] = [
    (DYNAMIC_RE, "capture_dynamic_output_shape_ops"),
    (SCALAR_RE, "capture_scalar_outputs"),
]


def knob_for(reason: str) -> str | None:
    """The :data:`rewriter.plan.DYNAMO_CONFIG_KEYS` key that keeps a break with this reason in the
    graph (:data:`KNOBS`), or None (a data-dependent branch, a print, an unsupported call...)."""
    return next((key for pattern, key in KNOBS if pattern.search(reason)), None)


class _Quiet(logging.Filter):
    """Drops the artifact records :func:`artifact_logs` turned on (their loggers are named
    ``...__<artifact>``); everything else still reaches the console."""

    def __init__(self, artifacts: tuple[str, ...]) -> None:
        super().__init__()
        self.marks = tuple(f"__{a}" for a in artifacts)

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(m in record.name for m in self.marks)


@contextlib.contextmanager
def artifact_logs(handler: logging.Handler, *artifacts: str) -> Iterator[None]:
    """Turn on Dynamo's ``artifacts`` (``"recompiles"``, ``"graph_breaks"``), send the
    ``torch._dynamo`` records to ``handler``, and keep torch's console handlers from printing
    those artifacts, for the duration. ``torch._logging.set_logs()`` restores the defaults after."""
    import torch._logging

    logger = logging.getLogger("torch._dynamo")
    quiet = _Quiet(artifacts)
    torch._logging.set_logs(**{a: True for a in artifacts})
    logger.addHandler(handler)
    console: list[logging.Handler] = []
    try:
        torch_loggers = [logging.getLogger("torch")] + [
            lg for name, lg in list(logging.Logger.manager.loggerDict.items())
            if name.startswith("torch.") and isinstance(lg, logging.Logger)
        ]
        console = list({id(h): h for lg in torch_loggers for h in lg.handlers if h is not handler}.values())
        for h in console:
            h.addFilter(quiet)
        yield
    finally:
        for h in console:
            h.removeFilter(quiet)
        logger.removeHandler(handler)
        torch._logging.set_logs()
