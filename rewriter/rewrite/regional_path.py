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
SRC (:func:`check_compiled_whole`), or a class that such a class builds in its ``__init__``
(:mod:`.enclosing`): that decorator would be inlined, never used.

The same reading gives the container's class where the source says it (``self.blocks =
nn.ModuleDict(...)``; a dotted path followed through ``nn.ModuleDict(dict(h=...))`` keys and
classes of the same file), which picks how the loop walks it
(:func:`rewriter.compile_facts.regional_iterable`): iterating a ``ModuleDict`` yields its keys.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import QualifiedNameSource

from ..compile_facts import first_positional
from ..errors import StackpartError
from ..plan import CompileAction, LoadedPlan
from ..targets import collect_definitions
from .callers import bound_value, calls_of, parameter_names, self_returning
from .enclosing import MAX_BASES, PLAIN_BASES, ClassRef, Enclosing
from .factories import called_class, factory_class


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


def _rebound_in(func: cst.FunctionDef, name: str) -> bool:
    """Whether ``func``'s body binds the parameter ``name`` again (an assignment, a loop or ``with``
    target, a walrus), other than to a method of it that returns the module itself
    (``model = model.eval()``, :func:`self_returning`): then what it holds at a later call is not
    the argument."""
    rebound = m.Name(name)
    kept = {id(t) for a in m.findall(func.body, m.Assign()) if self_returning(a.value, name)  # type: ignore[attr-defined]
            for t in a.targets}  # type: ignore[attr-defined]
    return any(id(n) not in kept for n in m.findall(
        func.body, m.AssignTarget(target=rebound) | m.AnnAssign(target=rebound) | m.AugAssign(target=rebound)
        | m.For(target=rebound) | m.AsName(name=rebound) | m.NamedExpr(target=rebound)))


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
    if _rebound_in(func, owner.value):
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


#: At most this many ``.py`` files under SRC are looked at for the program's whole-model compiles.
MAX_FILES = 5000


@dataclass(frozen=True)
class WholeCall:
    """One of the program's compile calls of an instance of a class (:meth:`ProgramCompiles.calls`).

    Attributes:
        rel: its file, POSIX path relative to SRC.
        qual: the function that holds it (``main`` of ``train.py``), None at a script's top level or
            in a nested function (no plan target names those).
        alone: it is the only compile call in that function (an ``own_call`` edit of it can name it).
        made: the class name the source says it compiles (``Net`` of ``torch.compile(Net())``), as
            the class's file names it (``Net`` of ``from model import Net as N; torch.compile(N())``).
        written: that class's name as the call's file writes it (``N``).
        module: the parsed file; scope: the function (or the module) whose own body holds the call.
        node: the site's node (its line is :meth:`ProgramCompiles.where`'s); call: the call itself.
        unused: the name its result is bound to where nothing uses it
            (:func:`rewriter.compile_facts.unused_result`: it compiles nothing), else None.
    """

    rel: str
    qual: str | None
    alone: bool
    made: str
    written: str
    module: cst.Module
    scope: Any
    node: Any
    call: cst.Call
    unused: str | None


@dataclass(frozen=True)
class EachCall:
    """One of the program's compile calls in a ``for`` loop that compiles each module the loop walks
    (:meth:`ProgramCompiles.loops`): in place, ``for layer in model.layers: layer.compile()``, or a
    wrapper assigned back, ``model.layers[i] = torch.compile(layer)``; over a container of a model
    the function builds (``model = Net()``), of ``self`` in a method of the model's class (``for b
    in self.blocks``), or over ``model.modules()`` filtered by ``isinstance``
    (torchtune's ``for m in model.modules(): if isinstance(m, Layer): m.compile()``); or through a
    helper of the same file, one call deep (``for layer in model.layers: compile_layer(layer)``
    with ``def compile_layer(l): l.compile()``, :func:`_helper_loops`).

    Attributes:
        rel, qual, alone, module, scope, node, call: as :class:`WholeCall`'s; through a helper,
            ``qual`` and ``alone`` are the helper's (the function an ``own_call`` edit of the
            compile names), ``scope`` the function that holds the loop, ``node`` and ``call`` the
            helper's call in it.
        written: a class name as the call's file writes it: the model's whose container the loop
            walks (``Net``), or the one ``isinstance`` names (``Layer``).
        path: the attribute path of the container walked (``layers``, ``encoder.layers``); None for
            the ``isinstance`` form, which compiles each instance of ``written`` the model holds.
        wraps: the call is ``torch.compile(layer)`` (an ``OptimizedModule`` wrapper), not
            ``layer.compile()``.
        through: the compile call in the helper the loop calls, None where the loop compiles itself.
    """

    rel: str
    qual: str | None
    alone: bool
    written: str
    path: str | None
    wraps: bool
    module: cst.Module
    scope: Any
    node: Any
    call: cst.Call
    through: Any = None


