"""The search's budget: in which order the candidates' cold phases run, which candidates' cold
phases are expected to take as long as each other's, and the seconds the timing rounds after the
cold phases need (docs/decisions.md, "The search's budget and its cold phases").

The engine starts a cold phase only when it is expected to end before the deadline
(:mod:`rewriter.engine.budget`); the search sets that deadline so the timing still fits the budget,
orders the cold phases so the ones a short budget skips are those worth least, and keys each
candidate by its compile units so a candidate that compiles what another already compiled (a
twin that adds a config knob, a ``mark_dynamic``, a ``disable``) is expected to take as long.
"""

from __future__ import annotations

from typing import Any

from .candidate import Candidate


def cost_key(c: Candidate) -> str | None:
    """What ``c`` compiles, as a key: each compile action's target, strategy and mode, sorted
    (``why`` and every other action left out). Candidates with one key compile the same units and
    are expected to spend about as long in their cold phases. None for a plan that compiles
    nothing of its own."""
    units = sorted(f"{a.target}:{getattr(a, 'strategy', '')}:{getattr(getattr(a, 'options', None), 'mode', '')}"
                   for a in c.plan.actions if a.action == "compile")
    return "|".join(units) or None


def measurement_order(cands: list[Candidate]) -> list[Candidate]:
    """The order the cold phases run in, by expected value: the ladder's own proposal first (the
    expected best), then every candidate before those that add actions to it (a twin with a
    config knob, ``+disable``, ``+mark_dynamic``: a refinement can only win where its base's
    compile units already do, and compiles at least as much), otherwise in proposal order. Under
    a short budget the cold phases skipped are then the refinements, never their base. The
    decision reads the proposal order, not this one."""
    keys = {c.name: set(c.key()) for c in cands}

    def builds_on(c: Candidate) -> int:
        return sum(1 for o in cands if o.name != c.name and keys[o.name] and keys[o.name] < keys[c.name])

    return sorted(cands, key=lambda c: (not c.rule, builds_on(c)))


def timing_reserve_s(opts: Any, shapes: int) -> float:
    """Seconds the interleaved timing after the cold phases takes at most, by the engine's own
    settings (:class:`rewriter.engine.options.Options`): ``budget_s`` of rounds per shape over the
    quiet windows, and as much again divided by the windows for the contended window."""
    windows = max(1, int(opts.windows))
    return shapes * opts.budget_s * (1 + (1 / windows if opts.contended else 0))
