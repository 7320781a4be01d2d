"""Which classes of SRC build which in their ``__init__``: a module whose instance the program
compiles whole encloses every module its ``__init__`` builds and holds, and theirs in turn.

Dynamo traces a module called from inside a compiled frame, inlining a ``torch.compile``-decorated
``forward`` of it (docs/guide.md, "Where your own compile must sit"): a plan's ``compile`` of
``Block`` is never used where the program compiles ``Net`` whole and ``Net.__init__`` builds the
``Block``s (:func:`rewriter.rewrite.regional_path.check_compiled_whole` refuses it). This module
says which classes enclose a given one, read statically with LibCST:

* a construction is a call in a class's own ``__init__`` (not in a function or ``lambda`` nested in
  it: a factory, run who knows when), or in a method of the class's own body that ``__init__``
  calls on ``self`` where it runs (``self.build()``, one call deep: :func:`init_methods`), of a
  name LibCST's :class:`~libcst.metadata.QualifiedNameProvider` resolves to one class defined at
  the top level of a file under SRC: the same file, or a module imported from SRC (``from blocks
  import Block``, ``from .blocks import Block as B``, ``import pkg.blocks as pb; pb.Block()``; an
  absolute import read from SRC's root and from beside the file, as a script's flat import is);
* held: the call is in what ``self.<attr>`` is set to (``self.block = Block()``, ``self.blocks =
  nn.ModuleList([Block() for _ in range(n)])``, ``nn.Sequential(*[Block() ...])``), appended or
  added to it (``self.blocks.append(Block())``, ``self.add_module("b", Block())``), or bound to a
  local name that such a value then names (``layers.append(Block())``; ``self.layers =
  nn.ModuleList(layers)``);
* inherited: a class of SRC whose ``__init__`` is a base's that encloses a class encloses it too
  (``class MyNet(Net): pass``), at most :data:`MAX_BASES` bases up. The base is the one its own
  ``__init__`` calls (``Base.__init__(self, ...)``), or, where it has none or its own calls
  ``super().__init__(...)``, the first base (resolved as a call is) past mixins of SRC that pass
  ``__init__`` on: ``class MyNet(Mixin, Net)`` runs ``Net.__init__`` where ``Mixin`` has no
  ``__init__`` of its own (or one that calls ``super().__init__(...)``) and no base but
  :data:`PLAIN_BASES` (the method resolution order, :meth:`_Reader._along`). A construction in a
  method ``__init__`` calls is inherited only by a subclass that runs that method too: neither it
  nor a mixin passed on the way defines one of that name (:meth:`Enclosing._runs_method`).
  ``forward`` is inherited the same way (:meth:`Enclosing.forward_heirs`);
* enclosing is transitive (``Net`` builds ``Encoder``, which builds ``Block``), each class met once
  (a cycle of constructions or of bases ends there).

Not read, so not enclosing (the reading is unsure, and a refusal must be sure): a class built in a
method ``__init__`` calls that the class inherits rather than defines, or in a method that method
calls in turn; a class built by a factory function, ``getattr``, a config string or ``partial``; a
class whose own ``__init__`` does not call its base's, or whose enclosing base comes after a base
that is not such a mixin of SRC (a class of an installed library, one with an ``__init__`` of its
own that does not call ``super().__init__``, one with bases of its own); a class nested in another;
a name bound to more than one class.
The files to parse are found by their text first (a call of the class's name, or an import of it
under another name, in the class's own file or one that names its module), so a transformers-sized
SRC parses a handful of files per class, and of each only its imports, its top-level names and its
``__init__``s (with the methods they call) go through LibCST's scope analysis (:func:`_skeleton`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from ..compile_facts import ITERATES_MODULES, KEYED_CONTAINER, TEXT_BYTES
from ..errors import StackpartError
from ..src_names import definition_files, module_stem

_EMPTY = cst.Module([])
#: A class: ``(file relative to SRC, POSIX; class name)``.
ClassRef = tuple[str, str]
#: Container classes whose entries a regional loop can walk (the last part of the called name).
CONTAINERS = ITERATES_MODULES | {KEYED_CONTAINER}
#: At most this many bases up a subclass is read as inheriting the ``__init__`` that builds a class.
MAX_BASES = 8
#: Bases (as written) that put no ``__init__`` or ``forward`` of SRC's in a class's method resolution order.
PLAIN_BASES = {"nn.Module", "torch.nn.Module", "Module", "object"}
#: Methods that add a module to a container attribute or to ``self``.
ADDING = {"append", "extend", "insert", "add_module", "register_module", "update"}


@dataclass(frozen=True)
class Built:
    """One construction: class ``outer``'s ``__init__`` builds an instance of class ``inner``.

    Attributes:
        outer, inner: the two classes (:data:`ClassRef`).
        stmt: the statement that holds it on ``self`` (its line is :meth:`Enclosing.where`'s).
        attr: the attribute of ``self`` that holds it (``blocks``), None where it is not written
            as a name (``self.add_module(name, ...)``).
        container: the class of that attribute where it is a :data:`CONTAINERS` one, else None.
        module: the parsed file of ``outer``.
        via: the method of ``outer`` that ``__init__`` calls on ``self`` and whose body holds
            ``stmt`` (``build`` of ``self.build()``), None where ``__init__`` holds it itself.
    """

    outer: ClassRef
    inner: ClassRef
    stmt: cst.CSTNode
    attr: str | None
    container: str | None
    module: cst.Module
    via: str | None = None


class Enclosing:
    """The enclosing reading of one SRC: each file parsed at most once, and only where its text
    can build a class asked about (:meth:`enclosers`, :meth:`_calling`).

    Args:
        src: SRC; its ``.py`` files (:func:`rewriter.source.python_files`, at most ``limit``, each
            of at most :data:`rewriter.compile_facts.TEXT_BYTES` bytes) are read as bytes once, on
            first use, and searched as bytes; a file is decoded only to be parsed.
        limit: the most files read.
        parsed: SRC's files parsed by another reading of the same SRC (``relative path -> module``),
            used and added to (:meth:`rewriter.rewrite.program_compiles.ProgramCompiles.enclosing`).
    """

    def __init__(self, src: Path, limit: int, parsed: dict[str, cst.Module] | None = None) -> None:
        self.src, self.limit = src, limit
        self._built: dict[str, dict[str, list[Built]]] = {}
        self._bases: dict[str, dict[str, ClassRef]] = {}
        self._forward_bases: dict[str, dict[str, ClassRef]] = {}
        self._mixins: dict[str, dict[str, tuple[ClassRef, ...]]] = {}
        self._enclosers: dict[ClassRef, dict[ClassRef, list[Built]]] = {}
        self._built_by: dict[tuple[ClassRef, ...], set[ClassRef]] = {}  # built_by's answers, by start set
        self._positions: dict[int, Any] = {}
        self._texts: dict[str, bytes] | None = None
        self._naming: dict[str, list[str]] = {}
        self._parsed: dict[str, cst.Module] = {} if parsed is None else parsed  # shared with the caller's reading

    def enclosers(self, cls: ClassRef, parsed: dict[str, cst.Module] | None = None) -> dict[ClassRef, list[Built]]:
        """Every class that encloses ``cls``, each with the chain of constructions from it down to
        ``cls`` (the shortest, outermost first): ``{("model.py", "Net"): [Net builds Encoder,
        Encoder builds Block]}``. ``parsed``: files the caller has parsed already (the rewrite's
        targets), used instead of parsing them again. Raises nothing: a file that cannot be read or
        parsed says nothing."""
        self._parsed.update(parsed or {})
        if cls not in self._enclosers:
            chains: dict[ClassRef, list[Built]] = {cls: []}
            ups: dict[ClassRef, int] = {cls: 0}  # bases up from the class that builds
            frontier = [cls]
            while frontier:
                inner = frontier.pop(0)  # breadth first: the shortest chain to each encloser
                if inner != cls and ups[inner] < MAX_BASES:
                    via = chains[inner][0].via
                    for heir in self._heirs(inner):
                        if heir not in chains and (via is None or self._runs_method(heir, via)):
                            # its __init__ is inner's: it builds what inner builds
                            chains[heir], ups[heir] = chains[inner], ups[inner] + 1
                            frontier.append(heir)
                for rel in self._calling(inner):
                    for built in (b for bs in self._constructions(rel).values() for b in bs):
                        if built.inner == inner and built.outer not in chains:
                            chains[built.outer], ups[built.outer] = [built, *chains[inner]], 0
                            frontier.append(built.outer)
            del chains[cls]
            self._enclosers[cls] = chains
        return self._enclosers[cls]

    def built_by(self, starts: list[ClassRef]) -> set[ClassRef]:
        """Every class an instance of one of ``starts`` builds in its ``__init__``, at any depth:
        the constructions of a class and of the bases whose ``__init__`` it runs (:meth:`base_of`,
        at most :data:`MAX_BASES` up), whatever method of it holds them. A superset of what
        :meth:`enclosers` reads the other way (it leaves out a construction in a method a subclass
        overrides), and cheap where ``starts`` are few: only their files and those of what they
        build are parsed, where :meth:`enclosers` parses every file that builds or subclasses the
        class asked about (on a transformers-sized SRC, a hundred for a decoder layer). A check whose
        enclosing compile can start only at ``starts`` asks this first (:meth:`may_enclose`), once per
        start set for all the plan's classes."""
        key = tuple(sorted(set(starts)))
        if key in self._built_by:
            return self._built_by[key]
        built: set[ClassRef] = set()
        seen: set[ClassRef] = set()
        frontier = list(starts)
        while frontier:
            cls = frontier.pop()
            if cls in seen:
                continue
            seen.add(cls)
            current: ClassRef | None = cls
            for _ in range(MAX_BASES + 1):
                if current is None:
                    break
                inner = [b.inner for b in self._constructions(current[0]).get(current[1], [])]
                built.update(inner)
                frontier += inner
                current = self.base_of(current)
        self._built_by[key] = built
        return built

    def holds(self, cls: ClassRef) -> dict[ClassRef, list[Built]]:
        """Every class an instance of ``cls`` builds and holds, at any depth, each with the chain of
        constructions from ``cls`` down to it (the shortest, outermost first, as :meth:`enclosers`
        gives it the other way): at each step the class's own ``__init__``'s (or a method's it
        calls) and those of the bases whose ``__init__`` it runs (:meth:`base_of`, at most
        :data:`MAX_BASES` up), one in a method a class on the way overrides left out, as
        :meth:`held` reads them. Only ``cls``'s file and those of what it builds are parsed. Raises
        nothing: a file that cannot be read or parsed says nothing."""
        chains: dict[ClassRef, list[Built]] = {cls: []}
        frontier = [cls]
        while frontier:
            outer = frontier.pop(0)  # breadth first: the shortest chain to each class held
            below: list[ClassRef] = []
            current: ClassRef | None = outer
            while current is not None and current not in below and len(below) <= MAX_BASES:
                for b in self._constructions(current[0]).get(current[1], []):
                    if b.inner not in chains and (b.via is None or all(self._runs_method(k, b.via) for k in below)):
                        chains[b.inner] = [*chains[outer], b]
                        frontier.append(b.inner)
                below.append(current)
                current = self.base_of(current)
        del chains[cls]
        return chains

    def may_enclose(self, starts: list[ClassRef], cls: ClassRef) -> bool:
        """Whether an instance of one of ``starts`` may hold one that runs class ``cls``'s
        ``forward`` (``cls``, or a class whose ``forward`` is inherited from it or cannot be read:
        :meth:`forward_owner`) anywhere in :meth:`built_by`. False is sure: no class of ``starts``
        is among :meth:`enclosers` of ``cls`` or of its :meth:`forward_heirs`."""
        return any(r == cls or self.forward_owner(r) in (cls, None) for r in self.built_by(starts))

    def classes_named(self, names: set[str]) -> list[ClassRef]:
        """The top-level classes of SRC named one of ``names`` (by the files' text: ``class Net``), and
        perhaps more (a nested class of that name: none is built by it). A ``class`` line is read
        however Python reads it: after a form feed (a page break before it), on a line a lone ``\\r``
        ends, its name after a line continuation."""
        if not names:
            return []
        pattern = re.compile(rb"(?:^|\r)[ \t\f]*class[\s\\]+(" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b",
                             re.MULTILINE)
        return [(rel, hit.decode()) for rel, data in self.files().items() for hit in dict.fromkeys(pattern.findall(data))]

    def where(self, built: Built) -> str:
        """``file.py:line`` of the statement that holds ``built`` (positions resolved once per file)."""
        return self.at(built.outer[0], built.module, built.stmt)

    def at(self, rel: str, module: cst.Module, node: cst.CSTNode) -> str:
        """``file.py:line`` of ``node`` in ``module`` (file ``rel``), ``file.py`` where it has no
        position; positions resolved once per file."""
        key = id(module)
        if key not in self._positions:
            self._positions[key] = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        pos = self._positions[key].get(node)
        return f"{rel}:{pos.start.line}" if pos is not None else rel

    def module(self, rel: str) -> cst.Module | None:
        """File ``rel`` under SRC parsed (once; the rewrite's own parse where it passed one to
        :meth:`enclosers`), None where it cannot be read or parsed."""
        return self._module(rel)

    def forward_owner(self, cls: ClassRef) -> ClassRef | None:
        """The class of SRC whose body defines the ``forward`` an instance of class ``cls`` runs:
        ``cls`` itself, or the base it inherits ``forward`` from (its first base, or one past mixins
        of SRC that define none, :meth:`_Reader._along`), at most :data:`MAX_BASES` up; None where
        the source does not say it (a base of an installed library, a class that binds
        ``__call__`` only)."""
        seen: list[ClassRef] = []
        current: ClassRef | None = cls
        while current is not None and current not in seen and len(seen) <= MAX_BASES:
            node = self.class_def(current)
            if node is None:
                return None
            if _defines_forward(node):
                return current if defined_method(node, "forward") is not None else None
            seen.append(current)
            self._constructions(current[0])
            current = self._forward_bases.get(current[0], {}).get(current[1])
        return None

    def files(self) -> dict[str, bytes]:
        """``path relative to SRC -> bytes`` of SRC's files (one that cannot be read left out)."""
        if self._texts is None:
            from ..source import python_files, read_bytes

            self._texts = {}
            for seen, path in enumerate(python_files(self.src)):
                if seen >= self.limit:
                    break
                rel = path.relative_to(self.src).as_posix()
                try:
                    self._texts[rel] = read_bytes(path, rel, TEXT_BYTES)[0]
                except (OSError, StackpartError):
                    continue
        return self._texts

    def _calling(self, cls: ClassRef) -> list[str]:
        """The files whose text calls class ``cls``'s name (``Block(``, not ``class Block(``) or
        imports it under another name (``Block as B``), and that are its own file or name its
        module (``blocks`` of ``pkg/blocks.py``, ``pkg`` of ``pkg/__init__.py``): the only ones
        :meth:`resolve` can read as building it (a common name, ``FFN``, is called in many files
        of a large SRC, each building a class of its own)."""
        rel, name = cls
        word = re.escape(name.encode())
        pattern = re.compile(rb"(?<!class )\b" + word + rb"\s*\(|\b" + word + rb"\s+as\s+\w")
        files = self.files()
        return [r for r in dict.fromkeys([rel, *self._naming_module(rel)])
                if r in files and name.encode() in files[r] and pattern.search(files[r])]

    def _naming_module(self, rel: str) -> list[str]:
        """The files whose text names the module of file ``rel`` (``blocks`` of ``pkg/blocks.py``),
        in :meth:`files`' order: one scan of SRC per module, shared by the classes it defines."""
        stem = module_stem(rel)
        if stem not in self._naming:
            raw = stem.encode()
            module = re.compile(rb"\b" + re.escape(raw) + rb"\b")
            self._naming[stem] = [r for r, data in self.files().items() if raw in data and module.search(data)]
        return self._naming[stem]

    def base_of(self, cls: ClassRef) -> ClassRef | None:
        """The base of class ``cls``, a class of SRC, whose ``__init__`` is ``cls``'s (its first,
        or one past mixins that pass ``__init__`` on: :meth:`_Reader._along`; or the one its own calls:
        :func:`_init_runs`); else None."""
        rel, name = cls
        self._constructions(rel)
        return self._bases.get(rel, {}).get(name)

    def held(self, cls: ClassRef, attr: str) -> list[Built]:
        """The constructions an instance of class ``cls`` holds on ``self.<attr>``: its own
        ``__init__``'s (or a method's it calls), else those of the base whose ``__init__`` it runs
        (:meth:`base_of`), at most :data:`MAX_BASES` up; one in a method a class on the way
        overrides (:meth:`_runs_method`) left out. None where the source does not say it."""
        below: list[ClassRef] = []
        current: ClassRef | None = cls
        while current is not None and current not in below and len(below) <= MAX_BASES:
            found = [b for b in self._constructions(current[0]).get(current[1], []) if b.attr == attr]
            found = [b for b in found if b.via is None or all(self._runs_method(k, b.via) for k in below)]
            if found:
                return found
            below.append(current)
            current = self.base_of(current)
        return []

    def _runs_method(self, heir: ClassRef, name: str) -> bool:
        """Whether an instance of ``heir``, which inherits its ``__init__`` from a base, runs that
        base's method ``name`` where the inherited ``__init__`` calls ``self.<name>()``: neither
        ``heir`` nor a mixin passed on the way (:meth:`_Reader._along`) binds ``name`` (an
        override, which the instance runs instead)."""
        for ref in (heir, *self._mixins.get(heir[0], {}).get(heir[1], ())):
            node = self.class_def(ref)
            if node is None or _binds(node, {name}):
                return False
        return True

    def forward_heirs(self, cls: ClassRef) -> list[ClassRef]:
        """The classes of SRC that run class ``cls``'s ``forward``: each whose body defines no
        ``forward`` and whose first base (or first past mixins of SRC that define none,
        :meth:`_Reader._along`) is ``cls`` or such a class (``class BigBlock(Block): pass``), at
        most :data:`MAX_BASES` bases down, each once, nearest first. A ``torch.compile`` decorator
        on ``cls.forward`` is theirs too: Dynamo inlines it where one is built inside a
        whole-model compile (tests/test_compile_of_a_class_an_enclosing_compile_holds.py)."""
        out: list[ClassRef] = []
        frontier = [cls]
        for _ in range(MAX_BASES):
            frontier = [h for base in frontier for h in self._heirs(base, self._forward_bases)
                        if h != cls and h not in out]
            out += list(dict.fromkeys(frontier))
        return out

    def _heirs(self, cls: ClassRef, table: dict[str, dict[str, ClassRef]] | None = None) -> list[ClassRef]:
        """The classes of SRC whose ``__init__`` is class ``cls``'s (:meth:`base_of`; with
        ``table``, those it maps to ``cls``: ``_forward_bases``); only files whose text names
        ``cls`` as a base (or imports it under another name) and are its file or name its module
        are parsed."""
        table = self._bases if table is None else table
        rel, name = cls
        word = re.escape(name.encode())
        pattern = re.compile(rb"^class\s+\w+\s*\([^)]*\b" + word + rb"\b|\b" + word + rb"\s+as\s+\w", re.MULTILINE)
        naming = set(self._naming_module(rel))  # the module scan :meth:`_calling` shares
        out: list[ClassRef] = []
        for r, data in self.files().items():
            if (r == rel or r in naming) and pattern.search(data):
                self._constructions(r)
                out += [(r, sub) for sub, base in table.get(r, {}).items() if base == cls]
        return out

    def _defines(self, rel: str, name: str) -> bool:
        """Whether file ``rel`` under SRC defines class ``name`` at its top level (by its text)."""
        data = self.files().get(rel)
        return data is not None and re.search(rb"^class\s+" + re.escape(name.encode()) + rb"\b", data, re.MULTILINE) is not None

    def _module(self, rel: str) -> cst.Module | None:
        """File ``rel`` under SRC parsed (once), None where it cannot be read or parsed."""
        if rel not in self._parsed:
            from ..source import parse_module, read_file

            try:
                self._parsed[rel] = parse_module(read_file(self.src / rel, rel).text, rel)
            except (OSError, StackpartError):
                return None
        return self._parsed[rel]

    def class_def(self, cls: ClassRef) -> cst.ClassDef | None:
        """The top-level definition of class ``cls`` (the last of that name), None where its file
        cannot be parsed or does not define it."""
        module = self._module(cls[0]) if self._defines(*cls) else None
        defs = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == cls[1]] if module else []
        return defs[-1] if defs else None

    def _constructions(self, rel: str) -> dict[str, list[Built]]:
        """``{class name: what its __init__ builds and holds}`` for the top-level classes of ``rel``."""
        if rel not in self._built:
            self._built[rel], self._bases[rel], self._forward_bases[rel], self._mixins[rel] = {}, {}, {}, {}
            module = self._module(rel)
            if module is None:
                return self._built[rel]
            classes = [stmt for stmt in module.body if isinstance(stmt, cst.ClassDef)]
            inits = {stmt.name.value: [init, *init_methods(stmt, init)]
                     for stmt in classes for init in own_init(stmt)}
            heirs = {stmt.name.value: how for stmt in classes if _bases(stmt) and (how := _init_runs(stmt)) is not False}
            runs = {stmt.name.value for stmt in classes if _bases(stmt) and not _defines_forward(stmt)}
            if inits or heirs or runs:
                reader = _Reader(self, rel, module, inits, heirs, runs)
                MetadataWrapper(_skeleton(module, inits), unsafe_skip_copy=True).visit(reader)
                self._built[rel] = reader.found
                self._bases[rel], self._forward_bases[rel] = reader.bases, reader.forward_bases
                self._mixins[rel] = reader.mixins
        return self._built[rel]

    def resolve(self, rel: str, names: set[Any]) -> ClassRef | None:
        """The one top-level class of a file under SRC that the qualified names ``names`` (of a
        called name in ``rel``) stand for, else None (:func:`rewriter.src_names.definition_files`)."""
        found: set[ClassRef] = set()
        for q in names:
            where = definition_files(q, rel)
            if where is None:
                return None  # ``import Block``: a module, not a class; a name bound in a function
            files, name = where
            hit = next(((f, name) for f in files if self._defines(f, name)), None)
            if hit is None:
                return None
            found.add(hit)
        return found.pop() if len(found) == 1 else None


