"""A plan's ``compile`` of ``Block`` where the source compiles an enclosing class's method with a
decorator: ``@torch.compile`` (or ``@torch._dynamo.optimize(...)``) on ``GPT.forward`` and
``GPT.__init__`` builds the ``Block``s (:mod:`.enclosing`). The decorated ``forward`` runs the
blocks inside its compiled frame, where Dynamo traces ``Block.forward`` and inlines it: the plan's
decorator gets no graph of its own and its options are never used (pinned with
``torch._dynamo.testing.CompileCounter`` in tests/test_compile_of_a_class_an_enclosing_compile_holds.py).
It is the decorator form of :func:`.regional_path.check_compiled_whole`'s whole-model call
(``torch.compile(Net())``, ``model.compile()``), refused the same way.

What counts as the enclosing compile, read statically (a refusal must be sure):

* a compile decorator on the ``forward`` an enclosing class runs (its own, or one it inherits from a
  base of SRC: :meth:`.enclosing.Enclosing.forward_owner`), where the plan's workload runs
  ``forward`` (:func:`.regional_path.runs_compiled_forward`); or on the method of the enclosing
  class that ``harness.call`` names (``generate``), in its own body;
* not a decorator that passes ``disable=True`` (``torch.compile`` then returns the function as it
  was: :func:`rewriter.compile_facts.turned_off`), read after the plan: an ``own_call`` of the
  decorated method with ``disable: true`` turns it off, ``disable: false`` back on.
"""

from __future__ import annotations

import re
from typing import Any

import libcst as cst

from ..actions.base import find_decorator, imported_names
from ..actions.compile import COMPILE_DECORATORS
from ..compile_facts import turned_off, word_matches
from ..plan import CompileAction, LoadedPlan
from .enclosing import ClassRef, defined_method
from .regional_path import builds, runs_compiled_forward

#: A compile decorator as written (``@torch.compile``, ``@compile(``, ``@torch._dynamo.optimize(``;
#: a form feed, a page break, is white space to Python there too): SRC's files are parsed for
#: enclosing classes only where one writes such a line (a decorator spelled through an alias,
#: ``@tc`` of ``from torch import compile as tc``, is read only then).
_DECORATOR = re.compile(rb"^[ \t\f]*@[\w. \t\f]*\b(?:compile|optimize)\b", re.MULTILINE)
#: Where SRC writes a compile decorator (:data:`_DECORATOR`), what else a file may spell one with
#: that :func:`~rewriter.actions.base.find_decorator` reads: an import that binds a compile function
#: to another name (``from torch import compile as tc``, ``@tc``), or a decorator that is no plain
#: dotted name on its line (``@(torch.compile)``, a line continuation), in a file that names one.
#: ``compile`` then ``as`` past white space and line continuations, or a comment on its line (inside
#: an import's brackets ``as`` may follow on the next line:
#: :data:`rewriter.rewrite.program_compiles._COMPILE_AT`).
_ALIAS = (re.compile(rb"compile(?:[ \t\f]*#|[\s\\]+as\b)"),
          re.compile(rb"optimize(?:[ \t\f]*#|[\s\\]+as\b)"))  # the literal first: :func:`_aliased`
_ODD = re.compile(rb"^[ \t\f]*@(?![ \t]*\w+(?:[ \t]*\.[ \t]*\w+)*[ \t]*(?:[(#\r\n]|$))", re.MULTILINE)
_WORD = re.compile(rb"\b(?:compile|optimize)\b")


def _aliased(data: bytes) -> bool:
    """Whether ``data`` binds ``compile`` or ``optimize`` to another name (:data:`_ALIAS` where the
    word starts, :func:`rewriter.compile_facts.word_matches`: not ``recompile as``)."""
    return any(next(word_matches(p, data), None) is not None for p in _ALIAS)


def _plain(data: bytes) -> bool:
    """Whether a file's bytes write a plain compile decorator (:data:`_DECORATOR`), scanned only
    where they hold the word ``compile`` or ``optimize``."""
    return (b"compile" in data or b"optimize" in data) and _DECORATOR.search(data) is not None


def writes_decorator(enclosing: Any) -> bool:
    """Whether any file of SRC (:meth:`.enclosing.Enclosing.files`) writes a plain compile decorator
    (:data:`_DECORATOR`): where none does, :func:`_decorated` finds none, and no source decorator is
    read beyond the plan's own files."""
    return any(_plain(data) for data in enclosing.files().values())


