"""Compare outputs, gradients and losses of two runs as pytrees of tensors.

All tolerances live in :data:`TOLERANCES` and :data:`FP64_MULTIPLIER`, with their source. A leaf
passes when it is element-wise close to the eager reference (``|a - b| <= atol + rtol * |b|``,
the rule of ``torch.testing.assert_close``). For the low-precision dtypes (bf16/fp16) a leaf that
is not also passes by the accuracy rule of PyTorch's own compile gate,
``torch._dynamo.utils.same(ref, res, fp64_ref=...)`` (its ``fp64_ref`` branch): the original model
is run once more in float64 from the same weights and inputs (float32 where float64 fails on the
device), and the rewritten result passes when

    rmse(rewritten, ref64) <= multiplier x rmse(eager, ref64) + tol / 10

i.e. it is no further from the high-precision answer than eager itself is, up to the multiplier.
A correct compile of a bf16 model drifts from eager by bf16 reduction-order noise (on the H200
run of a 16-layer Llama, relative RMSE 0.013 against eager: benchmarks/results/h200-run1), which
this rule accepts, while a rewrite that changes the math lands orders of magnitude further from
the float64 answer than eager does. Without a high-precision reference (none was computed) the
low-precision leaves fall back to a relative-RMSE bound (``rmse`` of :data:`TOLERANCES`) with no
element more than :data:`OUTLIER_FACTOR` x past the element-wise bound. A NaN or Inf where the
reference has none never passes.
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
#: How far past the element-wise bound one element may be under the fallback RMSE rule (used only
#: when no high-precision reference exists; stackpart heuristic).
OUTLIER_FACTOR = 8.0
#: dtype name -> multiplier of the high-precision rule. Source: ``get_multiplier()`` inside
#: ``torch._dynamo.utils.same`` (torch 2.6 to 2.13): 3.0 for float16/bfloat16 ("we use multiplier
#: of 3 instead of 2 to avoid these false alarms" under AMP), 2.0 otherwise; the additive slack
#: is ``tol / 10`` with ``tol`` the ``rmse`` entry of :data:`TOLERANCES` (1e-2 for bf16 is the
#: bf16/amp tolerance of benchmarks/dynamo/common.py).
FP64_MULTIPLIER: dict[str, float] = {"bfloat16": 3.0, "float16": 3.0}


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
        high_precision: for low-precision leaves compared against a float64/float32 run of the
            original, the leaf closest to its bound (largest ``rmse / bound``) as
            ``{"path", "ref_dtype", "eager_rmse", "rmse", "multiplier", "bound", "ok", "leaves"}``
            (RMSE in the output's units, absolute, as ``torch._dynamo.utils.rmse``); None when
            no such reference was used.
    """

    leaves: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: list[Mismatch] = field(default_factory=list)
    high_precision: dict[str, Any] | None = None

    def _note_high_precision(self, stats: dict[str, Any]) -> None:
        """Keep the leaf closest to (or furthest past) its bound; count the leaves judged."""

        def ratio(x: dict[str, Any]) -> float:
            return x["rmse"] / x["bound"] if x["bound"] > 0 else float("inf")

        count = 1 + (self.high_precision["leaves"] if self.high_precision else 0)
        if self.high_precision is None or ratio(stats) > ratio(self.high_precision):
            self.high_precision = dict(stats)
        self.high_precision["leaves"] = count

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
            "high_precision": _jsonable_stats(self.high_precision),
        }


def high_precision_text(stats: dict[str, Any]) -> str:
    """``eager vs fp64: X; plan vs fp64: Y; bound Z`` for one leaf's high-precision stats."""
    ref = "fp64" if stats["ref_dtype"] == "float64" else "fp32"
    return (
        f"eager vs {ref}: {stats['eager_rmse']:.3g}; rewritten vs {ref}: {stats['rmse']:.3g}; "
        f"bound {stats['bound']:.3g} = {stats['multiplier']:g} x {stats['eager_rmse']:.3g} + "
        f"{stats['tol']:g}/10 (RMSE)"
    )