def _skeleton(module: cst.Module, inits: dict[str, list[cst.FunctionDef]]) -> cst.Module:
    """``module`` with what binds its names and the methods of ``inits`` (each class's ``__init__``
    and the methods it calls, :func:`init_methods`: the same nodes), and the bodies of its other
    functions and classes left out: what the qualified names of the calls in those methods depend on, at a fraction of the scope analysis of the whole file (a
    modeling file's methods are most of it)."""
    stub = cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])])
    body: list[cst.BaseStatement] = []
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value in inits and isinstance(stmt.body, cst.IndentedBlock):
            body.append(stmt.with_changes(body=stmt.body.with_changes(body=inits[stmt.name.value])))
        elif isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            body.append(stmt.with_changes(body=stub))  # binds its name; its body is not read
        else:
            body.append(stmt)
    return module.with_changes(body=body)


def own_init(cls: cst.ClassDef) -> list[cst.FunctionDef]:
    """``cls``'s own ``__init__`` (the last one its body defines), or none."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    inits = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
    return inits[-1:]


def self_calls(init: cst.FunctionDef) -> list[str]:
    """The names of the methods ``init`` calls on ``self`` where it runs (``self.build(2)``: not in a
    nested ``def`` or ``lambda``, :func:`calls_run`), each once, sorted; ``__init__`` left out."""
    called = {call.func.attr.value for call in calls_run(init.body)  # type: ignore[attr-defined]
              if m.matches(call.func, m.Attribute(value=m.Name("self"), attr=m.Name()))}
    return sorted(called - {"__init__"})


def defined_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The method ``name`` that ``cls``'s own body defines (the last ``def`` of it), else None."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    defs = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return defs[-1] if defs else None


def init_methods(cls: cst.ClassDef, init: cst.FunctionDef) -> list[cst.FunctionDef]:
    """The methods of ``cls``'s own body that its ``__init__`` ``init`` calls on ``self``
    (:func:`self_calls`): what an instance of ``cls`` runs one call deep into its ``__init__``
    (a subclass's override is the subclass's: :meth:`Enclosing._runs_method`)."""
    return [d for name in self_calls(init) if (d := defined_method(cls, name)) is not None]


def _binds(cls: cst.ClassDef, names: set[str]) -> bool:
    """Whether ``cls``'s body binds one of ``names`` (a method, or an assignment ``forward = ...``;
    one nested in a method counts too: the reading stays sure)."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return any(not isinstance(stmt, cst.ClassDef) and _statement_binds(stmt, names) for stmt in body)