@dataclass
class ProgramCompiles:
    """The program's own whole-model compile calls of an instance of a class, in any file under
    ``src``, read once and shared by every plan checked against it (:func:`check_compiled_whole`):
    ``stackpart rewrite`` reads SRC once per plan, diagnose once per run for all its candidates
    and the plan it writes (:func:`rewriter.diagnose.search.candidate_rewrite`).

    Attributes:
        src: the tree read.
        measured: ``file.py:line`` of calls left out: diagnose's search measures such a call through
            stand-ins and writes its choice as an edit of it (:func:`rewriter.diagnose.own_candidates.standin`),
            and checks the plan it writes with the call read (:meth:`measuring`).
        cache: what the walk found, shared by :meth:`measuring`'s copies (``texts``, ``parsed``,
            ``positions``, ``all``: every file's text, ``enclosing``: :class:`.enclosing.Enclosing`).

    What is read (not calls with ``disable=True``, discarded results, ``compile_repeated_blocks``,
    decorators; SRC's files as :func:`rewriter.source.python_files` lists them, at most
    :data:`MAX_FILES`, only those that write a compile call and name a class asked for parsed, one
    that cannot be read or parsed left out) is :func:`_check_unedited`'s. Raises nothing.
    """

    src: Path
    measured: frozenset[str] = frozenset()
    cache: dict[str, Any] = field(default_factory=dict)

    def measuring(self, where: frozenset[str]) -> "ProgramCompiles":
        """This reading with the calls at ``where`` (``file.py:line``) left out; the walk shared."""
        return ProgramCompiles(self.src, frozenset(where), self.cache)

    def calls(self, names: set[str], defined: dict[str, set[str]] | None = None) -> list[WholeCall]:
        """Every compile call of an instance of a class named in ``names`` whose result SRC keeps.
        SRC's files are listed and read once (only those that write a compile call are kept,
        :data:`_COMPILE_CALL`); a kept file is parsed the first time a name it writes is asked for
        (LibCST's parse is the cost: a package tree such as transformers writes ``re.compile(`` in
        hundreds of files and a model's class name in a few). ``defined``: for a name, the files
        that define its class; a file writes it only where it is one of them or names its module
        (:func:`rewriter.src_names.module_stem`), as the class is read from the call (:func:`_class_attrs`)."""
        return [w for whole, _ in self._read(names, defined) for w in whole if w.made in names]

    def loops(self, names: set[str], defined: dict[str, set[str]] | None = None) -> list[EachCall]:
        """Every compile call of SRC in a ``for`` loop that compiles each module it walks
        (:class:`EachCall`), in the files whose text names a class of ``names`` (``defined``: as for
        :meth:`calls`): the loop's model class, or the class its ``isinstance`` names, is read from
        such a name. Files read and parsed once, shared with :meth:`calls`."""
        return [e for _, each in self._read(names, defined) for e in each]

    def _read(self, names: set[str], defined: dict[str, set[str]] | None) -> list[tuple[list[WholeCall], list[EachCall]]]:
        """The calls of each file of :meth:`_texts` that writes a name of ``names`` (:meth:`calls`),
        each file parsed once (:func:`_whole_calls`)."""
        from ..src_names import module_stem

        parsed: dict[str, tuple[list[WholeCall], list[EachCall]]] = self.cache.setdefault("parsed", {})
        defined = defined or {}
        for rel, text in self._texts().items():
            if rel not in parsed and any(re.search(rf"\b{re.escape(n)}\b", text) and (
                    n not in defined or rel in defined[n]
                    or any(re.search(rf"\b{re.escape(module_stem(d))}\b", text) for d in defined[n])) for n in names):
                parsed[rel] = _whole_calls(rel, text, self._all())
        return [parsed[rel] for rel in self._texts() if rel in parsed]

    def every_call(self) -> tuple[list[WholeCall], list[EachCall]]:
        """Every whole-model compile call (:meth:`calls`) and every per-module compile loop
        (:meth:`loops`) of SRC, whatever class they compile: each file that writes a compile call
        parsed once (the cache :meth:`calls` shares). A check that needs the program to compile
        some class asks this first, before the reading of which classes enclose which (the
        parse of every file that builds or subclasses the plan's class: on a transformers-sized
        SRC most of a rewrite's time, where the package compiles no model itself)."""
        parsed: dict[str, tuple[list[WholeCall], list[EachCall]]] = self.cache.setdefault("parsed", {})
        for rel, text in self._texts().items():
            if rel not in parsed:
                parsed[rel] = _whole_calls(rel, text, self._all())
        return ([w for whole, _ in parsed.values() for w in whole], [e for _, each in parsed.values() for e in each])

    def compiles_any(self) -> bool:
        """Whether any file under SRC writes a compile call at all (by its text)."""
        return bool(self._texts())

    def enclosing(self) -> Enclosing:
        """The reading of which classes of SRC build which (:class:`rewriter.rewrite.enclosing.Enclosing`),
        made once and shared by :meth:`measuring`'s copies."""
        if "enclosing" not in self.cache:
            self.cache["enclosing"] = Enclosing(self.src, MAX_FILES)
        return self.cache["enclosing"]

    def enclosers(self, cls: tuple[str, str], parsed: dict[str, cst.Module] | None = None) -> dict[tuple[str, str], list[Any]]:
        """The classes of SRC whose ``__init__`` builds class ``cls`` (``(file, name)``), at any
        depth, each with its chain of constructions (:meth:`rewriter.rewrite.enclosing.Enclosing.enclosers`;
        SRC's files read once, a file parsed only where its text can build a class asked about;
        ``parsed``: files the rewrite has parsed, not parsed again)."""
        return self.enclosing().enclosers(cls, parsed)

    def forward_heirs(self, cls: tuple[str, str]) -> list[tuple[str, str]]:
        """The classes of SRC that inherit class ``cls``'s ``forward``
        (:meth:`rewriter.rewrite.enclosing.Enclosing.forward_heirs`)."""
        return self.enclosing().forward_heirs(cls)

    def walked(self, cls: tuple[str, str], path: str) -> list[Any] | None:
        """The constructions from class ``cls`` down the attribute ``path`` (``encoder.layers``), one
        a part (:meth:`rewriter.rewrite.enclosing.Enclosing.held`), where each part holds instances
        of one class; None where the source does not say it."""
        chain: list[Any] = []
        for part in path.split("."):
            held = self.enclosing().held(chain[-1].inner if chain else cls, part)
            if len({b.inner for b in held}) != 1:
                return None
            chain.append(held[0])
        return chain

    def built_where(self, built: Any) -> str:
        """``file.py:line`` of a construction :meth:`enclosers` found."""
        return self.enclosing().where(built)

    def _texts(self) -> dict[str, str]:
        """The files that write a compile call (:func:`_compile_texts`), listed once."""
        if "texts" not in self.cache:
            self.cache["texts"] = _compile_texts(self.src)
        return self.cache["texts"]

    def _all(self) -> Any:
        """Every file's text under SRC (:class:`rewriter.compile_facts.SourceTexts`), read only for
        a top-level call whose result is bound to a name."""
        from ..compile_facts import SourceTexts

        if "all" not in self.cache:
            self.cache["all"] = SourceTexts(self.src)
        return self.cache["all"]

    def where(self, c: "WholeCall | EachCall") -> str:
        """``file.py:line`` of call ``c`` (``file.py`` where it has no position), positions resolved
        once per file."""
        from libcst.metadata import MetadataWrapper, PositionProvider

        positions = self.cache.setdefault("positions", {})
        if c.rel not in positions:
            positions[c.rel] = MetadataWrapper(c.module, unsafe_skip_copy=True).resolve(PositionProvider)
        pos = positions[c.rel].get(c.node)
        return f"{c.rel}:{pos.start.line}" if pos is not None else c.rel


