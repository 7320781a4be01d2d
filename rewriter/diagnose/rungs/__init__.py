"""The diagnostic ladder's rungs, one module each (docs/design.md, "Where each kind of change goes").

Every module of this package declares its rung as a module-level ``RUNG = Rung(...)``
(:class:`~rewriter.diagnose.rung.Rung`: name, order, what it needs and gives, whether it
compiles). :func:`ladder` imports them all (``pkgutil.iter_modules``) and orders them, so adding a
rung is one new module here plus its test, with no registration line elsewhere.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import fields

from ..evidence import Evidence
from ..rung import Rung


def ladder() -> list[Rung]:
    """Every rung of this package, cheapest first (by ``order``, then name).

    Raises:
        TypeError: a module here declares no ``RUNG`` (a helper of one rung lives in its
            module, or beside this package).
        ValueError: two rungs share a name or an order, a rung names an evidence field
            :class:`~rewriter.diagnose.evidence.Evidence` does not have, or needs one no earlier
            rung gives.
    """
    found: list[Rung] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        rung = getattr(module, "RUNG", None)
        if not isinstance(rung, Rung):
            raise TypeError(f"{module.__file__}: a module of {__name__} declares RUNG = Rung(...); found {rung!r}")
        found.append(rung)
    found.sort(key=lambda r: (r.order, r.name))
    _check(found)
    return found


def _check(rungs: list[Rung]) -> None:
    known = {f.name for f in fields(Evidence)}
    given: set[str] = set()
    names: set[str] = set()
    orders: dict[int, str] = {}
    for rung in rungs:
        if rung.name in names:
            raise ValueError(f"two rungs are named {rung.name!r}")
        if rung.order in orders:
            raise ValueError(f"rungs {orders[rung.order]!r} and {rung.name!r} share order {rung.order}")
        names.add(rung.name)
        orders[rung.order] = rung.name
        unknown = (rung.needs | rung.gives) - known
        if unknown:
            raise ValueError(f"rung {rung.name!r}: no evidence field {', '.join(sorted(unknown))} (rewriter/diagnose/evidence.py)")
        early = rung.needs - given
        if early:
            raise ValueError(f"rung {rung.name!r} needs {', '.join(sorted(early))}, which no earlier rung gives")
        given |= rung.gives


def givers(rungs: list[Rung], selected: set[str]) -> set[str]:
    """The names of the rungs that give what the ``selected`` rungs need (run for them too)."""
    needed = set().union(*(r.needs for r in rungs if r.name in selected))
    return {r.name for r in rungs if r.gives & needed}
