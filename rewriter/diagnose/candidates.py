"""The search's candidates: complete plans proposed from the ladder's evidence (DESIGN.md, "The search").

Each candidate is every action its plan would hold, built by the planner's own rules with the unit
forced (:func:`.planner.plan`): the rule's proposal first, then

* ``as-is``: the program as it runs, no action (the baseline every other candidate is measured
  against; the eager reference's own run, not a second process);
* ``kernel``: only the ``kernel`` (and ``allocator``) actions, where the ladder asks for a kernel;
  the allocator action alone is measured apart, by the shape sweep with and without its setting
  in a fresh process (:func:`.search.measure_allocator_candidate`);
* ``per-block``: the repeated block compiled as its own region, bare; ``+disable``: with the
  ``disable``s the graph-break and per-instance rungs imply; ``+mark_dynamic``: with the marks the
  recompiles rung implies at the block boundary;
* ``nested+whole``: ``nested_compile_region`` on the block plus one whole-model compile (torch >= 2.8);
  the same on a callee Dynamo inlined many times into one frame (a loop over ``self.step``), and
  ``as-is+nested``, those regions inside the program's own whole-model compile
  (:func:`nested_callees`);
* ``whole``: the model's entry compiled whole (automatic dynamic shapes);
* ``whole+cudagraphs``: ``mode="reduce-overhead"``, on CUDA where the shapes are stable or the
  harness has at most :data:`CUDAGRAPH_SHAPES` of them (one recording each, said in the ``why``);
* ``as-is+reduce-overhead``: where the program compiles the whole model itself, the same mode set
  on the program's own call (``compile`` with ``own_call``: that call's options are edited, no
  second compile; :func:`own_call_candidates`), on the same conditions;
* ``as-is+no-compile`` / ``as-is+compile-on``: the program's own compile turned off
  (``disable=True``) or, where its calls pass ``disable=True``, turned back on
  (:func:`own_compile_off`, :func:`.own_candidates.compile_on`);
* ``+bucket``: where one input dim varies across the harness shapes, per-block and (on CUDA) whole
  with CUDA graphs again with that dim padded to power-of-two buckets (``bucket``, unsafe: correct
  only where padding cannot change the kept outputs, e.g. a causal model padded on the right; the
  engine's numerics decide);
* the rule's proposal without its ``kernel`` action, where it has one (the kernel is measured,
  not assumed);
* ``+capture_scalar_outputs`` / ``+capture_dynamic_output_shape_ops``: a twin of each candidate
  that compiles code the graph-break rung found a scalar read (``.item()``, ``.tolist()``) or a
  dynamic-output-shape op (``nonzero``, ``unique``, a boolean mask) in, with the ``dynamo_config``
  action torch's own break message recommends instead of the break (and instead of a ``disable``
  that only kept that break eager), placed just before it (:mod:`.kinds.config`; pruned after
  measurement when it captured no fewer graphs);
* ``+mask-eager``: a twin of the first whole-model candidate of each mode with transformers' attention-mask
  builders kept eager, where the graph-break rung's trace passes SDPA a mask one eager forward does
  not (:mod:`.kinds.mask`).

Candidates with the same action set are one candidate (its first name). What is left out, and
why, is returned as ``pruned`` for the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.watch import unwrapped
from ..plan import BucketAction, CompileAction, CompileOptions, GenerationAction, Plan
from .candidate import AS_IS, NESTED_OWN, WHOLE, Candidate, as_is
from .context import Context
from .planner import plan as rule_plan
from .rungs import batch_scaling, op_mix
from .rungs.recompiles import shapes_stable



def nested_supported() -> bool:
    """``torch.compiler.nested_compile_region`` exists (torch >= 2.8)."""
    import torch

    return hasattr(torch.compiler, "nested_compile_region")


def _nested(ctx: Context, region: Plan, whole: Plan) -> Plan | None:
    """``nested_compile_region`` on the block + the whole-model compile; the region plan's
    ``disable``s kept, its marks dropped (``mark_dynamic`` inside the compiled model is forbidden)."""
    blocks = [a for a in region.actions if a.action == "compile"]
    wholes = [a for a in whole.actions if a.action == "compile"]
    if not blocks or not wholes:
        return None
    keep = [a for a in region.actions if a.action not in ("compile", "mark_dynamic")]
    # every block the region plan compiles (a model's declared _repeated_blocks may be several classes)
    nested = [CompileAction(action="compile", target=b.target, strategy="nested",
                            why="nested_compile_region: the block traced once inside one whole-model graph") for b in blocks]
    whole_c = wholes[0].model_copy(update={"options": CompileOptions()})
    return region.model_copy(update={"actions": keep + nested + [whole_c]})


def _is_compile(code: str) -> bool:
    """Whether a setup line compiles (``@torch.compile``, ``torch.compile(...)``,
    ``module.compile(...)``), not a mark or a disable (``@torch.compiler.disable``)."""
    return re.search(r"\bcompile(\(|$)", code) is not None


@dataclass
class OwnScope:
    """The program's own compiles (:class:`.own_compile.OwnCompile`) read against the harness's
    model: which cover the whole model, which the repeated block, which a function of SRC.

    A compile whose value cannot be read (``unknown``), or of a class that is neither the model's
    nor the block's, counts as covering the whole model: what it compiles may hold any of it. A
    compiled function covers what it calls (:attr:`.own_compile.OwnCompile.calls`): one that calls
    the model (``train_step`` calling ``model(x)``) covers the whole model, one that calls the block
    the block, and any other class or function of SRC it calls is inside it (:meth:`in_function`)."""

    whole: list[Any] = field(default_factory=list)
    block: list[Any] = field(default_factory=list)
    functions: list[Any] = field(default_factory=list)
    block_cls: str | None = None
    #: The repeated block's plan target: ``file.py::Class`` under SRC, else an installed package's
    #: ``module:Class`` (a compile of either is a second compile of a block the program compiles).
    block_target: str | None = None
    block_reached: set[str] = field(default_factory=set)
    #: Class names of the block's own submodules (``Experts`` of an MoE layer), read at run time.
    block_classes: set[str] = field(default_factory=set)
    #: The program's compiles that compile nothing it runs (:attr:`.own_compile.OwnCompile.idle`):
    #: nothing composes with them, so they prune nothing.
    idle: list[Any] = field(default_factory=list)
    #: The harness's model carries a compiled module (the program's compile runs in the harness).
    runs: bool = False
    #: ``file.py::Class`` of the modules that hold the repeated blocks (a compile of one holds them).
    block_owners: set[str] = field(default_factory=set)
    #: The class names the program's ``compile_repeated_blocks`` compiles (the model's declared
    #: ``_repeated_blocks``), whatever the target spells them as (``model.py::Block``, a library's
    #: ``pkg.module:Block``): a compile of one of them is a second compile of it.
    declared_names: set[str] = field(default_factory=set)
    #: ``(own, why)`` where the program's whole-model compile ``own`` is measured through its
    #: stand-in 'whole' alone (:func:`.own_candidates.standin`: the harness does not run it and its
    #: call cannot be turned regional, ``why``): any compile but a whole-model one would compile its
    #: code a second time, since no edit of that call can write it.
    whole_only: tuple[Any, str] | None = None
    #: ``(own, extent)`` for each of the program's compile calls that passes ``disable=True``
    #: (:func:`.own_compile.off_compiles`), ``extent`` ``whole``, ``block`` or ``functions`` read as
    #: a compile's is: no compile now, so nothing composes with it as with a compile; a plain
    #: compile of the same extent is refused (:meth:`off_conflict`), and turning it back on is
    #: :func:`.own_candidates.compile_on`'s candidate.
    off: list[tuple[Any, str]] = field(default_factory=list)
    #: :attr:`declared_names` for an :attr:`off` ``compile_repeated_blocks`` call
    off_declared: set[str] = field(default_factory=set)
    #: The program's compiled functions (:attr:`functions`) that the repeated block ran inside at
    #: run time where the source does not say they call it: the model passed in as a parameter
    #: (gpt-fast's ``decode_one_token(model, x, input_pos)`` compiled at module level). The
    #: profile rung found no range of the block's instances
    #: (:attr:`.rungs.profile.ProfileData.blocks_unranged`), so they ran in the program's compiled
    #: frame and Dynamo inlined them: a compile of the block there would receive no graph.
    around_block: list[Any] = field(default_factory=list)
    #: ``(inside, instances)``: how many of the block's instances ran inside :attr:`around_block`.
    around_count: tuple[int, int] = (0, 0)

    @classmethod
    def of(cls, ctx: Context, regions: list[Any], off: list[Any] | None = None) -> "OwnScope":
        scope = cls()
        if not regions and not off:
            return scope
        from .locate import library_target_of, names_reached

        model, _, _ = ctx.reference()
        model_cls = type(model).__name__
        blocks = ctx.evidence.blocks
        block = blocks[0] if blocks else None
        attrs: set[str] = set()
        if block is not None:
            first = block["modules"][0] if block.get("modules") else None
            # the program's torch.compile(block) wraps each block in an OptimizedModule: the block is its _orig_mod
            scope.block_cls = type(unwrapped(first)).__name__ if first is not None else block["cls"].__name__
            scope.block_owners = {t for t in [block.get("owner_target"), *(c.get("owner_target") for c in block.get("containers") or [])] if t}
            # an installed library's block by its import path, as the planner targets it
            scope.block_target = block["target"] or library_target_of(block["cls"])
            attrs = {block["attr"], *(c["attr"] for c in block.get("containers") or [])}
            scope.block_classes = {type(m).__name__ for m in block["modules"][0].modules()} if block.get("modules") else {scope.block_cls}
            if block["target"]:
                scope.block_reached = names_reached(ctx.session.src / block["target"].split("::", 1)[0],
                                                    block["target"].split("::", 1)[1] + ".forward")
        from .own_candidates import compiled_modules_of

        live = []
        for r in regions:
            (scope.idle if getattr(r, "idle", None) else live).append(r)
        regions = live
        mods = compiled_modules_of(ctx) if regions else []
        scope.runs = bool(mods)
        # the run-time reading where the static one cannot tell: the harness's model compiled
        # only at its repeated blocks is a per-layer compile, not a whole-model one
        per_layer = bool(mods) and scope.block_cls is not None and not any(m["path"] == "<model>" for m in mods) and all(
            m["class"] in scope.block_classes for m in mods)
        for r in regions:
            getattr(scope, scope._extent(r, model_cls, attrs, per_layer)).append(r)
            if r.covers[0] == "declared":  # compile_repeated_blocks: each declared block, in place
                scope.declared_names |= scope._declared(ctx)
        scope._around_block(ctx, block)
        scope.off = [(r, scope._extent(r, model_cls, attrs, False)) for r in off or ()]
        if any(r.covers[0] == "declared" for r, _ in scope.off):
            scope.off_declared = scope._declared(ctx)
        return scope

    def _extent(self, r: Any, model_cls: str, attrs: set[str], per_layer: bool) -> str:
        """Which of :attr:`whole`, :attr:`block` and :attr:`functions` the compile ``r`` belongs to
        (see the class docstring). ``per_layer``: the harness's model is compiled only at its
        repeated blocks (the run-time reading), so a compile whose value the source does not say is
        the block's."""
        kind, what = r.covers
        if per_layer and kind in ("unknown", "class") and what != self.block_cls:
            return "block"
        if kind == "function":
            qual = what.split("::", 1)[1]
            calls = set(getattr(r, "calls", ()) or ())
            # a compiled function that calls the model (a compiled train_step) compiles all of it
            if qual == f"{model_cls}.forward" or model_cls in calls:
                return "whole"
            if self.block_cls and (qual == f"{self.block_cls}.forward" or self.block_cls in calls):
                return "block"
            return "functions"
        if (kind == "class" and what == self.block_cls) or kind == "declared" or (kind == "children" and what in attrs):
            return "block"
        return "whole"

    def _around_block(self, ctx: Context, block: dict[str, Any] | None) -> None:
        """Fill :attr:`around_block` from the profile rung's run-time reading: where the program
        compiles only functions (no whole-model or per-block compile) and instances of the
        repeated block ran with no profiler range of their own, they ran inside one of those
        functions' frames (the only compiled code the program has), however the source passes the
        model to them."""
        profile = ctx.evidence.profile
        if block is None or self.whole or self.block or not self.functions or profile is None:
            return
        instances = list(block.get("instances") or [])
        inside = [n for n in instances if n in set(profile.blocks_unranged)]
        if inside:
            self.around_block = list(self.functions)
            self.around_count = (len(inside), len(instances))

    def _declared(self, ctx: Context) -> set[str]:
        """The class names ``compile_repeated_blocks`` compiles on the harness's model: its declared
        ``_repeated_blocks`` and the repeated block's class."""
        declared = ctx.evidence.declared
        return set(declared.names if declared is not None else []) | ({self.block_cls} if self.block_cls else set())

    def off_conflict(self, action: Any) -> str | None:
        """Why a compile the plan adds (``action``, not an ``own_call`` edit) would compile what one
        of the program's calls turned off (:attr:`off`) compiles once it is on, or None: the same
        function (a decorator or a rebinding on it: the rewrite leaves a target that carries a
        compile alone, and consistency refuses it, :mod:`rewriter.consistency`), the whole model
        (a ``whole`` compile), or the repeated block. Such a compile is the program's own call
        turned back on (``own_call: {disable: false}``, the ``as-is+compile-on`` candidate), and
        beside it would be a second compile of that code as soon as the call is. An idle call
        (:attr:`.own_compile.OwnCompile.idle`) compiles nothing either way and refuses nothing; a
        call in a function's body that no edit can turn back on refuses nothing."""
        for own, extent in self.off:
            if own.idle:
                continue
            same_function = own.covers[0] == "function" and own.covers[1] in (
                action.target, action.target + ".forward", action.target.removesuffix(".forward"))
            if not same_function and own.can("disable") is not None:
                continue
            if same_function:
                what = own.covers[1]
            elif extent == "whole" and action.strategy == "whole":
                what = "the whole model"
            elif extent == "block" and self.block_cls and (
                    action.target == self.block_target or target_class(action.target) == self.block_cls
                    or (own.covers[0] == "declared" and target_class(action.target) in self.off_declared)):
                what = f"each {self.block_cls}"
            else:
                continue
            return (f"the program's own compile of {what} ({own.text}) is turned off (disable=True): a compile of "
                    f"{action.target} would compile that code a second time once that call is on; turn the call "
                    "back on instead (own_call: {disable: false}, measured as " + as_is("compile-on")
                    + " where the harness runs it)")
        return None

    @property
    def decorated_only(self) -> bool:
        """Every one of the program's compiles is a decorator (or a call on a function) in SRC's
        source: the harness's model runs it too, so candidates on top of it are measured on it."""
        return all(r.covers[0] == "function" for r in self.whole + self.block + self.functions)

    def in_function(self, target: str, fullgraph: bool = False) -> Any:
        """The program's own compiled function that is ``target`` (``file.py::Qual``) or calls it
        (:attr:`.own_compile.OwnCompile.calls`: its compile traces the target too), or None."""
        for r in self.functions:
            if r.covers[1] == target.removesuffix(".forward") or r.covers[1] == target or r.covers[1] == target + ".forward" \
                    or _calls(r, target):
                if r.fullgraph or not fullgraph:
                    return r
        return None

    def in_block(self, target: str) -> bool:
        """Whether ``target`` (``file.py::Qual``) is code the repeated block's forward reaches."""
        qual = target.split("::", 1)[-1]
        if not self.block_cls:
            return False
        if "." in qual:  # a method: of the block or of one of its submodules
            return qual.split(".", 1)[0] in self.block_classes
        return qual in self.block_reached


