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

The search turns the knob into candidates (:mod:`.kinds.value_guard`): a twin of each candidate
that compiles the guarded code, pruned after measurement when it did not recompile less.
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
