"""Reading and writing the user's source files byte-faithfully, and keeping paths inside SRC.

A :class:`SourceFile` remembers the encoding, BOM, line endings and mode bits so that a rewrite
changes only the lines an action touches (LibCST itself round-trips the text exactly).

Every source file ``check`` and ``rewrite`` look at is read through :func:`read_bytes` (the one
guarded read: regular files only, never blocking, at most :data:`MAX_SOURCE_BYTES`) and parsed
through :func:`parse_module` (CPython's own parser first, as the gate for what LibCST's native
parser and its recursive Python visitors may be given; LibCST then in a thread with a large
stack). A file that cannot be processed raises :class:`Skipped`, one line saying why.
"""

from __future__ import annotations

import ast
import codecs
import errno
import os
import re
import stat
import sys
import threading
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import TypeVar

import libcst as cst

from .errors import StackpartError, near_names
from .signals import deferred_signals

T = TypeVar("T")

#: The largest source file read, in bytes (10 MiB). The largest ``.py`` file among the ~13,600
#: of this venv's installed packages and the system's Python is 1.4 MB (torch's
#: ``testing/_internal/common_methods_invocations.py``), so a real file stays far below it; the cap
#: keeps an endless or huge file (``/dev/zero`` behind a link, a generated blob) out of memory.
MAX_SOURCE_BYTES = 10 * 1024 * 1024

#: Stack size of the thread LibCST runs in (256 MiB, virtual: pages are touched only as used).
#: LibCST's native parser recurses once per nesting level on the C stack (about 4 KiB a level:
#: ~2,000 nested parentheses overflow the main thread's 8 MiB) and its code generation about
#: 0.5 KiB a level (a 20,000-term ``and`` chain overflows 8 MiB); the caps below keep both far
#: under 256 MiB.
DEEP_STACK_BYTES = 256 * 1024 * 1024

#: Python's recursion limit while LibCST visits a module in that thread. Its visitors recurse
#: 3 frames per tree level (4 through a sequence field), measured on LibCST 1.x, so 100,000
#: frames cover ~25,000 levels; a deeper tree raises RecursionError, which becomes :class:`Skipped`.
DEEP_RECURSION_LIMIT = 100_000

#: The most operands of one ``and``/``or`` chain handed to LibCST. CPython keeps a chain flat
#: (one ``BoolOp``) and so accepts any length, but LibCST nests one ``BooleanOperation`` per
#: operator, which its parser and visitors recurse through.
MAX_BOOLOP_OPERANDS = 10_000

#: The recursion limit CPython's parser gate runs under (CPython's default). At it, ``ast.parse``
#: refuses more than 200 nested brackets (``MAXLEVEL`` in its tokenizer: "too many nested
#: parentheses"), 100 levels of indentation (``MAXINDENT``), recursive-descent input deeper than
#: its parser stack (``MAXSTACK`` = 6,000: MemoryError) and ASTs deeper than about 3 x this limit
#: ("maximum recursion depth exceeded during ast construction"), which bounds what LibCST's native
#: parser is given whatever the process's own limit is.
GATE_RECURSION_LIMIT = 1000

#: Frames kept free for the stages that run after :meth:`SourceFile.parse` returns on the calling
#: thread: the codemod, metadata providers and code generation start deeper than the parse (the
#: kernel action's metadata resolution, the deepest, ~40 frames deeper: measured; with no frames
#: kept free it raised RecursionError, tests/test_hostile_files.py).
LATER_FRAMES = 150

#: CPython's messages for input nested deeper than its parser takes (tokenizer.c: MAXLEVEL, MAXINDENT).
_TOO_DEEP = ("too many nested parentheses", "too many levels of indentation")

TOO_DEEP = "nested too deep for the parser"

