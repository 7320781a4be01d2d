"""Whether a variant's cold phase fits what is left of a measurement's deadline (diagnose's
``--budget``; docs/decisions.md, "The search's budget and its cold phases").

A cold phase starts only when it is expected to end before the deadline. Its expected length is
read from the cold phases measured so far in the same run: the longest of its kin, the variants
whose compile units (:attr:`.options.Variant.cost_key`) are among its own (a twin that adds a
config knob compiles what its base did; a nested plan compiles the blocks and the whole model, so
it takes at least what the whole-model compile took), else the shortest of every measured compiled
variant's (a compile unit not measured yet is a new hypothesis: the least any compile of this
model took on this host is what it is held to). With none measured yet a variant runs, so the
first compiled candidate, the caller's expected best, is measured while any budget is left. An
anchor (:attr:`.options.Variant.anchor`, the search's whole-model compile, and its static-shape twin
where one is proposed) runs whatever is left: the budget bounds what is measured beside it, never
whether a plan is compared with a whole-model compile; past the deadline, once one anchor has
measured every shape, the other is ended (:meth:`.measure._Run.bounded`). Any other cold
phase still under way at the deadline is ended there (:data:`RAN_OUT`): the first compiled
candidate starts with nothing to go by, and a long one would otherwise hold the timing rounds, and
the command, past the budget.
"""

from __future__ import annotations

from .options import Variant

#: The reason a variant is skipped because the budget was already spent before its turn.
SPENT = "not measured: the search budget was spent before its cold phase"
#: The reason a variant is not measured whose cold phase was still under way when the budget ran
#: out (it is ended then; :meth:`rewriter.engine.measure._Run.settle`).
RAN_OUT = "not measured: its cold phase had not ended when the search budget ran out"


def units(v: Variant) -> frozenset[str]:
    """The compile units ``v`` compiles, from its :attr:`.options.Variant.cost_key` (units joined by
    ``|``); empty for a variant that compiles nothing of its own."""
    return frozenset(v.cost_key.split("|")) if v.cost_key else frozenset()


def kin_of(v: Variant, other: Variant) -> bool:
    """Whether ``other`` compiles only units ``v`` compiles too (so ``v``'s cold phase takes at
    least as long as ``other``'s)."""
    mine, theirs = units(v), units(other)
    return bool(theirs) and theirs <= mine


def expected_cold_s(v: Variant, cold_s: dict[str, float], variants: dict[str, Variant]) -> tuple[float, str] | None:
    """The seconds ``v``'s cold phase is expected to take and where that figure comes from (its
    kin's name, or the shortest compile so far), from ``cold_s`` (seconds from ``go`` to the end of
    each cold phase measured so far that did not raise or crash, by variant name); None with
    nothing measured to go by."""
    kin = [(s, n) for n, s in cold_s.items() if kin_of(v, variants[n])]
    if kin:
        s, n = max(kin)
        return s, repr(n)
    compiled = [(s, n) for n, s in cold_s.items() if variants[n].compiles]
    if not compiled:
        return None
    s, n = min(compiled)
    return s, f"the shortest compile so far ({n!r})"


def too_late(v: Variant, left_s: float, cold_s: dict[str, float], variants: dict[str, Variant]) -> str | None:
    """Why ``v``'s cold phase is not started with ``left_s`` seconds left before the deadline
    (None: it starts): the budget is spent, or its expected length (:func:`expected_cold_s`)
    does not fit. The reason starts with ``not measured`` and names the budget, as the
    candidates table shows it."""
    if v.anchor:
        return None
    if left_s <= 0:
        return SPENT
    expected = expected_cold_s(v, cold_s, variants)
    if expected is None or expected[0] <= left_s:
        return None
    seconds, like = expected
    return (f"not measured: its cold phase would end after the search budget (about {seconds:.0f} s expected, "
            f"as {like} took; {left_s:.0f} s left)")
