"""Write a rewrite's files so that a failed or interrupted write leaves the tree as it was.

:func:`apply_changes` runs one small transaction over the files of a rewrite:

1. *stage*: each file's new bytes go to a temp file ``.NAME.XXXXXXXX.stackpart`` beside it (the
   directories a new file needs are made first);
2. *commit*: each temp file is renamed over its destination (``os.replace``, atomic on POSIX);
3. *rollback*, on any error or interrupt before the last rename: the files already renamed get
   their old bytes back (atomically, the same way), new files are removed, and every temp file and
   every directory made is removed.

The journal records every name before it exists on disk (a directory before ``mkdir``, a temp file
before ``os.open(..., O_CREAT | O_EXCL)``), so a rollback always knows what to remove. SIGINT,
SIGTERM, SIGHUP and SIGQUIT are deferred while the transaction runs (:class:`deferred_signals`):
one that arrives mid-step is acted on at the next step boundary, and one that arrives during the
rollback waits for the rollback to finish. Each file is therefore at every moment entirely its
old or entirely its new bytes, and no temp file outlives the call.

Two applies on one tree are serialised by an advisory lock (``flock(2)``) on each directory they
write in, from SRC down (:class:`_TreeLock`), held from the check that each file is unchanged
through the last rename (and the rollback): the second one then re-reads each file under the
lock and, finding every file holding the bytes it would write (the first one's, where both
applied one plan), changes nothing and says so (:attr:`Applied.already`); a file holding any
other bytes is refused (:func:`_unchanged`). A file read-only to this
process or to everyone (``chmod a-w``) is refused in that same check (:func:`_writable`), except
in a copy of SRC stackpart made. No lock file is left in the tree: the directories themselves are
locked. A process killed mid-apply (SIGKILL, a power
cut) can leave temp files; the next apply that writes in the same directories removes them under
the lock and names them (:func:`_sweep`).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StackpartError
from ..signals import deferred_signals
from ..source import safe_relpath

if TYPE_CHECKING:
    from .transform import FileChange

#: Every temp file an apply makes is named ``.NAME.<8 hex digits>.stackpart``.
TEMP_SUFFIX = ".stackpart"
#: A temp file's name (:data:`TEMP_SUFFIX`), as a later apply recognises one a killed run left.
TEMP_RE = re.compile(r"\..+\.[0-9a-f]{8}" + re.escape(TEMP_SUFFIX) + r"\Z", re.DOTALL)
#: How long an apply waits for another one's lock on the tree before it gives up, in seconds (an
#: apply of a hundred files holds it for about 50 ms).
LOCK_WAIT_S = 10.0
#: ``flock`` errors that mean the file system has no advisory locks (some network mounts): the
#: apply goes on unlocked there, as it would on a system without ``fcntl``.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}


def _lock_dirs(src: Path, relpaths: list[str]) -> list[Path]:
    """The directories an apply writing ``relpaths`` locks, sorted: for each file, every existing
    directory from SRC down to the one it goes in (or the deepest of its parents that exists, for
    a new directory). Two applies that write one file, even with SRC spelt at different depths,
    therefore share at least one locked directory."""
    root = src.resolve()
    out: set[Path] = {root}
    for rel in relpaths:
        directory = (root / rel).parent
        while not directory.is_dir() and directory != root:
            directory = directory.parent
        while directory != root and root in directory.parents:
            out.add(directory)
            directory = directory.parent
    return sorted(out)


def _same_owner(tmp: Path, dest: Path) -> None:
    """Give ``tmp`` the owner and group of ``dest`` where ``dest`` exists and they differ: both
    where this process may (root), else the group alone (a member of it), else nothing."""
    try:
        st = dest.stat()
    except OSError:
        return  # a new file: the process's own owner, as any file it creates
    mine = tmp.stat()
    if (st.st_uid, st.st_gid) == (mine.st_uid, mine.st_gid) or not hasattr(os, "chown"):
        return
    for uid in (st.st_uid, -1):
        try:
            os.chown(tmp, uid, st.st_gid)
            return
        except OSError:
            continue


class _TreeLock:
    """Exclusive ``flock`` on each of :func:`_lock_dirs`, taken in sorted order (two applies
    never wait on each other in a cycle), released in :meth:`release`."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.fds: list[int] = []

    def acquire(self, held: object) -> None:
        """Take every lock, waiting up to :data:`LOCK_WAIT_S` in all; ``held`` (the
        :class:`deferred_signals` record) is asked for interrupts while waiting.

        Raises:
            StackpartError: another apply still holds a lock after the wait (nothing is written).
        """
        try:
            import fcntl
        except ImportError:  # no advisory locks on this platform
            return
        deadline = time.monotonic() + LOCK_WAIT_S
        for directory in self.dirs:
            try:
                fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue  # a directory that cannot be opened: staging in it fails with the reason
            self.fds.append(fd)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StackpartError(
                            f"another stackpart apply is writing under {directory} (it has held its lock for over "
                            f"{LOCK_WAIT_S:.0f} s); nothing was changed (run it again when that one is done)",
                        ) from None
                    held.interrupt_point()  # type: ignore[attr-defined]
                    time.sleep(0.02)
                except OSError as exc:
                    if exc.errno in _NO_LOCKS:
                        break
                    raise

    def release(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)  # closing the descriptor drops its flock
            except OSError:
                pass
        self.fds = []


