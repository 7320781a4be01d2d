"""The compile setup already in SRC, found statically: the program as it is is the search's baseline
(docs/design.md, "The search"), and the report names the user's own compile calls.

Every ``.py`` file under SRC that mentions ``compile`` or ``mark_dynamic`` (a text prefilter, as
``stackpart check`` does) is parsed with LibCST and read through check's facts
(:class:`rewriter.check.facts.FileFacts`): ``torch.compile(...)`` calls, ``module.compile(...)``
calls, ``model.compile_repeated_blocks(...)`` calls (diffusers' regional compile: the model's
declared ``_repeated_blocks`` compiled in place), ``@torch.compile`` decorators,
``torch.compiler.disable``, and ``mark_dynamic``-family calls.
Symlinks are not followed (a tree that links an installed package in is not the user's code), and
a file that does not parse is left out.

:func:`compile_setup` lists the setup for the report; :func:`own_compiles` reads what each compile
covers (:class:`OwnCompile`), whether it compiles anything the program runs (``self =
torch.compile(self)``, a discarded or unused result and a helper nothing calls compile nothing:
torch.compile returns a new object and changes nothing in place), and which ``own_call`` keys an
edit of it can set, which the search's candidates compose with
(:func:`.candidates.compose`: no second compile, no ``disable`` in a ``fullgraph=True`` region, no
``mark_dynamic`` inside compiled code).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PREFILTER = re.compile(r"\bcompile\b|compile_repeated_blocks|mark_dynamic|mark_unbacked|compiler\.disable|_dynamo\.config")
#: Files larger than this are skipped (generated code, data): the setup lives in scripts and models.
MAX_BYTES = 2_000_000


@dataclass(frozen=True)
class OwnCompile:
    """One compile the program does itself, with what it covers (edits compose with it).

    Attributes:
        where: ``file.py:line`` under SRC.
        site, why_not, mode: what an edit of the call's options (``compile`` with ``own_call``)
            would name, or why it cannot be made, and the call's current ``mode`` as written
            (:func:`_written`, whether or not an edit can name the call).
        code: the call's source text, shortened to 120 characters.
        fullgraph: the literal ``fullgraph=`` value (False when absent or not a literal).
        covers: what it compiles, read statically: ``("function", "file.py::Qual")`` for a
            decorator or a call on a function of that file; ``("class", "Name")`` for an instance
            of a class (``torch.compile(Encoder())``, ``model = Net(); model.compile()``);
            ``("children", "attr")`` for each module of a container attribute (``for block in
            model.layers: torch.compile(block)``, ``model.layers[i] = torch.compile(...)``,
            torchtitan's ``for i, b in model.layers.named_children()``); ``("declared", "Name")``
            for ``model.compile_repeated_blocks(...)``, each block the model declares in its
            ``_repeated_blocks`` (``Name``: the model's class where it can be read, else ``""``);
            ``("unknown", "")`` when the value cannot be read, which callers must treat as the
            whole model.
    """

    where: str
    code: str
    fullgraph: bool
    covers: tuple[str, str]
    #: the plan target an ``own_call`` edit of this compile names (``file.py::Qual``: the decorated
    #: function, or the function whose body holds the call), None where no target can name it
    site: str | None = None
    #: why an ``own_call`` edit of its ``mode`` cannot be made safely (the rewrite's own refusal,
    #: :mod:`rewriter.actions.own_call`), or None when it can
    why_not: str | None = None
    #: its ``mode`` literal (``default`` when absent), None when not a literal
    mode: str | None = None
    #: why it compiles nothing the program runs, read from the source (:func:`_idle`), or None:
    #: ``self = torch.compile(self)`` rebinds a local; a result discarded or bound to a name never
    #: used; a compile in a helper (or a compiled helper) nothing in SRC calls
    idle: str | None = None
    #: ``idle``'s kind: ``no-op`` (the call runs and compiles nothing), ``unused`` (the compiled
    #: value is never called), ``uncalled`` (the helper that holds it, or is it, is never called)
    idle_kind: str | None = None
    #: ``(key, why)`` for each ``own_call`` key (:data:`rewriter.plan.OWN_CALL_KEYS` and ``regional``)
    #: an edit of this call cannot set safely, read with the rewrite's own checks
    refused: tuple[tuple[str, str], ...] = ()
    #: ``(key, literal value)`` of the call's keyword arguments as written (torch's default where absent)
    current: tuple[tuple[str, Any], ...] = ()
    #: for a compiled function (``covers`` ``function``), what its compile traces besides it: the
    #: class names whose instances it calls (``model(x)`` with ``model = MLP()``: ``MLP``) and the
    #: functions of its file it calls (``file.py::Qual``), directly or through those functions
    #: (:data:`CALL_DEPTH` calls deep), read statically (:func:`_calls`)
    calls: tuple[str, ...] = ()
    #: its ``backend`` as written: the string literal, the source of another expression
    #: (``my_backend``), ``inductor`` (torch's default) where absent; None where ``**options`` may
    #: set it (:func:`_written`)
    backend: str | None = "inductor"
    #: the call passes a literal ``disable=True`` (:func:`rewriter.compile_facts.turned_off`):
    #: ``torch.compile`` returns what it was given and compiles nothing. Only :func:`off_compiles`
    #: returns such calls (an ``own_call: {disable: false}`` edit turns one back on); every other
    #: reader of the program's compiles (:func:`own_compiles`) never sees one
    off: bool = False
    #: ``(first, last)`` line of the call (or decorator) in its file: where the run-time reading
    #: (:class:`rewriter.engine.watch.CompileCalls`) finds the call made
    lines: tuple[int, int] | None = None
    #: :attr:`backend` is a string literal (or torch's default), not the source of an expression
    #: (nanoGPT's ``backend=backend`` from its config, a custom backend function) whose value the
    #: static reading does not know
    backend_literal: bool = True

    def can(self, key: str) -> str | None:
        """Why an ``own_call`` edit of ``key`` cannot be made (None: it can)."""
        if self.site is None:
            return self.why_not or "no plan target names the call"
        return dict(self.refused).get(key)

    def value(self, key: str) -> Any:
        """The call's literal value of ``key`` (torch's default where absent); KeyError when not a literal."""
        return dict(self.current)[key]

    @property
    def text(self) -> str:
        """``file.py:line: code``, as :func:`compile_setup` lists it."""
        return f"{self.where}: {self.code}"

    @property
    def setup_line(self) -> str:
        """The report's line for it: :attr:`text`, and :data:`OFF_SAID` after a call turned off."""
        return f"{self.text} ({OFF_SAID})" if self.off else self.text


#: What the report says after a compile call of the program that passes ``disable=True``.
OFF_SAID = "turned off: disable=True, compiles nothing"


def harness_entries(spec: Any) -> frozenset[str]:
    """``file.py::name`` of the harness's model and inputs functions (``spec``: the plan's
    ``harness:`` section): stackpart calls them, never by name in SRC, so :func:`own_compiles` and
    :func:`off_compiles` never read a compile in them as one in a helper nothing calls."""
    return frozenset({f"{spec.file}::{spec.model}", f"{spec.file}::{spec.inputs}"})


def _parsed(src: Path):
    """``(relative path, FileFacts, positions)`` for each readable ``.py`` file under ``src`` that
    mentions the compile setup (the text prefilter); unreadable or unparsable files are skipped."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ..check.facts import FileFacts
    from ..errors import StackpartError
    from ..source import parse_module, python_files, read_file

    for path in python_files(src):
        try:
            if path.stat().st_size > MAX_BYTES:
                continue
            # the guarded read: a FIFO or device named *.py in SRC is refused, never read
            text = read_file(path).text
        except (OSError, StackpartError):
            continue
        if not _PREFILTER.search(text):
            continue
        try:
            # CPython's parser as the gate, LibCST in the large-stack thread (rewriter.source)
            wrapper = MetadataWrapper(parse_module(text, str(path)))
            facts = FileFacts(wrapper, frozenset({"Call"}))  # every call, in document order
            positions = wrapper.resolve(PositionProvider)
        except Exception:  # noqa: BLE001 - a file LibCST cannot read is not the setup's
            continue
        yield path.relative_to(src).as_posix(), facts, positions


def parsed_setup(src: str | Path) -> list[tuple[str, Any, Any]]:
    """The files under ``src`` that mention the compile setup, read and parsed once, for
    :func:`compile_setup` and :func:`own_compiles` both (``parsed=``): the search needs both, and
    each alone walks and parses SRC."""
    return list(_parsed(Path(src)))


def compile_setup(src: str | Path, limit: int = 50, parsed: list[tuple[str, Any, Any]] | None = None) -> list[str]:
    """``file:line: what`` for each compile-related call or decorator under ``src``, in file order
    (at most ``limit``). ``what`` is the call's source text, shortened to 120 characters.
    ``parsed``: :func:`parsed_setup` of ``src``, when the caller has it.

    Raises nothing: unreadable or unparsable files are skipped.
    """
    import libcst as cst

    from ..check.rules.sp105_mark_dynamic_in_compiled import MARKS

    calls = MARKS | {"torch._dynamo.decorators.mark_unbacked", "torch.compiler.disable"}
    out: list[tuple[str, int, str]] = []
    for rel, facts, positions in parsed if parsed is not None else _parsed(Path(src)):
        module = facts.module
        nodes = list(facts.compile_calls) + list(facts.method_compile_calls) + list(facts.repeated_compile_calls)
        nodes += [site.node for site in facts.compiled.values()]
        nodes += [d for fn in facts.disabled for d in fn.decorators]
        nodes += [n for n in facts.nodes if facts.is_call(n, calls)]
        by_line: dict[int, str] = {}
        for node in nodes:
            pos = positions.get(node)
            if pos is None:
                continue
            code = " ".join(module.code_for_node(node).split())
            if isinstance(node, cst.Decorator) or pos.start.line not in by_line:  # "@torch.compile(...)" over its call
                by_line[pos.start.line] = code if not isinstance(node, cst.Decorator) or code.startswith("@") else "@" + code
        out.extend((rel, line, code[:120]) for line, code in by_line.items())
    out.sort()
    return [f"{f}:{line}: {code}" for f, line, code in out[:limit]]


#: Methods of a container that iterate its modules: ``for b in model.layers.named_children()``.
_ITERATORS = frozenset({"children", "named_children", "values", "items", "modules", "named_modules"})


def _qualname(facts, func) -> str:
    cls = facts.enclosing_class(func)
    return f"{cls.name.value}.{func.name.value}" if cls is not None else func.name.value


def _container_attr(expr) -> str | None:
    """``layers`` for ``model.layers``, ``model.layers.named_children()``, ``enumerate(model.layers)``,
    ``model.layers[: n]``; None for anything else."""
    import libcst as cst

    for _ in range(4):
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _ITERATORS:
                expr = expr.func.value
            elif isinstance(expr.func, cst.Name) and expr.func.value in ("enumerate", "zip", "list", "reversed") and expr.args:
                expr = expr.args[0].value
            else:
                return None
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return expr.attr.value if isinstance(expr, cst.Attribute) else None


def _covers(facts, target, at) -> tuple[str, str]:
    """What the value ``target`` passed to (or calling) ``compile`` at ``at`` is (see :class:`OwnCompile`)."""
    import libcst as cst

    if target is None:
        return ("unknown", "")
    if isinstance(target, cst.Subscript):  # model.layers[i] = torch.compile(model.layers[i])
        attr = _container_attr(target)
        if attr is not None:
            return ("children", attr)
    if isinstance(target, cst.Attribute) and target.attr.value == "forward":  # model.forward = torch.compile(model.forward)
        cls = facts.class_of(target.value, at)
        if cls is not None:
            return ("class", cls[0].rsplit(".", 1)[-1])
    if isinstance(target, cst.Name):  # the loop variable of ``for block in model.layers``
        for anc in facts.ancestors(at):
            if isinstance(anc, cst.For) and any(n.value == target.value for n in _names(anc.target)):
                attr = _container_attr(anc.iter)
                if attr is not None:
                    return ("children", attr)
    funcs = facts._target_functions(target, at)
    if funcs:  # a local def in each branch of an if: one qualified name for all of them
        return ("function", _qualname(facts, funcs[-1]))
    cls = facts.class_of(target, at)
    if cls is not None and not facts.is_name(target, "torch.compile") and "torch.compile" not in cls[1]:
        return ("class", cls[0].rsplit(".", 1)[-1])
    return ("unknown", "")


def _names(node):
    import libcst as cst

    if isinstance(node, cst.Name):
        yield node
    elif isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            yield from _names(el.value)


def _editable(facts, rel: str, node, positions, rebound: str | None) -> tuple[str | None, str | None]:
    """``(site, why_not)`` of the compile at ``node`` (see :class:`OwnCompile`), read with the
    rewrite's own :mod:`rewriter.actions.own_call`, so that the candidate says what the rewrite would.
    ``rebound``: the name ``node`` rebinds to its compiled self, or None (:func:`_rebinds`)."""
    import libcst as cst

    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, check, find_sites

    if isinstance(node, cst.Decorator):
        func = facts.parent(node)
    else:
        func = next((a for a in facts.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    if rebound is not None:  # f = torch.compile(f): its target is f (rewriter.actions.compile's rebinding edit)
        try:
            check(node, {"mode": "reduce-overhead"})
        except OwnCallRefused as exc:
            pos = positions.get(exc.node) if exc.node is not None else None
            return f"{rel}::{rebound}", (f"{rel}:{pos.start.line}: " if pos is not None else "") + exc.message
        return f"{rel}::{rebound}", None
    if not isinstance(func, cst.FunctionDef):
        return None, f"{rel}: the compile runs at module level, which no plan target names; change its options by hand"
    if any(isinstance(a, cst.FunctionDef) for a in facts.ancestors(func)):
        return None, f"{rel}: the compile is in a nested function ({func.name.value}), which no plan target names"
    site = f"{rel}::{_qualname(facts, func)}"
    try:
        sites = find_sites(func, imported_names(facts.module))
        if len(sites) != 1:
            raise OwnCallRefused(f"{site} holds {len(sites)} compile calls: an edit would not know which one")
        check(sites[0].call, {"mode": "reduce-overhead"})
    except OwnCallRefused as exc:
        pos = positions.get(exc.node) if exc.node is not None else None
        return site, (f"{rel}:{pos.start.line}: " if pos is not None else "") + exc.message
    return site, None


def _written(module, call) -> tuple[str | None, str | None, bool]:
    """``(mode, backend, literal)`` of a compile call as written, wherever it is (a module-level
    call too, which no ``own_call`` edit names): ``mode`` its string literal (``default`` where
    absent, None where not a literal), ``backend`` its string literal or the source of another
    expression (``inductor`` where absent), ``literal`` False for such an expression; both None
    where ``**options`` may set them. ``call`` None (a bare ``@torch.compile``): torch's defaults."""
    import libcst as cst

    from ..compile_facts import keyword, literal_str

    if not isinstance(call, cst.Call):
        return "default", "inductor", True
    if any(a.star for a in call.args):
        return None, None, False
    mode, backend = keyword(call, "mode"), keyword(call, "backend")
    written = literal_str(backend.value) if backend else "inductor"
    literal = written is not None
    if backend and written is None:
        written = " ".join(module.code_for_node(backend.value).split())[:80]
    return (literal_str(mode.value) if mode else "default"), written, literal


#: A value of each ``own_call`` key that is not torch's default, to ask the rewrite's check with.
_PROBE = {"fullgraph": True, "dynamic": True, "mode": "reduce-overhead", "backend": "eager", "disable": True}


def _keys(facts, node, rebound: str | None, where: Any = None) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, Any], ...]]:
    """``(refused, current)`` of the compile at ``node`` for every ``own_call`` key (see
    :class:`OwnCompile`), read with :mod:`rewriter.actions.own_call` (its checks, the regional edit,
    and :func:`~rewriter.actions.own_call.check_unwrapped` for ``disable``: a call whose result the
    program reads ``._orig_mod`` of cannot be turned off). ``rebound``: as :func:`_editable`'s;
    ``where``: ``(node) -> "file.py:line"`` (or None), put before a refusal that names a node."""
    import libcst as cst

    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, OwnSite, check_unwrapped, find_sites, regional

    func = facts.parent(node) if isinstance(node, cst.Decorator) else facts.enclosing_function(node)
    if rebound is not None:  # f = torch.compile(f): the call's keys; a function has no blocks to compile
        return _probed(OwnSite(node, node, "call"), [("regional", f"{rebound} is a function the program compiles by "
                                                      "rebinding its name: it has no blocks to compile")])
    if not isinstance(func, cst.FunctionDef):
        return (), ()
    try:
        sites = find_sites(func, imported_names(facts.module))
    except OwnCallRefused as exc:
        return tuple((k, exc.message) for k in (*_PROBE, "regional")), ()
    if len(sites) != 1:
        return tuple((k, f"the function holds {len(sites)} compile calls") for k in (*_PROBE, "regional")), ()
    more = []
    cls = facts.enclosing_class(func)
    at = (lambda exc: f"{where(exc.node)}: " if where is not None and exc.node is not None and where(exc.node) else "")
    try:
        regional(func, sites[0], {}, "layers", cls=cls)
    except OwnCallRefused as exc:
        more.append(("regional", at(exc) + exc.message))
    try:
        check_unwrapped(func, sites[0], {"disable": _PROBE["disable"]}, cls)
    except OwnCallRefused as exc:
        more.append(("disable", at(exc) + exc.message))
    return _probed(sites[0], more)


