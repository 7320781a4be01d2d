"""Write a rewrite's files so that a failed or interrupted write leaves the tree as it was.

:func:`apply_changes` runs one small transaction over the files of a rewrite:

1. *stage*: each file's new bytes go to a temp file ``.NAME.XXXXXXXX.stackpart`` beside it (the
   directories a new file needs are made first);
2. *commit*: each temp file is renamed over its destination (``os.replace``, atomic on POSIX);
3. *rollback*, on any error or interrupt before the last rename: the files already renamed get
   their old bytes back (atomically, the same way), new files are removed, and every temp file and
   every directory made is removed.

The journal records every name before it exists on disk (a directory before ``mkdir``, a temp file
before ``os.open(..., O_CREAT | O_EXCL)``), so a rollback always knows what to remove. SIGINT and
SIGTERM are deferred while the transaction runs (:class:`deferred_signals`): one that arrives
mid-step is acted on at the next step boundary, and one that arrives during the rollback waits
for the rollback to finish. Each file is therefore at every moment entirely its old or entirely
its new bytes, and no temp file outlives the call.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StackpartError
from .signals import deferred_signals
from .source import safe_relpath

if TYPE_CHECKING:
    from .rewrite import FileChange

#: Every temp file an apply makes is named ``.NAME.<8 hex digits>.stackpart``.
TEMP_SUFFIX = ".stackpart"


def _missing_dirs(directory: Path) -> list[Path]:
    """The directories ``mkdir(parents=True)`` would create for ``directory``, outermost first."""
    out = []
    while not directory.exists():
        out.append(directory)
        directory = directory.parent
    return out[::-1]


def _unchanged(dest: Path, change: FileChange) -> None:
    """Refuse to write ``dest`` unless it still holds the bytes the change was computed from
    (``change.old``; for a new file: still absent): a file edited while the rewrite or check ran
    would otherwise lose that edit to a rename of bytes made from the earlier read.

    Raises:
        StackpartError: ``dest`` changed since it was read (nothing is renamed yet: the caller's
            rollback only removes temp files).
    """
    from .source import read_bytes

    if change.old is None:
        if os.path.lexists(dest):
            raise StackpartError("created by something else while stackpart ran; nothing was changed (run it again)",
                                 path=str(dest))
        return
    try:
        now = read_bytes(dest)[0] if os.path.lexists(dest) else None
    except StackpartError:  # unreadable now, or no longer a regular file: not what was read
        now = None
    if now != change.old:
        raise StackpartError(
            "changed since stackpart read it (edited meanwhile?); nothing was changed (run it again)",
            path=str(dest),
        )


def _discard(temps: list[Path], made: list[Path]) -> list[str]:
    """Remove temp files, then the directories made for them (innermost first).

    A temp file already gone is fine (it was renamed or never created); a directory that is not
    empty (something else was put there meanwhile) is left. Returns the temp files that could not
    be removed, one ``path: reason`` each.
    """
    problems = []
    for tmp in temps:
        try:
            tmp.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"{tmp}: temp file left: {exc.strerror}")
    for directory in reversed(made):
        try:
            directory.rmdir()
        except OSError:
            pass
    return problems


class _Journal:
    """What one apply has put on disk so far, each name recorded before it exists there."""

    def __init__(self) -> None:
        self.made: list[Path] = []  # directories, outermost first
        self.temps: list[Path] = []  # temp files that may exist (staged or made by the rollback)
        self.staged: list[tuple[Path, Path]] = []  # (temp, destination), one per change, in order
        self.renamed: list[int] = []  # indices into staged whose rename has happened
        self.in_flight: int | None = None  # a rename left by an exception that is not OSError
        self.dest: Path | None = None  # the destination the current step is for (error messages)

    def mkdir(self, directory: Path) -> None:
        self.made.append(directory)
        try:
            directory.mkdir()
        except OSError:
            self.made.pop()  # not made: a rollback must not remove a directory someone else has
            raise

    def write_temp(self, dest: Path, data: bytes, mode: int) -> Path:
        """``data`` in a new temp file beside ``dest`` with mode bits ``mode``; its name is in
        :attr:`temps` before the file exists."""
        for _ in range(100):
            tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
            self.temps.append(tmp)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            except FileExistsError:
                self.temps.pop()  # someone else's file: never ours to remove
                continue
            except OSError:
                self.temps.pop()  # not created
                raise
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.chmod(tmp, mode)
            return tmp
        raise FileExistsError(errno.EEXIST, "no free temp file name", str(dest))

    def stage(self, dest: Path, change: FileChange) -> None:
        self.dest = dest
        _unchanged(dest, change)
        for directory in _missing_dirs(dest.parent):
            self.mkdir(directory)
        # Commits start once every change is staged, so staged[i] is changes[i]; until then the
        # temp file is tracked by self.temps (its name recorded before it is created).
        self.staged.append((self.write_temp(dest, change.new, change.mode), dest))

    def commit(self, i: int) -> None:
        tmp, dest = self.staged[i]
        self.dest = dest
        self.in_flight = i
        try:
            os.replace(tmp, dest)
        except OSError:
            self.in_flight = None  # a failed rename changed nothing
            raise
        self.renamed.append(i)
        self.in_flight = None

    def rollback(self, changes: list[FileChange]) -> list[str]:
        """Put every renamed file back (old bytes, or removed when it was new), remove every temp
        file and directory made. Returns what could not be undone, one line per file."""
        renamed = list(self.renamed)
        if self.in_flight is not None and not self.staged[self.in_flight][0].exists():
            renamed.append(self.in_flight)  # the rename happened; what came after it did not
        problems = []
        for i in reversed(renamed):
            dest, change = self.staged[i][1], changes[i]
            try:
                if change.old is None:
                    dest.unlink(missing_ok=True)
                else:
                    os.replace(self.write_temp(dest, change.old, change.mode), dest)
            except OSError as exc:
                problems.append(f"{dest}: not restored, it has the new bytes: {exc.strerror}")
        return problems + _discard(self.temps, self.made)


def apply_changes(src: Path, changes: list[FileChange]) -> None:
    """Write ``changes`` under ``src`` as one transaction: all files new, or all as they were.

    Every file's new bytes go to a temp file beside it, then each temp file is renamed in place.
    Mode bits are kept; directories for new files are created. On an error or an interrupt before
    the last rename, the rollback restores what was renamed (new files removed) and removes every
    temp file and every directory made, so the tree is as it was. SIGINT and SIGTERM are deferred
    while this runs (:class:`deferred_signals`): an interrupt takes effect between two steps, a
    second one waits for the rollback. A signal that arrives during the last rename, when every
    file is written, is re-raised when this returns (or left to an enclosing
    :class:`deferred_signals` block, which may :meth:`~deferred_signals.settle` it).

    Raises:
        StackpartError: a file cannot be written (the message says nothing was changed, and how
            many files written so far were restored); or the rollback itself could not undo
            everything (``also`` names each file and which bytes it has).
        KeyboardInterrupt, SystemExit: the interrupt that stopped the apply, once the tree is
            restored (SIGTERM under :func:`rewriter.cli.main` is ``SystemExit(143)``).
    """
    src = Path(src)
    journal = _Journal()
    with deferred_signals() as held:
        try:
            for change in changes:
                held.interrupt_point()
                journal.stage(safe_relpath(src, change.relpath), change)
            for i in range(len(journal.staged)):
                held.interrupt_point()
                journal.commit(i)
        except BaseException as exc:
            # Signals stay deferred until the block is left: a second Ctrl-C waits for this.
            written = len(journal.renamed)
            problems = journal.rollback(changes)
            where = journal.dest
            if isinstance(exc, OSError):
                name = exc.filename if exc.filename and not str(exc.filename).endswith(TEMP_SUFFIX) else where
                what = f"cannot write {name}: {exc.strerror or exc}"
            elif isinstance(exc, StackpartError):
                what = str(exc)
            else:
                what = f"interrupted ({type(exc).__name__}) while writing {where}"
            if problems:
                raise StackpartError(
                    f"{what}; the rollback could not undo {len(problems)} change(s) (below): each file is "
                    "whole, but the tree mixes old and new files",
                    also=problems,
                ) from exc
            if isinstance(exc, OSError):
                done = f"the {written} file(s) already written were restored, " if written else ""
                raise StackpartError(f"{what}; {done}nothing was changed") from None
            raise
