"""A variant's cold phase read into its report row: what compiled, Dynamo's counters, compile
seconds per shape, the reference's high-precision run, and the problems that keep a judged
variant from being timed (wrong numbers, silent fallbacks to eager, recompiles after warm-up)."""

from __future__ import annotations

from typing import Any

from .options import Variant

#: What a shape entry says of its shape warmer (:func:`.warmers.credit`), where it had one.
WARMER_KEYS = ("compiled_by", "compile_s_here", "waited_for_warmer_s", "warmer")


def compiles_counted(payload: dict[str, Any]) -> int:
    """Compiles of one cold process start, as Dynamo counted them: the graphs it captured over
    the shape sweep (the per-shape ``new_graphs``, deltas of ``counters["stats"]
    ["unique_graphs"]``, so the count agrees with the per-shape figures the report prints: 7 + 1
    graphs are 8 compiles, not the 2 shapes that compiled), at least one per
    recompilation of the first code object plus its first compile, and at least one per shape
    that compiled. 0 when nothing compiled."""
    compile_ = payload.get("compile") or {}
    shapes = payload.get("shapes", [])
    graphs = sum(int(e.get("new_graphs") or 0) for e in shapes) or int(compile_.get("unique_graphs") or 0)
    if not graphs:
        return 0
    buckets = sum(1 for e in shapes if e.get("new_graphs") or e.get("new_recompiles"))
    return max(graphs, 1 + int(compile_.get("recompiles") or 0), buckets)


def cold_summary(payload: dict[str, Any]) -> dict[str, Any]:
    """The report row of one child's cold phase: what was compiled, Dynamo's counters, the
    first-call and compile seconds per shape, ``compile_s_per_start`` (the shapes that compiled,
    summed), ``shape_buckets`` (how many shapes compiled) and ``runtime_compiles`` (which frames
    and modules compiled: :func:`.child.runtime_compiles`)."""
    shapes = payload.get("shapes", [])
    out: dict[str, Any] = {
        "compiled": payload.get("info", {}).get("compiled"),
        # the regional baseline's block count (rewriter.engine.variants.prepare)
        **({"blocks": payload["info"]["blocks"]} if "blocks" in payload.get("info", {}) else {}),
        **({"rng": payload["info"]["rng"]} if payload.get("info", {}).get("rng") else {}),
        "compile": payload.get("compile"),
        "fail_on_recompile": payload.get("fail_on_recompile"),
        "per_shape_cold": [
            {k: e[k] for k in ("shape", "first_call_s", "steady_s", "compile_s", "new_graphs", "new_recompiles",
                               *WARMER_KEYS) if k in e}
            for e in shapes
        ],
    }
    judged = [{"shape": e["shape"], "token_agreement": e["compare"]["output"]["token_agreement"],
               "ids_equal": e["compare"]["output"]["ids_equal"]}
              for e in shapes if "judged_by" in e.get("compare", {}).get("output", {})]
    if judged:
        out["generated_tokens"] = {"judged_by": "teacher-forced logits on the reference's tokens", "per_shape": judged}
    if shapes:
        out["cold_first_call_s"] = shapes[0]["first_call_s"]
        compiled = [e for e in shapes if e["new_graphs"] or e["new_recompiles"]]
        out["compile_s_per_start"] = sum(e["compile_s"] for e in compiled)
        out["shape_buckets"] = len(compiled)
    if payload.get("block_share"):
        out["block_share"] = payload["block_share"]
    if payload.get("high_precision"):
        out["high_precision_run"] = payload["high_precision"]
    worst = _worst_high_precision(shapes)
    if worst:
        out["numerics_vs_high_precision"] = worst
    if "phases_s" in payload:
        out["phases_s"] = payload["phases_s"]
    if "max_memory_allocated_bytes" in payload:
        out["max_memory_allocated_bytes"] = payload["max_memory_allocated_bytes"]
    if payload.get("runtime_compiles"):
        # which code compiled in the cold phase (engine.child.runtime_compiles)
        out["runtime_compiles"] = payload["runtime_compiles"]
    return out


