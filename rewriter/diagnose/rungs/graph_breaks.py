"""Rung 7a: graph breaks with reason and file:line (``torch._dynamo.explain``).

``explain`` traces the model once at the reference shape and returns every break with its
reason and user stack; the innermost frame under SRC is the location (a helper function there is
what ``disable`` keeps eager). Threshold: any break (partitioning-the-stack: "Am I breaking
graphs? ... restructure or accept"; ``fullgraph=True`` refuses one).

A model that compiles itself (``@torch.compile`` in its code, ``module.compile()`` in its build)
is measured as the program runs it instead: one step from a clean Dynamo state, the breaks read
from Dynamo's own counters (``torch._dynamo.utils.counters["graph_break"]``) and graph-break log
(file:line). ``explain`` on code that is already compiled traces the compiled frames and reported
``-1 graph break(s)``.

What is counted: a graph break is one graph Dynamo ended at a break while tracing (``explain``'s
``break_reasons``; its own ``graph_break_count`` is ``graph_count - 1``, which also counts the graph
a value-guard recompile adds), or one entry of ``counters["graph_break"]`` on the program's own
compile; a finding is one *site* (file, line, reason), however often Dynamo met it (its graph-break
log names a break in a callee once for the caller's trace that inlined it and again for the
callee's own frame). The verdict says both figures where they differ, and what reads the findings
(the config twins' ``why:``, :mod:`..kinds.config`) counts sites.

Under the program's ``torch._dynamo.config.suppress_errors = True`` a compile error (a backend that
raises, a Dynamo error) does not raise: Dynamo runs that frame eager. The frames it ran eager so
during the rung's step or trace are read from Dynamo's own records
(:meth:`~rewriter.engine.watch.CompileWatch.swallowed`) and said with the first one's frame and
error; on the program's own compile they are what that compile did, also where it captured no
graph at all (``explain``, which compiles with its own backend, would measure another compile).

``explain`` counts only the breaks it resumed after. A break inside a loop (``for blk in
self.blocks: ... .item()``) is one Dynamo cannot resume after: it runs the whole frame eager and
compiles only the frames that frame calls, and ``explain`` then reports no break at all. Those
breaks are read from Dynamo's graph-break log during the same trace
(:class:`~rewriter.engine.watch.CompileWatch`) and counted apart, as breaks that skipped a frame.
"""

from __future__ import annotations

import re
from typing import Any

from ..context import Context
from ..dynamo_log import reset
from ..dynamo_settings import under
from ..locate import callers_in_src, first_in_library, first_in_src, function_at
from ..rung import Finding, Rung, RungResult
from ..sdpa_masks import builders, traced_masks


def run(ctx: Context) -> RungResult:
    r = RungResult("graph_breaks", "Graph breaks (torch._dynamo.explain)")
    r.threshold = "any graph break (fullgraph would refuse it)"
    model, inputs, step = ctx.reference()
    own = _as_the_program_compiles(ctx, step, r)
    if own is not None:
        own.verdict += under(ctx.evidence.dynamo_config, KNOBS + ("suppress_errors",))
        ctx.evidence.traced_sdpa_masks = _whole_trace_masks(ctx, model, inputs)
        return own
    from ...engine.watch import CompileWatch

    reset()
    call = ctx.session.spec.call
    with ctx.session.guard(f"torch._dynamo.explain({ctx.session.spec.model}(){'' if call is None else '.' + call})"):
        with CompileWatch() as watch:
            out = _explained(model, inputs, call)
        swallowed = watch.swallowed()
    reset()
    ctx.evidence.traced_sdpa_masks = traced_masks(getattr(out, "graphs", []))  # the +mask-eager twins (kinds/mask.py)
    for reason in out.break_reasons:
        frames = [(f.filename, f.lineno, f.name) for f in reversed(list(reason.user_stack or []))]
        site = first_in_src(frames, ctx.session.src)
        text = " ".join(str(reason.reason).split())[:300]
        if site:
            r.findings.append(Finding("graph_break", text, site[0], site[1], site[2], callers_in_src(frames, ctx.session.src)))
        else:
            r.findings.append(_library_finding(text, frames, ctx))
    r.findings = one_per_site(r.findings)
    skipped = _frame_skipping_breaks(ctx, watch.breaks, {(f.file, f.line) for f in r.findings})
    r.findings += skipped
    count = len(out.break_reasons)
    r.measurement = {"graph_count": out.graph_count, "graph_break_count": count, "op_count": getattr(out, "op_count", None),
                     "frame_skipping_breaks": len(skipped), "graph_break_sites": len(r.findings)}
    sites = sorted({f.where for f in r.findings})
    if count:
        r.verdict = f"{_counted(count, len(r.findings) - len(skipped))} at {', '.join(sites[:4])}"
    if skipped:
        where = ", ".join(sorted({f.where for f in skipped})[:4])
        r.verdict = (f"{r.verdict}; " if r.verdict else "") + (
            f"{len(skipped)} graph break(s) Dynamo could not resume after, at {where}: the frame holding each runs eager "
            "(only the frames it calls compile)")
    if count or skipped:
        r.implies = "disable the breaking helper (keep it eager) or restructure; no fullgraph"
    else:
        r.verdict = "no graph breaks"
    r.verdict += _swallowed(ctx, swallowed, r) + under(ctx.evidence.dynamo_config, KNOBS)
    return r