#: The nodes under a statement that can hold a ``def`` or an assignment statement: its suites and
#: clauses (an expression holds neither, so none is entered).
_STATEMENT_PARTS = (cst.BaseSuite, cst.BaseStatement, cst.If, cst.Else, cst.Finally, cst.ExceptHandler,
                    cst.ExceptStarHandler, cst.MatchCase)


def _statement_binds(stmt: cst.CSTNode, names: set[str]) -> bool:
    """Whether ``stmt``, or a statement nested in it at any depth, is a ``def`` of one of ``names``
    or assigns one as a plain name (``forward = ...``, ``forward: T = ...``). A walk over the
    statements only: a class body's expressions, most of its nodes, are not visited (a matcher
    search over every node cost most of a rewrite's time on a transformers-sized SRC)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FunctionDef) and node.name.value in names:
            return True
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in node.body:
                targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                           else [small.target] if isinstance(small, cst.AnnAssign) else [])
                if any(isinstance(t, cst.Name) and t.value in names for t in targets):
                    return True
            continue
        stack.extend(c for c in node.children if isinstance(c, _STATEMENT_PARTS))
    return False


def _defines_forward(cls: cst.ClassDef) -> bool:
    """Whether ``cls``'s body binds ``forward`` or ``__call__`` (:func:`_binds`)."""
    return _binds(cls, {"forward", "__call__"})