def reference_notes(hp_run: dict[str, Any]) -> list[str]:
    """What the eager reference's high-precision run (:func:`.reference.high_precision_reference`)
    says: which dtype it ran in and why another did not, or, when none ran, why and what judged
    the low-precision outputs instead; and how many discrete decisions flipped or were near ties."""
    notes = []
    noise = hp_run.get("noise") or {}
    if hp_run["dtype"] is None:
        why = "; ".join(hp_run["tried"])
        if noise and not noise.get("error"):
            notes.append(
                f"no high-precision reference: the original failed in float64 and float32 ({why}); low-precision "
                "outputs judged against eager's own rounding noise: the original run again with the reduction "
                f"order of its {noise['perturbed_products']} matrix product(s) perturbed (split-K, rounded halves); "
                "a leaf passes when rmse(variant, eager) <= multiplier x rmse(perturbed, eager) + tol/10"
            )
        else:
            extra = f"; the rounding-noise run failed too ({noise['error']})" if noise.get("error") else ""
            notes.append(
                f"no high-precision reference: the original failed in float64 and float32 ({why}){extra}; "
                "low-precision outputs judged by the relative-RMSE fallback"
            )
    elif hp_run["tried"]:
        notes.append(f"high-precision reference ran in {hp_run['dtype']} ({'; '.join(hp_run['tried'])})")
    dec = hp_run.get("decisions")
    if dec and dec.get("rows"):
        against = hp_run["dtype"] or "perturbed eager"
        if dec.get("comparable"):
            notes.append(
                f"discrete decisions (top-k routing, argmax): {dec['flipped']} of {dec['rows']} rows chose otherwise in "
                f"eager than in the {against} run, {dec['near_ties']} near ties; rows those can move are judged by effect"
            )
        else:
            notes.append(f"discrete decisions (top-k routing, argmax): the {against} run dispatched other decision ops "
                         "than eager; none judged by effect")
    return notes


def _worst_high_precision(shapes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over every shape and quantity, the leaf closest to its bound under the high-precision
    rule (see :mod:`.compare`), with the shape and quantity it came from."""
    worst = None
    for entry in shapes:
        for what, comp in entry.get("compare", {}).items():
            hp = comp.get("high_precision")
            if not hp or not isinstance(hp.get("bound"), float) or not isinstance(hp.get("rmse"), float):
                continue
            ratio = hp["rmse"] / hp["bound"] if hp["bound"] > 0 else float("inf")
            if worst is None or ratio > worst["ratio"]:
                worst = dict(hp, shape=entry["shape"], quantity=what, ratio=ratio)
    return worst


def stderr_hint(res: Any) -> list[str]:
    """The last three lines of a failed child's traceback or stderr, as one hint line (none when empty)."""
    tb = res.error.get("traceback") if res.error else None
    tail = (tb or res.stderr_tail or "").strip().splitlines()[-3:]
    return ["child output tail: " + " | ".join(t.strip() for t in tail)] if tail else []


def judge(row: dict[str, Any], v: Variant, payload: dict[str, Any], numerics_failures: Any) -> None:
    """A judged variant's problems from its cold phase: wrong numbers, silent fallbacks to eager,
    compiled code never called (Dynamo's ``counters["frames"]["total"]`` 0), recompiles after
    warm-up (each a sentence in ``row["problems"]``)."""
    if not v.judged:
        return
    fails = numerics_failures(payload)
    row["problems"].extend(fails)
    row["numerics"] = "FAIL" if fails else "ok"
    compile_ = payload.get("compile", {})
    if v.compiles and not compile_.get("unique_graphs") and compile_.get("frames_total") == 0:
        # Dynamo was asked to convert no frame: nothing the plan compiles ran, nothing fell back
        row["problems"].append("never called: the plan asks for torch.compile but Dynamo captured no graph and was "
                               "asked to convert no frame (frames.total 0): the code it compiles never ran in the steps")
    elif v.compiles and not compile_.get("unique_graphs"):
        row["problems"].append("silent fallback to eager: the plan asks for torch.compile but Dynamo captured no graph")
    for hit in compile_.get("recompile_limit_hits", []):
        row["problems"].append(f"silent fallback to eager: a plan region hit the recompile limit: {hit}")
    stance = payload.get("fail_on_recompile", {})
    if stance.get("ok") is False:
        row["problems"].append(f"recompiles after warm-up (fail_on_recompile): {stance.get('error', '')}")
    elif not stance.get("supported"):
        row.setdefault("notes", []).append("torch.compiler.set_stance is missing in this torch: fail_on_recompile check skipped")
