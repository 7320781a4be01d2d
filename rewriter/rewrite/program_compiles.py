"""The program's own compile calls, read from SRC with LibCST: the class each whole-model compile
call compiles (``model = torch.compile(Net())``, ``model.compile()``: :class:`WholeCall`) and the
modules each per-layer compile loop compiles (``for layer in model.layers: layer.compile()``:
:class:`EachCall`), in any file under SRC.

:class:`ProgramCompiles` reads SRC once and is shared by every plan checked against it (the
rewrite's :func:`.regional_path.check_compiled_whole`, :func:`rewriter.consistency.check_program_loops`,
diagnose's candidates through :func:`rewriter.diagnose.search.candidate_rewrite`): of SRC's files
only those whose text writes a compile call are kept (:func:`writes_compile_call`), and one is parsed the
first time a class name it writes is asked for. A call's class is read as far as the source says
it: a class called in the compile, or bound to the compiled name before it in the same function or
a script's ``if __name__ == "__main__":`` block (:func:`site_class`), or made by a factory of the
same file one call deep, or of another file of SRC that defines the class (:mod:`.factories`,
:func:`_factory_made`); its name followed through the file's imports to the
file of SRC that defines it (:func:`imported_from`, :func:`imported_in`). A call whose class the
source does not say, and a file that cannot be read or parsed, are left out; nothing here raises.
"""

