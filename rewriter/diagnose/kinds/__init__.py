"""The search's candidate kinds, discovered: every module of this package that declares
``KIND = CandidateKind(name, order, make, judge)`` (:class:`..candidate.CandidateKind`) is one kind;
adding a kind is one module here plus its test, with no registration line elsewhere
(docs/design.md, "Where each kind of change goes").

:func:`extend` chains the kinds' ``make`` in ``order`` over the base candidates
(:func:`..candidates.propose`); :func:`judge` runs their ``judge`` over the measured rows before the
decision (:func:`..search.run_search`). A module without ``KIND`` is a helper the kinds share.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ..candidate import Candidate, CandidateKind


def registered() -> list[CandidateKind]:
    """Every kind declared in this package (each path of its ``__path__``), in ``order`` then name."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if isinstance(kind, CandidateKind):
            found.append(kind)
    return sorted(found, key=lambda k: (k.order, k.name))


def extend(ctx: Any, cands: list[Candidate], compiles_pruned: bool = False) -> tuple[list[Candidate], list[str]]:
    """``cands`` with every kind's candidates, in order, and what the kinds left out (why).
    ``compiles_pruned``: the ladder pruned every compile; kinds that twin only compiles are left out."""
    pruned: list[str] = []
    for kind in registered():
        if compiles_pruned and not kind.when_compiles_pruned:
            continue
        cands, more = kind.make(ctx, cands)
        pruned += more
    return cands, pruned


def judge(ctx: Any, rows: dict[str, dict[str, Any]]) -> list[str]:
    """After measurement, every kind's ``judge`` over ``rows`` (twins that changed nothing marked
    ``skipped``); one line per twin pruned, for the report's ``pruned``."""
    return [line for kind in registered() if kind.judge is not None for line in kind.judge(ctx, rows)]