def _bases(cls: cst.ClassDef) -> list[cst.BaseExpression]:
    """The bases ``cls`` names, in order (keywords such as ``metaclass=`` and ``*bases`` are none)."""
    return [a.value for a in cls.bases if a.keyword is None and not a.star]


def _init_runs(cls: cst.ClassDef) -> bool | int:
    """How ``cls``'s ``__init__`` runs a base's: True where it is found along the bases (none of its
    own, or its own calls ``super().__init__(...)``, ``super(MyNet, self)`` too), the index in
    :func:`_bases` of the base its own calls by name (``Net.__init__(self, ...)``), else False.
    Calls count where they run (not in a nested ``def`` or ``lambda``)."""
    own = own_init(cls)
    if not own:
        return True
    init = m.Name("__init__")
    calls = calls_run(own[0].body)
    if any(m.matches(call.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=init)) for call in calls):
        return True
    for call in calls:
        if m.matches(call.func, m.Attribute(attr=init)):
            named = [i for i, base in enumerate(_bases(cls)) if call.func.value.deep_equals(base)]  # type: ignore[attr-defined]
            if named:
                return named[0]
    return False


def _passes_init_on(cls: cst.ClassDef) -> bool:
    """Whether a mixin ``cls`` before a base lets that base's ``__init__`` run (:meth:`_Reader._along`)."""
    return _init_runs(cls) is True


