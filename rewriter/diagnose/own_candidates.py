"""Candidates that change the program's own compile, measured like any other (docs/design.md, "The
search": "Changing the program's own compile is a candidate like any other").

Each is a ``compile`` action with ``own_call`` (:mod:`rewriter.actions.own_call`): the program's
call is edited where it is, no second compile is added, so every one composes with the program.

* ``as-is+regional``: the program's whole-model call turned into regional compilation at the call
  site (``for block in model.layers: block.compile(...)``, the call's keyword arguments kept), or
  the library's own ``compile_repeated_blocks`` where the model has one (diffusers' ``ModelMixin``).
  Source: PyTorch tutorial "Reducing torch.compile cold start compilation time with regional
  compilation"; diffusers docs, "Regional compilation".
* ``as-is+dynamic``: ``dynamic=True`` on the program's call where the recompiles rung saw an input
  dim vary across the harness's shapes (the recompile automatic dynamic shapes pays is not paid).
* ``as-is+no-fullgraph``: ``fullgraph=False`` on the program's call where that compile raised
  with ``fullgraph=True`` (:mod:`.own_raised`); every other variant then drops ``fullgraph=True``
  too, since it would raise as the program does, but ``as-is+regional`` where every graph break the
  graph-breaks rung found lies outside the repeated block (:func:`_breaks_outside_blocks`): the
  blocks' compiles never trace those breaks, so they keep the call's ``fullgraph=True``.
* ``as-is+no-compile``: ``disable=True`` on every call of the program's own compile the harness
  runs: the program with its compile off (``torch.compile``'s own switch, its options kept), where
  the search measures a gain. The decision's net counts the program's own compile per start
  (:func:`.decide.extra_compile_s`), so a compile that costs more per start than its step saves
  over the deployment is taken off, and one that does not pay back its step is said so
  (partitioning-the-stack: a GEMM-dominated model's compile "will return ~1.0x").
* ``as-is+compile-on``: ``disable=False`` on each of the program's calls that pass ``disable=True``
  (:func:`.own_compile.off_compiles`: a tree whose compile a plan turned off, ``as-is+no-compile``
  applied) and that the harness runs (:func:`runs_off_compile`): the program's compile back on, its
  options as written. It compiles, so it pays its compile per start in the decision's net like
  any compiling candidate; a compile the plan would add over the same code instead is refused
  (:meth:`.candidates.OwnScope.off_conflict`).
* ``as-is+static``: ``dynamic=False`` on the program's whole-model call where only an image's or
  latent's resolution varies (:mod:`.kinds.static_shapes`: one static graph per resolution instead
  of automatic dynamic's symbolic recompile, which on a UNet cost several times the first compile);
  measured whatever the search's budget, covered past its deadline by the program's own compile
  (:meth:`rewriter.engine.measure._Run.bounded`).

A variant is proposed only where the harness's model runs the program's compile (otherwise the
engine would measure the program without it, and a variant of it could not be measured) and the
rewrite can edit the call (:attr:`.own_compile.OwnCompile.refused`); where not, why is returned
for the report's ``pruned``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..engine.watch import unwrapped
from ..plan import CompileAction
from .candidate import AS_IS, NO_GAIN_BACKENDS, as_is
from .evidence import where_raised
from .model_calls import CALL_DEPTH

REGIONAL = as_is("regional")
NO_FULLGRAPH = as_is("no-fullgraph")
DYNAMIC = as_is("dynamic")
STATIC = as_is("static")
NO_COMPILE = as_is("no-compile")
COMPILE_ON = as_is("compile-on")


def compiled_modules_of(ctx: Any) -> list[dict[str, Any]]:
    """The harness's model's compiled modules (:func:`rewriter.engine.watch.compiled_modules`),
    read once from the reference model (no call of it)."""
    if ctx.evidence.own_compiled_modules is None:
        from ..engine.watch import compiled_modules

        model, _, _ = ctx.reference()
        ctx.evidence.own_compiled_modules = compiled_modules(model)
    return ctx.evidence.own_compiled_modules


def regional_path(ctx: Any) -> tuple[str | None, str]:
    """``(path, why)``: the ``own_call.regional`` value for the harness's model (the repeated blocks'
    container path relative to the model, or ``compile_repeated_blocks`` where the model is a
    library model that declares its repeated blocks), or ``(None, why not)``."""
    from ..actions.own_call import REPEATED_BLOCKS

    model, _, _ = ctx.reference()
    inner = unwrapped(model)
    if callable(getattr(inner, REPEATED_BLOCKS, None)) and getattr(inner, "_repeated_blocks", None):
        return REPEATED_BLOCKS, f"{type(inner).__name__}.{REPEATED_BLOCKS} (the library's own regional compile)"
    blocks = ctx.evidence.blocks
    if not blocks:
        return None, "no repeated block in the model"
    block = blocks[0]
    if len(block.get("containers") or []) > 1:
        return None, (f"the repeated {block['cls'].__name__} sits in {len(block['containers'])} containers; one loop at the "
                      "call site would compile only one of them")
    name = ".".join(p for p in (block.get("name") or "").split(".") if p != "_orig_mod")
    if not name or name == "<root>":
        return None, f"the model itself is the container of its {block['cls'].__name__} blocks"
    apart = _not_only_the_blocks(inner, name, block)
    if apart is not None:
        return None, apart
    return name, f"each {block['cls'].__name__} in {name}"


def _not_only_the_blocks(model: Any, name: str, block: dict[str, Any]) -> str | None:
    """Why the regional loop over ``model.<name>`` would not compile exactly ``block``'s instances,
    or None. The rewrite walks a ``ModuleList``/``Sequential`` as it is, a ``ModuleDict``'s
    ``.values()``, a container whose class the source does not say by ``.children()``
    (:func:`rewriter.compile_facts.regional_iterable`); each yields the container's child modules,
    which must then be the blocks and nothing else."""
    import torch.nn as nn

    container = model.get_submodule(name)
    cls = block["cls"].__name__
    if not isinstance(container, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
        return (f"the repeated {cls} blocks are not held in a ModuleList, Sequential or ModuleDict at {name} "
                f"(a {type(container).__name__}): a loop over it would not compile each block")
    mine = {id(m) for m in block["modules"]}
    others = sorted({type(c).__name__ for c in container.children() if id(c) not in mine})
    if others:
        return (f"{name} holds {', '.join(others)} beside its {cls} blocks: a loop over it would compile "
                "those too")
    return None


def variants(ctx: Any, scope: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``(name, Decision)`` for each variant of the program's own whole-model compile (see the
    module docstring); what cannot be proposed is appended to ``pruned`` with why."""
    if ctx.evidence.own_raised is not None:
        return _fullgraph_off(ctx, scope, pruned) + _variants(ctx, scope, pruned)
    return _variants(ctx, scope, pruned)


