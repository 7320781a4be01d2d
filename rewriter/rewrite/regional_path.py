"""``own_call: {regional: <path>}`` read against the source: the attribute the regional loop walks
(``for block in model.<path>: block.compile()``) must be one the model's class sets.

A typo (``regional: blokcs``) would otherwise be written as a loop that raises ``AttributeError``
when the program runs. The class is found statically, as far as the source says it: the name the
program compiles is bound in the target function by a call of a class (``model =
TinyLM().eval()``; ``.eval()``, ``.to(...)`` and the like peeled off), defined in the target's file
or imported from a file under SRC (``from model import TinyLM``). The attributes are those its
methods assign on ``self`` (and its class-level names), with its bases' in that file. Where any
step cannot be followed (a class from an installed library, a factory function, a base defined
elsewhere), nothing is checked: the program's run (``validate``) is then the judge. Where the
name compiled is a parameter of the target (a generic helper, ``def maybe_compile(model): return
torch.compile(model)``), its callers under SRC are read instead (:mod:`.callers`), and anything
short of every call passing an instance of a class whose ``__init__`` sets the container is
refused (:func:`_check_callers`).

The same reading refuses a plan that compiles the class of the instance its own ``own_call`` keeps
compiled whole, or that the program compiles whole with a call the plan does not edit, read from
SRC by :mod:`.program_compiles` (:func:`check_compiled_whole`), or a class that such a class builds
in its ``__init__`` (:mod:`.enclosing`): that decorator would be inlined, never used.

The same reading gives the container's class where the source says it (``self.blocks =
nn.ModuleDict(...)``; a dotted path followed through ``nn.ModuleDict(dict(h=...))`` keys and
classes of the same file), which picks how the loop walks it
(:func:`rewriter.compile_facts.regional_iterable`): iterating a ``ModuleDict`` yields its keys.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m

from ..compile_facts import first_positional
from ..errors import StackpartError
from ..plan import CompileAction, LoadedPlan
from ..targets import collect_definitions
from .callers import calls_of, parameter_names, rebound_in
from .enclosing import MAX_BASES, PLAIN_BASES, ClassRef, Enclosing
from .program_compiles import MAX_FILES, EachCall, ProgramCompiles, WholeCall, imported_from, imported_in, site_class


def check(loaded: LoadedPlan, bounds: list[Any], parse: Any, src: Path | None = None) -> dict[int, str]:
    """Refuse an ``own_call`` regional path whose first attribute the model's class never sets;
    return ``{action index: container class}`` (``ModuleList``, ``Sequential``, ``ModuleDict``) for
    each regional path whose container's class the source says (the others are left out).

    ``bounds``: the plan's resolved file targets (:class:`rewriter.consistency.Bound`); ``parse``:
    ``(relpath) -> (key, definitions)`` reading a file under SRC once, with the definitions the
    rewrite collects of it (raising where it cannot). With ``src`` (SRC), a target that compiles
    its own parameter (a generic helper, ``def maybe_compile(model): return torch.compile(model)``)
    is read through its callers under SRC (:func:`_check_callers`).

    Raises:
        StackpartError: at the action's plan line, naming the class, where it is defined and a
            near name among its attributes; or the caller of a helper whose argument is not known
            to hold the container.
    """
    kinds: dict[int, str] = {}
    for b in bounds:
        action = b.action
        if not isinstance(action, CompileAction) or action.own_call is None or not action.own_call.regional:
            continue
        path = action.own_call.regional
        if path == "compile_repeated_blocks":
            continue
        found = model_class(b, parse)
        if found is None:
            kind = _check_callers(loaded, b, path, parse, src) if src is not None else None
            if kind is not None:
                kinds[b.index] = kind
            continue
        name, rel, attrs, defs = found
        first = path.split(".")[0]
        if attrs is None or first in attrs:
            kind = _container_kind(defs, name, path.split("."))
            if kind is not None:
                kinds[b.index] = kind
            continue
        shown = sorted(_holders(defs, name))
        near = difflib.get_close_matches(first, shown, n=1)
        raise loaded.error(
            b.index,
            f"own_call: regional: {name} ({rel}) sets no attribute {first!r}, so `for block in <model>.{path}` would "
            f"raise AttributeError" + (f"; did you mean {near[0]!r}?" if near else ""),
            hint=f"name the container of the repeated blocks {name} holds " + (
                f"(its attributes: {', '.join(shown[:8])})" if shown else "(its __init__ assigns no attribute on self)"),
        )
    return kinds


def _compiled_parameter(b: Any) -> tuple[cst.FunctionDef, str] | None:
    """``(function, parameter)`` where the target's one compile call compiles a parameter of the
    function that its body never rebinds (``def maybe_compile(model): return torch.compile(model)``,
    ``model.compile()``, ``torch.compile(model.forward)``); else None."""
    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, find_sites, statement_of

    func = b.target.node
    if not isinstance(func, cst.FunctionDef):
        return None
    try:
        sites = find_sites(func, imported_names(b.module))
    except OwnCallRefused:
        return None
    if len(sites) != 1 or sites[0].call is None or sites[0].kind == "decorator":
        return None
    call = sites[0].call
    small = statement_of(func, call)
    forms = (cst.Expr,) if sites[0].kind == "method" else (cst.Assign, cst.AnnAssign, cst.Return)
    if not isinstance(small, forms) or small.value is not call:
        return None  # a form the regional edit refuses itself (a result discarded, a conditional expression)
    if sites[0].kind == "method":
        owner = call.func.value if isinstance(call.func, cst.Attribute) else None
    else:
        owner = first_positional(call)
    if isinstance(owner, cst.Attribute) and owner.attr.value == "forward":
        owner = owner.value
    params = {p.name.value for p in (*func.params.posonly_params, *func.params.params, *func.params.kwonly_params)}
    if not isinstance(owner, cst.Name) or owner.value not in params:
        return None
    if rebound_in(func, owner.value):
        return None  # bound again in the body (not model = model.eval()): what it holds at the call is not the argument
    return func, owner.value


def _check_callers(loaded: LoadedPlan, b: Any, path: str, parse: Any, src: Path) -> str | None:
    """Refuse ``own_call: {regional: path}`` on a target whose compile compiles its own parameter
    (:func:`_compiled_parameter`) unless every call of it under SRC (:func:`.callers.calls_of`)
    passes an instance of a class of SRC whose ``__init__`` sets the path's first attribute: the
    loop ``for block in <param>.<path>`` assumes it of every model the function is given. Return
    the container's class where every such class says the same one (else None: nothing to say,
    or not a parameter).

    Raises:
        StackpartError: at the action's plan line, naming the caller's ``file:line`` and its
            argument, and why (the class lacks the attribute, its class cannot be read statically,
            the function is used as a value, a method's callers, no caller at all).
    """
    hit = _compiled_parameter(b)
    if hit is None:
        return None
    func, param = hit
    name, first = func.name.value, path.split(".")[0]
    head = f"own_call: regional: {path}: {name} compiles its parameter {param}, and "
    loop = f"`for block in {param}.{path}`"
    hint = (f"turn the compile regional where the model's class is known (own_call: {{regional: {path}}} on a "
            f"function that compiles an instance of a class that sets {first} itself, or the loop written by hand "
            f"at that caller), or keep {name}'s whole compile (drop regional)")
    if "." in b.target.qualname:
        raise loaded.error(b.index, head + f"the callers of a method ({b.target.qualname}) are not read statically, "
                           f"so {loop} may raise AttributeError for a {param} without {first}", hint=hint)
    names = parameter_names(func)
    calls = calls_of(src, b.target.relpath, name, param, names.index(param) if param in names else None, MAX_FILES)
    if not calls:
        raise loaded.error(b.index, head + f"no file under SRC calls {name}, so the class of what it compiles cannot "
                           f"be read statically and {loop} may raise AttributeError", hint=hint)
    kinds: set[str | None] = set()
    bases = Enclosing(src, MAX_FILES)
    for c in calls:
        if not c.called:
            raise loaded.error(b.index, head + f"{c.where}: {c.why} ({c.code}), so not every call of it can be read "
                               f"and {loop} may raise AttributeError", hint=hint)
        if c.cls is None:
            raise loaded.error(b.index, head + f"{c.where} passes {c.code}, whose class cannot be read statically: "
                               f"{c.why}; {loop} may raise AttributeError there", hint=hint)
        setter = _init_setter(c.cls, first, parse, bases)
        if setter is None:
            raise loaded.error(b.index, head + f"{c.where} passes {c.code} ({c.cls[0]}::{c.cls[1]}), whose __init__ "
                               f"sets no attribute {first!r}: {loop} would raise AttributeError there", hint=hint)
        kinds.add(_container_kind(*setter, path.split(".")))
    return kinds.pop() if len(kinds) == 1 else None


def helper_models(b: Any, src: Path) -> list[tuple[ClassRef, str]]:
    """``(class, how a caller passes it)`` (``train.py:6 passes: Net()``) of each call under SRC of
    the generic helper ``b`` (a target whose compile compiles its own parameter,
    :func:`_compiled_parameter`; a top-level function) whose argument's class the source says
    (:func:`.callers.calls_of`); none where ``b`` is no such helper."""
    hit = _compiled_parameter(b)
    if hit is None or "." in b.target.qualname:
        return []
    func, param = hit
    names = parameter_names(func)
    calls = calls_of(src, b.target.relpath, func.name.value, param, names.index(param) if param in names else None,
                     MAX_FILES)
    return [(c.cls, f"{c.where} passes: {c.code}") for c in calls if c.cls is not None]


def _init_setter(cls: ClassRef, attr: str, parse: Any, bases: Enclosing) -> tuple[dict[str, list[Any]], str] | None:
    """``(definitions of its file, class name)`` of the class whose ``__init__`` sets ``self.<attr>``
    for an instance of ``cls`` (:func:`_init_sets`): ``cls`` itself, else the base whose ``__init__``
    it runs, in its own file or another of SRC (:meth:`Enclosing.base_of`: none of its own, or one
    that calls ``super().__init__()`` or ``Net.__init__(self)``; ``class Sub(Net)`` with ``Net``
    imported), and so on up, at most :data:`MAX_BASES`; None where none does. A base whose
    ``__init__`` never runs (``Sub.__init__`` calls ``nn.Module.__init__(self)``, or a mixin's
    ``__init__`` before it does not call ``super().__init__()``) sets nothing on the instance."""
    seen: set[ClassRef] = set()
    below: tuple[cst.ClassDef, ...] = ()  # the classes walked, ``cls``'s first: a method they define overrides
    current: ClassRef | None = cls
    while current is not None and current not in seen and len(seen) <= MAX_BASES:
        seen.add(current)
        try:
            _, defs = parse(current[0])
        except StackpartError:
            defs = {}
        if _init_sets(defs, current[1], attr, below=below):
            return defs, current[1]
        node = bases.class_def(current)
        below += (node,) if node is not None else ()
        current = bases.base_of(current)
    return None


def _init_sets(definitions: dict[str, list[Any]], name: str, attr: str, below: tuple[cst.ClassDef, ...] = ()) -> bool:
    """Whether class ``name``'s own ``__init__`` (the last it defines) sets ``self.<attr>``; a base's
    is :func:`_init_setter`'s, read only where it runs. A method the ``__init__`` calls on ``self``
    where it runs (``self.build()``, not in a nested ``def`` or ``lambda``) counts where that
    method's own body sets it, one call deep: the method the instance runs, looked up in the
    subclasses ``below`` (the instance's class first), then ``name`` and its bases in
    ``definitions`` (:func:`_method`); the calls read as :mod:`.enclosing` reads them
    (:func:`.enclosing.self_calls`)."""
    from .enclosing import own_init, self_calls

    if name not in definitions or definitions[name][-1].kind != "class":
        return False
    node = definitions[name][-1].node
    for init in own_init(node):
        if _assigned(init, attr):
            return True
        for meth in self_calls(init):
            found = _method((*below, node), definitions, meth)
            if found is not None and _assigned(found, attr):
                return True
    return False


def _method(classes: tuple[cst.ClassDef, ...], definitions: dict[str, list[Any]], name: str,
            seen: frozenset[str] = frozenset()) -> cst.FunctionDef | None:
    """The method ``name`` an instance of ``classes[0]`` runs: the last definition in the first of
    ``classes`` (subclass first) whose body defines it, else in the bases of the last of them that
    ``definitions`` holds, depth first; None where none of those defines it."""
    from .enclosing import defined_method

    for cls in classes:
        found = defined_method(cls, name)
        if found is not None:
            return found
    for base in classes[-1].bases if classes else ():
        written = cst.Module(body=[]).code_for_node(base.value)
        if written in definitions and definitions[written][-1].kind == "class" and written not in seen:
            found = _method((definitions[written][-1].node,), definitions, name, seen | {written})
            if found is not None:
                return found
    return None


def check_compiled_whole(loaded: LoadedPlan, bounds: list[Any], parse: Any,
                         src: "Path | ProgramCompiles | None" = None) -> None:
    """Refuse a ``compile`` the plan adds (not ``own_call``, not ``strategy: nested``) of the class
    (or its ``forward``) whose instance an ``own_call`` edit of the same plan keeps compiled whole
    (``model = torch.compile(Net())``, ``model.compile()``; on once the plan is applied: not
    ``disable: true``, not ``regional``; ``disable: false`` turns a call the source turned off
    on). Dynamo traces the decorated ``forward`` inside that compile, inlining it: the plan's
    decorator and its options are never used (checked on torch 2.13, CPU: its backend gets no
    graph). Beside an edit that turns that call ``regional`` it is refused too
    (:func:`_refuse_regional`): the decorated ``forward`` then inlines the blocks the edit compiles
    in place, and that compile is the one never used. The class is read as :func:`check` reads it (``parse`` as there); where the source does
    not say it, nothing is checked. With ``src`` (SRC, or a :class:`ProgramCompiles` reading of it
    made once for many plans), a whole-model compile of the program's that the plan does not edit
    is read from SRC too (:func:`_check_unedited`). With ``src``, a compile of a class that the
    compiled class encloses (builds in its ``__init__``, at any depth: :meth:`ProgramCompiles.enclosers`)
    is refused as well where the edit keeps the call on (:func:`_refuse_enclosed_by_edit`); where
    it turns it regional, :func:`rewriter.consistency.check_regional_blocks` refuses a compile of the
    blocks the loop walks (each would be compiled twice). Where the plan's ``harness.call`` names a
    method other than ``forward`` (:func:`runs_compiled_forward`), the whole-model compile does not
    run what the step calls and only the regional case is refused.

    Raises:
        StackpartError: at the added compile's plan line, naming the program's call and the
            ``own_call`` action (or, for a call the plan does not edit, the way through).
    """
    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, find_sites
    from ..compile_facts import turned_off

    adds = {(b.target.relpath, b.target.qualname): b for b in bounds
            if isinstance(b.action, CompileAction) and b.action.own_call is None and b.action.strategy != "nested"
            and not b.action.library}
    if not adds:
        return
    reading = src if isinstance(src, ProgramCompiles) else ProgramCompiles(src) if src is not None else None
    inlined = runs_compiled_forward(loaded)
    for o in bounds:
        own = o.action.own_call if isinstance(o.action, CompileAction) else None
        if own is None or own.disable is True or not isinstance(o.target.node, cst.FunctionDef):
            continue
        try:
            sites = find_sites(o.target.node, imported_names(o.module))
        except OwnCallRefused:
            continue
        if len(sites) != 1 or sites[0].kind == "decorator" or (own.disable is None and turned_off(sites[0].call)):
            continue
        found = model_class(o, parse)
        if found is None:
            continue
        name, rel = found[0], found[1]
        c = adds.get((rel, name)) or adds.get((rel, f"{name}.forward"))
        code = " ".join(cst.Module([]).code_for_node(sites[0].node).split())
        keeps = "turns that call back on" if turned_off(sites[0].call) else "keeps that call on"
        if c is None:
            hit = (_enclosed(reading, adds).get((rel, name)) if reading is not None and own.regional is None and inlined
                   else None)
            if hit is not None:
                _refuse_enclosed_by_edit(loaded, reading, o, name, code, keeps, *hit)  # type: ignore[arg-type]
            continue
        if own.regional is not None:
            _refuse_regional(loaded, c, o, name, code)
        if not inlined:
            continue
        raise loaded.error(
            c.index,
            f"compile of {name}: {o.target.relpath}::{o.target.qualname} compiles an instance of it whole ({code}), and "
            f"the own_call of actions[{o.index}] {keeps}: Dynamo traces {name}.forward inside that compile and "
            "inlines it, so this compile and its options would never be used",
            hint=f"drop this action, or turn the program's call off (own_call: {{disable: true}}) in actions[{o.index}] "
                 "(not regional: this compile would inline the blocks that call compiles in place)",
        )
    if reading is not None and inlined:
        _check_unedited(loaded, bounds, adds, parse, reading)


def runs_compiled_forward(loaded: LoadedPlan) -> bool:
    """Whether the workload the plan's harness declares runs the model's ``forward`` through the
    program's whole-model compile: true without ``harness.call`` (or with ``call: forward``), false
    where a step calls another method (``model.generate(x)``). ``OptimizedModule`` compiles
    ``forward`` only and hands the wrapped module's other methods back as they are
    (torch/_dynamo/eval_frame.py, ``OptimizedModule.__getattr__``), so what such a method calls,
    a decorated ``Block.forward`` or the model's own ``self(x)``, is compiled by its own decorator
    and not inlined into the whole-model compile (pinned with ``CompileCounter`` in
    tests/test_compile_of_a_class_an_enclosing_compile_holds.py)."""
    harness = loaded.plan.harness
    return harness is None or harness.call in (None, "forward", "__call__")


def _refuse_regional(loaded: LoadedPlan, c: Any, o: Any, name: str, code: str) -> None:
    """Refuse the plan's compile ``c`` of class ``name`` beside the ``own_call: {regional: ...}``
    edit ``o`` of the program's whole-model compile (``code``) of an instance of it: the edit
    compiles each block in place, and the decorated ``name.forward`` traces those blocks and
    inlines them, so the regional compile never receives a graph (pinned on CPU torch:
    tests/test_compile_of_a_class_compiled_whole.py); one of the two is dead.

    Raises:
        StackpartError: always, at ``c``'s plan line, naming ``o``'s ``own_call.regional`` field
            and the way through (drop one of the two).
    """
    path = o.action.own_call.regional
    raise loaded.error(
        c.index,
        f"compile of {name}: actions[{o.index}] ({loaded.path}:{loaded.action_lines[o.index]}) own_call.regional: {path} "
        f"turns {o.target.relpath}::{o.target.qualname}'s whole-model compile ({code}) into a compile of each block "
        f"in place, and this compile's decorated {name}.forward traces those blocks and inlines them: the blocks' "
        "own compile would never receive a graph, one of the two compiles is dead",
        hint=f"drop one of the two: this action (the regional edit compiles the blocks), or actions[{o.index}]'s "
             f"regional edit (own_call: {{disable: true}} there turns the program's compile off, and this compile of "
             f"{name} stands)",
    )


def _check_unedited(loaded: LoadedPlan, bounds: list[Any], adds: dict[tuple[str, str], Any], parse: Any,
                    reading: ProgramCompiles) -> None:
    """Refuse a ``compile`` the plan adds of a class ``Net`` (its ``forward``) whose instance the
    program compiles whole itself with a call the plan does not edit (``model = torch.compile(Net())``,
    ``model = Net(); model.compile()``, in any file under SRC, in a function or at a script's top
    level): as for an ``own_call`` edit that keeps it on, Dynamo inlines the decorated ``forward``
    and the plan's compile is never used. Not read: a call that passes ``disable=True`` (it returns
    the instance itself, whose decorated ``forward`` compiles), a ``torch.compile(...)`` whose
    result is discarded or bound to a name nothing uses (it compiles nothing; as diagnose reads it,
    :func:`rewriter.compile_facts.unused_result`), ``compile_repeated_blocks`` (:mod:`rewriter.own_regional`'s),
    a decorator, a call in a function an ``own_call`` of the plan edits (read above), and a call
    ``reading`` leaves out (:attr:`ProgramCompiles.measured`).

    A compile of a class the compiled class encloses is refused too (:func:`_refuse_enclosed`),
    the enclosing classes read by :meth:`ProgramCompiles.enclosers` where any file of SRC writes a
    compile call. SRC is read through ``reading`` (:class:`ProgramCompiles`: walked once, only where an added
    compile's target is a ``forward``, a class target resolving to it). The class is read as
    :func:`model_class` reads it, in the function's (or the module's) own body, its file through
    ``parse`` (as :func:`check`'s).

    Raises:
        StackpartError: at the added compile's plan line, naming the program's call (``file:line``)
            and the way through: an ``own_call`` edit of that call (``disable: true``), or
            ``strategy: nested`` (a hint to that compile; the plan's rules ask a ``strategy: whole``
            action beside it, an ``own_call`` of that call with it included).
    """
    names = {q.rsplit(".", 2)[-2] for _, q in adds if q.endswith(".forward") and "." in q}
    if not names:
        return
    made = {w.made for w in reading.every_call()[0]}
    if not made:
        return  # no whole-model compile call anywhere in SRC: nothing to read the enclosing classes for
    enclosed = _enclosed(reading, adds, reading.enclosing().classes_named(made))
    defined: dict[str, set[str]] = {}
    for rel, name in enclosed:
        if name not in names:
            defined.setdefault(name, set()).add(rel)
    names |= set(defined)
    edited = {(b.target.relpath, b.target.qualname) for b in bounds
              if isinstance(b.action, CompileAction) and b.action.own_call is not None}
    definitions: dict[str, dict[str, list[Any]]] = {}
    for w in reading.calls(names, defined):
        if w.made not in names or (w.qual is not None and (w.rel, w.qual) in edited):
            continue
        if w.rel not in definitions:
            definitions[w.rel] = collect_definitions(w.module)
        found = _class_attrs(w.written, w.rel, w.module, definitions[w.rel], parse, (w.scope, w.call))
        c = found and (adds.get((found[1], found[0])) or adds.get((found[1], f"{found[0]}.forward")))
        hit = enclosed.get((found[1], found[0])) if found and not c else None
        if not c and hit is None:
            continue
        if w.unused is not None:
            continue  # bound to a name nothing uses: it compiles nothing (diagnose proposes a compile over it)
        where = reading.where(w)
        if where in reading.measured:
            continue  # measured through stand-ins: the plan diagnose writes edits it
        code = " ".join(cst.Module([]).code_for_node(w.call).split())[:120]
        if hit is not None:
            _refuse_enclosed(loaded, reading, w, where, code, *hit)
        edit = (f"edit that call instead (action compile, target {w.rel}::{w.qual}, own_call: {{disable: true}}; "
                "not regional: this compile would inline the blocks it compiles in place)"
                if w.qual is not None and w.alone else "change that call by hand")
        raise loaded.error(
            c.index,
            f"compile of {w.made}: the program compiles an instance of it whole itself, at {where}: {code}; "
            f"Dynamo traces {w.made}.forward inside that compile and inlines it, so this compile and its options "
            "would never be used",
            hint=f"drop this action, {edit}, or make this action a hint to that compile (strategy: nested, "
                 "beside a strategy: whole action of the plan)",
        )


def _enclosed(reading: ProgramCompiles, adds: dict[tuple[str, str], Any],
              starts: list[tuple[str, str]] | None = None) -> dict[tuple[str, str], tuple[Any, list[Any]]]:
    """``{class: (the plan's added compile, chain)}`` for each class of SRC that encloses a class
    whose ``forward`` the plan compiles (``adds``; top-level classes), with the chain of
    constructions from it down to that class (:meth:`ProgramCompiles.enclosers`); nothing read
    where no file of SRC writes a compile call. Of two added classes one class encloses, the first.
    ``starts``: the only classes asked about as enclosers (those the program compiles whole); an
    added class none of them may build (:meth:`.enclosing.Enclosing.may_enclose`) is not read."""
    out: dict[tuple[str, str], tuple[Any, list[Any]]] = {}
    if not reading.compiles_any():
        return out
    parsed = {c.target.relpath: c.module for c in adds.values()}
    for (rel, qual), c in adds.items():
        if qual.endswith(".forward") and qual.count(".") == 1:
            cls = (rel, qual.split(".")[0])
            if starts is not None and not reading.enclosing().may_enclose(starts, cls):
                continue
            for runs in [cls, *reading.forward_heirs(cls)]:  # a subclass that inherits the decorated forward
                for outer, chain in reading.enclosers(runs, parsed).items():
                    out.setdefault(outer, (c, chain))
    return out


def each_class(e: EachCall, parse: Any) -> ClassRef | None:
    """The class of SRC that ``e.written`` names in its file (read as :func:`model_class` reads a
    compiled class: :func:`_class_attrs`, ``parse`` as :func:`check`'s), None where the source
    does not say it."""
    found = _class_attrs(e.written, e.rel, e.module, collect_definitions(e.module), parse, (e.scope, e.call))
    return (found[1], found[0]) if found is not None else None


def builds(reading: ProgramCompiles, chain: list[Any], outer: str | None = None) -> str:
    """How class ``outer`` encloses the innermost class of ``chain``, one construction a step:
    ``Net.__init__ builds Block at model.py:14: self.blocks = nn.ModuleList(...)`` (``builds Block
    through self.build() at`` where a method ``__init__`` calls holds it), with ``MyNet inherits
    Net.__init__`` where a class's ``__init__`` is its base's (``outer`` unset: the outermost
    construction's class)."""
    outer = outer or chain[0].outer[1]
    steps: list[str] = []
    for b in chain:
        if b.outer[1] != outer:
            steps.append(f"{outer} inherits {b.outer[1]}.__init__")
        through = f" through self.{b.via}()" if b.via else ""
        steps.append(f"{b.outer[1]}.__init__ builds {b.inner[1]}{through} at {reading.built_where(b)}: "
                     f"{' '.join(cst.Module([]).code_for_node(b.stmt).split())[:100]}")
        outer = b.inner[1]
    return "; ".join(steps)


def regional_of(chain: list[Any]) -> str | None:
    """The ``own_call.regional`` path that reaches the innermost class of ``chain`` from the
    outermost one (``encoder.layers``): every step held as ``self.<attr>``, the last one in a
    container (:data:`CONTAINERS`), the others not; else None (a single module is no regional
    loop's container)."""
    if any(b.attr is None for b in chain) or chain[-1].container is None or any(b.container for b in chain[:-1]):
        return None
    return ".".join(b.attr for b in chain)


def _heir_of(c: Any, inner: str) -> tuple[str, str]:
    """``(the class the plan's compile ``c`` decorates, a note)``: the note names it where the
    enclosed class ``inner`` is a subclass that inherits its ``forward`` (``, a subclass of Block
    that inherits its forward``), else empty."""
    compiled = c.target.qualname.split(".")[0]
    return compiled, ("" if compiled == inner else f", a subclass of {compiled} that inherits its forward")


def _refuse_enclosed(loaded: LoadedPlan, reading: ProgramCompiles, w: WholeCall, where: str, code: str,
                     c: Any, chain: list[Any]) -> None:
    """Refuse the plan's compile ``c`` of the innermost class of ``chain``, enclosed by class
    ``w.made`` that the program compiles whole itself at ``where`` with a call the plan does not
    edit: Dynamo traces the enclosed ``forward`` inside that compile and inlines it.

    Raises:
        StackpartError: always, at ``c``'s plan line, naming the call, the constructions that
            enclose the class, and the ways through: the call turned regional over the enclosed
            blocks (where the source says their container) or off, or ``strategy: nested``.
    """
    inner, path = chain[-1].inner[1], regional_of(chain)
    compiled, heir = _heir_of(c, inner)
    if w.qual is not None and w.alone:
        target = f"action compile, target {w.rel}::{w.qual}"
        ways = (f"drop this action and turn that call regional ({target}, strategy: region, own_call: {{regional: {path}}}; the "
                f"program then compiles each {inner} in place), " if path else "") + \
            f"keep this action and turn that call off ({target}, own_call: {{disable: true}})"
    else:
        ways = f"change that call by hand ({'compile each ' + inner + ' in place, or ' if path else ''}turn it off)"
    raise loaded.error(
        c.index,
        f"compile of {compiled}: the program compiles an instance of {w.made} whole itself, at {where}: {code}, and "
        f"{w.made} encloses {inner}{heir}: {builds(reading, chain, w.made)}; Dynamo traces {compiled}.forward inside that compile "
        "and inlines it, so this compile and its options would never be used",
        hint=f"{ways}, or make this action a hint to that compile (strategy: nested, beside a strategy: whole "
             "action of the plan)",
    )


def _refuse_enclosed_by_edit(loaded: LoadedPlan, reading: ProgramCompiles, o: Any, name: str, code: str, keeps: str,
                             c: Any, chain: list[Any]) -> None:
    """Refuse the plan's compile ``c`` of the innermost class of ``chain``, enclosed by class
    ``name`` whose whole-model compile (``code``) the ``own_call`` edit ``o`` keeps (or turns) on.

    Raises:
        StackpartError: always, at ``c``'s plan line, naming ``o``, the constructions, and the ways
            through (``o`` turned regional over the enclosed blocks, or off).
    """
    inner, path = chain[-1].inner[1], regional_of(chain)
    compiled, heir = _heir_of(c, inner)
    regional = (f"drop this action and turn that call regional in actions[{o.index}] with strategy: region, own_call: {{regional: {path}}} "
                f"(the program then compiles each {inner} in place), or " if path else "drop this action, or ")
    raise loaded.error(
        c.index,
        f"compile of {compiled}: {o.target.relpath}::{o.target.qualname} compiles an instance of {name} whole ({code}) "
        f"and the own_call of actions[{o.index}] {keeps}; {name} encloses {inner}{heir}: {builds(reading, chain, name)}; "
        f"Dynamo traces {compiled}.forward inside that compile and inlines it, so this compile and its options would "
        "never be used",
        hint=f"{regional}keep this action and turn the program's call off in actions[{o.index}] with own_call: "
             "{disable: true}",
    )


def model_class(b: Any, parse: Any) -> tuple[str, str, set[str] | None, dict[str, list[Any]]] | None:
    """``(class name, its file, the attributes it sets, that file's definitions)`` of the module the
    target compiles, or None where the source does not say which class it is."""
    from ..actions.base import imported_names
    from ..actions.own_call import find_sites

    func = b.target.node
    if not isinstance(func, cst.FunctionDef):
        return None
    try:
        sites = find_sites(func, imported_names(b.module))
    except Exception:  # noqa: BLE001 - the rewrite itself reports what it cannot edit
        return None
    if len(sites) != 1 or sites[0].call is None:
        return None
    made = site_class(func, sites[0], b.module)
    if made is None:
        return None
    return _class_attrs(made, b.target.relpath, b.module, b.definitions or collect_definitions(b.module), parse,
                        (func, sites[0].call))


def _class_attrs(name: str, rel: str, module: cst.Module, definitions: dict[str, list[Any]],
                 parse: Any, at: Any = None) -> tuple[str, str, set[str] | None, dict[str, list[Any]]] | None:
    """The class ``name`` as ``rel``'s module (its ``definitions``) sees it: defined there, or
    imported from a file under SRC (its name there: ``Net`` of ``from model import Net as N``);
    with the attributes it and its bases in that file set (None where a base is elsewhere), and
    the definitions of the file that defines it. ``at``: ``(function, node)`` where ``name`` is
    written at ``node`` in that function, whose own imports bind it first
    (:func:`.program_compiles.imported_in`)."""
    local = imported_in(module, name, rel, at)
    if local is None and name in definitions and definitions[name][-1].kind == "class":
        return name, rel, _attrs(definitions, name), definitions
    source = imported_from(module, name, rel) if local is None else local or None
    if source is None:
        return None
    files, imported = source
    for candidate in dict.fromkeys(files):  # beside the file and from the root: one path at SRC's root
        try:
            key, defs = parse(candidate)
        except StackpartError:
            continue
        if imported in defs and defs[imported][-1].kind == "class":
            return imported, key, _attrs(defs, imported), defs
        made = _factory_class(defs, imported)
        if made is not None:  # a factory of that file (``from models import build``) making a class of it
            return made, key, _attrs(defs, made), defs
    return None


def _factory_class(defs: dict[str, list[Any]], name: str) -> str | None:
    """The class a top-level function ``name`` of a file (its ``defs``) returns an instance of,
    where the file defines it (:func:`.factories.class_made_here`), else None."""
    from .factories import class_made_here

    if name not in defs or defs[name][-1].kind != "function":
        return None
    top = {q: d[-1].kind for q, d in defs.items() if "." not in q}
    return class_made_here(defs[name][-1].node, {q for q, k in top.items() if k == "function"},
                           {q for q, k in top.items() if k == "class"})


def _attrs(definitions: dict[str, list[Any]], name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
    """What class ``name`` sets: ``self.x = ...`` in its methods, its class-level names, and its
    bases' (in ``definitions``); None where a base is not there and not a plain ``nn.Module``."""
    node = definitions[name][-1].node
    out: set[str] = set()
    dynamic: list[str] = []

    class _Sets(cst.CSTVisitor):
        def visit_Attribute(self, attr: cst.Attribute) -> None:
            if isinstance(attr.value, cst.Name) and attr.value.value == "self":
                out.add(attr.attr.value)
                if attr.attr.value in ("add_module", "register_module", "__setattr__", "__dict__"):
                    dynamic.append(attr.attr.value)

        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Name) and call.func.value == "setattr":
                dynamic.append("setattr")

        def visit_ClassDef(self, inner: cst.ClassDef) -> bool:
            return inner is node

    node.visit(_Sets())
    methods = {stmt.name.value for stmt in node.body.body if isinstance(stmt, cst.FunctionDef)}
    if dynamic or methods & {"__getattr__", "__getattribute__"}:
        return None  # names made or forwarded at run time: only the run can tell
    out |= methods  # a @property (or any method) is an attribute too
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else (
                    [small.target] if isinstance(small, cst.AnnAssign) else [])
                out |= {t.value for t in targets if isinstance(t, cst.Name)}
    for base in node.bases:
        base_name = cst.Module(body=[]).code_for_node(base.value)
        if base_name in PLAIN_BASES:
            continue
        if base_name in definitions and definitions[base_name][-1].kind == "class" and base_name not in seen:
            inherited = _attrs(definitions, base_name, seen | {name})
            if inherited is None:
                return None
            out |= inherited
            continue
        return None
    return out


def _holders(definitions: dict[str, list[Any]], name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The attributes of class ``name`` that can hold blocks: those its ``__init__`` (and its bases'
    in ``definitions``, each class once) assigns on ``self`` (``self.blocks = nn.ModuleList(...)``);
    methods such as ``forward`` and attributes only read are not among them."""
    if name not in definitions or definitions[name][-1].kind != "class" or name in seen:
        return set()
    node = definitions[name][-1].node
    self_attr = m.Attribute(value=m.Name("self"), attr=m.Name())
    out: set[str] = set()
    for init in (s for s in node.body.body if m.matches(s, m.FunctionDef(name=m.Name("__init__")))):
        for found in m.findall(init, m.AssignTarget(target=self_attr) | m.AnnAssign(target=self_attr)):
            out.add(found.target.attr.value)  # type: ignore[attr-defined]
    for base in node.bases:
        out |= _holders(definitions, cst.Module(body=[]).code_for_node(base.value), seen | {name})
    return out


#: The containers a regional path may name, by the last part of the name they are called by.
CONTAINERS = {"ModuleList", "Sequential", "ModuleDict"}


def _container_kind(definitions: dict[str, list[Any]], name: str, path: list[str],
                    seen: frozenset[str] = frozenset()) -> str | None:
    """The class (:data:`CONTAINERS`) of ``<instance of name>.<path>``, where every assignment of
    the path's first attribute in class ``name`` (or its bases in ``definitions``) agrees; None
    where the source does not say it."""
    if name not in definitions or definitions[name][-1].kind != "class" or name in seen:
        return None
    node = definitions[name][-1].node
    values = _assigned(node, path[0])
    if not values:  # set by a base: the first one of this file that says it
        for base in node.bases:
            base_name = cst.Module(body=[]).code_for_node(base.value)
            inherited = None if base_name in PLAIN_BASES else _container_kind(definitions, base_name, path, seen | {name})
            if inherited is not None:
                return inherited
        return None
    kinds = {_kind_of(definitions, value, path[1:], seen | {name}) for value in values}
    return kinds.pop() if len(kinds) == 1 else None


def _assigned(node: cst.ClassDef | cst.FunctionDef, attr: str) -> list[cst.BaseExpression]:
    """The values ``self.<attr> = ...`` takes in the methods of class ``node``, or in the function
    ``node`` (a nested class's are its own)."""
    out: list[cst.BaseExpression] = []

    class _Sets(cst.CSTVisitor):
        def visit_ClassDef(self, inner: cst.ClassDef) -> bool:
            return inner is node

        def visit_Assign(self, assign: cst.Assign) -> None:
            for t in assign.targets:
                target = t.target
                if (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                        and target.value.value == "self" and target.attr.value == attr):
                    out.append(assign.value)

        def visit_AnnAssign(self, assign: cst.AnnAssign) -> None:
            target = assign.target
            if (assign.value is not None and isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                    and target.value.value == "self" and target.attr.value == attr):
                out.append(assign.value)

    node.visit(_Sets())
    return out


def _kind_of(definitions: dict[str, list[Any]], value: cst.BaseExpression, rest: list[str],
             seen: frozenset[str]) -> str | None:
    """The container class of ``value.<rest>``: ``value`` a call of a container (``nn.ModuleList(...)``,
    a ``ModuleDict``'s ``dict(key=...)``/``{"key": ...}`` entry followed for the next part) or of a
    class in ``definitions``; None for anything else."""
    if not isinstance(value, cst.Call):
        return None
    called = cst.Module(body=[]).code_for_node(value.func)
    last = called.rsplit(".", 1)[-1]
    if last in CONTAINERS:
        if not rest:
            return last
        if last != "ModuleDict" or len(value.args) != 1:
            return None
        entry = _dict_entry(value.args[0].value, rest[0])
        return _kind_of(definitions, entry, rest[1:], seen) if entry is not None else None
    if rest and called in definitions:
        return _container_kind(definitions, called, rest, seen)
    return None


def _dict_entry(expr: cst.BaseExpression, key: str) -> cst.BaseExpression | None:
    """The value of ``key`` in ``dict(key=value, ...)`` or ``{"key": value, ...}``; None."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict":
        return next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == key), None)
    if isinstance(expr, cst.Dict):
        for el in expr.elements:
            if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString) and el.key.evaluated_value == key:
                return el.value
    return None
