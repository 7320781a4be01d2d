"""``bucket``: ``@pad_to_bucket(arg, dim=, buckets=, pad_value=)`` on the target, from the helper
rendered into the tree's vendored ``_stackpart/bucketing.py``.

Unsafe (it changes what runs): written only with ``--unsafe`` or after a passing validation.
The decorator goes outermost so the padding runs eagerly, before any compiled frame sees the
size; compiled code downstream then meets only the bucket sizes (partitioning-the-stack,
"Am I recompiling? → bucket shapes").
"""

from __future__ import annotations

import libcst as cst

from ..errors import StackpartError, near_names
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
        self._check_arg(func)
        self.generate(HELPER_MODULE, TEMPLATE)
        self.add_vendored_import(HELPER_MODULE, HELPER)
        kwargs = {
            "dim": self.action.dim,
            "buckets": self.action.buckets,
            "pad_value": self.action.pad_value,
        }
        expr = f"{HELPER}({py_literal(self.action.arg)}, {call_args(kwargs)})"
        return self.add_decorator(func, expr, outermost=True)

    def _check_arg(self, func: cst.FunctionDef) -> None:
        """``arg`` names a parameter of the target (the helper finds the tensor to pad by that
        name when the function is called; a misspelt one would pad nothing, silently).

        Raises:
            StackpartError: no such parameter and no ``**kwargs`` that could carry it (with the
                nearest parameter names).
        """
        p = func.params
        params = [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]
        if self.action.arg in params or isinstance(p.star_kwarg, cst.Param):
            return
        near = near_names(self.action.arg, [n for n in params if n not in ("self", "cls")])
        raise StackpartError(
            f"{self.action.arg!r} is not a parameter of {self.qualname}",
            hint=(f"{near} " if near else "") + "bucket pads the argument it names when the function is called",
        )
