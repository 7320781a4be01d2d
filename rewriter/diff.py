"""Git-style unified diffs (``diff --git a/P b/P``) that ``git apply`` takes from SRC.

difflib (the standard library) writes the hunks; this module adds git's file headers, the
``new file mode`` line for generated files and the ``\\ No newline at end of file`` marker,
which difflib leaves out and ``git apply`` needs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Protocol

NO_NEWLINE = "\\ No newline at end of file\n"


class Change(Protocol):
    relpath: str
    old: bytes | None
    new: bytes


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    # Split on "\n" only, as git does: str.splitlines also splits on form feed, \x0b, \x1c-\x1e,
    # \x85, U+2028/2029 and a lone \r, which would put "no newline" markers mid-file.
    return re.findall(r"[^\n]*\n|[^\n]+\Z", data.decode("utf-8", "surrogateescape"))


def _insertions(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]] | None:
    """The opcodes of ``a`` -> ``b`` when ``b`` is ``a`` with lines inserted (what a rewrite's
    splice writes), matched greedily in one linear pass; None when it is not.

    difflib's matcher, with its "autojunk" heuristic (a line filling more than 1% of a file of
    200+ lines is junk: a blank line usually is), pairs the blank lines around an inserted
    decorator with other blank lines and prints ``-``/``+`` pairs of identical lines (55 of 5,014
    rewrites in benchmarks/roundtrip_corpus.py); without the heuristic it is quadratic on a large
    file. An insertion-only change needs neither.
    """
    if len(b) < len(a):
        return None
    ops: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    while i < len(a):
        if j == len(b):
            return None
        if a[i] == b[j]:
            i0, j0 = i, j
            while i < len(a) and j < len(b) and a[i] == b[j]:
                i += 1
                j += 1
            ops.append(("equal", i0, i, j0, j))
            continue
        j0 = j
        while j < len(b) and b[j] != a[i]:
            j += 1
        ops.append(("insert", i, i, j0, j))
    if j < len(b):
        ops.append(("insert", i, i, j, len(b)))
    return ops


class _Matcher(difflib.SequenceMatcher):
    """A SequenceMatcher whose opcodes are given (:func:`_insertions`)."""

    def __init__(self, a: list[str], b: list[str], ops: list[tuple[str, int, int, int, int]]) -> None:
        super().__init__(None, a, b, autojunk=False)
        self._ops = ops

    def get_opcodes(self) -> list[tuple[str, int, int, int, int]]:  # type: ignore[override]
        return list(self._ops)


def _range(start: int, stop: int) -> str:
    """A hunk header's ``start,length`` as ``difflib.unified_diff`` writes it."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


def _hunks(a: list[str], b: list[str], fromfile: str, tofile: str, n: int = 3) -> list[str]:
    """``difflib.unified_diff``'s output, with insertion-only opcodes when they exist."""
    ops = _insertions(a, b)
    if ops is None:
        return list(difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile, n=n))
    out: list[str] = []
    for group in _Matcher(a, b, ops).get_grouped_opcodes(n):
        if not out:
            out += [f"--- {fromfile}\n", f"+++ {tofile}\n"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
            else:
                out += ["+" + line for line in b[j1:j2]]
    return out


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
            '"': '\\"', "\\": "\\\\"}


def quoted(path: str) -> str:
    """``path`` as git writes it in a diff header: as is, or in double quotes with C escapes
    when it holds a control character, ``"`` or ``\\`` (git's ``quote_c_style``). Unquoted, a
    tab in a name ends it for ``git apply`` (what follows reads as a timestamp); non-ASCII text
    is left as UTF-8, which ``git apply`` reads quoted or not."""
    if not any(c in _ESCAPES or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return path
    body = "".join(_ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in path)
    return f'"{body}"'


def file_diff(relpath: str, old: bytes | None, new: bytes) -> str:
    """The diff of one file (empty when the bytes are equal)."""
    if old == new:
        return ""
    a, b = quoted(f"a/{relpath}"), quoted(f"b/{relpath}")
    header = [f"diff --git {a} {b}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    body = _hunks(
        _lines(old),
        _lines(new),
        fromfile="/dev/null" if old is None else a,
        tofile=b,
        n=3,
    )
    out = header
    for line in body:
        if line.startswith(("---", "+++")):
            out.append(line.rstrip("\n") + "\n")
        elif not line.endswith("\n"):
            out.append(line + "\n" + NO_NEWLINE)
        else:
            out.append(line)
    return "".join(out)


def unified_diff(changes: Iterable[Change]) -> str:
    """All changes as one patch, files in the order given."""
    return "".join(file_diff(c.relpath, c.old, c.new) for c in changes)
