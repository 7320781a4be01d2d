"""Rung 1, batch scaling: step time at B, 2B and 4B; the fixed-overhead share of the step.

Each point is the minimum step time over interleaved repeated runs (the least-disturbed figure
on a shared machine). A least-squares line ``t(b) = a + c*b`` through the three points gives the fixed cost ``a``
(launches, Python, framework overhead that does not grow with the batch); its share of ``t(B)``
is the launch-bound measure. A point whose median is :data:`NOISY` times its minimum flags the
verdict as noisy. Threshold: a fixed share >= 15% is launch-bound, 3-15% moderately
so, < 3% not (TF-profiler's launch-bound bands, 3% / 15%). The cheap test itself is
partitioning-the-stack's first rung: "raise the batch size and see if step time moves".
"""

from __future__ import annotations

from ..context import Context
from ..rung import Rung, RungResult

BATCH_KEYS = ("batch", "batch_size", "bs", "b", "n")
HIGH, MODERATE = 0.15, 0.03
#: A point whose median step is this many times its minimum was timed on a disturbed machine: the
#: verdict is flagged as noisy. A chosen margin: steady runs repeat within ~1-2% on a GPU host;
#: a newcomer's run on a shared 2-core VM at load 2.4 saw the same step at 5 ms and 272 ms.
NOISY = 1.5


def batch_key(shape: dict[str, int]) -> str | None:
    """The shape key that names the batch size, or None."""
    for key in BATCH_KEYS:
        if key in shape:
            return key
    return None


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ``points`` [(batch, ms)]."""
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(t for _, t in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    slope = sum((b - mx) * (t - my) for b, t in points) / sxx if sxx else 0.0
    return my - slope * mx, slope


def launch_bound(ctx: Context) -> bool:
    """This rung's verdict for the planner and the search: the step is launch-bound (its measured
    fixed-overhead share >= :data:`HIGH`); False when the rung did not run ok."""
    return ctx.measured("batch_scaling").get("fixed_share", 0) >= HIGH


def run(ctx: Context) -> RungResult:
    r = RungResult("batch_scaling", "Launch-bound? Step time at B, 2B, 4B")
    r.threshold = "fixed-overhead share >= 15% launch-bound, 3-15% moderate (TF-profiler launch-bound bands)"
    shape = dict(ctx.session.spec.shapes[0])
    key = batch_key(shape)
    if key is None:
        return r.skip(f"no batch key in harness.shapes[0] (expected one of {', '.join(BATCH_KEYS)})")
    base = shape[key]
    steps = []
    for factor in (1, 2, 4):
        scaled = dict(shape, **{key: base * factor})
        model, inputs = ctx.session.build(scaled)
        steps.append(ctx.session.step_fn(model, inputs))
        # one call on its own first: a model that fails at a scaled batch is named with the shape
        # it ran, which the user did not declare (a newcomer read 128x100 as a bug of ours)
        ctx.session.run(steps[-1], f"{ctx.session.forward_name()} at {scaled}" + (
            "" if factor == 1 else f" ({factor}x {key} of the reference shape {shape}, batch scaling)"))
    timed = ctx.session.time_many(steps)
    points = [(base * f, t["min_ms"]) for f, t in zip((1, 2, 4), timed)]
    spreads = [t["median_ms"] / t["min_ms"] for t in timed if t["min_ms"] > 0]
    a, c = fit(points)
    t1 = points[0][1]
    share = min(1.0, max(0.0, a / t1)) if t1 > 0 else 0.0
    r.measurement = {
        "batch_key": key,
        "step_ms": {str(b): round(t, 4) for b, t in points},
        "ratio_2x": round(points[1][1] / t1, 3) if t1 else None,
        "ratio_4x": round(points[2][1] / t1, 3) if t1 else None,
        "fixed_ms": round(max(0.0, a), 4),
        "fixed_share": round(share, 3),
        "median_over_min": round(max(spreads), 2) if spreads else None,
    }
    if share >= HIGH:
        r.verdict, r.implies = f"launch-bound: {share:.0%} of the step is fixed overhead", "compile; CUDA graphs (reduce-overhead) where shapes are stable"
    elif share >= MODERATE:
        r.verdict, r.implies = f"moderately launch-bound: {share:.0%} fixed overhead", "compile"
    else:
        r.verdict = f"throughput-bound: {share:.0%} fixed overhead (time grows with batch)"
    spread = r.measurement["median_over_min"]
    if spread is not None and spread >= NOISY:
        r.verdict += f"; timing noisy (a median step {spread:.1f}x its fastest): rerun on a quiet machine before trusting it"
    return r


RUNG = Rung(name="batch_scaling", order=10, run=run, quiet=True)
