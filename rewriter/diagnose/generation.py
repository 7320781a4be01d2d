"""Generation workloads: does the harness's step call a transformers model's ``generate``?

Found by running: one eager step at the reference shape with ``generate`` of every module that has
a ``generation_config`` wrapped (an instance attribute, removed after) to count its calls. A
harness step that only calls ``forward`` is not a generation workload, however the model could be
used elsewhere, so the static-cache lever is proposed only where the measured step generates.
"""

from __future__ import annotations

from typing import Any

from ..engine.watch import unwrapped
from .context import Context
from .evidence import UNREAD


def generating_module(ctx: Context) -> Any | None:
    """The outermost module whose ``generate`` the reference step called, or None (cached in
    ``ctx.evidence.generates``)."""
    if ctx.evidence.generates is not UNREAD:
        return ctx.evidence.generates
    model, _, step = ctx.reference()
    # a compiled model (torch.compile's OptimizedModule) is listed beside the module it wraps, and
    # forwards attribute writes to it: patch each underlying module once
    candidates = list({id(u): u for _, m in model.named_modules() if (u := unwrapped(m)) is not None
                       and callable(getattr(u, "generate", None)) and getattr(u, "generation_config", None) is not None}.values())
    called: list[Any] = []
    patched = []
    for module in candidates:
        original = module.generate

        def counting(*args: Any, _module: Any = module, _original: Any = original, **kwargs: Any) -> Any:
            called.append(_module)
            return _original(*args, **kwargs)

        module.generate = counting
        patched.append(module)
    try:
        if patched:
            step()
    finally:
        for module in patched:
            vars(module).pop("generate", None)
    found = called[0] if called else None
    ctx.evidence.generates = found
    return found
