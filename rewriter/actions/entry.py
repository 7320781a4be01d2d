"""Shared by ``allocator`` and ``compile_cache``: one ``os.environ.setdefault`` at the top of the
entry function. ``setdefault`` keeps a value the user or the launcher already exported."""

from __future__ import annotations

import libcst as cst
from libcst.codemod.visitors import AddImportsVisitor

from .base import TargetedCommand, insert_statement, py_literal


class EnvDefaultCommand(TargetedCommand):
    """Insert ``os.environ.setdefault(VAR, value)`` at the top of the target."""

    VISIT_TARGET_BODY = False

    def needs_torch(self) -> bool:
        return False

    def env(self) -> tuple[str, str]:
        """The variable and its value."""
        raise NotImplementedError

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        assert self.tree is not None
        AddImportsVisitor.add_needed_import(self.context, "os")
        var, value = self.env()
        code = f"os.environ.setdefault({py_literal(var)}, {py_literal(value)})"
        return insert_statement(self.tree, func, code, binds={"os": "import os"})
