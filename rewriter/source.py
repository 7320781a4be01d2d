"""Reading and writing the user's source files byte-faithfully, and keeping paths inside SRC.

A :class:`SourceFile` remembers the encoding, BOM, line endings and mode bits so that a rewrite
changes only the lines an action touches (LibCST itself round-trips the text exactly).
"""

from __future__ import annotations

import ast
import codecs
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import libcst as cst

from .errors import StackpartError, near_names

_CODING_RE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


@dataclass
class SourceFile:
    """One Python file of the user's tree.

    Attributes:
        relpath: POSIX path relative to SRC (as written in plan targets and diff headers).
        path: the absolute path on disk.
        text: the decoded text without BOM.
        encoding: the codec used to decode (``utf-8`` unless a PEP 263 cookie says otherwise).
        bom: whether the file starts with a UTF-8 BOM.
        mode: ``st_mode`` permission bits, kept on write.
        raw: the bytes as read (BOM included): the diff's old side, without a second read.
    """

    relpath: str
    path: Path
    text: str
    encoding: str = "utf-8"
    bom: bool = False
    mode: int = 0o644
    raw: bytes = b""

    def encode(self, text: str) -> bytes:
        """``text`` in this file's encoding, with its BOM when it had one."""
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data

    def parse(self) -> cst.Module:
        """Parse with LibCST.

        Raises:
            StackpartError: a syntax error, at its line and column in this file.
        """
        try:
            return cst.parse_module(self.text)
        except cst.ParserSyntaxError as exc:
            line, col, message = exc.raw_line, exc.raw_column + 1, exc.message
        # LibCST's parser reports where it gave up; CPython's names the real fault ("expected
        # ':'") at its own line, so prefer it when it also rejects the text.
        try:
            ast.parse(self.text, filename=self.relpath)
        except SyntaxError as exc:
            line, col, message = exc.lineno or line, exc.offset or col, exc.msg
        except (ValueError, RecursionError):
            pass
        raise StackpartError(f"syntax error: {message}", path=self.relpath, line=line, col=col)


def safe_relpath(src: Path, relpath: str) -> Path:
    """Resolve ``relpath`` under ``src`` and refuse anything that leaves it.

    Refuses absolute paths, ``..`` components and symlinks whose target lies outside ``src``.

    Raises:
        StackpartError: the path leaves SRC (message says how).
    """
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", relpath):
        raise StackpartError(f"target path {relpath!r} is absolute; targets are relative to SRC")
    if ".." in pure.parts:
        raise StackpartError(f"target path {relpath!r} leaves SRC ('..'); targets are relative to SRC")
    root = src.resolve()
    full = (root / pure).resolve()
    if full != root and root not in full.parents:
        raise StackpartError(f"target path {relpath!r} resolves outside SRC (a symlink to {full})")
    return full


def read_source(src: Path, relpath: str) -> SourceFile:
    """Read and decode one file of the tree.

    Raises:
        StackpartError: missing or unreadable file, or bytes that are not valid in the file's
            encoding (UTF-8 unless a PEP 263 coding cookie names another).
    """
    path = safe_relpath(src, relpath)
    try:
        data = path.read_bytes()
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        siblings = path.parent.glob("*.py") if path.parent.is_dir() else ()
        hint = near_names(path.name, [p.name for p in siblings]) or f"target paths are relative to SRC, here {Path(src).resolve()}"
        raise StackpartError("no such file under SRC", path=relpath, hint=hint) from None
    except OSError as exc:
        raise StackpartError(f"cannot read: {exc.strerror}", path=relpath) from None
    raw = data
    bom = data.startswith(codecs.BOM_UTF8)
    if bom:
        data = data[len(codecs.BOM_UTF8) :]
    encoding = "utf-8"
    for line in data.splitlines()[:2]:
        match = _CODING_RE.match(line)
        if match:
            encoding = match.group(1).decode("ascii")
            break
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data[: getattr(exc, "start", 0)].count(b"\n") + 1
        raise StackpartError(
            f"not valid {encoding} text ({exc.__class__.__name__}); stackpart rewrites UTF-8 or "
            "files with a PEP 263 coding cookie",
            path=relpath,
            line=line,
        ) from None
    return SourceFile(relpath=relpath, path=path, text=text, encoding=encoding, bom=bom, mode=mode, raw=raw)
