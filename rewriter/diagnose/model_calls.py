"""The functions under SRC that the harness's model function calls, read statically: which of the
program's own compile calls the harness runs where nothing compiles at run time to say so (a call
that passes ``disable=True``, :func:`.own_compile.off_compiles`; docs/design.md, "The search").

From the model function (``harness.py::build_model``, or the function of another file the harness
imports under that name, :func:`.locate.target_of`), each call in a function's body is followed
into the function of SRC it names: a top-level function of the same file (``make_net()``), a
function of a class of that file (``Factory.make()``), a class's ``__init__`` (``Factory()``:
what constructing it runs), or one of those imported from another file of SRC
(``from nets import make_net``, ``import nets; nets.make_net()``, a re-export through a
package's ``__init__``), resolved by the import rules of ``stackpart check``'s project index
(:meth:`rewriter.check.project.Project.resolve`: a flat import names the file beside the
importer first, as ``python harness.py`` run from SRC would). Calls are followed
:data:`CALL_DEPTH` deep, each function once, so a cycle (``a`` calls ``b`` calls ``a``) ends where
it closes. Read with :mod:`ast`, as the project index is.

Static, and over-approximating what one call of the model function runs: a call in a branch not
taken counts. A callee passed in as an argument, bound to a local name or reached through an
instance (``Factory().make()``: its ``__init__`` is followed, not ``make``) is not seen; a method
of the model's own classes is read apart (:func:`.own_candidates.runs_off_compile`: the model's
source runs it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..check.project import Project

#: How many calls deep the model function's callees are followed (``build_model`` -> ``make_net``
#: is one): a factory's helpers rarely nest deeper, and each level may read another file of SRC.
CALL_DEPTH = 4


def calls_from(src: str | Path, starts: Iterable[str], depth: int = CALL_DEPTH) -> dict[str, tuple[str, ...]]:
    """The functions of SRC that the functions ``starts`` call, directly or through each other.

    Args:
        src: the tree the program lives in (SRC).
        starts: ``file.py::qualname`` of each function to start from, relative to ``src``.
        depth: how many calls deep to follow (a start's own callees are 1 deep).

    Returns:
        ``{"file.py::qualname": chain}`` for each function reached (the starts left out), ``chain``
        the functions from a start to it, both ends included, by the shortest path found (the
        first start's where two are as short). Empty where no start names a function that can be
        read. Raises nothing: a file that does not parse, or a name that resolves outside SRC,
        ends that path.
    """
    from ..check.project import Project

    root = Path(src).resolve()
    project = Project(str(root), use_cache=False)  # never writes a cache into the user's tree
    starts = list(dict.fromkeys(starts))
    reached: dict[str, tuple[str, ...]] = {}
    frontier = [(start, (start,)) for start in starts]
    for _ in range(depth):
        found = []
        for site, chain in frontier:
            for callee in _callees(project, root, site):
                if callee in starts or callee in reached:
                    continue
                reached[callee] = (*chain, callee)
                found.append((callee, reached[callee]))
        frontier = found
        if not frontier:
            break
    return reached


def _callees(project: "Project", root: Path, site: str) -> list[str]:
    """``file.py::qualname`` of each function of SRC a call in the body of ``site`` names, in the
    order written (see the module docstring)."""
    from ..reach import _functions

    rel, _, qual = site.partition("::")
    node = dict(_functions(str(root / rel))).get(qual)
    summary = project.summary(rel) if node is not None else None
    if node is None or summary is None:
        return []
    out: dict[str, None] = {}
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        name = _qualified(sub.func, summary)
        ref = project.resolve(name, rel) if name else None
        if ref is None:
            continue
        functions = dict(_functions(str(root / ref[0])))
        for qual in (ref[1], f"{ref[1]}.__init__"):  # a function, or a class: what constructing it runs
            if qual in functions:
                out.setdefault(f"{ref[0]}::{qual}")
                break
    return list(out)


def _qualified(expr: ast.expr, summary: dict) -> str | None:
    """The dotted name a call's callee is written as, qualified through the file's imports the way
    the project index names it (``make_net`` after ``from nets import make_net``: ``nets.make_net``),
    or None for a callee that is no dotted name (``fns[0]()``, ``make()()``) or whose first name is
    neither defined at the file's top level nor imported (a local, ``self``): a local named like a
    module of SRC is not that module."""
    from ..check.file_summary import dotted

    name = dotted(expr)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head not in summary["defs"]:
        if head not in summary["imports"]:
            return None
        head = summary["imports"][head]
    return f"{head}.{rest}" if rest else head
