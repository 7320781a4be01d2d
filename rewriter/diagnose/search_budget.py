"""The search's budget: which candidates' cold phases are expected to take as long as each other's,
and the seconds the timing rounds after the cold phases need (docs/decisions.md, "The search's
budget and its cold phases").

The cold phases run in the proposal's order, which is the expected-value order
(:func:`.candidates.propose`: the rules' own proposal first, a twin before its base because it
carries the fix the ladder's evidence asks for). The engine starts a cold phase only when it is
expected to end before the deadline (:mod:`rewriter.engine.budget`) and goes on to the next one
otherwise, so a cheaper candidate later in the order still runs; the search sets that deadline so
the timing still fits the budget, and keys each candidate by its compile units so a candidate
that compiles what another already compiled (a twin that adds a config knob, a ``mark_dynamic``,
a ``disable``) is expected to take as long.
"""

from __future__ import annotations

from typing import Any

from .candidate import Candidate


def cost_key(c: Candidate) -> str | None:
    """What ``c`` compiles, as a key: each compile action's target, strategy and mode, and
    ``dynamic`` where it is set, sorted (``why`` and every other action left out). Candidates with
    one key compile the same units and are expected to spend about as long in their cold phases;
    a static-shape compile (``dynamic=False``) is another unit than automatic dynamic's, whose
    new-shape recompile is symbolic (:mod:`.kinds.static_shapes`). None for a plan that compiles
    nothing of its own (an ``own_call`` turning the program's compile off compiles nothing)."""
    units = sorted(f"{a.target}:{getattr(a, 'strategy', '')}:{getattr(getattr(a, 'options', None), 'mode', '')}"
                   + ("" if getattr(getattr(a, "options", None), "dynamic", None) is None else f":dynamic={a.options.dynamic}")
                   for a in c.plan.actions if a.action == "compile" and a.compiles)
    return "|".join(units) or None


def timing_reserve_s(opts: Any, shapes: int) -> float:
    """Seconds the interleaved timing after the cold phases takes at most, by the engine's own
    settings (:class:`rewriter.engine.options.Options`): ``budget_s`` of rounds per shape over the
    quiet windows, and as much again divided by the windows for the contended window."""
    windows = max(1, int(opts.windows))
    return shapes * opts.budget_s * (1 + (1 / windows if opts.contended else 0))
