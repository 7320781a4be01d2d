"""A program whose own ``torch.compile`` raises: its compile set aside so the model can be diagnosed.

A ``fullgraph=True`` compile over a branch on a tensor's value raises at its first call (Dynamo's
``Unsupported`` or a data-dependent ``UserError``). Such a program cannot be measured as it runs,
and yet it is the program that most needs a diagnosis: its compile is what to change. Where the
same step runs with compilation off (:func:`.session.own_compile_raised`), the compiles the model
carries (``torch.compile(module)``, ``module.compile()``, ``module.forward =
torch.compile(module.forward)``, ``@torch.compile`` on a method of its classes) are taken off the
ladder's model (:func:`unwrap`), so
the rungs measure the model and the compile rungs compile it themselves, and the failure is kept
as evidence (:attr:`.evidence.Evidence.own_raised`). The search then measures the program with
compilation off as its reference (``torch.compiler.set_stance("force_eager")``, as validate's eager
reference is) and never chooses "change nothing": the program as it is raises
(docs/design.md, "Programs whose own compile raises").

A compile the model does not carry (a compiled free function its ``forward`` calls) cannot be set
aside; the failure stays the explained error :func:`.session.own_compile_raised` writes.
"""

from __future__ import annotations

from typing import Any

from .evidence import where_raised
from .session import HarnessFailure, compile_hint, own_compile_raised


#: Dynamo's wrapper of a backend's own exception (``torch._dynamo.exc``): the compile traced, and
#: its backend raised. Not set aside: on a CPU the search's children run every compile on the
#: eager backend, where a backend's failure does not happen, and a plan "validated" there would
#: keep the compile that raises.
BACKEND_FAILURES = frozenset({"BackendCompilerFailed"})


def unwrap(model: Any) -> tuple[Any, int]:
    """``model`` with every compile it carries taken off (:func:`rewriter.engine.watch.carried_compiles`:
    a wrapper at the root or as any module's child, ``module.compile()``'s call, a compiled
    ``forward`` attribute, a method compiled by a decorator in a class's source), and how many
    were. The root's wrapper is left to the caller, who gets the module it wraps. The modules and
    classes are changed in place, for the rest of the process: the caller's process is the
    ladder's, whose model is the only one built from them (the search's children import the
    source afresh).
    """
    from ..engine.watch import carried_compiles, take_off, unwrapped

    carried = carried_compiles(model)
    take_off(carried)
    return unwrapped(model), len(carried)


def set_aside(ctx: Any, exc: HarnessFailure) -> str | None:
    """Where ``exc`` is the program's own compile raising and that compile is on the model
    object, take it off the ladder's model and say so; else None (``exc`` stands). A compile the
    model does not carry (a compiled free function) cannot be taken off: ``exc``'s message then
    gains why it is the program's compile and what to change, as setup's error says it.

    Whether the step that raised runs with compilation off is read from ``exc.off`` where
    :meth:`.session.Session.run_as_the_program_runs` ran it so; else the reference step runs so
    here: one such run per failure. The reference ``(model, inputs, step)`` is rebuilt on the unwrapped model and one step run
    on it; the compiled modules are read first (:func:`.own_candidates.compiled_modules_of`), so
    the search still proposes the edits of the program's own call. Sets
    :attr:`.evidence.Evidence.own_raised` to ``{"message", "path", "line", "hint"}``.

    Raises:
        HarnessFailure: the unwrapped model's step raised (its own failure, not the compile's).
    """
    if ctx.evidence.own_raised is not None:
        return None  # set aside once: a second failure is the model's own
    off = exc.off  # the step run with compilation off where run_as_the_program_runs ran it: not run again
    while isinstance(exc.__cause__, HarnessFailure):  # run_as_the_program_runs's, which said why already
        exc = exc.__cause__
    if type(exc.__cause__).__name__ in BACKEND_FAILURES or type(exc.__cause__).__module__.startswith("torch._inductor"):
        return None  # the backend's failure: the search's children may run another backend, and would not see it
    model, inputs, step = ctx.reference()
    said = own_compile_raised(exc, lambda: (step(), ctx.session.sync()), ctx.session.src, off)
    if said is None:
        return None
    from .own_candidates import compiled_modules_of

    compiled_modules_of(ctx)  # read (and kept) before they are taken off: the search edits these calls
    bare, n = unwrap(model)
    if not n:  # a compile the model does not carry (a compiled free function its forward calls): it stands, explained
        if said not in exc.message:
            exc.message = f"{exc.message}; {said}"
        return None
    ctx.session.replace_model(bare)
    ctx.evidence.reference = (bare, inputs, ctx.session.step_fn(bare, inputs))
    cause = exc.message
    ctx.evidence.own_raised = {"message": cause, "path": exc.path, "line": exc.line, "hint": compile_hint(exc.__cause__)}
    ctx.session.run(ctx.evidence.reference[2])
    return (f"the program's own torch.compile raised{where_raised(ctx.evidence.own_raised)} ({cause}); the step that raised runs with compilation off, so the "
            f"ladder measures the model with its {n} compile(s) set aside, and the search measures the program with "
            "compilation off as its reference and the edits of that compile as candidates")