def _sweep(src: Path, dirs: list[Path]) -> list[str]:
    """Remove the temp files (:data:`TEMP_RE`, regular files only) that a killed apply left in
    ``dirs``; called with their locks held, so none belongs to a running apply. Returns each
    removed file's path relative to SRC, sorted."""
    removed = []
    root = src.resolve()
    for directory in dirs:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if not (TEMP_RE.match(entry.name) and entry.is_file(follow_symlinks=False)):
                    continue
                os.unlink(entry.path)
            except OSError:
                continue
            removed.append(Path(entry.path).relative_to(root).as_posix())
    return sorted(removed)


def _missing_dirs(directory: Path) -> list[Path]:
    """The directories ``mkdir(parents=True)`` would create for ``directory``, outermost first."""
    out = []
    while not directory.exists():
        out.append(directory)
        directory = directory.parent
    return out[::-1]


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_changes` did.

    Attributes:
        swept: the temp files a killed apply had left, removed (paths relative to SRC).
        already: every file already held the bytes this apply would write, so none was written
            (another apply of the same edits ran between this one's read and its lock).
    """

    swept: list[str] = field(default_factory=list)
    already: bool = False


def _bytes_now(dest: Path) -> bytes | None:
    """``dest``'s bytes now, or None where it is absent, unreadable or no regular file."""
    from ..source import read_bytes

    try:
        return read_bytes(dest)[0] if os.path.lexists(dest) else None
    except StackpartError:
        return None


def _holds_new(src: Path, changes: list[FileChange]) -> bool:
    """Whether every file of ``changes`` (at least one) holds exactly its new bytes already."""
    return bool(changes) and all(_bytes_now(safe_relpath(src, c.relpath)) == c.new for c in changes)


def _unchanged(dest: Path, change: FileChange) -> None:
    """Refuse to write ``dest`` unless it still holds the bytes the change was computed from
    (``change.old``; for a new file: still absent): a file edited while the rewrite or check ran
    would otherwise lose that edit to a rename of bytes made from the earlier read.

    Raises:
        StackpartError: ``dest`` changed since it was read (nothing is renamed yet: the caller's
            rollback only removes temp files).
    """
    if change.old is None:
        if os.path.lexists(dest):
            raise StackpartError("created by something else while stackpart ran; nothing was changed (run it again)",
                                 path=str(dest))
        return
    if _bytes_now(dest) != change.old:  # unreadable now, or no longer a regular file: not what was read
        raise StackpartError(
            "changed since stackpart read it (edited meanwhile, or written by another apply?); nothing was "
            "changed (run it again)",
            path=str(dest),
        )


def _writable(dest: Path) -> None:
    """Refuse to replace ``dest`` where this process may not write it (``os.access``) or its mode
    gives no one write permission (``chmod a-w``, which root's ``os.access`` ignores): the rename
    of a new file over it would go through all the same, writing what its owner made read-only.

    Raises:
        StackpartError: ``dest`` is read-only (nothing is renamed yet: the caller's rollback only
            removes temp files).
    """
    mode = os.stat(dest).st_mode
    if not os.access(dest, os.W_OK) or not mode & 0o222:
        raise StackpartError(
            f"read-only (mode {mode & 0o7777:04o}); nothing was changed (make it writable, chmod u+w, and run "
            "it again)",
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

    def __init__(self, own_copy: bool = False) -> None:
        self.own_copy = own_copy  # a copy of SRC stackpart made: its read-only files are written as any
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
        """``data`` in a new temp file beside ``dest`` with mode bits ``mode`` and, where ``dest``
        exists, its owner and group (as far as this process may set them: root over a user's
        checkout keeps the user's), flushed to disk before it is renamed over ``dest`` (a crash
        after the rename never leaves an empty file); its name is in :attr:`temps` before the
        file exists."""
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
                os.fsync(fd)
            finally:
                os.close(fd)
            _same_owner(tmp, dest)
            os.chmod(tmp, mode)  # after chown, which may clear set-id bits
            return tmp
        raise FileExistsError(errno.EEXIST, "no free temp file name", str(dest))

    def stage(self, dest: Path, change: FileChange) -> None:
        self.dest = dest
        _unchanged(dest, change)
        if change.old is not None and not self.own_copy:
            _writable(dest)
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


def apply_changes(src: Path, changes: list[FileChange], sweep: list[str] | None = None,
                  own_copy: bool = False) -> Applied:
    """Write ``changes`` under ``src`` as one transaction: all files new, or all as they were.

    Every file's new bytes go to a temp file beside it, then each temp file is renamed in place.
    Mode bits are kept; directories for new files are created. On an error or an interrupt before
    the last rename, the rollback restores what was renamed (new files removed) and removes every
    temp file and every directory made, so the tree is as it was. SIGINT, SIGTERM, SIGHUP and
    SIGQUIT are deferred while this runs (:class:`deferred_signals`): an interrupt takes effect
    between two steps, a second one waits for the rollback. A signal that arrives during the last
    rename, when every file is written, is re-raised when this returns (or left to an enclosing
    :class:`deferred_signals` block, which may :meth:`~deferred_signals.settle` it).

    The directories written in are locked against another apply (:class:`_TreeLock`) before the
    first file is checked and until the last rename; temp files a killed apply left there are
    removed first. Where every file then holds exactly its new bytes (another apply of the same
    edits wrote them after this one read the tree), nothing is written (:attr:`Applied.already`).

    Args:
        src: the tree's root.
        changes: the files to write.
        sweep: more files (relative to ``src``, e.g. every file the plan read) whose directories
            are locked and cleared of a killed apply's temp files too.
        own_copy: ``src`` is a copy of SRC that stackpart made (validate's trees, the search's
            candidates): a file read-only there, copied with SRC's mode, is written; elsewhere it
            is refused (:func:`_writable`).

    Returns:
        :class:`Applied`: the temp files a killed apply had left, removed, and whether every file
        already held its new bytes.

    Raises:
        StackpartError: a file cannot be written (the message says nothing was changed, and how
            many files written so far were restored); a file changed since it was read to bytes
            other than its new ones, or only some files hold their new bytes (another apply of
            other edits, an edit made meanwhile); another apply held the lock past
            :data:`LOCK_WAIT_S`; a file is read-only (:func:`_writable`); or the rollback itself
            could not undo everything (``also`` names each file and which bytes it has).
        KeyboardInterrupt, SystemExit: the interrupt that stopped the apply, once the tree is
            restored (SIGTERM under :func:`rewriter.cli.main` is ``SystemExit(143)``).
    """
    src = Path(src)
    journal = _Journal(own_copy)
    dirs = _lock_dirs(src, [c.relpath for c in changes] + list(sweep or ()))
    lock = _TreeLock(dirs)
    removed: list[str] = []
    with deferred_signals() as held:
        try:
            lock.acquire(held)
            removed = _sweep(src, dirs)
            if _holds_new(src, changes):
                return Applied(removed, already=True)
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
        finally:
            lock.release()
    return Applied(removed)


def hard_linked(src: Path, changes: list[FileChange]) -> list[tuple[str, int]]:
    """``(relpath, link count)`` of each file to be changed that has more than one hard link:
    :func:`apply_changes` renames a new file over the name (atomic, all or nothing), so only this
    name gets the new bytes and the others keep the old file, as with ``git checkout`` or an
    editor's safe save; the apply says so rather than leaving it to be found."""
    out = []
    for change in changes:
        if change.old is None:
            continue
        try:
            links = os.stat(src / change.relpath, follow_symlinks=False).st_nlink
        except OSError:
            continue
        if links > 1:
            out.append((change.relpath, links))
    return out
