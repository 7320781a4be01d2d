"""Plan rules that need more than one action, or the source, to check. Each refusal says why.

* ``mode: reduce-overhead`` with ``strategy: region``: CUDA graphs over many small regions are
  known to crash (pytorch#152887) and repay the fixed replay cost per region
  (partitioning-the-stack, "The exception ... CUDA Graphs prefer one large capture").
* ``strategy: nested`` without a ``whole`` compile: a nested compile region is only a hint to an
  outer ``torch.compile``; alone it compiles nothing.
* compile and disable on one function, in the plan or between the plan and the source (a compile
  of a function the source keeps eager, a ``disable`` of one the source compiles with a decorator:
  either way the disabled frame runs eager and nothing compiles); the same action twice on one function (``mark_dynamic``:
  the same ``arg`` and ``dim`` twice; different inputs or dims of one function are fine).
* ``disable`` inside a ``fullgraph=True`` target: fullgraph forbids the graph break a disabled
  frame is, so the compile would raise.
* ``mark_dynamic`` inside a compiled region: Dynamo refuses ``mark_dynamic`` in a traced frame.
* ``dynamo_config`` on a function the plan or the source compiles: the flags are read when a frame
  is traced, so they must be set in eager code before the compiled code first runs (the program's
  entry), not inside the frame being traced.
* ``own_call`` (an edit of the program's own compile, :mod:`.actions.own_call`) reads as what it
  writes: its ``mode``/``fullgraph`` where it sets them, so it may not set ``fullgraph: true`` around
  a function the source or the plan keeps eager, nor ``mode: reduce-overhead`` on a ``region``; an
  ``own_call`` that sets ``fullgraph: false`` lets a plan's ``disable`` inside that function stand.
  Where the program's call is in the target's body (``model.compile()`` in ``main``), the region is
  what it compiles, not the target: the rules that need the region's extent skip it.
* what the source already holds (edits compose with the program's own setup): a
  ``fullgraph=True`` compile around a function the source keeps eager with
  ``@torch.compiler.disable``; a ``disable`` inside a function the source compiles with
  ``@torch.compile(fullgraph=True)``; a ``mark_dynamic`` inside a function the source compiles (the
  target itself or a function it calls). The same facts as ``stackpart check``'s SP108 and SP105,
  so a plan can never write a diff that ``check`` then flags.

"Inside" is decided statically: the function itself, or a function the compiled one calls
directly by name (``route(x)``) or as a method of its own class (``self.route(x)``), in one file.

* a ``compile`` (not ``own_call``) of a function whose own compile in the source passes
  ``disable=True``: that compile compiles nothing, the rewrite adds no second compile over it, so
  the action would change nothing; the refusal names ``own_call: {disable: false}``. Its own
  compile is a decorator on it or its name rebound; the program's compile of an instance turned
  off, ``model = torch.compile(Net(), disable=True)`` or ``model.compile(disable=True)`` (in the
  target's file or another), is none: torch.compile returns the instance itself, so a ``compile``
  of ``Net`` is written and its decorated ``forward`` compiles (checked on torch 2.13, CPU).
* a compile turned off (``disable=True``, ``torch.compile`` then returns what it was given) is no
  compile to any rule here: not of the function itself (a ``disable``, ``mark_dynamic`` or
  ``dynamo_config`` there edits eager code), not a region around what it calls, not a
  ``fullgraph=True`` one. Off is read after the plan: an ``own_call`` that sets ``disable: true``
  turns a source compile off for the rules, one that sets ``disable: false`` turns it back on, its
  own options (``fullgraph=True`` included) with it.
* a ``compile`` (not ``own_call``) of a function the source registers with
  ``torch.compiler.allow_in_graph`` (or ``torch._dynamo.allow_in_graph``, a call or a decorator, in
  the target's file): compiled code that calls it puts the call into its graph as one opaque call
  run on fake tensors, where the compiled function raises (``Cannot access data pointer of
  Tensor``). The refusal names the registration's ``file:line``.
* the source compiles a function with ``@torch.compile`` or by rebinding its name, ``f =
  torch.compile(f, ...)`` (:func:`.compile_facts.rebound_compiles`), or with torch.compile's older
  spelling, ``@torch._dynamo.optimize(...)`` or ``f = torch._dynamo.optimize(...)(f)`` (its
  ``nopython=True`` is ``fullgraph=True``, :func:`.compile_facts.as_compile_call`): each form is
  the source's compile of that function for every rule above.
* a ``compile`` (not ``own_call``, not ``strategy: nested``) of a function that a function the
  source compiles (a decorator or a rebinding) calls directly: it is traced in the source's
  compiled region already, so the plan would compile it a second time. The refusal names the
  source's compile (``file:line``) and the ``own_call`` edit of it. The one-file reading of
  "inside" above: a ``compile`` of a block class whose instance a compiled ``forward`` calls
  (``self.block(x)``) is not seen here; where that ``forward``'s class builds and holds the block
  (``GPT.__init__`` builds the ``Block``s, ``@torch.compile`` on ``GPT.forward``),
  :mod:`.rewrite.decorated_enclosers` refuses it (the decorator's ``file:line``, the construction,
  and ``own_call: {disable: true}`` of the decorated method as the way through; a decorator with
  ``disable=True`` counts as none).
* the other way round, a ``compile`` (not ``own_call``, not ``strategy: nested``) of a class whose
  compiled ``forward`` runs a method another compile covers: one the source compiles with a
  decorator (``@torch.compile`` on ``Block._attn``, which ``Block.forward`` calls as
  ``self._attn(x)``; or on ``Block.forward`` or such a method where the class builds the ``Block``s),
  whose compile would be inlined and its options never used, refused at the plan's compile; or one
  the plan compiles too (``Net`` and ``Block``, neither a ``nested`` hint), refused at the inner
  compile's line naming the outer one's (:mod:`.rewrite.enclosed_compiles`).
* a ``compile`` (not ``own_call``, not ``strategy: nested``) of a class ``Net`` (or ``Net.forward``)
  whose instance the program compiles whole itself, in any file under SRC (``model =
  torch.compile(Net())``, ``model = Net(); model.compile()``, in a function or at a script's top
  level): Dynamo inlines the decorated ``forward`` into that compile, so the plan's decorator and
  its options would never be used. Checked after these rules, by
  :func:`.rewrite.regional_path.check_compiled_whole` (the class read as ``own_call: {regional}``
  reads it; SRC walked once, only where the plan adds a compile of a ``forward``, only files that
  mention ``compile`` parsed): where an ``own_call`` of the plan keeps that call on, the refusal
  names that action; where it turns that call ``regional``, the refusal names its
  ``own_call.regional`` line (the decorated ``forward`` inlines the blocks compiled in place, whose
  compile never receives a graph; drop one of the two); where the plan does not edit the call, it names the call (``file:line``) and
  the way through, an ``own_call`` edit of it (``disable: true``; ``regional`` would leave the blocks it compiles in place inlined into this compile, that compile never used) or ``strategy:
  nested`` beside the plan's ``whole`` compile. A call with ``disable=True`` or a discarded result
  compiles nothing and is not read. The same for a class that ``Net`` encloses: a ``compile`` of ``Block``
  where ``Net.__init__`` builds the blocks and holds them (``self.blocks =
  nn.ModuleList([Block() ...])``, at any depth, in any file under SRC; :mod:`.rewrite.enclosing`),
  unless the plan turns that call regional or off; the refusal names the construction's ``file:line``
  and the call turned ``regional`` over those blocks (where the source says their container) or off. Diagnose reads SRC so once per run for all its candidates and
  the plan it writes (:class:`.rewrite.program_compiles.ProgramCompiles`,
  :func:`rewriter.diagnose.search.candidate_rewrite`): a candidate refused so is pruned, and no plan
  it writes is one the rewrite refuses.
* a ``compile`` (not ``own_call``, not ``strategy: nested``) of ``Block`` beside an ``own_call:
  {regional: blocks}`` edit whose loop compiles those same ``Block`` instances (``Net.__init__``
  holds them in ``self.blocks``), or instances of a class that builds them: each block would be
  compiled twice, and one of the two compiles gets no graph (:func:`check_regional_blocks`). The
  refusal names both actions and which one to keep.
* a ``compile`` (not ``own_call``, not ``strategy: nested``) of ``Block`` whose instances a loop of
  the program compiles each in place itself (``for layer in model.layers: layer.compile()``,
  ``model.layers[i] = torch.compile(layer)``, ``for m in model.modules(): if isinstance(m, Block):
  m.compile()``; not a wrapper stored in a container of its own, ``fast[i] = torch.compile(layer)``,
  which leaves the model's blocks to the plan's compile), or instances of a class that builds them: the same double compile as beside a
  regional edit, one of the two dead (:func:`check_program_loops`). The refusal names the loop's
  ``file:line`` and the ways through: drop the action, or turn the loop's compile off.
* a ``compile`` (not ``own_call``) of a block class the program compiles itself with
  ``model.compile_repeated_blocks(...)`` (a class named in a ``_repeated_blocks`` list that SRC or
  the library target's own file declares), or of the model class that declares it: the blocks would
  be compiled a second time (:mod:`.own_regional`, :func:`check_own_regional`). The refusal names
  the program's call (``file:line``) and the ``own_call`` target that edits it instead. Where every
  such call passes ``disable=True`` (the source's, or the plan's ``own_call.disable`` on the
  function that holds it) it compiles nothing: a compile of the model class stands (with
  a ``nested`` hint on a block), and a compile of a block class (what the call compiles once on
  again) is refused naming ``own_call: {disable: false}``.

Library targets (installed packages, applied from the site) get the one rule that breaks a
program at run time: a ``disable`` of a function a ``fullgraph=True`` library compile reaches in
its own file, the file that defines the function or the module the target names where that
module imports it (``modeling_bert:create_bidirectional_mask``: the site replaces the name there)
(:func:`check_library`, read from the package's source with :mod:`ast`, never imported). A
disabled function in another file of the package is not seen: the search's
measurement of the candidate catches what this cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from .actions.base import canonical, find_decorator, imported_names
from .actions.compile import COMPILE_DECORATORS
from .actions.disable import DISABLE_DECORATORS
from .compile_facts import (DYNAMO_OPTIMIZE, SourceSite, allowed_in_graph, as_compile_call, is_optimize_call, options,
                            rebinding_code, rebound_compiles, turned_off)
from .errors import StackpartError
from .plan import ADVISORY_ACTIONS, CompileAction, DisableAction, DynamoConfigAction, LoadedPlan, MarkDynamicAction
from .targets import Definition, ResolvedTarget, collect_definitions, decorator_name


@dataclass
class Bound:
    """One plan action with the function it resolved to."""

    index: int
    action: object
    target: ResolvedTarget
    module: cst.Module
    #: :func:`rewriter.targets.collect_definitions` of ``module``, when the caller has it
    #: (computed once per file here otherwise)
    definitions: dict[str, list[Definition]] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.target.relpath, self.target.qualname)


def _callees(target: ResolvedTarget) -> set[str]:
    """Qualnames the function calls directly: ``f(...)`` → ``f``; ``self.g(...)`` → ``Cls.g``."""
    owner = target.qualname.rsplit(".", 1)[0] if "." in target.qualname else None
    found: set[str] = set()
    for call in m.findall(target.node, m.Call()):
        func = call.func  # type: ignore[attr-defined]
        if isinstance(func, cst.Name):
            found.add(func.value)
        elif (
            owner
            and isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            found.add(f"{owner}.{func.attr.value}")
    return found


def _source_rebindings(module: cst.Module, imports: dict[str, str]) -> dict[str, SourceSite]:
    """The functions ``module`` compiles by rebinding their name, in either spelling:
    ``f = torch.compile(f, ...)`` and ``f = torch._dynamo.optimize(...)(f)``
    (:func:`.compile_facts.rebound_compiles` with ``optimize``)."""
    return rebound_compiles(module, imports, optimize=True)


def _code(node: cst.CSTNode) -> str:
    """``node``'s source on one line."""
    return " ".join(cst.Module([]).code_for_node(node).split())