def _calls(region: Any, target: str) -> bool:
    """Whether the program's compiled function ``region`` calls ``target`` (``file.py::Qual``): a
    function of its file it calls, or an instance of the class ``target`` names."""
    calls = set(getattr(region, "calls", ()) or ())
    return bool(calls) and (target in calls or target.removesuffix(".forward") in calls
                            or ("::" in target and target_class(target) in calls))


def _where(regions: list[Any]) -> str:
    return "; ".join(r.text for r in regions[:2]) + (f" (+{len(regions) - 2} more)" if len(regions) > 2 else "")


def target_class(target: str) -> str:
    """The class (or function) name a plan target names: ``Block`` for ``model.py::Block``,
    ``model.py::Block.forward`` and ``pkg.module:Block``."""
    qual = target.split("::", 1)[1] if "::" in target else target.rsplit(":", 1)[-1]
    return qual.split(".", 1)[0]


#: How a compile struck by the program's whole-model compile points at the edit of that call.
OWN_EDIT_MEASURED = f" (measured as {as_is('regional')} where the harness runs that call)"
#: The same, where a candidate kind pruned that edit (:meth:`_Proposals.conflict_lines`).
OWN_EDIT_PRUNED = f" (its edit {as_is('regional')} is pruned too, said on its own line)"
#: The same, where the search proposed no such edit (:meth:`_Proposals.conflict_lines`).
OWN_EDIT_NONE = f" (the search proposed no {as_is('regional')} edit of that call)"