#: A compile call as written (``torch.compile(``, ``model.compile(``), not ``re.compile(``: a file
#: without one holds none of the program's compiles.
_COMPILE_CALL = re.compile(r"(?<![\w.])compile\s*\(|(?<!\bre)\.compile\s*\(")


def _compile_texts(src: Path) -> dict[str, str]:
    """``relative path -> text`` of the files under ``src`` (as :func:`rewriter.source.python_files`
    lists them, at most :data:`MAX_FILES`) that write a compile call; unreadable ones left out."""
    from ..source import mentions, python_files, read_file

    out: dict[str, str] = {}
    for seen, path in enumerate(python_files(src)):
        if seen >= MAX_FILES:
            break
        rel = path.relative_to(src).as_posix()
        try:
            if not mentions(path, b"compile", rel):
                continue
            text = read_file(path, rel).text
        except (OSError, StackpartError):
            continue
        if _COMPILE_CALL.search(text):
            out[rel] = text
    return out


def _whole_calls(rel: str, text: str, texts: Any) -> tuple[list[WholeCall], list[EachCall]]:
    """The calls of :class:`ProgramCompiles` in one file (``rel`` under ``src``, its ``text``):
    each compile call of an instance of a class whose result is kept, in each function (and at
    each top level), and each compile of the modules a ``for`` loop walks (:func:`_each_call`);
    none where the file does not parse. ``texts``: SRC's texts
    (:class:`rewriter.compile_facts.SourceTexts`), read where a result's use is asked."""
    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, find_sites, module_sites, statement_of
    from ..compile_facts import is_repeated_blocks_call, turned_off, unused_result
    from ..source import parse_module

    out: list[WholeCall] = []
    each: list[EachCall] = []
    try:
        module = parse_module(text, rel)
    except StackpartError:
        return out, each
    imports = imported_names(module)
    for qual, scope in _scopes(module):
        try:
            sites = module_sites(module, imports) if scope is module else find_sites(scope, imports)
        except OwnCallRefused:
            continue
        for site in sites:
            call = site.call
            if site.kind == "decorator" or call is None or turned_off(call) or is_repeated_blocks_call(call):
                continue
            stmt = statement_of(scope, call)
            if site.kind == "call" and isinstance(stmt, cst.Expr):
                continue  # torch.compile(Net()) discarded: it compiles nothing
            written = _site_class(scope, site, module)
            if written is not None:
                unused = unused_result(scope, stmt, call, texts) if site.kind == "call" else None
                out.append(WholeCall(rel, qual, len(sites) == 1, _class_name(module, written, rel, (scope, call)), written, module, scope,
                                     site.node, call, unused))
            else:
                loops = _each_call(scope, site, stmt, qual, module)
                for written, path in loops:
                    each.append(EachCall(rel, qual, len(sites) == 1, written, path, site.kind == "call", module, scope,
                                         site.node, call))
                if loops or qual is None or "." in qual or scope is module:
                    continue
                for _, caller, node, written, path in _helper_loops(module, scope, site, stmt):
                    each.append(EachCall(rel, qual, len(sites) == 1, written, path, site.kind == "call", module, caller,
                                         node, node, through=site.node))
    return out, each


