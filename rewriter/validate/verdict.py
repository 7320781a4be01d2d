"""The reasons a validation fails (exit 1) or errors (exit 2), from the collected results.

Fail (1): wrong numbers, a state_dict key mismatch, the rewritten model raising, slower than
eager, slower than the better baseline by more than ``--min-speedup``, not amortized under the
declared runs, a silent fallback to eager (a plan frame hit the recompile limit) or a
recompilation after warm-up. Error (2): the harness or build fails, out of memory, a timeout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Noise floor of the "slower than eager" rule: interleaved medians closer than this are a tie
#: (stackpart heuristic; measured run-to-run drift of interleaved medians is ~1% on an idle GPU).
NOISE = 0.02


@dataclass
class Verdict:
    """``exit_code`` 0 pass, 1 fail, 2 error; ``failures``/``errors``/``notes`` are sentences."""

    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 2 if self.errors else 1 if self.failures else 0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "exit_code": self.exit_code,
            "failures": self.failures,
            "errors": self.errors,
            "notes": self.notes,
        }


def numerics_failures(plan_cold: dict[str, Any]) -> list[str]:
    """One sentence per shape and quantity (output, loss, grads, loss after step) that differs."""
    out = []
    for entry in plan_cold.get("shapes", []):
        for what, comp in entry.get("compare", {}).items():
            if not comp["ok"]:
                first = comp["mismatches"][0]
                more = len(comp["mismatches"]) - 1
                out.append(
                    f"wrong numbers at shape {entry['shape']}: {what} {first['path']}: {first['reason']}"
                    + (f" (+{more} more leaves)" if more > 0 else "")
                )
    return out


def speed_failures(
    mean_ms: dict[str, float], min_speedup: float, amortization: dict[str, Any] | None
) -> list[str]:
    """Speed and amortization failures of the plan, from mean-of-median step times (ms)."""
    out = []
    plan, eager = mean_ms.get("plan"), mean_ms.get("eager")
    if plan is None or eager is None:
        return out
    if plan > eager * (1 + NOISE):
        out.append(f"slower than eager: {plan:.3f} ms vs {eager:.3f} ms per step")
    baselines = {k: v for k, v in mean_ms.items() if k in ("whole", "regional")}
    if baselines:
        best = min(baselines, key=baselines.get)
        ratio = baselines[best] / plan if plan > 0 else float("inf")
        if ratio < min_speedup:
            out.append(
                f"slower than the better baseline ({best} compile, {baselines[best]:.3f} ms) by more "
                f"than --min-speedup allows: speedup {ratio:.3f} < {min_speedup}"
            )
    if amortization and amortization.get("amortized") is False:
        out.append(f"not amortized: {amortization['verdict']}")
    return out


_GUARD = re.compile(r"generated guard (?P<guard>.+?)(?:\n|$)")
_SIZE = re.compile(r"L\['(?P<arg>\w+)'\]\.size\(\)\[(?P<dim>\d+)\]")


def constraint_hint(message: str, mark_dynamic: list[tuple[int | None, str, int]]) -> str | None:
    """For a ``ConstraintViolationError`` of the rewritten model (a ``mark_dynamic`` dim that the
    model's code guards on), the range the code accepts and the plan line to change; else None.

    ``mark_dynamic``: ``(plan line, arg, dim)`` of the plan's mark_dynamic actions. Dynamo raises
    when a dim marked dynamic gets a guard narrower than the marked range ("Not all values of X
    in the specified range ... satisfy the generated guard G", torch/fx/experimental/
    symbolic_shapes.py); G is the range the code allows: ``128 <= s and s <= 1024`` (GPT-2's
    attention path in transformers 5.17 on the H200) or ``Eq(s, 512)`` (specialised: not dynamic).
    """
    if "ConstraintViolationError" not in message and "Constraints violated" not in message:
        return None
    found = _GUARD.search(message)
    if not found:
        return None
    guard = found.group("guard").strip()
    size = _SIZE.search(guard)
    where = ""
    if size:
        arg, dim = size.group("arg"), int(size.group("dim"))
        lines = [line for line, a, d in mark_dynamic if a == arg and d == dim]
        where = f" ({arg} dim {dim}" + (f", plan.yaml line {lines[0]}" if lines and lines[0] else "") + ")"
    short = _SIZE.sub("s", guard)
    if short.startswith("Eq("):
        return (f"hint: the model specialises the marked dim{where}: {short}; it cannot be dynamic "
                "there: drop the mark_dynamic action or bucket the dim instead")
    low = re.search(r"(\d+) <= s", short)
    high = re.search(r"s <= (\d+)", short)
    bounds = ", ".join(p for p in (f"min: {low.group(1)}" if low else "", f"max: {high.group(1)}" if high else "") if p)
    return (f"hint: the model's code only accepts {short} for the marked dim{where}"
            + (f"; set {bounds} on that mark_dynamic action" if bounds else "")
            + " (or leave the dim to automatic dynamic shapes)")
