"""Which files of SRC may define what a name of one of its files names, read from the qualified
name LibCST's :class:`~libcst.metadata.QualifiedNameProvider` gives the name.

A qualified name is what a name (or a dotted attribute) is bound to, spelled through the file's
imports: ``top`` defined at the file's top level is ``top`` (``LOCAL``); after ``from m import f
as g``, ``g`` is ``m.f`` (``IMPORT``), as is ``M.f`` after ``import m as M``; a relative import
keeps its dots (``from . import h``: ``.h``; ``from .sub import j``: ``.sub.j``); ``self.f`` in a
method is ``C.f.<locals>.self.f`` (``LOCAL``, bound in a function: no name of SRC's files).

:func:`definition_files` maps it to the files of SRC its module may be (:func:`module_files`) and
the name defined there. The files are candidates, not one file: an absolute import is looked for
beside the importing file (a script's flat import: ``python train.py`` puts its folder first on
``sys.path``) and from SRC's root, each as ``<module>.py`` and ``<module>/__init__.py``; the reader
keeps the candidate that defines the name. A re-export (``from .compiling import f`` in a package's
``__init__.py``) is not followed: the candidates are the files of the module the name is imported
from (the callers of a helper follow re-exports on top of it, :func:`rewriter.rewrite.callers.bindings`).
Shared by the rewrite's static readings: the callers of a helper
(:mod:`rewriter.rewrite.callers`), the classes an ``__init__`` builds
(:mod:`rewriter.rewrite.enclosing`) and the class a whole-model compile names
(:mod:`rewriter.rewrite.program_compiles`). ``stackpart check``'s project index
(:meth:`rewriter.check.project.Project.resolve`), which diagnose's reading of the model function's
callees uses (:mod:`rewriter.diagnose.model_calls`), resolves to one file and follows re-exports.
"""

from __future__ import annotations

import posixpath

from libcst.metadata import QualifiedName, QualifiedNameSource


def module_stem(rel: str) -> str:
    """The last part of the module file ``rel`` is imported as: ``blocks`` of ``pkg/blocks.py``,
    ``pkg`` of ``pkg/__init__.py``. A file that imports from it writes that name."""
    if posixpath.basename(rel) == "__init__.py":
        return posixpath.basename(posixpath.dirname(rel))
    return posixpath.splitext(posixpath.basename(rel))[0]


def module_files(dotted: str, rel: str) -> list[str]:
    """The files under SRC module ``dotted`` may be, imported from file ``rel`` (both relative to
    SRC, ``/``-separated): relative (``.blocks``, ``..pkg.blocks``, ``.`` the package itself) from
    ``rel``'s folder; absolute from beside ``rel`` (a script's flat import) and from SRC's root;
    each as ``<module>.py`` and ``<module>/__init__.py``. A relative import that climbs above SRC
    has none."""
    level = len(dotted) - len(dotted.lstrip("."))
    parts = [p for p in dotted.lstrip(".").split(".") if p]
    here = posixpath.dirname(rel)
    if level:
        bases = [posixpath.normpath(posixpath.join(here, *[".."] * (level - 1)))]
    else:
        bases = list(dict.fromkeys([here, ""]))
    out: list[str] = []
    for base in bases:
        path = posixpath.normpath(posixpath.join(base, *parts)) if parts else base
        if path.startswith(".."):
            continue
        out += ([f"{path}.py"] if parts else []) + [posixpath.normpath(posixpath.join(path, "__init__.py"))]
    return out


def definition_files(q: QualifiedName, rel: str) -> tuple[list[str], str] | None:
    """``(files, name)``: the files of SRC (:func:`module_files`) that may define what the qualified
    name ``q`` of a name in file ``rel`` stands for, and the name it has there (``(["model.py",
    "pkg/model.py", ...], "Net")`` of ``model.Net`` in ``pkg/train.py``; ``(["pkg/__init__.py"],
    "h")`` of ``.h`` in ``pkg/train.py``; ``(["train.py"], "top")`` of a ``LOCAL`` ``top`` there).

    None where ``q`` names nothing a file of SRC defines at its top level: a module itself
    (``import m``: ``m``), a name bound inside a function or class (``C.f.<locals>.self.f``,
    ``C.f``: a ``LOCAL`` name with a dot), a builtin. Whether a candidate file exists or defines
    the name is the caller's question."""
    if q.source == QualifiedNameSource.LOCAL:
        return ([rel], q.name) if "." not in q.name else None
    if q.source != QualifiedNameSource.IMPORT:
        return None
    level = len(q.name) - len(q.name.lstrip("."))
    dotted, _, name = q.name.lstrip(".").rpartition(".")
    if not dotted and not level:
        return None
    return module_files("." * level + dotted, rel), name
