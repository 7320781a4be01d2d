"""Functions of SRC that Dynamo inlined many times into one traced frame: the repeated callee of a
Python loop inside a compiled ``forward`` (``for _ in range(300): x = self.step(x, dt)``), which
Dynamo unrolls, tracing the callee's body again at every iteration.

Read from Dynamo's own trace log, as the other rungs read it (:mod:`.dynamo_log`): each inlined
call is one ``INLINING <code object step at 0x..., file ".../model.py", line 12>`` record of the
``torch._dynamo.symbolic_convert`` logger at DEBUG (``DONE INLINING`` closes it, ``FAILED
INLINING`` ends it with an error), and each trace of a frame starts with ``torchdynamo start
tracing <name> <file>:<line>`` (a restart of the analysis starts again). The code object gives the
callee's file and first line, so the callee is the function of SRC defined there (a decorated
function's first line is its first decorator's), never a guess from a name. Only the logger's own
level is raised for the duration; its artifact loggers (``trace_bytecode``, ``trace_source``,
``trace_call``, ``graph_breaks``) are held at WARNING, so no per-instruction record is built.
Levels are restored on exit.

What the search does with it: ``@torch.compiler.nested_compile_region`` on the outermost such
callee inside the whole-model compile (hierarchical compilation: Dynamo traces the region once
and reuses it at every later call; torch docs, ``torch.compiler.nested_compile_region``, torch >=
2.8), :func:`.candidates.nested_callees`; docs/design.md, "The search".
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A callee inlined at least this many times into one trace of one frame is a repeated callee.
#: Below it the trace it would save is small beside the higher-order op each call then becomes
#: (docs/decisions.md, "A repeated callee becomes a nested compile region").
MIN_CALLS = 8

_LOGGER = "torch._dynamo.symbolic_convert"
_CODE = r"<code object (?P<name>[\w<>]+) at 0x[0-9a-fA-F]+, file \"(?P<file>.+?)\", line (?P<line>\d+)>"
_INLINING = re.compile(r"^INLINING " + _CODE)
_DONE = re.compile(r"^(?:DONE|FAILED) INLINING " + _CODE)
_START = re.compile(r"torchdynamo start tracing (?P<name>\S+) (?P<file>.+):(?P<line>\d+)\s*$")


@dataclass
class RepeatedCall:
    """One function of SRC Dynamo inlined :data:`MIN_CALLS` times or more into one trace.

    Attributes:
        target: the callee as a plan target, ``file.py::Qual`` (file relative to SRC).
        calls: how many times one trace of ``frame`` inlined it (the loop's trip count, for a
            callee called once per iteration).
        frame: the frame Dynamo traced, ``file.py::Qual`` where it is under SRC, else
            ``name file:line``.
        inner: the targets of SRC inlined inside it (its callees, transitively), sorted: code a
            nested region on it traces too.
        outermost: no other repeated callee of SRC was on the inline stack when it was inlined
            (the region to mark; a repeated callee inside it is traced with it).
        recursive: it was on its own inline stack (it calls itself): a region that calls itself is
            not one to mark, :func:`.candidates.nested_callees` says so in ``pruned``.
    """

    target: str
    calls: int
    frame: str
    inner: list[str] = field(default_factory=list)
    outermost: bool = True
    recursive: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "calls": self.calls, "frame": self.frame, "inner": self.inner,
                "outermost": self.outermost, "recursive": self.recursive}


@dataclass
class _Trace:
    """One trace of one frame: per callee code ``(file, line, name)``, its inline count and the
    codes on the inline stack above each of its inlinings."""

    frame: tuple[str, int, str]
    counts: dict[tuple[str, int, str], int] = field(default_factory=dict)
    parents: dict[tuple[str, int, str], set[tuple[str, int, str]]] = field(default_factory=dict)


@dataclass
class InlineLog:
    """What the log said during :func:`capture`: the last trace of each frame (a restarted
    analysis replaces the attempt before it)."""

    traces: dict[tuple[str, int, str], _Trace] = field(default_factory=dict)
    _stack: list[tuple[str, int, str]] = field(default_factory=list)
    _current: _Trace | None = None

    def feed(self, msg: str) -> None:
        """Read one record's message (the module docstring's three kinds; any other is ignored)."""
        if (m := _INLINING.match(msg)) is not None:
            code = (m.group("file"), int(m.group("line")), m.group("name"))
            if self._current is not None:
                self._current.counts[code] = self._current.counts.get(code, 0) + 1
                self._current.parents.setdefault(code, set()).update(self._stack)
            self._stack.append(code)
        elif (m := _DONE.match(msg)) is not None:
            code = (m.group("file"), int(m.group("line")), m.group("name"))
            while self._stack:  # an inlining that raised without a record closes with its caller
                if self._stack.pop() == code:
                    break
        elif (m := _START.search(msg)) is not None:
            frame = (m.group("file"), int(m.group("line")), m.group("name"))
            self._current = self.traces[frame] = _Trace(frame)
            self._stack = []


class _Quiet(logging.Filter):
    """Drops the records :func:`capture` turned on (the logger's own, below WARNING) at every other
    handler: torch's console, another reader of Dynamo's logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == _LOGGER and record.levelno < logging.WARNING)


