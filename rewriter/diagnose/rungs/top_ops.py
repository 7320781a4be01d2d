"""Rung 4: the top-10 operators by self-device time (self-CPU without CUDA), dominant op flagged.

Kernels are grouped by the aten operator that launched them (the profiler's correlation link);
when the link is missing, well-known library kernels are mapped to their op by name
(``mbtopk::gatherTopK`` -> ``aten::topk``, see :data:`KERNEL_OPS`), else the kernel name is the
group. The share is of the summed self-device (or self-CPU) time of the step.

Threshold: one non-GEMM op >= 10% of the step is a hand-written kernel (partitioning-the-stack,
"If one non-GEMM op is 10%+ of the step, that is a hand-written kernel"). The same text says "Do
not write kernels for ordinary elementwise fusion": only *algorithmic* ops count (sort, top-k,
scans, softmax, histograms/unique and custom ops, :func:`algorithmic`). An elementwise, norm or
plain-reduction op above 10% is reported as fusible traffic that compile handles, not as a
dominant op. Softmax counts as algorithmic whatever its row length (the profile records no input
shapes; a short-row softmax rarely reaches 10% of a step).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from ..callsites import MEASURED_HOW, capture
from ..classify import classify_cpu_op, classify_kernel
from ..context import Context
from ..rung import Finding, Rung, RungResult

DOMINANT = 0.10
#: aten ops (name after ``aten::``, overload dropped) that are algorithmic, not fusible traffic.
ALGORITHMIC = frozenset({
    "topk", "sort", "argsort", "msort", "kthvalue", "median", "nanmedian", "mode", "cumsum",
    "cumprod", "cummax", "cummin", "logcumsumexp", "softmax", "_softmax", "log_softmax",
    "_log_softmax", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim",
    "searchsorted", "bucketize", "bincount", "histc", "histogram", "multinomial", "nonzero",
})
#: (kernel-name pattern, aten op) for library kernels whose launching op the profiler did not link.
KERNEL_OPS = [
    (re.compile(r"topk|TopK", re.I), "aten::topk"),
    (re.compile(r"radix_?sort|segmented_?sort|bitonic|sort", re.I), "aten::sort"),
    (re.compile(r"softmax", re.I), "aten::_softmax"),
    (re.compile(r"scan|cumsum", re.I), "aten::cumsum"),
    (re.compile(r"unique", re.I), "aten::unique"),
]
SHORT = 72


def op_of_kernel(name: str) -> str | None:
    """The aten op a library kernel belongs to by its name (``mbtopk::gatherTopK`` ->
    ``aten::topk``); None for other kernels (Inductor's ``triton_*`` never map)."""
    if name.startswith("triton_"):
        return None
    for pattern, op in KERNEL_OPS:
        if pattern.search(name):
            return op
    return None


def algorithmic(op: str) -> bool:
    """True for sort/top-k/scan/softmax/histogram ops and custom ops (a namespace other than
    ``aten``/``c10d``/``prim``); False for GEMM, attention, elementwise, norm, plain reductions,
    copies and kernel names the profiler did not link to an op."""
    ns, sep, rest = op.partition("::")
    if not sep or " " in ns or "<" in ns or "(" in ns:
        return False
    if ns == "aten":
        return rest.split(".", 1)[0] in ALGORITHMIC
    return ns not in ("c10d", "prim", "prims", "profiler", "cuda", "void")


def short_name(name: str, limit: int = SHORT) -> str:
    """A kernel or op name for a table cell: template arguments and parameter lists of demangled
    C++ names dropped (``void at::native::f<...>(int, ...)`` -> ``at::native::f<…>``), cut to
    ``limit`` characters. report.json keeps the full name."""
    out = name[5:] if name.startswith("void ") else name
    depth, buf = 0, []
    for ch in out:
        if ch in "<(":
            if depth == 0:
                buf.append("<…>" if ch == "<" else "(…)")
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            buf.append(ch)
    text = "".join(buf).replace("(…)", "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rows(ctx: Context) -> tuple[list[dict], str]:
    """Top rows ``{name, op, category, ms, share, kernels, function}``, largest first."""
    data = ctx.evidence.profile
    groups: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "kernels": set(), "category": "other", "functions": defaultdict(float)})
    if ctx.session.cuda and data.kernels:
        basis = "self-device"
        for k in data.kernels:
            parent = k.parent_op if k.parent_op and not k.name.startswith("triton_") else op_of_kernel(k.name)
            key = parent or k.name
            g = groups[key]
            g["us"] += k.dur_us
            g["kernels"].add(k.name)
            g["category"] = classify_kernel(k.name, k.kind, parent)
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
    r = RungResult("top_ops", "Top-10 ops; one algorithmic non-GEMM op >= 10%?")
    r.threshold = "one algorithmic non-GEMM op (sort/top-k/scan/softmax/custom) >= 10% of the step -> hand-written kernel; elementwise/norm -> compile (partitioning-the-stack)"
    top, basis = rows(ctx)
    dominant = next((row for row in top if algorithmic(row["op"]) and row["share"] >= DOMINANT), None)
    fusible = next((row for row in top if row["category"] in ("elementwise", "norm", "reduction") and not algorithmic(row["op"]) and row["share"] >= DOMINANT), None)
    r.measurement = {"basis": basis, "top": top, "dominant": dominant, "largest_fusible": fusible}
    notes = []
    if fusible is not None:
        notes.append(
            f"{short_name(fusible['op'])} ({fusible['category']}) is {fusible['share']:.0%} of the step: fusible, compile handles it "
            "(not a kernel case: 'Do not write kernels for ordinary elementwise fusion')"
        )
    if dominant is None:
        r.verdict = "; ".join([f"no algorithmic non-GEMM op >= {DOMINANT:.0%} of the step ({basis})", *notes])
        if fusible is not None:
            r.implies = "compile (fusible: the compiler handles elementwise/norm)"
        return r
    name = dominant["op"]
    r.verdict = "; ".join([f"dominant algorithmic op: {short_name(name)} {dominant['share']:.0%} of the step ({basis}, {dominant['category']})", *notes])
    r.implies = f"kernel for {name}"
    # exact call line of the dominant op, from the live stack
    aten = name.split("::", 1)[-1]
    _, _, step = ctx.reference()
    sites = capture(ctx.session, step, {aten})
    r.measurement["call_sites_from"] = MEASURED_HOW
    for (file, line, qual), n in sites.get(aten, Counter()).most_common(3):
        r.findings.append(Finding("dominant_op", f"{name} called here ({n}x per step)", file, line, qual))
    return r


RUNG = Rung(name="top_ops", order=50, run=run, needs=frozenset({"profile"}))
