"""The second timed process of each variant (:attr:`.options.Options.replicates` 2): whether they fit
in device memory, their spawn beside the later cold phases, and the fold of their figures into
their variant's (docs/decisions.md, "Two processes per variant")."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from .options import REPLICA_CACHES, REPLICA_TEXT
from .timing import Timed

#: The key of a variant's second timed process in :func:`.windows.interleave`'s results, before
#: :func:`merge_replicates` folds it into the variant's own.
REPLICA = "#2"
#: GPU memory a replicate may take, as a share of what is free once every variant's process is
#: up: each needs about its variant's peak allocated bytes again, plus a CUDA context.
REPLICA_MEMORY_SHARE = 0.8
#: Bytes of a CUDA context and allocator slack per process (about 0.5-1 GiB on a datacenter GPU).
CONTEXT_BYTES = 1 << 30


def replica_room(results: dict[str, dict[str, Any]], names: list[str], device: str,
                 processes: dict[str, int] | None = None) -> str | None:
    """Why second processes of ``names`` would not fit on the device (None: they fit, or the
    device is a CPU): each needs its variant's peak allocated bytes (the cold phase's
    ``max_memory_allocated_bytes``; for a variant whose cold phase has not run yet, the largest
    peak measured so far) x 1.25 plus :data:`CONTEXT_BYTES`, all within
    :data:`REPLICA_MEMORY_SHARE` of the device's free memory now (``torch.cuda.mem_get_info``;
    the variants still to run have their processes up and their models built already). A variant
    whose cold phase has not run yet (no row in ``results``) will still grow to its own peak
    (activations, compile workspace), which the replicas must not take: the largest peak measured
    so far x 1.25 is kept free for each, and for each of its shape warmers (:mod:`.warmers`;
    ``processes``: how many processes each variant's cold phase runs at once, 1 where absent)."""
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index or 0
    free, _total = torch.cuda.mem_get_info(index)
    peaks = {n: (results.get(n) or {}).get("max_memory_allocated_bytes") for n in names}
    known = max((p for p in peaks.values() if p), default=0)
    need = sum(int((peaks[n] or known) * 1.25) + CONTEXT_BYTES for n in names)
    pending = [n for n in names if n not in results]
    keep = sum((processes or {}).get(n, 1) for n in pending) * int(known * 1.25)
    if need + keep > REPLICA_MEMORY_SHARE * free:
        kept = (f" (besides {keep / 2**30:.1f} GiB kept for the {len(pending)} cold phase(s) still to run)"
                if pending else "")
        return (f"a second process per variant needs about {need / 2**30:.1f} GiB{kept} and the device has "
                f"{free / 2**30:.1f} GiB free: each variant is timed in its cold-phase process only")
    return None


class Replicas:
    """The second timed process of each variant (:attr:`.options.Options.replicates` > 1), started early.

    They are spawned together once the first compiled variant's cold phase is over (:meth:`spawn`,
    sized by :func:`replica_room` with the peak memory measured so far), so their interpreter
    starts, imports and model builds overlap the later cold phases instead of following them
    (docs/decisions.md, "Replicas spawned early, deferred when memory is short"). A replica gets
    its ``go`` once its own variant's cold phase has been recorded
    without a problem (:meth:`started`): it then compiles from that variant's caches, warm, and
    records nothing to judge (the child's ``replica`` job flag). A variant whose cold phase fails,
    has a problem or is skipped by the deadline has its replica ended then (:meth:`end`), so it
    holds no memory through the later cold phases; :meth:`collect` waits for the replicas of the
    variants that will be timed and ends the others. Their builds and warm
    compiles share the host with the cold phases still running, which the note says. With
    ``replicates`` 1 (CPU) nothing is spawned."""

    def __init__(self, m, spec_run, variants, job, workdir, caches, opts, children, deadline, emit,  # type: ignore[no-untyped-def]
                 cold_s=None):
        self.m, self.spec_run, self.job, self.workdir, self.caches = m, spec_run, job, workdir, caches
        self.opts, self.children, self.deadline, self.emit = opts, children, deadline, emit
        #: seconds of each variant's recorded cold phase (the caller's dict, filled as they end)
        self.cold_s: dict[str, float] = cold_s if cold_s is not None else {}
        self.variants = {v.name: v for v in variants}
        self.wanted = opts.replicates > 1 and len(variants) > 1
        self.spawned = False
        self.deferred = False  # the spawn waited for room (:meth:`spawn`)
        self.procs: dict[str, Any] = {}
        self.ready: set[str] = set()  # variants whose cold phase was recorded without a problem
        self.ended: set[str] = set()  # variants that will not be timed (:meth:`end`)
        if opts.replica_caches not in REPLICA_CACHES:
            raise ValueError(f"replica_caches={opts.replica_caches!r}: expected one of {', '.join(REPLICA_CACHES)}")
        self.mode = opts.replica_caches

    def cache_root(self, name: str) -> Path:
        """The compile caches ``name``'s replica compiles from: its variant's own (``warm``) or a
        directory of its own (``reautotune``, filled by :meth:`started`)."""
        return self.caches / name if self.mode == "warm" else self.caches / f"{name}.replica"

    def _seed_caches(self, name: str) -> None:
        """For ``reautotune``: copy ``name``'s caches into its replica's directory, less the stored
        autotuning winners (``*.best_config``), before the replica's ``go`` (it has not compiled
        yet: the caches are read on its first call)."""
        if self.mode != "reautotune" or not (self.caches / name).is_dir():
            return
        shutil.copytree(self.caches / name, self.cache_root(name), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.best_config"), symlinks=True)

    def spawn(self, final: bool = False) -> None:
        """Spawn a replica of every variant not failed so far (once; later calls do nothing).

        Where they do not fit yet only because memory is kept for cold phases still to run
        (:func:`replica_room`), the spawn is deferred: each later call (after each cold phase, and
        ``final`` from :meth:`collect` once they are all over) tries again: memory kept for the cold phases
        still to run can leave no room for any replica at the first try while the same replicas
        fit once those are over (docs/decisions.md, "Replicas spawned early, deferred when memory
        is short")."""
        from .runner import ServedChild

        if not self.wanted or self.spawned:
            return
        m = self.m
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.spawned = True
            m.notes.append("one process per variant timed: the search budget was spent before second processes could start")
            return
        names = [n for n in self.variants if n not in self.ended
                 and not (m.results.get(n) or {}).get("problems") and not (m.results.get(n) or {}).get("error")]
        if len(names) < 2:
            self.spawned = True
            return
        why = replica_room(m.results, names, self.spec_run.device,
                           {n: 1 + len(getattr(self.children.get(n), "warmers", ())) for n in names})
        if why and not final and any(n not in m.results for n in names):
            self.deferred = True
            return
        self.spawned = True
        if why:
            m.notes.append(why)
            return
        late = self._no_time(names)
        if late:
            m.notes.append(late)
            return
        if self.deferred:
            waited = sum(1 for n in names if n not in m.results)
            m.notes.append(
                "second processes started " + (f"with {waited} cold phase(s) still to run" if waited else "after the cold phases")
                + ": earlier they did not fit beside the memory kept for the cold phases still to run"
            )
        for n in names:
            v = self.variants[n]
            self.procs[n] = self.children[n + REPLICA] = ServedChild(
                dict(self.job, phase="cold", variants=[n], tree=str(v.tree), prepare=v.prepare, reference=False, replica=True,
                     library_modules=v.library_modules, site=v.site, reautotune=self.mode == "reautotune"),
                self.workdir, f"replica-{n}", self.cache_root(n), self.opts.timeout_s,
            )
        if self.emit is not None:
            self.emit("*", "replicates", len(self.procs))
        for n in list(self.ready):
            self.started(n)

    def _no_time(self, names: list[str]) -> str | None:
        """Why second processes that would start only now, with every cold phase of ``names`` over,
        do not fit before the deadline (None: they fit, or they overlap cold phases still to run).
        A second process builds its model and compiles again from its variant's caches while the
        others do the same, so it is expected to take about as long as the longest of their cold
        phases; starting them with less left than that ran a search past its budget by their
        start (docs/decisions.md, "The search's budget and its cold phases")."""
        if self.deadline is None or any(n not in self.m.results for n in names):
            return None
        expected = max((self.cold_s.get(n, 0.0) for n in names), default=0.0)
        left = self.deadline - time.perf_counter()
        if expected <= left:
            return None
        return (f"one process per variant timed: {max(left, 0.0):.0f} s of the search budget were left after the cold phases "
                f"and a second process is expected to take about {expected:.0f} s (the longest cold phase)")

    def started(self, name: str) -> None:
        """``name``'s cold phase was recorded without a problem: its replica may compile from
        its caches now (the ``go`` waits in the pipe while the replica still builds)."""
        self.ready.add(name)
        child = self.procs.get(name)
        if child is not None and getattr(child, "go_at", None) is None:
            self._seed_caches(name)
            child.go()

    def end(self, name: str) -> None:
        """``name`` will not be timed (its cold phase failed, had a problem, or was skipped by the
        deadline): its replica, if spawned, is ended now rather than holding its host memory and
        GPU memory through the later cold phases; one spawned later is never made
        (:meth:`spawn` skips failed variants, :meth:`collect` ends any other)."""
        self.ended.add(name)
        self.ready.discard(name)
        child = self.procs.pop(name, None)
        if child is not None:
            child.terminate()

    def collect(self, timeable: list[str]) -> dict[str, Any]:
        """The replicas that came up for the variants in ``timeable``, keyed ``name + REPLICA``;
        every other replica is ended. One that failed is a note; its variant keeps one process.
        One still building or compiling at the deadline is ended there (the timing's reserve
        follows the deadline; a second process is a robustness measure, never worth overrunning
        the budget), said in the note.
        A spawn deferred for room (:meth:`spawn`) is tried a last time first, for ``timeable``."""
        if self.wanted and not self.spawned:
            for n in [n for n in self.variants if n not in timeable]:
                self.ended.add(n)
            self.spawn(final=True)
        if not self.procs:
            return {}
        m = self.m
        late = self.deadline is not None and time.perf_counter() > self.deadline
        wanted = [n for n in self.procs if n in timeable] if len(timeable) > 1 and not late else []
        out: dict[str, Any] = {}
        failed, unfinished = [], []
        for n, child in self.procs.items():
            if n not in wanted:
                child.terminate()
                continue
            self.started(n)
            res = child.wait_cold(until=self.deadline)  # one not up by the deadline would hold the timing past it
            if not res.error and child.alive:
                out[n + REPLICA] = child
            elif res.error and res.error.get("kind") == "budget":
                unfinished.append(n)
                child.terminate()
            else:
                err = res.error or {"kind": "crash", "message": "it did not stay up to be timed"}
                failed.append(f"{n} ({err['kind']}: {' '.join(str(err['message']).split())[:160]})")
                child.terminate()
        if late:
            m.notes.append("one process per variant timed: the search budget was spent before the second processes were up")
        elif wanted:
            m.notes.append(
                f"timed in two processes each ({len(out)} of {len(wanted)} variants; the second {REPLICA_TEXT[self.mode]}, "
                "built while later cold phases ran): per shape a variant's figure is its faster process's median"
                + (f"; no second process for {', '.join(failed)}" if failed else "")
                + (f"; one process for {', '.join(unfinished)}: its second was not up when the search budget ran out"
                   " (ended)" if unfinished else "")
            )
        return out


def merge_replicates(timed: Timed, names: list[str]) -> Timed:
    """Fold each variant's second process (key ``name + REPLICA``) into its own figures: per shape
    the process with the lower median stands for the variant (its summary and its samples, which
    stay paired round by round with every other variant's), and the summary gains
    ``processes_ms`` (both medians, the cold-phase process first) and ``process`` (0 or 1, which
    one stood). A slow process is a one-sided error (a busy core, a slow placement: it cannot make
    the program faster than it is), so the faster one is the estimate. Variants without a second
    process are left as they are. Returns a new :class:`.timing.Timed` keyed by ``names`` only."""
    out = Timed()
    for row, per in zip(timed.rows, timed.samples):
        t, s = {}, {}
        for n in names:
            first, second = row["timing"].get(n), row["timing"].get(n + REPLICA)
            if second is None or not second.get("n") or not (first or {}).get("n"):
                t[n], s[n] = first, per.get(n, [])
                continue
            pick = 1 if second["median_ms"] < first["median_ms"] else 0
            chosen = (first, second)[pick]
            t[n] = dict(chosen, processes_ms=[first["median_ms"], second["median_ms"]], process=pick)
            both = [x["contended_ms"] for x in (first, second) if x.get("contended_ms")]
            if both:  # the contended window's too: the faster process's (the same one-sided error)
                t[n]["contended_ms"] = min(both)
                if len(both) == 2:
                    t[n]["contended_processes_ms"] = both
            s[n] = per[n + REPLICA] if pick else per[n]
        out.rows.append(dict(row, timing=t))
        out.samples.append(s)
    return out
