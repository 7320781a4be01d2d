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
A correct compile of a bf16 model drifts from eager by bf16 reduction-order noise (relative RMSE
0.013 against eager for a 16-layer Llama: docs/decisions.md, "Numerics: bf16 drift and generated
tokens"), which
this rule accepts, while a rewrite that changes the math lands orders of magnitude further from
the float64 answer than eager does. The rule covers every floating leaf of the run, the tensors
held in objects (a transformers ``DynamicCache``'s keys and values) included, each against the
same tensor of the high-precision run.

Where the original cannot run in float64 or float32 (a kernel with no such path), the reference
is eager's own rounding noise (:mod:`.rounding`): the original run again in its low precision
with a perturbed reduction order, judged by the same rule with that run in eager's role and eager
as the reference. Discrete decisions inside the model (MoE top-k routing, argmax) flip where
they are near ties; a leaf past the rule is then judged by their effect (:func:`_flip_rows`,
:mod:`.decisions`). Only when neither reference was computed do the low-precision leaves fall
back to a relative-RMSE bound (``rmse`` of :data:`TOLERANCES`) with no element more than
:data:`OUTLIER_FACTOR` x past the element-wise bound. A NaN or Inf where the reference has none
never passes.
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
    """``eager vs fp64: X; rewritten vs fp64: Y; bound Z`` for one leaf's high-precision stats
    (``perturbed eager vs eager: X; rewritten vs eager: Y`` where eager's own rounding noise was
    the reference), with the decisions' effect where it judged the leaf."""
    if stats["ref_dtype"] == NOISE_REFERENCE:
        first, ref = "perturbed eager vs eager", "eager"
    else:
        ref = "fp64" if stats["ref_dtype"] == "float64" else "fp32"
        first = f"eager vs {ref}"
    text = (
        f"{first}: {stats['eager_rmse']:.3g}; rewritten vs {ref}: {stats['rmse']:.3g}; "
        f"bound {stats['bound']:.3g} = {stats['multiplier']:g} x {stats['eager_rmse']:.3g} + "
        f"{stats['tol']:g}/10 (RMSE)"
    )
    effect = stats.get("by_effect")
    if effect:
        text += (
            f"; judged by the discrete decisions' effect: {effect['outlier_rows']} of {effect['rows']} rows past "
            f"{OUTLIER_ROW_FACTOR:g}x eager's median row error (eager: {effect['eager_outlier_rows']}), "
            f"{effect['rows_movable']} movable by {effect['near_ties']} near-tied top-k/argmax decisions; "
            f"the other rows {effect['rest_rmse']:.3g} vs bound {effect['rest_bound']:.3g}"
        )
    return text


def reference_text(run: dict[str, Any]) -> str:
    """One sentence on what judged the low-precision leaves, from the eager reference's
    ``high_precision`` run record (:func:`.reference.high_precision_reference`)."""
    if run.get("dtype"):
        return (
            f"The original ran once more in {run['dtype']} from the same weights and inputs ({run['seconds']:.2f} s); "
            "a low-precision leaf passes when rmse(variant, ref) <= multiplier x rmse(eager, ref) + tol/10 "
            "(torch._dynamo.utils.same, fp64_ref)."
        )
    noise = run.get("noise") or {}
    why = "; ".join(run.get("tried") or [])
    if noise and not noise.get("error"):
        return (
            f"The original ran in neither float64 nor float32 ({why}); it ran once more in its own precision with the "
            f"reduction order of its {noise['perturbed_products']} matrix product(s) perturbed ({run['seconds']:.2f} s): "
            "a low-precision leaf passes when rmse(variant, eager) <= multiplier x rmse(perturbed, eager) + tol/10 "
            "(the rule of torch._dynamo.utils.same, fp64_ref, with eager's own rounding noise as the reference)."
        )
    return (f"The original ran in neither float64 nor float32 ({why}); low-precision leaves were judged by the "
            "fixed relative-RMSE fallback.")


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
    noise: Any = None,
    decisions: dict[str, Any] | None = None,
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

    The tensors an object holds (a transformers ``DynamicCache``'s layers' keys and values) are
    judged as leaves of their own, against the same object's tensors in ``high_precision``.

    ``noise``: where no high-precision run exists, the same pytree from the original run again in
    its low precision with a perturbed reduction order (:mod:`.rounding`): low-precision leaves are
    then judged by the same rule with the perturbed run as "eager" and eager as the reference
    (``rmse(rewritten, eager) <= multiplier x rmse(perturbed, eager) + tol / 10``).
    ``decisions``: the discrete decisions' near ties between eager and that reference
    (:func:`.decisions.match`): a leaf past the rule passes when its outlier rows are no more than
    those near ties can move and every other row meets the rule (see :func:`_flip_rows`).
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
    r_leaves = _aligned(high_precision, e_spec, len(e_leaves))
    n_leaves = _aligned(noise, e_spec, len(e_leaves)) if high_precision is None else [None] * len(e_leaves)
    for ((path, a), (_, e)), r, n in zip(zip(a_leaves, e_leaves), r_leaves, n_leaves):
        where = _keystr(path)
        if not isinstance(e, torch.Tensor):
            inner_e, inner_a = state_tensors(e), state_tensors(a)
            if inner_e and type(a) is type(e):
                # an object holding tensors (transformers' DynamicCache: its layers' keys and
                # values): compared by those tensors, not by identity, and each judged against
                # the same object's tensor in the high-precision run (or the perturbed one)
                if [p for p, _ in inner_a] != [p for p, _ in inner_e]:
                    out.mismatches.append(Mismatch(where, f"{type(e).__name__} holds other tensors: got {len(inner_a)}, expected {len(inner_e)}"))
                    continue
                inner_r, inner_n = _held(r, e), _held(n, e)
                for (p, ta), (_, te) in zip(inner_a, inner_e):
                    out.leaves += 1
                    reason = _compare_tensor(ta, te, out, inner_r.get(p), where + p, high_precision_dtype, precision,
                                             inner_n.get(p), decisions)
                    if reason:
                        out.mismatches.append(Mismatch(where + p, reason))
                continue
            if isinstance(a, torch.Tensor) or (a != e and not _same_opaque(a, e)):
                out.mismatches.append(Mismatch(where, f"got {a!r}, expected {e!r}"))
            continue
        out.leaves += 1
        reason = _compare_tensor(a, e, out, r, where, high_precision_dtype, precision, n, decisions)
        if reason:
            out.mismatches.append(Mismatch(where, reason))
    return out


def _aligned(tree: Any, spec: Any, count: int) -> list[Any]:
    """``tree``'s leaves when it has the structure ``spec``, else ``count`` Nones."""
    if tree is None:
        return [None] * count
    leaves, tree_spec = flatten_with_path(tree)
    return [x for _, x in leaves] if tree_spec == spec else [None] * count


def _held(obj: Any, like: Any) -> dict[str, Any]:
    """The tensors ``obj`` holds by path (:func:`state_tensors`) when it is of ``like``'s class
    (the high-precision run's cache for eager's cache), else none."""
    if obj is None or type(obj) is not type(like):
        return {}
    return dict(state_tensors(obj))


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
    n: Any = None,
    decisions: dict[str, Any] | None = None,
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
    shape = tuple(e.shape) if bool(finite.all()) and e.dim() >= 2 else None  # rows for the decisions' rule
    if hp_name in LOW_PRECISION and isinstance(r, torch.Tensor) and tuple(r.shape) == tuple(e.shape):
        hp = _high_precision_stats(
            a64, e64, r.detach().to(a.device)[finite], hp_name, TOLERANCES[hp_name][2], where, r_dtype,
            shape, decisions,
        )
    elif hp_name in LOW_PRECISION and isinstance(n, torch.Tensor) and tuple(n.shape) == tuple(e.shape):
        # no high-precision run: eager's own rounding noise (.rounding) in eager's role, eager as the reference
        hp = _high_precision_stats(
            a64, n.detach().to(a.device).double()[finite], e64, hp_name, TOLERANCES[hp_name][2], where,
            NOISE_REFERENCE, shape, decisions,
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
        if hp["ok"]:
            return None
        what = ("further from eager than eager's own rounding noise" if hp["ref_dtype"] == NOISE_REFERENCE
                else "further from the high-precision run than eager")
        return f"{head}; {what}: {high_precision_text(hp)}"
    ratio = float((diff / bound).max())
    if name in LOW_PRECISION:
        rel_rmse = float(diff.pow(2).mean().sqrt() / e64.pow(2).mean().sqrt().clamp_min(atol))
        if rel_rmse <= rmse_tol and ratio <= OUTLIER_FACTOR:
            return None
        return (
            f"{head}, relative RMSE {rel_rmse:.3g} > {rmse_tol} or an element {ratio:.1f}x past "
            "the bound (no high-precision reference and no rounding-noise run)"
        )
    return head


def _high_precision_stats(
    a64: Any,
    e64: Any,
    r: Any,
    name: str,
    tol: float,
    where: str,
    r_dtype: str | None = None,
    shape: tuple[int, ...] | None = None,
    decisions: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The ``fp64_ref`` rule of ``torch._dynamo.utils.same`` on one leaf (finite elements of the
    eager reference only): ``rmse(res, ref64) <= multiplier * rmse(eager, ref64) + tol / 10``.
    None when the high-precision run is itself non-finite there (no usable reference).

    ``shape``: the leaf's shape when every element is finite and it has rows (2+ dims): a leaf
    past the rule is then judged by the effect of the discrete decisions (:func:`_flip_rows`)."""
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
    stats: dict[str, Any] = {
        "path": where,
        "ref_dtype": r_dtype or dtype_name(r.dtype),
        "eager_rmse": eager_rmse,
        "rmse": res_rmse,
        "multiplier": multiplier,
        "tol": tol,
        "bound": bound,
        "ok": res_rmse <= bound,
    }
    if not stats["ok"] and shape is not None and decisions:
        effect = _flip_rows(a64.reshape(shape), e64.reshape(shape), r64.reshape(shape), multiplier, tol, decisions)
        if effect is not None:
            stats["by_effect"] = effect
            stats["ok"] = effect["ok"]
    return stats


#: ``ref_dtype`` of a leaf judged against eager's own rounding noise (no high-precision run).
NOISE_REFERENCE = "eager"
#: A row (the last dim) is an outlier when its RMSE against the reference exceeds this many times
#: the median row RMSE of eager against it. Source: measured on a 4-layer bf16 Mixtral (CPU): rows
#: of a token whose expert choice flipped sat 14-23x the median, every other row below 2x.
OUTLIER_ROW_FACTOR = 5.0


def _flip_rows(a: Any, e: Any, r: Any, multiplier: float, tol: float, decisions: dict[str, Any]) -> dict[str, Any] | None:
    """Judge a leaf by the effect of the model's discrete decisions (see :mod:`.decisions`): its
    rows (last dim) whose error against the reference ``r`` exceeds :data:`OUTLIER_ROW_FACTOR` x
    eager's median row error are the rows a flipped decision moved; the leaf passes when there are
    no more of them than the decisions' near ties can move (:func:`.decisions.rows_moved`) and
    the other rows (neither run's outliers) meet ``rmse(res) <= multiplier x rmse(eager) + tol/10``.

    Args: ``a``, ``e``, ``r``: the rewritten, eager and reference leaf, float64, same shape (2+ dims).
    Returns ``{"outlier_rows", "eager_outlier_rows", "rows", "rows_movable", "near_ties",
    "rest_rmse", "rest_bound", "ok"}``, or None when no row is left to judge the rest by.
    """
    from .decisions import rows_moved

    width = a.shape[-1]
    a2, e2, r2 = a.reshape(-1, width), e.reshape(-1, width), r.reshape(-1, width)
    err_a = (a2 - r2).pow(2).mean(-1).sqrt()
    err_e = (e2 - r2).pow(2).mean(-1).sqrt()
    cut = OUTLIER_ROW_FACTOR * float(err_e.median())
    out_a, out_e = err_a > cut, err_e > cut
    rest = ~(out_a | out_e)
    if not bool(rest.any()):
        return None
    rest_rmse = float((a2[rest] - r2[rest]).pow(2).mean().sqrt())
    rest_bound = multiplier * float((e2[rest] - r2[rest]).pow(2).mean().sqrt()) + tol / 10.0
    movable = rows_moved(decisions, a2.shape[0])
    return {
        "outlier_rows": int(out_a.sum()),
        "eager_outlier_rows": int(out_e.sum()),
        "rows": int(a2.shape[0]),
        "rows_movable": movable,
        "near_ties": int(decisions.get("near_ties", 0)),
        "rest_rmse": rest_rmse,
        "rest_bound": rest_bound,
        "ok": int(out_a.sum()) <= movable and rest_rmse <= rest_bound,
    }
