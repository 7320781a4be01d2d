"""Rung 3: op mix by category (GEMM, attention, norm, elementwise, reduction, copy, comm, other).

CUDA: self-device time of every device activity, classified by :mod:`.classify`. Without CUDA:
self-CPU time of aten operators (clearly labelled ``self-CPU``). Thresholds (partitioning-the-
stack, "Look at the op mix"): GEMM + attention >= 80% of the step is GEMM-dominated — fusion can
touch at most the other 20%, and at the reference's upper fusion gain of 2x that bounds compile
at 1/(1 - 0.2/2) = 1.11x, i.e. ~1.0x: plan no compile. Norm + elementwise >= 30% is fusible
traffic (compile, 1.3-2x per the same source).
"""

from __future__ import annotations

from ..classify import CATEGORIES, classify_cpu_op, classify_kernel
from ..context import Context
from ..rung import Rung, RungResult

GEMM_DOMINATED = 0.80
FUSIBLE = 0.30
FUSION_GAIN = 2.0  # upper end of partitioning-the-stack's "fusion is worth 1.3-2x"


def mix(ctx: Context) -> tuple[dict[str, float], str]:
    """Per-category µs per step, and the time basis (``self-device`` or ``self-CPU``)."""
    data = ctx.evidence.profile
    out = {c: 0.0 for c in CATEGORIES}
    if ctx.session.cuda and data.kernels:
        for k in data.kernels:
            out[classify_kernel(k.name, k.kind, k.parent_op)] += k.dur_us
        basis = "self-device"
    else:
        for o in data.ops:
            if o.name.startswith("aten::"):
                out[classify_cpu_op(o.name)] += o.self_cpu_us
        basis = "self-CPU (no CUDA)"
    n = max(1, data.steps)
    return {c: v / n for c, v in out.items()}, basis


def gemm_dominated(ctx: Context) -> bool:
    """This rung's verdict for the planner and the search: GEMM + attention take >=
    :data:`GEMM_DOMINATED` of the step (compile would return ~1.0x); False when the rung did not
    run ok."""
    return ctx.measured("op_mix").get("gemm_share", 0) >= GEMM_DOMINATED


def run(ctx: Context) -> RungResult:
    r = RungResult("op_mix", "Op mix by category")
    r.threshold = "GEMM+attention >= 80%: compile ~1.0x; norm+elementwise >= 30%: fusible (partitioning-the-stack)"
    per, basis = mix(ctx)
    total = sum(per.values()) or 1.0
    shares = {c: round(v / total, 4) for c, v in per.items()}
    gemm = shares["gemm"] + shares["attention"]
    fusible = shares["norm"] + shares["elementwise"]
    bound = 1 / (1 - (1 - gemm) * (1 - 1 / FUSION_GAIN)) if gemm < 1 else 1.0
    r.measurement = {
        "basis": basis,
        "total_ms": round(total / 1e3, 4),
        "ms": {c: round(v / 1e3, 4) for c, v in per.items()},
        "share": shares,
        "gemm_share": round(gemm, 3),
        "fusible_share": round(fusible, 3),
        "compile_gain_bound": round(bound, 3),
    }
    if gemm >= GEMM_DOMINATED:
        r.verdict = f"GEMM-dominated: {gemm:.0%} GEMM+attention ({basis}); compile would return ~1.0x (<= {bound:.2f}x)"
        r.implies = "no compile"
    elif fusible >= FUSIBLE:
        r.verdict = f"fusible traffic: {fusible:.0%} norm+elementwise ({basis})"
        r.implies = "compile (fusion, 1.3-2x)"
    else:
        r.verdict = f"mixed: GEMM+attention {gemm:.0%}, norm+elementwise {fusible:.0%} ({basis})"
        r.implies = "compile"
    return r


RUNG = Rung(name="op_mix", order=40, run=run, needs=frozenset({"profile"}))
