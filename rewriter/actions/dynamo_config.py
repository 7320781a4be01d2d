"""``dynamo_config``: ``torch._dynamo.config.<key> = <value>`` at the top of the entry function.

The knobs are the ones torch's own graph-break messages recommend for code the compiled region
needs (:data:`rewriter.plan.DYNAMO_CONFIG_KEYS`): ``capture_scalar_outputs`` for ``Tensor.item()``
/ ``.tolist()`` ("Unsupported Tensor.item() call with capture_scalar_outputs=False ... Hint: Set
`torch._dynamo.config.capture_scalar_outputs = True`", and "Data dependent operator" for
``aten._local_scalar_dense``, torch 2.13) and ``capture_dynamic_output_shape_ops`` for
``nonzero``/``unique``/boolean masks ("Dynamic shape operator ... Hint: Enable tracing of dynamic
shape operators with `torch._dynamo.config.capture_dynamic_output_shape_ops = True`"). Both are
defined in torch/_dynamo/config.py ("When this flag is set to False, we introduce a graph break
instead of capturing"). ``allow_unspec_int_on_nn_module`` is the one torch's recompile hint names
for an int attribute of an nn.Module that changes between calls ("torch.compile considers integer
attributes of the nn.Module to be static ... make this integer dynamic using
torch._dynamo.config.allow_unspec_int_on_nn_module = True, or convert this integer into a tensor",
torch 2.13; the knob is in torch >= 2.7), proposed by :mod:`rewriter.diagnose.value_guards`.
``recompile_limit`` (an integer) bounds the graphs of one code object; a
repeated block whose instances each guard on their own state (a per-layer cache) needs instances x
shapes of them, past which Dynamo runs the block eager without an error.

Dynamo reads them while it traces a frame, not when ``torch.compile`` is called (measured, torch
2.13: a function decorated at import, the flag set afterwards, traced with it), so the line must
run before the compiled code's first call: the top of the program's entry, like ``allocator`` and
``compile_cache`` (:mod:`.entry`). The attribute path needs only ``import torch``: ``torch._dynamo``
is one of ``torch/__init__.py``'s ``_lazy_modules``, imported on first access (torch 2.13).
"""

from __future__ import annotations

import ast

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ..errors import StackpartError
from ..plan import DynamoConfigAction
from .base import TargetedCommand, canonical, insert_statement


def _assigns(stmt: cst.BaseStatement, imports: dict[str, str], key: str) -> bool:
    """Whether ``stmt`` is ``torch._dynamo.config.<key> = ...`` (any value) however the module's
    imports spell it (``T._dynamo.config``, ``from torch._dynamo import config``; :func:`.base.canonical`):
    the line this action writes, with another value."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return False
    targets = stmt.body[0].targets
    if len(targets) != 1:
        return False
    full = get_full_name_for_node(targets[0].target) or ""
    return canonical(full, imports) == f"torch._dynamo.config.{key}"


class DynamoConfigCommand(TargetedCommand):
    """Insert one ``torch._dynamo.config.<key> = <value>`` line per setting at the top of the target.

    Idempotent: a line that is already there (whitespace aside) is kept; a line setting the same key
    to the other value at the top level of the target gets the value asked in place (the rest of
    the line, its comment included, kept), not contradicted by a second one. The user's other lines
    are never touched.
    """

    DESCRIPTION = "dynamo config at the entry point"
    VISIT_TARGET_BODY = False
    action: DynamoConfigAction

    def lines(self) -> list[tuple[str, str]]:
        """``(key, statement)`` per setting, in :data:`rewriter.plan.DYNAMO_CONFIG_KEYS` order."""
        return [(key, f"{self.torch}._dynamo.config.{key} = {value!r}") for key, value in self.action.settings.items()]

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        assert self.tree is not None
        imports = {"torch": "torch", **self.imports}
        settings = dict(self.action.settings.items())
        # reversed: each goes to the top, so the first setting ends up first
        for key, code in reversed(self.lines()):
            body = list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else []
            at = next((i for i, s in enumerate(body) if _assigns(s, imports, key)), None)
            if at is None:
                func = insert_statement(self.tree, func, code, binds={self.torch: self.torch_import()})
                continue
            # the program sets the key itself: its value is edited in place, the rest of the line kept
            line = body[at]
            assign = line.body[0]  # type: ignore[attr-defined]
            try:
                current = ast.literal_eval(self.tree.code_for_node(assign.value).strip())
            except (ValueError, SyntaxError):
                raise StackpartError(
                    f"{self._line(line)}: {key} = {self.tree.code_for_node(assign.value).strip()} is not a literal: the "
                    "program decides the value at run time; expected a literal True or False to edit; change it by hand "
                    "or drop the setting") from None
            if type(current) is type(settings[key]) and current == settings[key]:
                continue
            body[at] = line.with_changes(body=[assign.with_changes(value=cst.parse_expression(repr(settings[key])))])  # type: ignore[attr-defined]
            func = func.with_changes(body=func.body.with_changes(body=body))
        return func