class _Facts:
    """Per-check cache of each file's imports: one import scan per file, not one per action
    (a plan can hold thousands of actions on one large file)."""

    def __init__(self) -> None:
        self._imports: dict[int, dict[str, str]] = {}

        self._functions: dict[int, dict[str, cst.FunctionDef]] = {}
        self._cache: dict[tuple[str, int], object] = {}
        #: ``(relpath, qualname)`` of each function whose own compile the plan turns off
        #: (``own_call: {disable: true}``, True) or back on (``disable: false``, False): that state,
        #: not the source's ``disable=``, is what the rules read (:meth:`compile_off`)
        self.own_off: dict[tuple[str, str], bool] = {}

    def _names(self, module: cst.Module) -> dict[str, str]:
        key = id(module)
        if key not in self._imports:
            self._imports[key] = imported_names(module)
        return self._imports[key]

    def carries_compile(self, bound: Bound) -> bool:
        """Whether the source holds a compile of the target itself, on or off: a compile decorator
        on it, or its name rebound to its compiled self (``f = torch.compile(f)``, :meth:`rebound`).
        The form of the program's call an ``own_call`` edits; whether it compiles is
        :meth:`already_compiled`."""
        imports = self._names(bound.module)
        return (any(canonical(d, imports) in COMPILE_DECORATORS for d in bound.target.decorators)
                or self.rebound(bound) is not None)

    def compile_off(self, bound: Bound) -> bool:
        """Whether the target's own compile in the source is off once the plan is applied: the
        plan's ``own_call.disable`` where it sets one, else the source's ``disable=True``
        (:meth:`turned_off`). False for a target that carries no compile."""
        return self.own_off.get(bound.key, self.turned_off(bound) is not None)

    def already_compiled(self, bound: Bound) -> bool:
        """Whether the target itself is compiled with the plan applied: it carries the source's
        compile (:meth:`carries_compile`) and that compile is not off (:meth:`compile_off`). A
        ``torch.compile(..., disable=True)`` returns what it was given, so every rule reads the
        target as eager code there."""
        return self.carries_compile(bound) and not self.compile_off(bound)

    def turned_off(self, bound: Bound) -> cst.CSTNode | None:
        """The source's own compile of the target where it passes ``disable=True`` (the decorator,
        or the rebinding's call), else None: torch.compile then returns what it was given, so the
        target is not compiled although it carries a compile."""
        imports = self._names(bound.module)
        dec = self.decorated(bound.module, bound.target.node, COMPILE_DECORATORS) if bound.target.node is not None else None
        if dec is not None:
            call = dec.decorator if isinstance(dec.decorator, cst.Call) else None
            return dec if turned_off(as_compile_call(call, imports)) else None
        site = self.rebound(bound)
        return site.node if site is not None and turned_off(as_compile_call(site.node, imports)) else None  # type: ignore[arg-type]

    def _per_module(self, kind: str, module: cst.Module, read: Any) -> dict[str, SourceSite]:
        key = (kind, id(module))
        if key not in self._cache:
            self._cache[key] = read(module, self._names(module))
        return self._cache[key]  # type: ignore[return-value]

    def rebound(self, bound: Bound) -> SourceSite | None:
        """The source's ``f = torch.compile(f, ...)`` (or ``f = torch._dynamo.optimize(...)(f)``) of
        the target (:func:`_source_rebindings`)."""
        return self._per_module("rebound", bound.module, _source_rebindings).get(bound.target.qualname)

    def in_graph(self, bound: Bound) -> SourceSite | None:
        """The source's ``allow_in_graph`` registration of the target (:func:`.compile_facts.allowed_in_graph`)."""
        return self._per_module("in_graph", bound.module, allowed_in_graph).get(bound.target.qualname)

    def compiled_by(self, bound: Bound) -> str:
        """How the source compiles the target itself, for a refusal: a decorator on it, or the
        rebinding's line and code."""
        site = self.rebound(bound)
        if site is None or any(canonical(d, self._names(bound.module)) in COMPILE_DECORATORS
                               for d in bound.target.decorators):
            return "with a decorator on that function"
        name = bound.target.qualname.rsplit(".", 1)[-1]
        return f"at {self.where(bound, site.node)} ({rebinding_code(name, site.node)})"  # type: ignore[arg-type]

    def optimize_spelled(self, bound: Bound, site: cst.CSTNode) -> bool:
        """Whether the source's compile ``site`` in the target's file (a decorator, or a rebinding's
        call) is ``torch._dynamo.optimize``'s, whose arguments ``own_call`` does not edit."""
        imports = self._names(bound.module)
        if isinstance(site, cst.Decorator):
            return canonical(decorator_name(site), imports) == DYNAMO_OPTIMIZE
        return isinstance(site, cst.Call) and is_optimize_call(site, imports)

    def where(self, bound: Bound, node: cst.CSTNode) -> str:
        """``file.py:LINE`` of ``node`` in the target's file (positions resolved only for an error)."""
        key = ("positions", id(bound.module))
        if key not in self._cache:
            try:
                self._cache[key] = MetadataWrapper(bound.module, unsafe_skip_copy=True).resolve(PositionProvider)
            except Exception:  # noqa: BLE001 - a line is a courtesy in an error already being raised
                self._cache[key] = {}
        pos = self._cache[key].get(node)  # type: ignore[attr-defined]
        return f"{bound.target.relpath}:{pos.start.line}" if pos is not None else bound.target.relpath

    def functions(self, module: cst.Module, definitions: dict[str, list[Definition]] | None = None
                  ) -> dict[str, cst.FunctionDef]:
        """The module's functions and methods by qualname (``route``, ``Block.forward``): the
        definitions a plan target can name (:func:`rewriter.targets.collect_definitions`, which
        looks through ``if``/``try``/``with`` blocks); of a name defined twice, the last."""
        key = id(module)
        if key not in self._functions:
            defs = definitions if definitions is not None else collect_definitions(module)
            found: dict[str, cst.FunctionDef] = {}
            for qual, hits in defs.items():
                funcs = [d.node for d in hits if d.kind == "function"]
                if funcs:
                    found[qual] = funcs[-1]  # type: ignore[assignment]
            self._functions[key] = found
        return self._functions[key]

    def decorated(self, module: cst.Module, func: cst.FunctionDef, names: set[str]) -> cst.Decorator | None:
        """The first decorator of ``func`` whose canonical name is in ``names``."""
        return find_decorator(func, names, self._names(module))

    def _compiled(self, bound: Bound) -> list[tuple[str, bool, set[str], cst.CSTNode]]:
        """The functions the target's module compiles with a decorator or a rebinding (``f =
        torch.compile(f)``), in torch.compile's spelling or torch._dynamo.optimize's (its
        ``nopython=True`` read as ``fullgraph=True``, :func:`.compile_facts.as_compile_call`):
        ``(qualname, fullgraph literal, the qualnames it covers: itself and what it calls directly,
        the decorator or the rebinding's call)``, one scan per file."""
        module = bound.module
        key = ("compiled", id(module))
        if key not in self._cache:
            found = []
            rebound = self._per_module("rebound", module, _source_rebindings)
            for qual, func in self.functions(module, bound.definitions).items():
                dec = self.decorated(module, func, COMPILE_DECORATORS)
                site: cst.CSTNode
                if dec is not None:
                    call, site = (dec.decorator if isinstance(dec.decorator, cst.Call) else None), dec
                elif qual in rebound:  # f = torch.compile(f, ...)
                    call = site = rebound[qual].node  # type: ignore[assignment]
                else:
                    continue
                call = as_compile_call(call, self._names(module))  # torch._dynamo.optimize's nopython= is fullgraph=
                if self.own_off.get((bound.target.relpath, qual), turned_off(call)):
                    continue  # disable=True (the source's or the plan's): compiles nothing, so no region
                fullgraph = options(call)[0] is True
                found.append((qual, fullgraph, {qual, *_callees(ResolvedTarget("", qual, func, []))}, site))
            self._cache[key] = found
        return self._cache[key]

    def _disabled(self, bound: Bound) -> set[str]:
        module = bound.module
        key = ("disabled", id(module))
        if key not in self._cache:
            self._cache[key] = {q for q, f in self.functions(module, bound.definitions).items()
                                if self.decorated(module, f, DISABLE_DECORATORS) is not None}
        return self._cache[key]

    def source_compiles(self, bound: Bound, fullgraph: bool = False) -> str | None:
        """The function of the target's file that the source compiles with a decorator
        (``fullgraph=True`` only, with ``fullgraph``) and that is the target or calls it
        directly; None when there is none."""
        for qual, full, covered, _ in self._compiled(bound):
            if bound.target.qualname in covered and (full or not fullgraph):
                return qual
        return None

    def source_compile_around(self, bound: Bound) -> tuple[str, cst.CSTNode] | None:
        """The function of the target's file that the source compiles (a decorator or a
        rebinding) and that calls the target directly, not the target itself, with that compile's
        node; None when there is none."""
        return next(((qual, site) for qual, _, covered, site in self._compiled(bound)
                     if qual != bound.target.qualname and bound.target.qualname in covered), None)

    def keeps_eager(self, bound: Bound) -> bool:
        """Whether the source keeps the target itself eager (``@torch.compiler.disable`` on it)."""
        return bound.target.qualname in self._disabled(bound)

    def source_disabled(self, bound: Bound) -> str | None:
        """The function the source keeps eager (``@torch.compiler.disable``) that the target is
        or calls directly in its file, or None."""
        disabled = self._disabled(bound)
        if not disabled:
            return None
        return next((q for q in [bound.target.qualname, *sorted(_callees(bound.target))] if q in disabled), None)


