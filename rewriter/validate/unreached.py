"""The plan's compile sites the harness's steps never called, for validate's verdict.

A plan variant whose Dynamo was asked to convert no frame in its whole cold phase
(``torch._dynamo.utils.counters["frames"]["total"] == 0``, the plan child's ``compile.frames_total``,
:class:`rewriter.engine.watch.CompileStats`) ran none of the code the plan compiles: its "no graph
captured" is a plan that was never exercised, not a silent fallback to eager. Each action that
compiles (not an ``own_call: {disable: true}``, which turns a compile off) is then named with its
site: the target's ``def`` (``file:line``), or, for an ``own_call`` edit, the program's compile
call in it (:func:`rewriter.actions.own_call.find_sites`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libcst.metadata import MetadataWrapper, PositionProvider

from ..actions.base import imported_names
from ..actions.own_call import OwnCallRefused, find_sites
from ..errors import StackpartError
from ..source import read_source
from ..targets import collect_definitions, resolve


@dataclass(frozen=True)
class Unreached:
    """One compile action of the plan whose site the steps never called.

    Attributes:
        plan_line: the action's 1-based line in the plan (None where not known).
        target: the action's target as written (``model.py::Block.unused``).
        site: ``file:line`` of the site under SRC (``model.py:13``), or the file alone where the
            line cannot be read.
    """

    plan_line: int | None
    target: str
    site: str


def never_called(loaded: Any, plan_row: dict[str, Any], tree: Path) -> list[Unreached]:
    """The plan's actions that compile a target under SRC, each with its site, where the plan
    child's Dynamo converted no frame at all (``plan_row["compile"]["frames_total"] == 0``); []
    otherwise (a compile that was called, or no count measured). An action that compiles nothing
    (:attr:`rewriter.plan.schema.CompileAction.compiles`: ``own_call: {disable: true}`` turns the
    program's compile off) is expected to leave Dynamo no frame and is not listed.

    ``loaded``: the :class:`rewriter.plan.loader.LoadedPlan`; ``tree``: the original tree, whose
    sources give the sites' lines (the rewrite keeps every line above an edit where it was).
    """
    if (plan_row.get("compile") or {}).get("frames_total", None) != 0:
        return []
    out = []
    for i, action in enumerate(loaded.plan.actions):
        if action.action != "compile" or not action.compiles:
            continue  # own_call {disable: true} turns the program's compile off: no frame is what it asks
        if "::" not in action.target:
            continue  # an installed library's target is applied from site:, checked when the model is built
        line = loaded.action_lines[i] if i < len(loaded.action_lines) else None
        out.append(Unreached(line, action.target, _site(tree, action.target, getattr(action, "own_call", None) is not None)))
    return out


def _site(tree: Path, target: str, own_call: bool) -> str:
    """``file:line`` of ``target``'s ``def`` (of its compile call for an ``own_call`` edit);
    the file alone where the source cannot be read or the target not resolved."""
    relpath, qualname = target.split("::", 1)
    try:
        source = read_source(tree, relpath)
        module = source.parse()
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        func = resolve(module, relpath, qualname, collect_definitions(module)).node
        node = func
        if own_call:
            sites = find_sites(func, imported_names(module))
            node = sites[0].node if len(sites) == 1 else func
    except (StackpartError, OwnCallRefused):  # Skipped (a file too deep, not regular) included
        return relpath
    return f"{relpath}:{positions[node].start.line}"
