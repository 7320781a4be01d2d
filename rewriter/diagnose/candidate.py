"""One candidate plan of the search: its name, its plan and the planner's notes on it.

Its own module so that the candidate kinds (:mod:`.config_candidates`, :mod:`.attention_candidates`,
:mod:`.guard_limit_candidates`, :mod:`.value_guards`) build candidates without importing
:mod:`.candidates`, which calls them (docs/design.md, "Where each kind of change goes").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plan import Plan


@dataclass
class Candidate:
    """One complete plan the search measures.

    Attributes:
        name: short label (``per-block+disable``, ``whole+cudagraphs``, ...).
        plan: the plan (harness and amortization included), as diagnose would write it.
        notes: the planner's statements about it.
        rule: True for the ladder's own proposal (what the rules alone would have written).
    """

    name: str
    plan: Plan
    notes: list[str] = field(default_factory=list)
    rule: bool = False

    @property
    def compiles(self) -> bool:
        return any(a.action == "compile" for a in self.plan.actions)

    def key(self) -> tuple:
        """The action set, for deduplication (``why`` left out)."""
        return tuple(sorted(repr(a.model_dump(exclude={"why"})) for a in self.plan.actions))


def place_twin(out: list[Candidate], keys: set[tuple], twins: dict[str, str], twin: Candidate, base: Candidate) -> bool:
    """Append ``twin`` then its ``base`` to ``out`` (the twin is measured first), recording
    ``twins[twin.name] = base.name`` and the twin's action set in ``keys``; where a candidate with
    the twin's action set or name is already proposed, append ``base`` alone. Returns whether the
    twin was placed."""
    if twin.key() in keys or twin.name in twins:
        out.append(base)
        return False
    keys.add(twin.key())
    twins[twin.name] = base.name
    out += [twin, base]
    return True