def _jsonable_stats(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {k: _finite(v) if isinstance(v, float) else v for k, v in stats.items()}


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


def flatten_with_path(tree: Any) -> tuple[list[tuple[tuple[Any, ...], Any]], Any]:
    """``torch.utils._pytree.tree_flatten_with_path(tree)``, also for a node type registered
    without a ``flatten_with_keys_fn`` (diffusers' ``BaseOutput`` subclasses, e.g.
    ``Transformer2DModelOutput``, are registered with ``register_pytree_node(cls, _dict_flatten,
    ...)`` only, diffusers 0.42.1 ``utils/outputs.py``, where torch raises ``ValueError: Did not find
    a flatten_with_keys_fn``). Such a node's children are keyed by its flatten context when that
    is one string per child (a dict's keys: ``['sample']``), else by position.

    Returns:
        ``([(key path, leaf), ...], treespec)``: the treespec is ``tree_flatten``'s, the same
        either way, so two outputs are compared by structure as before.
    """
    from torch.utils import _pytree as pytree

    try:
        return pytree.tree_flatten_with_path(tree)
    except ValueError:
        pass
    _, spec = pytree.tree_flatten(tree)
    out: list[tuple[tuple[Any, ...], Any]] = []
    is_leaf = getattr(pytree, "tree_is_leaf", None) or pytree._is_leaf  # torch 2.13 deprecates the private name

    def walk(x: Any, path: tuple[Any, ...]) -> None:
        if is_leaf(x):
            out.append((path, x))
            return
        node = pytree.SUPPORTED_NODES[pytree._get_node_type(x)]
        if node.flatten_with_keys_fn is not None:
            pairs, _ = node.flatten_with_keys_fn(x)
        else:
            children, context = node.flatten_fn(x)
            names = isinstance(context, (list, tuple)) and len(context) == len(children) and all(isinstance(k, str) for k in context)
            pairs = [(pytree.MappingKey(context[i]) if names else pytree.SequenceKey(i), c) for i, c in enumerate(children)]
        for key, child in pairs:
            walk(child, path + (key,))

    walk(tree, ())
    return out, spec


def compare_trees(
    actual: Any,
    expected: Any,
    high_precision: Any = None,
    high_precision_dtype: str | None = None,
    precision: str | None = None,
) -> Comparison:
    """Compare ``actual`` with the reference ``expected`` leaf by leaf.

    Structure (pytree spec), then per tensor leaf: shape, dtype, NaN/Inf where the reference is
    finite, then values under :data:`TOLERANCES` (see the module docstring). ``high_precision``
    is the same pytree from the original model run in float64 (or float32): when given (same
    structure), low-precision leaves are judged by the ``fp64_ref`` rule of
    ``torch._dynamo.utils.same``; ``high_precision_dtype`` names the dtype it was computed in
    (default: its leaves' dtype; it may be stored narrower). ``precision`` is the dtype the
    model ran in (the harness dtype): when it is bf16/fp16, a float32 leaf computed from it (a loss
    from ``.float()``, upcast logits) that misses its own element-wise bound is also judged by
    the high-precision rule, with ``precision``'s tol and multiplier: its drift comes from the
    low-precision math before the upcast. Non-tensor leaves must be equal. Tensors are compared in
    float64 on ``actual``'s device.
    """
    import torch
    from torch.utils import _pytree as pytree

    out = Comparison()
    a_leaves, a_spec = flatten_with_path(actual)
    e_leaves, e_spec = flatten_with_path(expected)
    if a_spec != e_spec:
        out.mismatches.append(
            Mismatch("<output>", f"output structure differs: got {a_spec}, expected {e_spec}")
        )
        return out
    r_leaves: list[Any] = [None] * len(e_leaves)
    if high_precision is not None:
        hp_leaves, hp_spec = flatten_with_path(high_precision)
        if hp_spec == e_spec:
            r_leaves = [x for _, x in hp_leaves]
    for ((path, a), (_, e)), r in zip(zip(a_leaves, e_leaves), r_leaves):
        where = _keystr(path)
        if not isinstance(e, torch.Tensor):
            inner_e, inner_a = state_tensors(e), state_tensors(a)
            if inner_e and type(a) is type(e):
                # an object holding tensors (transformers' DynamicCache: its layers' keys and
                # values): compared by those tensors, not by identity (issue 13)
                if [p for p, _ in inner_a] != [p for p, _ in inner_e]:
                    out.mismatches.append(Mismatch(where, f"{type(e).__name__} holds other tensors: got {len(inner_a)}, expected {len(inner_e)}"))
                    continue
                for (p, ta), (_, te) in zip(inner_a, inner_e):
                    out.leaves += 1
                    reason = _compare_tensor(ta, te, out, None, where + p, high_precision_dtype, precision)
                    if reason:
                        out.mismatches.append(Mismatch(where + p, reason))
                continue
            if isinstance(a, torch.Tensor) or (a != e and not _same_opaque(a, e)):
                out.mismatches.append(Mismatch(where, f"got {a!r}, expected {e!r}"))
            continue
        out.leaves += 1
        reason = _compare_tensor(a, e, out, r, where, high_precision_dtype, precision)
        if reason:
            out.mismatches.append(Mismatch(where, reason))
    return out


def state_tensors(obj: Any, depth: int = 4) -> list[tuple[str, Any]]:
    """``(path, tensor)`` for every tensor an object holds in its attributes, lists, tuples and dicts,
    up to ``depth`` levels (``.layers[0].keys`` for a transformers ``DynamicCache``); sorted by
    attribute name at each level. Plain values (numbers, strings, None) hold none."""
    import torch

    out: list[tuple[str, Any]] = []

    def walk(x: Any, path: str, left: int) -> None:
        if isinstance(x, torch.Tensor):
            out.append((path, x))
        elif left <= 0 or x is None or isinstance(x, (bool, int, float, complex, str, bytes, type)):
            return
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]", left - 1)
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                walk(x[k], f"{path}[{k!r}]", left - 1)
        elif hasattr(x, "__dict__") and not callable(x):
            for k in sorted(vars(x)):
                walk(vars(x)[k], f"{path}.{k}", left - 1)

    walk(obj, "", depth)
    return out