def _mode(action: CompileAction) -> str:
    """The mode the plan writes: ``own_call``'s where it sets one (else the program's own, which is not
    the plan's), the new decorator's otherwise."""
    if action.own_call is not None:
        return action.own_call.mode or "default"
    return action.options.mode


def _fullgraph(action: CompileAction) -> bool:
    """Whether the plan writes ``fullgraph=True`` (``own_call``: only where it sets it)."""
    if action.own_call is not None:
        return action.own_call.fullgraph is True
    return action.options.fullgraph


def _own_call_form(facts: "_Facts", bound: Bound) -> str | None:
    """For an ``own_call`` compile: ``decorator`` when the target carries the program's compile (the
    region is the target), ``call`` when its body holds the call (the region is what that call
    compiles, not the target); None for a compile the plan adds."""
    action = bound.action
    if not isinstance(action, CompileAction) or action.own_call is None:
        return None
    return "decorator" if facts.carries_compile(bound) else "call"


def check(loaded: LoadedPlan, bounds: list[Bound]) -> None:
    """Refuse an inconsistent plan (the rules in the module docstring), the first offending action
    in plan order within each step: compile modes, duplicates, then each action against the
    source and the plan's compiled regions.

    Raises:
        StackpartError: at the plan line of the offending action, with the reason.
    """
    _check_compile_strategies(loaded, bounds)
    _check_duplicates(loaded, bounds)
    facts = _Facts()
    for b in bounds:  # the plan's own_call turns a compile the target carries off or back on
        a = b.action
        if isinstance(a, CompileAction) and a.own_call is not None and a.own_call.disable is not None \
                and facts.carries_compile(b):
            facts.own_off[b.key] = a.own_call.disable
    regions, unfull = _regions(facts, bounds)
    for b in bounds:
        if isinstance(b.action, CompileAction):
            _check_compile_of_disabled(loaded, facts, b)
            _check_compile_of_turned_off(loaded, facts, b)
            _check_compile_in_graph(loaded, facts, b)
            _check_compile_inside_source_compile(loaded, facts, b)
            _check_fullgraph_compile(loaded, facts, b)
        elif isinstance(b.action, DisableAction):
            _check_disable(loaded, facts, b, regions, unfull)
        elif isinstance(b.action, MarkDynamicAction):
            _check_mark_dynamic(loaded, facts, b, regions)
        elif isinstance(b.action, DynamoConfigAction):
            _check_dynamo_config(loaded, facts, b, regions)


