"""The search's config candidates: ``torch._dynamo.config`` knobs torch recommends for a graph break
the compiled code needs, proposed and measured like any other action.

Evidence: the graph-break rung's findings (:mod:`..graph_breaks`: ``torch._dynamo.explain`` on an
eager model, Dynamo's counters and graph-break log on a model that compiles itself) whose reason
is one Dynamo gives for a value it would not capture (torch 2.13 wording, with the hint it prints):

* a scalar read: ``Unsupported Tensor.item() call with capture_scalar_outputs=False`` (the log's
  ``call_method TensorVariable() item ()``), and ``Data dependent operator`` for
  ``aten._local_scalar_dense`` (``.tolist()``, ``int(t)``) → ``capture_scalar_outputs``;
* an operator whose output size depends on the data: ``Dynamic shape operator`` for
  ``aten.nonzero`` (``x[mask]``, ``nonzero``), ``aten._unique2`` (``unique``) →
  ``capture_dynamic_output_shape_ops``.

(The reasons and their knobs: :data:`rewriter.dynamo_messages.KNOBS`, which ``check`` reads too.)

A branch on a tensor's value (``if x.mean() > 0``, Dynamo's ``generic_jump``) is not among them:
with ``capture_scalar_outputs`` it still breaks, at the jump on the unbacked value (measured:
2 graphs either way, torch 2.13; and ``counters["graph_break"]`` then counts 0 breaks for it, so a
candidate is judged by the breaks its child's graph-break log shows too, :func:`judge`).

For every candidate that compiles the code a break is in (a whole-model compile, the repeated
block's region, a compiled function; or the program's own compile the harness runs), a twin with
the knob is proposed (``per-block+capture_scalar_outputs``): the candidate's actions plus one
``dynamo_config`` action, less the ``disable``s that only kept a captured break eager (the knob
keeps that code in the graph instead; under the program's ``fullgraph=True`` a disable cannot hold
at all). It is placed just before the candidate it came from (without a
measured gain, the ladder's order decides), and after measurement :func:`judge` prunes it when it
saw no fewer graph breaks than that candidate: a process-wide knob that changes nothing is not
planned.

A knob the program already runs with (:func:`_already_set`: ``torch._dynamo.config`` as the program
set it, read after setup by :mod:`..dynamo_settings`, a computed value included) gets no twin: the
graph-break rung measured under it, so a break whose reason still names it (a data-dependent
``range(t.item())``, whose reason quotes the ``.item()`` line) is one the knob does not keep in the
graph, and a twin setting it again would measure the same program; the search's ``pruned`` says so.

Where the line goes (:func:`config_target`): the model class's own ``__init__`` when it is under
SRC (it runs in every program that builds the model, the harness the search runs and the user's own
scripts alike, and before any of the model's code can be traced), else the harness's model
function (the only entry the search's children run; ``--entry`` is not run by them, so a line there
could not be measured).
"""

from __future__ import annotations

from typing import Any

from ...dynamo_messages import knob_for
from ...plan import DYNAMO_CONFIG_KEYS, DynamoConfigAction, DynamoSettings
from ..candidate import Candidate, CandidateKind, is_as_is, measured_pairs, place_twin

def capturable_breaks(ctx: Any) -> list[tuple[Any, str]]:
    """``(finding, key)`` for each of the graph-break rung's findings a config knob captures."""
    r = ctx.results.get("graph_breaks")
    if r is None or not r.ok:
        return []
    return [(f, k) for f in r.findings if f.kind == "graph_break" and (k := knob_for(f.message)) is not None]


