"""The planner: rung verdicts become plan actions, each with ``why:`` (measurement + threshold).

Rules, in order (docs/design.md "The diagnostic ladder"; partitioning-the-stack):

* a dominant non-GEMM op (top-ops rung) → ``kernel`` on the function that calls it (catalog
  kernel when ``kernels/<op>.py`` exists, else ``stub``);
* fragmentation (memory rung, steady state over the shape sweep) → ``allocator`` at the ``--entry`` function (the
  user's program entry, which runs before the first CUDA allocation); without ``--entry`` a note
  says so and how to get the action (the harness is scaffolding, not the program);
* launch-bound (batch scaling) is decided first: its device op mix says little about the step;
* GEMM-dominated op mix (and not launch-bound) → no compile; the report says ~1.0x;
* launch-bound with stable shapes → ``compile`` of the model's entry, ``strategy: whole``, with
  ``mode: reduce-overhead`` (CUDA graphs) on CUDA;
* otherwise → ``compile`` per repeated block (``strategy: region``), or the model as its own
  region when there is no block; a model that declares its repeated blocks (``_repeated_blocks``,
  diffusers' regional-compilation list, :mod:`.declared`) gets one ``compile`` per declared class,
  whatever the structural finder picks (the why says so); the recompiles and instance-recompile
  rungs, and so the ``mark_dynamic`` s and guard reading, look at the first declared class;
* helpers that break graphs, or read per-instance state that recompiles the block → ``disable``;
  never the compiled unit's own ``forward`` nor the repeated block's under a compile of the model (a
  break located there is kept, and the candidate's notes say so);
  a guard inside the block's own ``forward`` → no compile of that block (its regions would fall
  back to eager silently, worse than no plan);
* dims that vary across the harness shapes → ``mark_dynamic`` on every tensor that enters the
  block (the region boundary) with a varying dim, in the block owner's ``forward``;
* these rules are the proposal; the search (:mod:`.search`) measures it beside the other
  candidate plans (:mod:`.candidates`) and the measurement decides.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ..plan import (
    AllocatorAction,
    CompileAction,
    CompileOptions,
    DisableAction,
    KernelAction,
    MarkDynamicAction,
    Plan,
)
from .context import Context
from .rungs import batch_scaling, op_mix
from .rungs.granularity import region_blocks
from .locate import library_target_of, model_function_target, names_reached, unit_target, untargetable
from .rungs.memory import expandable_segments_on
from .rungs.recompiles import shapes_stable


@dataclass
class Decision:
    """The plan and the statements the report prints about it."""

    plan: Plan
    notes: list[str] = field(default_factory=list)
    expected_speedup: str | None = None


def _op_name(op: str) -> str:
    """``aten::topk`` -> ``topk``, ``aten::_softmax.out`` -> ``softmax``: the ``torch.<name>``
    call and the catalog kernel's name."""
    return op.split("::", 1)[-1].split(".")[0].strip("_")


def _kernel_name(op: str) -> str:
    """The catalog kernel for an op (:func:`rewriter.actions.kernel.catalog`), else ``stub``."""
    from ..actions.kernel import catalog

    return _op_name(op) if _op_name(op) in catalog() else "stub"


def boundary_args(owner: Any, attr: str) -> list[str | None]:
    """Names passed positionally to the blocks in ``owner.forward`` (``[x, cos, sin]`` for
    ``for block in self.blocks: x = block(x, cos, sin)``; the loop may run over
    ``enumerate(...)`` or a slice, ``self.layers[: n]``); None where an argument is not a name
    bound as a parameter or at the function's top level (``mark_dynamic`` needs one)."""
    try:
        source = textwrap.dedent(inspect.getsource(type(owner).forward))
        func = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return []
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    loop_vars = set()
    for node in ast.walk(func):
        if isinstance(node, ast.For):
            it = node.iter
            if isinstance(it, ast.Call) and it.args:  # enumerate(self.blocks), zip(...)
                it = it.args[0]
            if isinstance(it, ast.Subscript):  # self.layers[: self.config.num_hidden_layers] (HF Llama, Mixtral)
                it = it.value
            if isinstance(it, ast.Attribute) and it.attr == attr:
                for n in ast.walk(node.target):
                    if isinstance(n, ast.Name):
                        loop_vars.add(n.id)
    bound = {a.arg for a in func.args.args + func.args.kwonlyargs}
    for stmt in func.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                bound.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        hit = (isinstance(f, ast.Name) and f.id in loop_vars) or (
            isinstance(f, ast.Subscript) and isinstance(f.value, ast.Attribute) and f.value.attr == attr
        )
        if hit:
            return [a.id if isinstance(a, ast.Name) and a.id in bound else None for a in node.args]
    return []