#: What a loop's iterable is peeled of to reach the container: ``enumerate(model.layers)``,
#: ``model.layers.children()``.
_WRAPPING = {"enumerate", "list", "reversed", "tuple"}
_VIEWS = {"children", "named_children", "values", "items"}
_ALL_MODULES = {"modules", "named_modules"}


def _each_call(scope: Any, site: Any, stmt: Any, qual: str | None = None,
               module: cst.Module | None = None) -> list[tuple[str, str | None]]:
    """``(class name as written, container path or None)`` for a compile at ``site`` (in ``scope``'s
    own body, its statement ``stmt``) of the name a ``for`` loop around it binds to each module it
    walks (the last name of its target: ``for i, layer in enumerate(...)``): ``layer.compile()``,
    or ``torch.compile(layer)`` assigned back into the container the loop walks (``model.layers[i] =
    ...``; a wrapper stored in a container of the program's own, ``fast[i] = ...``, leaves the
    model's modules as they are, and the model's own call runs their ``forward``); the loop
    over ``<name>.<path>`` where ``<name>`` is bound to an instance of a class before it
    (:func:`_bound`, :func:`.factories.called_class`; at a script's top level, in its ``if __name__ == "__main__":`` block
    too, :func:`_main_guard`, else before it; ``module`` given, a factory of the file,
    :func:`.factories.factory_class`), or ``self`` in a method of a class (``qual`` ``Net.compile_blocks``: ``for b in
    self.blocks``, the class ``Net``), or over ``<model>.modules()`` with the call under ``if isinstance(<name>,
    C)`` (one entry per class named). Nothing for any other form: a result bound to a plain name,
    a loop over something else, a class the source does not say."""
    call = site.call
    if site.kind == "method":
        owner = call.func.value if isinstance(call.func, cst.Attribute) else None
    elif site.kind == "call" and isinstance(stmt, cst.Assign) and all(isinstance(t.target, cst.Subscript)
                                                                       for t in stmt.targets):
        owner = first_positional(call)
    else:
        return []
    return _walked(scope, call, owner, site.kind == "method", stmt, qual, module)