def conflict(action: Any, scope: OwnScope) -> str | None:
    """Why ``action`` does not compose with the program's own compiles, or None
    (docs/design.md, "The search"): no second compile of code the program compiles; no ``disable`` inside a region
    it compiles with ``fullgraph=True`` (the graph break it makes is an error there); no
    ``mark_dynamic`` inside code it compiles (Dynamo forbids the call in a traced frame)."""
    kind = action.action
    if kind == "compile" and action.own_call is not None:
        return None  # an edit of the program's own call: no second compile (own_call_candidates)
    if kind == "compile" and action.strategy == "nested" and scope.whole and scope.whole_only is None:
        return None  # a hint to the program's own whole-model compile, no compile of its own (nested_callees)
    if kind == "compile":
        if scope.whole_only is not None and action.strategy != "whole":
            own, why = scope.whole_only
            return (f"the program compiles the whole model itself ({own.text}) in a script the harness does not run, "
                    f"measured through its stand-in 'whole'; that call cannot be turned regional ({why}), so a compile "
                    f"of {action.target} would compile that code a second time")
        if scope.whole:
            return (f"the program compiles the whole model itself ({_where(scope.whole)}): a compile of {action.target} "
                    f"inside it would compile that code a second time; change the program's own call instead{OWN_EDIT_MEASURED}")
        if scope.block and (action.target == scope.block_target or action.strategy in ("whole", "nested")
                            or scope.in_block(action.target) or action.target.removesuffix(".forward") in scope.block_owners
                            or target_class(action.target) in scope.declared_names):
            return (f"the program compiles each {scope.block_cls} itself ({_where(scope.block)}): a compile of "
                    f"{action.target} would compile it a second time; change the program's own call instead")
        if scope.around_block and (action.target == scope.block_target or scope.in_block(action.target)
                                   or action.target.removesuffix(".forward") in scope.block_owners):
            inside, total = scope.around_count
            return (f"{inside} of {total} {scope.block_cls} instance(s) ran inside the program's own compiled code at run "
                    f"time ({_where(scope.around_block)}, which the model is passed to): a compile of {action.target} "
                    "there would receive no graph of its own (Dynamo inlines it into the compiled caller); change the "
                    "program's own call instead")
        own = scope.in_function(action.target)
        if own is not None and _calls(own, action.target):
            return (f"the program compiles {own.covers[1]} itself ({own.text}), which calls {action.target}: a compile of "
                    f"{action.target} inside it would compile that code a second time; change the program's own call instead")
        if own is not None:
            return f"the program compiles {action.target} itself ({own.text}): a second compile of it"
        return scope.off_conflict(action) if action.strategy != "nested" else None
    if kind == "disable":
        full = [r for r in scope.whole if r.fullgraph]
        if not full and scope.in_block(action.target):
            full = [r for r in scope.block if r.fullgraph]
        own = scope.in_function(action.target, fullgraph=True)
        if own is not None:
            full.append(own)
        if not full and scope.in_block(action.target):
            full = [r for r in scope.around_block if r.fullgraph]
        if full:
            return (f"disable {action.target}: inside the program's own fullgraph=True compile ({_where(full)}), where the "
                    "graph break it makes is an error (Unsupported: Skip inlining torch.compiler.disable()d function); "
                    "the program's code must stay in the graph there (torch._dynamo.config.capture_scalar_outputs for "
                    ".item()/.tolist(), a restructure, or a custom op)")
        return None
    if kind == "mark_dynamic":
        inside = list(scope.whole)
        if scope.block and scope.in_block(action.target):
            inside += scope.block
        if scope.in_block(action.target):
            inside += scope.around_block
        own = scope.in_function(action.target)
        if own is not None:
            inside.append(own)
        if inside:
            return (f"mark_dynamic in {action.target}: inside the program's own compiled code ({_where(inside)}), where "
                    "Dynamo forbids it (Attempt to trace forbidden callable); mark the tensor where the program calls "
                    "its compiled code")
    return None


def compose(plan: Plan, scope: OwnScope, rule: bool = False) -> tuple[Plan | None, list[str]]:
    """``plan`` composed with the program's own compiles (:func:`conflict`), and why it changed.

    A candidate whose compile conflicts is None (pruned); the rule's proposal then keeps only its
    actions that need no compile (``kernel``, ``allocator``, ...). Otherwise a conflicting
    ``disable`` or ``mark_dynamic`` is dropped from the plan."""
    why: list[str] = []
    keep: list[Any] = []
    compile_out = False
    for a in plan.actions:
        reason = conflict(a, scope)
        if reason is None:
            keep.append(a)
            continue
        why.append(reason)
        compile_out = compile_out or a.action == "compile"
    if compile_out:
        disables = [a for a in keep if a.action == "disable"]
        if disables and (scope.whole or scope.block or scope.functions) and (scope.decorated_only or scope.runs):
            # the program's compile is a decorator in the model's own source, so the harness runs it:
            # the disables compose with it (outside any fullgraph=True region, checked above) and
            # are measured on it, without the second compile (a call turned off compiles nothing
            # for them to keep eager in)
            return plan.model_copy(update={"actions": [a for a in keep if a.action not in ("compile", "mark_dynamic", "bucket")]}), why
        if not rule:
            return None, why
        keep = [a for a in keep if a.action not in ("compile", "disable", "mark_dynamic", "bucket")]
    if len(keep) == len(plan.actions):
        return plan, why
    return plan.model_copy(update={"actions": keep}), why


