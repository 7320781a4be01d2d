"""Rung 6a: graph breaks with reason and file:line (``torch._dynamo.explain``).

``explain`` traces the model once at the reference shape and returns every break with its
reason and user stack; the innermost frame under SRC is the location (a helper function there is
what ``disable`` keeps eager). Threshold: any break (partitioning-the-stack: "Am I breaking
graphs? ... restructure or accept"; ``fullgraph=True`` refuses one).
"""

from __future__ import annotations

from .context import Context
from .dynamo_log import reset
from .locate import callers_in_src, first_in_src
from .rung import Finding, RungResult


def run(ctx: Context) -> RungResult:
    import torch
    import torch._dynamo

    r = RungResult("graph_breaks", "Graph breaks (torch._dynamo.explain)")
    r.threshold = "any graph break (fullgraph would refuse it)"
    model, inputs, _ = ctx.reference()
    reset()
    args, kwargs = (inputs, {}) if not isinstance(inputs, dict) else ((), inputs)
    with ctx.session.guard(f"torch._dynamo.explain({ctx.session.spec.model}())"):
        with torch.no_grad():
            out = torch._dynamo.explain(model)(*args, **kwargs)
    reset()
    for reason in out.break_reasons:
        frames = [(f.filename, f.lineno, f.name) for f in reversed(list(reason.user_stack or []))]
        site = first_in_src(frames, ctx.session.src)
        text = " ".join(str(reason.reason).split())[:300]
        if site:
            r.findings.append(Finding("graph_break", text, site[0], site[1], site[2], callers_in_src(frames, ctx.session.src)))
        else:
            r.findings.append(Finding("graph_break", text))
    r.measurement = {"graph_count": out.graph_count, "graph_break_count": out.graph_break_count, "op_count": getattr(out, "op_count", None)}
    if out.graph_break_count:
        sites = sorted({f.where for f in r.findings})
        r.verdict = f"{out.graph_break_count} graph break(s) at {', '.join(sites[:4])}"
        r.implies = "disable the breaking helper (keep it eager) or restructure; no fullgraph"
    else:
        r.verdict = "no graph breaks"
    return r