def _qual(target: str) -> str:
    """The qualname part of a target, SRC (``file.py::Qual``) or library (``module:Qual``)."""
    return target.split("::", 1)[1] if "::" in target else target.rsplit(":", 1)[1]


#: The units :func:`plan` can be asked for (the search's candidates, :mod:`.candidates`).
UNITS = ("none", "region", "whole")


def plan(ctx: Context, unit: str | None = None, *, mode: str = "default", disables: bool = True, marks: bool = True,
         trust_guards: bool = True) -> Decision:
    """Turn the rung results in ``ctx`` into a :class:`~rewriter.plan.Plan` with evidence.

    ``unit`` None: the ladder's rules decide (the rule's proposal, the search's first candidate).
    ``none``/``region``/``whole`` force that unit (the search's other candidates): ``mode`` is the
    whole-model compile's mode; ``disables``/``marks`` say whether a per-block plan carries the
    ``disable``s the graph-break and per-instance rungs imply and the ``mark_dynamic``s the
    recompiles rung implies. A forced unit the evidence cannot build (no block under SRC, a guard
    in the block's own forward) returns no compile action and says why in ``notes``;
    ``trust_guards=False`` compiles the block despite such a guard (the search measures whether
    its regions fall back to eager instead of trusting the rung's reading of the guard).
    """
    ev = _Evidence.of(ctx)
    actions: list[Any] = []
    notes = ev.declared_notes()
    _kernel(ctx, actions, notes)
    _allocator(ctx, actions, notes)
    if _stopped_early(ctx, notes) or unit == "none":
        return ev.decision(actions, notes)
    ev.read_compile_evidence(notes)
    if unit == "whole" and not ev.model_target:
        notes.append(f"no whole-model candidate: the model class is {untargetable(type(ev.model))}")
    # launch-bound first: the ladder's first rung decides before the op mix (partitioning-
    # the-stack: "If it barely changes, you are launch bound and the answer is torch.compile
    # plus mode='reduce-overhead'"); a launch-bound model's device time says little.
    if ev.model_target and (unit == "whole" or (unit is None and ev.launch and ev.stable)):
        _whole(ev, ("reduce-overhead" if ctx.session.cuda else "default") if unit is None else mode, actions, notes)
        return ev.decision(actions, notes)
    if unit == "whole":
        return ev.decision(actions, notes)
    if unit is None and op_mix.gemm_dominated(ev.ctx) and not ev.launch:
        notes.append(f"GEMM-dominated ({ev.opmix['gemm_share']:.0%} GEMM+attention, {ev.opmix['basis']}): compile would "
                     f"return ~1.0x (at most {ev.opmix.get('compile_gain_bound')}x); no compile planned")
        return ev.decision(actions, notes, "~1.0x")
    if ev.block is not None and ev.block_target:
        if _block_compilable(ev, disables, trust_guards, actions, notes):
            _per_block(ev, disables, marks, actions, notes)
        return ev.decision(actions, notes)
    if ev.block is not None:
        notes.append(f"repeated block {untargetable(ev.block['cls'])}: no compile target")
    if unit != "region":
        _model_region(ev, actions, notes)
    return ev.decision(actions, notes)