def _probed(site, more: list[tuple[str, str]]) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, Any], ...]]:
    """``(refused, current)`` of ``site`` (an :class:`rewriter.actions.own_call.OwnSite`) for each
    key of :data:`_PROBE`, with ``more`` refusals after them (one of a key the call's own check
    refused already is left out: the first reason stands)."""
    from ..actions.own_call import OwnCallRefused, check, current

    refused, values = [], []
    for key, probe in _PROBE.items():
        try:
            check(site.call, {key: probe})
        except OwnCallRefused as exc:
            refused.append((key, exc.message))
        known, value = current(site, key)
        if known:
            values.append((key, value))
    first = {k for k, _ in refused}
    return tuple(refused + [(k, why) for k, why in more if k not in first]), tuple(values)


def _at(rel: str, positions: Any) -> Any:
    """``(node) -> "file.py:line"`` of a node of ``rel``'s tree (None where it has no position)."""

    def at(node: Any) -> str | None:
        pos = positions.get(node)
        return f"{rel}:{pos.start.line}" if pos is not None else None

    return at


def _rebinds(facts) -> dict[int, str]:
    """``id(call) -> qualified name`` of each ``f = torch.compile(f)`` (or ``f =
    torch.compile(...)(f)``) of the file, at module level or in a class body, ``call`` the
    ``torch.compile`` call (:func:`rewriter.compile_facts.rebound_compiles`), read once per file."""
    from ..actions.base import imported_names
    from ..compile_facts import rebound_compiles

    return {id(s.node): q for q, s in rebound_compiles(facts.module, imported_names(facts.module)).items()}