def _swallowed(ctx: Context, swallowed: list, r: RungResult) -> str:  # noqa: ANN001
    """The frames that ran eager after a compile error ``suppress_errors`` swallowed
    (:meth:`~rewriter.engine.watch.CompileWatch.swallowed`): their count and the first one (at
    its ``def``, relative to SRC where it is there) in ``r.measurement["suppressed_compile_errors"]``,
    and the verdict's clause; empty where there are none. No finding: the rung's findings are
    graph breaks, which the planner and the search read as such."""
    if not swallowed:
        return ""
    first = swallowed[0]
    site = first_in_src([(first.file, first.line, first.name)], ctx.session.src)
    where = f"{site[0]}:{site[1]}" if site else f"{first.file}:{first.line}"
    said = (f"{len(swallowed)} frame(s) ran eager after a compile error swallowed by suppress_errors; the first, "
            f"{site[2] if site else first.name} ({where}): {first.error}")
    r.measurement["suppressed_compile_errors"] = {
        "frames": len(swallowed),
        "first": {"name": first.name, "file": site[0] if site else first.file, "line": first.line, "error": first.error}}
    return f"; {said}"


def one_per_site(findings: list[Finding]) -> list[Finding]:
    """``findings`` with each (file, line, message) once, first first: one finding per graph-break
    site, however many traces met it."""
    first: dict[tuple, Finding] = {}
    for f in findings:
        first.setdefault((f.file, f.line, f.message), f)
    return list(first.values())


def _counted(breaks: int, sites: int) -> str:
    """``1 graph break(s)``, or where Dynamo met a site more than once (or counted fewer breaks than
    its log names sites) ``3 graph break(s) at 1 site(s)``: the count and the findings' sites, both said."""
    return f"{breaks} graph break(s)" + ("" if sites in (0, breaks) else f" at {sites} site(s)")


def _frame_skipping_breaks(ctx: Context, logged: list, seen: set) -> list[Finding]:  # noqa: ANN001
    """The breaks Dynamo logged during ``explain``'s trace that ``explain`` did not return (each
    site once): breaks it could not resume after, which run their frame eager (a break in a loop).
    A site is compared as the findings name it (a file under SRC, or a library's file as its package
    holds it), so a break ``explain`` returned is never counted again; one with no location is
    left out (there is nothing to say where it is)."""
    out: list[Finding] = []
    for b in logged:
        site = first_in_src([(b.file, b.line, "?")], ctx.session.src)
        text = f"graph break Dynamo could not resume after (the frame runs eager): {' '.join(b.reason.split())}"[:300]
        found = (Finding("graph_break", text, site[0], site[1], function_at(b.file, b.line)) if site
                 else _library_finding(text, [(b.file, b.line, "?")], ctx))
        key = (found.file, found.line)
        if found.file is None or key in seen:
            continue
        seen.add(key)
        out.append(found)
    return out


#: The ``torch._dynamo.config`` knobs that decide whether ``.item()``/``.tolist()`` and
#: data-dependent output shapes break the graph: a verdict counted with the program's own
#: setting of one says so (torch/_dynamo/config.py).
KNOBS = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops")

#: Dynamo's reason for a break at a call of a ``torch.compiler.disable``d function (torch 2.13
#: logs the function's repr, ``<function route at 0x...>``; older ones say "Skip calling ...").
_DISABLED_CALL = re.compile(r"^<function \S+ at 0x[0-9a-f]+>$|torch\.compiler\.disable|disable\(\)d function")


def _library_finding(text: str, frames: list[tuple[str, int, str]], ctx: Context) -> Finding:
    """A break no frame under SRC holds: located in the installed package's function it is in
    (:func:`.locate.first_in_library`: a plan can keep that function eager from its site), else
    unlocated."""
    lib = first_in_library(frames, ctx.session.src)
    if lib is None:
        return Finding("graph_break", text)
    file, line, qual, target, chain = lib
    return Finding("graph_break", text, file, line, qual, chain, library=target)