def _may_spell(data: bytes) -> bool:
    """Whether a file's bytes may spell a compile decorator :func:`~rewriter.actions.base.find_decorator`
    reads (:data:`_DECORATOR`, :data:`_ALIAS`, :data:`_ODD` with :data:`_WORD`); each needs the word
    ``compile`` or ``optimize``, so a file without either is not scanned further."""
    if b"compile" not in data and b"optimize" not in data:
        return False
    return bool(_DECORATOR.search(data) or _aliased(data) or (_WORD.search(data) and _ODD.search(data)))


def check(loaded: LoadedPlan, bounds: list[Any], reading: Any) -> None:
    """Refuse a ``compile`` the plan adds (not ``own_call``, not ``strategy: nested``, not a library
    target) of a class's ``forward`` (``model.py::Block``, ``model.py::Block.forward``) that an
    enclosing class runs inside a method the source compiles with a decorator (the module
    docstring says which). ``bounds``: the plan's resolved file targets
    (:class:`rewriter.consistency.Bound`); ``reading``: SRC's reading
    (:class:`.program_compiles.ProgramCompiles`), None to check nothing (no SRC read).

    Raises:
        StackpartError: at the added compile's plan line, naming the decorator (``file:line`` and
            its code), which class builds which (``file:line``), and the ways through: drop the
            action, or keep it and turn the decorator off (an ``own_call: {disable: true}`` edit
            of the decorated method), or make it a ``strategy: nested`` hint.
    """
    if reading is None:
        return
    adds = [b for b in bounds if isinstance(b.action, CompileAction) and b.action.own_call is None
            and b.action.strategy != "nested" and not b.action.library
            and b.target.qualname.endswith(".forward") and b.target.qualname.count(".") == 1]
    if not adds:
        return
    harness = loaded.plan.harness
    entry = None if runs_compiled_forward(loaded) else harness.call  # type: ignore[union-attr]
    own_off = {(b.target.relpath, b.target.qualname): b.action.own_call.disable for b in bounds
               if isinstance(b.action, CompileAction) and b.action.own_call is not None
               and b.action.own_call.disable is not None}
    # the plan's own compiles of a method: its decorator there (written by an earlier apply of this
    # plan) is the plan's, not the source's; refused there, a plan applied once would refuse itself
    planned = {(b.target.relpath, b.target.qualname) for b in adds}
    decorated = _decorated(reading, entry, own_off, planned)
    if not decorated:
        return  # no class of SRC compiles the method with a decorator: no encloser read
    enclosing = reading.enclosing()
    # read down from the decorated classes only where they are few: each one's subclasses and what
    # it builds are parsed, and a tree an applied plan decorated throughout holds dozens
    downward = len(decorated) <= MAX_DOWNWARD
    starts = [] if not downward else decorated if entry is not None else [
        h for d in decorated for h in (d, *enclosing.forward_heirs(d))]
    parsed = {b.target.relpath: b.module for b in adds}
    for c in adds:
        cls = (c.target.relpath, c.target.qualname.split(".")[0])
        if downward and not enclosing.may_enclose(starts, cls):
            continue  # no decorated class builds it: the upward reading is not needed
        for runs in [cls, *reading.forward_heirs(cls)]:  # a subclass that inherits the decorated forward
            for outer, chain in reading.enclosers(runs, parsed).items():
                found = _compiled_method(reading, outer, entry, own_off, planned)
                if found is not None:
                    _refuse(loaded, reading, c, outer, chain, *found)


#: At most this many decorated classes are read downward first (:meth:`.enclosing.Enclosing.may_enclose`);
#: with more, the plan's class is read upward at once, as before that gate (a plan applied over 22
#: of transformers' modeling files left 80 decorated forwards, and reading down from each of them
#: cost more than the upward reading of the plan's few classes).
MAX_DOWNWARD = 8


def _decorated(reading: Any, entry: str | None, own_off: dict[tuple[str, str], bool],
               planned: set[tuple[str, str]]) -> list[ClassRef]:
    """The top-level classes of SRC that define the method the workload runs (``forward``, or
    ``entry``) with a compile decorator on (:func:`decorator_on`): none where no file writes a
    compile decorator (:data:`_DECORATOR`), else read in those files and in those that may spell
    one otherwise (:data:`_ALIAS`, :data:`_ODD`). Asked before the reading of which classes enclose the
    plan's (:meth:`.enclosing.Enclosing.enclosers`, the parse of every file that builds or
    subclasses it), which runs only where one of them may build it
    (:meth:`.enclosing.Enclosing.may_enclose`)."""
    enclosing = reading.enclosing()
    files = enclosing.files()
    plain = {rel for rel, data in files.items() if _plain(data)}
    if not plain:
        return []
    out: list[ClassRef] = []
    for rel, data in files.items():  # a plain decorator's file is not scanned again
        module = enclosing.module(rel) if rel in plain or _may_spell(data) else None
        for node in module.body if module is not None else ():
            if isinstance(node, cst.ClassDef) and decorator_on((rel, node.name.value), node, module,
                                                                entry or "forward", own_off, planned):
                out.append((rel, node.name.value))
    return out