#: How many calls deep :func:`_calls` follows a compiled function into its file's functions.
CALL_DEPTH = 3


def _calls(facts, func, rel: str) -> tuple[str, ...]:
    """What the compiled function ``func`` calls (see :attr:`OwnCompile.calls`): each call's callee
    read with check's facts, an instance of a known class (``facts.class_of``: a name bound to
    ``Cls(...)`` in the function or at module level) or a function of the file, whose own calls are
    read in turn. A parameter of ``func`` that it calls (``train_step(model, x, y, opt)`` calling
    ``model(x)``) is the instance its callers in the file pass for it (:func:`_passed_classes`:
    ``train_step(model, ...)`` with ``model = Net()`` in ``main``). Static and partial: a callee
    passed in from another file is not seen."""
    import libcst as cst
    import libcst.matchers as m

    found: dict[str, None] = {}
    seen: set[int] = set()
    passed = _passed_classes(facts, func)
    todo = [(func, 0)]
    while todo:
        fn, depth = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for call in m.findall(fn.body, m.Call()):
            assert isinstance(call, cst.Call)
            funcs = facts._target_functions(call.func, call)
            if funcs:
                for f in funcs:
                    found.setdefault(f"{rel}::{_qualname(facts, f)}")
                    if depth + 1 < CALL_DEPTH:
                        todo.append((f, depth + 1))
                continue
            if fn is func and isinstance(call.func, cst.Name) and call.func.value in passed:
                for name in passed[call.func.value]:
                    found.setdefault(name)
                continue
            cls = facts.class_of(call.func, call)
            if cls is not None and not facts.is_name(call.func, "torch.compile"):
                found.setdefault(cls[0].rsplit(".", 1)[-1])
    return tuple(found)