@dataclass
class _Evidence:
    """What the planner reads from the ladder: the model and its repeated blocks (the first block,
    its target, the other declared blocks with theirs) and, once compile is in question, the
    rungs that decide it (op mix, batch scaling, recompiles, graph breaks)."""

    ctx: Context
    model: Any
    model_target: str | None
    blocks: list[dict]
    block: dict | None
    block_target: str | None
    #: the other classes the model declares beside ``block`` (``_repeated_blocks``), with their targets
    also: list[tuple[dict, str | None]]
    opmix: dict = field(default_factory=dict)
    bs: dict = field(default_factory=dict)
    rc: dict = field(default_factory=dict)
    launch: bool = False
    stable: bool = False
    breaks: list = field(default_factory=list)

    @classmethod
    def of(cls, ctx: Context) -> "_Evidence":
        model, _, _ = ctx.reference()
        blocks = ctx.evidence.blocks
        block = blocks[0] if blocks else None
        # a block of an installed package (transformers' GPT2Block) is targeted by import path and
        # applied from the plan's site (docs/design.md, "Library models")
        block_target = (block["target"] or library_target_of(block["cls"])) if block is not None else None
        also = [(b, b["target"] or library_target_of(b["cls"])) for b in region_blocks(blocks)[1:]]
        return cls(ctx, model, unit_target(type(model), ctx.session.src), blocks, block, block_target, also)

    def declared_notes(self) -> list[str]:
        """What the model's own list of its repeated blocks (``_repeated_blocks``: diffusers' regional
        compilation) says: every declared class is a per-block target, not only the first."""
        declared = self.ctx.evidence.declared
        return list(declared.notes()) if declared is not None else []

    def read_compile_evidence(self, notes: list[str]) -> None:
        """The rungs that decide the compile unit; a note where the recompiles rung did not run ok."""
        ctx, res, m = self.ctx, self.ctx.results, self.ctx.measured
        self.opmix, self.bs, self.rc = m("op_mix"), m("batch_scaling"), m("recompiles")
        self.launch = batch_scaling.launch_bound(self.ctx)
        self.stable = shapes_stable(ctx)
        if not res.get("recompiles") or not res["recompiles"].ok:
            notes.append("the recompiles rung did not run ok: shapes are treated as varying (no CUDA graphs)")
        self.breaks = [f for f in res["graph_breaks"].findings if f.function] if res.get("graph_breaks") and res["graph_breaks"].ok else []

    def block_forwards(self) -> set[str]:
        """The ``forward`` qualnames of every block class a per-block plan compiles."""
        return {_qual(self.block_target) + ".forward", *(_qual(t) + ".forward" for _, t in self.also)}

    def decision(self, actions: list, notes: list[str], expected_speedup: str | None = None) -> Decision:
        return Decision(_plan(self.ctx.session.spec, self.ctx, actions), notes, expected_speedup)


def _kernel(ctx: Context, actions: list, notes: list[str]) -> None:
    """``kernel`` on the function that calls a dominant non-GEMM op (top-ops rung), or why not."""
    top = ctx.measured("top_ops")
    dom = top.get("dominant")
    if not (dom and ctx.results["top_ops"].implies.startswith("kernel")):
        return
    sites = [f for f in ctx.results["top_ops"].findings if f.kind == "dominant_op" and f.function]
    if not sites:
        notes.append(f"{dom['op']} dominates but no call site under SRC was found: no kernel action")
        return
    site = sites[0]
    kernel = _kernel_name(dom["op"])
    actions.append(KernelAction(
        action="kernel", target=f"{site.file}::{site.function}", call=f"torch.{_op_name(dom['op'])}", kernel=kernel,
        why=f"top-ops: {dom['op']} is {dom['share']:.0%} of the step ({top['basis']}) >= 10% non-GEMM rule; called at {site.where}"
        + ("; kernel: stub (no catalog kernel)" if kernel == "stub" else "")))


def _allocator(ctx: Context, actions: list, notes: list[str]) -> None:
    """``allocator`` for fragmentation (memory rung). The harness is scaffolding, not the user's
    program: the action goes only to the entry point the user names (``--entry``); otherwise the
    finding is reported."""
    res = ctx.results
    if not (res.get("memory") and res["memory"].implies.startswith("allocator")):
        return
    evidence = f"memory: {res['memory'].verdict}"
    already = expandable_segments_on()
    if already:
        notes.append(f"{evidence}, with {already} already set: the allocator action would change nothing; lower the "
                     "step's peak memory instead (smaller batch, activation checkpointing) or leave more headroom")
    elif ctx.entry:
        basis = "" if res["memory"].measurement.get("source") == "oom" else " (steady state over the harness's shape sweep)"
        actions.append(AllocatorAction(action="allocator", target=ctx.entry, why=f"{evidence}{basis}"))
    else:
        notes.append(f"{evidence}: the fix is PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before the first CUDA "
                     "allocation; pass --entry file.py::func (your program's entry point) to plan the allocator action there")


