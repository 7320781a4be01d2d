"""Interval arithmetic on half-open time intervals ``[start, end)`` in microseconds.

No library fits this small need without a heavy dependency (``portion`` or ``intervaltree`` add
a package for four functions), so these are plain sorted-list operations, O(n log n) in the
number of intervals. Every function takes any iterable of ``(start, end)`` pairs (empty or
reversed pairs are dropped) and returns a sorted list of disjoint, non-touching intervals.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge overlapping or touching intervals."""
    items = sorted((s, e) for s, e in intervals if e > s)
    out: list[Interval] = []
    for s, e in items:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The time covered by both ``a`` and ``b``."""
    ua, ub = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(ua) and j < len(ub):
        s = max(ua[i][0], ub[j][0])
        e = min(ua[i][1], ub[j][1])
        if e > s:
            out.append((s, e))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The time covered by ``a`` and not by ``b``."""
    ub = union(b)
    out: list[Interval] = []
    for s, e in union(a):
        cur = s
        for bs, be in ub:
            if be <= cur:
                continue
            if bs >= e:
                break
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    """The part of ``intervals`` inside ``window``."""
    return intersect(intervals, [window])


def length(intervals: Iterable[Interval]) -> float:
    """Total time covered (overlaps counted once)."""
    return sum(e - s for s, e in union(intervals))
