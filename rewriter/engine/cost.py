"""validate's own cost: when the eager reference's run may overlap the plan's cold phase, and
where validate's wall time went against the compiles it measures (the target: "validate adds no more
than the compiles it measures plus 20%"; docs/decisions.md, "validate's own cost").
"""

from __future__ import annotations

import os
from typing import Any


def may_overlap(allowed: bool, device: str) -> bool:
    """Whether the reference's run may overlap the first compiled variant's cold phase: on a
    GPU (the reference's work is mostly device time) with at least 8 CPUs (it holds one core
    beside the compile and its workers), unless ``--no-overlap`` (``allowed`` False). Never on
    CPU, where the reference's run would compete for the cores the compile is timed on."""
    return allowed and device.startswith("cuda") and (os.cpu_count() or 1) >= 8


#: Free device memory needed to overlap the reference's run with the plan's cold phase, as a
#: multiple of the reference's allocated bytes once its weights are loaded: the plan's own copy
#: and its activations (~2x), the reference's float64 copy for a bf16/fp16 model (4x) and its
#: activations (~2x). A stackpart heuristic (review of the overlap: near a full device the two
#: processes together could run out of memory where either alone fits).
OVERLAP_MEMORY_FACTOR = 8


def room_to_overlap(saved: dict[str, Any]) -> str | None:
    """None when the device has room for the reference and the plan side by side; else why not."""
    allocated, free = saved.get("allocated"), saved.get("free")
    if allocated is None or free is None:
        return None
    if free < OVERLAP_MEMORY_FACTOR * allocated:
        return (f"{free / 2**30:.1f} GiB free on the device < {OVERLAP_MEMORY_FACTOR} x the "
                f"{allocated / 2**30:.1f} GiB the reference holds")
    return None


def breakdown(report: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Where validate's wall time went (seconds): the cold compiles it measures against the rest.

    ``materialize_s``: the rewrite and the two temp trees. ``reference_s``: from starting every
    child to the first compiled variant's turn: the eager reference's start, import, build and
    saved weights and inputs, and (unless it overlapped, ``reference_overlapped``) the rest of its
    cold phase: outputs saved, block share, the high-precision run (``high_precision_run_s``);
    the other children start and build meanwhile. ``waiting_for_builds_s``: then waiting for
    the last child to finish building. ``measured_compile_s``: first call minus steady call,
    summed over the compiled variants' shapes. ``cold_not_compile_s``: the rest of their cold
    phases (weights load, steady calls, waiting for an overlapped reference, comparisons, the
    fail_on_recompile pass). ``timing_s``: the interleaved timing. ``teardown_s``: the
    children's exit. ``other_s``: the remainder.
    """
    clock = report.pop("_clock", {})
    compiled = [v for v in results.values() if v.get("compile_s_per_start") is not None and v is not results.get("eager")]
    measured = sum(v["compile_s_per_start"] for v in compiled)
    cold = sum(v.get("child_wall_s") or 0.0 for v in compiled)
    hp = (results.get("eager") or {}).get("high_precision_run") or {}
    out = {
        "validate_wall_s": report["validate_wall_s"],
        "measured_compile_s": measured,
        "materialize_s": clock.get("materialize_s"),
        "reference_s": clock.get("reference_s"),
        "reference_overlapped": report.get("reference_overlapped", False),
        "high_precision_run_s": hp.get("seconds"),
        "waiting_for_builds_s": clock.get("waiting_for_builds_s"),
        "cold_not_compile_s": cold - measured,
        "timing_s": report.get("timing_wall_s", 0.0),
        "teardown_s": clock.get("teardown_s"),
    }
    known = sum(
        out[k] or 0.0 for k in ("materialize_s", "reference_s", "waiting_for_builds_s", "timing_s", "teardown_s")
    ) + cold
    out["other_s"] = report["validate_wall_s"] - known
    out["ratio"] = report["validate_wall_s"] / measured if measured else None
    return out