def propose(ctx: Context, own_setup: list[str] | None = None, regions: list[Any] | None = None) -> tuple[list[Candidate], list[str]]:
    """The candidate plans for this ladder, the rule's proposal first, and what was pruned (why).

    Pruned by evidence: CUDA graphs on CPU or with shapes that vary across the harness; nested
    regions on torch < 2.8; per-block plans without a repeated block under SRC; every compile
    when the op mix is GEMM-dominated (>= 80% GEMM+attention) and the model is not launch-bound
    (compile returns ~1.0x: partitioning-the-stack, "Check the op mix"); every whole-model
    candidate when the program compiles code itself (``own_setup``, :func:`.own_compile.compile_setup`):
    a whole-model compile on top of the user's own compile would compile that code a second time,
    so the plan changes only what the program leaves eager.

    ``regions`` (:func:`.own_compile.own_compiles`, read from SRC when ``own_setup`` is given and
    ``regions`` is not) says what each of the program's own compiles covers; every candidate is composed with them (:func:`compose`): a candidate that would compile
    the program's compiled code a second time is pruned (the rule's proposal keeps its other
    actions), and a ``disable`` inside the program's ``fullgraph=True`` region or a ``mark_dynamic``
    inside its compiled code is dropped, each said in ``pruned``. The registered candidate kinds
    (:mod:`.kinds`) then add their twins.
    """
    ctx.evidence.config_twins = {}  # filled by .kinds.config.with_config, read after measurement
    regions = _own_regions(ctx, own_setup, regions)
    p = _Proposals.of(ctx, regions)
    proposal = rule_plan(ctx)
    _baseline(p)
    why_none = _every_compile_pruned(ctx)
    if why_none is not None:
        p.pruned.append(why_none)
        p.add("rule", proposal, rule=True)
        for name, decision in own_compile_off(ctx, p.scope, p.pruned):
            p.add(name, decision)
        return _with_kinds(ctx, _rule_first(p.out), p.pruned, compiles_pruned=True)
    own = _own_texts(regions, own_setup, p.stand)
    region_full, has_block, trust_guards = _per_block(p)
    whole = _whole_family(p, region_full, has_block, own)
    for name, decision in own_call_candidates(ctx, p.scope, p.pruned):
        p.add(name, decision)
    nested_callees(p, whole)
    _bucketed(p, whole, has_block, trust_guards, own)
    _static_cache(p)
    _rule(p, proposal, own)
    cands, more = _with_kinds(ctx, _rule_first(p.out), [])
    dropped = {c.name for c in p.out} - {c.name for c in cands}
    return cands, p.pruned + p.conflict_lines(dropped, {c.name for c in p.out}) + more


@dataclass
class _Proposals:
    """The candidates proposed so far, each composed with the program's own compiles
    (:func:`compose`), and what was pruned (why)."""

    ctx: Context
    scope: OwnScope
    out: list[Candidate] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    #: why a candidate did not compose with the program's own compiles -> the candidates it struck
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    #: the program's compile measured through stand-ins (:func:`.own_candidates.standin`), or None
    stand: Any = None

    @classmethod
    def of(cls, ctx: Context, regions: list[Any] | None) -> "_Proposals":
        p = cls(ctx, OwnScope.of(ctx, regions or [], own_off(ctx)))
        from .own_candidates import standin

        # the program's whole-model compile in a script the harness does not run: measured through
        # stand-ins (whole for it, per-block for its regional form), written as an edit of its call
        p.stand = standin(ctx, p.scope, p.pruned)
        ctx.evidence.own_standin = p.stand
        if p.stand is not None:
            path, why = ctx.evidence.own_standin_path or (None, "")
            p.scope = replace(p.scope, whole=[], whole_only=None if path is not None else (p.stand, why))
        return p

    def add(self, name: str, decision: Any, rule: bool = False, made: Plan | None = None) -> None:
        """Propose ``decision``'s plan as ``name`` (once per action set; a second name of one set
        only marks it the rule's), composed with the program's own compiles. ``made``: the rules'
        proposal as the rules made it, where ``decision`` is already a part of it; the actions
        of ``made`` the composed plan lacks are the candidate's ``rule_dropped``."""
        plan, why = compose(decision.plan, self.scope, rule)
        dropped = [a for a in (made or decision.plan).actions if plan is None or a not in plan.actions] if rule else []
        for reason in why:
            self.conflicts.setdefault(reason, []).append("the rule's proposal" if rule and name == "rule" else name)
        if plan is None:
            return
        if not rule and any(a.action == "compile" for a in decision.plan.actions) and not any(a.action == "compile" for a in plan.actions):
            name = _named(AS_IS, plan)  # the program's own compile, plus what composes with it
        cand = Candidate(name, plan, list(decision.notes), rule, dropped)
        for other in self.out:
            if other.key() == cand.key():
                if rule:
                    other.rule, other.rule_dropped = True, dropped
                return
        cand.name = _unique(cand, self.out)
        self.out.append(cand)

    def conflict_lines(self, dropped: set[str] = frozenset(), proposed: set[str] | None = None) -> list[str]:
        """One pruned line per reason a candidate did not compose, with the candidates it struck.
        ``dropped``: the proposed candidates a kind pruned later (:mod:`.kinds`); where
        ``as-is+regional`` is one, a line that says a compile is measured as that edit says the
        edit was pruned instead, so the report's two lines agree. ``proposed``: the names the
        search proposed (None: not known); where ``as-is+regional`` is not among them, the line
        says no such edit was proposed rather than pointing at a row the report does not have."""
        edit = as_is("regional")
        said = (OWN_EDIT_PRUNED if edit in dropped
                else OWN_EDIT_NONE if proposed is not None and edit not in proposed else OWN_EDIT_MEASURED)
        return [f"{', '.join(dict.fromkeys(names))}: " + reason.replace(OWN_EDIT_MEASURED, said)
                for reason, names in self.conflicts.items()]


def _own_regions(ctx: Context, own_setup: list[str] | None, regions: list[Any] | None) -> list[Any] | None:
    """What each of the program's own compiles covers: ``regions`` as given, else (where the
    program compiles code itself) the search's one reading, else read from SRC."""
    if regions is None and own_setup:
        from .own_compile import own_compiles

        # the search's one reading (run_search), else from SRC
        regions = ctx.evidence.own_regions
        if regions is None:
            regions = own_compiles(ctx.session.src, parsed=ctx.evidence.own_parsed)
    return regions


def own_off(ctx: Context) -> list[Any]:
    """The program's compile calls that pass ``disable=True`` (:func:`.own_compile.off_compiles`):
    the search's one reading, else read from SRC once (kept in ``ctx.evidence.own_off``)."""
    if ctx.evidence.own_off is None:
        from .own_compile import harness_entries, off_compiles

        ctx.evidence.own_off = off_compiles(ctx.session.src, parsed=ctx.evidence.own_parsed,
                                            entries=harness_entries(ctx.session.spec))
    return ctx.evidence.own_off


def _own_texts(regions: list[Any] | None, own_setup: list[str] | None, stand: Any) -> list[str]:
    """The program's own compiles that run (not idle, not measured through a stand-in), as text."""
    if regions is not None:
        return [r.text for r in regions if not getattr(r, "idle", None) and r is not stand]
    return [x for x in own_setup or [] if _is_compile(x.split(": ", 1)[-1])]


def _baseline(p: _Proposals) -> None:
    """``as-is``, and ``kernel`` (the ladder's actions that need no compile) where there is a kernel."""
    base = rule_plan(p.ctx, "none")
    p.add(AS_IS, type(base)(base.plan.model_copy(update={"actions": []}), []))
    # an allocator-only plan is not an engine candidate: the engine's children run the harness,
    # never the entry the action rewrites, so its tree would time the program as it is; the
    # search measures the setting itself in a child's environment (.search.measure_allocator_candidate)
    if any(a.action == "kernel" for a in base.plan.actions):
        p.add("kernel", base)