def _stopped_early(ctx: Context, notes: list[str]) -> bool:
    """Whether the ladder stopped before the rungs that decide a compile (a note says so)."""
    res = ctx.results
    if ctx.evidence.stopped_at and not any(res.get(n) is not None and res[n].ok for n in ("batch_scaling", "op_mix")):
        notes.append(
            f"no compile planned: the ladder stopped at rung {ctx.evidence.stopped_at} before the rungs that decide it "
            "(batch scaling, op mix, the search)"
        )
        return True
    return False


def _whole(ev: _Evidence, mode: str, actions: list, notes: list[str]) -> None:
    """``compile`` of the model's entry (``strategy: whole``) with the ``disable``s its graph breaks
    imply; a break in the repeated block's own forward is kept, with a note."""
    bs, rc, block = ev.bs, ev.rc, ev.block
    if ev.launch and ev.stable:
        why = f"batch scaling: {bs['fixed_share']:.0%} fixed overhead (>= {batch_scaling.HIGH:.0%} launch-bound); shapes stable (0 recompiles across {rc.get('shapes', 1)} shapes)"
    else:
        why = "whole-model compile" + (f"; batch scaling: {bs['fixed_share']:.0%} fixed overhead" if bs else "")
        if not ev.stable:
            why += f"; shapes vary across {rc.get('shapes', 1)} shapes: automatic dynamic shapes"
    if block is not None:  # the blocks exist: say what was found (the search measures per-block against it)
        why += f"; {_unit_evidence(block, ev.ctx.measured('granularity'), [b for b, _ in ev.also])}"
    why += ("; CUDA graphs need one large capture" if mode == "reduce-overhead" else ("; CPU: no CUDA graphs" if not ev.ctx.session.cuda else ""))
    actions.append(CompileAction(action="compile", target=ev.model_target, strategy="whole", options=CompileOptions(mode=mode), why=why))
    block_forward = _block_forward(block, ev.block_target)
    kept = _breaks_at(ev.breaks, block_forward)
    if kept:
        notes.append(
            f"graph break inside {block_forward} itself at {', '.join(kept[:3])}: the whole-model compile keeps it, no "
            f"disable (a disabled {block_forward} would run every block eager under the compile), so the compiled model "
            "runs as more than one graph (measured so by the search); rewrite that line to stay in the graph to get one"
        )
    _disables(actions, ev.breaks, _units(ev.model_target, block_forward, *(_qual(t) + ".forward" for _, t in ev.also if t)),
              "whole-model compile")


def _block_compilable(ev: _Evidence, disables: bool, trust_guards: bool, actions: list, notes: list[str]) -> bool:
    """Whether the repeated block is compiled, read from the instance rung's guards: a guard in the
    block's own forward means no compile of it (its regions would fall back to eager silently,
    worse than no plan) unless ``trust_guards`` is False; a guard in a helper gets a ``disable``."""
    ctx = ev.ctx
    ir = ctx.measured("instance_recompiles")
    guards = [f for f in ctx.results["instance_recompiles"].findings if f.kind == "guard"] if ctx.results.get("instance_recompiles") else []
    if not ir.get("recompiles"):
        return True
    # a guard in the forward of any class the candidate compiles (the declared blocks)
    # is the block's own, never a helper to disable
    forwards = {_qual(ev.block_target) + ".forward", *(_qual(t) + ".forward" for _, t in ev.also if t)}
    in_forward = [g for g in guards if g.function in forwards or not g.function]
    helpers = [g for g in guards if g.function and g.function not in forwards]
    across = _instance_counts(ir, ev.block)
    if (in_forward or not helpers) and not trust_guards:
        notes.append(f"{across} ({', '.join(g.where for g in guards) or 'no line'}): compiled anyway, the measurement decides")
    elif in_forward or not helpers:
        libs = list(dict.fromkeys(g.library for g in guards if g.library and g.file is None))
        if libs and all(g.library and g.file is None for g in guards):
            # no line under SRC to keep eager or restructure: the search compiles it despite the guard
            notes.append(
                f"{across} from a guard in {', '.join(libs)} (an installed library's code, no line under SRC)"
                + ("; recompile limit hit" if ir.get("limit_hit") else "")
                + ": compiling it would leave blocks silently eager — no compile planned for the block by the rules"
                " (the search measures it compiled despite the guard, and the whole-model compile)"
            )
            return False
        where = ", ".join(g.where for g in guards) or "unknown line"
        notes.append(
            f"{across} from a guard in its own forward ({where})"
            + ("; recompile limit hit" if ir.get("limit_hit") else "")
            + ": compiling it would leave blocks silently eager; restructure (make the value a tensor or move it out of forward) — no compile planned for the block"
        )
        return False
    elif disables:
        seen = set()
        for g in helpers:
            if g.function in seen:
                continue
            seen.add(g.function)
            actions.append(DisableAction(
                action="disable", target=f"{g.file}::{g.function}",
                why=f"instance recompiles: {across}" + (" (recompile limit hit)" if ir.get("limit_hit") else "")
                + f"; guard on per-instance state at {g.where}: keep this helper eager"))
    return True


