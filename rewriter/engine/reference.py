"""What only the eager reference's child runs after its cold phase (:mod:`.child`): the repeated
blocks' share of the eager step (:func:`block_share`) and the high-precision run of the original
that low-precision outputs are judged against (:func:`high_precision_reference`), or, where none
can run, eager's own rounding noise (:func:`rounding_noise`; docs/design.md, "The search": the
numerics judge)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .steps import after_step, cpu, harness_call, saved_inputs, step_fn


def block_share(job: dict[str, Any], model: Any, ref: Path, training: bool) -> list[dict[str, Any]]:
    """Per shape, the share of the eager step spent inside the repeated blocks (the regions a
    naive regional compile covers); the rest (embeddings, masks, rotary tables, the head) stays
    eager under it. Forward hooks record CUDA events (or perf_counter on CPU) around each block;
    one warm step per shape. Forward only, also in training mode. The caller runs it with
    compilation off (``torch.compiler.set_stance("force_eager")``), also where the tree compiles
    itself: a hook inside a compiled frame would put its timer into the program's graph (a graph
    break; under ``fullgraph=True`` an error)."""
    import torch

    from ..harness import call_model
    from .variants import repeated_blocks

    blocks = [b for _, children in repeated_blocks(model) for b in children]
    if not blocks:
        return []
    cuda = job["harness"]["device"].startswith("cuda")
    marks: list[tuple[Any, Any]] = []

    def stamp() -> Any:
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    starts: list[Any] = []
    handles = []
    for block in blocks:
        handles.append(block.register_forward_pre_hook(lambda *_: starts.append(stamp())))
        handles.append(block.register_forward_hook(lambda *_: marks.append((starts.pop(), stamp()))))
    out = []
    try:
        for i, shape in enumerate(job["harness"]["shapes"]):
            inputs = saved_inputs(job, i, ref)
            with torch.no_grad():
                call_model(model, inputs, harness_call(job))  # warm
                marks.clear()
                begin = stamp()
                call_model(model, inputs, harness_call(job))
                end = stamp()
            if cuda:
                torch.cuda.synchronize()
                total = begin.elapsed_time(end) / 1e3
                inside = sum(a.elapsed_time(b) for a, b in marks) / 1e3
            else:
                total, inside = end - begin, sum(b - a for a, b in marks)
            out.append({"shape": shape, "step_s": total, "in_blocks_s": inside,
                        "share": inside / total if total > 0 else None, "block_calls": len(marks)})
    finally:
        for handle in handles:
            handle.remove()
    return out


#: Dtypes tried, in order, for the high-precision run of the original (float32 when float64 is
#: unsupported on the device or by an op the model calls).
HIGH_PRECISION = ("float64", "float32")


def _upcast(tree: Any, dtype: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(
        lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, tree
    )


def high_precision_reference(job: dict[str, Any], model: Any, ref: Path, training: bool) -> dict[str, Any]:
    """Run the original model once more per shape in float64 (float32 when float64 raises), from
    the same weights (a copy of ``model``) and the saved inputs (floating ones upcast), and save
    each shape's record (``output``; training: ``loss``, ``grads``, ``loss_after_step``; stored in
    float32) as ``ref/high_precision_{i}.pt``: the ``fp64_ref`` of :mod:`.compare`. Only the eager reference
    child calls this, after its own cold phase: one extra forward (training: forward, backward,
    SGD step, forward) per shape, no extra process.

    The discrete decisions (:mod:`.decisions`) of one more low-precision forward per shape are
    matched with the high-precision run's and saved beside the record (``decisions``). When
    neither dtype runs, the original runs once more in its own precision with a perturbed
    reduction order (:mod:`.rounding`) and that record is saved instead (``kind: "noise"``):
    eager's own rounding noise, the bound :mod:`.compare` then uses.

    Returns ``{"dtype", "seconds", "tried", "decisions"}`` (``dtype`` None when every dtype failed;
    ``tried`` holds why; ``decisions``: :func:`.decisions.match`'s counts summed over the shapes),
    with ``noise`` (``{"perturbed_products", "error"?}``) when the noise run stood in. The caller runs it with
    compilation off: a high-precision reference is an eager run."""
    import copy

    import torch

    from . import decisions

    started = time.perf_counter()
    tried: list[str] = []
    shapes = job["harness"]["shapes"]
    low_decisions: list[list[dict[str, Any]] | None] = []
    for i in range(len(shapes)):
        try:
            with decisions.record() as calls:
                torch.manual_seed(job["seed"])
                step_fn(model, saved_inputs(job, i, ref), training, harness_call(job))()
            low_decisions.append(calls)
        except Exception:  # noqa: BLE001 - a model that will not run under the recorder: no decisions judged
            low_decisions.append(None)
    for name in HIGH_PRECISION:
        dtype = getattr(torch, name)
        hp = None
        matched: list[dict[str, Any]] = []
        try:
            hp = copy.deepcopy(model).to(dtype)
            reference_sd = {k: v.detach().clone() for k, v in hp.state_dict().items()} if training else None
            for i, _shape in enumerate(shapes):
                inputs = _upcast(saved_inputs(job, i, ref), dtype)
                torch.manual_seed(job["seed"])
                with decisions.record() as calls:
                    out = step_fn(hp, inputs, training, harness_call(job))()
                record: dict[str, Any] = {"output": cpu(out[0] if training else out)}
                if training:
                    record["loss"] = cpu(out[1].detach())
                    record.update(after_step(hp, inputs, reference_sd, job["seed"], harness_call(job)))
                judged = decisions.match(low_decisions[i], calls) if low_decisions[i] is not None else None
                if judged is not None:
                    matched.append(judged)
                # stored as float32: its rounding (2**-24 relative) is 65,000x below bf16's
                # (2**-8) and it halves the bytes every comparing child reads
                torch.save({"dtype": name, "record": _upcast(record, torch.float32), "decisions": judged},
                           ref / f"high_precision_{i}.pt")
                del record, out
            return {"dtype": name, "seconds": time.perf_counter() - started, "tried": tried,
                    "decisions": _decision_totals(matched)}
        except torch.cuda.OutOfMemoryError as exc:
            tried.append(f"{name}: out of memory: {str(exc).splitlines()[0][:200]}")
        except Exception as exc:
            tried.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}")
        finally:
            del hp
            if job["harness"]["device"].startswith("cuda"):
                torch.cuda.empty_cache()
        for stale in ref.glob("high_precision_*.pt"):
            stale.unlink()
    noise = rounding_noise(job, model, ref, training, low_decisions)
    return {"dtype": None, "seconds": time.perf_counter() - started, "tried": tried,
            "decisions": noise.pop("decisions"), "noise": noise}


def rounding_noise(job: dict[str, Any], model: Any, ref: Path, training: bool,
                   low_decisions: list[list[dict[str, Any]] | None]) -> dict[str, Any]:
    """Eager's own rounding noise, where no high-precision run is possible: the original runs once
    more per shape in its low precision under :func:`.rounding.perturbed_reduction_order`; each
    shape's record is saved as ``ref/high_precision_{i}.pt`` with ``kind: "noise"`` (and the
    decisions matched against eager's). Returns ``{"perturbed_products", "decisions"}``, with
    ``error`` (and nothing saved) when that run raised."""
    import torch

    from . import decisions
    from .rounding import perturbed_reduction_order

    matched: list[dict[str, Any]] = []
    products = 0
    reference_sd = {k: v.detach().clone() for k, v in model.state_dict().items()} if training else None
    try:
        for i, _shape in enumerate(job["harness"]["shapes"]):
            inputs = saved_inputs(job, i, ref)
            torch.manual_seed(job["seed"])
            with perturbed_reduction_order() as count, decisions.record() as calls:
                out = step_fn(model, inputs, training, harness_call(job))()
                record: dict[str, Any] = {"output": cpu(out[0] if training else out)}
                if training:
                    record["loss"] = cpu(out[1].detach())
                    record.update(after_step(model, inputs, reference_sd, job["seed"], harness_call(job)))
            products += count["perturbed"]
            judged = decisions.match(low_decisions[i], calls) if low_decisions[i] is not None else None
            if judged is not None:
                matched.append(judged)
            torch.save({"dtype": None, "kind": "noise", "record": record, "decisions": judged},
                       ref / f"high_precision_{i}.pt")
            del record, out
    except Exception as exc:  # noqa: BLE001 - said in the report; the fixed-RMSE fallback judges then
        for stale in ref.glob("high_precision_*.pt"):
            stale.unlink()
        return {"perturbed_products": products, "decisions": None,
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"}
    return {"perturbed_products": products, "decisions": _decision_totals(matched)}


def _decision_totals(matched: list[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`.decisions.match`'s counts summed over the shapes (None when none was matched)."""
    if not matched:
        return None
    return {k: sum(m[k] for m in matched) for k in ("calls", "rows", "flipped", "near_ties")} | {
        "comparable": all(m["comparable"] for m in matched)}
