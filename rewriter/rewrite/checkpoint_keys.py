"""The ``own_call`` edits that change the program's checkpoint keys, and where SRC saves or loads them.

``model = torch.compile(model)`` binds torch.compile's wrapper (``OptimizedModule``): its
``state_dict()`` keys carry the ``_orig_mod.`` prefix (``_orig_mod.layers.0.lin.weight``), and a
module that holds it (``self.block = torch.compile(Block())``) has ``block._orig_mod.`` in its keys.
Two ``own_call`` edits of such a call leave the name bound to the module itself, so those keys lose
``_orig_mod.``:

* ``regional: <path>``: the call becomes ``for block in model.<path>: block.compile(...)``;
  ``nn.Module.compile`` compiles each block in place, so neither the model nor a block is wrapped
  (``layers.0.lin.weight``);
* ``disable: true``: ``torch.compile(model, disable=True)`` returns ``model`` itself.

The result is held where it is assigned or returned, a branch of a conditional expression
(``model = torch.compile(model) if compiled else model``) included.

``disable: false`` on a call the source turned off is the other way: the keys gain the prefix. An
edit of ``model.compile(...)``, ``model.compile_repeated_blocks(...)``, a decorator, or a call
that compiles a function (``f = torch.compile(f)``, ``torch.compile(model.forward)``) changes no
key. Checked against torch 2.13 on CPU (``backend="eager"``).

The rewrite does not refuse such an edit for its keys: it is what the plan measured, and a program
that never saves a checkpoint is not affected. A read of ``name._orig_mod`` in the function that
holds the call (or, for ``self.<attr>``, its class) is refused, by ``regional`` and ``disable:
true`` alike (:func:`rewriter.actions.own_call.check_unwrapped`): the module itself has no
``_orig_mod``, so that read would raise; one elsewhere in SRC is warned of here. Where SRC's ``.py`` files use the keys (a ``state_dict()`` or
``load_state_dict(...)`` call, ``torch.save(model, ...)`` of a whole module) or mention
``_orig_mod`` (an attribute read, or a string such as ``"_orig_mod."`` a loader strips), each such
edit gets one warning (:func:`warnings`), which ``stackpart rewrite`` prints on stderr (preview,
``--check`` and ``--apply``) and its ``--summary-md`` lists under **Warnings** (the pure rewrite
records the edits, :func:`key_changes`; only the command reads SRC for the uses); the diff's bytes
stay as they are (validation reports are bound to them by sha256). An optimizer's, scheduler's or
grad scaler's ``state_dict`` (a receiver named ``optimizer``, ``opt``, ``scheduler``,
``lr_scheduler``, ``scaler``) names no module and is not listed. Which module a call's receiver is
cannot be read statically across files, so every other use is listed (at most
:data:`SHOWN_USES`, then how many more).

SRC is walked only where the plan holds such an edit; only files whose bytes mention
``state_dict``, ``_orig_mod`` or ``torch.save`` are parsed (:mod:`ast`), at most
:data:`rewriter.own_regional.MAX_FILES` files, the folders :func:`rewriter.source.python_files`
leaves out skipped; a file that cannot be read or parsed is left out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..compile_facts import first_positional, turned_off
from ..errors import StackpartError
from ..plan import CompileAction, LoadedPlan
from ..source import python_files, read_file

#: The prefix torch.compile's wrapper puts on the keys of the module it wraps.
PREFIX = "_orig_mod."
#: Uses named in one warning; the rest are counted.
SHOWN_USES = 5
#: Receivers whose ``state_dict`` names no module: an optimizer's, a scheduler's, a grad scaler's.
NOT_A_MODULE = re.compile(r"(^|[._])(optim\w*|opt|\w*scheduler|sched|\w*scaler)$", re.IGNORECASE)
#: The bytes a file must hold to be parsed.
_NEEDLES = ("state_dict", "_orig_mod", "torch.save")


@dataclass(frozen=True)
class KeyChange:
    """One ``own_call`` edit that changes whether its call's result is torch.compile's wrapper.

    Attributes:
        index: the plan action's index.
        where: ``file.py:line`` of the program's call under SRC.
        code: the statement as the source has it, on one line (``model = torch.compile(model)``).
        bound: what holds the result (``model``, ``self.block``, ``the returned model``).
        how: why the wrapper goes or comes (``compiled block by block in place (regional: layers)``).
        lose: True where the keys lose :data:`PREFIX`, False where they gain it.
    """

    index: int
    where: str
    code: str
    bound: str
    how: str
    lose: bool


@dataclass(frozen=True)
class Use:
    """A line of SRC that reads or writes checkpoint keys: ``where`` is ``file.py:line``, ``what`` the code."""

    where: str
    what: str


def warnings(loaded: LoadedPlan, changes: list[KeyChange], src: Path) -> list[str]:
    """One warning per edit of ``changes`` (:func:`key_changes` of ``loaded``'s resolved targets)
    where SRC uses the keys (:func:`uses`); empty otherwise (SRC is not read without a change).
    Raises nothing."""
    if not changes:
        return []
    found = uses(src)
    if not found:
        return []
    listed = ", ".join(f"{u.where} ({u.what})" for u in found[:SHOWN_USES])
    if len(found) > SHOWN_USES:
        listed += f" and {len(found) - SHOWN_USES} more"
    out = []
    for c in changes:
        at = f"{loaded.path}:{loaded.action_lines[c.index]}"
        attr = c.bound.rsplit(".", 1)[-1] if "." in c.bound and " " not in c.bound else None
        if attr:  # self.models[0]: the key path is models.0 (state_dict's names of a container's children)
            attr = re.sub(r"\[\s*['\"]?([^\]'\"]+?)['\"]?\s*\]", r".\1", attr)
        plain, wrapped = (f"{attr}.<param>", f"{attr}.{PREFIX}<param>") if attr else ("<param>", f"{PREFIX}<param>")
        keys = f"the keys of the module that holds it (`{wrapped}`)" if attr else f"its checkpoint keys (`{wrapped}`)"
        if c.lose:
            what = (f"{c.bound} becomes the module itself, not torch.compile's wrapper, so {keys} lose the "
                    f"`{PREFIX}` prefix (`{plain}`): checkpoints saved before the rewrite load with strict=True only "
                    f"after stripping it (`{{k.replace('{PREFIX}', '', 1): v for k, v in sd.items()}}`), and reading "
                    "`._orig_mod` on it raises AttributeError")
        else:
            what = (f"{c.bound} becomes torch.compile's wrapper (OptimizedModule), not the module itself, so "
                    f"{keys.replace(wrapped, plain)} gain the `{PREFIX}` prefix (`{wrapped}`): checkpoints saved "
                    "before the rewrite load with strict=True only after adding it")
        out.append(f"{at}: own_call on {c.where} (`{c.code}`), {c.how}: {what}; SRC saves, loads or reads "
                   f"checkpoint keys at {listed}")
    return out


def key_changes(bounds: list[Any]) -> list[KeyChange]:
    """The ``own_call`` edits among ``bounds`` (the plan's resolved file targets,
    :class:`rewriter.consistency.Bound`) that turn the program's ``x = torch.compile(module)``
    (or ``return torch.compile(module)``) from torch.compile's wrapper into the module itself or
    back (see the module docstring), in plan order. An edit the rewrite refuses is left out (the
    rewrite reports it)."""
    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, find_sites, statement_of

    out = []
    for b in bounds:
        action = b.action
        if not isinstance(action, CompileAction) or action.own_call is None or action.library:
            continue
        func = b.target.node
        if not isinstance(func, cst.FunctionDef):
            continue
        try:
            sites = find_sites(func, imported_names(b.module))
        except OwnCallRefused:
            continue
        if len(sites) != 1 or sites[0].kind != "call" or sites[0].call is None:
            continue  # a decorator, model.compile(...), compile_repeated_blocks: no wrapper either way
        call = sites[0].call
        first = first_positional(call)
        if first is None or _compiles_a_function(first, b):
            continue
        small = statement_of(func, call)
        if isinstance(small, cst.Assign) and _holds(small.value, call) and len(small.targets) == 1:
            bound = _code(small.targets[0].target)
        elif isinstance(small, cst.AnnAssign) and _holds(small.value, call):  # model: nn.Module = torch.compile(model)
            bound = _code(small.target)
        elif isinstance(small, cst.Return) and _holds(small.value, call):
            bound = "the returned model"
        else:
            continue  # the result is not held: no module the program saves is wrapped
        if bound.endswith(".forward"):
            continue  # model.forward = torch.compile(...): a compiled method, the model unwrapped
        own_call = action.own_call
        before = not turned_off(call)
        if own_call.regional is not None:
            after, how = False, f"compiled block by block in place (regional: {own_call.regional})"
        elif own_call.disable is not None:
            after = not own_call.disable
            how = "turned off (disable: true)" if own_call.disable else "turned back on (disable: false)"
        else:
            continue
        if before == after:
            continue
        out.append(KeyChange(b.index, _where(b, small), " ".join(_code(small).split())[:100], bound, how, before))
    return out


def uses(src: Path) -> list[Use]:
    """The lines of SRC's ``.py`` files that use checkpoint keys or mention ``_orig_mod`` (see the
    module docstring), in file and line order. Raises nothing: a file that cannot be read or parsed
    is left out."""
    from ..own_regional import MAX_FILES

    out: list[Use] = []
    for seen, path in enumerate(python_files(src), 1):
        if seen > MAX_FILES:
            break
        rel = path.relative_to(src).as_posix()
        try:
            text = read_file(path, rel).text
            if not any(n in text for n in _NEEDLES):
                continue
            tree = ast.parse(text)
        except (OSError, StackpartError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        found: dict[int, str] = {}
        for node in ast.walk(tree):
            what = _use(node)
            if what is not None and node.lineno not in found:  # type: ignore[attr-defined]
                found[node.lineno] = what  # type: ignore[attr-defined]
        out += [Use(f"{rel}:{line}", found[line]) for line in sorted(found)]
    return out


def _use(node: ast.AST) -> str | None:
    """What ``node`` does with checkpoint keys, as the warning shows it, or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr, receiver = node.func.attr, node.func.value
        if attr in ("state_dict", "load_state_dict") and not NOT_A_MODULE.search(_unparse(receiver)):
            return f"{_unparse(receiver)}.{attr}(...)"
        if attr == "save" and _unparse(receiver) == "torch" and node.args \
                and isinstance(node.args[0], (ast.Name, ast.Attribute)) and not NOT_A_MODULE.search(_unparse(node.args[0])):
            return f"torch.save({_unparse(node.args[0])}, ...)"
    if isinstance(node, ast.Attribute) and node.attr == "_orig_mod":
        return f"{_unparse(node.value)}._orig_mod"
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "_orig_mod" in node.value:
        return repr(node.value)[:40]
    return None


