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
    mean_ms: dict[str, float], min_speedup: float, amortization: dict[str, Any] | None,
    contended_ms: dict[str, float] | None = None, contended_band: float = NOISE, reference: str = "eager",
) -> list[str]:
    """Speed and amortization failures of the plan, from mean-of-median step times (ms).

    ``contended_ms``: the same variants' steps with their host core contended (the engine's
    contended window, :attr:`rewriter.engine.options.Options.contended`), judged by the same two
    rules as the quiet figures, each with ``contended_band`` (a fraction: the measured
    process-to-process band of those figures, :func:`rewriter.engine.noise.process_noise`'s
    ``contended_share``, at least :data:`NOISE`) as the tolerance: a plan that the contended
    core makes slower than eager, or slower than the better baseline by more than
    ``min_speedup`` allows beyond that band, fails. diagnose's search decides on the worse of the
    two conditions (:func:`rewriter.diagnose.decide.contended_standing`); this keeps validate
    from passing a plan the search would have rejected for its contended step
    (docs/decisions.md, "Validate checks the contended step too").

    ``reference``: what the ``eager`` figure is, as the failures name it (diagnose's search gates
    against the program as it runs, :func:`rewriter.diagnose.decide.gate_failures`).
    """
    out = _speed(mean_ms, min_speedup, NOISE, "", reference)
    if contended_ms:
        out += _speed(contended_ms, min_speedup, max(NOISE, contended_band), " with the host core contended", reference)
    if amortization and amortization.get("amortized") is False:
        out.append(f"not amortized: {amortization['verdict']}")
    return out


def contended_band(noise: dict[str, Any] | None) -> float:
    """The tolerance of the contended-core figures (a fraction): the measured band of that window
    (:func:`rewriter.engine.noise.process_noise`'s ``contended_share``), at least :data:`NOISE`."""
    return max(NOISE, (noise or {}).get("contended_share") or 0.0)


def _speed(mean_ms: dict[str, float], min_speedup: float, band: float, where: str, reference: str) -> list[str]:
    out = []
    plan, eager = mean_ms.get("plan"), mean_ms.get("eager")
    if plan is None or eager is None:
        return out
    if plan > eager * (1 + band):
        out.append(f"slower than {reference}{where}: {plan:.3f} ms vs {eager:.3f} ms per step")
    baselines = {k: v for k, v in mean_ms.items() if k in ("whole", "regional")}
    if baselines:
        best = min(baselines, key=baselines.get)
        ratio = baselines[best] / plan if plan > 0 else float("inf")
        # the quiet rule as it always was; the contended one loosened by its measured band
        bound = min_speedup / (1 + band) if where else min_speedup
        if ratio < bound:
            allowed = f"--min-speedup {min_speedup} allows within its {band:.1%} band" if where else "--min-speedup allows"
            shown = f"{bound:.3f}" if where else f"{min_speedup}"
            out.append(
                f"slower than the better baseline{where} ({best} compile, {baselines[best]:.3f} ms) by more "
                f"than {allowed}: speedup {below(ratio, bound)} < {shown}"
            )
    return out


def below(value: float, bound: float) -> str:
    """``value`` with as many decimals (3 to 6) as it takes to print below ``bound``: a speedup of
    0.9496 against 0.95 reads ``0.9496``, not ``0.950 < 0.95``."""
    for digits in range(3, 7):
        text = f"{value:.{digits}f}"
        if float(text) < bound:
            return text
    return f"{value:.6g}"


#: Raised by CUDA graph trees when a tensor a graph returned is read after that graph's memory was
#: reused by a later replay (torch/_inductor/cudagraph_trees.py).
_OVERWRITTEN = "accessing tensor output of CUDAGraphs that has been overwritten"