class _Handler(logging.Handler):
    def __init__(self, log: InlineLog) -> None:
        super().__init__(logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.feed(record.getMessage())
        except Exception:  # noqa: BLE001 - a record we cannot read is not ours to fail on
            return


@contextlib.contextmanager
def capture() -> Iterator[InlineLog]:
    """Collect Dynamo's inlining records (module docstring) for the duration."""
    log = InlineLog()
    logger = logging.getLogger(_LOGGER)
    artifacts = [lg for name, lg in list(logging.Logger.manager.loggerDict.items())
                 if name.startswith(_LOGGER + ".") and isinstance(lg, logging.Logger)]
    saved = (logger.level, [lg.level for lg in artifacts])
    handler = _Handler(log)
    quiet = _Quiet()
    others = list({id(h): h for name, lg in [("torch", logging.getLogger("torch")), *logging.Logger.manager.loggerDict.items()]
                   if (name == "torch" or name.startswith("torch.")) and isinstance(lg, logging.Logger)
                   for h in lg.handlers}.values())
    for h in others:
        h.addFilter(quiet)
    for lg in artifacts:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield log
    finally:
        logger.removeHandler(handler)
        for h in others:
            h.removeFilter(quiet)
        logger.setLevel(saved[0])
        for lg, level in zip(artifacts, saved[1]):
            lg.setLevel(level)


def target_at(src: Path, file: str, line: int, name: str) -> str | None:
    """The plan target ``file.py::Qual`` of the function ``name`` whose code starts at ``line`` of
    ``file`` (its ``def`` line, or its first decorator's: a code object's first line), where
    ``file`` lies under ``src``; None elsewhere, for a lambda, a comprehension or a function local
    to another (no plan target names those)."""
    from ..reach import _functions
    from .locate import relpath

    rel = relpath(src, file)
    if rel is None or not name.isidentifier():
        return None
    for qual, node in _functions(str(Path(file).resolve())):
        if node.name != name or "<locals>" in qual:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        if line in (first, node.lineno):
            return f"{rel}::{qual}"
    return None


def read(log: InlineLog, src: Path, min_calls: int = MIN_CALLS) -> list[RepeatedCall]:
    """The functions of SRC inlined ``min_calls`` times or more into one trace of a frame, most
    calls first (one entry per callee: the trace that inlined it most)."""
    found: dict[str, RepeatedCall] = {}
    for trace in log.traces.values():
        targets = {code: target_at(src, *code) for code in trace.counts}
        frame = target_at(src, *trace.frame) or f"{trace.frame[2]} {trace.frame[0]}:{trace.frame[1]}"
        repeated = {code for code, n in trace.counts.items() if n >= min_calls and targets[code]}
        for code in repeated:
            target = targets[code]
            assert target is not None
            if target in found and found[target].calls >= trace.counts[code]:
                continue
            inner = sorted({t for c, t in targets.items() if t and code in trace.parents.get(c, ())})
            above = trace.parents.get(code, set())
            outermost = not ((above - {code}) & repeated)
            found[target] = RepeatedCall(target, trace.counts[code], frame, inner, outermost, code in above)
    return sorted(found.values(), key=lambda r: (-r.calls, r.target))
