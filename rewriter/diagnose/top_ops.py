"""Rung 4: the top-10 operators by self-device time (self-CPU without CUDA), dominant op flagged.

Kernels are grouped by the aten operator that launched them (name when unknown); the share is of
the summed self-device (or self-CPU) time of the step. Threshold: one non-GEMM op >= 10% of the
step is a hand-written kernel (partitioning-the-stack, "If one non-GEMM op is 10%+ of the step,
that is a hand-written kernel"). Attention and communication are already library kernels, and an
elementwise or norm op that dominates is fusible traffic (compile), so only reduction/other ops
(sort, top-k, scans, custom math) imply the ``kernel`` action.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from .callsites import capture
from .classify import classify_cpu_op, classify_kernel
from .context import Context
from .rung import Finding, RungResult

DOMINANT = 0.10
KERNEL_CATEGORIES = frozenset({"reduction", "other"})
NOT_KERNEL = frozenset({"gemm", "attention", "communication"})


def rows(ctx: Context) -> tuple[list[dict], str]:
    """Top rows ``{name, op, category, ms, share, kernels, function}``, largest first."""
    data = ctx.cache["profile"]
    groups: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "kernels": set(), "category": "other", "functions": defaultdict(float)})
    if ctx.session.cuda and data.kernels:
        basis = "self-device"
        for k in data.kernels:
            key = k.parent_op or k.name
            g = groups[key]
            g["us"] += k.dur_us
            g["kernels"].add(k.name)
            g["category"] = classify_kernel(k.name, k.kind, k.parent_op)
        fn_by_op = defaultdict(lambda: defaultdict(float))
        for o in data.ops:
            if o.function:
                fn_by_op[o.name][o.function] += 1
        for key, g in groups.items():
            g["functions"] = fn_by_op.get(key, {})
    else:
        basis = "self-CPU (no CUDA)"
        for o in data.ops:
            if not o.name.startswith("aten::"):
                continue
            g = groups[o.name]
            g["us"] += o.self_cpu_us
            g["category"] = classify_cpu_op(o.name)
            if o.function:
                g["functions"][o.function] += o.self_cpu_us
    total = sum(g["us"] for g in groups.values()) or 1.0
    out = []
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["us"])[:10]:
        fn = max(g["functions"].items(), key=lambda kv: kv[1])[0] if g["functions"] else None
        out.append(
            {
                "op": name,
                "category": g["category"],
                "ms": round(g["us"] / max(1, data.steps) / 1e3, 4),
                "share": round(g["us"] / total, 4),
                "kernels": sorted(g["kernels"])[:3],
                "function": fn,
            }
        )
    return out, basis


def run(ctx: Context) -> RungResult:
    r = RungResult("top_ops", "Top-10 ops; one non-GEMM op >= 10%?")
    r.threshold = "one non-GEMM op >= 10% of the step -> hand-written kernel (partitioning-the-stack)"
    top, basis = rows(ctx)
    # an algorithmic op (sort, top-k, scan...) is the kernel candidate even when a fusible
    # elementwise op is larger: the compiler handles the latter, not the former
    dominant = next((row for row in top if row["category"] in KERNEL_CATEGORIES and row["share"] >= DOMINANT), None)
    if dominant is None:
        dominant = next((row for row in top if row["category"] not in NOT_KERNEL and row["share"] >= DOMINANT), None)
    r.measurement = {"basis": basis, "top": top, "dominant": dominant}
    if dominant is None:
        r.verdict = f"no non-GEMM op >= {DOMINANT:.0%} of the step ({basis})"
        return r
    name = dominant["op"]
    r.verdict = f"dominant non-GEMM op: {name} {dominant['share']:.0%} of the step ({basis}, {dominant['category']})"
    if dominant["category"] in KERNEL_CATEGORIES:
        r.implies = f"kernel for {name}"
    else:
        r.implies = "compile (fusible: the compiler handles elementwise/norm)"
    # exact call line of the dominant op, from the live stack
    aten = name.split("::", 1)[-1]
    _, _, step = ctx.reference()
    sites = capture(ctx.session, step, {aten})
    for (file, line, qual), n in sites.get(aten, Counter()).most_common(3):
        r.findings.append(Finding("dominant_op", f"{name} called here ({n}x per step)", file, line, qual))
    return r