def _check_compile_strategies(loaded: LoadedPlan, bounds: list[Bound]) -> None:
    """Refuse ``reduce-overhead`` on a ``region`` and a ``nested`` compile without a ``whole`` one."""
    has_whole = any(isinstance(a, CompileAction) and a.strategy == "whole" for a in loaded.plan.actions)
    for b in bounds:
        a = b.action
        if isinstance(a, CompileAction):
            if _mode(a) == "reduce-overhead" and a.strategy == "region":
                raise loaded.error(
                    b.index,
                    "mode 'reduce-overhead' (CUDA graphs) with strategy 'region' is refused: many "
                    "small graph captures repay the replay cost per region and are known to "
                    "crash (pytorch#152887)",
                    hint="use strategy: whole on the model's entry for CUDA graphs",
                )
            if a.strategy == "nested" and not has_whole:
                raise loaded.error(
                    b.index,
                    "strategy 'nested' needs a compile with strategy 'whole' in the same plan",
                    hint="add a whole-model compile of the entry that calls this block",
                )


def _check_duplicates(loaded: LoadedPlan, bounds: list[Bound]) -> None:
    """Refuse the same action twice on one function (``kernel`` and advisory actions may repeat)."""
    seen: dict[tuple[str, str, str], Bound] = {}
    for b in bounds:
        kind = b.action.action  # type: ignore[attr-defined]
        if isinstance(b.action, MarkDynamicAction):
            # several inputs (or dims) of one function may vary: only the exact (arg, dim) twice
            # is a duplicate
            kind = f"mark_dynamic of {b.action.arg!r} dim {b.action.dim}"
        other = seen.get((*b.key, kind))
        if other is not None and kind not in {"kernel", *ADVISORY_ACTIONS}:
            raise loaded.error(
                b.index,
                f"a second {kind} action on {b.target.relpath}::{b.target.qualname} "
                f"(the first is actions[{other.index}], line {loaded.action_lines[other.index]})",
            )
        seen[(*b.key, kind)] = b


def _regions(facts: _Facts, bounds: list[Bound]) -> tuple[dict[tuple[str, str], list[Bound]], set[tuple[str, str]]]:
    """Each compiled region, indexed by every function it covers (itself and what it calls
    directly in its file), in plan order: one scan per compile, one lookup per action; and the
    functions whose program-own ``fullgraph=True`` the plan's ``own_call`` removes. An
    ``own_call`` edit of a call in the target's body (``model.compile()`` in ``main``) compiles
    what that call names, not the target: it is no region of the target's; nor is a compile the
    source or the plan turns off (``disable=True``, :meth:`_Facts.compile_off`)."""
    regions: dict[tuple[str, str], list[Bound]] = {}
    unfull: set[tuple[str, str]] = set()
    for c in bounds:
        if isinstance(c.action, CompileAction) and _own_call_form(facts, c) != "call" and not facts.compile_off(c):
            for qual in {c.target.qualname, *_callees(c.target)}:
                regions.setdefault((c.target.relpath, qual), []).append(c)
            if c.action.own_call is not None and c.action.own_call.fullgraph is False:
                unfull |= {(c.target.relpath, q) for q in {c.target.qualname, *_callees(c.target)}}
    return regions, unfull


def _check_compile_of_disabled(loaded: LoadedPlan, facts: _Facts, b: Bound) -> None:
    """Refuse a compile of a function the source itself keeps eager (``@torch.compiler.disable`` on
    the target): the disable wraps whatever the compile adds, and the call runs eager."""
    if b.action.library or _own_call_form(facts, b) == "call":  # type: ignore[attr-defined]
        return
    if facts.keeps_eager(b):
        raise loaded.error(
            b.index,
            f"compile of {b.target.qualname}, which the source keeps eager with @torch.compiler.disable: the "
            "disabled frame runs eager under any compile, so this one would compile nothing",
            hint=f"remove the @torch.compiler.disable from {b.target.qualname} in the source, or drop this action",
        )