_CODING_RE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
#: A line that lets a coding cookie on the next one count (``tokenize.detect_encoding``'s rule).
_BLANK_RE = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")


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
        """Parse with LibCST, through CPython's parser as the gate (see :func:`parse_module`).

        The module must also fit what this thread's recursion limit leaves for the visitors and
        code generation that run after this returns (LibCST recurses about 3 Python frames per
        tree level, :func:`frames_needed`): a deeper module is refused here rather than raising
        RecursionError in the middle of a rewrite. Python's default limit (1,000) leaves room for
        about 270 levels from the CLI (a 270-term sum; 1,000 terms are refused); a caller that
        runs the rewrite in :func:`run_deep` gets :data:`DEEP_RECURSION_LIMIT`.

        Raises:
            StackpartError: a syntax error (CPython's message), at its line and column.
            Skipped: nested too deep for the parser, for LibCST, or for this thread.
        """
        module = parse_module(self.text, self.relpath)
        need = frames_needed(module)
        room = sys.getrecursionlimit() - _depth() - LATER_FRAMES
        if need > room:
            raise Skipped(
                f"skipped: {TOO_DEEP} (LibCST's visitors would recurse {need:,} frames deep; a "
                f"rewrite has room for {room:,} under Python's recursion limit)",
                path=self.relpath,
                hint="split the deepest expression into smaller ones",
            )
        return module


def safe_relpath(src: Path, relpath: str) -> Path:
    """Resolve ``relpath`` under ``src`` and refuse anything that leaves it.

    Refuses absolute paths, ``..`` components and symlinks whose target lies outside ``src``.

    Raises:
        StackpartError: the path leaves SRC (message says how).
        Skipped: the path is a symlink loop.
    """
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", relpath):
        raise StackpartError(f"target path {relpath!r} is absolute; targets are relative to SRC")
    if ".." in pure.parts:
        raise StackpartError(f"target path {relpath!r} leaves SRC ('..'); targets are relative to SRC")
    try:
        root = src.resolve()
        full = (root / pure).resolve()
    except (RuntimeError, OSError) as exc:  # Python < 3.13: RuntimeError("Symlink loop from ...")
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            raise StackpartError(f"cannot resolve: {exc.strerror}", path=relpath) from None
        raise Skipped("skipped: a symlink loop (the link leads back to itself)", path=relpath) from None
    if full != root and root not in full.parents:
        raise StackpartError(f"target path {relpath!r} resolves outside SRC (a symlink to {full})")
    return full


def read_source(src: Path, relpath: str) -> SourceFile:
    """Read and decode one file of the tree at ``src`` (a rewrite target), through :func:`read_file`.

    Raises:
        StackpartError: the path leaves SRC, a missing or unreadable file, or bytes that are not
            valid text (see :func:`read_file`).
        Skipped: not a regular file, over :data:`MAX_SOURCE_BYTES`, a symlink loop.
    """
    path = safe_relpath(src, relpath)
    if not os.path.lexists(path):
        siblings = [p.name for p in path.parent.glob("*.py")] if path.parent.is_dir() else []
        same = [n for n in siblings if unicodedata.normalize("NFC", n) == unicodedata.normalize("NFC", path.name)]
        if same:  # looks the same printed: say how the names differ, or "did you mean" shows the same text
            hint = (f"there is {ascii(same[0])}, the same name in other Unicode code points than the plan's "
                    f"{ascii(path.name)}; write the target as the file is named")
        else:
            hint = (near_names(path.name, siblings) or _near_relpath(src, relpath, siblings)
                    or f"target paths are relative to SRC, here {Path(src).resolve()}")
        raise StackpartError("no such file under SRC", path=relpath, hint=hint)
    return read_file(path, relpath)


