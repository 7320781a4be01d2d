"""One candidate plan of the search (its name, its plan and the planner's notes on it), and the
shape of a candidate kind.

Its own module so that the candidate kinds (:mod:`.kinds`) build candidates without importing
:mod:`.candidates`, which calls them (docs/design.md, "Where each kind of change goes").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any, Callable

from ..plan import Plan

#: The program as it runs, no action of ours: the baseline every candidate is measured against (the
#: eager reference's own row). A variant of the program's own compile is named ``as-is+<what>``
#: (:func:`as_is`).
AS_IS = "as-is"
#: Backends that cannot speed anything up: the search then measures failures, not gains.
NO_GAIN_BACKENDS = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition"})
#: The whole-model compile: the one-line anchor (``torch.compile(model)``) a plan is compared with.
WHOLE = "whole"


def as_is(suffix: str = "") -> str:
    """``as-is`` or, with ``suffix``, the name of a variant of the program as it is: ``as-is+sdpa``."""
    return f"{AS_IS}+{suffix}" if suffix else AS_IS


#: The program's own whole-model compile kept, with a nested compile region on a repeated callee
#: (:func:`.candidates.nested_callees`).
NESTED_OWN = as_is("nested")
#: Candidates whose gain is compile time, not step time: the program's own compile kept, with a hint
#: that makes Dynamo trace less (a nested compile region is traced once and reused, torch docs,
#: ``torch.compiler.nested_compile_region``). On a backend that does not optimise, the step-time
#: gain is not measured but Dynamo's tracing is, so the decision judges these by their compile per
#: start against the program's own (:func:`.decide.decide`).
COMPILE_TIME = frozenset({NESTED_OWN})


def is_as_is(name: str) -> bool:
    """Whether ``name`` is the program as it is or one of its variants (``as-is+regional``)."""
    return name == AS_IS or name.startswith(AS_IS + "+")


@dataclass
class Candidate:
    """One complete plan the search measures.

    Attributes:
        name: short label (``per-block+disable``, ``whole+cudagraphs``, ...).
        plan: the plan (harness and amortization included), as diagnose would write it.
        notes: the planner's statements about it.
        rule: True for the ladder's own proposal (what the rules alone would have written).
        rule_dropped: the actions of the rules' proposal the search dropped before this candidate
            (a compile the program's own compile strikes, :func:`.candidates.compose`): with any,
            this candidate is what is left of the proposal, not the proposal.
    """

    name: str
    plan: Plan
    notes: list[str] = field(default_factory=list)
    rule: bool = False
    rule_dropped: list[Any] = field(default_factory=list)

    @property
    def compiles(self) -> bool:
        """Whether the plan leaves code compiled (an ``own_call`` that turns the program's compile
        off does not)."""
        return any(a.action == "compile" and a.compiles for a in self.plan.actions)

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


#: ``make(ctx, cands) -> (cands, pruned)``: the candidates with this kind's twins placed among them,
#: and one line per thing it left out (why).
Make = Callable[[Any, list[Candidate]], "tuple[list[Candidate], list[str]]"]
#: ``judge(ctx, rows) -> lines``: after measurement, marks the rows of twins that changed nothing
#: ``skipped`` and returns one line per twin pruned so.
Judge = Callable[[Any, dict[str, dict[str, Any]]], list[str]]


@dataclass(frozen=True)
class CandidateKind:
    """A kind of candidate the search proposes: what a module of :mod:`.kinds` declares as ``KIND``.

    Attributes:
        name: short label (the registry's listing, the tests).
        order: where its ``make`` runs in the chain (lower first); a kind sees the twins of every
            kind before it.
        make: builds its candidates from the ones proposed so far (see :data:`Make`).
        judge: prunes its twins after measurement (see :data:`Judge`), or None.
        when_compiles_pruned: whether it runs when the ladder pruned every compile (it stopped
            early, or the op mix is GEMM-dominated): a kind that twins only compile candidates says
            False.
    """

    name: str
    order: int
    make: Make
    judge: Judge | None = None
    when_compiles_pruned: bool = True


def measured_pairs(rows: dict[str, dict[str, Any]], twins: dict[str, str],
                   failed: tuple[str, ...] = ("skipped", "problems", "error")) -> Iterator[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    """``(twin, twin's row, base, base's row)`` for each ``twin -> base`` in ``twins`` whose row and
    its base's were both measured with none of ``failed`` set: what a kind's judge compares after
    measurement (a row left out here is left to the decision as it is)."""
    for name, base in twins.items():
        row, ref = rows.get(name), rows.get(base)
        if row and ref and not any(r.get(k) for r in (row, ref) for k in failed):
            yield name, row, base, ref
