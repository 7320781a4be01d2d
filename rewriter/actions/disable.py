"""``disable``: keep the target eager with ``@torch.compiler.disable``.

For code that resists capture (MoE routing, KV-cache management, data-dependent control flow):
Dynamo skips the frame instead of breaking the surrounding graph at an arbitrary point
(torch.compiler.disable docs). ``recursive: false`` skips only this frame, not its callees.
A target already disabled is left alone, with a warning where its own decorator's ``recursive``
is not the plan's (:mod:`.written`).
"""

from __future__ import annotations

import libcst as cst

from ..plan import DisableAction
from .base import TargetedCommand, find_decorator
from .written import code, flow, note_other_options, options

DISABLE_DECORATORS = {"torch.compiler.disable", "torch._dynamo.disable"}


class DisableCommand(TargetedCommand):
    """Decorate the target with ``torch.compiler.disable``."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "keep the target eager: @torch.compiler.disable"
    action: DisableAction

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        dec = find_decorator(func, DISABLE_DECORATORS, self.imports)
        if dec is not None:
            self._note_other_options(dec)
            return func
        expr = f"{self.decorator_torch()}.compiler.disable"
        if not self.action.recursive:
            expr += "(recursive=False)"
        return self.add_decorator(func, expr)

    def _note_other_options(self, dec: cst.Decorator) -> None:
        """Where the target's own disable decorator is not recursive as the plan asks, say so
        (:func:`.written.note_other_options`). ``reason=`` (a message for Dynamo's logs) is no difference."""
        asked = f"({flow({'recursive': self.action.recursive})[1:-1]})"
        note_other_options(
            self, dec, code(dec), options(dec), "disabled", {"recursive": self.action.recursive}, {"recursive": True},
            plan_asks=f"the plan asks {asked}", compare="compare it by hand", ignored=("reason",),
            differs=lambda _diff: (
                f"not as the plan asks {asked}: the decorator is left as written and the plan's disable is not in the "
                "tree; edit the decorator by hand, or drop this action (recursive=False skips only this frame, not its "
                "callees: torch.compiler.disable docs)"))