def _per_block(ev: _Evidence, disables: bool, marks: bool, actions: list, notes: list[str]) -> None:
    """``compile`` of each repeated block class (``strategy: region``) with the ``disable``s its
    graph breaks imply, ``fullgraph`` where nothing breaks it, and the ``mark_dynamic``s of its
    varying inputs."""
    units = ev.block_forwards()
    # names the blocks' code reaches, read from their files under SRC (a library block's
    # breaks have no SRC function, so its disables are never pruned by this)
    reached = None
    if ev.block["target"] and all(b["target"] for b, _ in ev.also):
        reached = set()
        for t in [ev.block_target, *(t for _, t in ev.also)]:
            reached |= names_reached(ev.ctx.session.src / t.split("::", 1)[0], _qual(t) + ".forward")
    disabled = _disables(actions, ev.breaks, units, "per-block compile", notes, reached) if disables else False
    options = CompileOptions(fullgraph=_fullgraph(ev, units, reached, disables, notes) and not disabled
                             and not any(isinstance(a, DisableAction) for a in actions))
    _block_compiles(ev, options, actions)
    if marks:  # each compiled class at its own boundary, from its own measured dims
        per_class = {c["class"]: c for c in ev.rc.get("classes") or []}
        for i, (b, t) in enumerate([(ev.blocks[0], ev.block_target), *ev.also]):
            dims = per_class.get(b["cls"].__name__)
            if i and (dims is None or not t):
                continue
            _mark_dynamic(actions, notes, b, dict(ev.rc, **{k: dims[k] for k in ("varying_block_dims", "varying_block_other_dims")})
                          if dims else ev.rc, t, label=f"{b['cls'].__name__}: " if ev.also else "")


def _fullgraph(ev: _Evidence, units: set[str], reached: set[str] | None, disables: bool, notes: list[str]) -> bool:
    """Whether the block can be compiled with ``fullgraph=True``: no graph break in its own forward,
    none in a helper it keeps compiled, no helper the source keeps eager (each said in a note)."""
    forward_qual = _qual(ev.block_target) + ".forward"
    own = sorted({w for u in units for w in _breaks_at(ev.breaks, u)})
    if own:
        notes.append(
            f"graph break inside {forward_qual} itself at {', '.join(own[:3])}: the compiled block runs as more than one "
            "graph (measured so by the search), and `stackpart check` reports the line once the block is "
            "compiled; rewrite it to stay in the graph (torch.where / torch.cond for a data-dependent branch, a tensor "
            "instead of .item()) to get one graph per block"
        )
    helper_breaks = not disables and any(f.function not in units for f in ev.breaks)
    # a helper the source keeps eager is a graph break whether or not the rung saw it
    kept_eager = [n for b in [ev.block, *(b for b, _ in ev.also)] for n in _source_disabled(b["cls"], reached)]
    if kept_eager:
        notes.append(f"{forward_qual} reaches {', '.join(kept_eager[:3])}, which the source keeps eager with "
                     "@torch.compiler.disable: the block is compiled without fullgraph (a disabled call is a graph break)")
    return not own and not helper_breaks and not kept_eager