def _passed_classes(facts, func) -> dict[str, list[str]]:
    """``{parameter: [class name, ...]}``: for each parameter of the free function ``func``, the
    classes of the instances its callers in the same file pass for it, each argument bound to its
    parameter as Python binds a call (positional in order, then by keyword; ``facts.class_of`` of
    the argument at the call: a name bound to ``Cls(...)`` in the caller). A method, a call through
    ``*args``/``**kwargs`` and an argument of unknown class add nothing."""
    import libcst as cst
    import libcst.matchers as m

    if facts.enclosing_class(func) is not None:
        return {}
    params = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    kwonly = {p.name.value for p in func.params.kwonly_params}
    out: dict[str, list[str]] = {}
    for call in m.findall(facts.module, m.Call(func=m.Name(func.name.value))):
        assert isinstance(call, cst.Call)
        if any(a.star for a in call.args):
            continue
        for i, arg in enumerate(call.args):
            name = arg.keyword.value if arg.keyword is not None else (params[i] if i < len(params) else None)
            if name is None or (name not in params and name not in kwonly):
                continue
            cls = facts.class_of(arg.value, call)
            if cls is not None:
                short = cls[0].rsplit(".", 1)[-1]
                if short not in out.setdefault(name, []):
                    out[name].append(short)
    return out