def _check_compile_of_turned_off(loaded: LoadedPlan, facts: _Facts, b: Bound) -> None:
    """Refuse a compile the plan adds (not ``own_call``) of a function whose own compile in the
    source passes ``disable=True``: the rewrite leaves a target that carries a compile alone (it
    never stacks a second one), so the action would change nothing and the function stay eager;
    turning the source's compile back on is the edit that compiles it."""
    if b.action.library or b.action.own_call is not None or b.action.strategy == "nested":  # type: ignore[attr-defined]
        return
    site = facts.turned_off(b)
    if site is None:
        return
    name = b.target.qualname
    code = _code(site) if isinstance(site, cst.Decorator) else rebinding_code(name.rsplit(".", 1)[-1], site)  # type: ignore[arg-type]
    on = f"action compile, target {b.target.relpath}::{name}, own_call: {{disable: false}}"
    raise loaded.error(
        b.index,
        f"compile of {name}, whose own compile in the source at {facts.where(b, site)} ({code}) passes disable=True: "
        "it compiles nothing, and this action would leave it as it is (a target that carries a compile gets no second one)",
        hint=(f"remove disable=True from that compile in the source (own_call does not edit torch._dynamo.optimize; "
              f"written as torch.compile, {on} turns it back on)" if facts.optimize_spelled(b, site)
              else f"turn the source's compile back on instead: {on}"),
    )


def _check_compile_in_graph(loaded: LoadedPlan, facts: _Facts, b: Bound) -> None:
    """Refuse a compile the plan adds (not ``own_call``) of a function the source registers with
    ``allow_in_graph``: compiled code that calls it puts the call into its graph unexamined and runs
    it on fake tensors, where the compiled function's own frame cannot run."""
    if b.action.library or b.action.own_call is not None:  # type: ignore[attr-defined]
        return
    site = facts.in_graph(b)
    if site is not None:
        name = b.target.qualname
        raise loaded.error(
            b.index,
            f"compile of {name}, which the source registers with allow_in_graph at {facts.where(b, site.node)} "
            f"({_code(site.node)}): Dynamo puts each call of {name} into the graph of the compiled code that calls it "
            "as one call and runs it on fake tensors, where a compiled function fails (Cannot access data pointer "
            "of Tensor)",
            hint=f"drop this action (a compile of {name}'s callers takes it into their graph already), or remove the "
                 "allow_in_graph registration from the source",
        )


def _check_compile_inside_source_compile(loaded: LoadedPlan, facts: _Facts, b: Bound) -> None:
    """Refuse a compile the plan adds (not ``own_call``, not a ``nested`` hint to the compile around
    it) of a function that a function the source compiles calls: that code is in the source's
    compiled region already, and a compile of it would compile it a second time (diagnose's
    search prunes the same candidate, :func:`rewriter.diagnose.candidates.conflict`)."""
    if b.action.library or b.action.own_call is not None or b.action.strategy == "nested":  # type: ignore[attr-defined]
        return
    around = facts.source_compile_around(b)
    if around is None or facts.carries_compile(b):
        return
    own, site = around
    name = b.target.qualname
    code = _code(site) if isinstance(site, cst.Decorator) else rebinding_code(own.rsplit(".", 1)[-1], site)  # type: ignore[arg-type]
    edit = f"action compile, target {b.target.relpath}::{own}, own_call: {{...}}"
    raise loaded.error(
        b.index,
        f"compile of {name}, which {own} calls, and the source compiles {own} at {facts.where(b, site)} "
        f"({code}): {name} is traced inside that compiled region already, and this action would compile "
        "that code a second time",
        hint=(f"drop this action, or edit the source's compile of {own} by hand (own_call does not edit "
              f"torch._dynamo.optimize; written as torch.compile, {edit} edits it)" if facts.optimize_spelled(b, site)
              else f"drop this action, or edit the source's compile of {own} instead: {edit}"),
    )


def _check_fullgraph_compile(loaded: LoadedPlan, facts: _Facts, b: Bound) -> None:
    """Refuse a ``fullgraph=True`` compile around a function the source keeps eager (SP108)."""
    if (_fullgraph(b.action) and not b.action.library and _own_call_form(facts, b) != "call"  # type: ignore[arg-type, attr-defined]
            and not facts.compile_off(b)):
        helper = facts.source_disabled(b)
        if helper is not None:
            raise loaded.error(
                b.index,
                f"fullgraph=True on {b.target.qualname} around {helper}, which the source keeps eager with "
                "@torch.compiler.disable: the compile would raise (Unsupported: Skip calling "
                "torch.compiler.disable()d function), and `stackpart check` flags the diff (SP108)",
                hint="drop fullgraph on this compile, or compile the parts around the disabled call",
            )


def _check_disable(loaded: LoadedPlan, facts: _Facts, b: Bound, regions: dict[tuple[str, str], list[Bound]],
                   unfull: set[tuple[str, str]]) -> None:
    """Refuse a ``disable`` inside a source ``fullgraph=True`` compile (unless the plan's
    ``own_call`` drops it), of a function the plan also compiles, or inside a plan's
    ``fullgraph=True`` region."""
    if not b.action.library and facts.already_compiled(b):  # type: ignore[attr-defined]
        raise loaded.error(
            b.index,
            f"disable of {b.target.qualname}, which the source compiles {facts.compiled_by(b)}: "
            "the compile would wrap a disabled frame and compile nothing",
            hint=f"remove the source's compile of {b.target.qualname}, or drop this action",
        )
    if not b.action.library:  # type: ignore[attr-defined]
        own = facts.source_compiles(b, fullgraph=True)
        if own is not None and (b.target.relpath, own) not in unfull:
            raise loaded.error(
                b.index,
                f"disable of {b.target.qualname} inside {own}, which the source compiles with fullgraph=True: "
                "the graph break a disabled call makes is an error there",
                hint="keep that code in the graph (torch._dynamo.config.capture_scalar_outputs for .item()/.tolist(), "
                     "a restructure, or a custom op), or drop fullgraph in the source",
            )
    for c in regions.get(b.key, ()):
        if b.key == c.key:
            raise loaded.error(
                b.index,
                f"the same function is compiled by actions[{c.index}] and disabled here",
                hint="keep one of them",
            )
        if _fullgraph(c.action):  # type: ignore[arg-type]
            raise loaded.error(
                b.index,
                f"disable inside a fullgraph=True region (actions[{c.index}], "
                f"{c.target.qualname}) cannot hold: fullgraph forbids the graph break",
                hint="drop fullgraph on that compile, or compile smaller regions around this one",
            )


def _check_mark_dynamic(loaded: LoadedPlan, facts: _Facts, b: Bound, regions: dict[tuple[str, str], list[Bound]]) -> None:
    """Refuse a ``mark_dynamic`` in a traced frame: a function the source compiles or calls from
    a compiled one, or inside a plan's compiled region."""
    if not b.action.library:  # type: ignore[attr-defined]
        own = facts.source_compiles(b)
        if own is not None and own != b.target.qualname:
            raise loaded.error(
                b.index,
                f"mark_dynamic in {b.target.qualname}, which {own} calls and the source compiles: Dynamo forbids "
                "mark_dynamic in a traced frame (Attempt to trace forbidden callable)",
                hint="mark the tensor in the eager caller that passes it to the compiled code",
            )
    if facts.already_compiled(b):
        raise loaded.error(
            b.index,
            f"{b.target.qualname} is already compiled in the source; mark_dynamic must run "
            "before the compiled region, not inside it",
            hint="mark the tensor in the caller that passes it to the region",
        )
    for c in regions.get(b.key, ())[:1]:
        raise loaded.error(
            b.index,
            f"mark_dynamic inside the compiled region of actions[{c.index}] "
            f"({c.target.qualname}): Dynamo forbids mark_dynamic in a traced frame",
            hint="mark the tensor in the eager caller that passes it to the region",
        )


