"""SIGINT, SIGTERM, SIGHUP and SIGQUIT deferred to points where the code can stop cleanly.

:class:`deferred_signals` records these signals while a block runs and acts on them where the
block asks (:meth:`deferred_signals.interrupt_point`) or when it is left. The apply's transaction
(:mod:`rewriter.rewrite.apply`) uses it between its steps; :func:`rewriter.source.run_deep` uses it while
it waits for LibCST's thread (an interrupt raised inside ``Thread.join`` or ``Event.wait`` can
break CPython 3.11's lock bookkeeping: a hang, or ``RuntimeError: release unlocked lock``).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType


class Terminated(SystemExit):
    """What the CLI's SIGTERM handler raises (:func:`rewriter.cli._terminated`, exit 143): a
    ``SystemExit`` that unwinds like Ctrl-C, told apart from ``sys.exit`` in the user's code
    (which diagnose's harness guard reports as a harness failure) by its type."""

#: The signals an apply defers: Ctrl-C, a polite kill (``timeout``, a CI cancel, a batch job), the
#: terminal closing (SIGHUP: an ssh session dropped) and Ctrl-\ (SIGQUIT). Each one's default
#: action ends the process, mid-rename; deferred, it ends it only once the tree is whole again.
SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))

_active: deferred_signals | None = None


class _DefaultAction(BaseException):
    """A deferred signal whose disposition is the default (terminate the process): raised at a step
    boundary so the rollback runs; leaving the outermost :class:`deferred_signals` block then
    re-raises the signal itself with the default disposition back in place."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class deferred_signals:  # noqa: N801 (a context manager, used as ``with deferred_signals() as held``)
    """While the block runs, the :data:`SIGNALS` (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are recorded
    instead of handled.

    A recorded signal takes effect only where the code inside asks for it
    (:meth:`interrupt_point`), or when the block is left:

    - left normally, or by an error that is not an interrupt: the signals still pending are
      re-raised (``signal.raise_signal``) with the previous handlers back, so they act as if they
      had arrived just then (Ctrl-C raises KeyboardInterrupt; SIGTERM under the CLI raises
      ``SystemExit(143)``, under the default disposition it ends the process);
    - left by an interrupt (KeyboardInterrupt, SystemExit): the pending ones are dropped, the
      process is already stopping for the first one;
    - after :meth:`settle`: nothing is re-raised (see there).

    Nested blocks share the outermost one's record; only the outermost installs and restores
    handlers. Outside the main thread no Python signal handler runs, so the block defers nothing
    and :meth:`interrupt_point` never fires. Signals whose handler is ``SIG_IGN`` (or was not set
    from Python) are left alone.

    Attributes:
        pending: signals recorded and not yet acted on, in arrival order.
        late: signals that arrived after :meth:`settle` (noted, never acted on).
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.late: list[int] = []
        self._previous: dict[int, object] = {}
        self._settled = False
        self._ignore_after = False
        self._owner = False

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> deferred_signals:
        global _active
        if threading.current_thread() is not threading.main_thread():
            return self  # inert: signals are only ever handled in the main thread
        if _active is not None:
            return _active  # nested: the outermost block records and restores
        for signum in SIGNALS:
            previous = signal.getsignal(signum)
            if previous is None or previous == signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._record)
        self._owner = True
        _active = self
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        global _active
        if not self._owner:
            return False
        _active = None
        self._owner = False
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self._ignore_after else previous)  # type: ignore[arg-type]
        if self._settled:
            return False
        if isinstance(exc, _DefaultAction):
            self.pending.clear()
            signal.raise_signal(exc.signum)  # the default action: the process ends here
            raise Terminated(128 + exc.signum) from None  # a disposition that did not end it
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self.pending.clear()  # a second signal: already stopping for the first
            return False
        pending, self.pending = self.pending, []
        for signum in pending:
            signal.raise_signal(signum)  # its handler's exception (if any) leaves the block here
        return False

    def _record(self, signum: int, frame: FrameType | None) -> None:
        (self.late if self._settled else self.pending).append(signum)

    # -- what the code inside calls ----------------------------------------------------------

    def interrupt_point(self) -> None:
        """Act on the signals recorded so far, at a point where the caller can stop cleanly.

        Each pending signal runs the handler it would have run on arrival (Ctrl-C's default
        raises KeyboardInterrupt, :func:`rewriter.cli._terminated` raises ``SystemExit(143)``); a
        handler that returns lets the caller go on. Does nothing after :meth:`settle` or outside
        the main thread.

        Raises:
            KeyboardInterrupt, SystemExit: whatever the signal's handler raises.
            BaseException: a private one for a signal whose disposition is the default action:
                leaving the outermost block then re-raises that signal, ending the process.
        """
        while self.pending and not self._settled:
            signum = self.pending.pop(0)
            handler = self._previous.get(signum)
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                raise _DefaultAction(signum)

    def settle(self, ignore_after: bool = False) -> None:
        """Mark the outcome final (every file is written): from now on no signal changes it.

        Signals still pending and those arriving later are moved to / noted in :attr:`late` and
        never acted on. With ``ignore_after``, the :data:`SIGNALS` are left at ``SIG_IGN`` when the
        outermost block is left instead of getting their handlers back, so nothing between here
        and the exit of the process can turn "applied" into "interrupted": the caller that owns
        the process restores them if it goes on (:func:`rewriter.cli.main` does when called
        in-process).
        """
        self.late.extend(self.pending)
        self.pending.clear()
        self._settled = True
        self._ignore_after = self._ignore_after or ignore_after


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for a signal number (``signal N`` when it has no name)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
