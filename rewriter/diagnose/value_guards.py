"""Guards on values that change between calls at one input shape: a step counter, a cache's fill level.

Dynamo specialises an int attribute of an ``nn.Module`` (``self.step``) to its value and guards on
it (``self.step == 3``); a program that changes it in ``forward`` recompiles at every call until
``torch._dynamo.config.recompile_limit`` (8), then runs that frame eager without an error. One call
per harness shape never shows it: the size guard of the new shape fails first, and Dynamo names
only the first failed guard of each cache entry. So the recompiles rung calls the reference shape
:data:`CALLS` times on one compiled model (backend ``eager``: the guards are Dynamo's) and reads
the recompiles those repeated calls caused from Dynamo's own recompile log (:mod:`.dynamo_log`):
at one shape, every recompile is a guard on a value.

A value whose guard failed at every repeated call changes every call: its set of values has no
bound the calls can show, and a higher recompile limit only recompiles more before the same
fallback. Torch's own hint for it (printed with the failed guard by torch 2.13, not yet by 2.7;
the knob is in torch/_dynamo/config.py from torch 2.7, not in 2.6: "when tracking step count
leading to constant recompilation and eventually eager fallback") is ``torch._dynamo.config.allow_unspec_int_on_nn_module = True``
(the int becomes a symbolic int after one recompile, automatic dynamic shapes) or keeping the value
in a tensor. A value that recompiled once and then held (a flag toggled once, an int argument that
automatic dynamic shapes made symbolic) is bounded by what was seen: there a limit above the graphs
needed stays a remedy (:func:`limit_remedy`).

The search turns the knob into candidates (:func:`with_knob`): a twin of each candidate that
compiles the guarded code, with one ``dynamo_config`` action where the program's compile reads it
(:func:`.config_candidates.config_target`), pruned after measurement when it did not recompile less
(:func:`judge`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

#: Calls of the reference shape on one compiled model: the first compiles, each later one shows a
#: value that changed since (two later calls tell "every call" from "once").
CALLS = 3

#: The knob torch's hint names for an int attribute of an nn.Module.
KNOB = "allow_unspec_int_on_nn_module"

#: ``self.step == 3`` / ``L['self'].step == 3`` / ``pos == 0``: Dynamo's guard on a Python int.
_EQ_GUARD = re.compile(r"^(?P<source>.+?)\s*==\s*(?P<value>-?\d+)$")
#: A guard source rooted at the compiled module (``self``, ``L['self']``): an attribute of it.
_SELF = re.compile(r"^(?:L\[['\"]self['\"]\]|self)(?P<rest>(?:\.|\[).*)$")
#: torch's hint appended to such a guard (torch 2.13; 2.7 prints none): "(HINT: torch.compile considers integer
#: attributes of the nn.Module to be static ... allow_unspec_int_on_nn_module = True, or convert
#: this integer into a tensor.)".
_HINT = re.compile(r"\(HINT: ([^)]*allow_unspec_int_on_nn_module[^)]*)\)")


@dataclass
class ValueGuard:
    """One value Dynamo guarded on that changed between calls at one input shape.

    Attributes:
        source: Dynamo's guard source (``self.step``, ``self.layers[0].attn.fill``, ``pos``).
        attribute: the attribute path under the compiled module (``step``, ``layers[0].attn.fill``),
            or None where the source is not one (an argument, a global).
        values: the values Dynamo's failed guards held, oldest first (``[0, 1]``).
        calls: calls of the reference shape made.
        recompiles: recompiles among those calls whose failed guard is this value's.
        every_call: the guard failed at every call after the first (a counter, a fill level): no
            bound on its values was seen.
        module_int: an int attribute of an nn.Module (the compiled module's), which
            ``allow_unspec_int_on_nn_module`` makes symbolic.
        hint: torch's own hint printed with the guard, where this torch prints one.
        file, line, function: the line that reads the value (relative to SRC), where located.
    """

    source: str
    attribute: str | None
    values: list[int]
    calls: int
    recompiles: int
    every_call: bool
    module_int: bool
    hint: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    callers: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else "no line under SRC"

    @property
    def name(self) -> str:
        """How a person names it: the class whose code reads it and the attribute (``Net.step``; for
        a submodule's, ``Layer.fill``, where the guard's source is ``self.layers[0].fill``), else
        the guard's source."""
        if self.attribute and self.function and "." in self.function:
            return f"{self.function.split('.')[0]}.{re.split(r'[.]', self.attribute)[-1]}"
        return self.attribute or self.source


def parse_int_guard(guard: str) -> tuple[str, int] | None:
    """``(source, value)`` of a guard on a Python int (``self.step == 3`` -> ``("self.step", 3)``);
    None for any other guard (a size, a type, an id)."""
    m = _EQ_GUARD.match(guard.strip())
    if m is None or "size" in m.group("source") or "stride" in m.group("source"):
        return None
    return m.group("source").strip(), int(m.group("value"))


def attribute_of(source: str) -> str | None:
    """The attribute path under the compiled module of a guard source: ``self.step`` -> ``step``,
    ``L['self']._modules['attn'].fill`` -> ``attn.fill``; None where the source is not rooted at it."""
    m = _SELF.match(source.strip())
    if m is None:
        return None
    rest = re.sub(r"\._(?:modules|parameters|buffers)\[['\"](\w+)['\"]\]", r".\1", m.group("rest"))
    rest = re.sub(r"\[['\"](\w+)['\"]\]", r".\1", rest)
    rest = re.sub(r"\.(\d+)\b", r"[\1]", rest)  # a ModuleList's child: layers[0]
    return rest.lstrip(".") or None


def read(log: Any, src: Any, calls: int) -> list[ValueGuard]:
    """The value guards of the recompiles in ``log`` (Dynamo's recompile log over ``calls`` calls
    of one input shape on one compiled model), one per guard source, in the order first seen.
    Every recompile there is on a value; those whose failed guard is not ``source == int``
    (an object's id, a type) are left out."""
    by_source: dict[str, dict[str, Any]] = {}
    for rc in log.recompiles:
        # the newest cache entry's failed guard comes first; each older entry's after it
        parsed = [p for g in rc.guards if (p := parse_int_guard(g)) is not None]
        if not parsed:
            continue
        source = parsed[0][0]
        e = by_source.setdefault(source, {"values": [], "recompiles": 0, "rc": rc})
        e["recompiles"] += 1
        for s, v in reversed(parsed):
            if s == source and v not in e["values"]:
                e["values"].append(v)
    out = []
    for source, e in by_source.items():
        rc = e["rc"]
        site = log.guard_site(src, rc.text)
        hint = _HINT.search(rc.text)
        attribute = attribute_of(source)
        out.append(ValueGuard(
            source=source, attribute=attribute, values=e["values"], calls=calls, recompiles=e["recompiles"],
            every_call=e["recompiles"] >= calls - 1, module_int=bool(hint) or attribute is not None,
            hint=" ".join(hint.group(1).split()) if hint else None,
            file=site[0] if site else None, line=site[1] if site else None, function=site[2] if site else None))
    return out


def repeat_reference(ctx: Any, calls: int = CALLS) -> list[ValueGuard]:
    """Compile the reference model once (backend ``eager``), call it ``calls`` times at the
    reference shape, and read the value guards its recompiles show (:func:`read`). Dynamo is reset
    before and after. Raises what the step raises (the rung records it)."""
    import torch

    from .dynamo_log import capture, reset

    from .as_run import compiled_as_run, compiles_itself

    model, inputs, _ = ctx.reference()
    compiled, how = compiled_as_run(model, compiles_itself(ctx))
    reset()
    step = ctx.session.step_fn(compiled, inputs)
    try:
        with capture() as log, torch.compiler.set_stance("default", force_backend="eager"):
            for i in range(calls):
                ctx.session.run(step, f"{ctx.session.forward_name()} under {how}, "
                                      f"call {i + 1} of {calls} at {dict(ctx.session.spec.shapes[0])}")
    finally:
        reset()
    return read(log, ctx.session.src, calls)


def describe(v: ValueGuard) -> str:
    """One line: what changed, where, how often Dynamo recompiled on it, and what to do."""
    seen = ", ".join(map(str, v.values[:5])) + (", ..." if len(v.values) > 5 else "")
    what = f"{v.name} (Dynamo's guard: {'self.' + v.attribute if v.attribute else v.source} == {v.values[-1] if v.values else '?'})"
    if v.every_call:
        return (f"{what} changes every call at one input shape: {v.recompiles} recompile(s) in {v.calls} calls of the "
                f"reference shape (values {seen}); {remedy(v)}")
    return (f"{what} changed between calls at one input shape: {v.recompiles} recompile(s) in {v.calls} calls (values {seen}), "
            "then held: a bounded set of values")


def remedy(v: ValueGuard) -> str:
    """What to do about a value guard (never a higher recompile limit for one that changes every call)."""
    if not v.every_call:
        return "a bounded set of values: one graph per value, within the recompile limit"
    if v.module_int:
        return (f"keep it out of the guards: torch._dynamo.config.{KNOB} = True (torch's own hint; the int becomes "
                "symbolic after one recompile) or hold it in a tensor; a higher recompile limit only recompiles more")
    return ("keep it out of the guards: hold it in a tensor (torch's own hint for a changing int) or restructure the code "
            "that specialises on it; a higher recompile limit only recompiles more")


def unbounded(ctx: Any) -> list[dict[str, Any]]:
    """The recompiles rung's value guards that change every call (as dicts), or ``[]``."""
    r = (getattr(ctx, "results", None) or {}).get("recompiles")
    if r is None or not r.ok:
        return []
    return [v for v in r.measurement.get("value_guards") or [] if v.get("every_call")]


def limit_remedy(ctx: Any, config: str, reason: str | None = None, cls: str | None = None) -> str:
    """The remedy for a hit recompile limit: raising ``config`` where the values are bounded; the
    knob (or a tensor) where the recompiles rung saw a value that changes every call and the
    limit's last reason guards that value (without a reason: a value read in class ``cls``'s
    code, or any where ``cls`` is None)."""
    def guards(v: dict[str, Any]) -> bool:
        if reason is None:
            return cls is None or (v.get("function") or "").split(".")[0] == cls
        leaf = re.split(r"[.\[]", v["attribute"])[-1] if v.get("attribute") else None
        return v["source"] in reason or bool(leaf and re.search(rf"\.{re.escape(leaf)} == -?\d", reason))

    hit = [v for v in unbounded(ctx) if guards(v)]
    if hit:
        v = ValueGuard(**hit[0])
        return f"{v.name} changes every call ({v.where}): {remedy(v)}"
    return f"raise torch._dynamo.config.{config} above the graphs needed"


def to_json(guards: list[ValueGuard]) -> list[dict[str, Any]]:
    return [asdict(v) for v in guards]


# --- the search's candidates -------------------------------------------------------------------


def knob_exists() -> bool:
    """``torch._dynamo.config`` has :data:`KNOB` (torch >= 2.7; read from the 2.6 and 2.7 wheels)."""
    import torch._dynamo.config as config

    return hasattr(config, KNOB)


def _compiles_site(ctx: Any, cand: Any, v: dict[str, Any], harness_compiles: bool) -> bool:
    """Whether ``cand`` runs the code that reads the value compiled: as-is (and its variants) where
    the harness's model carries the program's own compile; a candidate whose compile covers the
    function (:func:`.config_candidates.covers`, the graph-break twins' reading)."""
    from .config_candidates import covers
    from .rung import Finding

    if cand.name == "as-is" or cand.name.startswith("as-is+"):
        return harness_compiles
    f = Finding("value_guard", "", v.get("file"), v.get("line"), v.get("function"), [v["function"]] if v.get("function") else [])
    return covers(cand, f, ctx, False)


def with_knob(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with a ``+allow_unspec_int_on_nn_module`` twin before each candidate that compiles
    code reading an int attribute that changes every call (:func:`unbounded`): the candidate's
    actions plus one ``dynamo_config`` action at :func:`.config_candidates.config_target`. Records
    ``twin -> candidate`` in ``ctx.evidence.value_guard_twins`` for :func:`judge`; returns what
    was left out, and why."""
    from ..plan import DynamoConfigAction, DynamoSettings
    from .candidate import Candidate, place_twin
    from .config_candidates import config_target

    ctx.evidence.value_guard_twins = {}
    values = [v for v in unbounded(ctx) if v.get("module_int")]
    if not values:
        return cands, []
    names = "; ".join(f"{ValueGuard(**v).name} at {ValueGuard(**v).where}" for v in values[:3])
    if not knob_exists():
        return cands, [f"+{KNOB}: {names} changes every call, and this torch has no torch._dynamo.config.{KNOB} "
                       "(torch >= 2.7): hold the value in a tensor"]
    from ..engine.watch import compiled_modules

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
    for name, base in ctx.evidence.value_guard_twins.items():
        row, ref = rows.get(name), rows.get(base)
        if not row or not ref or any(r.get(k) for r in (row, ref) for k in ("skipped", "error")):
            continue
        seen, seen0 = _recompiles(row), _recompiles(ref)
        if seen is None or seen0 is None or seen[0] < seen0[0] or seen[1] < seen0[1]:
            continue
        row["skipped"] = (f"pruned after measurement: {KNOB} removed no recompile ({seen[0]} recompile(s), {seen[1]} "
                          f"recompile-limit fallback(s), vs {seen0[0]} and {seen0[1]} for {base!r} without it); a "
                          "process-wide knob that changes nothing is not planned")
        lines.append(f"{name}: {row['skipped']}")
    return lines