def _check_dynamo_config(loaded: LoadedPlan, facts: _Facts, b: Bound, regions: dict[tuple[str, str], list[Bound]]) -> None:
    """Refuse ``dynamo_config`` on a function the plan or the source compiles (or one a source
    compile calls): the flags must be set in eager code before the compiled code first runs."""
    compiled = next((c for c in regions.get(b.key, ())), None)
    # the target itself compiled in the source, or called by a function the source compiles
    own = b.target.qualname if facts.already_compiled(b) else facts.source_compiles(b)
    if compiled is not None or own is not None:
        by = (f"actions[{compiled.index}] compiles" if compiled is not None
              else "the source compiles" if own == b.target.qualname else f"runs inside {own}, a function the source compiles")
        raise loaded.error(
            b.index,
            f"dynamo_config in {b.target.qualname}, which {by}: Dynamo reads these flags when it traces a "
            "frame, so they must be set in eager code before the compiled code first runs",
            hint="target the program's entry (the function that builds the model or starts the run)",
        )


def check_own_regional(loaded: LoadedPlan, bounds: list[Bound], library: dict[int, Any], src: Path) -> None:
    """Refuse a ``compile`` (not ``own_call``) of what the program's own ``compile_repeated_blocks``
    compiles (see the module doc): a declared block class, or the model class that declares it.
    SRC is read (:func:`.own_regional.read`) only where the plan adds a compile.

    Raises:
        StackpartError: at the first such action's line, naming the program's call.
    """
    from .own_regional import library_declared, read

    adds = [(b.index, b.target.qualname.split(".", 1)[0], None) for b in bounds
            if isinstance(b.action, CompileAction) and b.action.own_call is None]
    adds += [(i, t.qualname.split(".", 1)[0], t.file) for i, t in library.items()
             if isinstance(loaded.plan.actions[i], CompileAction) and loaded.plan.actions[i].own_call is None]
    if not adds:
        return
    own = read(src)
    if not own.calls:
        return
    # the plan's own_call.disable on the function that holds a call turns it off or back on
    switched = {f"{b.target.relpath}::{b.target.qualname}": b.action.own_call.disable for b in bounds
                if isinstance(b.action, CompileAction) and b.action.own_call is not None
                and b.action.own_call.disable is not None}
    live = [c for c in own.calls if not switched.get(c.site or "", c.off)]
    for index, name, file in sorted(adds, key=lambda t: t[0]):
        declared = {**own.declared, **library_declared(file)}
        model = next((m for m, blocks in declared.items() if name in blocks), None)
        if not live:  # every call passes disable=True: it compiles nothing
            # a nested hint is part of a whole-model compile's extent, not a compile of the blocks
            if model is not None and loaded.plan.actions[index].strategy != "nested":  # type: ignore[attr-defined]
                _refuse_blocks_turned_off(loaded, index, name, model, own.calls)
            continue
        if model is not None:
            what = f"each {name} (in {model}._repeated_blocks)"
        elif name in declared:
            model, what = name, f"the blocks {name} declares ({', '.join(declared[name])})"
        else:
            continue
        call, more = _first_call(live)
        edit = (f"edit that call instead: action compile, target {call.site}, own_call: {{...}}"
                if call.site is not None else "change that call's options by hand")
        raise loaded.error(
            index,
            f"compile of {name}: the program already compiles {what} itself, at {call.where}: {call.code}{more}; "
            "this action would compile those blocks a second time",
            hint=f"drop this action, or {edit}",
        )


def check_regional_blocks(loaded: LoadedPlan, bounds: list[Bound], parse: Any, reading: Any) -> None:
    """Refuse a ``compile`` (not ``own_call``, not ``strategy: nested``) of a class ``Block`` (or
    its ``forward``) beside an ``own_call: {regional: <path>}`` edit whose loop compiles the same
    ``Block`` instances, or instances of a class that encloses them: each block would be compiled
    twice, and one of the two compiles is dead (pinned with
    :class:`torch._dynamo.testing.CompileCounter` on CPU torch in
    tests/test_compile_of_a_class_an_enclosing_compile_holds.py). Where the loop walks the
    ``Block``s themselves, the plan's decorated ``Block.forward`` receives every graph and the
    loop's ``block.compile()`` none; where it walks a class that builds them (``Layer``), the loop's
    compile traces ``Block.forward`` and inlines it, and the plan's compile is the dead one. The
    same holds of a subclass that inherits ``Block.forward`` (``class BigBlock(Block): pass``)
    held where ``Block`` would be (:meth:`.rewrite.program_compiles.ProgramCompiles.forward_heirs`).

    The edited call's model class is read as :func:`.rewrite.regional_path.check` reads it
    (``parse`` as there), the classes it encloses by :meth:`.rewrite.program_compiles.ProgramCompiles.enclosers`
    (``reading``; nothing is read where it is None, or where the source does not say the class).
    Where the edited call compiles its function's parameter (a generic helper, ``def
    maybe_compile(model): return torch.compile(model)``), the class each caller under SRC passes
    is read instead (:func:`.rewrite.regional_path.helper_models`), and any one of them that holds
    the blocks is refused.

    Raises:
        StackpartError: at the compile of ``Block``'s plan line, naming the ``own_call.regional``
            action (its plan line), the constructions, and which of the two to keep.
    """
    from .rewrite.regional_path import builds, helper_models, model_class, regional_of

    if reading is None:
        return
    adds = _block_compiles(bounds)
    edits = [o for o in bounds if isinstance(o.action, CompileAction) and o.action.own_call is not None
             and o.action.own_call.regional not in (None, "compile_repeated_blocks")
             and o.action.own_call.disable is not True]
    if not adds or not edits:
        return
    parsed = {c.target.relpath: c.module for c in adds}
    models: dict[int, list[tuple[tuple[str, str], str]]] = {}  # edit -> (model class, the caller that passes it)
    for o in edits:
        found = model_class(o, parse)
        models[o.index] = [((found[1], found[0]), "")] if found is not None else helper_models(o, reading.src)
    for c in adds:
        inner = (c.target.relpath, c.target.qualname.split(".")[0])
        for runs in [inner, *reading.forward_heirs(inner)]:  # a subclass that inherits the decorated forward
            enclosers = reading.enclosers(runs, parsed)
            for o in edits:
                path = o.action.own_call.regional
                steps = len(path.split("."))
                for model, caller in models[o.index]:
                    chain = enclosers.get(model)
                    if not chain or len(chain) < steps or regional_of(chain[:steps]) != path:
                        continue
                    _refuse_twice_compiled(loaded, reading, c, o, model[1], inner[1], chain, steps, builds, caller)


