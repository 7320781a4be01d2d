"""Facts about compile calls in source that ``stackpart check``'s rules, the plan's consistency
rules and the ``compile`` action all read, kept here so that each reads them the same way and no
action imports a check rule (docs/design.md, "Where each kind of change goes").

- the ``# stackpart: ignore[CODES]`` comment syntax (:data:`SUPPRESS_RE`, :func:`suppressed_codes`);
- the literal ``fullgraph``/``mode`` of a ``torch.compile(...)`` call (:func:`options`);
- the size of a function's body as SP109 reads it (:func:`body_size`, :data:`SMALL_STATEMENTS`).
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

#: A suppression comment: ``# stackpart: ignore`` (every code) or ``# stackpart: ignore[SP101,SP109]``.
SUPPRESS_RE = re.compile(r"#\s*stackpart:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")

#: A function of at most this many top-level statements (and no loop) is a small region for SP109.
SMALL_STATEMENTS = 3


def suppressed_codes(match: re.Match[str]) -> set[str] | None:
    """The codes a :data:`SUPPRESS_RE` match names, upper-cased (None: every code)."""
    if match.group(1) is None:
        return None
    return {c.strip().upper() for c in match.group(1).split(",") if c.strip()}


def literal_bool(expr: cst.BaseExpression | None) -> bool | None:
    """``True``/``False`` written as a literal, else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def literal_str(expr: cst.BaseExpression | None) -> str | None:
    """A string written as one literal, else None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name`` of ``call``, or None."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def options(call: cst.Call | None) -> tuple[bool | None, str | None]:
    """``(fullgraph, mode)`` literals of a ``torch.compile(...)`` call (None when absent)."""
    if call is None:
        return None, None
    fg, mode = keyword(call, "fullgraph"), keyword(call, "mode")
    return literal_bool(fg.value if fg else None), literal_str(mode.value if mode else None)


def body_size(func: cst.FunctionDef) -> int:
    """Top-level statements of ``func`` (docstring excluded); a loop counts as large: a
    whole-model ``forward`` is ``h = embed(x); for block in self.blocks: ...; return h``."""
    if m.findall(func.body, m.For() | m.While()):
        return SMALL_STATEMENTS + 1
    body = list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else [func.body]
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        body = body[1:]
    return len(body)
