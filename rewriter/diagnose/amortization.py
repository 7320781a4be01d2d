"""Rung 9: amortization, from a measured compile of the candidate units.

Each candidate (``region``: the repeated block class's ``forward``; ``whole``: the model) is
compiled with the session's backend from a clean Dynamo state; the first call's extra time over
a steady call is the compile cost. The rule (partitioning-the-stack, "How do you decide whether
the compile time is worth it?"):

    worth it  <=>  (t_eager - t_compiled) * N_runs  >  t_compile * N_compiles

with ``N_compiles = restarts * (1 + recompiles across the harness shapes)``. Backends that cannot
speed anything up (``eager``, ``aot_eager``: used on CPU to keep the ladder cheap) measure the
compile cost but not the gain; the gain is then bounded by ``t_eager`` (a step cannot take less
than nothing): a candidate that does not pay back even at that bound is refused, otherwise the
verdict says which gain per step would pay it back.
"""

from __future__ import annotations

import time
from typing import Any

from .context import Context
from .dynamo_log import reset
from .rung import RungResult

NO_GAIN_BACKENDS = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition"})


def _measure(ctx: Context, unit: str, mode: str) -> dict[str, Any]:
    import torch

    model, inputs, _ = ctx.reference()
    session = ctx.session
    reset()
    blocks = ctx.cache.get("blocks") or []
    cls = blocks[0]["cls"] if unit == "region" else None
    original = cls.__dict__.get("forward") if cls is not None else None
    kwargs: dict[str, Any] = {"backend": ctx.backend}
    if mode != "default" and ctx.backend == "inductor":
        kwargs["mode"] = mode
    try:
        if cls is not None:
            cls.forward = torch.compile(cls.forward, **kwargs)
            target = model
        else:
            target = torch.compile(model, **kwargs)
        step = session.step_fn(target, inputs)
        t0 = time.perf_counter()
        session.run(step, f"torch.compile({unit}) first call")
        first_ms = (time.perf_counter() - t0) * 1e3
        steady = session.time(step, warmup=2)
        try:
            from torch._dynamo.utils import counters

            graphs = int(counters["stats"]["unique_graphs"])
        except Exception:
            graphs = None
    finally:
        if cls is not None:
            if original is None:
                del cls.forward
            else:
                cls.forward = original
        reset()
    return {
        "mode": kwargs.get("mode", "default"),
        "first_call_ms": round(first_ms, 2),
        "compiled_step_ms": round(steady["median_ms"], 4),
        "compile_s": round(max(0.0, first_ms - steady["median_ms"]) / 1e3, 3),
        "graphs": graphs,
    }


def decide(cand: dict[str, Any], eager_ms: float, runs: int, n_compiles: int, gain_measured: bool) -> dict[str, Any]:
    """Apply the amortization rule to one measured candidate (adds gain, cost, pays_back)."""
    cost_ms = cand["compile_s"] * 1e3 * n_compiles
    if gain_measured:
        gain = eager_ms - cand["compiled_step_ms"]
        cand.update(gain_ms=round(gain, 4), speedup=round(eager_ms / cand["compiled_step_ms"], 3) if cand["compiled_step_ms"] else None)
        cand["pays_back"] = gain * runs > cost_ms
    else:
        cand["gain_ms"] = "unmeasured (backend does not optimise)"
        cand["pays_back"] = False if eager_ms * runs <= cost_ms else None
    cand["break_even_gain_ms"] = round(cost_ms / runs, 6)
    cand["n_compiles"] = n_compiles
    return cand


def candidates(ctx: Context) -> list[tuple[str, str]]:
    """(unit, mode) pairs worth measuring: the block (if any); the whole model when launch-bound
    (CUDA graphs with ``reduce-overhead`` on CUDA) or when there is no block."""
    out = []
    # a block that recompiles per instance does not hold one graph as written: timing it would
    # charge up to recompile_limit compiles to a unit the planner will not emit as is
    if ctx.cache.get("blocks") and not ctx.measured("instance_recompiles").get("recompiles"):
        out.append(("region", "default"))
    launch = ctx.measured("batch_scaling").get("fixed_share", 0) >= 0.15
    if launch or not out:
        out.append(("whole", "reduce-overhead" if ctx.session.cuda and launch else "default"))
    return out


def run(ctx: Context) -> RungResult:
    r = RungResult("amortization", "Does the measured compile cost pay back?")
    a = ctx.amortization
    r.threshold = f"(t_eager - t_compiled) x {a.runs} runs > t_compile x N_compiles (restarts {a.restarts}) (partitioning-the-stack)"
    launch = ctx.measured("batch_scaling").get("fixed_share", 0) >= 0.15
    if ctx.measured("op_mix").get("gemm_share", 0) >= 0.80 and not launch:
        r.measurement = {"candidates": {}}
        r.verdict = "not measured: GEMM-dominated, no compile is planned"
        return r
    eager = ctx.eager_time()["median_ms"]
    recompiles = ctx.measured("recompiles").get("recompiles", 0) or 0
    n_compiles = a.restarts * (1 + recompiles)
    measured_gain = ctx.backend not in NO_GAIN_BACKENDS
    cands = {}
    for unit, mode in candidates(ctx):
        cands[unit] = decide(_measure(ctx, unit, mode), eager, a.runs, n_compiles, measured_gain)
    r.measurement = {
        "backend": ctx.backend,
        "eager_step_ms": round(eager, 4),
        "runs": a.runs,
        "restarts": a.restarts,
        "runs_assumed": ctx.amortization_assumed,
        "n_compiles": n_compiles,
        "candidates": cands,
    }
    verdicts = []
    for unit, c in cands.items():
        if c["pays_back"] is True:
            verdicts.append(f"{unit}: pays back ({c['speedup']}x, {c['compile_s']} s compile)")
        elif c["pays_back"] is False:
            verdicts.append(f"{unit}: does not pay back ({c['compile_s']} s x {n_compiles} compiles vs {a.runs} runs)")
        else:
            verdicts.append(f"{unit}: {c['compile_s']} s compile; pays back if it saves >= {c['break_even_gain_ms']} ms/step")
    r.verdict = "; ".join(verdicts)
    if cands and all(c["pays_back"] is False for c in cands.values()):
        r.implies = "compile nothing: the compile cost does not pay back"
    return r