def _block_compiles(ev: _Evidence, options: CompileOptions, actions: list) -> None:
    """The per-block ``compile`` actions: one per declared class (``_repeated_blocks``), else the block's."""
    block, opmix, bs = ev.block, ev.opmix, ev.bs
    share = ev.ctx.measured("granularity").get("share")
    reason = (
        f"; launch-bound ({bs['fixed_share']:.0%} fixed overhead) but shapes vary: per-block compile, no CUDA graphs"
        if ev.launch
        else f"; op mix: GEMM+attention {opmix.get('gemm_share', 0):.0%} (< {op_mix.GEMM_DOMINATED:.0%}), fusible {opmix.get('fusible_share', 0):.0%}"
    ) + ("; fullgraph=True: the graph_breaks rung found no break in the block's code, so a break added later "
         "raises instead of splitting the block silently" if options.fullgraph else "")
    if not block.get("declared"):
        actions.append(CompileAction(
            action="compile", target=ev.block_target, strategy="region", options=options,
            why=f"granularity: {len(block['modules'])} x {block['cls'].__name__} in {block['name']}"
            + (f" = {share:.0%} of the step" if share is not None else "") + reason))
        return
    # the targets are the model's declaration, the share the declared blocks' together
    # (granularity rung); the search measures this candidate like any other
    listed = " + ".join(f"{len(b['modules'])} x {b['cls'].__name__}" for b in [block, *(b for b, _ in ev.also)])
    for b, t in [(block, ev.block_target), *ev.also]:
        actions.append(CompileAction(
            action="compile", target=t, strategy="region", options=options,
            why=f"declared: {block['declared']} lists {b['cls'].__name__} (the model's own regional-compilation "
                f"blocks, what diffusers' compile_repeated_blocks compiles); granularity: {listed}"
                + (f" = {share:.0%} of the step" if share is not None else "") + reason))


def _model_region(ev: _Evidence, actions: list, notes: list[str]) -> None:
    """No repeated block: the model is its own region (``compile``, ``strategy: region``) with the
    ``disable``s its graph breaks imply."""
    if not ev.model_target:
        return
    actions.append(CompileAction(
        action="compile", target=ev.model_target, strategy="region",
        why=f"{_unit_evidence(ev.block, ev.ctx.measured('granularity'), [b for b, _ in ev.also])}: the model is the unit; op mix "
            f"GEMM+attention {ev.opmix.get('gemm_share', 0):.0%} (< {op_mix.GEMM_DOMINATED:.0%})"))
    _disables(actions, ev.breaks, _units(ev.model_target, _block_forward(ev.block, ev.block_target),
                                         *(_qual(t) + ".forward" for _, t in ev.also if t)), "model compile")


def _instance_counts(ir: dict, block: dict) -> str:
    """``3 recompile(s) across 4 instances of Block`` from the instance-recompiles rung's
    measurement, one per class with recompiles where it examined several (``classes``)."""
    per = [c for c in ir.get("classes") or [] if c.get("recompiles")] or [ir]
    return ", ".join(f"{c['recompiles']} recompile(s) across {c['instances']} instances of {c.get('class') or block['cls'].__name__}"
                     for c in per)


def _block_forward(block: dict | None, block_target: str | None) -> str | None:
    """The qualname of the repeated block's ``forward`` (what a compile of the model runs once per
    block), or None without a block."""
    if block is None:
        return None
    return (_qual(block_target) if block_target else block["cls"].__qualname__) + ".forward"


def _units(model_target: str, *block_forwards: str | None) -> set[str]:
    """The functions a compile of the model never disables: its own ``forward`` and the repeated
    blocks' (the structural block's and every declared one's; a disable there would run the whole
    unit, or every block, eager)."""
    return {_qual(model_target) + ".forward", *(f for f in block_forwards if f)}


def _breaks_at(breaks: list, qual: str | None) -> list[str]:
    """``file:line`` of the graph breaks located in the function ``qual`` itself, sorted."""
    return sorted({f.where for f in breaks if qual is not None and f.function == qual})


def _source_disabled(cls: Any, reached: set[str] | None) -> list[str]:
    """The functions of ``cls``'s module (and methods of ``cls``) that the source wraps in
    ``torch.compiler.disable`` (``_torchdynamo_disable`` set, torch 2.13) and that the block's
    code may reach (``reached``, :func:`.locate.names_reached`; None or empty: nothing found)."""
    import sys

    if not reached:
        return []
    mod = sys.modules.get(getattr(cls, "__module__", ""))
    found = [n for n, v in sorted(vars(mod).items()) if n in reached and getattr(v, "_torchdynamo_disable", False)] if mod else []
    found += [f"{cls.__name__}.{n}" for n, v in sorted(vars(cls).items()) if n in reached and getattr(v, "_torchdynamo_disable", False)]
    return found