def _refuse_twice_compiled(loaded: LoadedPlan, reading: Any, c: Bound, o: Bound, model: str, inner: str,
                           chain: list[Any], steps: int, builds: Any, caller: str = "") -> None:
    """The refusal of :func:`check_regional_blocks`: ``c`` compiles ``inner``, and ``o``'s regional
    loop compiles each ``chain[steps - 1].inner`` of ``model`` in place; the innermost class of
    ``chain`` is ``inner`` or a subclass that inherits its ``forward`` (named so). ``caller``: how
    a caller of a generic helper passes the ``model`` (``train.py:6 passes: Net()``), or empty.

    Raises:
        StackpartError: always, at ``c``'s plan line.
    """
    from .actions.base import imported_names
    from .actions.own_call import find_sites

    path = o.action.own_call.regional  # type: ignore[attr-defined]
    walked, heir = chain[steps - 1].inner[1], chain[-1].inner[1]  # heir: inner or a subclass running its forward
    sites = find_sites(o.target.node, imported_names(o.module))  # type: ignore[arg-type]
    code = _code(sites[0].node) if len(sites) == 1 else "its compile"
    head = (f"compile of {inner}: actions[{o.index}] ({loaded.path}:{loaded.action_lines[o.index]}) own_call.regional: "
            f"{path} turns {o.target.relpath}::{o.target.qualname}'s compile ({code}) into a compile of each {walked} "
            f"of {model}.{path} in place" + (f" (the model {caller})" if caller else ""))
    if steps == len(chain):
        raise loaded.error(
            c.index,
            f"{head} ({builds(reading, chain)}), and this action compiles {inner}"
            f"{' too' if heir == inner else f', whose forward {heir} inherits'}: each block is compiled twice, "
            f"and this action's decorated {inner}.forward receives every graph while the loop's block.compile() "
            "receives none",
            hint=f"keep one: the regional edit of actions[{o.index}] (drop this action: the program's call then "
                 f"compiles each {walked} in place), or this action (turn the program's call off in actions[{o.index}]: "
                 "own_call: {disable: true} instead of regional)",
        )
    raise loaded.error(
        c.index,
        f"{head}, and {walked} encloses {heir}{'' if heir == inner else f', a subclass of {inner} that inherits its forward'} "
        f"({builds(reading, chain)}): Dynamo traces {inner}.forward inside "
        f"each {walked}'s compile and inlines it, so this compile and its options would never be used",
        hint=f"keep the regional edit of actions[{o.index}]: drop this action (each {walked} compiled in place "
             f"compiles its {inner} with it)",
    )


def check_program_loops(loaded: LoadedPlan, bounds: list[Bound], parse: Any, reading: Any) -> None:
    """Refuse a ``compile`` (not ``own_call``, not ``strategy: nested``) of a class ``Block`` (or its
    ``forward``) whose instances a loop of the program compiles itself, each in place
    (``for layer in model.layers: layer.compile()``, ``model.layers[i] = torch.compile(layer)``,
    torchtune's ``for m in model.modules(): if isinstance(m, Block): m.compile()``, a loop over
    ``self.blocks`` in a method of the model's class, or one that compiles through a helper of its
    file, one call deep, which the refusal names with the helper's call;
    :meth:`.rewrite.program_compiles.ProgramCompiles.loops`), or instances of a class that encloses
    them: each block would be compiled twice and one of the two compiles is dead, as beside the
    loop an ``own_call: {regional: ...}`` edit writes (:func:`check_regional_blocks`; pinned with
    :class:`torch._dynamo.testing.CompileCounter` on CPU torch in
    tests/test_compile_of_a_class_a_program_loop_compiles.py). The loop's container is matched
    against the model class's constructions as a regional path is
    (:func:`.rewrite.regional_path.regional_of`); a subclass that inherits ``Block.forward``
    counts as a ``Block``. Not read: a loop in a function the plan's ``own_call`` turns off
    (``disable: true``), a call with ``disable=True``, a call ``reading`` leaves out
    (:attr:`.rewrite.program_compiles.ProgramCompiles.measured`), a class the source does not say.

    Raises:
        StackpartError: at the compile of ``Block``'s plan line, naming the loop's ``file:line``,
            the constructions, and the ways through (drop this action, or turn the loop's compile
            off).
    """
    from .rewrite.regional_path import each_class, regional_of

    if reading is None:
        return
    adds = _block_compiles(bounds)
    if not adds or not reading.compiles_any() or not reading.every_call()[1]:
        return  # the plan's actions first (a plan with no compile walks no SRC), then: no loop compiles anything
    off = {b.key for b in bounds if isinstance(b.action, CompileAction) and b.action.own_call is not None
           and b.action.own_call.disable is True}
    parsed = {c.target.relpath: c.module for c in adds}
    for c in adds:
        inner = (c.target.relpath, c.target.qualname.split(".")[0])
        runs = [inner, *reading.forward_heirs(inner)]  # a subclass that inherits the decorated forward
        enclosers: dict[tuple[str, str], list[Any]] = {}
        for cls in runs:
            for outer, chain in reading.enclosers(cls, parsed).items():
                enclosers.setdefault(outer, chain)
        defined: dict[str, set[str]] = {}
        for rel, name in [*runs, *enclosers]:
            defined.setdefault(name, set()).add(rel)
        for e in reading.loops(set(defined), defined):
            where = reading.where(e)
            if (e.rel, e.qual) in off or where in reading.measured:
                continue
            cls = each_class(e, parse)
            if cls is None:
                continue
            if e.path is None:  # isinstance(m, C): each C the model holds
                chain = [] if cls in runs else enclosers.get(cls)
                if chain is None:
                    continue
                _refuse_loop_compiled(loaded, reading, c, e, where, inner[1], cls[1], chain, f"each {cls[1]} its model holds")
            else:  # model.<path>: the container's class, then what it encloses
                path = reading.walked(cls, e.path)
                if not path or regional_of(path) != e.path:
                    continue
                walked = path[-1].inner
                rest = [] if walked in runs else enclosers.get(walked)
                if rest is None:
                    continue
                _refuse_loop_compiled(loaded, reading, c, e, where, inner[1], walked[1], path + rest,
                                      f"each {walked[1]} of {cls[1]}.{e.path}", len(path))


def _block_compiles(bounds: list[Bound]) -> list[Bound]:
    """The plan's own compiles of a class under SRC, or of its ``forward`` (``model.py::Block``,
    ``model.py::Block.forward``; not a module-level function, ``own_call`` edits, ``nested`` regions
    or library targets): the compiles a loop of the program's, or a regional edit, may compile a
    second time."""
    return [b for b in bounds if isinstance(b.action, CompileAction) and b.action.own_call is None
            and b.action.strategy != "nested" and not b.action.library
            and ((b.target.qualname.count(".") == 0 and isinstance(b.target.node, cst.ClassDef))
                 or (b.target.qualname.endswith(".forward") and b.target.qualname.count(".") == 1))]


