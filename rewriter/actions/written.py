"""The options a decorator already on the target is written with, against the plan's.

A ``compile`` (``disable``) of a target that already carries ``@torch.compile(...)``
(``@torch.compiler.disable(...)``) leaves that decorator as written: a second one would compile
(skip) the frame twice. Where its options are not the plan's, the plan's edit is not in the tree,
and the rewrite says so (:meth:`rewriter.actions.base.TargetedCommand.leave_as_written`) instead of
counting the action as applied.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst
import yaml

from .base import TargetedCommand

_EMPTY = cst.Module([])


def code(dec: cst.Decorator) -> str:
    """``dec`` as the source writes it, on one line (``@torch.compile(mode="max-autotune")``)."""
    return "@" + " ".join(_EMPTY.code_for_node(dec.decorator).split())


def options(dec: cst.Decorator) -> dict[str, Any] | None:
    """The keyword arguments ``dec``'s call passes, as Python values (``{}`` for a bare decorator,
    ``@torch.compile``), or None where they cannot be read from the source: a positional or
    starred argument, or a value that is not a literal (``mode=MODE``)."""
    call = dec.decorator
    return call_options(call) if isinstance(call, cst.Call) else {}


def call_options(call: cst.Call, skip_first: bool = False) -> dict[str, Any] | None:
    """The keyword arguments ``call`` passes, as Python values, as :func:`options` reads them;
    ``skip_first``: its first positional argument is what it compiles (``torch.compile(f, ...)``)."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(call.args):
        if skip_first and i == 0 and arg.keyword is None and not arg.star:
            continue
        if arg.keyword is None or arg.star:
            return None
        try:
            out[arg.keyword.value] = ast.literal_eval(_EMPTY.code_for_node(arg.value).strip())
        except (ValueError, SyntaxError):
            return None
    return out


def differing(written: Mapping[str, Any], asked: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The keys whose value in ``written`` (a decorator's :func:`options`) is not the one ``asked``
    (the plan's), each with the plan's value; a key missing from either side has its value in
    ``defaults`` (torch's), and a written key outside ``defaults`` differs (None as the plan's).
    ``mode=None`` is torch.compile's ``"default"``."""
    norm = lambda key, value: "default" if key == "mode" and value is None else value  # noqa: E731
    out: dict[str, Any] = {}
    for key in [*defaults, *(k for k in written if k not in defaults)]:
        if key not in defaults:
            out[key] = None
            continue
        want = norm(key, asked.get(key, defaults[key]))
        if norm(key, written.get(key, defaults[key])) != want:
            out[key] = want
    return out


def flow(values: Mapping[str, Any]) -> str:
    """``values`` as a plan writes them, YAML's flow style (``{fullgraph: true, mode: default}``)."""
    return yaml.safe_dump(dict(values), default_flow_style=True, sort_keys=False).strip()


def note_other_options(command: TargetedCommand, node: cst.CSTNode, written: str, have: dict[str, Any] | None,
                       verb: str, asked: Mapping[str, Any], defaults: Mapping[str, Any], plan_asks: str, compare: str,
                       differs: Callable[[dict[str, Any]], str], ignored: tuple[str, ...] = (),
                       kind: str = "decorator") -> None:
    """Where the target's own compile or disable (``node``, shown as ``written``: a decorator or a
    rebinding ``f = torch.compile(f, ...)``, its ``kind``) is not written with the plan's options,
    say so (:meth:`~rewriter.actions.base.TargetedCommand.leave_as_written`); nothing where they
    agree.

    Args:
        command: the action's transform; its target is ``verb`` (``compiled``, ``disabled``) by ``node``.
        have: the options ``node`` passes, in the plan's keys (:func:`options`,
            :func:`call_options`, of :func:`rewriter.compile_facts.as_compile_call` for
            ``torch._dynamo.optimize``); None where they cannot be read.
        asked: the plan's options; ``defaults``: torch's, for a key missing from either side
            (:func:`differing`); ``ignored``: written keys that are no difference (``reason=``).
        plan_asks: the plan's options in words (``the plan asks (recursive=False)``), for a
            ``node`` whose arguments cannot be read; ``compare``: what the user does then
            (``compare it by hand``).
        differs: the rest of the note after ``file.py:LINE: Qual is <verb> by the source's ...,``
            for the options that differ (:func:`differing`'s dict, each with the plan's value).
    """
    where = f"{command._line(node)}: {command.qualname} is {verb} by the source's {written}"
    if have is None:
        command.leave_as_written(f"{where}, whose arguments are not all literal keyword arguments: they cannot be "
                                 f"read as {plan_asks}; the {kind} is left as written: {compare}")
        return
    have = {k: v for k, v in have.items() if k not in ignored}
    diff = differing(have, asked, defaults)
    if diff:
        command.leave_as_written(f"{where}, {differs(diff)}")