def _unit_evidence(block: dict | None, gran: dict, also: list[dict] | None = None) -> str:
    """What the granularity rung found, for a whole-model ``why:``: the repeated block with its
    measured share of the step (and where it lives: under SRC, an installed package), or that none
    was found. ``also``: the other classes the model declares beside ``block`` (``_repeated_blocks``,
    :mod:`.declared`), whose share the rung measured together with it."""
    if block is None:
        return "no repeated block found (a ModuleList/Sequential of 2+ modules of one class)"
    share = gran.get("share") if gran.get("block") == block["name"] else None
    if block.get("declared"):
        listed = " + ".join(f"{len(b['modules'])} x {b['cls'].__name__}" for b in [block, *(also or [])])
        text = f"repeated blocks declared by {block['declared']}: {listed}"
    else:
        text = f"repeated block {len(block['modules'])} x {block['cls'].__name__} in {block['name']}"
    text += f" = {share:.0%} of the step" if share is not None else " (share not measured)"
    if not block["target"]:
        lib = library_target_of(block["cls"])
        text += (f", in an installed package ({lib}: the per-block candidate applies it from the plan's site)" if lib
                 else f", defined outside SRC ({block['cls'].__module__}) and not importable by path: no per-block target")
    return text


def _disables(actions: list, breaks: list, units: set[str], what: str, notes: list | None = None, reached: set[str] | None = None) -> bool:
    """``disable`` every helper that breaks the graph inside the compiled unit; never a function of
    ``units`` (the unit's own ``forward``, and for a compile of the model the repeated block's).

    ``reached``, for a unit smaller than the model: the names its code can reach
    (:func:`.locate.names_reached`). A helper that no break's call chain (``Finding.callers``)
    shows inside the unit and that is not among them runs eager already, so it gets a note in
    ``notes`` instead of a decorator that would do nothing. Dynamo's break stacks start at the
    frame it was tracing, so a chain alone does not prove a helper is outside.
    """
    added = False
    have = {a.target for a in actions if isinstance(a, DisableAction)}
    inside = {f.function for f in breaks if f.function and units & set(f.callers[:-1])}
    noted: set[str] = set()
    for f in breaks:
        if f.function in units or f.function is None:
            continue
        if f.library and not units & set(f.callers[:-1]):
            # a break in an installed package's code: kept eager only where the unit's own call
            # chain leads to it (the rung's stack starts at the model's forward)
            if f.function not in noted and notes is not None:
                notes.append(f"graph break at {f.where} in {f.library}: " + (
                    f"the {what}'s code does not lead there ({' -> '.join(f.callers)}); no disable" if len(f.callers) > 1 else
                    "no call chain leading to it was recorded (Dynamo's break stack starts at the frame it was tracing), "
                    f"so it is not known to be inside the {what}; no disable"))
            noted.add(f.function)
            continue
        if reached is not None and f.function not in inside and f.function.rsplit(".", 1)[-1] not in reached:
            if f.function not in noted and notes is not None:
                chain = f", called from {' -> '.join(f.callers[:-1])}" if f.callers[:-1] else ""
                notes.append(f"graph break at {f.where} in {f.function}{chain}: outside the {what} (its code never calls "
                             f"{f.function}), it runs eager; no disable needed")
            noted.add(f.function)
            continue
        target = f.library or f"{f.file}::{f.function}"
        if target in have:
            continue
        have.add(target)
        actions.append(DisableAction(action="disable", target=target, why=f"graph break at {f.where}: {f.message[:160]}; keep eager inside the {what}"))
        added = True
    return added


