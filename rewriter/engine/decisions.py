"""Discrete decisions inside a model (MoE top-k routing, argmax), recorded and matched between two
eager runs of the same weights.

A bf16 model picks its experts with ``topk`` over router logits that carry bf16 rounding noise;
where two experts' logits are within that noise, eager bf16 and a float32 run of the same weights
route the token differently, and so may a correct compile. Such a flip moves the token's rows of
every later output far from the reference (measured on a 4-layer bf16 Mixtral, CPU: the flipped
token's cache rows 15-23x the median row error; every other row at rounding noise), a change that
no RMSE rule can tell from wrong math on a small tensor. Generated tokens are judged by the logits
that chose them (:mod:`.generation`); the decisions inside the model cannot be forced in compiled
code, so they are judged by their effect: :func:`record` notes every decision of an eager run
(which indices each row chose and by what margin over the runner-up) under a
``TorchDispatchMode``, :func:`match` counts the *near ties* between the low-precision run and
the reference run (rows that chose differently, or whose reference margin is within 3x of the
margin's own drift between the runs), and :mod:`.compare` lets a leaf's outlier rows pass up to
the rows those near ties can move, when its every other row meets the high-precision rule.

Only ops whose input is floating and whose output is an index choice are recorded: ``topk``,
``argmax``/``argmin``, ``max.dim``/``min.dim`` (``sort`` of a whole row is an ordering, not a
choice; MoE code sorts integer expert ids, which carry no rounding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: A reference row is a near tie when its margin is below this many times the margin's drift
#: between the two runs (stackpart heuristic: the drift measured on one run pair is one sample of
#: the rounding noise; 3 is the multiplier ``torch._dynamo.utils.same`` gives low precision).
NEAR_TIE_FACTOR = 3.0
#: Input elements above which a decision's rows are not recorded (an argmax over a large vocab on
#: every position: its margins would be a copy of the logits; counted as not recorded).
MAX_ELEMENTS = 1 << 24


def _rows(x: Any, dim: int | None) -> Any:
    """``x`` as ``(rows, choices)`` float64 on its device, the choice dim last."""
    if dim is None:
        return x.reshape(1, -1).double()
    return x.movedim(dim, -1).reshape(-1, x.shape[dim] if x.dim() else 1).double()


def _decision(x: Any, dim: int | None, k: int, largest: bool) -> dict[str, Any] | None:
    """The chosen index set and margin of every row of ``x`` (``k`` chosen per row, the largest
    ones unless ``largest`` is False); None for an empty or too-large input."""
    import torch

    if x.numel() == 0 or x.numel() > MAX_ELEMENTS:
        return None
    rows = _rows(x.detach(), dim)
    if not largest:
        rows = -rows
    n = rows.shape[-1]
    top = torch.topk(rows, min(k + 1, n), dim=-1)
    chosen = top.indices[:, :k].sort(dim=-1).values
    if n > k:
        margin = top.values[:, k - 1] - top.values[:, k]
    else:
        margin = torch.full((rows.shape[0],), float("inf"), dtype=torch.float64, device=rows.device)
    return {"chosen": chosen.cpu(), "margin": margin.cpu()}


def _spec(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, int | None, int, bool] | None:
    """``(name, dim, k, largest)`` for a decision op, None for any other."""
    import torch

    aten = torch.ops.aten
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return None
    if func is aten.topk.default:
        k = args[1]
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        return "topk", dim, int(k), bool(largest)
    if func in (aten.argmax.default, aten.argmin.default):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        return func.__name__.split(".")[0], dim, 1, func is aten.argmax.default
    if func in (aten.max.dim, aten.min.dim):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        return func.__name__.split(".")[0], dim, 1, func is aten.max.dim
    return None


@contextlib.contextmanager
def record() -> Iterator[list[dict[str, Any]]]:
    """Within the block, note every decision op an eager run dispatches, in order:
    ``{"op", "rows", "chosen" (rows, k) int64, "margin" (rows,) float64}`` (host tensors), or
    ``{"op", "rows", "skipped": True}`` for an input of more than :data:`MAX_ELEMENTS`. Eager code
    only (a compiled region's decisions are inside its kernels)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[dict[str, Any]] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            spec = _spec(func, args, kwargs)
            if spec is not None:
                name, dim, k, largest = spec
                d = _decision(args[0], dim, k, largest)
                x = args[0]
                rows = 1 if dim is None else max(1, x.numel() // max(1, x.shape[dim] if x.dim() else 1))
                calls.append({"op": name, "rows": rows, **(d if d is not None else {"skipped": True})})
            return func(*args, **kwargs)

    with Recorder():
        yield calls


def match(low: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
    """Match the decisions of a low-precision run (``low``) with the reference run's (``ref``),
    call by call in dispatch order.

    Returns ``{"calls", "rows", "flipped", "near_ties", "per_call": [{"op", "rows", "flipped",
    "near_ties"}], "comparable"}``: ``flipped`` rows chose another index set; ``near_ties`` rows
    flipped or have a reference margin below :data:`NEAR_TIE_FACTOR` x the margin's drift between
    the runs. ``comparable`` is False (and every count 0) when the two runs dispatched different
    decision ops (code that branches on dtype): nothing is then allowed on their account.
    """
    ops_low = [(c["op"], c["rows"]) for c in low]
    ops_ref = [(c["op"], c["rows"]) for c in ref]
    out: dict[str, Any] = {"calls": len(ref), "rows": 0, "flipped": 0, "near_ties": 0, "per_call": [],
                           "comparable": ops_low == ops_ref}
    if not out["comparable"]:
        return out
    for a, r in zip(low, ref):
        row = {"op": r["op"], "rows": r["rows"], "flipped": 0, "near_ties": 0}
        if "chosen" in a and "chosen" in r and a["chosen"].shape == r["chosen"].shape:
            flipped = (a["chosen"] != r["chosen"]).any(dim=-1)
            drift = (a["margin"] - r["margin"]).abs().nan_to_num(posinf=0.0)
            near = flipped | (r["margin"] < NEAR_TIE_FACTOR * drift)
            row.update(flipped=int(flipped.sum()), near_ties=int(near.sum()))
        out["rows"] += r["rows"]
        out["flipped"] += row["flipped"]
        out["near_ties"] += row["near_ties"]
        out["per_call"].append(row)
    return out


def rows_moved(decisions: dict[str, Any] | None, leaf_rows: int) -> int:
    """How many rows of an output with ``leaf_rows`` rows (its last dim the row) the near ties in
    ``decisions`` (:func:`match`) can move: per decision call, its near ties times the output's
    rows per decision row (a cache layer of ``(batch, heads, seq, dim)`` has ``heads`` rows per
    token a router decides), at least one each; summed over the calls (every layer's router may
    move the same token's rows of a later output, so this is an upper bound), and at most half the
    output's rows: a change that moves most of an output is not told from wrong math by its
    effect (a near tie in one argmax over a whole tensor would otherwise excuse every row)."""
    if not decisions or not decisions.get("comparable"):
        return 0
    total = 0
    for call in decisions.get("per_call", []):
        if call["near_ties"]:
            total += call["near_ties"] * max(1, leaf_rows // max(1, call["rows"]))
    return min(total, leaf_rows // 2)