def config_target(ctx: Any) -> tuple[str, str]:
    """``(target, why there)`` for the ``dynamo_config`` line (see the module docstring)."""
    from ..locate import target_of

    model, _, _ = ctx.reference()
    cls = type(getattr(model, "_orig_mod", model))  # the program's torch.compile(model): the model's own class
    owner = target_of(cls, ctx.session.src)
    if owner is not None and "__init__" in vars(cls) and target_of(vars(cls)["__init__"], ctx.session.src) == f"{owner}.__init__":
        return (f"{owner}.__init__", "the model's constructor: it runs in every program that builds the model (the harness and "
                "the program's own scripts) before any of its code is traced")
    own = [r for r in ctx.evidence.own_regions or []  # a call (never a decorator: its function is the compiled code)
           if r.idle is None and r.site is not None and not r.code.startswith("@") and r.covers[0] != "function"]
    if len(own) == 1 and ctx.evidence.own_compiled_modules:
        # the program's own compile runs in the harness: the line goes in the function that holds it,
        # before the call, so it takes effect for that compile in the program's own scripts too
        return (own[0].site, f"the function that holds the program's own compile ({own[0].text}): it runs before that "
                "compile traces anything, in the harness and in the program's own scripts")
    spec = ctx.session.spec
    return (f"{spec.file}::{spec.model}", "the harness's model function: the model class has no __init__ of its own under SRC, "
            "and the search runs only the harness")


def covers(cand: Any, finding: Any, ctx: Any, own_measured: bool) -> bool:
    """Whether ``cand`` compiles the code ``finding`` (a graph break) is in."""
    from ..locate import names_reached, unit_target

    if own_measured:  # the rung ran the program's own compile, which the harness runs: the break is in it
        return True
    compiles = [a for a in cand.plan.actions if a.action == "compile"]
    if not compiles:
        return False
    model, _, _ = ctx.reference()
    model_target = unit_target(type(model), ctx.session.src)
    blocks = ctx.evidence.blocks
    block = blocks[0] if blocks else None
    chain = [*finding.callers, finding.function] if finding.function else list(finding.callers)
    for a in compiles:
        if a.strategy in ("whole", "nested") or a.target == model_target:
            return True
        qual = a.target.split("::", 1)[1] if "::" in a.target else a.target.rsplit(":", 1)[-1]
        if qual in chain or f"{qual}.forward" in chain:
            return True
        if block is not None and block.get("target") and a.target == block["target"] and finding.function:
            # a helper the block's forward calls (by name, or a method of one of its submodules)
            reached = names_reached(ctx.session.src / block["target"].split("::", 1)[0], f"{qual}.forward")
            classes = {type(m).__name__ for m in block["modules"][0].modules()} if block.get("modules") else set()
            if finding.function.rsplit(".", 1)[-1] in reached or ("." in finding.function and finding.function.split(".", 1)[0] in classes):
                return True
    return False


def _source_set(ctx: Any) -> dict[str, str]:
    """``key -> file:line`` for each knob SRC's own code sets to True (the files the search parsed
    for the compile setup, ``ctx.evidence.own_parsed``): assignment statements
    ``<name>._dynamo.config.KEY = True`` anywhere in a file, read from its syntax tree, so a line in
    a docstring or string, or a conditional value (``= True if fast else False``), is none."""
    found: dict[str, str] = {}
    for rel, facts, _ in ctx.evidence.own_parsed or []:
        for key, line in config_set_true(facts.module.code):
            found.setdefault(key, f"{rel}:{line}")
    return found


def _already_set(ctx: Any) -> dict[str, str]:
    """``key -> where`` for each :data:`rewriter.plan.DYNAMO_CONFIG_KEYS` knob the program runs
    with set to True. Read as it ran where that reading exists (``ctx.evidence.dynamo_config``,
    :func:`..dynamo_settings.read` after setup; a computed value such as ``= cfg["scalars"]``
    included), each named ``set at file:line`` where a line of SRC sets it (:func:`_source_set`),
    else ``set as it ran, by a value it computes``; where the run was not read (None), the source
    reading alone (``set at file:line``)."""
    source = _source_set(ctx)
    ran = ctx.evidence.dynamo_config
    if ran is None:
        return {k: f"set at {where}" for k, where in source.items()}
    return {s.name: f"set at {source[s.name]}" if s.name in source else "set as it ran, by a value it computes"
            for s in ran if s.name in DYNAMO_CONFIG_KEYS and s.value is True}


