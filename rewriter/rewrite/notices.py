"""What a plan's rewrite says beside its diff: its warnings, and each action it did not write.

``stackpart rewrite`` prints these lines before its diff and ``stackpart validate`` before its
verdict (and into its report), in the same words, so a plan validated with an action left out
(an advisory action, or a target whose own ``@torch.compile(...)`` decorator has other options,
:mod:`rewriter.actions.written`) is never read as one whose every action was applied and measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan import LoadedPlan
    from .transform import RewriteResult


@dataclass(frozen=True)
class Notice:
    """One line the rewrite says.

    Attributes:
        kind: ``"warning"`` (one of :attr:`.transform.RewriteResult.warnings`, the left-as-written
            actions' among them) or ``"not_written"`` (an action held back, with its reason).
        text: the sentence, with its ``file:line`` first.
    """

    kind: str
    text: str

    @property
    def line(self) -> str:
        """The line as printed: ``warning: <text>`` for a warning, the text itself otherwise."""
        return f"warning: {self.text}" if self.kind == "warning" else self.text

    @property
    def markup(self) -> str:
        """:attr:`line` as rich console markup: ``warning`` in yellow, the text escaped (code it
        quotes, ``sd[name]``, is no markup)."""
        from rich.markup import escape

        return f"[yellow]warning[/]: {escape(self.text)}" if self.kind == "warning" else escape(self.text)

    def to_json(self) -> dict[str, str]:
        """A validation report's form: ``kind``, ``text``."""
        return {"kind": self.kind, "text": self.text}


def notices(loaded: LoadedPlan, result: RewriteResult) -> list[Notice]:
    """``result``'s warnings in order, then one line per action of ``loaded`` it held back
    (``plan.yaml:LINE: actions[i] (ACTION TARGET) not written: REASON``)."""
    return [Notice("warning", w) for w in result.warnings] + [
        Notice("not_written", not_written_line(loaded, index, reason)) for index, reason in result.skipped]


def not_written_line(loaded: LoadedPlan, index: int, reason: str) -> str:
    """The line said for action ``index`` of ``loaded`` held back for ``reason``:
    ``plan.yaml:LINE: actions[i] (ACTION TARGET) not written: REASON``."""
    action = loaded.plan.actions[index]
    return (f"{loaded.path}:{loaded.action_lines[index]}: actions[{index}] "
            f"({action.action} {action.target}) not written: {reason}")


def add_checkpoint_key_warnings(loaded: LoadedPlan, src: Path, result: RewriteResult) -> None:
    """Add to ``result.warnings`` one warning per ``own_call`` edit that changes the program's
    state_dict keys, where SRC saves or loads them (:func:`.checkpoint_keys.warnings`; SRC is read
    only where there is such an edit): ``rewrite`` prints them, and ``validate`` says the same
    for the same diff."""
    if result.key_changes:
        from .checkpoint_keys import warnings

        result.warnings += warnings(loaded, result.key_changes, src)


def not_written(result: RewriteResult) -> list[int]:
    """The indices of the actions whose edit is not in the rewritten tree, sorted: held back
    (``skipped``), or left as written where the target's own decorator has other options."""
    return sorted({i for i, _ in result.skipped} | set(result.left_as_written))
