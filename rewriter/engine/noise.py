"""When two timed figures differ beyond the noise: the paired ratio interval of interleaved rounds
and the process-to-process noise of variants timed twice (docs/decisions.md, "A median ratio
interval, not a mean and standard error")."""

from __future__ import annotations

import math
import statistics
from typing import Any

#: z of a two-sided 95% normal interval (the paired log-ratio interval of :func:`ratio_interval`).
Z95 = 1.96
#: Variance of the smaller of two standard normal draws (the variance of a two-process figure,
#: in units of one process's variance): 1 - 1/pi.
MIN_OF_TWO_VARIANCE = 1 - 1 / math.pi


def ratio_interval(samples: list[dict[str, list[float]]], a: str, b: str) -> dict[str, float] | None:
    """The step-time ratio ``a / b`` with a 95% interval, from interleaved rounds.

    Rounds are paired (one call of each variant per round, :func:`.windows.interleave`), so per round
    ``log(t_a / t_b)`` cancels the drift both saw. Per shape the estimate is the median of those
    log ratios and its interval the distribution-free one of a median (order statistics
    ``n/2 -+ 1.96 sqrt(n)/2`` of the sorted values, the sign test's interval): a few rounds hit by
    a host hiccup move neither, where a mean and standard error can (docs/decisions.md, "A median
    ratio interval, not a mean and standard error"). Over
    shapes (each equally frequent, as ``step_ms`` is): the mean of the medians, with a standard
    error combined from each shape's interval (its half-width / 1.96). Returns ``{"ratio", "low",
    "high", "rounds"}``, or None without paired samples.
    """
    means, variances, rounds = [], [], 0
    for per_shape in samples:
        xs, ys = per_shape.get(a) or [], per_shape.get(b) or []
        logs = sorted(math.log(x / y) for x, y in zip(xs, ys) if x > 0 and y > 0)
        if not logs:
            continue
        n = len(logs)
        rounds += n
        means.append(statistics.median(logs))
        half = Z95 * math.sqrt(n) / 2
        lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
        variances.append(((logs[hi] - logs[lo]) / (2 * Z95)) ** 2 if n > 1 else 0.0)
    if not means:
        return None
    mean = statistics.fmean(means)
    se = math.sqrt(sum(variances)) / len(means)
    return {"ratio": math.exp(mean), "low": math.exp(mean - Z95 * se), "high": math.exp(mean + Z95 * se), "rounds": rounds}



def process_noise(timing: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Run-to-run noise from the variants timed in two processes: ``d = ln(m1 / m2)`` of the two
    medians per variant and shape is what a re-run would move that figure by. A robust scale
    (median absolute ``d``, so one slow process does not set it: it is filtered by
    :func:`.replicas.merge_replicates` already) gives sigma of one process's log-median,
    ``median|d| / (0.6745 x sqrt 2)``. A variant's figure is the faster of its two processes, whose
    variance is 0.682 sigma^2 for normal errors (the expected minimum of two, e.g. David & Nagaraja,
    *Order Statistics*, table of normal order-statistic moments), so two candidates differ beyond
    the noise when their log ratio exceeds ``1.96 x sqrt(2 x 0.682) x sigma`` (= ``2.40 x
    median|d|``), the ``share`` returned.

    ``contended_share``, where the variants were also timed with their host core contended
    (:attr:`.options.Options.contended`), is the band of those figures: the larger of the one
    computed the same way from both processes' contended medians and the one from the two
    contended windows' medians of each variant (``contended_windows_ms``, :data:`.windows.
    CONTENDED_WINDOWS`). The two processes of a window run under one busy loop and agree closely;
    the two windows apart in time differ as a re-run with the core contended would, which is the
    band a contended figure is compared within. Per shape each variant's ``d = ln(w1 / w2)`` is
    taken less the median ``d`` of every variant at that shape: a shift all of them saw (the busy
    loop's share of the core moving between windows) moves no ratio between two candidates, which
    is what the band judges. A figure pooled from two windows has half one window's variance, so
    two candidates' contended figures differ beyond the noise past ``1.96 x sigma`` (``sigma``
    from those ``|d|``'s median as above). Returns ``{"share",
    "median_abs_log", "pairs"[, "contended_share"[, "contended_window_share"]]}``, or None with
    fewer than 3 pairs."""
    ds = []
    for row in timing:
        for t in row["timing"].values():
            ms = (t or {}).get("processes_ms")
            if ms and ms[0] > 0 and ms[1] > 0:
                ds.append(abs(math.log(ms[0] / ms[1])))
    if len(ds) < 3:
        return None
    med = statistics.median(ds)
    sigma = med / (0.6745 * math.sqrt(2))
    out = {"share": Z95 * math.sqrt(2 * MIN_OF_TWO_VARIANCE) * sigma, "median_abs_log": med, "pairs": len(ds)}
    loaded = [abs(math.log(ms[0] / ms[1])) for row in timing for t in row["timing"].values()
              if (ms := (t or {}).get("contended_processes_ms")) and ms[0] > 0 and ms[1] > 0]
    if len(loaded) >= 3:  # the same band for the contended window's figures (Options.contended)
        lmed = statistics.median(loaded)
        out["contended_share"] = Z95 * math.sqrt(2 * MIN_OF_TWO_VARIANCE) * lmed / (0.6745 * math.sqrt(2))
    apart = []
    for row in timing:  # window to window, less the shift every variant saw (the busy loop's own state)
        shifts = [math.log(w[0] / w[1]) for t in row["timing"].values()
                  if (w := (t or {}).get("contended_windows_ms")) and len(w) >= 2 and w[0] > 0 and w[1] > 0]
        if len(shifts) >= 2:
            common = statistics.median(shifts)
            apart += [abs(x - common) for x in shifts]
    if len(apart) >= 3:  # what a re-run with the core contended moves one candidate's figure by against another's
        out["contended_window_share"] = Z95 * statistics.median(apart) / (0.6745 * math.sqrt(2))
        out["contended_share"] = max(out.get("contended_share", 0.0), out["contended_window_share"])
    return out
