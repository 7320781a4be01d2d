"""Amortization, computed not assumed (partitioning-the-stack, "How do you decide whether the
compile time is worth it?"):

    worth it  <=>  (t_eager - t_compiled) x N_runs  >  t_compile x N_compiles
    break-even runs = t_compile x N_compiles / (t_eager - t_compiled)

``N_compiles = shape buckets x process restarts without persisted caches x compiles per
bucket``; the compiles per process start (buckets x compiles per bucket) are *counted* from the
cold run: every compile Dynamo did across the shape sweep (the first, plus every recompilation
it recorded). ``t_compile`` is the measured cold compile seconds of one process start divided by
those compiles (the mean cost of one compile).
"""

from __future__ import annotations

import math
from typing import Any

#: The regimes of partitioning-the-stack with the calls one process start typically serves.
#: These orders of magnitude are stackpart's heuristic, not measurements: a development loop
#: re-runs a script of ~100 steps after each edit; a one-pass batch job makes ~10^4 calls; a
#: training run ~10^5 steps per start; a server ~10^8 calls per start (caches persisted).
REGIMES: tuple[tuple[str, float], ...] = (
    ("development", 1e2),
    ("one-pass batch", 1e4),
    ("training", 1e5),
    ("serving", 1e8),
)


def amortize(
    t_eager_s: float,
    t_variant_s: float,
    compile_s_per_start: float,
    compiles_per_start: int,
    shape_buckets: int,
    runs: int | None,
    restarts: int,
) -> dict[str, Any]:
    """Break-even runs of one variant, whether the declared deployment pays back, and which
    regimes would.

    Args:
        t_eager_s: eager step time (s), mean over the shapes of the per-shape medians.
        t_variant_s: the variant's step time (s), same statistic.
        compile_s_per_start: cold compile seconds of one process start, all shapes summed.
        compiles_per_start: compiles counted in one start (>= 1 when anything compiled).
        shape_buckets: shapes of the sweep whose first call compiled.
        runs: ``amortization.runs`` of the plan (N_runs), or None when the plan has none.
        restarts: ``amortization.restarts`` (process starts without persisted caches).

    Returns:
        a JSON-able dict: ``saving_s``, ``t_compile_s`` (mean per compile), ``n_compiles``,
        ``break_even_runs`` (``inf`` when not faster), ``amortized`` (None without ``runs``),
        ``pays_back_in`` (regime names), ``verdict`` (one sentence).
    """
    saving = t_eager_s - t_variant_s
    if compile_s_per_start <= 0 and compiles_per_start > 0:
        # Dynamo compiled, yet the cold first call took no longer than a steady one: the compile
        # cost was not measured (a cache hit, a clock problem); a break-even from 0 s would be a
        # verdict from no measurement
        return {
            "saving_s": saving,
            "t_compile_s": 0.0,
            "compile_measured": False,
            "compiles_per_start": compiles_per_start,
            "shape_buckets": shape_buckets,
            "restarts": restarts,
            "n_compiles": compiles_per_start * restarts,
            "break_even_runs": "unknown",
            "runs": runs,
            "amortized": None,
            "pays_back_in": [],
            "verdict": (f"compile cost not measured: {compiles_per_start} compile(s) counted, but the cold first call "
                        "took no longer than a steady call (0 s of compile); break-even unknown, not gated"),
        }
    per_start = max(1, compiles_per_start) if compile_s_per_start > 0 else 0
    n_compiles = per_start * restarts
    t_compile = compile_s_per_start / per_start if per_start else 0.0
    if n_compiles == 0:
        break_even = 0.0
    elif saving <= 0:
        break_even = math.inf
    else:
        break_even = t_compile * n_compiles / saving
    per_start_break_even = break_even / restarts if math.isfinite(break_even) else math.inf
    pays = [name for name, calls in REGIMES if per_start_break_even <= calls]
    # nothing compiled: no compile cost to pay back, whatever the step (the speed rule judges that)
    amortized = None if runs is None else (n_compiles == 0 or (runs >= break_even and saving > 0))
    if n_compiles == 0:
        verdict = "nothing compiled: no compile cost to pay back"
    elif saving <= 0:
        verdict = "never pays back: not faster than eager"
    elif not pays:
        verdict = f"pays back only after {break_even:,.0f} runs: more than any regime serves"
    else:
        verdict = f"pays back in {pays[0]} and longer regimes (break-even {break_even:,.0f} runs)"
    if runs is not None:
        verdict += (
            f"; declared {runs:,} runs over {restarts} restart(s): "
            + ("amortized" if amortized else "NOT amortized")
        )
    return {
        "saving_s": saving,
        "t_compile_s": t_compile,
        "compile_measured": True,
        "compiles_per_start": per_start,
        "shape_buckets": shape_buckets,
        "restarts": restarts,
        "n_compiles": n_compiles,
        "break_even_runs": break_even if math.isfinite(break_even) else "inf",
        "runs": runs,
        "amortized": amortized,
        "pays_back_in": pays,
        "verdict": verdict,
    }