def compile_off(ctx: Any, scope: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+no-compile``: ``disable=True`` on each of the program's own calls the harness runs,
    one action each (the program with compilation off, as the search measures it where that compile
    raises). Proposed only where the search measures a gain: with a backend that does not optimise
    (:data:`.candidate.NO_GAIN_BACKENDS`) the ladder's order decides among the candidates, and the
    first that does not fail would take the program's compile off untimed. Where one call the
    harness runs cannot be edited, none is: the program would keep part of its compile."""
    from .planner import Decision, _plan

    if ctx.backend in NO_GAIN_BACKENDS:
        pruned.append(f"{NO_COMPILE}: backend {ctx.backend} does not optimise, so what the program's own compile gains "
                      "over compilation off is not measured")
        return []
    actions: list[CompileAction] = []
    for own, strategy in _calls_run(ctx, scope):
        refused = own.can("disable")
        if refused:
            pruned.append(f"{NO_COMPILE}: {own.text}: {refused}")
            return []
        actions.append(CompileAction(
            action="compile", target=own.site, strategy=strategy, own_call={"disable": True},
            why=f"the program's own compile ({own.text}) turned off (disable=True, its options kept): the program "
                "with compilation off, against the program as it is with its compile cost per start counted"))
    return [(NO_COMPILE, Decision(_plan(ctx.session.spec, ctx, actions), []))] if actions else []


def compile_on(ctx: Any, scope: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+compile-on``: ``disable=False`` on each of the program's calls that pass
    ``disable=True`` (:attr:`.candidates.OwnScope.off`), one action each (``whole`` for a call that
    covers the whole model, ``region`` for a block's or a function's): ``torch.compile``'s own switch
    back on, its other options as written, so the round trip with ``as-is+no-compile`` gives the
    program's bytes back. Proposed whatever the backend: it is a compile like ``whole``, measured
    (or, on a backend that does not optimise, run for failures) as every compiling candidate is.
    A call that compiles nothing once on (:attr:`.own_compile.OwnCompile.idle`), one the harness
    does not run (:func:`runs_off_compile`) and one the rewrite cannot edit are left off, each said
    in ``pruned``."""
    from .planner import Decision, _plan

    actions: list[CompileAction] = []
    for own, extent in scope.off:
        if own.idle:
            pruned.append(f"{COMPILE_ON}: {own.text}: {own.idle}")
            continue
        if not runs_off_compile(ctx, own):
            model_fn = _model_function_site(ctx) or f"{ctx.session.spec.file}::{ctx.session.spec.model}"
            pruned.append(f"{COMPILE_ON}: the harness does not run the program's call {own.text} (it is not in "
                          f"the harness's model function {model_fn}, a function of SRC it calls (read up to "
                          f"{CALL_DEPTH} calls deep), a method of the model's classes or a decorator in their "
                          "source), so turning it back on would not be measured")
            continue
        refused = own.can("disable")
        if refused:
            pruned.append(f"{COMPILE_ON}: {own.text}: {refused}")
            continue
        if any(a.target == own.site for a in actions):
            continue  # one call, run for each block: one edit
        actions.append(CompileAction(
            action="compile", target=own.site, strategy="whole" if extent == "whole" else "region",
            own_call={"disable": False},
            why=f"the program's own compile ({own.text}) passes disable=True and compiles nothing: turned back on "
                "(disable=False, its options as written), against the program as it is with its compile cost per start "
                "counted" + _run_through(ctx, own)))
    return [(COMPILE_ON, Decision(_plan(ctx.session.spec, ctx, actions), []))] if actions else []


def _run_through(ctx: Any, own: Any) -> str:
    """``"; the harness runs it through a -> b"`` where the call is in a function the harness's
    model function calls (:func:`model_function_calls`), else ``""``."""
    chain = model_function_calls(ctx).get(own.site) if own.site and own.covers[0] != "function" else None
    return f"; the harness runs it through {' -> '.join(chain)}" if chain else ""


def runs_off_compile(ctx: Any, own: Any) -> bool:
    """Whether the harness runs the program's call ``own`` that passes ``disable=True``, read
    statically (it compiles nothing, so the harness's model carries no compile to read at run
    time, as :func:`runs_own_compile` does): a decorator (the model's source carries it), a call
    in the harness's model function (``return torch.compile(model, disable=True)`` in
    ``build_model``, or in the function of another file the harness imports as its model function:
    ``from train import build_model``), a call in a function of SRC the model function calls,
    directly or through others (``return make_net()`` where ``make_net`` holds the call, in the
    same file or another: :func:`model_function_calls`), or a call in a method of a class of the
    harness's model's modules (``self.block = torch.compile(Block(), disable=True)`` in
    ``__init__``). A call in a script the harness does not run (``train.py``'s ``main``) reads
    False: a candidate that edits it would measure the harness's model as it is."""
    if own.covers[0] == "function":
        return not wraps_model(ctx, own)
    if own.site is None:
        return False
    if own.site in _model_functions(ctx) or own.site in model_function_calls(ctx):
        return True
    qual = own.site.split("::", 1)[1]
    if "." not in qual:
        return False
    model, _, _ = ctx.reference()
    return qual.split(".", 1)[0] in {type(m).__name__ for m in unwrapped(model).modules()}


def _model_functions(ctx: Any) -> list[str]:
    """``file.py::qualname`` of the harness's model function as the plan names it
    (``harness.py::build_model``) and, where the harness imports it from another file of SRC,
    where it is defined (:func:`_model_function_site`)."""
    spec = ctx.session.spec
    return list(dict.fromkeys(s for s in (f"{spec.file}::{spec.model}", _model_function_site(ctx)) if s))


def model_function_calls(ctx: Any) -> dict[str, tuple[str, ...]]:
    """``{"file.py::qualname": chain}``: the functions of SRC the harness's model function calls,
    directly or through each other (:func:`.model_calls.calls_from`, from each of
    :func:`_model_functions`), ``chain`` the calls from the model function to it; read once
    (``ctx.evidence.model_calls``)."""
    if ctx.evidence.model_calls is None:
        from .model_calls import calls_from

        ctx.evidence.model_calls = calls_from(ctx.session.src, _model_functions(ctx))
    return ctx.evidence.model_calls


def _model_function_site(ctx: Any) -> str | None:
    """``file.py::qualname`` under SRC of the function the harness calls as its model function,
    where it is defined (:func:`.locate.model_function_target`)."""
    from .locate import model_function_target

    return model_function_target(getattr(ctx.session, "harness", None))


def _calls_run(ctx: Any, scope: Any) -> Any:
    """``(own, strategy)`` for each of the program's own calls that the harness runs, one per call
    site (a per-layer compile, one call run for each block, is one edit): ``whole`` for a
    whole-model call, ``region`` for a block's or a function's."""
    seen: set[str] = set()
    for group, strategy in ((scope.whole, "whole"), (scope.block, "region"), (scope.functions, "region")):
        for own in group:
            if own.site not in seen and runs_own_compile(ctx, own):
                seen.add(own.site)
                yield own, strategy


def _variants(ctx: Any, scope: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    live = list(scope.whole)
    if not live and len({r.where for r in scope.block}) == 1:
        # a per-layer compile (one call, run for each block): only dynamic= applies, at the block boundary
        own = scope.block[0]
        if not runs_own_compile(ctx, own):
            pruned.append(f"{DYNAMIC}: the harness's model does not run the program's own compile ({own.text}), so a "
                          "variant of it would not be measured")
            return []
        return _dynamic(ctx, own, pruned, block=True)
    if len(live) != 1:
        if len(live) > 1:
            pruned.append(f"{REGIONAL}, {DYNAMIC}: the program compiles the model in {len(live)} places; which call to change "
                          "is the program's choice")
        return []
    own = live[0]
    if not runs_own_compile(ctx, own):
        pruned.append(f"{REGIONAL}, {DYNAMIC}: the harness's model does not run the program's own compile ({own.text}), so a "
                      "variant of it would not be measured")
        return []
    out = _regional(ctx, own, pruned)
    out.extend(_dynamic(ctx, own, pruned))
    out.extend(_static(ctx, own, pruned))
    return out


def _regional(ctx: Any, own: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+regional``: the program's whole-model call ``own`` turned into regional compilation at
    its call site (see the module docstring), or why not in ``pruned``. Not for a call with
    ``mode='reduce-overhead'``: the loop passes ``mode=`` on to each block, one CUDA graph per block."""
    from .planner import Decision, _plan

    if own.mode == "reduce-overhead":
        pruned.append(f"{REGIONAL}: the program's own compile ({own.text}) uses mode='reduce-overhead': regional "
                      "compilation would capture one CUDA graph per block, and CUDA graphs over many small regions are "
                      "refused (pytorch#152887)")
        return []
    path, why = regional_path(ctx)
    refused = own.can("regional")
    if path is None or refused:
        pruned.append(f"{REGIONAL}: {why if path is None else 'the call cannot be turned regional: ' + refused}")
        return []
    edits: dict[str, Any] = {**_raising(ctx, own), "regional": path}
    said = _raising_why(ctx, own)
    outside = _breaks_outside_blocks(ctx) if edits.get("fullgraph") is False else None
    if outside:
        del edits["fullgraph"]
        said = (f"; fullgraph=True kept on the blocks: the graph_breaks rung's {outside}, where that call raised, "
                "and the blocks' own compiles never trace it")
    action = CompileAction(
        action="compile", target=own.site, strategy="region", own_call=edits,
        why=f"the program compiles the whole model itself ({own.text}): regional compilation at that call site, "
            f"{why}, its keyword arguments kept (one compile reused across the blocks)" + said)
    return [(REGIONAL, Decision(_plan(ctx.session.spec, ctx, [action]), []))]


def _breaks_outside_blocks(ctx: Any) -> str | None:
    """Where every graph break the graph-breaks rung found lies outside the repeated block (no
    function of the block's class among the frames under SRC that led to it, and none in an
    installed package), those breaks said for the action's ``why:`` (``1 graph break site(s) are
    outside the Block instances (at model.py:20)``); else None: a regional compile that keeps the call's
    ``fullgraph=True`` would raise where a break is inside a block, and where the rung did not run,
    found none, or a break's frames are not all read, nothing says it would not."""
    res = ctx.results.get("graph_breaks")
    blocks = ctx.evidence.blocks
    if res is None or not res.ok or not blocks or not blocks[0].get("target"):
        return None
    cls = blocks[0]["target"].split("::", 1)[1].split(".")[0]
    findings = [f for f in res.findings if f.kind == "graph_break"]
    if not findings or any(f.library is not None or f.file is None or f.function is None for f in findings):
        return None
    if any(q.split(".")[0] == cls for f in findings for q in [*f.callers, f.function]):
        return None
    sites = ", ".join(sorted({f.where for f in findings})[:3])
    return f"{len(findings)} graph break site(s) are outside the {cls} instances (at {sites})"


def _raising(ctx: Any, own: Any) -> dict[str, Any]:
    """``{"fullgraph": False}`` where the program's own compile raised (:mod:`.own_raised`) and the
    call sets ``fullgraph=True``, which every variant of it must then drop to run; else ``{}``."""
    if ctx.evidence.own_raised is None or own.can("fullgraph") is not None:
        return {}
    return {"fullgraph": False} if dict(own.current).get("fullgraph") is True else {}


def _raising_why(ctx: Any, own: Any) -> str:
    """What :func:`_raising` adds, said for the action's ``why:`` (empty where it adds nothing)."""
    return "; fullgraph=False too: with fullgraph=True that compile raised" if _raising(ctx, own) else ""


def _fullgraph_off(ctx: Any, scope: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+no-fullgraph``: ``fullgraph=False`` on each of the program's own calls that sets
    ``fullgraph=True`` and that the harness runs, where the program's compile raised
    (:mod:`.own_raised`; which of its calls raised is not known, so every such call is edited, one
    action each): Dynamo then breaks the graph where it raised and compiles the code around it
    (torch docs, ``torch.compile``: "fullgraph ... If False, ... will attempt to discover
    compileable regions ... to optimize"). The calls it cannot edit are said in ``pruned``."""
    from .planner import Decision, _plan

    raised = ctx.evidence.own_raised
    where = where_raised(raised)
    actions = []
    for own, strategy in _calls_run(ctx, scope):
        if dict(own.current).get("fullgraph") is not True:
            continue
        refused = own.can("fullgraph")
        if refused:
            pruned.append(f"{NO_FULLGRAPH}: {own.text}: {refused}")
            continue
        actions.append(CompileAction(
            action="compile", target=own.site, strategy=strategy, own_call={"fullgraph": False},
            why=f"the program's own compile ({own.text}) raised{where} with fullgraph=True ({raised['message'][:160]}); "
                "fullgraph=False lets Dynamo break the graph there and compile the code around it"))
    return [(NO_FULLGRAPH, Decision(_plan(ctx.session.spec, ctx, actions), []))] if actions else []


def _static(ctx: Any, own: Any, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+static``: ``dynamic=False`` on the program's own whole-model call ``own`` where
    :func:`.kinds.static_shapes.why_not_static` proposes it and the call leaves ``dynamic`` to torch."""
    from .kinds.static_shapes import static_why, varying_dims, why_not_static
    from .planner import Decision, _plan

    var = varying_dims(ctx)
    why = why_not_static(ctx, var)
    if why is not None:
        if why:
            pruned.append(f"{STATIC}: {why}")
        return []
    refused = own.can("dynamic")
    current = dict(own.current).get("dynamic", "?")
    if refused or current is not None:
        pruned.append(f"{STATIC}: " + (refused or f"the program's own compile ({own.text}) already sets dynamic={current!r}"))
        return []
    action = CompileAction(
        action="compile", target=own.site, strategy="whole", own_call={**_raising(ctx, own), "dynamic": False},
        why=f"the program compiles the whole model itself ({own.text}); " + static_why(var) + _raising_why(ctx, own))
    return [(STATIC, Decision(_plan(ctx.session.spec, ctx, [action]), []))]


def _dynamic(ctx: Any, own: Any, pruned: list[str], block: bool = False) -> list[tuple[str, Any]]:
    """``as-is+dynamic``: ``dynamic=True`` on the program's own call ``own`` where the recompiles rung
    saw a dim vary across the harness's shapes (the block's input dims where ``block``, else the
    model's inputs) or
    a guard on an int argument's value, and the call leaves ``dynamic`` to torch or pins it to
    ``False`` (``dynamic=False`` makes every int argument a constant: one graph per value; torch
    docs, ``torch.compile``: "dynamic ... If False, never generate dynamic kernels"). An int
    *attribute* of an nn.Module is not made symbolic by ``dynamic=True``: that is
    :mod:`.value_guards`' knob."""
    from .planner import Decision, _plan

    measured = ctx.measured("recompiles")
    var = measured.get("varying_block_dims" if block else "varying_input_dims") or []
    values = int(measured.get("value_guard_recompiles") or 0)
    refused = own.can("dynamic")
    current = dict(own.current).get("dynamic", "?")
    if not var and not (values > 0 and current is False):
        return []  # nothing varies across the harness's shapes: dynamic= has nothing to save
    if refused:
        pruned.append(f"{DYNAMIC}: {refused}")
        return []
    if current not in (None, False):
        pruned.append(f"{DYNAMIC}: the program's own compile ({own.text}) already sets dynamic={current!r}")
        return []
    what = ", ".join(sorted({f"{'block arg' if block else 'input'} {v.get('arg', v.get('tensor'))} dim {v['dim']}" for v in var}))
    if not what:
        what = f"{values} recompile(s) on an int argument's value under dynamic=False"
    action = CompileAction(
        action="compile", target=own.site, strategy="region" if block else "whole",
        own_call={**_raising(ctx, own), "dynamic": True},
        why=f"recompiles: {what} across the harness's shapes; dynamic=True on the program's own call ({own.text}) "
            "asks Dynamo for one dynamic graph instead of one per size or value" + _raising_why(ctx, own))
    return [(DYNAMIC, Decision(_plan(ctx.session.spec, ctx, [action]), []))]


def standin(ctx: Any, scope: Any, pruned: list[str]) -> Any:
    """The program's one whole-model compile where the harness does not run it (``model =
    torch.compile(model)`` in ``train.py``'s ``main``, which the harness never imports); else None.

    Such a compile cannot be measured in place, so it is measured through its stand-ins on the
    harness's model: the ``whole`` candidate (the same whole-model compile) stands for it, and,
    where its call can be turned regional, the ``per-block`` candidates for its regional form;
    :func:`translate` writes the choice as an edit of the program's call (no second compile). Where
    it cannot be turned regional (no repeated block, blocks in two containers, a call the rewrite
    cannot edit that way), ``ctx.evidence.own_standin_path`` is ``(None, why)``: 'whole' is still
    measured for it (a ``fullgraph=True`` call that raises at the breaks the ladder found must get
    its ``fullgraph=False``), and any other compile would compile its code a second time
    (:attr:`.candidates.OwnScope.whole_only`). Why it is not regional is said in ``pruned``."""
    if len(scope.whole) != 1 or scope.block or scope.functions or scope.runs:
        return None
    own = scope.whole[0]
    if own.covers[0] == "function" and not wraps_model(ctx, own):
        return None  # a decorator in the model's source: the harness runs it
    path, why = regional_path(ctx)
    refused = own.can("regional")
    if path is None or refused:
        why = why if path is None else refused
        pruned.append(f"{REGIONAL}: the program's own compile ({own.text}) is not run by the harness and cannot be turned "
                      f"regional: {why}")
        path = None
    ctx.evidence.own_standin_path = (path, why)
    return own


def translate(ctx: Any, out: Any, own: Any) -> str | None:
    """The search's choice, where it was measured through :func:`standin`'s stand-ins, written as
    an edit of the program's own call: a per-block choice becomes ``own_call: {regional: ...}`` on
    the program's call (its other actions kept: they compose with the regional form); a
    whole-model choice is the program's compile as it is (the compile action is dropped). Changes
    the chosen candidate's plan in place and returns the note for the report, or None."""
    cand = out.chosen
    if cand is None or cand.name == AS_IS:
        return None
    compiles = [a for a in cand.plan.actions if a.action == "compile"]
    if not compiles:
        return None
    rest = [a for a in cand.plan.actions if a.action != "compile"]
    rows = out.rows
    row = rows.get(cand.name) or {}
    whole = rows.get("whole") or {}

    def figures(r: dict[str, Any]) -> str:
        cs = r.get("compile_s_per_start")
        return (f"{r.get('step_ms'):.3f} ms/step" if r.get("step_ms") is not None else "not timed") + (
            f", {cs:.2f} s compile per start" if cs is not None else "") + f", {(r.get('compile') or {}).get('unique_graphs', '?')} graph(s)"

    file = own.where.rsplit(":", 1)[0]
    off, off_why = _standin_breaks(ctx, own)
    if len(compiles) == 1 and compiles[0].strategy == "whole" and compiles[0].options.dynamic is False and own.can("dynamic") is None:
        # the stand-in 'whole+static' won: its dynamic=False goes on the program's own call
        action = CompileAction(action="compile", target=own.site, strategy="whole", own_call={**off, "dynamic": False},
                               why=f"the program compiles the whole model itself ({own.text}) in {file}, which the harness does "
                                   f"not run: measured through its stand-in {cand.name!r} ({figures(row)}) against 'whole' "
                                   f"({figures(whole)}); {compiles[0].why}{off_why}")
        cand.plan = cand.plan.model_copy(update={"actions": [action, *rest]})
        return (f"the program's own whole-model compile ({own.text}) is in {file}, which the harness does not run: the search "
                f"measured it through its stand-in {cand.name!r} and writes dynamic=False on that call")
    if any(a.strategy in ("whole", "nested") for a in compiles) and off:
        # the stand-in ran without the call's fullgraph=True, which raises at the breaks the ladder found
        action = CompileAction(action="compile", target=own.site, strategy="whole", own_call=off,
                               why=f"the program compiles the whole model itself ({own.text}) in {file}, which the harness does "
                                   f"not run: measured through its stand-in {cand.name!r} ({figures(row)}){off_why}")
        cand.plan = cand.plan.model_copy(update={"actions": [action, *rest]})
        return (f"the program's own whole-model compile ({own.text}) is in {file}, which the harness does not run: the search "
                f"measured it through its stand-in {cand.name!r}, which breaks the graph where that call's fullgraph=True "
                "raises: the plan sets fullgraph=False on that call")
    if any(a.strategy in ("whole", "nested") for a in compiles):
        cand.plan = cand.plan.model_copy(update={"actions": rest})
        unwritten = any(a.options.dynamic is False for a in compiles)  # own.can("dynamic") refused it above
        return (f"the program's own whole-model compile ({own.text}) is in {file}, which the harness does not run; measured "
                f"through its stand-in {cand.name!r} on the harness's model ({figures(row)}), " + (
                    f"whose dynamic=False cannot be set on that call ({own.can('dynamic')}): it is kept as it is" if unwritten
                    else "it is the best plan: it is kept as it is"))
    path, why = ctx.evidence.own_standin_path or (None, "")
    if path is None:
        return None
    # the options the stand-in was measured with (fullgraph, mode, dynamic), where the call can take them
    options = compiles[0].options.non_default() if len(compiles) == 1 else {}
    carried = {k: v for k, v in options.items() if k in ("fullgraph", "mode", "dynamic") and own.can(k) is None}
    action = CompileAction(
        action="compile", target=own.site, strategy="region", own_call={**off, **carried, "regional": path},
        why=(f"the program compiles the whole model itself ({own.text}) in {file}, which the harness does not run: measured "
             f"through stand-ins on the harness's model, its regional form ({cand.name!r}: {figures(row)}) and the "
             f"whole-model compile ('whole': {figures(whole)}), the search chose the regional form; regional compilation "
             f"at that call site, {why}{off_why}"))
    cand.plan = cand.plan.model_copy(update={"actions": [action, *rest]})
    return (f"the program's own whole-model compile ({own.text}) is in {file}, which the harness does not run: the search "
            f"measured it through stand-ins ('whole' for it, {cand.name!r} for its regional form) and writes the choice "
            "as an edit of that call")


def _standin_breaks(ctx: Any, own: Any) -> tuple[dict[str, Any], str]:
    """``({"fullgraph": False}, why)`` where the program's call that stand-ins measure sets
    ``fullgraph=True`` and the graph-breaks rung found breaks in the model: that call raises at
    them (``fullgraph=True``: "raise an error on a graph break", torch docs, ``torch.compile``),
    and the stand-ins, stackpart's own compiles, broke the graph there instead; else ``({}, "")``."""
    m = ctx.measured("graph_breaks")
    n = int(m.get("graph_break_count") or 0) + int(m.get("frame_skipping_breaks") or 0)
    if not n or dict(own.current).get("fullgraph") is not True or own.can("fullgraph") is not None:
        return {}, ""
    sites = sorted({f.where for f in ctx.results["graph_breaks"].findings if f.file})[:3]
    return {"fullgraph": False}, (f"; fullgraph=False: the graph_breaks rung found {n} graph break(s)"
                                  + (f" (at {', '.join(sites)})" if sites else "") + ", where that call's fullgraph=True raises")


def standin_raises(ctx: Any, own: Any) -> dict[str, Any] | None:
    """Where the program's call that stand-ins measure raises as it is (``fullgraph=True`` over the
    breaks the graph-breaks rung found, :func:`_standin_breaks`): the evidence
    :func:`.decide.when_as_is_raises` reads (``message``, ``path``, ``line`` of the first break,
    ``hint``), else None. The search's ``as-is`` row is then the program with compilation off, a
    baseline and never the plan: keeping that call as it is keeps a program that raises."""
    off, _ = _standin_breaks(ctx, own)
    if not off:
        return None
    sites = [f for f in ctx.results["graph_breaks"].findings if f.file]
    first = sites[0] if sites else None
    return {"message": f"{own.text} sets fullgraph=True over the graph break(s) the graph_breaks rung found"
                       + (f" ({' '.join(first.message.split())[:200]})" if first else ""),
            "path": first.file if first else own.where.rsplit(":", 1)[0],
            "line": first.line if first else None,
            "hint": "fullgraph=False on that call lets Dynamo break the graph there, or keep the code at the break eager"}


def runs_own_compile(ctx: Any, own: Any) -> bool:
    """Whether the harness's model runs the program's compile ``own``: a decorator on the model's
    own ``forward`` always does (the class's source carries it); a call does where the model the
    harness builds holds a compiled module (:func:`rewriter.engine.watch.compiled_modules`, the
    reading the run-time report uses). A call in a script the harness does not run is not measured by
    the engine's children, so no variant of it can be; nor is a compiled free function that calls
    the model (:func:`wraps_model`)."""
    if own.covers[0] == "function":
        return not wraps_model(ctx, own)
    return bool(compiled_modules_of(ctx))


def wraps_model(ctx: Any, own: Any) -> bool:
    """Whether the program's compile ``own`` is on a free function that calls the harness's model
    (``@torch.compile(fullgraph=True)`` on ``train_step(model, x, y, opt)`` calling ``model(x)``,
    :attr:`.own_compile.OwnCompile.calls`): its compile traces the whole model, but the harness
    builds and calls the model itself and never that function, so it is measured through
    stand-ins (:func:`standin`) like a ``torch.compile(model)`` in a script the harness does not run."""
    if own.covers[0] != "function" or "." in own.covers[1].split("::", 1)[1]:
        return False
    model, _, _ = ctx.reference()
    return type(unwrapped(model)).__name__ in (own.calls or ())