def _passes_forward_on(cls: cst.ClassDef) -> bool:
    """Whether a mixin ``cls`` before a base lets that base's ``forward`` run (:meth:`_Reader._along`)."""
    return not _defines_forward(cls)


def _plain_bases(cls: cst.ClassDef) -> bool:
    """Whether every base of ``cls`` is one of :data:`PLAIN_BASES` (or it names none)."""
    return all(_EMPTY.code_for_node(base) in PLAIN_BASES for base in _bases(cls)) and not any(a.star for a in cls.bases)


def _self_attr(node: cst.BaseExpression) -> str | None:
    """``x`` of ``self.x`` or ``self.x[...]``, else None."""
    if isinstance(node, cst.Subscript):
        node = node.value
    if isinstance(node, cst.Attribute) and m.matches(node.value, m.Name("self")):
        return node.attr.value
    return None


def _container(value: cst.BaseExpression | None) -> str | None:
    """The :data:`CONTAINERS` class ``value`` calls (``nn.ModuleList(...)``), else None."""
    if isinstance(value, cst.Call):
        name = get_full_name_for_node(value.func) or ""
        last = name.rsplit(".", 1)[-1]
        return last if last in CONTAINERS else None
    return None


def calls_run(node: cst.CSTNode) -> list[cst.Call]:
    """The calls in ``node`` that run when it does: not those in a ``lambda`` or a nested ``def``."""
    out: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Lambda(self, _: cst.Lambda) -> bool:
            return False

        def visit_FunctionDef(self, _: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, _: cst.ClassDef) -> bool:
            return False

        def visit_Call(self, call: cst.Call) -> None:
            out.append(call)

    node.visit(_Calls())
    return out