def _near_relpath(src: Path, relpath: str, siblings: list[str]) -> str | None:
    """A ``did you mean`` for a target path difflib finds nothing near: the file named in
    another case (``MODEL.py`` -> ``model.py``: difflib's ratio is case-sensitive), or the path
    with its leading folders dropped where that names a file under SRC (``src/model.py``, the
    path written from SRC's parent); None otherwise."""
    pure = PurePosixPath(relpath)
    folded = [n for n in siblings if n.casefold() == pure.name.casefold()]
    if folded:
        return f"did you mean {(pure.parent / folded[0]).as_posix()!r}?"
    root = Path(src)
    for k in range(1, len(pure.parts)):
        tail = PurePosixPath(*pure.parts[k:])
        if (root / tail).is_file():
            return f"did you mean {tail.as_posix()!r}? target paths are relative to SRC, here {root.resolve()}"
    return None


class Skipped(StackpartError):
    """A file stackpart does not process: not a regular file, over :data:`MAX_SOURCE_BYTES`,
    nested too deep for the parser, a symlink loop or a link leaving the tree.

    ``message`` starts with ``skipped:``. ``check`` reports it as a warning and goes on with the
    other files; for a rewrite target it is an input error (exit 2) like any StackpartError.
    """


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int, shown: str) -> StackpartError:
    if stat.S_ISDIR(mode):  # a mistake in the path given, not a file to skip
        return StackpartError(f"cannot read: {os.strerror(errno.EISDIR)}", path=shown)
    kind = next((name for test, name in _KINDS if test(mode)), f"file type {stat.S_IFMT(mode):#o}")
    return Skipped(f"skipped: not a regular file ({kind})", path=shown, hint="stackpart reads regular files only")


def _too_big(size: int, shown: str, limit: int) -> Skipped:
    return Skipped(
        f"skipped: {size:,} bytes, over the {limit // 2**20} MiB cap on "
        + ("source files" if limit == MAX_SOURCE_BYTES else "this file"),
        path=shown,
        hint="split the file, or leave it out of the paths given",
    )


#: How a source file is opened: never blocking on a FIFO, never becoming the controlling terminal
#: (the flags a platform lacks, e.g. Windows, are left out).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def read_bytes(
    path: str | os.PathLike[str], shown: str | None = None, limit: int | None = None
) -> tuple[bytes, int]:
    """The one guarded read of a source file: its bytes and ``st_mode`` permission bits.

    The path is followed if it is a symlink (callers decide which links they accept:
    :func:`safe_relpath` for rewrite targets, the directory walk of ``check``). It is opened
    ``O_RDONLY | O_NONBLOCK | O_NOCTTY``, so a FIFO or a terminal cannot block the open, and
    ``fstat`` on the open descriptor must say regular file before one byte is read (a FIFO, a
    device such as ``/dev/zero`` or a directory is refused without reading it). At most
    :data:`MAX_SOURCE_BYTES` are read, also from a file that grows while it is read.

    Args:
        path: the file.
        shown: the path as error messages name it (default: ``path``).
        limit: the most bytes read (default :data:`MAX_SOURCE_BYTES`; a plan file has its own).

    Raises:
        StackpartError: the file is missing, a directory, or cannot be opened or read
            (``strerror``).
        Skipped: not a regular file (a FIFO, a device, a socket), over :data:`MAX_SOURCE_BYTES`,
            a symlink loop, a link to a missing file.
    """
    shown = str(path) if shown is None else shown
    limit = MAX_SOURCE_BYTES if limit is None else limit
    fd, mode = _open_regular(path, shown, limit)
    try:
        return b"".join(_blocks(fd, shown, limit, 1 << 20)), mode
    finally:
        os.close(fd)


def mentions(path: str | os.PathLike[str], needle: bytes, shown: str | None = None) -> bool:
    """Whether the file at ``path`` contains ``needle``, read as :func:`read_bytes` reads it (a
    regular file only, at most :data:`MAX_SOURCE_BYTES`) but in blocks, stopping at the first one
    that holds it.

    Raises:
        StackpartError, Skipped: as :func:`read_bytes`.
    """
    shown = str(path) if shown is None else shown
    fd, _ = _open_regular(path, shown, MAX_SOURCE_BYTES)
    try:
        tail = b""
        for block in _blocks(fd, shown, MAX_SOURCE_BYTES, 1 << 16):
            if needle in tail + block:
                return True
            tail = block[1 - len(needle):] if len(needle) > 1 else b""
        return False
    finally:
        os.close(fd)


