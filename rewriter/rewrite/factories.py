"""The class a factory function of a file returns an instance of, read statically with LibCST, one
call deep.

``model = build(); model = torch.compile(model)`` compiles what ``build`` returns. Where ``build``
is a function defined at the file's top level and every ``return`` of its own body returns a call
of one class (``return Net(cfg).eval()``), or a name its body binds to one before that ``return``
(``m = Net(); m.train(False); return m``), that class is what it makes. Two readers share this
reading, so they name the same class: the rewrite's reading of the program's compiles
(:mod:`.program_compiles`, which the check of a regional path reads through) and check's facts
(:meth:`rewriter.check.facts.FileFacts.class_of`), which diagnose reads the program's own compiles
through (:mod:`rewriter.diagnose.own_compile`).

A factory imported from another file of SRC (``from models import build``) is read in that file,
where the class it returns must be defined (:func:`returned_call`; the readers follow the import).
A factory that calls another factory is not followed (one call deep only), nor one that returns
different classes, a parameter, or anything else: the class is then unknown (None).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node

from .callers import SELF_RETURNING, bound_value


def called_class(value: cst.BaseExpression) -> str | None:
    """``TinyLM`` of ``TinyLM(...)``, ``M.TinyLM`` of ``M.TinyLM(...)`` (a class called through a
    module's name, dotted names only), with ``.eval()``, ``.to(...)`` and the like
    (:data:`.callers.SELF_RETURNING`) peeled off; None for anything else. The callee is read as a
    class by its form alone: :func:`factory_class` says whether it is a function of the file."""
    made = constructed(value)
    return get_full_name_for_node(made.func) if made is not None else None


def constructed(value: cst.BaseExpression) -> cst.Call | None:
    """The call :func:`called_class` reads in ``value`` (``Net(cfg)`` of ``Net(cfg).eval().to(dev)``),
    or None where ``value`` is no call of a dotted name."""
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in SELF_RETURNING):
        value = value.func.value
    if not isinstance(value, cst.Call):
        return None
    func: cst.BaseExpression = value.func
    while isinstance(func, cst.Attribute):
        func = func.value
    return value if isinstance(func, cst.Name) else None


def top_level_functions(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """``{name: def}`` of the functions defined at ``module``'s top level (the last of a name)."""
    return {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}


def factory_call(module: cst.Module, name: str) -> cst.Call | None:
    """The construction (``Net(cfg)``, a node of ``module``'s tree) the top-level function ``name``
    of ``module`` returns an instance of, read from its first ``return``, where every ``return`` of
    its own body (nested defs left out) returns a call of one class or a name its body last binds
    to one before that ``return`` (:func:`.callers.bound_value`); None otherwise: ``name`` is no
    function of the file (a class, a function of another file), a ``return`` gives something else
    or another class, or the class called is itself a function of the file (a factory calling a
    factory: followed one call deep only)."""
    funcs = top_level_functions(module)
    func = funcs.get(name)
    return returned_call(func, set(funcs)) if func is not None else None


def returned_call(func: cst.FunctionDef, functions: set[str]) -> cst.Call | None:
    """:func:`factory_call` of the function ``func`` itself, ``functions`` the names of its file's
    top-level functions (a class called that is one of them is a factory calling a factory: None)."""
    from ..actions.own_call import statement_of

    returns = [r for r in m.findall(func.body, m.Return()) if statement_of(func, r) is r]
    made: list[cst.Call | None] = []
    for ret in returns:
        value = ret.value  # type: ignore[attr-defined]
        if isinstance(value, cst.Name):
            value = bound_value(func, value.value, ret)
        made.append(constructed(value) if value is not None else None)
    if not made or any(c is None for c in made):
        return None
    names = {get_full_name_for_node(c.func) for c in made if c is not None}
    if len(names) != 1 or names & functions:
        return None
    return made[0]


def factory_class(module: cst.Module, name: str) -> str | None:
    """The class name (as written in the factory) :func:`factory_call` reads, or None."""
    made = factory_call(module, name)
    return get_full_name_for_node(made.func) if made is not None else None


def class_made_here(func: cst.FunctionDef, functions: set[str], classes: set[str]) -> str | None:
    """The class the top-level function ``func`` of a file returns an instance of
    (:func:`returned_call`), where that file defines it (``classes``: its top-level class names;
    ``functions``: its top-level function names); None otherwise. How a factory imported from
    another file is read, by the program-compiles reading and the regional check alike."""
    made = returned_call(func, functions)
    cls = get_full_name_for_node(made.func) if made is not None else None
    return cls if cls in classes else None