def _walked(scope: Any, call: cst.Call, owner: Any, in_place: bool, stmt: Any, qual: str | None,
            module: cst.Module | None) -> list[tuple[str, str | None]]:
    """:func:`_each_call` once the compiled name ``owner`` is known: ``call`` (in ``scope``'s own
    body, its statement ``stmt``) compiles ``owner`` in place (``in_place``) or returns a wrapper
    ``stmt`` assigns."""
    if not isinstance(owner, cst.Name):
        return []
    loops = [f for f in m.findall(scope, m.For()) if m.findall(f.body, m.MatchIfTrue(lambda n: n is call))]
    if not loops:
        return []
    loop = loops[-1]  # the innermost
    target = loop.target.elements[-1].value if isinstance(loop.target, cst.Tuple) and loop.target.elements else loop.target
    if not m.matches(target, m.Name(owner.value)):
        return []
    it: cst.BaseExpression = loop.iter
    while isinstance(it, cst.Call) and m.matches(it.func, m.Name()) and it.func.value in _WRAPPING and it.args:  # type: ignore[attr-defined]
        it = it.args[0].value
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in _ALL_MODULES:
        if not in_place:
            return []  # a wrapper of what modules() yields is stored elsewhere: the model keeps its own module
        return [(name, None) for name in _isinstance_names(loop, call, owner.value)]
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in _VIEWS:
        it = it.func.value
    if not in_place and not all(m.matches(t.target, m.Subscript(value=m.MatchIfTrue(it.deep_equals)))
                                for t in stmt.targets):
        return []  # stored in a container of the program's own (fast[i] = ...): the model's are not replaced
    parts: list[str] = []
    while isinstance(it, cst.Attribute):
        parts.insert(0, it.attr.value)
        it = it.value
    if not parts or not isinstance(it, cst.Name):
        return []
    made = _self_class(scope, qual) if it.value == "self" else None
    if made is None:
        value = _bound(scope, it.value, loop)
        made = called_class(value) if value is not None else None
        made = (factory_class(module, made) if module is not None and made is not None else None) or made
    return [(made, ".".join(parts))] if made is not None else []


