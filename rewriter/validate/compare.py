"""Compare outputs, gradients and losses of two runs as pytrees of tensors.

All tolerances live in :data:`TOLERANCES`, with their source. A leaf passes when it is
element-wise close (``|a - b| <= atol + rtol * |b|``, the rule of ``torch.testing.assert_close``)
or, for the low-precision dtypes only, when its relative RMSE is within ``rmse`` and no element is
further off than ``8 x`` the element-wise bound (compiled kernels reorder bf16/fp16 reductions, so a
handful of elements can cross the element-wise bound while the tensor as a whole agrees — the
RMSE rule of ``torch._dynamo.utils.same`` used by PyTorch's own compile accuracy checks). A
NaN or Inf where the reference has none never passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: dtype name -> (rtol, atol, rmse). Sources:
#: - float32: rtol/atol 1e-4 is ``torch._dynamo.utils.same``'s default ``tol`` (PyTorch's
#:   dynamo benchmark accuracy gate, benchmarks/dynamo/common.py), not assert_close's 1.3e-6,
#:   which compiled kernels (reordered reductions, fused FMAs) routinely miss.
#: - bfloat16: rtol 1.6e-2 is ``torch.testing.assert_close``'s bf16 default; atol 1e-2 and the
#:   RMSE bound 1e-2 are the bf16/amp tolerance of benchmarks/dynamo/common.py.
#: - float16: rtol 1e-3 is assert_close's fp16 default; atol and RMSE 1e-3 as the dynamo benchmarks.
#: - float64: assert_close's defaults.
TOLERANCES: dict[str, tuple[float, float, float]] = {
    "float64": (1e-7, 1e-7, 1e-7),
    "float32": (1e-4, 1e-4, 1e-4),
    "bfloat16": (1.6e-2, 1e-2, 1e-2),
    "float16": (1e-3, 1e-3, 1e-3),
}
LOW_PRECISION = frozenset({"bfloat16", "float16"})
#: How far past the element-wise bound one element may be under the RMSE rule.
OUTLIER_FACTOR = 8.0


@dataclass
class Mismatch:
    """One leaf that does not match: where (pytree path), and why."""

    path: str
    reason: str


@dataclass
class Comparison:
    """The result of comparing two pytrees.

    Attributes:
        leaves: number of tensor leaves compared.
        max_abs: the largest absolute difference over all floating leaves.
        max_rel: the largest relative difference (``|a-b| / max(|b|, atol)``).
        mismatches: every leaf that failed, with its reason.
    """

    leaves: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "leaves": self.leaves,
            "max_abs": _finite(self.max_abs),
            "max_rel": _finite(self.max_rel),
            "mismatches": [{"path": m.path, "reason": m.reason} for m in self.mismatches],
        }


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).replace("torch.", "")


def tolerance(dtype: Any) -> tuple[float, float, float]:
    """``(rtol, atol, rmse)`` for a floating ``torch.dtype`` (float32's for unknown ones)."""
    return TOLERANCES.get(dtype_name(dtype), TOLERANCES["float32"])


def _keystr(path: Any) -> str:
    from torch.utils import _pytree as pytree

    text = pytree.keystr(path) if hasattr(pytree, "keystr") else str(path)
    return text or "<output>"


def compare_trees(actual: Any, expected: Any) -> Comparison:
    """Compare ``actual`` with the reference ``expected`` leaf by leaf.

    Structure (pytree spec), then per tensor leaf: shape, dtype, NaN/Inf where the reference is
    finite, then values under :data:`TOLERANCES`. Non-tensor leaves must be equal. Tensors are
    compared in float64 on ``actual``'s device.
    """
    import torch
    from torch.utils import _pytree as pytree

    out = Comparison()
    a_leaves, a_spec = pytree.tree_flatten_with_path(actual)
    e_leaves, e_spec = pytree.tree_flatten_with_path(expected)
    if a_spec != e_spec:
        out.mismatches.append(
            Mismatch("<output>", f"output structure differs: got {a_spec}, expected {e_spec}")
        )
        return out
    for (path, a), (_, e) in zip(a_leaves, e_leaves):
        where = _keystr(path)
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or a != e:
                out.mismatches.append(Mismatch(where, f"got {a!r}, expected {e!r}"))
            continue
        out.leaves += 1
        reason = _compare_tensor(a, e, out)
        if reason:
            out.mismatches.append(Mismatch(where, reason))
    return out


def _compare_tensor(a: Any, e: Any, out: Comparison) -> str | None:
    import torch

    if not isinstance(a, torch.Tensor):
        return f"got {type(a).__name__}, expected a tensor"
    if tuple(a.shape) != tuple(e.shape):
        return f"shape {tuple(a.shape)} != expected {tuple(e.shape)}"
    if a.dtype != e.dtype:
        return f"dtype {dtype_name(a.dtype)} != expected {dtype_name(e.dtype)}"
    a = a.detach()
    e = e.detach().to(a.device)
    if not e.is_floating_point() and not e.is_complex():
        if not torch.equal(a, e):
            return f"{int((a != e).sum())} of {e.numel()} elements differ (integer tensor)"
        return None
    name = dtype_name(e.dtype)
    rtol, atol, rmse_tol = tolerance(e.dtype)
    a64, e64 = a.double(), e.double()
    bad_a = ~torch.isfinite(a64)
    bad_e = ~torch.isfinite(e64)
    new_bad = bad_a & ~bad_e
    if new_bad.any():
        nans = int(torch.isnan(a64[new_bad]).sum())
        return (
            f"{int(new_bad.sum())} non-finite values ({nans} NaN) where the original is finite"
        )
    if (bad_e & ~bad_a).any() or not torch.equal(a64[bad_e].nan_to_num(), e64[bad_e].nan_to_num()):
        return "non-finite values of the original are not reproduced"
    finite = ~bad_e
    if not finite.any():
        return None
    a64, e64 = a64[finite], e64[finite]
    diff = (a64 - e64).abs()
    bound = atol + rtol * e64.abs()
    max_abs = float(diff.max())
    max_rel = float((diff / e64.abs().clamp_min(atol)).max())
    out.max_abs = max(out.max_abs, max_abs)
    out.max_rel = max(out.max_rel, max_rel)
    over = diff > bound
    if not over.any():
        return None
    n_over = int(over.sum())
    ratio = float((diff / bound).max())
    if name in LOW_PRECISION:
        rel_rmse = float(diff.pow(2).mean().sqrt() / e64.pow(2).mean().sqrt().clamp_min(atol))
        if rel_rmse <= rmse_tol and ratio <= OUTLIER_FACTOR:
            return None
        return (
            f"{n_over} of {e64.numel()} elements outside rtol={rtol}, atol={atol} ({name}); "
            f"max abs diff {max_abs:.3g}, relative RMSE {rel_rmse:.3g} > {rmse_tol} or an element "
            f"{ratio:.1f}x past the bound"
        )
    return (
        f"{n_over} of {e64.numel()} elements outside rtol={rtol}, atol={atol} ({name}); "
        f"max abs diff {max_abs:.3g}"
    )
