"""The search's reference (the program as it is) started before the ladder's compile rungs.

The search measures every candidate beside the program as it is, the eager reference: it builds
the model, runs each harness shape, saves the weights and inputs every candidate loads, and (a
bf16/fp16 harness) runs the float64 reference the numerics are judged against. No compiled
candidate's cold phase starts before those weights are saved. None of it depends on the ladder's
verdicts, and no verdict of the rungs after the timing rungs reads a time: the compile rungs (graph
breaks, recompiles, per-instance recompiles) trace on one host core with the ``eager`` backend, and
the memory rung judges the allocator's counters (its step times are reported, not judged). So on
a GPU host the reference's child is started, and told to go, before the first compile rung
(:func:`start`), and the search takes it over (``run_search(early=...)``,
``engine.measure.measure(started=...)``); its build and run overlap the compile rungs instead of
opening the search (docs/design.md, "The search").

Started only where the reference may overlap a compile at all
(:func:`rewriter.engine.cost.may_overlap`: a GPU, 8 or more CPUs, no ``--no-overlap``) and the
device has room for it beside the diagnosed model (:func:`rewriter.engine.cost.room_to_overlap`
on the model's allocated bytes); the ladder's timing rungs (batch scaling, profile, device time,
gaps) have run by then, so no timed step shares the device with it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .context import Context


@dataclass
class EarlyReference:
    """The reference's child, started before the search.

    Attributes:
        workdir: the search's temporary folder (``original/``, the job files, ``ref/``, caches).
        original: SRC copied as the reference's tree.
        variant: the reference's :class:`rewriter.engine.options.Variant`.
        child: its :class:`rewriter.engine.runner.ServedChild`, already sent ``go``.
        started_at: ``time.perf_counter()`` when it was spawned.
        taken: the search took it over (it then ends the child and removes ``workdir``).
    """

    workdir: Path
    original: Path
    variant: Any
    child: Any
    started_at: float
    taken: bool = False

    def close(self) -> None:
        """End the child and remove the folder, unless the search took them over."""
        if self.taken:
            return
        self.child.terminate()
        self.child.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def why_not(ctx: Context) -> str | None:
    """None when the reference may start early; else why not (no GPU, too few CPUs or
    ``--no-overlap``, too little free device memory beside the diagnosed model)."""
    from ..engine.cost import may_overlap, room_to_overlap

    if not ctx.session.cuda:
        return "not on a GPU (the compile rungs and the reference would share the CPUs)"
    if not may_overlap(ctx.overlap, "cuda"):
        return "--no-overlap, or fewer than 8 CPUs"
    import torch

    free, _ = torch.cuda.mem_get_info()
    return room_to_overlap({"allocated": torch.cuda.memory_allocated(), "free": free})


def start(ctx: Context, timeout_s: float) -> EarlyReference:
    """Copy SRC, spawn the reference's cold-phase child with the search's engine options
    (:func:`.search.engine_options`, ``timeout_s`` per child wait) and send it ``go``: it builds,
    runs and saves while the ladder goes on."""
    from ..engine.materialize import IGNORE
    from ..engine.measure import child_job, start_cold
    from ..engine.options import Variant
    from .search import engine_options

    workdir = Path(tempfile.mkdtemp(prefix="stackpart-search-"))
    try:
        original = workdir / "original"
        shutil.copytree(ctx.session.src, original, ignore=IGNORE, symlinks=True)
        variant = Variant("eager", original, judged=False)
        opts = engine_options(ctx, timeout_s)
        child = start_cold(child_job(ctx.session.spec, opts, workdir), variant, workdir, opts)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    child.go()  # read by the child once it has built
    return EarlyReference(workdir, original, variant, child, time.perf_counter())
