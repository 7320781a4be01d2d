"""A rung of the ladder (:class:`Rung`, what each rung module declares); what it returns
(:class:`~.result.RungResult`, :class:`~.result.Finding`) is defined in :mod:`.result` and named
here too, where the rungs import it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .result import Finding, RungResult

if TYPE_CHECKING:
    from .context import Context

__all__ = ["Finding", "Rung", "RungResult"]


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