#: Functions called without their name being written: module hooks, dunders, the harness's entries.
_IMPLICIT = frozenset({"forward", "__init__", "__call__", "main"})


def _idle(facts, node, code: str, texts: Any, entries: frozenset[str], rel: str) -> tuple[str | None, str | None]:
    """``(why, kind)`` the compile at ``node`` compiles nothing the program runs, or ``(None, None)``
    (see :attr:`OwnCompile.idle`). torch.compile returns a new ``OptimizedModule`` or function and
    changes nothing in place (``nn.Module.compile`` does): torch.compile docs, "Compiling modules"."""
    import libcst as cst

    from ..compile_facts import unused_result

    func = node if isinstance(node, cst.FunctionDef) else None
    if isinstance(node, cst.Decorator):
        func = facts.parent(node)
    elif isinstance(node, cst.Call):
        parent = facts.parent(node)
        if isinstance(parent, cst.Expr) and not _is_method_compile(node):
            return (f"the value torch.compile returns is discarded ({code}): torch.compile changes nothing in place, so "
                    "the program keeps calling the original; bind the result and call it, or use module.compile()"), "no-op"
        if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            target = parent.targets[0].target
            scope = facts.scope_of(node)
            if isinstance(target, cst.Name) and target.value == "self":
                return ("it rebinds the local name self to the compiled module: the module the caller holds is not "
                        "compiled, so nothing compiles; self.compile() compiles it in place"), "no-op"
            unused = unused_result(scope, parent, node, texts)
            if unused is not None and not isinstance(scope, cst.FunctionDef):
                return (f"its result is bound to {unused}, which nothing in SRC uses: the program calls the "
                        "original, so nothing compiles"), "unused"
            if unused is not None:
                return (f"its result is bound to {unused}, which {scope.name.value} never uses: the program calls "
                        "the original, so nothing compiles"), "unused"
        func = facts.enclosing_function(node)
    if not isinstance(func, cst.FunctionDef):
        return None, None
    name = func.name.value
    if name in _IMPLICIT or (name.startswith("__") and name.endswith("__")) or f"{rel}::{name}" in entries:
        return None, None
    if facts.enclosing_class(func) is not None and isinstance(node, cst.Call):
        return None, None  # a method holding the call: called through an instance under any name
    if texts.uses(name) <= 1:
        what = "the compiled helper" if isinstance(node, cst.Decorator) else "the helper that holds it"
        return f"{what}, {name}, is never called in SRC, so nothing compiles", "uncalled"
    return None, None