def cudagraph_overwrite_hint(message: str) -> str | None:
    """For a CUDA-graphs candidate (``mode: reduce-overhead``) that read a tensor a CUDA graph
    returned after a later replay reused its memory, what that means and what avoids it; else None.

    CUDA graph trees give each graph's outputs memory in a shared pool that the next replay of the
    same graph overwrites (PyTorch docs, "CUDAGraph Trees", Limitations): an output kept across
    calls and read later (a returned KV cache; a program that keeps each step's outputs) raises
    unless it was cloned or ``torch.compiler.cudagraph_mark_step_begin()`` marked the step, and so
    does a graph fed its own earlier output, as where graph breaks leave one graph per repeated
    block (pytorch#152887).
    """
    if _OVERWRITTEN not in message:
        return None
    return ("hint: CUDA graphs (mode 'reduce-overhead') reused the memory of a tensor one graph returned before it "
            "was read: an output kept across calls (clone it, or call torch.compiler.cudagraph_mark_step_begin() "
            "before each step) or a graph that runs again before its output is read, as where graph breaks leave one "
            "graph per repeated block (pytorch#152887); the same compile without CUDA graphs avoids it "
            "(docs/decisions.md, \"CUDA graphs and outputs kept across calls\")")


_SIZE = re.compile(r"L\['(?P<arg>\w+)'\]\.size\(\)\[(?P<dim>\d+)\]")
_RANGE = re.compile(r"Not all values of (?P<sym>\S+) = .*? satisfy the generated guard (?P<guard>.+?)\.?$")
_CONST = re.compile(r"You marked (?P<sym>\S+) as dynamic but your code specialized it to be a constant \((?P<value>-?\d+)\)")
_EQUAL = re.compile(r"(?P<sym>L\['\w+'\]\.size\(\)\[\d+\]).*?inferred to be equal to (?P<other>.+?)\.?$")


def constraint_hint(message: str, mark_dynamic: list[tuple[int | None, str, int]], plan_name: str = "plan.yaml") -> str | None:
    """For a ``ConstraintViolationError`` of the rewritten model (a ``mark_dynamic`` dim that the
    model's code guards on), what the code requires of each marked dim and the plan line to
    change; else None.

    ``mark_dynamic``: ``(plan line, arg, dim)`` of the plan's mark_dynamic actions. Dynamo lists
    one violation per line (torch/fx/experimental/symbolic_shapes.py): "Not all values of X in
    the specified range ... satisfy the generated guard G" (the code requires G: GPT-2 in
    transformers 5.17 requires ``128 <= s <= 1023``), "You marked X as dynamic
    but your code specialized it to be a constant (N)" (a view to a fixed size, or an operation
    with a tensor whose dim is static), "X ... inferred to be equal to Y" (tied to another dim).
    """
    if "ConstraintViolationError" not in message and "Constraints violated" not in message:
        return None
    hints = []
    for raw in message.splitlines():
        line = raw.strip().lstrip("- ").strip()
        found = _RANGE.search(line) or _CONST.search(line) or _EQUAL.search(line)
        if not found:
            continue
        sym = found.group("sym")
        where = _where(sym, mark_dynamic, plan_name)
        if found.re is _RANGE:
            guard = _SIZE.sub("s", found.group("guard"))
            low, high = re.search(r"(\d+) <= s", guard), re.search(r"s <= (\d+)", guard)
            bounds = ", ".join(b for b in (f"min: {low.group(1)}" if low else "", f"max: {high.group(1)}" if high else "") if b)
            hints.append(f"the code requires {guard} for {where}" + (f": set {bounds} on that mark_dynamic action" if bounds else ""))
        elif found.re is _CONST:
            hints.append(f"the code fixes {where} to {found.group('value')} (a view to a fixed size, or an op with a "
                         "tensor whose dim is static): drop that mark_dynamic action, mark every tensor it meets, "
                         "or bucket the dim instead")
        else:
            other = _SIZE.sub(lambda m: f"{m.group('arg')} dim {m.group('dim')}", found.group("other"))
            hints.append(f"the code ties {where} to {other}: mark that one too, or drop the mark")
    if not hints:
        return None
    return ("hint: " + "; ".join(dict.fromkeys(hints))
            + " (or strict: false on the action, maybe_mark_dynamic: Dynamo keeps what the code needs)")


def _where(sym: str, mark_dynamic: list[tuple[int | None, str, int]], plan_name: str) -> str:
    size = _SIZE.search(sym)
    if not size:
        return f"the marked dim {sym}"
    arg, dim = size.group("arg"), int(size.group("dim"))
    lines = [line for line, a, d in mark_dynamic if a == arg and d == dim and line]
    return f"{arg} dim {dim}" + (f" ({plan_name} line {lines[0]})" if lines else "")