def _block_params(cls: Any) -> list[str | None]:
    """The positional parameter names of a block class's ``forward`` after ``self`` (what a
    library block's forward pre-hook binds its inputs to)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _mark_dynamic(actions: list, notes: list, block: dict, rc: dict, block_target: str | None = None, label: str = "") -> None:
    """The ``mark_dynamic`` actions for ``block``'s varying input dims (``rc``: the recompiles
    rung's measurement, its ``varying_block_dims``/``varying_block_other_dims`` this block's class's)
    at the region boundary, or a note (prefixed ``label``: the class, where a model declares several)
    saying why none is written."""
    if not rc.get("recompiles") or rc.get("value_guard_recompiles", 0) >= rc["recompiles"]:
        return
    if rc.get("dynamic_only_graph_breaks"):
        notes.append(
            f"{label}not marked dynamic: {rc['dynamic_only_graph_breaks']} graph break(s) appear only once shapes are dynamic "
            "(see the recompiles rung's findings): a mark would make every call break there; make that code "
            "shape-agnostic (a Python bool from a size becomes a SymBool) or bucket the shapes"
        )
        return
    dims = rc.get("varying_block_dims") or []
    owner_target = block["owner_target"]
    names = boundary_args(block["owner"], block["attr"]) if owner_target else []
    # a library block: marked as it enters the block (a forward pre-hook binds the block's own
    # parameters), since the owner's forward is not ours to edit
    at_block = not owner_target and block_target is not None and not block["target"]
    if at_block:
        names = _block_params(block["cls"])
        owner_target = block_target
    # All or nothing: a dim marked dynamic while a tensor it meets stays static (Llama's hidden
    # states marked, its rotary cos/sin passed as position_embeddings=(cos, sin) not) is
    # specialised by Dynamo and raises ConstraintViolationError on the first call (HF Llama,
    # transformers 5.24, CPU). Automatic dynamic shapes cost one recompile instead.
    owner_forward = f"{owner_target}.forward" if owner_target else f"{type(block['owner']).__qualname__}.forward, which is defined outside SRC"
    unmarkable = [f"block input {d['arg']} dim {d['dim']} (not a name bound in {owner_forward})"
                  for d in dims if d["arg"] >= len(names) or names[d["arg"]] is None]
    others = rc.get("varying_block_other_dims") or []
    # the pre-hook binds keyword inputs by name too (GPT-2's position_ids); a nested one it cannot reach
    by_name = [o for o in others if at_block and o["dim"] is not None and str(o["input"]).isidentifier()]
    unmarkable += [f"block input {o['input']} dim {o['dim']} (a keyword or nested argument)" if o["dim"] is not None
                   else f"block input {o['input']} (an int: {sorted(set(o['sizes']))})"
                   for o in others if o not in by_name]
    if unmarkable:
        notes.append(f"{label}not marked dynamic: " + "; ".join(unmarkable[:3]) + " also varies, and mark_dynamic at the "
                     "boundary cannot reach it (a partly marked boundary raises ConstraintViolationError); "
                     "expect one automatic-dynamic recompile")
        return
    seen = set()
    for d in [*dims, *({"arg": None, "name": o["input"], "dim": o["dim"], "sizes": o["sizes"]} for o in by_name)]:
        arg = names[d["arg"]] if d["arg"] is not None else d["name"]
        if (arg, d["dim"]) in seen:
            continue
        seen.add((arg, d["dim"]))
        # every varying block input (Llama: hidden states and the rotary cos/sin) is marked: an
        # unmarked one recompiles once more under automatic dynamic shapes
        actions.append(
            MarkDynamicAction(
                action="mark_dynamic",
                target=owner_target if at_block else owner_target + ".forward",
                arg=arg,
                dim=d["dim"],
                # maybe_mark_dynamic, as the search measures it: the ladder cannot see
                # the guards the code needs (GPT-2 requires 128 <= seq <= 1023), and a strict mark
                # the code cannot honour raises ConstraintViolationError on the first call
                strict=False,
                why=f"recompiles: {rc['recompiles']} across {rc['shapes']} shapes; the block input {arg!r} dim {d['dim']} varies {sorted(set(d['sizes']))}: mark it where it enters the region (maybe_mark_dynamic, as measured)",
            )
        )


def _plan(spec: Any, ctx: Context, actions: list) -> Plan:
    amort = None if ctx.amortization_assumed else ctx.amortization
    site = None
    if any(a.library for a in actions):
        site = getattr(ctx, "site", None) or default_site(ctx)
    return Plan(version=1, harness=spec, amortization=amort, site=site, actions=actions)


def default_site(ctx: Context) -> str:
    """The site a plan with library actions gets without ``--site``: the harness's model
    function (it returns the model; validate and the search build the model through it), named
    where it is defined (:func:`.locate.model_function_target`): ``train.py::build_model`` for a
    harness that imports it (``from train import build_model``), since the rewrite decorates a
    definition and the harness holds only the import; ``harness.file::harness.model`` where it is
    not a function of a file under SRC."""
    spec = ctx.session.spec
    return model_function_target(getattr(ctx.session, "harness", None)) or f"{spec.file}::{spec.model}"