def _unparse(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):
        return "..."
    return text if len(text) <= 40 else text[:37] + "..."


def _holds(value: cst.BaseExpression | None, call: cst.Call) -> bool:
    """Whether ``value`` evaluates to ``call``'s result: it is ``call``, or a conditional expression
    with ``call`` as a branch (``torch.compile(model) if compiled else model``, which binds the
    wrapper where that branch is taken)."""
    if value is call:
        return True
    return isinstance(value, cst.IfExp) and (_holds(value.body, call) or _holds(value.orelse, call))


def _compiles_a_function(first: cst.BaseExpression, b: Any) -> bool:
    """Whether ``torch.compile``'s first argument is a function, not a module: a bound method
    (``model.forward``), a lambda, or the name of a function defined in the target's file."""
    if isinstance(first, cst.Lambda):
        return True
    if isinstance(first, cst.Attribute) and first.attr.value == "forward":
        return True
    if isinstance(first, cst.Name) and b.definitions is not None:
        return any(d.kind == "function" for d in b.definitions.get(first.value, ()))
    return False


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


def _where(b: Any, node: cst.CSTNode) -> str:
    """``file.py:LINE`` of ``node`` in the target's file (the file alone where it cannot be placed)."""
    try:
        pos = MetadataWrapper(b.module, unsafe_skip_copy=True).resolve(PositionProvider).get(node)
    except Exception:  # noqa: BLE001 - a line is a courtesy in a warning
        pos = None
    return f"{b.target.relpath}:{pos.start.line}" if pos is not None else b.target.relpath