def _as_the_program_compiles(ctx: Context, step, r: RungResult) -> RungResult | None:  # noqa: ANN001
    """The rung on a model that compiles itself: one step from a clean Dynamo state under
    :class:`~rewriter.engine.watch.CompileWatch`; None when the step compiled nothing (the
    model is eager as written: ``explain`` measures it)."""
    from ...engine.watch import CompileWatch

    with CompileWatch() as watch:
        with ctx.session.guard(f"{ctx.session.spec.model}() as the program compiles it"):
            step()
    stats = watch.stats()
    breaks = watch.breaks
    swallowed = watch.swallowed()
    reset()
    if not stats.unique_graphs and not swallowed:
        return None
    r.title = "Graph breaks (the program's own torch.compile: Dynamo's counters)"
    for b in breaks:
        site = first_in_src([(b.file, b.line, "?")], ctx.session.src)
        if site and _DISABLED_CALL.search(b.reason):
            # the program's own torch.compiler.disable at work: the break is at its call site, and
            # the function holding that call is not what to keep eager (no function: no disable)
            r.findings.append(Finding("graph_break", f"call of a function the program keeps eager: {b.reason}", site[0], site[1]))
        elif site:
            r.findings.append(Finding("graph_break", b.reason, site[0], site[1], function_at(b.file, b.line)))
        else:
            found = _library_finding(b.reason, [(b.file, b.line, "?")], ctx)
            if found.library is None:
                found.message = f"{b.reason} ({b.file}:{b.line})"
            r.findings.append(found)
    r.findings = one_per_site(r.findings)
    r.measurement = {"graph_count": stats.unique_graphs, "graph_break_count": stats.graph_breaks,
                     "graph_break_sites": len(r.findings),
                     "source": "the program's own torch.compile (torch._dynamo.utils.counters['graph_break'])"}
    if stats.graph_breaks:
        sites = sorted({f.where for f in r.findings}) or [x.split(" ", 1)[-1] for x in stats.graph_break_reasons]
        r.verdict = (f"{_counted(stats.graph_breaks, len(r.findings))} in the program's own compiled code at "
                     f"{', '.join(sites[:4])}")
        r.implies = "restructure the breaking code (the program compiles it itself: a disable inside its fullgraph region cannot hold)"
    elif r.findings:
        r.verdict = _logged_only(stats.unique_graphs, r.findings)
        r.implies = "restructure the breaking code (a break Dynamo cannot resume after runs its whole frame eager)"
    elif stats.unique_graphs:
        r.verdict = f"no graph breaks in the program's own compiled code ({stats.unique_graphs} graph(s))"
    else:
        r.verdict = "the program's own compile captured no graph"
    if swallowed:
        r.verdict += _swallowed(ctx, swallowed, r)
        r.implies = (f"{r.implies}; " if r.implies and r.implies != "none" else "") + (
            "fix the compile error (with suppress_errors off it raises, naming its cause): the frame it names runs eager")
    return r


def _explained(model: Any, inputs: Any, call: str | None) -> Any:
    """``torch._dynamo.explain`` of one call of ``model`` (or its method ``call``) on the harness's
    ``inputs``, without grad, a ``mark_dynamic`` in the traced code skipped
    (:func:`..as_run.marks_eager_only`)."""
    import torch
    import torch._dynamo

    from ...harness import model_entry
    from ..as_run import marks_eager_only

    args, kwargs = (inputs, {}) if not isinstance(inputs, dict) else ((), inputs)
    with torch.no_grad(), marks_eager_only():
        return torch._dynamo.explain(model_entry(model, call))(*args, **kwargs)


def _whole_trace_masks(ctx: Context, model: Any, inputs: Any) -> list[dict[str, Any] | None] | None:
    """For a program that compiles the model itself whole (the harness's model carries the compile
    at its root: ``torch.compile(model)``, ``model.compile()``; :func:`..own_candidates.compiled_modules_of`):
    the mask each SDPA call gets where that model is traced whole (:func:`_explained` of the module
    under the wrapper), the evidence of the ``+mask-eager`` edit of that compile (:mod:`..kinds.mask`,
    :func:`..candidates.own_call_candidates`). None where the compile is elsewhere (a regional one
    never traces the mask builder), the model's modules call no transformers mask builder (nothing
    to keep eager), or the trace raised: no trace is spent there."""
    from ...engine.watch import unwrapped
    from ..own_candidates import compiled_modules_of

    base = unwrapped(model)
    if not any(m["path"] == "<model>" for m in compiled_modules_of(ctx)) or not builders(base):
        return None
    reset()
    try:
        out = _explained(base, inputs, ctx.session.spec.call)
    except Exception:  # noqa: BLE001 - evidence for one candidate: its absence proposes none
        return None
    finally:
        reset()
    return traced_masks(getattr(out, "graphs", []))


def _logged_only(graphs: int, findings: list[Finding]) -> str:
    """The verdict where ``counters["graph_break"]`` stayed at 0 while Dynamo's graph-break log
    named ``findings`` (a break Dynamo could not resume after, e.g. a data-dependent jump in a loop:
    it runs that frame eager and counts no break): both figures, and the sites the findings hold."""
    sites = sorted({f.where for f in findings})
    return (f"Dynamo's counter: 0 graph breaks in the program's own compiled code ({graphs} graph(s)); its graph-break "
            f"log recorded {len(findings)} graph break(s) the counter does not count, at {', '.join(sites[:4])}")


RUNG = Rung(name="graph_breaks", order=70, run=run, compiles=True)
