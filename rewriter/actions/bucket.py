"""``bucket``: ``@pad_to_bucket(arg, dim=, buckets=, pad_value=)`` on the target, from the helper
rendered into the tree's vendored ``_stackpart/bucketing.py``.

Unsafe (it changes what runs): written only with ``--unsafe`` or after a passing validation.
The decorator goes outermost so the padding runs eagerly, before any compiled frame sees the
size; compiled code downstream then meets only the bucket sizes (partitioning-the-stack,
"Am I recompiling? → bucket shapes").
"""

from __future__ import annotations

import libcst as cst

from ..plan import BucketAction
from .base import TargetedCommand, call_args, decorator_name, py_literal

HELPER = "pad_to_bucket"
HELPER_MODULE = "bucketing"
TEMPLATE = "bucketing.py.j2"


class BucketCommand(TargetedCommand):
    """Decorate the target with the vendored shape-bucketing helper."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "shape bucketing: pad a dim to the next bucket, trim outputs back"
    action: BucketAction

    def needs_torch(self) -> bool:
        return False

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        if any(decorator_name(d) == HELPER for d in func.decorators):
            return func
        self.generate(HELPER_MODULE, TEMPLATE)
        self.add_vendored_import(HELPER_MODULE, HELPER)
        kwargs = {
            "dim": self.action.dim,
            "buckets": self.action.buckets,
            "pad_value": self.action.pad_value,
        }
        expr = f"{HELPER}({py_literal(self.action.arg)}, {call_args(kwargs)})"
        return self.add_decorator(func, expr, outermost=True)