def _is_method_compile(call) -> bool:
    """``module.compile(...)`` or ``model.compile_repeated_blocks(...)``: a compile in place."""
    import libcst as cst

    from ..compile_facts import REPEATED_BLOCKS

    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("compile", REPEATED_BLOCKS) and not (
        isinstance(call.func.value, cst.Name) and call.func.value.value == "torch")


def own_compiles(src: str | Path, parsed: list[tuple[str, Any, Any]] | None = None,
                 entries: frozenset[str] = frozenset()) -> list[OwnCompile]:
    """Every compile the program under ``src`` does itself (``torch.compile(...)`` calls,
    ``module.compile(...)`` and ``model.compile_repeated_blocks(...)`` calls, ``@torch.compile``
    decorators), in file order, each with what it
    covers and its ``fullgraph`` literal (:class:`OwnCompile`). Static, read with check's facts
    (:class:`rewriter.check.facts.FileFacts`); raises nothing (unreadable files are skipped).
    ``parsed``: :func:`parsed_setup` of ``src``, when the caller has it. ``entries``: ``file.py::name``
    of the functions stackpart calls by name (the harness's), never read as a helper nothing calls.
    A call that passes ``disable=True`` compiles nothing and is not listed (:func:`off_compiles`)."""
    return _own(src, parsed, entries, off=False)