def _blocks(fd: int, shown: str, limit: int, size: int) -> Iterator[bytes]:
    """The blocks of up to ``size`` bytes read from ``fd`` to its end; :class:`Skipped` past
    ``limit`` bytes (also from a file that grows while it is read)."""
    total = 0
    try:
        while block := os.read(fd, min(size, limit + 1 - total)):
            total += len(block)
            if total > limit:
                raise _too_big(total, shown, limit)
            yield block
    except OSError as exc:
        raise StackpartError(f"cannot read: {exc.strerror}", path=shown) from None


def _open_regular(path: str | os.PathLike[str], shown: str, limit: int) -> tuple[int, int]:
    """``(descriptor, permission bits)`` of ``path`` opened for :func:`read_bytes`: refused
    unless it is a regular file of at most ``limit`` bytes (by ``stat`` before the open, and by
    ``fstat`` on what was opened). The caller closes the descriptor."""
    try:
        before = os.stat(path)  # refuse a device or FIFO before opening it (an open can have effects)
        if not stat.S_ISREG(before.st_mode):
            raise _not_regular(before.st_mode, shown)
        if before.st_size > limit:
            raise _too_big(before.st_size, shown, limit)
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Skipped("skipped: a symlink loop (the link leads back to itself)", path=shown) from None
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise Skipped(f"skipped: a symlink to {os.readlink(path)}, which does not exist", path=shown) from None
        if exc.errno == errno.ENOENT:
            raise StackpartError("no such file", path=shown) from None
        raise StackpartError(f"cannot read: {exc.strerror}", path=shown) from None
    try:
        st = os.fstat(fd)  # what was opened, not what the name pointed to a moment before
    except OSError as exc:
        os.close(fd)
        raise StackpartError(f"cannot read: {exc.strerror}", path=shown) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(st.st_mode, shown)
    return fd, stat.S_IMODE(st.st_mode)


def read_file(path: str | os.PathLike[str], shown: str | None = None) -> SourceFile:
    """Read (through :func:`read_bytes`) and decode one source file.

    Args:
        path: the file (a symlink is followed; see :func:`read_bytes`).
        shown: the path messages and :attr:`SourceFile.relpath` name (default: ``path``).

    Raises:
        StackpartError: missing or unreadable, bytes that are not valid in the file's encoding
            (UTF-8 unless a PEP 263 coding cookie names another), or a NUL byte (CPython refuses
            source containing one).
        Skipped: see :func:`read_bytes`.
    """
    shown = str(path) if shown is None else shown
    data, mode = read_bytes(path, shown)
    return decode_file(data, shown, Path(path), mode)


