"""The one error type every stage raises for bad input, rendered ``path:line:col: message``.

The CLI turns a :class:`StackpartError` into one line on stderr and exit code 2 (the ruff/black
convention for usage and input errors); nothing is written when one is raised.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


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


@dataclass
class ConfigError(StackpartError):
    """Bad input in the harness configuration that only loading the harness or the built model
    shows: ``harness.call`` names a method the model does not have, ``harness.model`` a callable
    the file does not define, a shape repeats another once the inputs' defaults apply. Raised
    where the user's code runs (a harness call) but never the user's code failing, so diagnose and
    validate let it through as the error it is (exit 2, nothing written) rather than as a harness
    failure, whose report is the product.

    Attributes:
        field: the ``harness:`` field at fault (``call``, ``model``, ``shapes[1]``,
            ``shapes[0].seq``), for the plan's line of it.
    """

    field: str | None = None


def near_names(name: str, candidates: Iterable[str], n: int = 3) -> str | None:
    """A ``did you mean`` hint listing up to ``n`` candidates close to ``name``, or None.

    Closeness is difflib's ratio with cutoff 0.6 (its default), the same measure Python's own
    ``NameError`` suggestions approximate.
    """
    matches = difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)
    if not matches:
        return None
    return "did you mean " + ", ".join(repr(m) for m in matches) + "?"


#: The most directory entries :func:`near_path` compares (a huge folder is not read to the end).
MAX_NEAR_ENTRIES = 10_000


def near_path(path: str | os.PathLike[str], shown: str | None = None, *, dirs: bool | None = None) -> str | None:
    """A ``did you mean`` hint for a path that does not exist: entries of its folder close to
    its name (``harnes.py`` -> ``harness.py``, ``plna.yaml`` -> ``plan.yaml``), written the way
    the user wrote the path (``shown``, default ``path``), or None.

    ``dirs``: True suggests only folders, False only files, None both.
    """
    p = Path(path)
    parent = p.parent
    names = []
    try:
        with os.scandir(parent) as it:
            for i, entry in enumerate(it):
                if i >= MAX_NEAR_ENTRIES:
                    break
                try:
                    if dirs is None or entry.is_dir() == dirs:
                        names.append(entry.name)
                except OSError:
                    continue
    except OSError:
        return None
    matches = difflib.get_close_matches(p.name, names, n=3, cutoff=0.6)
    if not matches:
        return None
    base = Path(shown if shown is not None else str(path)).parent
    return "did you mean " + ", ".join(repr(m if str(base) == "." else (base / m).as_posix()) for m in matches) + "?"


def src_dir(value: str | os.PathLike[str]) -> Path:
    """SRC as a command takes it: an existing folder.

    Raises:
        StackpartError: one line naming SRC as given: it does not exist (with the near folder
            names beside it), it is a file (pass its folder), or it is something else.
    """
    path = Path(value)
    if path.is_dir():
        return path
    if not os.path.lexists(path):
        raise StackpartError("SRC does not exist; expected the folder of the model's source", path=str(value),
                             hint=near_path(path, str(value), dirs=True))
    if path.is_file():
        parent = path.parent.as_posix()
        raise StackpartError("SRC is a file; expected the folder of the model's source", path=str(value),
                             hint=f"pass its folder, {parent!r}")
    raise StackpartError("SRC is not a directory; expected the folder of the model's source", path=str(value))
