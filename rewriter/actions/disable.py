"""``disable``: keep the target eager with ``@torch.compiler.disable``.

For code that resists capture (MoE routing, KV-cache management, data-dependent control flow):
Dynamo skips the frame instead of breaking the surrounding graph at an arbitrary point
(torch.compiler.disable docs). ``recursive: false`` skips only this frame, not its callees.
"""

from __future__ import annotations

import libcst as cst

from ..plan import DisableAction
from .base import TargetedCommand, has_decorator

DISABLE_DECORATORS = {"torch.compiler.disable", "torch._dynamo.disable"}


class DisableCommand(TargetedCommand):
    """Decorate the target with ``torch.compiler.disable``."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "keep the target eager: @torch.compiler.disable"
    action: DisableAction

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        if has_decorator(func, DISABLE_DECORATORS, self.imports):
            return func
        expr = f"{self.decorator_torch()}.compiler.disable"
        if not self.action.recursive:
            expr += "(recursive=False)"
        return self.add_decorator(func, expr)