def _every_compile_pruned(ctx: Context) -> str | None:
    """Why the ladder's evidence prunes every compile candidate (it stopped before the rungs that
    decide, or the op mix is GEMM-dominated and not launch-bound), or None."""
    if ctx.evidence.stopped_at:
        return f"every compile: the ladder stopped at rung {ctx.evidence.stopped_at}"
    opmix = ctx.measured("op_mix")
    launch = batch_scaling.launch_bound(ctx)
    if op_mix.gemm_dominated(ctx) and not launch:
        # the attention implementation is not a compile: an eager-attention model that compile
        # cannot help may still gain from sdpa (its as-is twin, a candidate kind)
        return f"every compile: GEMM-dominated ({opmix['gemm_share']:.0%} GEMM+attention, not launch-bound): compile returns ~1.0x"
    return None


def _per_block(p: _Proposals) -> tuple[Any, bool, bool]:
    """The per-block candidates (bare, ``+disable``, ``+mark_dynamic``); returns the full per-block
    plan, whether there is a block to compile, and whether the guards the instance rung read are
    trusted (False: the block is compiled despite a guard and the measurement decides)."""
    ctx = p.ctx
    region_full = rule_plan(ctx, "region")
    has_block = any(a.action == "compile" for a in region_full.plan.actions)
    trust_guards = True
    if has_block:
        for decision in (rule_plan(ctx, "region", disables=False, marks=False), rule_plan(ctx, "region", marks=False), region_full):
            p.add(_named("per-block", decision.plan), decision)
    else:
        despite = _per_block_despite_guards(p)
        if despite is not None:
            region_full, has_block, trust_guards = despite, True, False
        else:
            p.pruned.append("per-block: " + (next((n for n in region_full.notes if "no compile" in n or "outside SRC" in n), "no repeated block under SRC")))
    if has_block:
        # "not marked dynamic: ..." or, where a model declares several block classes, "Blk: not marked dynamic: ..."
        unmarked = next((n for n in region_full.notes if "not marked dynamic: " in n), None)
        if unmarked and not any(a.action == "mark_dynamic" for a in region_full.plan.actions):
            # the recompiles rung saw varying dims but the planner could not mark them: say why
            # the +mark_dynamic variant is missing (a newcomer's tiny Llama: no candidate, no word)
            p.pruned.append("per-block+mark_dynamic: " + unmarked.replace("not marked dynamic: ", "", 1))
    return region_full, has_block, trust_guards


def _per_block_despite_guards(p: _Proposals) -> Any:
    """Per-block candidates compiled despite a guard the instance rung read as per-instance state
    (whether the regions fall back to eager is measured: a recompile-limit fallback fails the
    candidate), and the full per-block plan among them; None where no block can be compiled."""
    ctx = p.ctx
    despite = rule_plan(ctx, "region", disables=False, marks=False, trust_guards=False)
    if not any(a.action == "compile" for a in despite.plan.actions):
        return None
    p.add(_named("per-block", despite.plan), despite)
    # its disables and marks too, as where the guards are trusted: the varying dims the
    # recompiles rung found are marked, and nested+whole is judged by this plan (judged by
    # the plan without a compile, it was pruned as "the block breaks the graph" with no
    # graph break: a tiny GPT-2's per-instance cache guard)
    region_full = rule_plan(ctx, "region", trust_guards=False)
    for decision in (rule_plan(ctx, "region", marks=False, trust_guards=False), region_full):
        p.add(_named("per-block", decision.plan), decision)
    return region_full


def _whole_family(p: _Proposals, region_full: Any, has_block: bool, own: list[str]) -> Any:
    """``nested+whole``, ``whole`` and ``whole+cudagraphs``, or why not; returns the whole-model
    plan (without its compile where the program compiles code itself)."""
    ctx = p.ctx
    whole = rule_plan(ctx, "whole", mode="default")
    if own and any(a.action == "compile" for a in whole.plan.actions):
        p.pruned.append(f"nested+whole, whole, whole+cudagraphs: the program compiles code itself ({'; '.join(own[:3])}): "
                        "a whole-model compile on top would compile it a second time; change the program's own call instead")
        whole = type(whole)(whole.plan.model_copy(update={"actions": [a for a in whole.plan.actions if a.action != "compile"]}), whole.notes)
    if any(a.action == "compile" for a in whole.plan.actions):
        if has_block:
            _nested_whole(p, region_full, whole)
        bare = _without_disables(whole)
        if bare is not None:  # the one-line anchor, its graph breaks left to Dynamo
            p.add(WHOLE, bare)
        p.add(_named("whole", whole.plan), whole)
        shapes = cudagraph_shapes(ctx)
        if not ctx.session.cuda:
            p.pruned.append("whole+cudagraphs: no CUDA (CUDA graphs need a GPU)")
        elif isinstance(shapes, str):
            p.pruned.append(f"whole+cudagraphs: {shapes}")
        else:
            cg = rule_plan(ctx, "whole", mode="reduce-overhead")
            if shapes:  # a small set of shapes: one recording each, said in the why
                cg = _per_shape_recordings(cg, shapes)
            p.add(_named("whole+cudagraphs", cg.plan), cg)
    elif not own:  # (the program's own compile pruned them above, and said so)
        p.pruned.append("whole, whole+cudagraphs: " + (whole.notes[-1] if whole.notes else "the model class is not under SRC"))
    return whole


#: The most harness shapes a whole-model CUDA graphs candidate is proposed for where shapes vary:
#: CUDA graph trees record one graph per distinct input shape, each with its memory pool
#: (torch.compiler docs, "CUDAGraph Trees": "dynamic shapes ... re-recorded for each new shape"), so a
#: program that runs a few fixed shapes pays a few recordings, one whose shapes keep changing pays one
#: per step (the ``+bucket`` candidates pad those to a few).
CUDAGRAPH_SHAPES = 4


def cudagraph_shapes(ctx: Context) -> int | str:
    """Whether a whole-model CUDA graphs candidate is proposed: 0 where the recompiles rung saw
    the shapes stable; the count of the harness's shapes where they vary and there are at most
    :data:`CUDAGRAPH_SHAPES` (one recording each); else why not (a str, for ``pruned``): more
    shapes, a recompiles rung that did not run (nothing read: treated as varying, as the planner
    does), or a model called through a method (``harness.call``: ``generate`` runs many input shapes
    inside one harness shape)."""
    if shapes_stable(ctx):
        return 0
    shapes = len(ctx.session.spec.shapes)
    rung = ctx.results.get("recompiles")
    if rung is None or not rung.ok:
        return "the recompiles rung did not run: shapes treated as varying (each new shape is a new CUDA graph recording)"
    if shapes > CUDAGRAPH_SHAPES:
        return (f"shapes vary across the harness's {shapes} shapes (more than {CUDAGRAPH_SHAPES}: each new shape is a "
                "new CUDA graph recording)")
    if ctx.session.spec.call is not None:
        return (f"shapes vary and the model is called through .{ctx.session.spec.call}(), which may run many input "
                "shapes within one harness shape (each a new CUDA graph recording)")
    return shapes


def _per_shape_recordings(decision: Any, shapes: int) -> Any:
    """``decision`` (the whole-model compile with ``mode="reduce-overhead"``) with its compile's
    ``why`` saying that each of the harness's ``shapes`` is a recording of its own, and a shape
    outside them another."""
    actions = [a.model_copy(update={"why": f"{a.why}; CUDA graphs: one recording per input shape, the harness's "
                                           f"{shapes} shapes (a shape outside them records another graph, with its "
                                           "memory pool)"})
               if a.action == "compile" and getattr(a, "strategy", None) == "whole" else a
               for a in decision.plan.actions]
    return type(decision)(decision.plan.model_copy(update={"actions": actions}), decision.notes)