def _same_opaque(a: Any, b: Any) -> bool:
    """Two objects of one class that hold no tensor and compare by identity only (a config
    object, a cache without entries): the same for the comparison."""
    return type(a) is type(b) and type(a).__eq__ is object.__eq__ and not state_tensors(a) and not state_tensors(b)


def _compare_tensor(
    a: Any,
    e: Any,
    out: Comparison,
    r: Any = None,
    where: str = "",
    r_dtype: str | None = None,
    precision: str | None = None,
) -> str | None:
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
    hp = None
    hp_name = name if name in LOW_PRECISION else precision if name == "float32" else None
    if hp_name in LOW_PRECISION and isinstance(r, torch.Tensor) and tuple(r.shape) == tuple(e.shape):
        hp = _high_precision_stats(
            a64, e64, r.detach().to(a.device)[finite], hp_name, TOLERANCES[hp_name][2], where, r_dtype
        )
        if hp is not None:
            out._note_high_precision(hp)
    if not over.any():
        return None
    n_over = int(over.sum())
    head = (
        f"{n_over} of {e64.numel()} elements outside rtol={rtol}, atol={atol} ({name}); "
        f"max abs diff {max_abs:.3g}"
    )
    if hp is not None:
        return None if hp["ok"] else f"{head}; further from the high-precision run than eager: {high_precision_text(hp)}"
    ratio = float((diff / bound).max())
    if name in LOW_PRECISION:
        rel_rmse = float(diff.pow(2).mean().sqrt() / e64.pow(2).mean().sqrt().clamp_min(atol))
        if rel_rmse <= rmse_tol and ratio <= OUTLIER_FACTOR:
            return None
        return (
            f"{head}, relative RMSE {rel_rmse:.3g} > {rmse_tol} or an element {ratio:.1f}x past "
            "the bound (no high-precision reference)"
        )
    return head


def _high_precision_stats(
    a64: Any, e64: Any, r: Any, name: str, tol: float, where: str, r_dtype: str | None = None
) -> dict[str, Any] | None:
    """The ``fp64_ref`` rule of ``torch._dynamo.utils.same`` on one leaf (finite elements of the
    eager reference only): ``rmse(res, ref64) <= multiplier * rmse(eager, ref64) + tol / 10``.
    None when the high-precision run is itself non-finite there (no usable reference)."""
    import torch

    r64 = r.double()
    if not bool(torch.isfinite(r64).all()):
        return None
    eager_rmse = float((e64 - r64).pow(2).mean().sqrt())
    res_rmse = float((a64 - r64).pow(2).mean().sqrt())
    if not math.isfinite(eager_rmse):
        return None
    multiplier = FP64_MULTIPLIER.get(name, 2.0)
    bound = multiplier * eager_rmse + tol / 10.0
    return {
        "path": where,
        "ref_dtype": r_dtype or dtype_name(r.dtype),
        "eager_rmse": eager_rmse,
        "rmse": res_rmse,
        "multiplier": multiplier,
        "tol": tol,
        "bound": bound,
        "ok": res_rmse <= bound,
    }
