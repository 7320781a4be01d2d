"""Dynamo's own recompile and graph-break reports, read from its logging
(``TORCH_LOGS=recompiles,graph_breaks``).

``torch._logging.set_logs(recompiles=True)`` turns on the ``recompiles`` artifact; a handler on
the ``torch._dynamo`` logger collects each "Recompiling function ... triggered by the following
guard failure(s)" message and the "hit config.recompile_limit" (``cache_size_limit`` before
torch 2.6) warning verbatim, and each "Graph break in user code at file:line" with its developer debug
context (the reason in one line). Nothing is guessed: the guard text and its user line are parsed
from those messages. Log settings are restored on exit.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..dynamo_messages import GraphBreak, artifact_logs, parse_graph_break
from .locate import first_in_src, frames_from_text, function_at

_RECOMPILE = re.compile(r"Recompiling function (?P<func>\S+) in (?P<file>.+?):(?P<line>\d+)")
_GUARD = re.compile(r"^\s*-\s*(?P<id>\d+/\d+): (?P<guard>.*?)(?:\s{2,}#\s*(?P<code>.*?))?$", re.M)
_GUARD_COMMENT = re.compile(r"#\s.*?#\s*(?P<file>[^\s#]+?\.py):(?P<line>\d+) in (?P<func>[\w<>]+)")
_LIMIT = re.compile(r"hit config\.(?:recompile_limit|cache_size_limit) \((?P<limit>\d+)\)")


@dataclass
class Recompile:
    """One recompile as Dynamo reported it."""

    function: str
    file: str
    line: int
    guards: list[str]
    text: str


@dataclass
class DynamoLog:
    """What the logs said during the ``capture`` block."""

    recompiles: list[Recompile] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    limit_hit: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def guard_site(self, src: Path, text: str) -> tuple[str, int, str] | None:
        """(file relative to SRC, line, qualname) of the guard's user line in ``text``: the
        innermost frame under SRC of the user stack Dynamo prints (outermost first), else the
        ``# code  # path:line in func`` comment Dynamo appends to a guard (its path may be
        shortened from the left, so it is matched by suffix against SRC's files)."""
        site = first_in_src(list(reversed(frames_from_text(text))), src)
        if site is not None:
            return site
        root = Path(src).resolve()
        for m in _GUARD_COMMENT.finditer(text):
            tail, line = m.group("file"), int(m.group("line"))
            for path in sorted(Path(src).rglob("*.py")):
                if not path.resolve().is_relative_to(root):
                    continue  # a symlink out of SRC (a symlink farm over a package): never a target
                rel = path.resolve().relative_to(root).as_posix()
                if path.resolve().as_posix().endswith(tail) or tail.endswith(rel):
                    return rel, line, function_at(path, line) or m.group("func")
        return None


class _Handler(logging.Handler):
    def __init__(self, log: DynamoLog) -> None:
        super().__init__(logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:
            return
        self.log.messages.append(msg)
        m = _RECOMPILE.search(msg)
        if m:
            guards = [g.group("guard").strip() for g in _GUARD.finditer(msg)]
            self.log.recompiles.append(Recompile(m.group("func"), m.group("file"), int(m.group("line")), guards, msg))
        elif _LIMIT.search(msg):
            self.log.limit_hit.append(msg)
        elif (b := parse_graph_break(msg)) is not None:
            self.log.graph_breaks.append(b)


@contextlib.contextmanager
def capture() -> Iterator[DynamoLog]:
    """Collect Dynamo's recompile, recompile-limit and graph-break messages for the duration."""
    log = DynamoLog()
    with artifact_logs(_Handler(log), "recompiles", "graph_breaks"):
        yield log


def reset() -> None:
    """Forget every compiled frame and Dynamo's counters (a clean slate between rungs)."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except ImportError:  # pragma: no cover - older layouts
        pass