def anchor_plan(ctx: Context) -> Plan | None:
    """The whole-model anchor (``torch.compile(model)``, the :data:`WHOLE` candidate) as the
    evidence so far proposes it, for a search that starts it before the ladder's compile rungs
    (:mod:`.early_reference`): the rules' whole-model plan without its ``disable``s. None where
    the proposal would have none: every compile pruned, the program compiles code itself (the
    anchor is then an edit of its own call), the program holds a compile call turned off
    (``disable=True``: a whole-model compile over it may be refused, :meth:`OwnScope.off_conflict`),
    or no model class under SRC. The search uses the started anchor only where its rewrite is byte
    for byte the proposal's."""
    from .own_compile import compile_setup

    if _every_compile_pruned(ctx) is not None or compile_setup(ctx.session.src) or own_off(ctx):
        return None
    whole = rule_plan(ctx, "whole", mode="default")
    if not any(a.action == "compile" for a in whole.plan.actions):
        return None
    return (_without_disables(whole) or whole).plan


def _without_disables(decision: Any) -> Any:
    """``decision`` without its ``disable`` actions (a whole-model compile as ``torch.compile(model)``
    runs it: Dynamo splits the graph at each break), or None where it has none. The ``+disable``
    form keeps the functions that break eager; which is faster is measured, not assumed (a break
    Dynamo resumes after costs a graph, a disabled function all the graphs inside it)."""
    kept = [a for a in decision.plan.actions if a.action != "disable"]
    if len(kept) == len(decision.plan.actions):
        return None
    return type(decision)(decision.plan.model_copy(update={"actions": kept}), decision.notes)


def _nested_whole(p: _Proposals, region_full: Any, whole: Any) -> None:
    """``nested+whole`` (the block as a nested compile region inside one whole-model compile), or why not."""
    breaks_in_block = any(a.action == "disable" for a in region_full.plan.actions) or not any(
        a.action == "compile" and a.options.fullgraph for a in region_full.plan.actions)
    if not nested_supported():
        p.pruned.append("nested+whole: torch.compiler.nested_compile_region needs torch >= 2.8")
    elif breaks_in_block:
        p.pruned.append("nested+whole: the block breaks the graph (or keeps a helper eager), and a nested compile region "
                        "must be captured as one graph (UncapturedHigherOrderOpError)")
    else:
        nested = _nested(p.ctx, region_full.plan, whole.plan)
        if nested is not None:
            p.add("nested+whole", type(whole)(nested, []))


def nested_callees(p: _Proposals, whole: Any) -> None:
    """Hierarchical compilation of a repeated callee: ``@torch.compiler.nested_compile_region`` on
    each outermost function of SRC that Dynamo inlined many times into one traced frame
    (:mod:`.repeated_calls`, read by the recompiles rung: a Python loop in ``forward`` that calls
    ``self.step`` 300 times is unrolled into one graph that traces ``step`` 300 times), inside
    the whole-model compile, so that Dynamo traces the callee once and reuses the region at each
    later call (torch docs, ``torch.compiler.nested_compile_region``; torch >= 2.8). Its saving is
    the compile per start the decision counts (:func:`.decide.extra_compile_s`); the step it costs
    (each call becomes an ``invoke_subgraph`` call) is timed like any other.

    ``as-is+nested`` where the program compiles the whole model itself and the harness runs that
    call: the regions plus ``own_call: {disable: false}`` on the program's call (the call as it
    is, no byte changed: the compile the hint needs, kept on; the plan's rules ask a ``whole``
    compile beside a ``nested`` one, :mod:`rewriter.consistency`). ``nested+whole`` where the
    program does not compile the model: the regions plus the whole-model compile of ours (the
    name the block's nested region uses; one plan where the callee is the block's ``forward``).
    Left out, each said in ``pruned``: a callee where the graph-breaks rung found a break (a
    nested region must be captured as one graph, ``UncapturedHigherOrderOpError``), torch < 2.8,
    a program whose compile is in a script the harness does not run or that compiles in several
    places, or only its blocks."""
    from .planner import Decision, _plan

    ctx = p.ctx
    found = [r for r in ctx.evidence.repeated_calls or [] if r.outermost]
    for r in [r for r in found if r.recursive]:
        p.pruned.append(f"{NESTED_OWN}, nested+whole: {r.target} ({r.calls} calls in one trace of {r.frame}) calls itself: "
                        "a nested compile region around a recursive function is not traced once and reused")
    found = [r for r in found if not r.recursive]
    if not found:
        return
    said = ", ".join(f"{r.target} ({r.calls} calls in one trace of {r.frame})" for r in found[:3])
    label = f"{NESTED_OWN}, nested+whole"
    if not nested_supported():
        p.pruned.append(f"{label}: {said}: torch.compiler.nested_compile_region needs torch >= 2.8")
        return
    breaks = {f"{f.file}::{f.function}": f for f in (ctx.results["graph_breaks"].findings if "graph_breaks" in ctx.results else [])
              if f.kind == "graph_break" and f.file and f.function}
    keep = []
    for r in found:
        broken = next((breaks[t] for t in (r.target, *r.inner) if t in breaks), None)
        if broken is not None:
            p.pruned.append(f"{label}: {r.target} ({r.calls} calls in one trace of {r.frame}) breaks the graph at "
                            f"{broken.file}:{broken.line}, and a nested compile region must be captured as one graph "
                            "(UncapturedHigherOrderOpError)")
            continue
        keep.append(r)
    if not keep:
        return
    nested = [CompileAction(action="compile", target=r.target, strategy="nested",
                            why=f"hierarchical compilation: Dynamo inlined {r.target} {r.calls} times into one trace of "
                                f"{r.frame} (a loop it unrolls); nested_compile_region traces it once and reuses the region "
                                "at each later call (torch docs, torch.compiler.nested_compile_region)") for r in keep]
    scope = p.scope
    if p.stand is not None or scope.whole_only is not None:
        p.pruned.append(f"{label}: {said}: the program's whole-model compile is in a script the harness does not run, so a "
                        "nested region inside it would not be measured")
        return
    if scope.whole:
        from .own_candidates import runs_own_compile

        if len(scope.whole) > 1:
            p.pruned.append(f"{NESTED_OWN}: the program compiles the model in {len(scope.whole)} places ({_where(scope.whole)})")
            return
        own = scope.whole[0]
        refused = own.can("disable")
        if refused or not runs_own_compile(ctx, own):
            p.pruned.append(f"{NESTED_OWN}: {said}: " + (f"the program's own compile ({own.text}) cannot be named by the "
                                                         f"plan: {refused}" if refused else
                                                         f"the harness's model does not run the program's own compile "
                                                         f"({own.text}), so a region inside it would not be measured"))
            return
        keep_on = CompileAction(action="compile", target=own.site, strategy="whole", own_call={"disable": False},
                                why=f"the program's own whole-model compile ({own.text}) kept as it is (disable=False: no "
                                    "byte changes): the compile the nested regions are a hint to")
        p.add(NESTED_OWN, Decision(_plan(ctx.session.spec, ctx, [keep_on, *nested]), []))
        return
    if scope.block or scope.functions:
        p.pruned.append(f"{label}: {said}: the program compiles code itself, not the whole model "
                        f"({_where(scope.block + scope.functions)})")
        return
    wholes = [a for a in whole.plan.actions if a.action == "compile" and a.strategy == "whole"]
    if not wholes:
        return  # no whole-model compile of ours (why is in pruned: 'whole')
    keep_plan = [a for a in whole.plan.actions if a.action != "disable"]  # a nested region is captured whole
    p.add("nested+whole", type(whole)(whole.plan.model_copy(update={"actions": [*nested, *keep_plan]}), list(whole.notes)))


