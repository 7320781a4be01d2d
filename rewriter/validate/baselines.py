"""Which in-place baselines (``whole``, ``regional``: :mod:`rewriter.engine.variants`) compiled
nothing the step runs, and what the report says of them.

A baseline whose run compiled no graph (Dynamo's ``unique_graphs``, the engine's compile watch)
ran eager: its step time is the eager model's, not a compile's, so the speed gate does not hold the
plan against it and the report says what it compiled rather than presenting it as a comparison.
The usual cause is ``harness.call``: ``regional`` compiles each block's ``forward``, which a method
such as a coupling flow's ``inverse`` does not call when it calls the blocks' own methods
(``layer.inverse(z)``; docs/decisions.md, "The harness names the method a step calls").
"""

from __future__ import annotations

from typing import Any

#: The in-place baselines, in the order the report lists them.
BASELINES = ("whole", "regional")


def idle(results: dict[str, dict[str, Any]], call: str | None) -> dict[str, str]:
    """``{baseline: what the report says}`` for each baseline that ran and compiled no graph.

    Args:
        results: the engine's rows by variant; a row's ``compile.unique_graphs`` is its graph count.
        call: the model's method each step calls (``harness.call``), None for the module itself.
    """
    out: dict[str, str] = {}
    for name in BASELINES:
        row = results.get(name) or {}
        graphs = (row.get("compile") or {}).get("unique_graphs")
        if row.get("error") or graphs is None or graphs > 0:
            continue
        if name == "regional":
            if not row.get("blocks"):
                why = "no repeated block was found to compile"
            elif call:
                why = f"the step's method model.{call} calls no block's forward"
            else:
                why = "the step calls no compiled block's forward"
        else:
            why = f"one step of model.{call} ran no compiled frame" if call else "one step ran no compiled frame"
        out[name] = (f"the {name} baseline compiled no graph: {why}; its step time is the eager model's, so the plan is "
                     "not compared with it")
    return out
