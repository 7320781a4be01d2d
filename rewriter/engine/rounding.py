"""Eager's own rounding noise, measured: the original model run once more in its low precision with
the reduction order of its matrix products perturbed.

Where no float64 or float32 run of the original is possible (a kernel with no such path), a
low-precision output has no high-precision answer to be judged against. A fixed relative-RMSE
bound is then wrong both ways: too tight for a deep bf16 model (a correct compile drifts from
eager by 1-5%), too loose for a shallow one. Instead the bound is measured from eager itself:
:func:`perturbed_reduction_order` runs every ``mm``/``addmm``/``bmm``/``baddbmm`` as two half-K
products, each rounded to the operands' dtype, then summed in that dtype: the extra rounding a
different reduction order (a split-K GEMM, a fused kernel that keeps other intermediates) gives.
The distance between that run and eager is eager's own rounding noise, and :mod:`.compare`
judges the rewritten model's distance from eager against it with the multiplier and slack of
``torch._dynamo.utils.same``'s ``fp64_ref`` rule, with the perturbed run in the role of eager and
eager in the role of the reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

#: The dtypes whose products are perturbed (float32's own reordering is below bf16's rounding and
#: its outputs keep the element-wise rule).
PERTURBED = ("bfloat16", "float16")


def _split_k(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func`` (a matrix product) as the sum of its two half-K products, each rounded to the
    dtype, or None when the op is not one handled here or K < 2."""
    import torch

    aten = torch.ops.aten
    if func in (aten.mm.default, aten.bmm.default):
        a, b = args[0], args[1]
        rest: tuple[Any, ...] = ()
    elif func in (aten.addmm.default, aten.baddbmm.default):
        bias, a, b = args[0], args[1], args[2]
        rest = (bias,)
    else:
        return None
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or str(a.dtype).replace("torch.", "") not in PERTURBED:
        return None
    k = a.shape[-1]
    if k < 2:
        return None
    h = k // 2
    product = aten.bmm.default if a.dim() == 3 else aten.mm.default
    first = product(a[..., :h], b[..., :h, :])
    second = product(a[..., h:], b[..., h:, :])
    total = first + second  # rounded to the dtype after each half, as a split-K kernel does
    if rest:
        beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
        alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
        total = rest[0] * beta + total * alpha if (beta != 1 or alpha != 1) else rest[0] + total
    return total


@contextlib.contextmanager
def perturbed_reduction_order() -> Iterator[dict[str, int]]:
    """Within the block, every low-precision ``mm``/``addmm``/``bmm``/``baddbmm`` an eager run
    dispatches is computed as two rounded half-K products (see the module docstring). Yields a
    counter ``{"perturbed": n}`` of the products changed: 0 means the model has none and the run
    measured no noise."""
    from torch.utils._python_dispatch import TorchDispatchMode

    count = {"perturbed": 0}

    class Perturb(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = _split_k(func, args, kwargs)
            if out is None:
                return func(*args, **kwargs)
            count["perturbed"] += 1
            return out

    with Perturb():
        yield count