def decode_file(data: bytes, shown: str, path: Path | None = None, mode: int = 0o644) -> SourceFile:
    """The :class:`SourceFile` of bytes already read through :func:`read_bytes` (a caller that
    needs the bytes first, e.g. ``check``'s prefilter, decodes them without a second read).

    Args:
        data: the file's bytes, BOM included.
        shown: the path messages and :attr:`SourceFile.relpath` name.
        path: the file on disk (default: ``shown``).
        mode: its permission bits, as :func:`read_bytes` returned them.

    Raises:
        StackpartError: see :func:`read_file`.
    """
    path = Path(shown) if path is None else path
    raw = data
    bom = data.startswith(codecs.BOM_UTF8)
    if bom:
        data = data[len(codecs.BOM_UTF8) :]
    encoding, cookie_line = "utf-8", 0
    for number, line in enumerate(data.splitlines()[:2], 1):
        match = _CODING_RE.match(line)
        if match:
            encoding, cookie_line = match.group(1).decode("ascii"), number
            break
        if not _BLANK_RE.match(line):  # PEP 263: a cookie on line 2 counts only below a comment or blank line
            break
    if cookie_line:
        try:
            info = codecs.lookup(encoding)
        except LookupError:
            raise StackpartError(
                f"unknown encoding {encoding!r} in the coding cookie (CPython refuses it too)",
                path=shown,
                line=cookie_line,
            ) from None
        if not getattr(info, "_is_text_encoding", True):
            raise StackpartError(f"{encoding!r} in the coding cookie is not a text encoding (CPython refuses it too)",
                                 path=shown, line=cookie_line)
        if bom and info.name != "utf-8":
            raise StackpartError(
                f"a UTF-8 BOM with a coding cookie naming {encoding!r} (CPython refuses it too: "
                "'encoding problem ... with BOM')",
                path=shown,
                line=cookie_line,
            )
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data[: getattr(exc, "start", 0)].count(b"\n") + 1
        raise StackpartError(
            f"not valid {encoding} text ({exc.__class__.__name__}); stackpart rewrites UTF-8 or "
            "files with a PEP 263 coding cookie",
            path=shown,
            line=line,
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise StackpartError(
            "a NUL byte: not Python source (CPython refuses it too)",
            path=shown,
            line=line,
            col=nul - (text.rfind("\n", 0, nul) + 1) + 1,
        )
    return SourceFile(relpath=shown, path=path, text=text, encoding=encoding, bom=bom, mode=mode, raw=raw)


# --- parsing: CPython's parser as the gate, LibCST in a deep thread --------------------------

_local = threading.local()
_limit_lock = threading.Lock()
_limit_users = 0
_limit_saved = 0


def _in_deep_thread() -> bool:
    return getattr(_local, "deep", False)


def _depth() -> int:
    """Frames on the calling thread's stack."""
    frame, n = sys._getframe(1), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def run_deep(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` in a thread with a :data:`DEEP_STACK_BYTES` stack and the
    recursion limit raised to :data:`DEEP_RECURSION_LIMIT` while it runs (Python's limit is per
    process: the calling thread only waits). Called from such a thread, ``fn`` runs in place.

    Where the system refuses a thread that large (a low ``ulimit -v``), a 32 MiB one is tried
    with the limit scaled down alike; where that fails too, ``fn`` runs in place under the
    caller's limit (deep files then end as RecursionError, which callers report as skipped).
    A SIGTERM or Ctrl-C in the waiting thread is raised once the thread has finished (the work
    done here only reads): a thread left inside LibCST's native code at exit aborts the process.

    Returns:
        what ``fn`` returns; what it raises is raised here (a RecursionError included: the
        caller turns it into :class:`Skipped`).
    """
    if _in_deep_thread():
        return fn(*args, **kwargs)
    box: dict[str, object] = {}

    def target(limit: int) -> None:
        global _limit_users, _limit_saved
        _local.deep = True
        with _limit_lock:
            if _limit_users == 0:
                _limit_saved = sys.getrecursionlimit()
            _limit_users += 1
            sys.setrecursionlimit(max(sys.getrecursionlimit(), limit))
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the calling thread
            box["error"] = exc
        finally:
            with _limit_lock:
                _limit_users -= 1
                if _limit_users == 0:
                    sys.setrecursionlimit(_limit_saved)

    thread = None
    for size in (DEEP_STACK_BYTES, 32 * 1024 * 1024):
        limit = DEEP_RECURSION_LIMIT * size // DEEP_STACK_BYTES
        with _limit_lock:  # threading.stack_size is per process: set it for this one thread only
            try:
                previous = threading.stack_size(size)
            except (ValueError, RuntimeError):  # a platform without settable thread stacks
                break
            try:
                thread = threading.Thread(target=target, args=(limit,), name="stackpart-libcst", daemon=True)
                thread.start()
            except (RuntimeError, MemoryError):  # "can't start new thread": no room for the stack
                thread = None
            finally:
                threading.stack_size(previous)
        if thread is not None:
            break
    if thread is None:
        return fn(*args, **kwargs)
    # Wait for the thread even when Ctrl-C or SIGTERM lands meanwhile, then raise the interrupt:
    # left running, a daemon thread inside LibCST's native parser at interpreter exit aborts the
    # process (SIGABRT, exit -6: tests/test_apply_signals.py caught it). The work only reads.
    # SIGINT/SIGTERM are only recorded while the thread runs and act once it is done: an
    # interrupt raised inside Thread.join or Event.wait breaks CPython 3.11's lock bookkeeping
    # (a join that never returns; "RuntimeError: release unlocked lock" with a second signal).
    with deferred_signals():
        thread.join()
    if "error" in box:
        error = box["error"]
        assert isinstance(error, BaseException)
        raise error.with_traceback(error.__traceback__)
    return box["value"]  # type: ignore[return-value]


def _boolop_operands(tree: ast.AST) -> int:
    """The most operands of one ``and``/``or`` chain in ``tree`` (0 without one)."""
    return max((len(n.values) for n in ast.walk(tree) if isinstance(n, ast.BoolOp)), default=0)


def _newer_python(text: str) -> bool:
    """Whether text CPython refused is code for a newer Python that LibCST parses (LibCST 1.9's
    grammar reaches 3.14: ``def f[T](x)``, PEP 701 f-strings, on a 3.11 interpreter), as before
    CPython became the gate (torch's ``testing/_internal/py312_intrinsics.py``). Its brackets are
    counted with :mod:`tokenize` first: LibCST's native parser gets no deeper nesting than
    CPython's own limit (200) would allow."""
    import io
    import tokenize

    depth = deepest = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
                deepest = max(deepest, depth)
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return False
    if deepest > 200:
        return False
    try:
        run_deep(cst.parse_module, text)
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
        return False
    return True


def check_syntax(text: str, path: str) -> ast.Module | None:
    """CPython's parser as the gate before LibCST: the ``ast`` of ``text``, or why not.

    What CPython refuses for its depth (more than 200 nested brackets, 100 indentation levels,
    its parser stack or AST construction exhausted; see :data:`GATE_RECURSION_LIMIT`) is
    :class:`Skipped`, and so is an ``and``/``or`` chain of more than :data:`MAX_BOOLOP_OPERANDS`
    operands. In :func:`run_deep`'s thread, whose limit is raised, ``ast.parse`` runs with the
    limit lowered to :data:`GATE_RECURSION_LIMIT` frames above the caller, so the gate passes the
    same files there as on a thread with Python's default limit.

    Returns None for code of a newer Python than this one that LibCST parses (see
    :func:`_newer_python`): there is no ``ast`` of it here, and LibCST alone reads it.

    Raises:
        StackpartError: a syntax error, at CPython's line and column, with CPython's message.
        Skipped: nested too deep for the parser (CPython's own refusal, or the chain cap).
    """
    limit = sys.getrecursionlimit()
    lowered = _in_deep_thread() and limit > GATE_RECURSION_LIMIT + _depth()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for "\d" and friends: not ours to print
            if lowered:
                sys.setrecursionlimit(GATE_RECURSION_LIMIT + _depth())
            try:
                tree = ast.parse(text, filename=path)
            finally:
                if lowered:
                    sys.setrecursionlimit(limit)
    except SyntaxError as exc:
        if exc.msg in _TOO_DEEP:
            raise Skipped(
                f"skipped: {TOO_DEEP} (CPython: {exc.msg})", path=path, line=exc.lineno, col=exc.offset,
                hint="split the deepest expression into smaller ones",
            ) from None
        if _newer_python(text):
            return None
        raise StackpartError(f"syntax error: {exc.msg}", path=path, line=exc.lineno, col=exc.offset) from None
    except (RecursionError, MemoryError) as exc:
        why = "too complex" if isinstance(exc, MemoryError) else "maximum recursion depth exceeded"
        raise Skipped(
            f"skipped: {TOO_DEEP} (CPython: {why})", path=path, hint="split the deepest expression into smaller ones"
        ) from None
    except ValueError as exc:  # Python 3.11: "source code string cannot contain null bytes"
        raise StackpartError(f"not Python source: {exc}", path=path) from None
    # Only a file with that many ``and``/``or`` in all can hold such a chain: walk the tree then.
    if len(re.findall(r"\b(?:and|or)\b", text)) >= MAX_BOOLOP_OPERANDS:
        operands = _boolop_operands(tree)
        if operands > MAX_BOOLOP_OPERANDS:
            raise Skipped(
                f"skipped: {TOO_DEEP} (an and/or chain of {operands:,} operands; LibCST nests one "
                f"node per operator and takes at most {MAX_BOOLOP_OPERANDS:,})",
                path=path,
                hint="split the chain into smaller ones",
            )
    return tree


def parse_module(text: str, path: str, tree: ast.Module | None = None) -> cst.Module:
    """Parse ``text`` with LibCST once CPython's parser accepted it (:func:`check_syntax`).

    LibCST's native parser runs in :func:`run_deep`'s thread (a nesting that passed the gate can
    still overflow the main thread's 8 MiB C stack there).

    Args:
        text: the decoded source.
        path: the path messages name.
        tree: the ``ast`` of ``text`` when the caller already has it from :func:`check_syntax`.

    Raises:
        StackpartError: a syntax error (CPython's message, line and column).
        Skipped: nested too deep for the parser; or LibCST refuses text that CPython accepts (its
            parser has limits of its own, e.g. on long implicit string concatenations).
    """
    if tree is None:
        check_syntax(text, path)
    try:
        return run_deep(cst.parse_module, text)
    except cst.ParserSyntaxError as exc:
        raise Skipped(
            f"skipped: LibCST's parser refuses what CPython accepts ({exc.message})",
            path=path,
            line=exc.raw_line,
            col=exc.raw_column + 1,
            hint="stackpart cannot edit or check this file",
        ) from None
    except RecursionError:
        raise Skipped(f"skipped: {TOO_DEEP} (LibCST: maximum recursion depth exceeded)", path=path) from None


_FIELDS: dict[type, tuple[str, ...]] = {}


def frames_needed(module: cst.CSTNode) -> int:
    """The Python stack frames a LibCST visitor needs to walk ``module``: 3 per tree level (the
    node's ``visit``, ``_visit_and_replace_children``, ``visit_required``), 4 through a sequence
    field (``visit_sequence`` and its ``visit_iterable`` generator). Counted without recursion."""
    best = 0
    stack: list[tuple[cst.CSTNode, int]] = [(module, 1)]
    pop, push = stack.pop, stack.append
    node_type = cst.CSTNode
    while stack:
        node, frames = pop()
        if frames > best:
            best = frames
        names = _FIELDS.get(type(node))
        if names is None:
            names = _FIELDS[type(node)] = tuple(f.name for f in fields(node))  # type: ignore[arg-type]
        for name in names:
            value = getattr(node, name)
            if isinstance(value, node_type):
                push((value, frames + 3))
            elif isinstance(value, (tuple, list)):
                for item in value:
                    if isinstance(item, node_type):
                        push((item, frames + 4))
    return best


#: Folders a walk of SRC for the program's Python files never enters: hidden ones, bytecode caches
#: and stackpart's own generated ``_stackpart/``.
SKIPPED_DIRS = ("__pycache__", "_stackpart")


def python_files(src: Path) -> Iterator[Path]:
    """The ``.py`` files under ``src`` in sorted order, symbolic links (files and folders) and the
    folders of :data:`SKIPPED_DIRS` and hidden folders left out: the program's own source, as the
    static readings of its compile setup read it."""
    for root, dirs, files in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS
                         and not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = Path(root) / name
            if name.endswith(".py") and not path.is_symlink():
                yield path
