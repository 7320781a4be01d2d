"""What a rung of the ladder returns (:class:`RungResult`: measurement, threshold, verdict,
implied action) and the located observations in it (:class:`Finding`). Kept apart from
:mod:`.rung` (the rung's declaration, which names the ladder's :class:`~.context.Context`) so that
the context can hold results without importing the rungs' declaration."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Finding:
    """One located observation (a graph break, a sync point, a guard failure).

    Attributes:
        kind: short tag (``graph_break``, ``host_sync``, ``recompile``, ``guard``...).
        message: one line for a person.
        file: source file (relative to SRC when inside it), or None.
        line: 1-based line, or None.
        function: the enclosing function's qualname where known.
        callers: qualnames of the user's functions (under SRC) that led here, outermost first,
            ``function`` last; empty where the stack is unknown.
        library: where no frame under SRC holds it, the installed package's function it is in, as a
            plan's library target (``transformers.cache_utils:DynamicLayer.update``,
            :func:`.locate.first_in_library`); ``file`` is then that file's path in the package for a
            graph break, and None for a per-instance ``guard`` (its ``where`` says no line under SRC:
            :func:`.rungs.instance_recompiles._guard_findings`).
    """

    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    function: str | None = None
    callers: list[str] = field(default_factory=list)
    library: str | None = None

    #: ``where`` of a finding no frame under SRC located (a break in library code, a guard with no site).
    UNLOCATED = "no line under SRC"

    @property
    def where(self) -> str:
        """``file:line`` (or the file alone), or :data:`UNLOCATED`."""
        if self.file is None:
            return self.UNLOCATED
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass
class RungResult:
    """The outcome of one rung.

    Attributes:
        name: the rung's id (``batch_scaling``...).
        title: the question it answers, for the ladder table.
        status: ``ok``, ``skipped`` or ``error``.
        measurement: the numbers measured (units in the key names: ``_ms``, ``_us``, ``_share``).
        threshold: the threshold used and its source, one line.
        verdict: what the measurement says, one short phrase.
        implies: the action the verdict implies (or ``none``).
        findings: located observations.
        reason: why the rung was skipped or failed.
        seconds: wall time the rung took.
    """

    name: str
    title: str
    status: str = "ok"
    measurement: dict[str, Any] = field(default_factory=dict)
    threshold: str = ""
    verdict: str = ""
    implies: str = "none"
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def skip(self, reason: str) -> "RungResult":
        self.status, self.reason, self.verdict = "skipped", reason, f"skipped: {reason}"
        return self

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return out