def _set_by_program(key: str, where: str, found: list[Any]) -> str:
    """The ``pruned`` line for ``key``, which the program runs with already, beside the breaks
    ``found`` whose reason names it."""
    sites = "; ".join(dict.fromkeys(f.where for f in found))[:200]
    return (f"+{key}: the program runs with torch._dynamo.config.{key} = True already ({where}; read after setup): the "
            f"graph break(s) at {sites} were measured under it, so it does not keep them in the graph and a twin setting "
            "it again would measure the same program")


def config_set_true(code: str) -> list[tuple[str, int]]:
    """``(key, line)`` of every assignment statement in ``code`` that sets a
    :data:`rewriter.plan.DYNAMO_CONFIG_KEYS` knob to the constant True through an attribute chain
    ``<name>._dynamo.config.KEY`` (``torch._dynamo.config.capture_scalar_outputs = True``; each
    target of ``a = b = True``), source order; ``[]`` where ``code`` does not parse."""
    import ast

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not (isinstance(node.value, ast.Constant) and node.value.value is True):
            continue
        for t in node.targets:
            if (isinstance(t, ast.Attribute) and t.attr in DYNAMO_CONFIG_KEYS
                    and isinstance(t.value, ast.Attribute) and t.value.attr == "config"
                    and isinstance(t.value.value, ast.Attribute) and t.value.value.attr == "_dynamo"
                    and isinstance(t.value.value.value, ast.Name)):
                out.append((t.attr, t.lineno))
    return sorted(out, key=lambda kl: kl[1])


