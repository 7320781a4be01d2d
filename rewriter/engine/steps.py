"""What every child of a measurement shares (:mod:`.child`, :mod:`.build`, :mod:`.reference`):
tensor trees moved to the host or a device, the inputs the eager reference saved for every shape
(``ref/inputs_<i>.pt``) and the markers it writes into ``ref`` as it goes, and one step of the
model (inference: a forward under ``no_grad``; training: forward and backward, then one SGD step
compared by :func:`after_step`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


#: SGD learning rate of the one optimizer step compared in training mode (small, so the step
#: stays in the linear regime and a correct rewrite reproduces it within tolerance).
TRAIN_LR = 1e-3


def cpu(tree: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def copied(tree: Any) -> Any:
    """Every tensor in ``tree`` detached and cloned on its own device, those an object holds
    included (a transformers ``DynamicCache``'s layers' keys and values, which pytree does not
    flatten: :func:`.compare.state_tensors`; the object is deep-copied around its clones). Under
    CUDA graphs the next replay overwrites a graph's outputs, the cache's tensors too ("accessing
    tensor output of CUDAGraphs that has been overwritten by a subsequent run" when read later,
    PyTorch docs, "CUDAGraph Trees"): the copy holds none of them."""
    import copy

    import torch
    from torch.utils import _pytree as pytree

    from .compare import state_tensors

    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().clone()
        held = state_tensors(x)
        if not held:
            return x
        # each held tensor's clone stands in for it in the deep copy (a tensor with a grad_fn
        # refuses deepcopy itself)
        return copy.deepcopy(x, {id(t): t.detach().clone() for _, t in held})

    return pytree.tree_map(one, tree)


def to_device(tree: Any, device: str) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


#: Written into ``ref`` by the reference once every file the comparisons read is complete.
REFERENCE_DONE = "reference.done"


#: Written into ``ref`` by the reference once its weights and every shape's inputs are saved.
WEIGHTS_SAVED = "weights.saved"


def wait_for_reference(ref: Path, poll_s: float = 0.05, marker: str = REFERENCE_DONE) -> None:
    """Block until the reference child has written every output (``ref/reference.done``), or
    with ``marker=WEIGHTS_SAVED`` its weights and inputs. A reference that fails never writes
    them; the parent then kills the waiting children."""
    while not (ref / marker).exists():
        time.sleep(poll_s)


def saved_inputs(job: dict[str, Any], i: int, ref: Path) -> Any:
    """Shape ``i``'s inputs as the reference saved them, on the harness device."""
    import torch

    return to_device(torch.load(ref / f"inputs_{i}.pt", weights_only=False), job["harness"]["device"])


def harness_call(job: dict[str, Any]) -> str | None:
    """The model's method a step calls (``harness.call``), None for the module itself."""
    return job["harness"].get("call")


def step_fn(model: Any, inputs: Any, training: bool, call: str | None) -> Any:
    """One step of ``model`` (or its method ``call``, :func:`rewriter.harness.call_model`) on
    ``inputs``: a forward under ``no_grad``, or in training forward and backward returning
    ``(output, loss)``."""
    import torch

    from ..harness import call_model, scalar_loss

    if not training:

        def infer() -> Any:
            with torch.no_grad():
                return call_model(model, inputs, call)

        return infer

    def fwd_bwd() -> Any:
        model.zero_grad(set_to_none=True)
        out = call_model(model, inputs, call)
        loss = scalar_loss(out)
        loss.backward()
        return out, loss

    return fwd_bwd


def after_step(model: Any, inputs: Any, reference_sd: dict[str, Any], seed: int, call: str | None) -> dict[str, Any]:
    """Training records after a forward+backward: the gradients it left (host copies, keyed by
    parameter name without compile wrappers' ``_orig_mod.``), then one
    SGD step (lr :data:`TRAIN_LR`) and the loss after it; the weights are restored after."""
    import torch

    from ..harness import call_model, scalar_loss

    from .watch import without_compile_hops

    # named as the user's model names them: a compile's wrapper (the program's own, which a
    # reference with compilation off keeps) adds ``_orig_mod.`` to every name beneath it
    out: dict[str, Any] = {
        "grads": {without_compile_hops(n): p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    }
    torch.optim.SGD(model.parameters(), lr=TRAIN_LR).step()
    torch.manual_seed(seed)
    out["loss_after_step"] = cpu(scalar_loss(call_model(model, inputs, call)).detach())
    model.zero_grad(set_to_none=True)
    model.load_state_dict(reference_sd)
    return out
