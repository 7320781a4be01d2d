"""The rule base class: a code, a message, its own VALID/INVALID examples and an optional safe fix.

Modelled on Fixit 2's ``LintRule`` (src/fixit/rule.py): a rule has ``visit_<Node>`` methods, and
every selected rule sees the nodes of a file from ONE traversal (the facts pass records the nodes
the rules' methods ask for, and the engine calls the methods in document order; LibCST's own
batched traversal cost as much again as the parse on large files). A rule calls
:meth:`Rule.report` with the node at fault, a message and, where a fix cannot change what the
program computes, the replacement node. The examples are class attributes; the test suite
(tests/test_check_rules.py) and the docs page (docs/rules/<code>.md) are generated from them, so
a rule's documentation and its tests are the same text.

Fixit itself is not used as the engine: its suppression syntax (``# lint-fixme``), configuration
(``[tool.fixit]``) and output are its own, and stackpart's contract (``# stackpart: ignore[SP101]``,
SP codes, SARIF, plan drift in the same run) would have to be rebuilt around it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

if TYPE_CHECKING:
    from .facts import FileFacts


# `torch.compile(`, `@torch.compile` at the end of a line, `x.compile(`: any compile call or decorator
COMPILE_NEEDLE = r"\bcompile[ \t]*(?:\(|$|#)"


@dataclass(frozen=True)
class Valid:
    """Code the rule must NOT report (a test asserts no finding)."""

    code: str
    note: str = ""


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report.

    Attributes:
        code: the example source.
        line: the 1-based line the (first) finding must be on.
        fixed: the source after ``--fix``, when the rule has a safe fix for this case; None means
            the finding carries no fix (a test asserts both ways).
        note: one line for the docs page.
    """

    code: str
    line: int
    fixed: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Finding:
    """One reported problem, 1-based line and column (columns count characters, as ruff's do).

    Attributes:
        code: the rule code, ``SP1xx``.
        name: the rule's kebab-case name.
        message: what is wrong and what to do, one paragraph.
        path: the file as given on the command line (POSIX separators).
        line, col, end_line, end_col: the node's span.
        fixable: whether ``--fix`` would change this finding's code.
    """

    code: str
    name: str
    message: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    fixable: bool = False
    #: ``"error"``: fails the check (exit 1); ``"note"``: reported, does not fail it (SP101 at a
    #: compile diagnose measured and kept, :mod:`rewriter.check.measured`).
    severity: str = "error"
    #: absolute paths of the project files this finding follows from (the file of the compile
    #: that reaches it, the model's...): a finding in a file not given is reported only when
    #: one of these is given (rewriter.check.project_reading). Not part of the report.
    caused_by: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "fixable": self.fixable,
            "severity": self.severity,
        }


@dataclass
class Report:
    """What a rule reported, before positions are computed and suppressions applied.

    Attributes:
        rule: the reporting rule class.
        node: the node at fault (its span becomes the finding's position).
        message: the finding's message.
        replacement: the node that replaces ``node`` under ``--fix`` (the safe fix), or None.
        related: absolute paths of other project files the finding follows from (SP101: the
            model class's file), besides the compile that traces ``node``.
    """

    rule: type[Rule]
    node: cst.CSTNode
    message: str
    replacement: cst.CSTNode | None = None
    related: tuple[str, ...] = ()


class Rule:
    """Base class of every ``stackpart check`` rule.

    Subclasses set the class attributes and implement ``visit_<Node>`` methods that call
    :meth:`report`. ``facts`` (:class:`~rewriter.check.facts.FileFacts`) answers the questions
    several rules share: is this node traced by a compiled function, which class does this name
    hold, does that class repeat a block.

    Class attributes:
        CODE: ``SP1xx``, stable forever (suppressions and configs name it).
        NAME: kebab-case name.
        SUMMARY: one line, the docs page title.
        EXPLANATION: Markdown: why it costs, what to do, when the rule is wrong; with sources.
        NEEDLES: regexes (bytes, multiline) that must ALL match a file's text for the rule to
            possibly fire; the runner parses a file only when some selected rule's needles all
            match (and the file mentions ``torch``).
        CALLS: names (last dotted component) of which one must be called or used as a decorator
            somewhere in the file (checked with the C ``ast`` parser before LibCST runs).
        IN_COMPILED: the rule reports only in code a compile reaches (a compiled function, or
            what it calls): a file that neither calls nor decorates with ``compile`` and that
            no compile in another file reaches holds no such code, and is not parsed for it.
            False for a rule about a call that is wrong anywhere (SP106).
        VALID / INVALID: the examples (see :class:`Valid`, :class:`Invalid`).
    """

    CODE: ClassVar[str]
    NAME: ClassVar[str]
    SUMMARY: ClassVar[str]
    EXPLANATION: ClassVar[str]
    NEEDLES: ClassVar[tuple[str, ...]]
    CALLS: ClassVar[frozenset[str]] = frozenset({"compile"})
    IN_COMPILED: ClassVar[bool] = True
    VALID: ClassVar[list[Valid]]
    INVALID: ClassVar[list[Invalid]]

    def __init__(self, facts: FileFacts, path: str) -> None:
        self.facts = facts
        self.path = path
        self.reports: list[Report] = []

    def report(self, node: cst.CSTNode, message: str, replacement: cst.CSTNode | None = None,
               related: tuple[str, ...] = ()) -> None:
        """Record a finding at ``node``; ``replacement`` (a node of the same kind) is its safe fix;
        ``related``: other project files it follows from (see :class:`Report`)."""
        self.reports.append(Report(type(self), node, message, replacement, related))


@dataclass
class FileResult:
    """The outcome of checking one file.

    Attributes:
        path: as given.
        findings: unsuppressed findings, sorted by position (after fixes, when fixing).
        initial: the findings before any fix was applied.
        fixed: the file's text after applying every safe fix, or None when nothing was fixable.
        fixed_from: sha256 of the text ``fixed`` was made from (a file edited since is not
            overwritten with it).
        error: a one-line parse/read error (``path:line:col: ...``), or None.
        parsed: whether the file passed the prefilter and was parsed.
        skipped: why the file was not checked (``path[:line[:col]]: skipped: ...``: not a regular
            file, over the size cap, nested too deep for the parser...), or None; a warning, not
            an error.
    """

    path: str
    findings: list[Finding] = field(default_factory=list)
    initial: list[Finding] = field(default_factory=list)
    fixed: str | None = None
    fixed_from: str | None = None
    error: str | None = None
    parsed: bool = False
    skipped: str | None = None