def decorator_on(owner: ClassRef, node: cst.ClassDef, module: cst.Module, name: str,
                  own_off: dict[tuple[str, str], bool], planned: set[tuple[str, str]]) -> cst.Decorator | None:
    """The compile decorator on method ``name`` of class ``owner`` (``node``, in ``module``) that is
    on once the plan is applied, else None: not the plan's own (``planned``), not ``disable=True``
    (the source's, or the plan's ``own_call`` in ``own_off``)."""
    if (owner[0], f"{owner[1]}.{name}") in planned:
        return None
    method = defined_method(node, name)
    dec = find_decorator(method, COMPILE_DECORATORS, imported_names(module)) if method is not None else None
    if dec is None:
        return None
    call = dec.decorator if isinstance(dec.decorator, cst.Call) else None
    if own_off.get((owner[0], f"{owner[1]}.{name}"), turned_off(call)):
        return None  # disable=True, the source's or the plan's: it compiles nothing
    return dec


def _compiled_method(reading: Any, outer: ClassRef, entry: str | None, own_off: dict[tuple[str, str], bool],
                     planned: set[tuple[str, str]]) -> tuple[ClassRef, str, cst.Decorator, cst.Module] | None:
    """``(the class whose body defines it, method name, its compile decorator, that class's file
    parsed)`` for the method of class ``outer`` the workload runs that the source compiles with a
    decorator on (``forward``, or ``entry``, the method ``harness.call`` names), else None.
    ``own_off``: ``(file, qualname) -> own_call.disable`` of the plan's edits of the program's
    compiles; ``planned``: ``(file, qualname)`` of the methods the plan itself compiles, whose
    decorator is the plan's own (an earlier apply wrote it), not the source's."""
    enclosing = reading.enclosing()
    owner = enclosing.forward_owner(outer) if entry is None else outer
    node = enclosing.class_def(owner) if owner is not None else None
    module = enclosing.module(owner[0]) if owner is not None else None
    if node is None or module is None:
        return None
    name = entry or "forward"
    dec = decorator_on(owner, node, module, name, own_off, planned)  # type: ignore[arg-type]
    return (owner, name, dec, module) if dec is not None else None  # type: ignore[return-value]


def _refuse(loaded: LoadedPlan, reading: Any, c: Any, outer: ClassRef, chain: list[Any], owner: ClassRef,
            name: str, dec: cst.Decorator, module: cst.Module) -> None:
    """Refuse the plan's compile ``c`` of the innermost class of ``chain``, which class ``outer``
    encloses and runs inside its method ``name``, compiled by the decorator ``dec`` in class
    ``owner``'s body (``outer`` or the base it inherits ``forward`` from; ``module`` its file).

    Raises:
        StackpartError: always, at ``c``'s plan line.
    """
    inner = chain[-1].inner[1]
    compiled = c.target.qualname.split(".")[0]
    heir = "" if compiled == inner else f", a subclass of {compiled} that inherits its forward"
    method = f"{owner[1]}.{name}"
    where = reading.enclosing().at(owner[0], module, dec)
    code = " ".join(cst.Module([]).code_for_node(dec.decorator).split())[:120]
    inherits = "" if owner == outer else f" (which {outer[1]} inherits)"
    target = f"action compile, target {owner[0]}::{method}"
    raise loaded.error(
        c.index,
        f"compile of {compiled}: the source compiles {method}{inherits} with a decorator at {where}: @{code}, and "
        f"{outer[1]} encloses {inner}{heir}: {builds(reading, chain, outer[1])}; Dynamo traces {compiled}.forward "
        f"inside that compiled {method} and inlines it, so this compile and its options would never be used",
        hint=f"drop this action (the decorator's compile covers {inner}), keep this action and turn that decorator "
             f"off ({target}, own_call: {{disable: true}}), or make this action a hint to that compile "
             "(strategy: nested, beside a strategy: whole action of the plan)",
    )