def _self_class(scope: Any, qual: str | None) -> str | None:
    """``Net`` where ``scope`` is a method of class ``Net`` (``qual`` ``Net.compile_blocks``, a class at
    its file's top level) whose first parameter is ``self``: the instance a loop over ``self.blocks``
    there walks; None otherwise."""
    if not isinstance(scope, cst.FunctionDef) or qual is None or qual.count(".") != 1:
        return None
    params = [*scope.params.posonly_params, *scope.params.params]
    return qual.split(".")[0] if params and params[0].name.value == "self" else None


def _helper_loops(module: cst.Module, helper: cst.FunctionDef, site: Any,
                  stmt: Any) -> list[tuple[str | None, Any, cst.Call, str, str | None]]:
    """``(caller's qualname, caller's scope, the call of helper, class name as written, container
    path or None)`` for each per-layer loop of ``module`` that compiles each module through
    ``helper``, a top-level function of the same file whose compile at ``site`` (its statement
    ``stmt``) compiles its own parameter, which its body never rebinds: in place
    (``def compile_layer(l): l.compile()``, called as a statement, ``for layer in model.layers:
    compile_layer(layer)``), or a wrapper it returns (``return torch.compile(l)``) assigned back
    into the container (``model.layers[i] = compile_layer(layer)``); the loop read as
    :func:`_each_call` reads one that compiles itself. One call deep only: a helper that calls
    another helper, a method, or a helper of another file is not followed."""
    from ..actions.own_call import statement_of

    call = site.call
    in_place = site.kind == "method"
    if in_place:
        owner = call.func.value if isinstance(call.func, cst.Attribute) else None
        if not (isinstance(stmt, cst.Expr) and stmt.value is call):
            return []
    else:
        owner = first_positional(call)
        if not (isinstance(stmt, cst.Return) and stmt.value is call):
            return []
    names = parameter_names(helper)
    if not isinstance(owner, cst.Name) or owner.value not in names:
        return []
    if _rebound_in(helper, owner.value):
        return []
    position = names.index(owner.value)
    calls = [c for c in m.findall(module, m.Call(func=m.Name(helper.name.value)))]
    out: list[tuple[str | None, Any, cst.Call, str, str | None]] = []
    for qual, scope in _scopes(module):
        for c in calls:
            cstmt = statement_of(scope, c)
            if cstmt is None or any(a.star for a in c.args):  # type: ignore[attr-defined]
                continue
            args = c.args  # type: ignore[attr-defined]
            arg = next((a.value for a in args if a.keyword is not None and a.keyword.value == owner.value), None)
            if arg is None and position < len(args) and all(a.keyword is None for a in args[:position + 1]):
                arg = args[position].value
            if in_place and not (isinstance(cstmt, cst.Expr) and cstmt.value is c):
                continue
            if not in_place and not (isinstance(cstmt, cst.Assign) and cstmt.value is c
                                     and all(isinstance(t.target, cst.Subscript) for t in cstmt.targets)):
                continue
            for written, path in _walked(scope, c, arg, in_place, cstmt, qual, module):  # type: ignore[arg-type]
                out.append((qual, scope, c, written, path))  # type: ignore[arg-type]
    return out


