"""The value-guard knob twin: ``+allow_unspec_int_on_nn_module`` on each candidate that compiles code
reading an int attribute that changes every call (:mod:`..value_guards` reads those guards).

Dynamo specialises such an int to its value and recompiles at every call until the recompile limit,
then runs the frame eager; torch's own hint is ``torch._dynamo.config.allow_unspec_int_on_nn_module
= True`` (:mod:`..value_guards`' docstring has the measurement). Each twin is the candidate's actions
plus one ``dynamo_config`` action where the graph-break config twins put theirs
(:func:`.config.config_target`), measured like any other candidate and pruned after measurement when
it recompiled no less (:func:`judge`).
"""

from __future__ import annotations

from typing import Any

from ...plan import DynamoConfigAction, DynamoSettings
from ..candidate import Candidate, CandidateKind, is_as_is, measured_pairs, place_twin
from ..rung import Finding
from ..value_guards import KNOB, ValueGuard, unbounded
from .config import config_target, covers


def knob_exists() -> bool:
    """``torch._dynamo.config`` has :data:`KNOB` (torch >= 2.7; read from the 2.6 and 2.7 wheels)."""
    import torch._dynamo.config as config

    return hasattr(config, KNOB)


def _compiles_site(ctx: Any, cand: Any, v: dict[str, Any], harness_compiles: bool) -> bool:
    """Whether ``cand`` runs the code that reads the value compiled: as-is (and its variants) where
    the harness's model carries the program's own compile; a candidate whose compile covers the
    function (:func:`.config.covers`, the graph-break twins' reading)."""

    if is_as_is(cand.name):
        return harness_compiles
    f = Finding("value_guard", "", v.get("file"), v.get("line"), v.get("function"), [v["function"]] if v.get("function") else [])
    return covers(cand, f, ctx, False)


def with_knob(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with a ``+allow_unspec_int_on_nn_module`` twin before each candidate that compiles
    code reading an int attribute that changes every call (:func:`unbounded`): the candidate's
    actions plus one ``dynamo_config`` action at :func:`.config.config_target`. Records
    ``twin -> candidate`` in ``ctx.evidence.value_guard_twins`` for :func:`judge`; returns what
    was left out, and why."""

    ctx.evidence.value_guard_twins = {}
    values = [v for v in unbounded(ctx) if v.get("module_int")]
    if not values:
        return cands, []
    names = "; ".join(f"{ValueGuard(**v).name} at {ValueGuard(**v).where}" for v in values[:3])
    if not knob_exists():
        return cands, [f"+{KNOB}: {names} changes every call, and this torch has no torch._dynamo.config.{KNOB} "
                       "(torch >= 2.7): hold the value in a tensor"]
    from ...engine.watch import compiled_modules

    model, _, _ = ctx.reference()
    harness_compiles = bool(compiled_modules(model, limit=1)) or any(
        getattr(r, "covers", ("",))[0] == "function" for r in ctx.evidence.own_regions or [])
    target, why_there = config_target(ctx)
    out: list[Any] = []
    twins: dict[str, str] = {}
    keys = {c.key() for c in cands}
    for c in cands:
        if any(a.action == "dynamo_config" and getattr(a.settings, KNOB, None) for a in c.plan.actions) \
                or not any(_compiles_site(ctx, c, v, harness_compiles) for v in values):
            out.append(c)
            continue
        v0 = ValueGuard(**values[0])
        why = (f"value guard: {names} changes every call at one input shape ({v0.recompiles} recompile(s) in {v0.calls} calls "
               f"of the reference shape, values {', '.join(map(str, v0.values[:4]))}): Dynamo recompiles on it until the "
               f"recompile limit, then runs eager; {KNOB} is torch's own hint (a higher limit only recompiles more); "
               f"set in {target}, {why_there}")
        existing = [a for a in c.plan.actions if a.action == "dynamo_config" and a.target == target]
        if existing:
            settings = DynamoSettings(**{k: val for k, val in existing[0].settings.items()}, **{KNOB: True})
            action = existing[0].model_copy(update={"settings": settings, "why": f"{existing[0].why}; {why}"})
            actions = [action if a is existing[0] else a for a in c.plan.actions]
        else:
            action = DynamoConfigAction(action="dynamo_config", target=target, settings=DynamoSettings(**{KNOB: True}), why=why)
            actions = [action, *c.plan.actions]
        twin = Candidate(f"{c.name}+{KNOB}", c.plan.model_copy(update={"actions": actions}), list(c.notes))
        place_twin(out, keys, twins, twin, c)
    pruned = []
    if not twins:
        pruned.append(f"+{KNOB}: {names} changes every call, in code no measured candidate compiles (the program's own "
                      "compile of it is in a script the harness does not run, or every compile of it was pruned); set "
                      f"torch._dynamo.config.{KNOB} = True before that compile runs, or hold the value in a tensor")
    ctx.evidence.value_guard_twins = twins
    return out, pruned


def _recompiles(row: dict[str, Any]) -> tuple[int, int] | None:
    """``(recompiles, recompile-limit fallbacks)`` a measured row saw, or None without a compile measurement."""
    comp = row.get("compile")
    if not comp or comp.get("recompiles") is None:
        return None
    return int(comp["recompiles"]), len(comp.get("recompile_limit_hits") or [])


def judge(ctx: Any, rows: dict[str, dict[str, Any]]) -> list[str]:
    """After measurement: a knob twin (:func:`with_knob`) that saw no fewer recompiles and no fewer
    recompile-limit fallbacks than the candidate it came from is marked ``skipped`` in ``rows`` (a
    process-wide knob that changes nothing is not planned); one line per twin pruned. Rows not both
    measured, or with an error, are left to the decision as they are."""
    lines: list[str] = []
    for name, row, base, ref in measured_pairs(rows, ctx.evidence.value_guard_twins, failed=("skipped", "error")):
        seen, seen0 = _recompiles(row), _recompiles(ref)
        if seen is None or seen0 is None or seen[0] < seen0[0] or seen[1] < seen0[1]:
            continue
        row["skipped"] = (f"pruned after measurement: {KNOB} removed no recompile ({seen[0]} recompile(s), {seen[1]} "
                          f"recompile-limit fallback(s), vs {seen0[0]} and {seen0[1]} for {base!r} without it); a "
                          "process-wide knob that changes nothing is not planned")
        lines.append(f"{name}: {row['skipped']}")
    return lines


KIND = CandidateKind("value_guard_knob", 20, with_knob, judge, when_compiles_pruned=False)