def _refuse_loop_compiled(loaded: LoadedPlan, reading: Any, c: Bound, e: Any, where: str, inner: str, walked: str,
                          chain: list[Any], what: str, steps: int = 0) -> None:
    """The refusal of :func:`check_program_loops`: ``c`` compiles ``inner``, and the program's loop
    ``e`` (at ``where``) compiles ``what`` (each ``walked``; ``chain``: the constructions from the
    model down to ``inner``, its first ``steps`` the container walked), whose innermost class is
    ``inner`` or a subclass that inherits its ``forward``.

    Raises:
        StackpartError: always, at ``c``'s plan line.
    """
    from .rewrite.regional_path import builds

    heir = chain[-1].inner[1] if chain else walked
    built = f" ({builds(reading, chain)})" if chain else ""
    via = (f", through {e.qual}'s {_code(e.through)} at {reading.where(replace(e, node=e.through))}"
           if e.through is not None else "")
    head = (f"compile of {inner}: the program compiles {what} in place itself, in a loop at {where}: "
            f"{_code(e.node)}{via}{built}")
    off = (f"action compile, target {e.rel}::{e.qual}, own_call: {{disable: true}}" if e.qual is not None and e.alone
           else "by hand")
    ways = f"keep one: drop this action (the program's loop compiles each {walked}), or turn the loop's compile off ({off})"
    if steps == len(chain) or not chain:  # the loop compiles the blocks themselves
        also = " too" if heir == inner else f", whose forward {heir} inherits"
        dead = ("the loop's torch.compile wrapper traces it and inlines it, so this compile and its options would never "
                "be used" if e.wraps else
                f"this action's decorated {inner}.forward receives every graph while the loop's compile receives none")
        raise loaded.error(c.index, f"{head}, and this action compiles {inner}{also}: "
                           f"each block is compiled twice, and {dead}", hint=ways)
    raise loaded.error(
        c.index,
        f"{head}, and {walked} encloses {heir}{'' if heir == inner else f', a subclass of {inner} that inherits its forward'}: "
        f"Dynamo traces {inner}.forward inside each {walked}'s compile and inlines it, so this compile and its options "
        "would never be used",
        hint=f"drop this action (each {walked} the loop compiles compiles its {inner} with it), or turn the loop's "
             f"compile off ({off})",
    )


def _first_call(calls: list[Any]) -> tuple[Any, str]:
    """The first of the program's ``compile_repeated_blocks`` calls a refusal names, and how it
    says the others (`` (and N more call(s))``, or nothing)."""
    return calls[0], (f" (and {len(calls) - 1} more call(s))" if len(calls) > 1 else "")


def _refuse_blocks_turned_off(loaded: LoadedPlan, index: int, name: str, model: str, calls: list[Any]) -> None:
    """Refuse a compile of a block class that the program's ``compile_repeated_blocks`` call,
    turned off with ``disable=True``, would compile: that call compiles exactly these blocks once it
    is on again, so the plan's compile would be a second compile site of the same code beside a call
    that says it is off (a model-wide compile of the declaring class is another extent, and stands).

    Raises:
        StackpartError: at the action's line, naming the call and ``own_call: {disable: false}``.
    """
    call, more = _first_call(calls)
    edit = (f"action compile, target {call.site}, own_call: {{disable: false}}"
            if call.site is not None else "remove disable=True from that call by hand")
    raise loaded.error(
        index,
        f"compile of {name}: the program compiles each {name} (in {model}._repeated_blocks) itself at {call.where}: "
        f"{call.code}{more}, and that call passes disable=True; this action would compile those blocks beside a "
        "call that turns their compile off",
        hint=f"turn the program's call back on instead: {edit}",
    )


def check_library(loaded: LoadedPlan, library: dict[int, Any]) -> None:
    """Refuse a library ``disable`` inside a library ``fullgraph=True`` compile (see the module
    doc): ``library`` maps each library action's index to its resolved target
    (:class:`rewriter.library_targets.LibraryTarget`, ``file`` None for a module without source).

    Raises:
        StackpartError: at the disable's line, naming the compile.
    """
    from .library_targets import module_file
    from .reach import names_reached

    actions = loaded.plan.actions
    for i, t in library.items():
        a = actions[i]
        if isinstance(a, MarkDynamicAction) and t.kind == "class" and t.file is not None:
            _check_library_mark(loaded, i, a, t)
    regions = []
    for i, t in library.items():
        a = actions[i]
        if isinstance(a, CompileAction) and _fullgraph(a) and t.file is not None:
            entry = f"{t.qualname}.forward" if t.kind == "class" else t.qualname
            regions.append((i, t, names_reached(t.file, entry) | {entry.rsplit(".", 1)[0]}))
    for i, t in library.items():
        a = actions[i]
        if not isinstance(a, DisableAction) or t.file is None:
            continue
        name = t.qualname.rsplit(".", 1)[-1]
        owner = t.qualname.rsplit(".", 1)[0] if "." in t.qualname else None
        # the site replaces the name in the module the target names, whose code calls it there:
        # that module's file too where it imports the function from another (a re-export)
        files = {Path(f).resolve() for f in (t.file, module_file(t.module)[0]) if f is not None}
        for c, ct, reached in regions:
            same_file = ct.file is not None and Path(ct.file).resolve() in files
            if same_file and (name in reached or t.qualname == ct.qualname or owner == ct.qualname):
                raise loaded.error(
                    i,
                    f"disable inside a fullgraph=True region (actions[{c}], {actions[c].target}) cannot hold: "
                    f"{ct.qualname} reaches {t.qualname} in {Path(t.file).name}, and fullgraph forbids the graph break "
                    "a disabled frame is",
                    hint="drop fullgraph on that compile (options: {fullgraph: false}), or compile smaller regions",
                )


def _check_library_mark(loaded: LoadedPlan, i: int, action: MarkDynamicAction, target: Any) -> None:
    """Refuse a library ``mark_dynamic`` whose ``arg`` is not a named parameter of the class's own
    ``forward`` (read from the package's source; a ``forward`` the class inherits is not checked),
    unless ``forward`` takes ``**kwargs`` and the name is near no parameter: the generated pre-hook
    binds the call to that signature (and looks into ``**kwargs``) and marks nothing for any other
    name, so a misspelt ``arg`` (``hidden_state``) was written, and ran, as a silent no-op.

    Raises:
        StackpartError: at the action's line, with the near parameter names.
    """
    import ast

    from .errors import near_names

    try:
        tree = ast.parse(Path(target.file).read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, SyntaxError, ValueError):
        return
    body: list[ast.stmt] = tree.body
    cls: ast.ClassDef | None = None
    for part in target.qualname.split("."):
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if cls is None:
            return
        body = cls.body
    forward = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward"), None)
    if forward is None:
        return
    args = forward.args
    params = [p.arg for p in (*args.posonlyargs, *args.args, *args.kwonlyargs)][1:] if (args.posonlyargs or args.args) else \
        [p.arg for p in args.kwonlyargs]
    near = near_names(action.arg, params)
    # a name forward's **kwargs may take (GPT2Block's position_ids) is looked up there by the
    # hook; one close to a named parameter (hidden_state) is a typo
    if action.arg in params or (args.kwarg is not None and near is None):
        return
    raise loaded.error(
        i,
        f"mark_dynamic arg {action.arg!r} is not a parameter of {target.path}.forward "
        f"({target.file}:{forward.lineno}; parameters: {', '.join(params) or 'none'}): the hook would mark nothing",
        hint=near or "name one of forward's parameters",
    )
