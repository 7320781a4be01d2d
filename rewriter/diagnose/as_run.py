"""Whether the model compiles itself as the harness builds and runs it.

A program that calls ``torch.compile`` itself (a decorator in the model, ``torch.compile(model)``
or ``model.forward = torch.compile(model.forward)`` in the harness, a tree stackpart rewrote) is
measured as it runs: a rung that would otherwise compile the model for an experiment calls it as
it is instead, because compiling it again traces the program's own compiled code from the outside
(``torch.compile`` of an ``OptimizedModule`` returns a plain function; a whole-model wrap traces
``torch._dynamo.maybe_mark_dynamic``, which Dynamo forbids in a graph).

The answer comes from one step at the reference shape from a clean Dynamo state, the program's
backend forced to ``eager`` (``torch.compiler.set_stance(force_backend=...)``, torch >= 2.6: whether
a frame compiles is Dynamo's decision, made before any backend runs), read from Dynamo's own
counters (:class:`~rewriter.engine.watch.CompileWatch`); measured once per diagnosis.
"""

from __future__ import annotations

from typing import Any

from .context import Context
from .dynamo_log import reset


def compiles_itself(ctx: Context) -> bool:
    """True when one step of the harness's model compiled at least one graph by itself (module
    docstring). Cached in ``ctx.evidence.compiles_itself``.

    Raises:
        HarnessFailure: the step raised (at the rung now running).
    """
    if ctx.evidence.compiles_itself is None:
        import torch

        from ..engine.watch import CompileWatch

        _, _, step = ctx.reference()
        reset()
        try:
            with CompileWatch() as watch, torch.compiler.set_stance("default", force_backend="eager"):
                ctx.session.run(step, f"{ctx.session.forward_name()} as the program compiles it")
            ctx.evidence.compiles_itself = bool(watch.stats().unique_graphs)
        finally:
            reset()
    return ctx.evidence.compiles_itself


def compiled_as_run(model: Any, own: bool) -> tuple[Any, str]:
    """The model to call at every shape, and how it is compiled (for the report). A model that
    compiles itself (``own``: :func:`.as_run.compiles_itself`) is called as the program compiles
    it: compiling it again returned a plain function for ``torch.compile(model)`` (no
    ``parameters()`` for a training step) and traced the program's own code from outside (a
    ``maybe_mark_dynamic`` there is forbidden in a graph). Any other model is compiled here. Both
    run under ``set_stance(force_backend="eager")`` (the callers: :mod:`.recompiles`, :mod:`.value_guards`): guards and recompiles are
    Dynamo's, decided before a backend runs, so the program's own backend is not paid for."""
    import torch

    if own:
        return model, "the program's own torch.compile (backend forced to 'eager')"
    return torch.compile(model, backend="eager"), "torch.compile(backend='eager')"
