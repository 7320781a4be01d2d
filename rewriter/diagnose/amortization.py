"""Rung 9: amortization, from a measured compile of the candidate units at every harness shape.

Each candidate (``region``: the repeated block class's ``forward``; ``whole``: the model) is
compiled with the session's backend from a clean Dynamo state and called once at each harness
shape in order. A call that produced new graphs (Dynamo's ``unique_graphs`` counter) is a compile
actually observed; its cost is that first call's time over the steady step at the same shape.
The candidate is then timed at steady state at every shape, interleaved with the eager step at
that shape (:meth:`Session.time_many`: a noisy phase hits both alike), and ``t_eager`` /
``t_compiled`` are the means over the shapes (each harness shape assumed equally frequent).

The region candidate is compiled the way the plan would leave it: when the recompile rung saw
block-input dims vary, a forward pre-hook on the blocks (eager, outside the compiled frame)
marks those dims dynamic (``maybe_mark_dynamic``, the ``mark_dynamic`` action's effect), so the
count is the compiles the planned region pays, not one per shape. The whole-model candidate uses
Dynamo's default automatic dynamic shapes (one recompile when a dim first changes).

The rule (partitioning-the-stack, "How do you decide whether the compile time is worth it?"):

    net = (t_eager - t_compiled) * N_runs - t_compile_total * restarts,  worth it <=> net > 0

where ``t_compile_total`` is the summed cost of the compiles observed in one process. Backends
that cannot speed anything up (``eager``, ``aot_eager``: used on CPU to keep the ladder cheap)
measure the compile cost but not the gain; the gain is then bounded by ``t_eager`` (a step cannot
take less than nothing): a candidate that does not pay back even at that bound is refused,
otherwise the verdict says which gain per step would pay it back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from .context import Context
from .dynamo_log import reset
from .recompiles import shapes_stable
from .rung import RungResult

NO_GAIN_BACKENDS = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition"})


def _graphs() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # pragma: no cover - counters layout of other torch versions
        return 0


@contextlib.contextmanager
def _swapped(cls: Any, forward: Any) -> Iterator[None]:
    """``cls.forward`` replaced by ``forward`` for the duration (the eager step runs unpatched)."""
    original = cls.__dict__.get("forward")
    cls.forward = forward
    try:
        yield
    finally:
        if original is None:
            del cls.forward
        else:
            cls.forward = original


def _mark_hooks(ctx: Context, block: dict | None) -> list[Any]:
    """Pre-hooks marking the varying block-input dims dynamic (what ``mark_dynamic`` plans)."""
    import torch

    dims = ctx.measured("recompiles").get("varying_block_dims") or []
    if block is None or not dims:
        return []
    mark = getattr(torch._dynamo, "maybe_mark_dynamic", None) or torch._dynamo.mark_dynamic

    def pre(mod: Any, args: tuple) -> None:
        for d in dims:
            if d["arg"] < len(args) and isinstance(args[d["arg"]], torch.Tensor) and args[d["arg"]].dim() > d["dim"]:
                mark(args[d["arg"]], d["dim"])

    return [m.register_forward_pre_hook(pre) for m in block["modules"]]


def _measure(ctx: Context, unit: str, mode: str) -> dict[str, Any]:
    import torch

    session = ctx.session
    model, _, _ = ctx.reference()
    shapes = [dict(s) for s in session.spec.shapes]
    blocks = ctx.cache.get("blocks") or []
    block = blocks[0] if unit == "region" and blocks else None
    kwargs: dict[str, Any] = {"backend": ctx.backend}
    if mode != "default" and ctx.backend == "inductor":
        kwargs["mode"] = mode
    reset()
    hooks = _mark_hooks(ctx, block)
    compiled_fwd = torch.compile(block["cls"].forward, **kwargs) if block is not None else None
    compiled_model = None if block is not None else torch.compile(model, **kwargs)
    per_shape = []
    try:
        steps = []
        for shape in shapes:
            _, inputs = session.build(shape)
            eager = session.step_fn(model, inputs)
            if block is not None:
                inner = session.step_fn(model, inputs)

                def step(_inner: Any = inner) -> Any:
                    with _swapped(block["cls"], compiled_fwd):
                        return _inner()
            else:
                step = session.step_fn(compiled_model, inputs)
            before = _graphs()
            t0 = time.perf_counter()
            session.run(step, f"torch.compile({unit}) first call at {shape}")
            first_ms = (time.perf_counter() - t0) * 1e3
            steps.append((shape, eager, step, first_ms, _graphs() - before))
        # steady state per shape, after every shape compiled (nothing left to compile)
        min_s = max(0.1, 0.3 / len(shapes))
        total_compile_ms, observed = 0.0, 0
        for shape, eager, step, first_ms, new_graphs in steps:
            e, c = session.time_many([eager, step], warmup=2, min_s=min_s)
            if new_graphs > 0:
                observed += 1
                total_compile_ms += max(0.0, first_ms - c["median_ms"])
            per_shape.append({"shape": shape, "eager_ms": round(e["median_ms"], 4), "compiled_ms": round(c["median_ms"], 4),
                              "first_call_ms": round(first_ms, 2), "new_graphs": new_graphs})
    finally:
        for h in hooks:
            h.remove()
        reset()
    n = len(per_shape)
    return {
        "mode": kwargs.get("mode", "default"),
        "dynamic_marks": len(hooks) > 0,
        "per_shape": per_shape,
        "eager_step_ms": round(sum(p["eager_ms"] for p in per_shape) / n, 4),
        "compiled_step_ms": round(sum(p["compiled_ms"] for p in per_shape) / n, 4),
        "compiles_observed": observed,
        "compile_s": round(total_compile_ms / 1e3, 3),
    }


def decide(cand: dict[str, Any], runs: int, restarts: int, gain_measured: bool) -> dict[str, Any]:
    """Apply the amortization rule to one measured candidate (adds gain, net, pays_back).

    ``cand`` needs ``eager_step_ms``, ``compiled_step_ms`` (means over the shapes, ms),
    ``compile_s`` (summed cost of the compiles observed in one process, s) and
    ``compiles_observed``. Adds ``gain_ms``, ``speedup``, ``net_s`` (seconds saved over the
    deployment, compile cost paid ``restarts`` times), ``pays_back``, ``break_even_gain_ms``,
    ``n_compiles`` (observed x restarts).
    """
    eager_ms = cand["eager_step_ms"]
    cost_ms = cand["compile_s"] * 1e3 * restarts
    if gain_measured:
        gain = eager_ms - cand["compiled_step_ms"]
        cand.update(gain_ms=round(gain, 4), speedup=round(eager_ms / cand["compiled_step_ms"], 3) if cand["compiled_step_ms"] else None)
        cand["net_s"] = round((gain * runs - cost_ms) / 1e3, 3)
        cand["pays_back"] = gain * runs > cost_ms
    else:
        cand["gain_ms"] = "unmeasured (backend does not optimise)"
        cand["pays_back"] = False if eager_ms * runs <= cost_ms else None
    cand["break_even_gain_ms"] = round(cost_ms / runs, 6)
    cand["n_compiles"] = cand.get("compiles_observed", 1) * restarts
    return cand


def candidates(ctx: Context) -> list[tuple[str, str]]:
    """(unit, mode) pairs worth measuring: the block (if any); the whole model when launch-bound
    (CUDA graphs with ``reduce-overhead`` on CUDA when shapes are also stable) or when there is
    no block."""
    out = []
    # a block that recompiles per instance does not hold one graph as written: timing it would
    # charge up to recompile_limit compiles to a unit the planner will not emit as is
    if ctx.cache.get("blocks") and not ctx.measured("instance_recompiles").get("recompiles"):
        out.append(("region", "default"))
    launch = ctx.measured("batch_scaling").get("fixed_share", 0) >= 0.15
    stable = shapes_stable(ctx)
    if launch or not out:
        out.append(("whole", "reduce-overhead" if ctx.session.cuda and launch and stable else "default"))
    return out


def run(ctx: Context) -> RungResult:
    r = RungResult("amortization", "Does the measured compile cost pay back?")
    a = ctx.amortization
    r.threshold = (
        f"net = (t_eager - t_compiled) x {a.runs} runs - t_compile x compiles observed x {a.restarts} restarts > 0; "
        "steady state per harness shape (partitioning-the-stack)"
    )
    launch = ctx.measured("batch_scaling").get("fixed_share", 0) >= 0.15
    if ctx.measured("op_mix").get("gemm_share", 0) >= 0.80 and not launch:
        r.measurement = {"candidates": {}}
        r.verdict = "not measured: GEMM-dominated, no compile is planned"
        return r
    measured_gain = ctx.backend not in NO_GAIN_BACKENDS
    cands = {}
    for unit, mode in candidates(ctx):
        cands[unit] = decide(_measure(ctx, unit, mode), a.runs, a.restarts, measured_gain)
    r.measurement = {
        "backend": ctx.backend,
        "runs": a.runs,
        "restarts": a.restarts,
        "runs_assumed": ctx.amortization_assumed,
        "candidates": cands,
    }
    verdicts = []
    for unit, c in cands.items():
        cost = f"{c['compile_s']} s for {c['compiles_observed']} compile(s) x {a.restarts} restart(s)"
        if c["pays_back"] is True:
            verdicts.append(f"{unit}: pays back ({c['speedup']}x at steady state, {cost}, net {c['net_s']} s)")
        elif c["pays_back"] is False:
            gain = f"{c['speedup']}x at steady state, " if isinstance(c.get("speedup"), float) else ""
            verdicts.append(f"{unit}: does not pay back ({gain}{cost} vs {a.runs} runs)")
        else:
            verdicts.append(f"{unit}: {cost}; pays back if it saves >= {c['break_even_gain_ms']} ms/step")
    r.verdict = "; ".join(verdicts)
    if cands and all(c["pays_back"] is False for c in cands.values()):
        r.implies = "compile nothing: the compile cost does not pay back"
    return r
