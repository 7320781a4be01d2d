"""Amortization, computed not assumed (partitioning-the-stack, "How do you decide whether the
compile time is worth it?"):

    worth it  <=>  (t_eager - t_compiled) x N_runs  >  t_compile x N_compiles
    break-even runs = t_compile x N_compiles / (t_eager - t_compiled)

``N_compiles = shape buckets x process restarts without persisted caches x compiles per
bucket``; the compiles per process start (buckets x compiles per bucket) are *counted* from the
cold run: every compile Dynamo did across the shape sweep (the first, plus every recompilation
it recorded). ``t_compile`` is the measured cold compile seconds of one process start divided by
those compiles (the mean cost of one compile).

Where the reference compiles itself (the program as it runs, its own compile included), the rule
is the search's net (:func:`rewriter.diagnose.decide.extra_compile_s`): the compile to pay back is
what the variant compiles beyond the reference's own per start, ``(t_ref - t_variant) x N_runs >
(c_variant - c_ref) x restarts``, so an edit that compiles for less than the program (regional
compilation, the program's compile turned off) is not "never paying back" for a step no faster
than the program's.
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
    reference_compile_s_per_start: float = 0.0,
    reference: str = "eager",
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
        reference_compile_s_per_start: the reference's own cold compile seconds per start (the
            program as it runs where it compiles itself; 0 for compilation off).
        reference: what ``t_eager_s`` is, as the verdict names it.

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
    if reference_compile_s_per_start > 0:
        return _against_own_compile(saving, compile_s_per_start, compiles_per_start, shape_buckets, runs, restarts,
                                    reference_compile_s_per_start, reference)
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
        verdict = f"never pays back: not faster than {reference}"
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


def _against_own_compile(saving: float, compile_s: float, compiles_per_start: int, shape_buckets: int, runs: int | None,
                         restarts: int, own_s: float, reference: str) -> dict[str, Any]:
    """:func:`amortize` against a reference that compiles ``own_s`` seconds per start itself: the
    variant pays back what it compiles beyond that (``extra``, negative where it compiles for less)
    with what its step saves, ``saving x runs - extra x restarts > 0`` (the search's net). A
    variant that compiles for less and steps no slower pays back at once; one that compiles for less
    and steps slower pays back up to the runs where its slower step has spent the compile it saves."""
    extra = compile_s - own_s
    per_start = max(1, compiles_per_start) if compile_s > 0 else 0
    if extra > 0 and saving > 0:
        break_even: float | str = extra * restarts / saving
        verdict = f"pays back the {extra:.1f} s it compiles per start beyond {reference} after {break_even:,.0f} runs"
    elif extra > 0:
        break_even = math.inf
        verdict = f"never pays back: not faster than {reference}, and compiles {extra:.1f} s more per start"
    elif saving >= 0:
        break_even = 0.0
        verdict = f"pays back at once: no slower than {reference}, and compiles {-extra:.1f} s less per start"
    else:
        limit = -extra * restarts / -saving
        break_even = f"up to {limit:,.0f}"
        verdict = (f"pays back up to {limit:,.0f} runs: compiles {-extra:.1f} s less per start than {reference}, "
                   f"and its step is {-saving * 1e3:.3f} ms slower")
    net = None if runs is None else saving * runs - extra * restarts
    amortized = None if net is None else net > 0
    if runs is not None:
        verdict += (f"; declared {runs:,} runs over {restarts} restart(s): net {net:,.1f} s, "
                    + ("amortized" if amortized else "NOT amortized"))
    per_start_runs = (break_even / restarts) if isinstance(break_even, float) and math.isfinite(break_even) else None
    return {
        "saving_s": saving,
        "t_compile_s": compile_s / per_start if per_start else 0.0,
        "compile_measured": True,
        "compiles_per_start": per_start,
        "shape_buckets": shape_buckets,
        "restarts": restarts,
        "n_compiles": per_start * restarts,
        "reference_compile_s_per_start": own_s,
        "extra_compile_s_per_start": extra,
        "break_even_runs": break_even if not isinstance(break_even, float) or math.isfinite(break_even) else "inf",
        "runs": runs,
        "amortized": amortized,
        "pays_back_in": [name for name, calls in REGIMES if per_start_runs is not None and per_start_runs <= calls],
        "verdict": verdict,
    }