def with_config(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with a config twin before each candidate that compiles a capturable break, and
    what was left out (why). Records ``twin name -> candidate name`` in ``ctx.evidence.config_twins``
    for :func:`judge`."""

    ctx.evidence.config_twins = {}
    have = _already_set(ctx)
    found = capturable_breaks(ctx)
    pruned = [_set_by_program(k, have[k], [f for f, kk in found if kk == k])
              for k in DYNAMO_CONFIG_KEYS if k in have and any(kk == k for _, kk in found)]
    breaks = [(f, k) for f, k in found if k not in have]
    if not breaks:
        return cands, pruned
    gb = ctx.results["graph_breaks"]
    own_measured = "program's own" in str(gb.measurement.get("source", ""))
    target, why_there = config_target(ctx)
    by_function: dict[str, list[bool]] = {}
    for f in gb.findings:
        if f.function:
            by_function.setdefault(f"{f.file}::{f.function}", []).append(knob_for(f.message) not in (None, *have))
    captured_only = {fn for fn, kinds in by_function.items() if all(kinds)}
    out: list[Any] = []
    twins: dict[str, str] = {}
    keys = {c.key() for c in cands}
    for c in cands:
        covered = [(f, k) for f, k in breaks if covers(c, f, ctx, own_measured and (is_as_is(c.name)))]
        if not covered:
            out.append(c)
            continue
        knobs = [k for k in DYNAMO_CONFIG_KEYS if any(k == kk for _, kk in covered)]
        sites = list(dict.fromkeys(f"{f.where} ({' '.join(f.message.split(' Explanation:')[0].split())[:90]})" for f, _ in covered))
        where = {(f.file, f.line, f.message) for f, _ in covered}  # sites, as the graph-break rung's findings are
        why = (f"graph breaks: {len(where)} graph-break site(s) in code this plan runs compiled that Dynamo keeps in the graph with "
               f"{' and '.join(knobs)} (torch's own hint for them): {'; '.join(sites[:3])}"
               + (f" (+{len(sites) - 3} more)" if len(sites) > 3 else "") + f"; set in {target}, {why_there}")
        action = DynamoConfigAction(action="dynamo_config", target=target, settings=DynamoSettings(**{k: True for k in knobs}), why=why)
        kept = [a for a in c.plan.actions
                if not (a.action == "disable" and a.target in captured_only and (a.why or "").startswith("graph break"))]
        plan = c.plan.model_copy(update={"actions": [action, *kept]})
        base = c.name if any(a.action == "disable" for a in kept) else c.name.replace("+disable", "")
        twin = Candidate(base + "".join(f"+{k}" for k in knobs), plan, list(c.notes))
        place_twin(out, keys, twins, twin, c)
    if not twins:
        where = "; ".join(dict.fromkeys(f.where for f, _ in breaks))[:200]
        source = _source_set(ctx)
        knobs = [k for k in DYNAMO_CONFIG_KEYS if any(k == kk for _, kk in breaks)]
        pruned.append(
            f"+{'+'.join(knobs)}: graph break(s) at {where} that {' and '.join(knobs)} keeps in the graph, in code no measured "
            "candidate compiles (the program's own compile of it is in a script the harness does not run, or every compile "
            "of it was pruned); set it before that compile runs"
            + ("".join(f"; the program's source sets {k} = True at {source[k]}, which the harness's run did not have set "
                       "(read after setup)" for k in knobs if k in source)))
    ctx.evidence.config_twins = twins
    return out, pruned


def _graphs(row: dict[str, Any]) -> Any:
    return (row.get("compile") or {}).get("unique_graphs")


def _breaks_seen(row: dict[str, Any]) -> int | None:
    """The graph breaks a measured row saw: Dynamo's ``counters["graph_break"]`` total or, when more,
    the distinct break sites of its graph-break log (``compile.graph_break_sites``): a jump on a
    value the config captured is logged but not counted (torch 2.13, measured). None when the row
    has no compile measurement."""
    comp = row.get("compile")
    if not comp or comp.get("graph_breaks") is None:
        return None
    return max(int(comp["graph_breaks"]), len(comp.get("graph_break_sites") or []))


def _breaks_said(row: dict[str, Any], seen: int) -> str:
    """``seen`` (:func:`_breaks_seen`) in words: where the graph-break log recorded more break sites
    than Dynamo's counter (the candidates table's graph-breaks column), both, so the status does
    not contradict that column."""
    counted = int(row["compile"]["graph_breaks"])
    if seen == counted:
        return f"{seen} graph break(s) seen"
    return (f"{seen} graph break(s) seen: Dynamo's counter {counted}, its graph-break log "
            f"{len(row['compile'].get('graph_break_sites') or [])} site(s)")


def judge(ctx: Any, rows: dict[str, dict[str, Any]]) -> list[str]:
    """After measurement: a config twin (:func:`with_config`) that saw no fewer graph breaks than the
    candidate it came from (:func:`_breaks_seen` over the harness's shapes, from Dynamo's counters
    and graph-break log in its child) is marked ``skipped`` in ``rows`` (so :func:`..decide.decide` never
    chooses it); returns one line per twin pruned so, for the report's ``pruned``. Rows not both
    measured without a problem are left to the decision as they are."""
    lines: list[str] = []
    for name, row, base, ref in measured_pairs(rows, ctx.evidence.config_twins):
        seen, seen0 = _breaks_seen(row), _breaks_seen(ref)
        if seen is None or seen0 is None or seen < seen0:
            continue
        row["skipped"] = (f"pruned after measurement: the config kept no graph break in the graph ({_breaks_said(row, seen)}, "
                          f"{_graphs(row)} graph(s), vs {seen0} and {_graphs(ref)} for {base!r} without it); a process-wide "
                          "knob that changes nothing is not planned")
        lines.append(f"{name}: {row['skipped']}")
    return lines


KIND = CandidateKind("capture_config", 10, with_config, judge, when_compiles_pruned=False)
