"""Check one file: parse, build the facts, run the rules in one batched pass, drop suppressed
findings, and (``fix=True``) apply the safe fixes and check again.

The text reaches LibCST only through :func:`rewriter.source.parse_module` (CPython's parser as the
gate), and all LibCST work runs in :func:`rewriter.source.run_deep`'s thread (a large stack, a
raised recursion limit), so a deeply nested file that CPython accepts is checked like any other;
one that still exceeds the limits is a ``skipped:`` line, never a crash or a traceback.

Suppression comments follow ruff's ``noqa`` placement: ``# stackpart: ignore[SP101]`` (codes
comma-separated) or a bare ``# stackpart: ignore`` at the end of the finding's first line, or alone
on the line just above it. Comments are found with :mod:`tokenize`, so the text inside a string is
never taken for a suppression.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..compile_facts import SUPPRESS_RE, suppressed_codes
from ..errors import StackpartError
from ..source import TOO_DEEP, Skipped, parse_module, run_deep
from ..splice import splice
from .facts import FileFacts
from .project import FileView, local_view
from .rule import FileResult, Finding, Report, Rule

MAX_FIX_ROUNDS = 3


def suppressions(text: str) -> dict[int, set[str] | None]:
    """``line -> codes`` suppressed on that line (None: every code). Own-line comments cover the next line."""
    if "stackpart" not in text:
        return {}
    out: dict[int, set[str] | None] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return {}
    lines = text.splitlines()
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        match = SUPPRESS_RE.search(tok.string)
        if not match:
            continue
        codes = suppressed_codes(match)
        line = tok.start[0]
        own_line = not lines[line - 1][: tok.start[1]].strip()
        target = line + 1 if own_line else line
        prev = out.get(target, set())
        out[target] = None if codes is None or prev is None else prev | codes
    return out


def is_suppressed(finding: Finding, table: dict[int, set[str] | None]) -> bool:
    if finding.line not in table:
        return False
    codes = table[finding.line]
    return codes is None or finding.code in codes


class _Replace(cst.CSTTransformer):
    """Swap nodes by identity (the rules' fixes), outermost first."""

    def __init__(self, replacements: dict[cst.CSTNode, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.replacements.get(original_node, updated_node)


def visit_types(rules: Sequence[type[Rule]]) -> set[str]:
    """The node class names the rules have ``visit_<Name>`` methods for."""
    return {name[6:] for cls in rules for name in dir(cls) if name.startswith("visit_") and name[6:][:1].isupper()}


def run_rules(
    module: cst.Module, rules: Sequence[type[Rule]], path: str, view: FileView | None = None
) -> tuple[cst.Module, list[tuple[Finding, Report]]]:
    """All findings of ``rules`` on ``module`` (suppressed ones too), in position order.

    ``view``: what the project knows of this file (:mod:`.project`). A finding in code that a
    compile reaches from elsewhere (another file, or the model holding this block) says where
    that compile is (``... (reached from the torch.compile at train.py:12)``) and carries the
    files of that reach in ``caused_by``.

    Returns the module the reports' nodes belong to (the metadata wrapper's copy) with them.
    """
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # the module is ours alone
    methods: dict[str, list] = {}
    instances = []
    facts = FileFacts(wrapper, frozenset(visit_types(rules)), view)
    for cls in rules:
        rule = cls(facts, path)
        instances.append(rule)
        for name in visit_types([cls]):
            methods.setdefault(name, []).append(getattr(rule, f"visit_{name}"))
    for node in facts.nodes:
        for method in methods.get(type(node).__name__, ()):
            method(node)
    reports = [r for v in instances for r in v.reports]
    if not reports:
        return wrapper.module, []
    positions = wrapper.resolve(PositionProvider)
    out = []
    for r in reports:
        pos = positions[r.node]
        message, caused_by = r.message, frozenset(r.related)
        traced = facts.traced_by(r.node)
        if traced is not None and traced[1].via is not None:
            message += f" ({traced[1].via})"
        if view is not None and traced is not None and traced[1].origin is not None:
            message += f" (reached from the torch.compile at {traced[1].origin})"
            caused_by |= traced[1].files
        finding = Finding(
            code=r.rule.CODE,
            name=r.rule.NAME,
            message=message,
            path=path,
            line=pos.start.line,
            col=pos.start.column + 1,
            end_line=pos.end.line,
            end_col=pos.end.column + 1,
            fixable=r.replacement is not None,
            caused_by=caused_by,
        )
        out.append((finding, r))
    out.sort(key=lambda fr: (fr[0].line, fr[0].col, fr[0].code))
    # one finding per rule and position (a node reached twice, e.g. through an alias)
    unique = {(f.code, f.line, f.col): (f, r) for f, r in reversed(out)}
    return wrapper.module, sorted(unique.values(), key=lambda fr: (fr[0].line, fr[0].col, fr[0].code))


def check_text(
    text: str, path: str, rules: Sequence[type[Rule]], fix: bool = False, tree: ast.Module | None = None,
    view: FileView | None = None,
) -> FileResult:
    """Check one file's text.

    Args:
        text: the decoded source.
        path: the path to print in findings.
        rules: the selected rule classes.
        fix: apply every unsuppressed finding's safe fix, then check the result again (up to
            three rounds, for fixes that expose further fixable code).
        tree: the ``ast`` of ``text`` from :func:`rewriter.source.check_syntax`, when the caller
            has it (it is the gate; without it the gate runs here).
        view: what the project knows of this file (:mod:`.project`); None: the file's own
            reach (:func:`~rewriter.check.project.local_view`: the blocks of a model compiled
            in this file), computed from ``tree``.

    Returns:
        a :class:`FileResult`; ``fixed`` is the new text when a fix changed it. A syntax error is
        returned as ``error`` (``path:line:col: syntax error: ...``), a file nested too deep for
        the parser (or otherwise refused by :func:`rewriter.source.parse_module`) as ``skipped``;
        neither is raised.
    """
    result = FileResult(path=path, parsed=True)
    try:
        if view is None:
            try:
                view = local_view(tree if tree is not None else ast.parse(text), path)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                view = None  # the gate below says why (or LibCST reads a newer syntax alone)
        module = parse_module(text, path, tree)
        run_deep(_check_module, module, text, path, rules, fix, result, view)
    except Skipped as exc:
        result.skipped = str(exc)
    except StackpartError as exc:
        result.error = str(exc)
    except RecursionError:
        result.findings, result.initial, result.fixed = [], [], None
        result.skipped = f"{path}: skipped: {TOO_DEEP} (LibCST's visitors: maximum recursion depth exceeded)"
    return result


def text_sha256(text: str) -> str:
    """The digest :attr:`FileResult.fixed_from` holds (the decoded text, lone surrogates kept)."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check_module(module: cst.Module, text: str, path: str, rules: Sequence[type[Rule]], fix: bool, result: FileResult,
                  view: FileView | None = None) -> None:
    """:func:`check_text`'s LibCST work, filling ``result`` (run in the deep thread)."""
    current = text
    original = module
    for round_ in range(MAX_FIX_ROUNDS + 1):
        table = suppressions(current)
        module, reports = run_rules(module, rules, path, view)
        live = [(f, r) for f, r in reports if not is_suppressed(f, table)]
        result.findings = [f for f, _ in live]
        if round_ == 0:
            result.initial = result.findings
        fixes = {r.node: r.replacement for _, r in live if r.replacement is not None}
        if not fix or not fixes or round_ == MAX_FIX_ROUNDS:
            break
        module = module.visit(_Replace(fixes))
        if module.code == current:
            break
        current = module.code
        result.fixed = current
    if result.fixed is not None:
        # Only the lines a fix edited change: LibCST's print of the rest can differ from the file
        # (``except OSError :``, a lone-CR file's final ``\r``), the same splice as ``rewrite``'s.
        spliced = splice(text, original, module)
        result.fixed = None if spliced == text else spliced
        result.fixed_from = text_sha256(text) if result.fixed is not None else None