def _bucketed(p: _Proposals, whole: Any, has_block: bool, trust_guards: bool, own: list[str]) -> None:
    """``per-block+bucket`` and ``whole+cudagraphs+bucket`` where one input dim varies, or why not."""
    ctx = p.ctx
    bucket, why_not = bucket_action(ctx)
    if bucket is None:
        if why_not:
            p.pruned.append(f"+bucket: {why_not}")
        return
    recompiles = ctx.measured("recompiles").get("recompiles") or 0
    if has_block and recompiles <= 1:
        # Automatic dynamic shapes serve every later size after one recompile: bucketing
        # could save that one compile per start, while padding every smaller shape
        # (docs/decisions.md, "Bucketing after one recompile").
        p.pruned.append(f"per-block+bucket: {recompiles} recompile(s) across the shapes, which bucketing could "
                        "at most save while padding every smaller shape")
    elif has_block:
        bare = rule_plan(ctx, "region", disables=True, marks=False, trust_guards=trust_guards)
        p.add(_named("per-block", bare.plan) + "+bucket", type(bare)(_with(bare.plan, bucket), bare.notes))
    if any(a.action == "compile" for a in whole.plan.actions) and ctx.session.cuda and not own:
        cg = rule_plan(ctx, "whole", mode="reduce-overhead")
        p.add(_named("whole+cudagraphs", cg.plan) + "+bucket", type(cg)(_with(cg.plan, bucket), cg.notes))


def _static_cache(p: _Proposals) -> None:
    """``static-cache`` (transformers' own lever for a generating model), or why not."""
    static = static_cache_candidate(p.ctx)
    if isinstance(static, str):
        p.pruned.append(f"static-cache: {static}")
    elif static is not None:
        p.add("static-cache", static)


def _rule(p: _Proposals, proposal: Any, own: list[str]) -> None:
    """The rule's proposal (one of the above, same actions, or its own candidate), and the same
    without its ``kernel`` action where it has one (the kernel is measured, not assumed)."""
    # a whole-model proposal on top of the program's own compile is the second compile pruned above
    made = proposal.plan
    if own and any(a.action == "compile" and a.strategy == "whole" for a in proposal.plan.actions):
        kept = [a for a in proposal.plan.actions if not (a.action == "compile" and a.strategy == "whole")]
        proposal = type(proposal)(proposal.plan.model_copy(update={"actions": kept}), proposal.notes)
    p.add("rule", proposal, rule=True, made=made)
    if any(a.action == "kernel" for a in proposal.plan.actions) and any(a.action == "compile" for a in proposal.plan.actions):
        plain = proposal.plan.model_copy(update={"actions": [a for a in proposal.plan.actions if a.action != "kernel"]})
        unit = "whole" if any(a.action == "compile" and a.strategy == "whole" for a in plain.actions) else "per-block"
        p.add(_named(unit, plain) + "-no-kernel", type(proposal)(plain, list(proposal.notes)))


def _with_kinds(ctx: Context, cands: list[Candidate], pruned: list[str], compiles_pruned: bool = False) -> tuple[list[Candidate], list[str]]:
    """``cands`` with every registered candidate kind's twins (:mod:`.kinds`), and what was pruned."""
    from .kinds import extend

    cands, more = extend(ctx, cands, compiles_pruned)
    return cands, pruned + more


#: The candidate that changes the program's own whole-model compile to CUDA graphs.
OWN_CUDAGRAPHS = as_is("reduce-overhead")


def own_call_candidates(ctx: Context, scope: OwnScope, pruned: list[str]) -> list[tuple[str, Any]]:
    """Variants of the program's own compile, each the plan that edits that call
    (``compile`` with ``own_call``: no second compile; :mod:`rewriter.actions.own_call`), as
    ``(name, Decision)``; what cannot be proposed is appended to ``pruned`` with why.

    ``as-is+reduce-overhead``: ``mode="reduce-overhead"`` (CUDA graphs) on the program's compile
    of the whole model, where there is one, whose call does not already use that mode and
    compiles with Inductor (another backend takes no ``mode`` of Inductor's), on CUDA, with shapes
    stable across the harness or at most :data:`CUDAGRAPH_SHAPES` of them (:func:`cudagraph_shapes`,
    as ``whole+cudagraphs``), the call editable (a literal mode, no ``**options``, a target that
    names it) and run by the harness's model (so the engine measures it). A program that compiles only its blocks gets no
    such variant: CUDA graphs over many regions are refused (pytorch#152887). The other variants
    (regional, ``dynamic=``) are :func:`.own_candidates.variants`'; ``as-is+no-compile`` turns the
    program's compile off (:func:`own_compile_off`), ``as-is+compile-on`` turns its calls that pass
    ``disable=True`` back on (:func:`.own_candidates.compile_on`)."""
    from .own_candidates import compile_on, variants

    found = variants(ctx, scope, pruned) if scope.whole or scope.block or ctx.evidence.own_raised is not None else []
    return (found + _own_cudagraphs(ctx, scope, pruned) + _own_mask_eager(ctx, scope, pruned)
            + own_compile_off(ctx, scope, pruned) + compile_on(ctx, scope, pruned))


