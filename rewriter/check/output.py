"""Findings as text, JSON, GitHub Actions annotations or SARIF 2.1.0.

* text: ``path:line:col: SP101 message`` (ruff's layout), ``[*]`` after fixable findings;
  ``path:line:col: SP101 note: message`` for a finding that does not fail (``severity`` note).
* json: ``{"version": 1, "findings": [...], "errors": [...], "drift": {...}, "files": {...}}``.
* github: ``::warning file=...,line=...,col=...,endLine=...,endColumn=...,title=...::message``
  (``::notice`` for a note),
  escaped as the Actions toolkit does (``%``, CR, LF in data; also ``:`` and ``,`` in properties).
* sarif: one run of tool ``stackpart`` with every selected rule in ``tool.driver.rules`` and one
  result per finding (OASIS SARIF 2.1.0; the subset GitHub code scanning reads).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import __version__
from .rule import Finding, Rule

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URL = "docs/rules/{code}.md"


@dataclass
class Outcome:
    """Everything one ``stackpart check`` run found.

    Attributes:
        findings: unsuppressed findings of all files, in file then position order.
        errors: one line per file that could not be read or parsed.
        skipped: one line per file not checked (``path: skipped: why``: not a regular file, over
            the size cap, nested too deep for the parser, a link leaving the tree): warnings.
        drift_files: files that differ from what the configured plan asks.
        drift_diff: the git-style diff that would bring them in line.
        drift_lines: ``{drift file: its first line the plan changes}`` (:func:`.drift.first_changed_line`),
            where a drift finding is placed; 1 for a file the plan creates.
        plan: the plan path, when one is configured.
        checked, parsed: files given / files that passed the prefilter and were parsed.
        fixed: files written by ``--fix``, each once (the plan's edits and a rule's fix in one
            file are one file).
        fix_diff: with ``--diff``, the git-style diff of the safe fixes (nothing written).
        project: what the project read cost (``project_files``, ``project_parsed``, ``extra``:
            see :func:`rewriter.check.runner.check_files`); empty when no project was read.
    """

    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    drift_files: list[str] = field(default_factory=list)
    drift_diff: str = ""
    drift_lines: dict[str, int] = field(default_factory=dict)
    plan: str | None = None
    checked: int = 0
    parsed: int = 0
    fixed: list[str] = field(default_factory=list)
    fix_diff: str = ""
    project: dict = field(default_factory=dict)
    #: Why ``--fix`` did not write the plan's pending edits (the apply gate refused), or None.
    drift_refused: str | None = None
    #: The plan's actions on the given files the drift check leaves out, as ``rewrite`` says them
    #: (``plan.yaml:LINE: actions[i] (ACTION TARGET) not written: why``: :func:`.drift.plan_drift`).
    drift_not_written: list[str] = field(default_factory=list)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_text(outcome: Outcome) -> str:
    lines = [
        f"{f.path}:{f.line}:{f.col}: {f.code} {'note: ' if f.severity == 'note' else ''}{f.message}{' [*]' if f.fixable else ''}"
        for f in outcome.findings
    ]
    for path in outcome.drift_files:
        lines.append(f"{path}:{outcome.drift_lines.get(path, 1)}:1: plan drift: differs from what {outcome.plan} asks (diff below)")
    text = "\n".join(lines) + ("\n" if lines else "")
    return text + outcome.drift_diff + outcome.fix_diff


def render_json(outcome: Outcome) -> str:
    return json.dumps(
        {
            "version": 1,
            "findings": [f.as_dict() for f in outcome.findings],
            "errors": outcome.errors,
            "skipped": outcome.skipped,
            "drift": {"plan": outcome.plan, "files": outcome.drift_files, "diff": outcome.drift_diff,
                      "lines": {p: outcome.drift_lines.get(p, 1) for p in outcome.drift_files}},
            "fix_diff": outcome.fix_diff,
            "files": {"checked": outcome.checked, "parsed": outcome.parsed, "fixed": outcome.fixed},
        },
        indent=2,
    ) + "\n"


def render_github(outcome: Outcome) -> str:
    out = []
    for f in outcome.findings:
        props = (
            f"file={_escape_prop(f.path)},line={f.line},col={f.col},endLine={f.end_line},"
            f"endColumn={f.end_col},title={_escape_prop(f'{f.code} {f.name}')}"
        )
        kind = "notice" if f.severity == "note" else "warning"
        out.append(f"::{kind} {props}::{_escape_data(f'{f.code} {f.message}')}\n")
    for path in outcome.drift_files:
        out.append(
            f"::error file={_escape_prop(path)},line={outcome.drift_lines.get(path, 1)},title=plan drift::"
            f"{_escape_data(f'differs from what {outcome.plan} asks; run stackpart rewrite --apply')}\n"
        )
    for error in outcome.errors:
        out.append(f"::error ::{_escape_data(error)}\n")
    for line in outcome.skipped:
        out.append(f"::warning ::{_escape_data(line)}\n")
    return "".join(out)


def artifact_location(path: str) -> dict[str, str]:
    """SARIF's ``artifactLocation`` of a finding's path: a URI reference (SARIF 2.1.0, 3.10.3),
    so a space, ``%``, non-ASCII or a control character in a name is percent-encoded (UTF-8) and
    an absolute path is a ``file:`` URI (relative ones are relative to ``%SRCROOT%``, the
    working directory the paths were given from)."""
    from pathlib import PurePath
    from urllib.parse import quote

    if PurePath(path).is_absolute():
        return {"uri": "file://" + quote(PurePath(path).as_posix(), safe="/", errors="surrogateescape")}
    return {"uri": quote(PurePath(path).as_posix(), safe="/", errors="surrogateescape"), "uriBaseId": "%SRCROOT%"}


def render_sarif(outcome: Outcome, rules: Sequence[type[Rule]]) -> str:
    index = {r.CODE: i for i, r in enumerate(rules)}
    driver_rules = [
        {
            "id": r.CODE,
            "name": r.NAME,
            "shortDescription": {"text": r.SUMMARY},
            "fullDescription": {"text": r.EXPLANATION.split("\n\n")[0].replace("\n", " ")},
            "helpUri": DOCS_URL.format(code=r.CODE),
            "help": {"text": r.EXPLANATION, "markdown": r.EXPLANATION},
            "defaultConfiguration": {"level": "warning"},
        }
        for r in rules
    ]
    results = []
    for f in outcome.findings:
        results.append(
            {
                "ruleId": f.code,
                "ruleIndex": index.get(f.code, 0),
                "level": "note" if f.severity == "note" else "warning",
                "message": {"text": f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": artifact_location(f.path),
                            "region": {
                                "startLine": f.line,
                                "startColumn": f.col,
                                "endLine": f.end_line,
                                "endColumn": f.end_col,
                            },
                        }
                    }
                ],
            }
        )
    notifications = [{"level": "error", "message": {"text": e}} for e in outcome.errors]
    notifications += [{"level": "warning", "message": {"text": w}} for w in outcome.skipped]
    notifications += [
        {"level": "error", "message": {"text": f"{p}: plan drift: differs from what {outcome.plan} asks"},
         "locations": [{"physicalLocation": {"artifactLocation": artifact_location(p),
                                             "region": {"startLine": outcome.drift_lines.get(p, 1)}}}]}
        for p in outcome.drift_files
    ]
    run: dict[str, object] = {
        "tool": {
            "driver": {
                "name": "stackpart",
                "version": __version__,
                "rules": driver_rules,
            }
        },
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    if notifications:
        run["invocations"] = [{"executionSuccessful": not outcome.errors, "toolExecutionNotifications": notifications}]
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2) + "\n"


def render(outcome: Outcome, fmt: str, rules: Sequence[type[Rule]]) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "json":
        return render_json(outcome)
    if fmt == "github":
        return render_github(outcome)
    if fmt == "sarif":
        return render_sarif(outcome, rules)
    return render_text(outcome)
