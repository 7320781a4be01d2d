"""One traversal of a file for many actions: linear cost in file size plus actions.

Run one by one, each :class:`~rewriter.actions.base.TargetedCommand` walks the module's top level
and re-runs LibCST's ``AddImportsVisitor`` over the whole file, so a plan of K actions on a file
of N statements costs K x N (docs/decisions.md, "One traversal for many actions").
:class:`BatchCommand` visits the file once, on the paths to all of its commands' targets, hands
each target to its commands in plan order, and lets the codemod framework add the requested
imports in one pass at the end.

Only commands that edit nothing but the target node itself (``VISIT_TARGET_BODY = False`` and no
metadata: compile, disable, mark_dynamic, bucket, allocator, compile_cache, dynamo_config) are batched;
:func:`plan_passes` keeps any other command (``kernel``, which rewrites calls inside the body) as a
group of its own, in plan order.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand

from ..targets import SkipTypeChecking, is_overload
from .base import NoCopyMetadata, TargetedCommand, imported_names, torch_alias


class ActionFailed(Exception):
    """A batched command raised while rewriting its target.

    Attributes:
        command: the command that raised (its ``plan_index`` names the plan action).
        error: the exception it raised.
    """

    def __init__(self, command: TargetedCommand, error: Exception) -> None:
        super().__init__(str(error))
        self.command = command
        self.error = error


def batchable(command: type[TargetedCommand] | TargetedCommand) -> bool:
    """Whether ``command`` (a command or its class) only rewrites its target node (see the
    module docstring)."""
    return not command.VISIT_TARGET_BODY and not command.METADATA_DEPENDENCIES


class BatchCommand(SkipTypeChecking, NoCopyMetadata, VisitorBasedCodemodCommand):
    """Apply several batchable commands of one file in a single traversal.

    The commands must share this command's :class:`CodemodContext` (their import requests land
    in its scratch and are written once, after the traversal). Each sees the original module in
    ``visit_Module`` (its ``tree``, ``imports`` and ``torch`` name); commands on the same target
    run in the order given, each on the previous one's result, as they would one by one.

    Raises:
        ActionFailed: a command's ``rewrite`` raised; the tree is not returned.
    """

    DESCRIPTION = "apply several targeted actions in one pass"

    def __init__(self, context: CodemodContext, commands: Sequence[TargetedCommand]) -> None:
        super().__init__(context)
        for command in commands:
            if command.context is not context:
                raise ValueError("batched commands must share the batch's CodemodContext")
            if not batchable(command):
                raise ValueError(f"{type(command).__name__} visits its target's body: not batchable")
        self.commands = list(commands)
        self.by_target: dict[str, list[TargetedCommand]] = {}
        for command in self.commands:
            self.by_target.setdefault(command.qualname, []).append(command)
        #: Qualnames of every definition that encloses a target (the paths to descend).
        self.enclosing = {
            ".".join(parts[:i]) for q in self.by_target for parts in [q.split(".")] for i in range(1, len(parts))
        }
        self._stack: list[str] = []

    def visit_Module(self, node: cst.Module) -> bool:
        imports, alias = imported_names(node), torch_alias(node)  # once for all commands
        for command in self.commands:
            command.prepare(node, imports, alias)
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        # A simple statement cannot hold a def: nothing under it is a target.
        if isinstance(node, cst.SimpleStatementLine) or self.skips(node):
            super().on_visit(node)
            return False
        return super().on_visit(node)

    def _enter(self, name: str) -> bool:
        self._stack.append(name)
        return ".".join(self._stack) in self.enclosing

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self._enter(node.name.value)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._stack.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return self._enter(node.name.value)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        qual = ".".join(self._stack)
        self._stack.pop()
        if is_overload(original):  # a typing stub: the implementation is the target
            return updated
        for command in self.by_target.get(qual, ()):
            try:
                updated = command.rewrite(updated)
            except Exception as exc:  # attributed to its action by the caller
                raise ActionFailed(command, exc) from exc
        return updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        for command in self.commands:  # what each edits outside its target, in plan order
            try:
                updated = command.rewrite_module(updated)
            except Exception as exc:  # attributed to its action by the caller
                raise ActionFailed(command, exc) from exc
        return updated


def plan_passes(
    specs: Sequence[tuple[type[TargetedCommand], tuple]], filename: str
) -> list[tuple[VisitorBasedCodemodCommand, list[TargetedCommand]]]:
    """Build one file's commands, in plan order, grouped into the passes to transform it with.

    Args:
        specs: ``(command class, constructor arguments after the context)`` per action.
        filename: the file's path relative to SRC (for each pass's :class:`CodemodContext`).

    Returns:
        ``(runner, commands)`` per pass: consecutive batchable commands share one context and
        run as one :class:`BatchCommand`; any other command is its own runner, with its own
        context (so no pass re-adds another pass's imports).
    """
    out: list[tuple[VisitorBasedCodemodCommand, list[TargetedCommand]]] = []
    run: list[TargetedCommand] = []
    context = CodemodContext(filename=filename)
    for cls, args in specs:
        if batchable(cls):
            run.append(cls.for_batch(context, *args))
            continue
        if run:
            out.append((BatchCommand(context, run), run))
            run, context = [], CodemodContext(filename=filename)
        command = cls(CodemodContext(filename=filename), *args)
        out.append((command, [command]))
    if run:
        out.append((BatchCommand(context, run), run))
    return out
