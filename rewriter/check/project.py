"""Project-level reachability: which functions a ``torch.compile`` anywhere in the project traces.

A project is laid out in files: the model under ``models/``, ``torch.compile(model)`` in
``train.py``. Per file, :mod:`.facts` sees only the compiles of that file. This module reads the
whole project for *facts only* and tells each checked file which of its functions are compiled
from elsewhere (:class:`FileView`), so the rules report ``.item()`` in ``models/layers.py`` when
``train.py`` compiles the model that holds the layer.

This module is the project index: it resolves names across files and computes the reach. The
files are read elsewhere: :mod:`.file_summary` summarizes one file with ``ast``,
:mod:`.project_files` walks the root and caches those summaries, and :mod:`.project_reading`
decides, for one ``check`` run, which projects are read and which files not given are checked too.

**What counts as reached** (the static image of what Dynamo traces; torch.compile docs,
"Compiling modules": a module's ``__call__`` runs its ``forward``, and Dynamo inlines the
submodules it calls):

* ``torch.compile(X)``, ``X.compile()``, ``torch.compile(**kw)(X)``: for an instance ``X`` of a
  project class (``Cls(...)``, ``Cls.from_pretrained(...)``, ``Cls(...).to(dev)``, a name or
  ``self.attr`` bound to one, ``self`` in a method), the class's ``forward`` (its own or a
  project base class's); for a function (``f``, ``Cls.f``, ``self.f``), that function;
* the blocks of a compiled model: the ``forward`` of every submodule its ``__init__`` builds
  (``self.x = Sub(...)``, ``self.h = nn.ModuleList([Block(...) for ...])``, also inside an
  ``nn.ModuleDict``), transitively, and of a decorated ``@torch.compile`` ``forward``'s class;
* ``torch.compile(model.forward)`` as ``torch.compile(model)``; ``torch.compile(model.step)``
  that method of the model's class;
* regional compiles: ``for block in model.h: block.compile()`` reaches the block class of
  ``model``'s ``h`` container.

Every submodule built in ``__init__`` counts, whether or not ``forward`` calls it (an
over-approximation: a submodule used only outside ``forward`` is taken as traced too).

A class or ``def`` defined inside a function is no project name: compiled in that function, it
is the file's own facts that reach it (:meth:`.facts.FileFacts.local_definitions`), and the
summary records no site for it, so a top-level or imported one of the same name is not reached
in its place.

A function under ``@torch.compiler.disable`` is never reached. Calls from reached code into
helper functions are followed (Dynamo inlines them), :data:`HELPER_DEPTH` calls deep: within a
file by :mod:`.facts` (a ``def`` of that file, ``self.method``), and into a top-level function
imported from another project file here (the summary's ``calls``: the imported names each
function calls).

**Names** are resolved through the project's own imports: ``from .layers import Block``,
``from models.layers import Block``, ``import models.layers as L; L.Block``, a re-export through
a package's ``__init__.py`` (three hops at most). A module path maps to a file under the project
root (``a/b.py`` or ``a/b/__init__.py``; a ``src/`` layout too); one that names no such file is
looked for beside the importing file (``from model import GPT`` in ``src/train.py`` is
``src/model.py``: a script's folder is the first entry of ``sys.path`` when it runs, as
``python train.py`` from ``src/`` does); in a folder that is no package (no ``__init__.py``: a
script's) the file beside comes first, before a module of that name elsewhere in the project. Names outside the project (torch, transformers installed
in site-packages) are not followed.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .file_summary import summarize
from .project_files import ProjectFiles

#: Re-export hops followed when a name is imported from a package's ``__init__``.
MAX_HOPS = 3
#: Calls followed from reached code into imported project functions (as :data:`.facts.HELPER_DEPTH`).
HELPER_DEPTH = 3


@dataclass(frozen=True)
class Mark:
    """A compile that reaches a function of the checked file from outside that function.

    Attributes:
        origin: where the ``torch.compile`` is, as printed (``train.py:12``; ``line 12`` in the
            same file).
        fullgraph, mode: the compile's literal options (None when absent or not literal).
        whole_model: reached through a compiled model (its ``forward`` or a block of it).
        files: absolute paths of the files the reach went through (the compile's file, the
            model's, the block's): a finding it causes is reported when one of them is given.
    """

    origin: str
    fullgraph: bool | None = None
    mode: str | None = None
    whole_model: bool = False
    files: frozenset[str] = frozenset()
    #: for a function reached through calls from compiled code in another file, the call chain
    #: as printed (``helper `clip` called from `Block.forward` in model.py``); else None.
    via: str | None = None


@dataclass
class FileView:
    """What the facts of one checked file take from the project (picklable, for worker processes).

    Attributes:
        marks: ``"Cls.forward"`` / ``"func"`` of this file -> how it is reached.
        repeats: qualified class name (as this file's LibCST names it) -> ``(attr, block,
            container, files)`` when that project class repeats a block.
        blocks: qualified class names that are a repeated block of some project class read.
        report_only: for a file that was not given (checked because a given file's compile
            reaches it, or it compiles a given file's model), the absolute paths of the given
            files: only findings caused through one of them are reported. None for a given file.
    """

    marks: dict[str, Mark] = field(default_factory=dict)
    repeats: dict[str, tuple[str, str, str, tuple[str, ...]]] = field(default_factory=dict)
    blocks: set[str] = field(default_factory=set)
    report_only: frozenset[str] | None = None

    def top_names(self) -> set[str]:
        """Top-level definitions holding a reached function (what the reduction must keep)."""
        return {q.split(".", 1)[0] for q in self.marks}


def display_path(abspath: str) -> str:
    """``abspath`` as printed: relative to the working directory, or absolute when outside it."""
    rel = os.path.relpath(abspath)
    return (abspath if rel.startswith("..") else rel).replace(os.sep, "/")


class Project(ProjectFiles):
    """The files of one project root (:class:`ProjectFiles`), name resolution across them and the
    reach of their compiles."""

    def __init__(self, root: str, files: dict[str, str] | None = None, use_cache: bool = True,
                 keep: frozenset[str] = frozenset()) -> None:
        """As :class:`ProjectFiles`; the project's modules are mapped to their files here."""
        super().__init__(root, files, use_cache, keep)
        self.modules = self._module_map()
        self._resolved: dict[tuple[str, str, int], tuple[str, str] | None] = {}
        self._repeats: dict[tuple[str, str], tuple | None] = {}

    # names ------------------------------------------------------------------------------------
    def _module_map(self) -> dict[str, str]:
        modules: dict[str, str] = {}
        for rel in self.files:
            parts = rel[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                modules.setdefault(".".join(parts), rel)
                if parts[0] == "src" and len(parts) > 1:
                    modules.setdefault(".".join(parts[1:]), rel)
        return modules

    def _module_of(self, qualified: str, rel: str) -> tuple[str, str] | None:
        """``(file, rest)``: the project module a qualified name starts with and the rest."""
        if qualified.startswith("."):
            level = len(qualified) - len(qualified.lstrip("."))
            package = rel.split("/")[:-1]
            if level > 1:
                package = package[: len(package) - (level - 1)] if level - 1 <= len(package) else None
            if package is None:
                return None
            names = qualified[level:].split(".") if qualified[level:] else []
            parts = [*package]
            for i in range(len(names), -1, -1):
                base = "/".join([*parts, *names[:i]])
                for cand in (f"{base}.py", f"{base}/__init__.py" if base else "__init__.py"):
                    if cand in self.files:
                        return cand, ".".join(names[i:])
            return None
        names = qualified.split(".")
        # `from model import GPT` in `src/train.py`, run as `python train.py` from `src/`: the
        # script's folder is sys.path[0], so a flat import names a file beside the importer, before
        # any module of that name elsewhere in the project; a folder that is a package (its
        # `__init__.py`) runs no script, so there the project's modules come first
        folder = rel.split("/")[:-1]
        script_folder = bool(folder) and "/".join([*folder, "__init__.py"]) not in self.files
        for beside in ((True, False) if script_folder else (False, True)):
            found = self._beside(names, folder) if beside else self._module(names)
            if found is not None:
                return found
        return None

    def _module(self, names: list[str]) -> tuple[str, str] | None:
        """The project module a dotted import names (its longest prefix), or None."""
        for i in range(len(names), 0, -1):
            mod = self.modules.get(".".join(names[:i]))
            if mod is not None:
                return mod, ".".join(names[i:])
        return None

    def _beside(self, names: list[str], folder: list[str]) -> tuple[str, str] | None:
        """The file a dotted import names in ``folder`` (a script's sibling), or None."""
        if not folder:
            return None
        for i in range(len(names), 0, -1):
            base = "/".join([*folder, *names[:i]])
            for cand in (f"{base}.py", f"{base}/__init__.py"):
                if cand in self.files:
                    return cand, ".".join(names[i:])
        return None

    def resolve(self, qualified: str, rel: str, hops: int = 0) -> tuple[str, str] | None:
        """``(file, "Name" or "Name.attr")``: the project definition a name of file ``rel``
        refers to, following re-exports (:data:`MAX_HOPS`); None outside the project."""
        key = (qualified, rel, hops)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(qualified, rel, hops)
        return self._resolved[key]

    def _resolve(self, qualified: str, rel: str, hops: int) -> tuple[str, str] | None:
        head, _, rest = qualified.partition(".")
        summ = self.summary(rel)
        if summ is not None and not qualified.startswith(".") and summ["defs"].get(head):
            return rel, qualified
        found = self._module_of(qualified, rel)
        if found is None:
            return None
        mod, inner = found
        if not inner:
            return None  # a module, not a definition
        ihead, _, irest = inner.partition(".")
        target = self.summary(mod)
        if target is None:
            return None
        if target["defs"].get(ihead):
            return mod, inner
        if hops < MAX_HOPS and ihead in target["imports"]:
            again = target["imports"][ihead] + (f".{irest}" if irest else "")
            return self.resolve(again, mod, hops + 1)
        return None

    def class_info(self, ref: tuple[str, str]) -> dict | None:
        """The summary of class ``ref`` (``(file, name)``; a top-level class), or None when
        ``ref`` is not one (a function, a method, a name the file does not define)."""
        summ = self.summary(ref[0])
        return summ["classes"].get(ref[1]) if summ is not None and "." not in ref[1] else None

    def _bases(self, ref: tuple[str, str], depth: int = 0) -> Iterator[tuple[tuple[str, str], dict]]:
        """The class and its project base classes (depth-first, at most 8 levels)."""
        info = self.class_info(ref)
        if info is None or depth > 8:
            return
        yield ref, info
        for base in info["bases"]:
            bref = self.resolve(base, ref[0])
            if bref is not None and bref != ref:
                yield from self._bases(bref, depth + 1)

    def forward_of(self, ref: tuple[str, str]) -> tuple[tuple[str, str], bool] | None:
        """``((file, class), disabled)`` of the class whose ``forward`` an instance of ``ref`` runs."""
        for bref, info in self._bases(ref):
            if "forward" in info["methods"]:
                return bref, "forward" in info["disabled"]
        return None

    def repeats(self, ref: tuple[str, str]) -> tuple[str, str, str, tuple[str, ...]] | None:
        """Why instances of ``ref`` repeat a block: ``(attr path, block name, container, files)``,
        from the class, a base class, or a submodule that repeats one (transitively); None."""
        if ref not in self._repeats:
            self._repeats[ref] = self._repeats_of(ref, frozenset())
        return self._repeats[ref]

    def _repeats_of(self, ref: tuple[str, str], seen: frozenset) -> tuple[str, str, str, tuple[str, ...]] | None:
        if ref in seen or len(seen) > 16:
            return None
        seen = seen | {ref}
        for bref, info in self._bases(ref):
            for attr, block, container, stack in info["repeated"]:
                if stack:
                    return attr, block.rsplit(".", 1)[-1], container, (bref[0],)
        for bref, info in self._bases(ref):
            for attr, child in info["children"].items():
                cref = self.resolve(child, bref[0])
                sub = self._repeats_of(cref, seen) if cref is not None else None
                if sub is not None:
                    return f"self.{attr}.{sub[0].removeprefix('self.')}", sub[1], sub[2], (bref[0], *sub[3])
        return None

    def blocks(self) -> set[tuple[str, str]]:
        """Classes that are the repeated block of some class in the files read so far."""
        out = set()
        for rel, summ in list(self._summaries.items()):
            for info in summ["classes"].values():
                for _, block, _, stack in info["repeated"]:
                    ref = self.resolve(block, rel) if stack else None
                    if ref is not None:
                        out.add(ref)
        return out

    # reach ------------------------------------------------------------------------------------
    def reach(self) -> dict[str, dict[str, Mark]]:
        """Every function a compile in the project reaches: ``{file: {"Cls.forward"|"f": Mark}}``.

        The first compile found reaching a function gives its options; the ``files`` of every
        compile reaching it are joined.
        """
        marks: dict[str, dict[str, Mark]] = {}

        def add(ref: tuple[str, str], mark: Mark) -> None:
            have = marks.setdefault(ref[0], {})
            old = have.get(ref[1])
            if old is None:
                have[ref[1]] = mark
            elif not mark.files <= old.files:
                have[ref[1]] = Mark(old.origin, old.fullgraph, old.mode, old.whole_model, old.files | mark.files, old.via)

        def full(rel: str) -> str:
            return os.path.abspath(self.files[rel])

        def model(ref: tuple[str, str], site: list, origin: str, chain: frozenset[str], seen: set, own: bool) -> None:
            if ref in seen or len(seen) > 256:
                return
            seen.add(ref)
            chain = chain | {full(ref[0])}
            fwd = self.forward_of(ref)
            if fwd is not None and not fwd[1] and own:
                add((fwd[0][0], f"{fwd[0][1]}.forward"), Mark(origin, site[3], site[4], True, chain | {full(fwd[0][0])}))
            for bref, info in self._bases(ref):
                subs = [*info["children"].values(), *(r[1] for r in info["repeated"])]
                for sub in subs:
                    sref = self.resolve(sub, bref[0])
                    if sref is not None and self.class_info(sref) is not None:
                        model(sref, site, origin, chain | {full(bref[0])}, seen, True)

        for rel in self.seeds():
            summ = self.summary(rel)
            if summ is None:
                continue
            for site in summ["sites"]:
                kind, target, attr, _, _, line = site
                origin = f"{display_path(full(rel))}:{line}"
                start = frozenset({full(rel)})
                ref = self.resolve(target, rel)
                if ref is None:
                    continue
                owner, _, method = ref[1].partition(".")
                if kind == "function" and method == "forward" and self.class_info((ref[0], owner)) is not None:
                    # torch.compile(self.forward): the module's forward, its blocks with it
                    model((ref[0], owner), site, origin, start, set(), own=True)
                elif kind == "function":
                    if self.class_info(ref) is None and ref[1] not in self.summary(ref[0])["disabled"]:
                        add(ref, Mark(origin, site[3], site[4], False, start | {full(ref[0])}))
                elif kind in ("instance", "forward") and self.class_info(ref) is not None:
                    # a decorated forward is marked by its own file's facts; its blocks are not
                    model(ref, site, origin, start, set(), own=kind == "instance")
                elif kind == "block" and self.class_info(ref) is not None:
                    for bref, info in self._bases(ref):
                        for path, block, *_ in info["repeated"]:
                            if path.removeprefix("self.") == attr:
                                blk = self.resolve(block, bref[0])
                                if blk is not None and self.class_info(blk) is not None:
                                    model(blk, site, origin, start | {full(bref[0])}, set(), True)
        self._follow_calls(marks, add, full)
        return marks

    def _follow_calls(self, marks: dict[str, dict[str, Mark]], add, full) -> None:
        """Mark the top-level functions of other project files that reached code calls through an
        import (``from .ops import clip``), :data:`HELPER_DEPTH` calls deep: Dynamo inlines them
        (what :mod:`.facts` does within one file). A function under ``@torch.compiler.disable``
        is not followed."""
        frontier = [(rel, qual, mark) for rel, fmarks in marks.items() for qual, mark in fmarks.items()]
        for _ in range(HELPER_DEPTH):
            found = []
            for rel, qual, mark in frontier:
                summ = self.summary(rel)
                for name in (summ.get("calls", {}).get(qual, ()) if summ else ()):
                    ref = self.resolve(name, rel)
                    if ref is None or ref[0] == rel or "." in ref[1] or ref[1] in marks.get(ref[0], {}):
                        continue
                    target = self.summary(ref[0])
                    if target is None or target["defs"].get(ref[1]) != "def" or ref[1] in target["disabled"]:
                        continue
                    how = f"`{qual}` in {display_path(full(rel))}" if mark.via is None else f"`{qual}`, {mark.via.split(' is called from ', 1)[1]}"
                    new = Mark(mark.origin, mark.fullgraph, mark.mode, False, mark.files | {full(ref[0])},
                               via=f"`{ref[1]}` is called from {how}")
                    add(ref, new)
                    found.append((ref[0], ref[1], new))
            frontier = found
            if not frontier:
                return

    def view(self, rel: str, marks: dict[str, dict[str, Mark]], blocks: set[tuple[str, str]]) -> FileView:
        """The :class:`FileView` of project file ``rel``."""
        view = FileView(marks=dict(marks.get(rel, {})))
        summ = self.summary(rel)
        if summ is None:
            return view
        # what SP101 asks about: the classes this file compiles, and its own classes
        names = {*(s[1] for s in summ["sites"]), *(n for n, kind in summ["defs"].items() if kind == "class")}
        for name in names:
            ref = self.resolve(name, rel)
            if ref is None or self.class_info(ref) is None:
                continue
            why = self.repeats(ref)
            if why is not None:
                view.repeats[name] = (why[0], why[1], why[2], tuple(full for full in (os.path.abspath(self.files[f]) for f in why[3])))
            if ref in blocks:
                view.blocks.add(name)
        return view


def local_view(tree: ast.Module, path: str = "<file>", lines: Sequence[int] | None = None) -> FileView:
    """The reach of one file's own compiles inside that file (the project of one file): the
    blocks of a model compiled in the same file, regional loops; origins read ``line N``.
    ``lines``: :func:`.file_summary.compile_lines` of the text, when known (a faster walk)."""
    rel = "file.py"
    project = Project("", files={rel: path})
    project._summaries[rel] = summarize(tree, lines)
    project._seeds = [rel]
    marks = project.reach()
    blocks = project.blocks()
    view = project.view(rel, marks, blocks)
    view.marks = {k: Mark(_line_only(m.origin), m.fullgraph, m.mode, m.whole_model, frozenset(), m.via) for k, m in view.marks.items()}
    view.repeats = {k: (*v[:3], ()) for k, v in view.repeats.items()}
    return view


def _line_only(origin: str) -> str:
    return "line " + origin.rsplit(":", 1)[-1]

