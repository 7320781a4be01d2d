"""The attention masks SDPA calls get: in a graph Dynamo traced, and in one eager forward.

Read by the graph-break rung (the traced side, from ``torch._dynamo.explain``'s graphs) and by the
``+mask-eager`` twins (:mod:`.kinds.mask`, the eager side): a mask the trace builds where eager
builds none keeps SDPA off its fused kernels on CUDA (``torch.backends.cuda.can_use_flash_attention``
and its siblings name the failed check).
"""

from __future__ import annotations

import sys
from typing import Any

#: The modules whose functions build transformers' attention masks.
BUILDER_MODULES = ("transformers.masking_utils", "transformers.modeling_attn_mask_utils")


def builders(model: Any) -> list[str]:
    """``module:name`` of every transformers mask builder (a function of :data:`BUILDER_MODULES`
    whose name holds ``mask``) bound in the module of a class of ``model``'s submodules under
    ``transformers.models``: the name that module's code calls, which a ``disable`` replaces."""
    found: list[str] = []
    for module_name in sorted({type(m).__module__ for m in model.modules()}):
        if not module_name.startswith("transformers.models."):
            continue
        for name, value in sorted(getattr(sys.modules.get(module_name), "__dict__", {}).items()):
            if (callable(value) and getattr(value, "__module__", None) in BUILDER_MODULES and "mask" in name
                    and not name.startswith("__")):
                found.append(f"{module_name}:{name}")
    return found


def _is_sdpa(node: Any) -> bool:
    return node.op == "call_function" and "scaled_dot_product_attention" in str(node.target)


def _mask_arg(node: Any) -> Any:
    return node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)


def layout(value: Any) -> dict[str, Any] | None:
    """Shape, strides and dtype of a mask tensor (a FakeTensor of a traced graph, or a real one),
    None for no mask."""
    if value is None:
        return None
    shape = getattr(value, "shape", None)
    if shape is None:
        return {"value": repr(value)[:60]}
    return {"shape": list(shape), "stride": list(value.stride()), "dtype": str(value.dtype)}


def traced_masks(graphs: list[Any]) -> list[dict[str, Any] | None]:
    """The mask each SDPA call of Dynamo's traced ``graphs`` (``GraphModule``s) gets, in graph
    order: its :func:`layout` from the node's example value, or None where it gets none."""
    out = []
    for gm in graphs:
        for node in gm.graph.nodes:
            if _is_sdpa(node):
                mask = _mask_arg(node)
                out.append(None if mask is None else layout(getattr(mask, "meta", {}).get("example_value", mask)))
    return out


def eager_masks(model: Any, inputs: Any, call: str | None = None) -> list[dict[str, Any] | None]:
    """The mask each ``scaled_dot_product_attention`` call gets in one eager forward of
    ``model`` (or its method ``call``) on ``inputs`` (no grad), recorded by a ``TorchFunctionMode``:
    its :func:`layout`, or None."""
    import torch
    from torch.overrides import TorchFunctionMode

    from ..harness import call_model

    sdpa = torch.nn.functional.scaled_dot_product_attention
    seen: list[dict[str, Any] | None] = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if func is sdpa:
                seen.append(layout(kwargs.get("attn_mask", args[3] if len(args) > 3 else None)))
            return func(*args, **kwargs)

    with torch.no_grad(), torch.compiler.set_stance("force_eager"), Record():
        call_model(model, inputs, call)
    return seen