def _own_mask_eager(ctx: Context, scope: OwnScope, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+mask-eager``: the program's whole-model compile kept as written, with ``disable`` on
    the transformers mask builders its model's modules call (:func:`.kinds.mask.mask_actions`),
    where the model traced whole passes SDPA a mask one eager forward does not
    (:attr:`.evidence.Evidence.traced_sdpa_masks`; docs/decisions.md, "A whole-model compile can
    give SDPA a mask eager never builds"). Only where the harness's model runs that compile (else
    nothing would measure it); a ``fullgraph=True`` compile prunes it when composed (a disable there
    is an error, :func:`conflict`)."""
    from .kinds.mask import SUFFIX, mask_actions
    from .own_candidates import runs_own_compile
    from .planner import Decision, _plan

    name = as_is(SUFFIX[1:])
    if not scope.whole or not ctx.evidence.traced_sdpa_masks:
        return []
    actions, _ = mask_actions(ctx)  # why none: said by the kind's own line (.kinds.mask.with_mask_eager)
    if not actions:
        return []
    if not any(runs_own_compile(ctx, own) for own in scope.whole):
        pruned.append(f"{name}: the harness's model does not run the program's own compile ({_where(scope.whole)}): "
                      "the builders kept eager beside it would not be measured")
        return []
    own = scope.whole[0]
    notes = [f"the program compiles the whole model itself ({own.text}): that compile kept as written, "
             "the attention-mask builders kept eager"]
    return [(name, Decision(_plan(ctx.session.spec, ctx, actions), notes))]


def own_compile_off(ctx: Context, scope: OwnScope, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+no-compile`` (:func:`.own_candidates.compile_off`) where the program compiles code the
    harness runs; also proposed where the ladder pruned every compile of ours (a GEMM-dominated op
    mix), since the program's own compile is then the one to measure against compilation off."""
    from .own_candidates import compile_off

    return compile_off(ctx, scope, pruned) if scope.whole or scope.block or scope.functions else []


def _own_cudagraphs(ctx: Context, scope: OwnScope, pruned: list[str]) -> list[tuple[str, Any]]:
    """``as-is+reduce-overhead`` (see :func:`own_call_candidates`)."""
    from .planner import Decision, _plan

    name = OWN_CUDAGRAPHS
    if not scope.whole:
        if scope.block:
            pruned.append(f"{name}: the program compiles each {scope.block_cls} itself ({_where(scope.block)}), not the whole "
                          "model, and CUDA graphs over many small regions are refused (pytorch#152887)")
        return []
    if len(scope.whole) > 1:
        pruned.append(f"{name}: the program compiles the model in {len(scope.whole)} places ({_where(scope.whole)}); "
                      "which call to change is the program's choice")
        return []
    own = scope.whole[0]
    # what the call already says comes before what this host lacks: on a GPU these stand as well
    if own.mode == "reduce-overhead":
        pruned.append(f"{name}: the program's own compile ({own.text}) already uses mode='reduce-overhead'")
        return []
    if own.backend is not None and own.backend != "inductor":
        if own.backend_literal:  # a string literal: it names the backend
            pruned.append(f"{name}: the call's backend is not Inductor (backend={own.backend}: {own.text}): mode has no "
                          "effect (CUDA graphs are Inductor's mode='reduce-overhead')")
        else:  # a variable or a function (nanoGPT's config value, a custom backend): its value is not read
            pruned.append(f"{name}: the call's backend is set by an expression, not the literal 'inductor' "
                          f"(backend={own.backend}: {own.text}): CUDA graphs are Inductor's mode='reduce-overhead', "
                          "which an edit can set only where the backend is Inductor")
        return []
    if not ctx.session.cuda:
        pruned.append(f"{name}: no CUDA (CUDA graphs need a GPU): the program's own compile ({own.text}) stays as it is")
        return []
    shapes = cudagraph_shapes(ctx)  # as whole+cudagraphs (:func:`_whole_family`)
    if isinstance(shapes, str):
        pruned.append(f"{name}: {shapes}")
        return []
    stable = shapes == 0
    if own.why_not or own.site is None:
        pruned.append(f"{name}: the program's own compile ({own.text}) cannot be edited safely: {own.why_not}")
        return []
    from .own_candidates import runs_own_compile

    if not runs_own_compile(ctx, own):
        pruned.append(f"{name}: the harness's model does not run the program's own compile ({own.text}): a variant of "
                      "it would not be measured")
        return []
    action = CompileAction(
        action="compile", target=own.site, strategy="whole", own_call={"mode": "reduce-overhead"},
        why=f"the program compiles the whole model itself ({own.text}): CUDA graphs (mode='reduce-overhead') on that "
            f"call, {'shapes stable across the harness' if stable else 'shapes vary'}; its other options left as they are")
    decision = Decision(_plan(ctx.session.spec, ctx, [action]), [])
    return [(name, decision if stable else _per_shape_recordings(decision, shapes))]


def static_cache_candidate(ctx: Context) -> Any:
    """transformers' own lever for a generation workload: ``generation_config.cache_implementation
    = "static"`` on the model whose ``generate`` the step calls (and, on CUDA, the decode-step
    compile ``generate`` then does itself), as a candidate plan of its own (a compile of ours on
    top would compile the decode step twice). Returns a Decision, None (the step does not
    generate) or why it cannot be planned (a str)."""
    from .generation import generating_module
    from .locate import library_target_of
    from .planner import Decision, _plan

    module = generating_module(ctx)
    if module is None:
        return None
    target = library_target_of(type(module))
    if target is None:
        return f"{type(module).__qualname__} generates but is not importable by path"
    cache = getattr(module.generation_config, "cache_implementation", None)
    if cache in ("static", "offloaded_static"):
        return f"{type(module).__name__} already uses cache_implementation={cache!r}"
    why = (f"generation: the step calls {type(module).__name__}.generate with the {'default dynamic' if cache is None else repr(cache)} "
           "KV cache; transformers' static cache preallocates it" + (" and generate compiles the decode step itself (CUDA)"
                                                                       if ctx.session.cuda else " (CPU: no auto-compile)"))
    action = GenerationAction(action="generation", target=target, why=why)
    return Decision(_plan(ctx.session.spec, ctx, [action]), [])


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (``n`` >= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def bucket_action(ctx: Context) -> tuple[BucketAction | None, str | None]:
    """The ``bucket`` action the recompiles rung implies: exactly one model input dim varies across
    the harness shapes, and that input is a named parameter of the model's ``forward`` (under
    SRC); buckets are the powers of two that cover the harness sizes. Returns (action, None) or
    (None, why not; None when nothing varies)."""
    import inspect

    var = ctx.measured("recompiles").get("varying_input_dims") or []
    if not var:
        return None, None
    if len({(v["tensor"], v["dim"]) for v in var}) != 1:
        return None, f"{len(var)} input dims vary; the bucketing helper pads one argument"
    model, inputs, _ = ctx.reference()
    from .locate import target_of

    owner = target_of(type(unwrapped(model)), ctx.session.src)  # through torch.compile's wrapper
    if owner is None:
        return None, "the model class is not under SRC"
    v = var[0]
    if isinstance(inputs, dict):
        names = [k for k, x in inputs.items() if hasattr(x, "shape")]
    else:
        try:
            names = [p for p in inspect.signature(type(unwrapped(model)).forward).parameters][1:]
        except (TypeError, ValueError):
            return None, "the model's forward has no signature to name the varying input"
    if v["tensor"] >= len(names):
        return None, f"input {v['tensor']} is not a named parameter of the model's forward"
    buckets = sorted({next_pow2(s) for s in v["sizes"]})
    return BucketAction(action="bucket", target=owner + ".forward", arg=names[v["tensor"]], dim=v["dim"], buckets=buckets,
                        why=f"recompiles: input {names[v['tensor']]!r} dim {v['dim']} varies {sorted(set(v['sizes']))}: "
                            f"padded to {buckets} (unsafe: padding must not change the kept outputs; the search's numerics decide)"), None


def _with(plan: Plan, action: Any) -> Plan:
    """``plan`` with ``action`` added first (a ``mark_dynamic`` on the same function is dropped:
    the bucket makes the dim static per bucket)."""
    keep = [a for a in plan.actions if a.action != "mark_dynamic"]
    return plan.model_copy(update={"actions": [action] + keep})


def _unique(cand: Candidate, others: list[Candidate]) -> str:
    """``cand``'s name, made unique among ``others``: a second plan of the same name (e.g. two
    per-block plans that differ only in a compile option, ``fullgraph``) gets what tells it apart,
    ``+fullgraph``/``-fullgraph``, else a count (``per-block-2``). Every candidate is a child
    process, a job file and a tree named after it: two of one name overwrote each other's job
    file and the second child died on the first's file descriptors (a newcomer's model with a
    ``.item()`` branch outside its blocks: the search then waited out its budget)."""
    taken = {o.name for o in others}
    if cand.name not in taken:
        return cand.name
    same = next(o for o in others if o.name == cand.name)
    mine = [a for a in cand.plan.actions if a.action == "compile"]
    theirs = [a for a in same.plan.actions if a.action == "compile"]
    if len(mine) == len(theirs) and mine:  # a compile action always holds its options
        full = [bool(a.options.fullgraph) for a in mine]
        if full != [bool(a.options.fullgraph) for a in theirs] and len(set(full)) == 1:
            name = cand.name + ("+fullgraph" if full[0] else "-fullgraph")
            if name not in taken:
                return name
    k = 2
    while f"{cand.name}-{k}" in taken:
        k += 1
    return f"{cand.name}-{k}"


def _named(base: str, plan: Plan) -> str:
    """``base`` plus what else the plan holds: ``+disable``, ``+mark_dynamic``, ``+kernel``."""
    kinds = {a.action for a in plan.actions}
    return base + "".join(f"+{k}" for k in ("disable", "mark_dynamic", "kernel") if k in kinds)


def _rule_first(cands: list[Candidate]) -> list[Candidate]:
    """The rule's proposal first (the expected best: its cold phase runs first under a budget),
    then ``whole``, the one-line anchor every plan is held against (measured early, a short
    budget never leaves the search without it and choosing a plan slower than the compile a user
    would try first), then the other compile candidates in proposal order, ``as-is`` last
    (docs/decisions.md, "The search's budget and its cold phases")."""
    rule = [c for c in cands if c.rule]
    anchor = [c for c in cands if not c.rule and c.name == WHOLE]
    rest = [c for c in cands if not c.rule and c.name not in (AS_IS, WHOLE)]
    asis = [c for c in cands if c.name == AS_IS and not c.rule]
    return rule + anchor + rest + asis