from __future__ import annotations

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
from .callers import bound_value, parameter_names, rebound_in
from .enclosing import Enclosing
from .factories import called_class, factory_class


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
    ``src``, read once and shared by every plan checked against it
    (:func:`.regional_path.check_compiled_whole`): ``stackpart rewrite`` reads SRC once per plan,
    diagnose once per run for all its candidates and the plan it writes
    (:func:`rewriter.diagnose.search.candidate_rewrite`).

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
    that cannot be read or parsed left out) is :func:`.regional_path._check_unedited`'s. Raises
    nothing.
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
        :func:`writes_compile_call`); a kept file is parsed the first time a name it writes is asked for
        (LibCST's parse is the cost: a package tree such as transformers writes ``re.compile(`` in
        hundreds of files and a model's class name in a few). ``defined``: for a name, the files
        that define its class; a file writes it only where it is one of them or names its module
        (:func:`rewriter.src_names.module_stem`), as the class is read from the call
        (:func:`.regional_path._class_attrs`)."""
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
                parsed[rel] = _whole_calls(rel, text, self._all(), self._modules())
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
                parsed[rel] = _whole_calls(rel, text, self._all(), self._modules())
        return ([w for whole, _ in parsed.values() for w in whole], [e for _, each in parsed.values() for e in each])

    def compiles_any(self) -> bool:
        """Whether any file under SRC writes a compile call at all (by its text)."""
        return bool(self._texts())

    def enclosing(self) -> Enclosing:
        """The reading of which classes of SRC build which (:class:`rewriter.rewrite.enclosing.Enclosing`),
        made once and shared by :meth:`measuring`'s copies; the files it parses and those this
        reading parses are one cache (:meth:`_modules`)."""
        if "enclosing" not in self.cache:
            self.cache["enclosing"] = Enclosing(self.src, MAX_FILES, self._modules())
        return self.cache["enclosing"]

    def _modules(self) -> dict[str, cst.Module]:
        """SRC's files parsed so far, ``relative path -> module``, shared with :meth:`enclosing`:
        a file that both writes a compile call and builds a class asked about (a tree an applied
        plan decorated) is parsed once, not once per reading."""
        return self.cache.setdefault("modules", {})

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


#: Where a compile call or a compile import alias may start (:func:`writes_compile_call`): ``compile``
#: then, past white space and line continuations, ``(`` (a call), ``)(`` (a parenthesized callee,
#: ``(torch.compile)(m)``; prose in brackets, ``(no compile)``, is not one) or ``as`` (an alias); or
#: a comment on its line (inside brackets the call's ``(`` or the ``as`` may follow it on the next
#: line: ``(torch.compile  # whole\n (Net()))``). No match spans a comment, so the scan stays linear
#: in the file. The literal comes first, so the scan jumps from one ``compile`` to the next (a
#: pattern that opens with a lookbehind tries every position of the file: 20x slower over
#: transformers' 2,951 files).
_COMPILE_AT = re.compile(r"compile(?:[\s\\]*(?:\(|\)[\s\\]*\()|[ \t\f]*#|[\s\\]+as[\s\\])")
_OPTIMIZE_ALIAS = re.compile(r"\boptimize(?:[ \t\f]*#|[\s\\]+as[\s\\])")


def writes_compile_call(text: str) -> bool:
    """Whether ``text`` writes a compile call (``torch.compile(``, ``model.compile(``, ``compile(``,
    ``(torch.compile)(``, ``torch.compile\\`` then ``(`` on the next line; not ``re.compile(``, not
    ``recompile(``) or an import that binds a compile function to another name (``from torch import
    compile as tc``, then ``tc(model)``), as :data:`_COMPILE_AT` spells them: a file that does
    neither holds none of the program's compiles
    (:func:`rewriter.actions.own_call.find_sites` reads a call only where its callee names
    ``compile``)."""
    from ..compile_facts import word_matches

    for m in word_matches(_COMPILE_AT, text):  # not recompile(, my_compile as
        i = m.start()
        if m.group()[-1] in "()" and text[max(0, i - 3):i] == "re." and not (i >= 4 and (text[i - 4].isalnum() or text[i - 4] == "_")):
            continue  # re.compile(
        return True
    return "optimize" in text and _OPTIMIZE_ALIAS.search(text) is not None


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
        if writes_compile_call(text):
            out[rel] = text
    return out


def _whole_calls(rel: str, text: str, texts: Any, modules: dict[str, cst.Module]) -> tuple[list[WholeCall], list[EachCall]]:
    """The calls of :class:`ProgramCompiles` in one file (``rel`` under ``src``, its ``text``):
    each compile call of an instance of a class whose result is kept, in each function (and at
    each top level), and each compile of the modules a ``for`` loop walks (:func:`_each_call`);
    none where the file does not parse. ``texts``: SRC's texts
    (:class:`rewriter.compile_facts.SourceTexts`), read where a result's use is asked;
    ``modules``: SRC's files parsed so far (:meth:`ProgramCompiles._modules`), read and added to."""
    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, find_sites, module_sites, statement_of
    from ..compile_facts import is_repeated_blocks_call, turned_off, unused_result
    from ..source import parse_module

    out: list[WholeCall] = []
    each: list[EachCall] = []
    try:
        module = modules[rel] if rel in modules else modules.setdefault(rel, parse_module(text, rel))
    except StackpartError:
        return out, each
    imports = imported_names(module)
    scopes = list(_scopes(module))
    naming = _naming_compile(text, imports)
    if naming is not None and len(naming) != len(scopes) - 1:
        naming = None  # the two readings disagree on the functions: search every one
    for k, (qual, scope) in enumerate(scopes):
        if naming is not None and k and not naming[k - 1]:
            continue  # its lines name no compile function: find_sites would find no site there
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
            written = site_class(scope, site, module)
            if written is not None:
                unused = unused_result(scope, stmt, call, texts) if site.kind == "call" else None
                made = _class_name(module, written, rel, (scope, call))
                made = _factory_made(module, written, rel, modules, texts.src) or made
                out.append(WholeCall(rel, qual, len(sites) == 1, made, written, module, scope, site.node, call, unused))
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
    if rebound_in(helper, owner.value):
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


#: The line ends Python's tokenizer counts (so :mod:`ast`'s line numbers): not ``str.splitlines``'
#: others (a form feed, ``\v``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028``, ``\u2029``), which a page break
#: or a comment may hold and which would shift every line below it.
_LINE_END = re.compile(r"\r\n|\r|\n")


def _naming_compile(text: str, imports: dict[str, str]) -> list[bool] | None:
    """For each function :func:`_scopes` yields after the module (in its order), whether its lines
    (its decorators' included) name a compile function: ``compile`` or ``optimize``, or a name an
    import binds to one (``from torch import compile as tc``), as a word anywhere on the line.
    :func:`rewriter.actions.own_call.find_sites` finds a site only where such a name is written, so
    a function without one is not searched (a LibCST visit of every function of a file was most of
    the reading of a large file's compile calls; the line ranges come from :mod:`ast`, in C). None
    where :mod:`ast` cannot read the file as LibCST did (then every function is searched)."""
    import ast

    words = {"compile", "optimize"} | {local for local, name in imports.items()
                                       if name.rsplit(".", 1)[-1] in ("compile", "optimize")}
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(words)) + r")\b")
    lines = [n for n, line in enumerate(_LINE_END.split(text), 1) if pattern.search(line)]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: list[bool] = []

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                last = stmt.end_lineno or stmt.lineno
                out.append(any(first <= n <= last for n in lines))
                walk(stmt.body)
            elif isinstance(stmt, ast.ClassDef):
                walk(stmt.body)

    walk(tree.body)
    return out


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


def site_class(scope: cst.FunctionDef | cst.Module, site: Any, module: cst.Module | None = None) -> str | None:
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


def imported_from(module: cst.Module, name: str, rel: str) -> tuple[list[str], str] | None:
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
    """:func:`imported_from` of a dotted ``name`` (``M.Net``): its one qualified name, where an
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


def imported_in(module: cst.Module, name: str, rel: str, at: Any) -> tuple[list[str], str] | bool | None:
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


def _factory_made(module: cst.Module, written: str, rel: str, modules: dict[str, cst.Module], src: Any) -> str | None:
    """The class a factory function imported from another file of SRC (``from models import
    build``; ``written`` is ``build``) returns an instance of, where that file defines both
    (:func:`.factories.returned_call`: every ``return`` of one class); None otherwise. That file is
    parsed once into ``modules``."""
    from ..source import parse_module, read_file
    from .factories import class_made_here, top_level_functions

    found = imported_from(module, written, rel) if "." not in written else None
    if found is None:
        return None
    files, name = found
    for other in dict.fromkeys(files):  # beside the file and from the root, as regional_path._class_attrs
        try:
            if other not in modules:
                modules[other] = parse_module(read_file(Path(src) / other).text, other)
        except (OSError, StackpartError):
            continue
        funcs = top_level_functions(modules[other])
        if name in funcs:
            classes = {stmt.name.value for stmt in modules[other].body if isinstance(stmt, cst.ClassDef)}
            return class_made_here(funcs[name], set(funcs), classes)
    return None


def _class_name(module: cst.Module, written: str, rel: str, at: Any = None) -> str:
    """The name of the class ``written`` stands for in ``module`` (file ``rel``): itself where the
    file defines it at its top level, the imported name where ``from M import Net as written``
    (at the top level, or in the function of ``at``, as :func:`.regional_path._class_attrs` reads
    it)."""
    local = imported_in(module, written, rel, at)
    if local is not None:
        return local[1] if local else written
    if any(isinstance(stmt, cst.ClassDef) and stmt.name.value == written for stmt in module.body):
        return written
    found = imported_from(module, written, rel)
    return written if found is None else found[1]