class _Reader(cst.CSTVisitor):
    """Reads the constructions of each class ``__init__`` of one file (:meth:`Enclosing._constructions`)."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self, reading: Enclosing, rel: str, module: cst.Module, inits: dict[str, list[cst.FunctionDef]],
                 heirs: dict[str, bool | int], runs: set[str]) -> None:
        super().__init__()
        self.reading, self.rel, self.module, self.heirs, self.runs = reading, rel, module, heirs, runs
        self.owner = {id(read[0]): name for name, read in inits.items()}
        self.inits = inits
        self.found: dict[str, list[Built]] = {}
        self.bases: dict[str, ClassRef] = {}  # class of ``heirs`` -> the base whose __init__ it runs
        self.forward_bases: dict[str, ClassRef] = {}  # class of ``runs`` -> the base whose forward it runs
        self.mixins: dict[str, tuple[ClassRef, ...]] = {}  # class of ``bases`` -> the mixins passed on the way

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        name, bases = node.name.value, _bases(node)
        how = self.heirs.get(name, False)
        ref, mixins = self._along(bases, _passes_init_on) if how is True else (
            (self._resolved(bases[how]), ()) if how is not False and how < len(bases) else (None, ()))
        if ref is not None:
            self.bases[name], self.mixins[name] = ref, mixins
        ref = self._along(bases, _passes_forward_on)[0] if name in self.runs else None
        if ref is not None:
            self.forward_bases[name] = ref
        return True

    def _resolved(self, base: cst.BaseExpression) -> ClassRef | None:
        """The class of SRC the base expression ``base`` names (:meth:`Enclosing.resolve`), else None."""
        try:
            names = self.get_metadata(QualifiedNameProvider, base, set())
        except KeyError:
            return None
        return self.reading.resolve(self.rel, names) if names else None

    def _along(self, bases: list[cst.BaseExpression], passes: Any) -> tuple[ClassRef | None, tuple[ClassRef, ...]]:
        """``(the class of SRC whose method a class with ``bases`` runs, the mixins passed before
        it)``, found along them in order (the method resolution order as far as the source says
        it): the first base, or the one after mixins of SRC that ``passes`` lets the method past and
        that have only :data:`PLAIN_BASES` (``class MyNet(Mixin, Net)``, ``Mixin`` without an
        ``__init__`` of its own: ``Net``'s); None where a base before it is not read (a class of an
        installed library)."""
        passed: list[ClassRef] = []
        for i, base in enumerate(bases):
            ref = self._resolved(base)
            if ref is None:
                return None, ()
            mixin = self.reading.class_def(ref) if i < len(bases) - 1 else None
            if mixin is None or not passes(mixin) or not _plain_bases(mixin):
                return ref, tuple(passed)
            passed.append(ref)
        return None, ()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        name = self.owner.get(id(node))
        if name is not None:
            self._read_init(name, node, self.inits[name][1:])
        return False  # nothing else is read here: the methods __init__ calls are read with it

    def _classes(self, stmt: cst.CSTNode) -> list[ClassRef]:
        """The classes of SRC ``stmt`` builds (its calls that resolve to one, :meth:`Enclosing.resolve`)."""
        out = []
        for call in calls_run(stmt):
            try:
                names = self.get_metadata(QualifiedNameProvider, call.func, set())
            except KeyError:
                continue
            ref = self.reading.resolve(self.rel, names) if names else None
            if ref is not None:
                out.append(ref)
        return out

    def _read_init(self, name: str, init: cst.FunctionDef, methods: list[cst.FunctionDef]) -> None:
        """The constructions of class ``name``'s ``__init__`` and of the ``methods`` it calls on
        ``self`` (:func:`init_methods`): held on ``self`` directly, or through a local name (of the
        same function) a value set on ``self`` names."""
        outer = (self.rel, name)
        held: list[tuple[cst.CSTNode, str | None, cst.BaseExpression | None, list[ClassRef], str | None]] = []
        kinds: dict[str, str] = {}
        for func, via in [(init, None), *((meth, meth.name.value) for meth in methods)]:
            self._read_body(func, via, held, kinds)
        built: list[Built] = []
        for stmt, attr, value, refs, via in held:
            for ref in dict.fromkeys(refs):
                built.append(Built(outer, ref, stmt, attr, kinds.get(attr) if attr else None, self.module, via))
        self.found[name] = built

    def _read_body(self, func: cst.FunctionDef, via: str | None, held: list[Any], kinds: dict[str, str]) -> None:
        """Add to ``held`` what ``func``'s body (``via``: its name, None for ``__init__``) holds on
        ``self`` (``(statement, attribute, value, classes built, via)``), and to ``kinds`` the
        container class of each attribute it sets to one."""
        local: dict[str, list[ClassRef]] = {}
        mine: list[tuple[cst.CSTNode, str | None, cst.BaseExpression | None, list[ClassRef]]] = []
        for line in _lines(func.body):
            for small in line.body:
                targets: list[cst.BaseExpression] = []
                value: cst.BaseExpression | None = None
                if isinstance(small, cst.Assign):
                    targets, value = [t.target for t in small.targets], small.value
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    targets, value = [small.target], small.value
                elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
                        and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value in ADDING:
                    targets, value = [small.value.func.value], small.value
                if value is None:
                    continue
                for target in targets:
                    attr = _self_attr(target)
                    if attr is not None and _container(value) is not None:
                        kinds.setdefault(attr, _container(value))  # type: ignore[arg-type]
                    if m.matches(target, m.Name("self")):  # self.add_module("name", Block())
                        key = value.args[0].value if isinstance(value, cst.Call) and value.args else None
                        mine.append((small, key.evaluated_value if isinstance(key, cst.SimpleString) else None,  # type: ignore[arg-type]
                                     None, self._classes(value)))
                    elif attr is not None:
                        mine.append((small, attr, value, self._classes(value)))
                    elif isinstance(target, cst.Name):
                        local.setdefault(target.value, []).extend(self._classes(value))
        for stmt, attr, value, refs in mine:
            named = {n.value for n in m.findall(value, m.Name())} if value is not None else set()
            held.append((stmt, attr, value, refs + [r for n in named & set(local) for r in local[n]], via))


def _lines(block: cst.BaseSuite) -> list[cst.SimpleStatementLine | cst.SimpleStatementSuite]:
    """The simple statement lines of a function body, those in ``if``/``for``/``while``/``with``/
    ``try`` blocks included (a nested ``def`` or ``class`` is not run by it)."""
    out: list[cst.SimpleStatementLine | cst.SimpleStatementSuite] = []

    class _Lines(cst.CSTVisitor):
        def visit_FunctionDef(self, _: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, _: cst.ClassDef) -> bool:
            return False

        def visit_SimpleStatementLine(self, line: cst.SimpleStatementLine) -> bool:
            out.append(line)
            return False

        def visit_SimpleStatementSuite(self, line: cst.SimpleStatementSuite) -> bool:
            out.append(line)  # def __init__(self): self.block = Block()
            return False

    block.visit(_Lines())
    return out