def off_compiles(src: str | Path, parsed: list[tuple[str, Any, Any]] | None = None,
                 entries: frozenset[str] = frozenset()) -> list[OwnCompile]:
    """The program's own compile calls under ``src`` that pass a literal ``disable=True``
    (``@torch.compile(disable=True)``, ``torch.compile(model, disable=True)``,
    ``module.compile(disable=True)``, ``f = torch.compile(f, disable=True)``,
    ``model.compile_repeated_blocks(disable=True)``), in file order, each read as
    :func:`own_compiles` reads a compile (what it would cover, its site, what an edit can set,
    whether it is idle) with :attr:`OwnCompile.off` True: a tree whose compile a plan turned off
    (``own_call: {disable: true}``), which the search can turn back on. Raises nothing."""
    return _own(src, parsed, entries, off=True)


def _found(facts, rel: str, off: bool) -> list[tuple[Any, bool, tuple[str, str], Any, Any]]:
    """``(node, fullgraph, covers, compiled function or None, call or None)`` for each compile of
    the file that compiles (``off`` False) or that passes ``disable=True`` (``off`` True)."""
    import libcst as cst

    from ..compile_facts import options

    found = []
    if off:
        calls = [c for k, c in facts.off_compile_calls if k == "call"]
        methods = [c for k, c in facts.off_compile_calls if k == "method"]
        repeated = [c for k, c in facts.off_compile_calls if k == "repeated"]
    else:
        calls, methods, repeated = facts.compile_calls, facts.method_compile_calls, facts.repeated_compile_calls
        for func, site in facts.compiled.items():
            if site.node in facts.compile_calls or site.whole_model:
                continue  # a call; listed below with what it names
            # ``@torch.compile(...)``'s call; a bare ``@torch.compile`` has none
            call = site.node if isinstance(site.node, cst.Call) else getattr(site.node, "decorator", None)
            found.append((site.node, bool(site.fullgraph), ("function", f"{rel}::{_qualname(facts, func)}"), func, call))
    for call in calls:
        parent = facts.parent(call)
        if isinstance(parent, cst.Decorator):
            func = facts.parent(parent)
            if off and isinstance(func, cst.FunctionDef):  # ``@torch.compile(disable=True)``: facts.compiled leaves it out
                found.append((parent, bool(options(call)[0]), ("function", f"{rel}::{_qualname(facts, func)}"), func, call))
            continue  # ``@torch.compile(...)``: its function, above
        target, node = facts.compile_target(call)
        cover = _covers(facts, target, call)
        func = None
        if cover[0] == "function":
            cover = ("function", f"{rel}::{cover[1]}")
            func = facts._target_functions(target, call)[-1]
        found.append((node, bool(options(call)[0]), cover, func, call))
    for call in methods:
        cover = _covers(facts, call.func.value, call)
        if cover[0] == "function":  # fn.compile() is not a module's compile: not the setup's
            continue
        found.append((call, bool(options(call)[0]), cover, None, call))
    for call in repeated:  # the model's declared blocks, each compiled in place
        cls = facts.class_of(call.func.value, call)
        found.append((call, bool(options(call)[0]), ("declared", cls[0].rsplit(".", 1)[-1] if cls else ""), None, call))
    return found