def _main_guard(module: cst.Module, node: cst.CSTNode) -> cst.If | None:
    """The top-level ``if __name__ == "__main__":`` of ``module`` that holds ``node``, else None: a
    script's body, whose own lines bind its names as a function's do
    (https://docs.python.org/3/library/__main__.html#idiomatic-usage)."""
    main = m.Comparison(left=m.Name("__name__"), comparisons=[m.ComparisonTarget(
        operator=m.Equal(), comparator=m.MatchIfTrue(lambda s: isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__"))])
    for stmt in module.body:
        if m.matches(stmt, m.If(test=main)) and m.findall(stmt, m.MatchIfTrue(lambda n: n is node)):
            return stmt  # type: ignore[return-value]
    return None


def _isinstance_names(loop: cst.For, call: cst.Call, name: str) -> list[str]:
    """The classes (as written) of the ``if isinstance(<name>, C)`` (or ``(C, D)``) in ``loop``'s
    body that holds ``call``, innermost first; none where no such ``if`` holds it."""
    out: list[str] = []
    for test in m.findall(loop.body, m.If()):
        if not m.findall(test.body, m.MatchIfTrue(lambda n: n is call)):
            continue
        cond = test.test
        if not (m.matches(cond, m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name(name)), m.Arg()]))):
            continue
        cls = cond.args[1].value  # type: ignore[attr-defined]
        for el in (e.value for e in cls.elements) if isinstance(cls, cst.Tuple) else (cls,):
            written = get_full_name_for_node(el)
            if written is not None:
                out.append(written)
    return out


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
    made = {w.made for w in reading.every_call()[0]}
    if not names or not made:
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


def _scopes(module: cst.Module) -> Any:
    """``(qualname, scope)`` of ``module`` itself (qualname None) and of each function in it, at
    any depth (qualname None inside another function, which no plan target names)."""
    yield None, module

    def walk(body: Any, prefix: str, nested: bool) -> Any:
        for stmt in body:
            inner = stmt.body.body if isinstance(getattr(stmt, "body", None), cst.IndentedBlock) else ()
            if isinstance(stmt, cst.FunctionDef):
                qual = prefix + stmt.name.value
                yield (None if nested else qual), stmt
                yield from walk(inner, qual + ".", True)
            elif isinstance(stmt, cst.ClassDef):
                yield from walk(inner, prefix + stmt.name.value + ".", nested)

    yield from walk(module.body, "", False)


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
    made = _site_class(func, sites[0], b.module)
    if made is None:
        return None
    return _class_attrs(made, b.target.relpath, b.module, b.definitions or collect_definitions(b.module), parse,
                        (func, sites[0].call))


def _site_class(scope: cst.FunctionDef | cst.Module, site: Any, module: cst.Module | None = None) -> str | None:
    """The class name of the module the compile at ``site`` (an
    :class:`rewriter.actions.own_call.OwnSite` in ``scope``'s own body) compiles, as the source
    says it: ``torch.compile(Net().eval())``, ``model = Net(); model = torch.compile(model)``,
    ``model.compile()``, ``torch.compile(model.forward)``, at a script's top level in its ``if
    __name__ == "__main__":`` block too (:func:`_bound`); with ``module`` (the file),
    ``model = build()`` where ``build`` is a function of that file that returns an instance of a
    class (:func:`.factories.factory_class`, one call deep); None where it does not say it."""
    call = site.call
    if call is None:
        return None
    if site.kind == "method":
        owner = call.func.value if isinstance(call.func, cst.Attribute) else None
    else:
        owner = call.args[0].value if call.args and call.args[0].keyword is None else None
    if isinstance(owner, cst.Attribute) and owner.attr.value == "forward":
        owner = owner.value  # torch.compile(model.forward) compiles the model
    if isinstance(owner, cst.Name):
        owner = _bound(scope, owner.value, call)
    if not isinstance(owner, cst.Call):
        return None
    made = called_class(owner)  # torch.compile(Encoder().eval(), ...): the class called there
    factory = factory_class(module, made) if module is not None and made is not None else None
    return factory or made


def _bound(scope: cst.FunctionDef | cst.Module, name: str, site: cst.CSTNode) -> cst.BaseExpression | None:
    """What ``name`` was last bound to in ``scope``'s own body before the statement holding ``site``
    (:func:`.callers.bound_value`); at a script's top level, in the ``if __name__ == "__main__":``
    block that holds ``site`` first (:func:`_main_guard`: its lines bind as a function's do), then
    before that block."""
    guard = _main_guard(scope, site) if isinstance(scope, cst.Module) else None
    return (guard and bound_value(guard, name, site)) or bound_value(scope, name, site)


def _class_attrs(name: str, rel: str, module: cst.Module, definitions: dict[str, list[Any]],
                 parse: Any, at: Any = None) -> tuple[str, str, set[str] | None, dict[str, list[Any]]] | None:
    """The class ``name`` as ``rel``'s module (its ``definitions``) sees it: defined there, or
    imported from a file under SRC (its name there: ``Net`` of ``from model import Net as N``);
    with the attributes it and its bases in that file set (None where a base is elsewhere), and
    the definitions of the file that defines it. ``at``: ``(function, node)`` where ``name`` is
    written at ``node`` in that function, whose own imports bind it first (:func:`_imported_in`)."""
    local = _imported_in(module, name, rel, at)
    if local is None and name in definitions and definitions[name][-1].kind == "class":
        return name, rel, _attrs(definitions, name), definitions
    source = _imported_from(module, name, rel) if local is None else local or None
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
    return None


def _imported_from(module: cst.Module, name: str, rel: str) -> tuple[list[str], str] | None:
    """``(the files under SRC, the class's name there)`` of ``from M import C as name`` (or ``import
    C``) in ``module``, file ``rel``, or of a dotted ``name`` whose module is imported (``M.C`` of
    ``import M`` or ``import pkg.M as M``, ``pkg.M.C`` of ``import pkg.M``, resolved by LibCST's
    :meth:`~libcst.metadata.Scope.get_qualified_names_for` in the module's global scope): ``M`` as
    :func:`rewriter.src_names.module_files` finds it (relative from ``rel``'s folder, ``..`` one folder up;
    absolute beside ``rel``, a script's flat import, and from SRC's root; ``M.py`` or
    ``M/__init__.py``); None where ``name`` is not imported so."""
    from ..src_names import module_files

    if "." in name:
        return _imported_through_module(module, name, rel)
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            for a in small.names:
                local = a.asname.name if a.asname is not None else a.name
                if isinstance(a.name, cst.Name) and isinstance(local, cst.Name) and local.value == name:
                    dotted = "." * len(small.relative) + ((get_full_name_for_node(small.module) or "") if small.module else "")
                    return module_files(dotted, rel), a.name.value
    return None


def _imported_through_module(module: cst.Module, name: str, rel: str, node: Any = None) -> tuple[list[str], str] | None:
    """:func:`_imported_from` of a dotted ``name`` (``M.Net``): its one qualified name, where an
    import binds its first part (``model.Net`` of ``import model as M``; ``.model.Net`` of ``from .
    import model as M``), split into the module's files and the class's name; None where the name
    is bound otherwise, or two ways. Read in the module's global scope, or in the scope of
    ``node`` (a node of ``module``: a function's imports, ``from . import Net`` too)."""
    from libcst.metadata import MetadataWrapper, ScopeProvider

    from ..src_names import definition_files

    scope = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider).get(node or module)
    names = scope.get_qualified_names_for(name) if scope is not None else set()
    if len(names) != 1:
        return None
    (q,) = names
    return definition_files(q, rel) if q.source == QualifiedNameSource.IMPORT else None


