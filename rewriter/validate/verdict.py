"""The reasons a validation fails (exit 1) or errors (exit 2), from the collected results.

Fail (1): wrong numbers, a state_dict key mismatch, the rewritten model raising, slower than
eager, slower than the better baseline by more than ``--min-speedup``, not amortized under the
declared runs, a silent fallback to eager (a plan frame hit the recompile limit) or a
recompilation after warm-up. Error (2): the harness or build fails, out of memory, a timeout.
"""

from __future__ import annotations

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