def _own(src: str | Path, parsed: list[tuple[str, Any, Any]] | None, entries: frozenset[str], off: bool) -> list[OwnCompile]:
    """:func:`own_compiles` (``off`` False) or :func:`off_compiles` (``off`` True)."""
    from ..compile_facts import SourceTexts

    texts = SourceTexts(Path(src))
    out: list[tuple[str, int, OwnCompile]] = []
    for rel, facts, positions in parsed if parsed is not None else _parsed(Path(src)):
        rebinds = _rebinds(facts)
        module = facts.module
        for node, fullgraph, cover, func, call in _found(facts, rel, off):
            pos = positions.get(node)
            if pos is None:
                continue
            code = " ".join(module.code_for_node(node).split())[:120]
            if hasattr(node, "decorator") and not code.startswith("@"):
                code = "@" + code
            # f = torch.compile(f, ...) or f = torch.compile(...)(f): the torch.compile call is the site
            rebound = rebinds.get(id(call)) if call is not None else None
            edit = call if rebound is not None else node
            try:
                site, why_not = _editable(facts, rel, edit, positions, rebound)
            except Exception as exc:  # noqa: BLE001 - the setup is listed either way
                site, why_not = None, f"{rel}:{pos.start.line}: the call could not be read ({type(exc).__name__})"
            mode, backend, backend_literal = _written(module, call)
            try:
                idle, idle_kind = _idle(facts, node, code, texts, entries, rel)
            except Exception:  # noqa: BLE001 - read as compiling: the safe reading for composition
                idle, idle_kind = None, None
            try:
                refused, values = _keys(facts, edit, rebound, _at(rel, positions))
            except Exception as exc:  # noqa: BLE001 - then no key can be edited
                refused, values = tuple((k, f"the call could not be read ({type(exc).__name__})") for k in (*_PROBE, "regional")), ()
            try:
                calls = _calls(facts, func, rel) if func is not None else ()
            except Exception:  # noqa: BLE001 - then only the function itself is known to be compiled
                calls = ()
            out.append((rel, pos.start.line, OwnCompile(f"{rel}:{pos.start.line}", code, fullgraph, cover, site, why_not, mode,
                                                        idle, idle_kind, refused, values, calls, backend, off,
                                                        (pos.start.line, pos.end.line), backend_literal)))
    return [o for _, _, o in sorted(out, key=lambda t: (t[0], t[1]))]