def _imported_in(module: cst.Module, name: str, rel: str, at: Any) -> tuple[list[str], str] | bool | None:
    """Where ``at`` is ``(function, node)`` and the function's own body imports the first part of
    ``name`` (``import model as M`` for ``M.Net``, ``from model import Net``; Python binds it in
    the function throughout, whatever the module's top level binds): what that import gives, read
    in ``node``'s scope (:func:`_imported_through_module`), or False where it is no class of a
    module (``import Net``). None where the function imports no such name (the module's top
    level is read as it is)."""
    if at is None or not isinstance(at[0], cst.FunctionDef):
        return None
    first = name.split(".")[0]
    if not any((a.evaluated_alias or a.evaluated_name.split(".")[0]) == first
               for a in m.findall(at[0].body, m.ImportAlias())):
        return None
    return _imported_through_module(module, name, rel, at[1]) or False


def _class_name(module: cst.Module, written: str, rel: str, at: Any = None) -> str:
    """The name of the class ``written`` stands for in ``module`` (file ``rel``): itself where the
    file defines it at its top level, the imported name where ``from M import Net as written``
    (at the top level, or in the function of ``at``, as :func:`_class_attrs` reads it)."""
    local = _imported_in(module, written, rel, at)
    if local is not None:
        return local[1] if local else written
    if any(isinstance(stmt, cst.ClassDef) and stmt.name.value == written for stmt in module.body):
        return written
    found = _imported_from(module, written, rel)
    return written if found is None else found[1]


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
