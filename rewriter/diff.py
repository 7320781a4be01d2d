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


def file_diff(relpath: str, old: bytes | None, new: bytes) -> str:
    """The diff of one file (empty when the bytes are equal)."""
    if old == new:
        return ""
    header = [f"diff --git a/{relpath} b/{relpath}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    body = difflib.unified_diff(
        _lines(old),
        _lines(new),
        fromfile="/dev/null" if old is None else f"a/{relpath}",
        tofile=f"b/{relpath}",
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
