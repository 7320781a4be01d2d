"""A rung of the ladder (:class:`Rung`, what each rung module declares) and what it returns
(:class:`RungResult`: measurement, threshold, verdict, implied action)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import Context

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
            :func:`.locate.first_in_library`); ``file`` is then that file's path in the package.
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


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder, declared by its module under :mod:`rewriter.diagnose.rungs` as
    ``RUNG = Rung(...)``; :func:`rewriter.diagnose.rungs.ladder` finds it there.

    Attributes:
        name: the rung's id, the name of its :class:`RungResult` and of ``--only``'s selection.
        order: its place on the ladder, cheapest first (ascending; gaps leave room for new rungs).
        run: ``(Context) -> RungResult``; a rung that only gives evidence (``reported=False``)
            returns None.
        needs: :class:`~rewriter.diagnose.evidence.Evidence` fields it reads that an earlier
            rung gives: a rung selected alone runs them too, and is recorded as an error when
            they gave nothing.
        gives: :class:`~rewriter.diagnose.evidence.Evidence` fields it sets.
        compiles: it runs the model under ``torch.compile``: a harness failure there is
            Dynamo's or Inductor's with this model, not a broken harness (the eager rungs before
            it ran it), so it is recorded as the rung's error and the ladder goes on.
        quiet: its figures need the device and the host to itself (timings, the device's
            memory): on a GPU host the search's early children (:mod:`.early_reference`) start
            after the last quiet rung, so what they compile and allocate never shares its readings.
        reported: it is a row of the ladder's table; False for a rung that only measures
            evidence for others (the profiled run).
        missing: the error a rung that needs what this one gives records when this one gave
            nothing; empty: ``the <name> rung failed``.
    """

    name: str
    order: int
    run: Callable[[Context], RungResult | None]
    needs: frozenset[str] = frozenset()
    gives: frozenset[str] = frozenset()
    compiles: bool = False
    quiet: bool = False
    reported: bool = True
    missing: str = ""

    def skipped(self, reason: str) -> RungResult:
        """This rung's result when it did not run."""
        return RungResult(self.name, self.name).skip(reason)

    def failed(self, reason: str) -> RungResult:
        """This rung's result when it failed before or outside its own measurement."""
        return RungResult(self.name, self.name, status="error", reason=reason)
