"""The one error type every stage raises for bad input, rendered ``path:line:col: message``.

The CLI turns a :class:`StackpartError` into one line on stderr and exit code 2 (the ruff/black
convention for usage and input errors); nothing is written when one is raised.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class StackpartError(Exception):
    """Bad input: a plan, a target, a source file or a harness that cannot be used.

    Attributes:
        message: what is wrong and what was expected, as one sentence.
        path: the file at fault (plan, source or harness), or None.
        line: 1-based line in ``path``, or None when unknown.
        col: 1-based column, or None.
        hint: what to do about it (e.g. near names), appended after the message.
        also: further errors found in the same pass, one rendered line each.
    """

    message: str
    path: str | None = None
    line: int | None = None
    col: int | None = None
    hint: str | None = None
    also: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
                if self.col is not None:
                    where += f":{self.col}"
            where += ": "
        text = where + self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


def near_names(name: str, candidates: Iterable[str], n: int = 3) -> str | None:
    """A ``did you mean`` hint listing up to ``n`` candidates close to ``name``, or None.

    Closeness is difflib's ratio with cutoff 0.6 (its default), the same measure Python's own
    ``NameError`` suggestions approximate.
    """
    matches = difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)
    if not matches:
        return None
    return "did you mean " + ", ".join(repr(m) for m in matches) + "?"
