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

from collections.abc import Iterator
from contextlib import contextmanager
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


#: The marking calls Dynamo forbids in a traced frame, as ``torch._dynamo`` exports them.
MARKS = ("mark_dynamic", "maybe_mark_dynamic", "mark_static")


@contextmanager
def marks_eager_only() -> Iterator[None]:
    """Within the block, ``torch._dynamo.mark_dynamic`` (and ``maybe_mark_dynamic``,
    ``mark_static``) mark in eager code as ever and do nothing in a frame Dynamo traces.

    A rung that compiles the whole model for an experiment (``explain``, the recompile sweep)
    traces a ``forward`` that may mark its tensors before they enter a region the program compiles
    elsewhere (a ``mark_dynamic`` action stackpart wrote, with ``block.compile()`` in a script the
    harness does not run): Dynamo forbids the call in a graph ("Attempt to trace forbidden
    callable") and the rung would fail on code that runs as the program runs it. A whole-model
    compile cannot honour a mark inside it anyway, so skipping it there changes nothing the rung
    measures. Only the module attributes are swapped (the form the plan's rewrite and most code
    call); ``from torch._dynamo import mark_dynamic`` bound earlier keeps the original."""
    import torch
    import torch._dynamo

    saved = {name: getattr(torch._dynamo, name) for name in MARKS if hasattr(torch._dynamo, name)}

    def eager_only(original: Any) -> Any:
        def mark(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():
                return None
            return original(*args, **kwargs)
        return mark

    for name, original in saved.items():
        setattr(torch._dynamo, name, eager_only(original))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(torch._dynamo, name, original)


def compiled_as_run(model: Any, own: bool, call: str | None = None) -> tuple[Any, str]:
    """The model to call at every shape, and how it is compiled (for the report). A model that
    compiles itself (``own``: :func:`.as_run.compiles_itself`) is called as the program compiles
    it: compiling it again returned a plain function for ``torch.compile(model)`` (no
    ``parameters()`` for a training step) and traced the program's own code from outside (a
    ``maybe_mark_dynamic`` there is forbidden in a graph). Any other model is compiled here, the
    method ``call`` (``harness.call``) where one is named (:func:`rewriter.harness.compile_entry`). Both
    run under ``set_stance(force_backend="eager")`` (the callers: :mod:`.recompiles`, :mod:`.value_guards`): guards and recompiles are
    Dynamo's, decided before a backend runs, so the program's own backend is not paid for."""
    from ..harness import compile_entry

    if own:
        return model, "the program's own torch.compile (backend forced to 'eager')"
    if call is not None:
        return compile_entry(model, call, backend="eager"), f"torch.compile(model.{call}, backend='eager')"
    return compile_entry(model, None, backend="eager"), "torch.compile(backend='eager')"
