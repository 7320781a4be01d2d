"""The interleaved timing of the warm processes: per shape, rounds of one sample per process in a
rotating order, in one or more windows apart in time, and a contended window with a busy loop on
the shared core (:attr:`.options.Options.windows`, :attr:`.options.Options.contended`)."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .options import PIN_MODES, Options
from .replicas import REPLICA
from .timing import Timed, summarize


@dataclass
class Rounds:
    """How every window of one :func:`interleave` call times, and the processes it still times.

    Attributes:
        children: process name -> its served child (``name + REPLICA`` for a second process).
        shapes: the harness's shapes, timed in this order in each window.
        names: the processes still timed (a second process that fails is removed).
        quiet: the processes the quiet windows timed: the same list as ``names`` until the
            contended window, then a copy (one dropped there keeps its quiet figures).
        pins: process name -> the CPU core its main thread is pinned to (empty: not pinned).
        burst: the child's ``time`` keywords for a blocked sample (``{"burst_ms": ...}``), or ``{}``.
        warmup: untimed calls per process before each shape's rounds.
        reps: rounds per window per shape (at most).
        budget_s: seconds of rounds per window per shape (at least 3 rounds).
        windows: quiet windows per shape.
        emit: progress callback (:data:`.measure.Progress`), or None.
        notes: where the timing's notes go, or None.
    """

    children: dict[str, Any]
    shapes: list[dict[str, int]]
    names: list[str]
    pins: dict[str, int]
    burst: dict[str, float]
    warmup: int
    reps: int
    budget_s: float
    windows: int
    emit: Callable[[str, str, Any], None] | None
    notes: list[str] | None
    quiet: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if self.notes is not None:
            self.notes.append(text)

    def failed(self, n: str, reply: dict[str, Any], samples: dict[str, list[float]]) -> str | None:
        """The error that stops the timing, or None when ``n`` was a second process (dropped)."""
        why = f"{n}: {reply['error']['kind']}: {reply['error']['message']}"
        if not n.endswith(REPLICA):
            return why
        self.names.remove(n)
        samples.pop(n, None)
        self.children[n].terminate()
        which = ("its contended figures are its first process's, its quiet ones still both processes'"
                 if self.quiet is not self.names else "that variant's figures are its first process's")
        self.note(f"the second process of {n[: -len(REPLICA)]} failed while timing and was dropped "
                  f"({' '.join(why.split())[:200]}): {which}")
        return None


@dataclass
class Collected:
    """The samples of every window so far, per shape (index) and process name.

    Attributes:
        spans: each quiet window's samples (one list per window), seconds per call.
        contended: the contended windows' median over all their samples, ms (not paired with the
            quiet rounds).
        calls: calls per timed block, each shape's own (sized once per shape in the child).
        contended_samples: each contended window's samples pooled, seconds per call.
        contended_windows: each contended window's median, ms, in window order.
    """

    spans: list[dict[str, list[list[float]]]]
    contended: list[dict[str, float]]
    calls: list[dict[str, int]]
    contended_samples: list[dict[str, list[float]]] = field(default_factory=list)
    contended_windows: list[dict[str, list[float]]] = field(default_factory=list)


def interleave(
    children: dict[str, Any], shapes: list[dict[str, int]], opts: Options, emit: Callable[[str, str, Any], None] | None = None,
    notes: list[str] | None = None, device: str = "cpu",
) -> Timed:
    """Time every variant per shape: warm-up calls each, then rounds of one sample per variant in
    a rotating order (each in its own warm process), until ``opts.reps`` rounds or
    ``opts.budget_s`` seconds (at least 3 rounds). On CUDA a sample is a back-to-back block of
    about ``opts.burst_ms`` (:func:`.timing.time_burst`) and the processes' main threads are
    pinned as ``opts.pin`` says (:func:`.cores.pin_plan`: by default all on the core of median speed);
    on CPU one isolated call. Returns per-shape summaries and the raw samples per shape (round
    order, paired across variants; seconds per call), or an error (:class:`.timing.Timed`). A variant's
    second process (``name + REPLICA``) that fails is dropped from then on, said in ``notes``: it
    is there to make the figures robust, and its variant keeps its first process's.

    Raises:
        ValueError: ``opts.pin`` is not one of :data:`.options.PIN_MODES`.
    """
    if opts.pin not in PIN_MODES:
        raise ValueError(f"Options.pin: expected one of {', '.join(PIN_MODES)}, got {opts.pin!r}")
    cuda = device.startswith("cuda")
    names = list(children)
    pins = _pins(names, opts, notes) if cuda else {}
    windows = max(1, int(opts.windows))
    rounds = Rounds(children, shapes, names, pins, {"burst_ms": opts.burst_ms} if cuda and opts.burst_ms > 0 else {},
                    opts.warmup, max(1, math.ceil(opts.reps / windows)), opts.budget_s / windows, windows, emit, notes)
    rounds.quiet = rounds.names
    got = Collected([{n: [] for n in names} for _ in shapes], [{} for _ in shapes], [{} for _ in shapes],
                    [{} for _ in shapes], [{} for _ in shapes])
    shared = sorted(set(pins.values())) if len(set(pins.values())) == 1 and len(pins) == len(names) else []
    if opts.contended and not shared and cuda:
        rounds.note("not timed with a contended host core: the timed processes are not all pinned to one core (--pin)")
    error = _quiet_windows(rounds, got)
    if error:
        return Timed(error=error)
    if opts.contended and shared:
        _contended_window(rounds, got, shared[0])
    timed = _summaries(rounds, got)
    _notes(rounds, got, opts, shared)
    return timed


def _pins(names: list[str], opts: Options, notes: list[str] | None) -> dict[str, int]:
    """Where each timed process's main thread runs on CUDA (:func:`.cores.pin_plan`), with a note
    saying what was done; empty where ``opts.pin`` is ``off`` or the host cannot pin."""
    if opts.pin == "off" or not hasattr(os, "sched_getaffinity"):
        return {}
    from .cores import ONE_CORE_MODES, core_speeds, pin_plan

    cores = sorted(os.sched_getaffinity(0))
    have = len(cores)
    speeds = core_speeds(cores[2:]) if opts.pin in ONE_CORE_MODES and have >= 3 else {}
    pins = pin_plan(names, cores, opts.pin, speeds)
    if notes is None:
        return pins
    if pins and opts.pin in ONE_CORE_MODES:
        core = next(iter(pins.values()))
        which = "the fastest" if opts.pin == "fastest" else "the one of median speed"
        speed = (f", {which} of {len(speeds)} at a pure-Python loop ({speeds[core] * 1e6:.0f} us a loop; fastest "
                 f"{min(speeds.values()) * 1e6:.0f} us, median {statistics.median(speeds.values()) * 1e6:.0f} us)") if core in speeds else ""
        notes.append(f"the timed processes' main threads all pinned to CPU core {core}{speed} "
                     f"({len(pins)} processes, one running at a time): per-core speed is the same for every variant")
    elif pins:
        notes.append(f"each timed process's main thread pinned to its own CPU core ({len(pins)} processes)")
    else:
        need = 3 if opts.pin in ONE_CORE_MODES else len(names) + 2
        notes.append(f"timed processes not pinned to cores: {len(names)} processes need {need} cores, {have} available")
    return pins


def _quiet_windows(rounds: Rounds, got: Collected) -> str | None:
    """Every quiet window over every shape; the error that stops the timing, or None."""
    for w in range(rounds.windows):
        error = _window(rounds, got, w, loaded=False)
        if error:
            return error
    return None


#: Contended windows per shape (:func:`_contended_window`), each with half a quiet window's rounds
#: and seconds: the two windows' medians differ by what a re-run with the core contended would move
#: a figure by, which the two processes of one window, timed side by side under the same busy loop,
#: do not show (:func:`.noise.process_noise`, ``contended_share``).
CONTENDED_WINDOWS = 2


def _contended_window(rounds: Rounds, got: Collected, core: int) -> None:
    """:data:`CONTENDED_WINDOWS` more windows per shape with a busy loop pinned to the shared
    ``core`` (:func:`.cores.contend`), the shapes in turn, each with half the rounds and seconds of
    a quiet window (at least 3 rounds). It is supplementary: where it cannot start or stops, the quiet
    figures stand without it, said in a note."""
    from .cores import contend

    rounds.quiet = list(rounds.names)  # one dropped in the contended window keeps its quiet figures: median_ms never moves with it
    try:
        hog = contend(core)
    except OSError as exc:
        rounds.note(f"not timed with a contended host core: the busy loop could not start ({exc})")
        return
    try:
        time.sleep(0.2)  # the loop pinned and running before the first round (inside the try: killed on an interrupt)
        reps, budget = rounds.reps, rounds.budget_s
        rounds.reps, rounds.budget_s = max(3, math.ceil(reps / CONTENDED_WINDOWS)), budget / CONTENDED_WINDOWS
        error = None
        for w in range(CONTENDED_WINDOWS):
            error = error or _window(rounds, got, rounds.windows + w, loaded=True)
        rounds.reps, rounds.budget_s = reps, budget
    finally:
        hog.kill()
        hog.wait()
    if error:
        for per in got.contended + got.contended_windows:
            per.clear()
        rounds.note(f"no contended-core figures: the timing with the busy loop stopped ({' '.join(error.split())[:200]}); "
                    "the quiet windows' figures stand")


def _window(rounds: Rounds, got: Collected, w: int, loaded: bool) -> str | None:
    """Window ``w`` of :func:`interleave` over every shape; the error that stops the timing, or
    None. A quiet window's samples per process go to ``got.spans`` (one list per window); a
    ``loaded`` (contended) window's go to ``got.contended_samples`` (its median to
    ``got.contended_windows``), and ``got.contended`` is the median of every contended sample so far."""
    for i, shape in enumerate(rounds.shapes):
        if rounds.emit is not None:
            label = (f"{shape} (host core contended)" if loaded
                     else shape if rounds.windows == 1 else f"{shape} (window {w + 1} of {rounds.windows})")
            rounds.emit("*", "timing", label)
        samples: dict[str, list[float]] = {n: [] for n in rounds.names}
        error = _warm_up(rounds, i, w, samples) or _rotate(rounds, got, i, samples)
        if error:
            return error
        for n, v in samples.items():
            if v and loaded:
                pooled = got.contended_samples[i].setdefault(n, [])
                pooled.extend(v)
                got.contended_windows[i].setdefault(n, []).append(statistics.median(v) * 1e3)
                got.contended[i][n] = statistics.median(pooled) * 1e3
            elif v:
                got.spans[i][n].append(v)
    return None


def _warm_up(rounds: Rounds, i: int, w: int, samples: dict[str, list[float]]) -> str | None:
    """Shape ``i``'s untimed calls in every process (the first of all pins each process's main
    thread); the error that stops the timing, or None."""
    unpinned = []
    for n in list(rounds.names):
        extra = dict(rounds.burst, pin=rounds.pins[n]) if i == 0 and w == 0 and n in rounds.pins else rounds.burst
        reply = rounds.children[n].time(i, rounds.warmup, 0, **extra)
        if "error" in reply and (error := rounds.failed(n, reply, samples)):
            return error
        if "pin" in extra and "error" not in reply and reply.get("pinned") != rounds.pins[n]:
            unpinned.append(n)
    if unpinned:  # the child could not pin itself (os.sched_setaffinity refused)
        rounds.note(f"not pinned as planned: {', '.join(unpinned)} (the child could not set its CPU affinity)")
    return None


def _rotate(rounds: Rounds, got: Collected, i: int, samples: dict[str, list[float]]) -> str | None:
    """Shape ``i``'s rounds, one sample per process each in a rotating order, until
    ``rounds.reps`` rounds or ``rounds.budget_s`` seconds (at least 3); the error that stops the
    timing, or None."""
    started = time.perf_counter()
    for rep in range(rounds.reps):
        names = rounds.names
        k = rep % len(names)
        for n in names[k:] + names[:k]:
            reply = rounds.children[n].time(i, 0, 1, **rounds.burst)
            if "error" in reply:
                if error := rounds.failed(n, reply, samples):
                    return error
                continue
            samples[n].extend(reply["samples"])
            got.calls[i][n] = int(reply.get("calls", 1))
        if rep >= 2 and time.perf_counter() - started > rounds.budget_s:
            break
    return None


def _summaries(rounds: Rounds, got: Collected) -> Timed:
    """Per shape, each process's summary over every quiet window's samples (paired round by round;
    a dropped second process is gone from every shape): with several windows the faster window's
    median and spread stand, with ``windows_ms`` listing each; ``contended_ms`` and
    ``calls_per_sample`` where measured."""
    timed = Timed()
    for i, shape in enumerate(rounds.shapes):
        spans = got.spans[i]
        per = {n: [x for span in spans[n] for x in span] for n in rounds.quiet}
        for n in set(got.contended[i]) - set(rounds.names):  # dropped in the contended window: none of its contended figures
            del got.contended[i][n]
        summary = {n: summarize(v) for n, v in per.items()}
        for n, t in summary.items():
            medians = [statistics.median(span) * 1e3 for span in spans[n]]
            if rounds.windows > 1 and t.get("n") and medians:
                t["windows_ms"] = medians
                # the spread of the window that stands, so p10 <= median <= p90 in every report
                standing = summarize(spans[n][medians.index(min(medians))])
                t.update(median_ms=standing["median_ms"], p10_ms=standing["p10_ms"], p90_ms=standing["p90_ms"])
            if t.get("n") and n in got.contended[i]:
                t["contended_ms"] = got.contended[i][n]
                if len(got.contended_windows[i].get(n, [])) > 1:
                    t["contended_windows_ms"] = got.contended_windows[i][n]
            if rounds.burst and t.get("n"):
                t["calls_per_sample"] = got.calls[i].get(n, 1)
        timed.rows.append({"shape": shape, "timing": summary})
        timed.samples.append(per)
    return timed


def _notes(rounds: Rounds, got: Collected, opts: Options, shared: list[int]) -> None:
    """What the report says of how the timing was done: windows, the contended core, blocked samples."""
    if rounds.windows > 1:
        rounds.note(f"each shape was timed in {rounds.windows} windows apart in time (the shapes in turn); a process's figure "
                    "per shape is its faster window's median (a host stall through one window cannot make a plan faster)")
    if any(got.contended):
        rounds.note(f"then each shape in {CONTENDED_WINDOWS} more windows with a busy loop on the shared core {shared[0]} "
                    "(a contended host core: a data-loader worker or a neighbour time-slicing with the main thread): "
                    "each plan's 'contended' step, the median of those windows' samples")
    if rounds.burst:
        rounds.note(
            f"each timing sample is the per-call time of a back-to-back block of about {opts.burst_ms:.0f} ms after "
            "one untimed call (steady state of a loop, torch.utils.benchmark's blocked measurement)"
        )
