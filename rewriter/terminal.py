"""The rich consoles every command prints through (messages to stderr, results to stdout), and
the form of a progress line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


#: The width of the console where stderr is not a terminal (a file, a CI log, a pipe) and
#: ``COLUMNS`` is not set: rich's own default there is 80 columns, which cut the summary's reasons
#: (the file:line a note names) with an ellipsis in every redirected run.
REDIRECTED_WIDTH = 160


@lru_cache(maxsize=1)
def stderr() -> Console:
    """Messages, warnings and progress: stderr, so stdout stays a clean diff or report; on a
    terminal as wide as it is, elsewhere :data:`REDIRECTED_WIDTH` columns unless ``COLUMNS`` says.

    rich is imported on first use: a rewrite that prints only its diff never pays for it.
    """
    import os
    import sys

    from rich.console import Console

    redirected = not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()) and not os.environ.get("COLUMNS")
    return Console(stderr=True, soft_wrap=True, width=REDIRECTED_WIDTH if redirected else None)


class PipeSafe:
    """A text stream whose reader may go away (``stackpart diagnose 2>&1 | head -3``): once a write
    or flush meets a closed pipe (``BrokenPipeError``), the stream's descriptor is pointed at
    ``os.devnull`` and every later line is dropped, so a long command finishes its work (the plan,
    the reports) instead of dying on its next progress line; the interpreter's own flush at exit
    then finds nothing to fail on (the recipe of Python's ``signal`` docs, "Note on SIGPIPE")."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _gone(self) -> None:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


#: The longest progress line printed whole (a child's failure can carry a whole traceback).
PROGRESS_LIMIT = 300
#: What stands for the middle of a longer one.
ELIDED = " … "


def progress_line(text: str, limit: int = PROGRESS_LIMIT) -> str:
    """``text`` as one progress line: whole up to ``limit`` characters; a longer one keeps its
    start (what happened) and its end (the figures: compile seconds, graphs, recompiles) with
    :data:`ELIDED` in place of the middle (the console soft-wraps: the line itself is never cut)."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELIDED), 2)
    head = keep // 2
    return text[:head] + ELIDED + text[len(text) - (keep - head):]


class Feed:
    """Where a long command's lines go: its summary to the console; its per-event lines (a rung
    started, a candidate measured) to the log always and to the console only when ``verbose``;
    on a terminal, a progress bar with the time left.

    ``with Feed(console, verbose, log):`` also sends what third-party code writes to the process's
    stderr (the profiler's USDT lines from C++, library warnings, torch's loggers) to ``log``
    instead of the terminal, where the command runs as a program (stderr is file descriptor 2):
    file descriptor 2 is pointed at the log and ``console`` writes to a duplicate of the old one.
    Under a caller that replaced ``sys.stderr`` (pytest's capture) nothing is redirected.
    ``log`` set inside ``with`` where its folder exists gets what was kept so far and then every
    line as it comes, so a run killed by SIGKILL (a CI or device time limit, the OOM killer)
    leaves its log up to the kill; set where its folder does not exist yet, it is written on
    exit if the folder exists by then (else the captured text is printed, not lost).
    """

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.events: list[str] = []
        self._log: Any = None
        self._streaming = False
        self._saved_fd: int | None = None
        self._saved_file: Any = None
        self._capture: Any = None
        self._progress: Any = None
        self._task: Any = None

    @property
    def log(self) -> Any:
        """The log's path (diagnose.log), or None."""
        return self._log

    @log.setter
    def log(self, path: Any) -> None:
        """Set the log's path. Inside ``with`` with its folder there, what was kept so far is
        copied into it and every later line streams into it; a process started before this
        keeps its stderr on the discarded capture (diagnose sets the log before it starts any).

        Raises:
            ValueError: the log is streaming to another path already (it is set once).
        """
        import os

        if self._streaming:
            if path != self._log:
                raise ValueError(f"the log streams to {self._log} already; it is set once")
            return
        self._log = path
        if self._capture is None or path is None or not _folder_exists(path):
            return  # written on exit, if its folder exists by then
        try:
            f = open(path, "wb")
        except OSError:
            return  # written on exit where it can be, else shown
        self._capture.seek(0)
        f.write(self._capture.read())
        f.flush()
        if self._saved_fd is not None:  # third-party writes to fd 2 go to the file from now on
            os.dup2(f.fileno(), 2)
        self._capture.close()
        self._capture, self._streaming = f, True

    # -- lines ------------------------------------------------------------------------------
    def event(self, text: str) -> None:
        """One per-event line: to the log, and to the console with ``verbose``."""
        import time

        self.events.append(text)
        if self._capture is not None:
            self._capture.write(f"{time.strftime('%H:%M:%S')} {text}\n".encode())
            self._capture.flush()
        if self.verbose:
            self.console.print(text, highlight=False)

    @property
    def capturing(self) -> bool:
        """Inside ``with``: the event lines (and third-party stderr) are being kept for :attr:`log`."""
        return self._capture is not None

    def said(self, text: str) -> bool:
        """Whether ``text`` was printed as an event line already (so a summary need not repeat it)."""
        return self.verbose and text in self.events

    # -- progress ---------------------------------------------------------------------------
    def start(self, description: str, total: int) -> None:
        """A progress bar (description, bar, done/total, time elapsed and left) on a terminal;
        nothing elsewhere. A second call replaces the first bar."""
        self.stop()
        if not self.console.is_terminal:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                  TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=self.console,
                                  transient=True)
        self._progress.start()
        self._task = self._progress.add_task(description, total=total)

    def advance(self, description: str | None = None, steps: int = 1) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=steps, **({"description": description} if description else {}))

    def describe(self, description: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=description)

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[None]:
        """:meth:`start` ... :meth:`stop` around a block (the bar goes also when the block raises)."""
        self.start(description, total)
        try:
            yield
        finally:
            self.stop()

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = self._task = None

    # -- third-party output -----------------------------------------------------------------
    def __enter__(self) -> "Feed":
        import os
        import sys
        import tempfile

        self._capture = tempfile.TemporaryFile()
        try:
            redirect = sys.stderr.fileno() == 2
        except (AttributeError, OSError, ValueError):  # replaced (pytest's capture, io.StringIO)
            redirect = False
        if redirect and getattr(self.console, "_file", None) is None and self.console.stderr:
            sys.stderr.flush()
            self._saved_fd = os.dup(2)
            self._saved_file = PipeSafe(os.fdopen(os.dup(self._saved_fd), "w", buffering=1, encoding=sys.stderr.encoding,
                                                  errors="replace"))
            self.console.file = self._saved_file  # rich keeps writing to the terminal
            os.dup2(self._capture.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        import os
        import sys

        self.stop()
        if self._saved_fd is not None:
            sys.stderr.flush()
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            self._saved_fd = None
            self.console.file = None  # back to sys.stderr
            self._saved_file.close()
        capture, self._capture = self._capture, None
        if self._streaming:  # the log holds every line already
            capture.close()
            self._streaming = False
            return
        capture.seek(0)
        text = capture.read()
        capture.close()
        if self.log is not None and _folder_exists(self.log):
            try:
                with open(self.log, "wb") as f:
                    f.write(text)
                return
            except OSError:
                pass
        if text.strip() and self._saved_file is not None:  # nowhere to keep it: show it rather than lose it
            sys.stderr.write(text.decode(errors="replace"))


def _folder_exists(path: Any) -> bool:
    """Whether the folder a file at ``path`` would go in exists (the current one for a bare name)."""
    import os

    return os.path.isdir(os.path.dirname(os.fspath(path)) or ".")


def event(console: Any, text: str) -> None:
    """A per-event line: :meth:`Feed.event` when ``console`` is a :class:`Feed`, else printed."""
    if isinstance(console, Feed):
        console.event(text)
    elif console is not None:
        console.print(text, highlight=False)
