"""The search's reference (the program as it is) started before the ladder's compile rungs.

The search measures every candidate beside the program as it is, the eager reference: it builds
the model, runs each harness shape, saves the weights and inputs every candidate loads, and (a
bf16/fp16 harness) runs the float64 reference the numerics are judged against. No compiled
candidate's cold phase starts before those weights are saved. None of it depends on the ladder's
verdicts, and the compile rungs (graph breaks, recompiles, per-instance recompiles) time nothing:
they trace on one host core with the ``eager`` backend. So on
a GPU host the reference's child is started, and told to go, before the first compile rung
(:func:`start`), and the search takes it over (``run_search(early=...)``,
``engine.measure.measure(started=...)``); its build and run overlap the compile rungs instead of
opening the search (docs/design.md, "The search").

Started only where the reference may overlap a compile at all
(:func:`rewriter.engine.cost.may_overlap`: a GPU, 8 or more CPUs, no ``--no-overlap``) and the
device has room for it beside the diagnosed model (:func:`rewriter.engine.cost.room_to_overlap`
on the model's allocated bytes); the ladder's timing rungs (batch scaling, profile, device time,
gaps) and the memory rung have run by then, so no timed step and no allocator reading shares the
device with it.

The whole-model anchor (``torch.compile(model)``, measured whatever the search's budget) starts
with it where the evidence so far proposes one (:func:`.candidates.anchor_plan`): it builds, waits
for the reference's weights (``wait_for_weights``), and compiles while the compile rungs run, its
cold phase (a whole model's compile and its new-shape recompile: tens of seconds) off the search's
critical path too. The search uses it only where the proposal's anchor rewrites SRC to the same
bytes (:meth:`Anchor.same_rewrite`); otherwise it is ended and the anchor starts with the others.
Its compile seconds then include what the compile rungs and the reference took from the host's
CPUs, as two cold phases at a time do (the search's note says so). Its static-shape twin
(``whole+static``, :mod:`.kinds.static_shapes`), measured whatever the budget too, starts with it
where it is proposed, on the same terms.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .candidate import WHOLE
from .context import Context
from .kinds.static_shapes import WHOLE_STATIC


@dataclass
class Anchor:
    """A whole-model compile's child started with the reference: the anchor, or its static-shape
    twin (``whole+static``).

    Attributes:
        variant: its :class:`rewriter.engine.options.Variant` (its tree under the search's folder).
        child: its :class:`rewriter.engine.runner.ServedChild`, already sent ``go``.
        changes: its rewrite's ``(relpath, new bytes)``, sorted: what the proposal's must equal.
    """

    variant: Any
    child: Any
    changes: list[tuple[str, bytes]]

    def same_rewrite(self, changes: list[Any]) -> bool:
        """Whether ``changes`` (a :class:`rewriter.rewrite.transform.FileChange` list) rewrite SRC
        to the bytes this anchor's tree holds."""
        return sorted((c.relpath, c.new) for c in changes) == self.changes


@dataclass
class EarlyReference:
    """The reference's child (and the anchor's and its static-shape twin's, where they started),
    started before the search.

    Attributes:
        workdir: the search's temporary folder (``original/``, the job files, ``ref/``, caches).
        original: SRC copied as the reference's tree.
        variant: the reference's :class:`rewriter.engine.options.Variant`.
        child: its :class:`rewriter.engine.runner.ServedChild`, already sent ``go``.
        started_at: ``time.perf_counter()`` when it was spawned.
        anchor: the whole-model anchor started with it, or None.
        static: its static-shape twin (``whole+static``, :mod:`.kinds.static_shapes`) started
            with it where one is proposed, or None.
        taken: the search took it over (it then ends the children and removes ``workdir``).
    """

    workdir: Path
    original: Path
    variant: Any
    child: Any
    started_at: float
    anchor: Anchor | None = None
    static: Anchor | None = None
    taken: bool = False

    def started_anchor(self, name: str) -> Anchor | None:
        """The child started here for candidate ``name`` (``whole`` or ``whole+static``), or None."""
        return {WHOLE: self.anchor, WHOLE_STATIC: self.static}.get(name)

    def drop_anchor(self, name: str = WHOLE) -> None:
        """End the child started for ``name`` (the proposal's is another rewrite) and remove the
        caches it compiled into (``workdir/caches/<name>``, the folder an anchor started again with
        the others is given: its cold phase must compile from empty caches) and the result it may
        have written (the file that anchor's result is read from: one that dies without writing its
        own must read as a crash)."""
        held = self.started_anchor(name)
        if held is not None:
            _end(held.child)
            shutil.rmtree(self.workdir / "caches" / held.variant.name, ignore_errors=True)
            Path(held.child.job["out"]).unlink(missing_ok=True)
            if held is self.anchor:
                self.anchor = None
            else:
                self.static = None

    def end_children(self) -> None:
        """End every child started here (a no-op for one the engine ended already)."""
        _end(self.child)
        self.drop_anchor()
        self.drop_anchor(WHOLE_STATIC)

    def close(self) -> None:
        """End the children and remove the folder, unless the search took them over."""
        if self.taken:
            return
        self.end_children()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _end(child: Any) -> None:
    child.terminate()
    child.close()


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


def prestart(ctx: Context) -> bool:
    """Where the reference may start early (a GPU host with room to overlap, :func:`why_not`'s
    first rules), start the measurement children's zygote server now
    (:func:`rewriter.engine.runner.prestart_server`): its imports (torch, Dynamo, Inductor, the
    model's library: seconds) run beside the setup's build instead of before the first child,
    the reference, whose build the whole-model anchor waits for. True where one was started."""
    from ..engine.cost import may_overlap
    from ..engine.runner import prestart_server

    if not ctx.session.cuda or not may_overlap(ctx.overlap, "cuda"):
        return False
    return prestart_server(ctx.session.spec.device, [ctx.session.src])


def prestarted_ready() -> None:
    """Wait for the server :func:`prestart` started to be ready or to refuse
    (:func:`rewriter.engine.zygote.await_started`): called before the quiet rungs, whose
    timings its imports would share the host with."""
    from ..engine.zygote import await_started

    await_started()


def start(ctx: Context, timeout_s: float) -> EarlyReference:
    """Copy SRC, spawn the reference's cold-phase child with the search's engine options
    (:func:`.search.engine_options`, ``timeout_s`` per child wait) and send it ``go``: it builds,
    runs and saves while the ladder goes on. Then the anchor (:func:`_start_anchor`), where there
    is one, and its static-shape twin where :func:`.kinds.static_shapes.static_plan` proposes it (a
    failure starting the twin leaves it to the search and ends nothing else)."""
    from ..engine.materialize import IGNORE
    from ..engine.measure import child_job, start_cold
    from ..engine.options import Variant
    from .search import engine_options, reference_stance

    workdir = Path(tempfile.mkdtemp(prefix="stackpart-search-"))
    child = None
    try:
        original = workdir / "original"
        shutil.copytree(ctx.session.src, original, ignore=IGNORE, symlinks=True)
        variant = Variant("eager", original, judged=False, stance=reference_stance(ctx))
        opts = engine_options(ctx, timeout_s)
        job = child_job(ctx.session.spec, opts, workdir)
        child = start_cold(job, variant, workdir, opts)
        child.go()  # read by the child once it has built
        early = EarlyReference(workdir, original, variant, child, time.perf_counter())
    except BaseException:  # Ctrl-C included: no child or folder left behind
        if child is not None:
            _end(child)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        from .candidates import anchor_plan
        from .kinds.static_shapes import static_plan

        plan = anchor_plan(ctx)
        early.anchor = _start_anchor(ctx, job, opts, workdir, WHOLE, plan)
    except BaseException:
        early.close()
        raise
    if early.anchor is not None:
        # measured whatever the budget too; optional: a failure here (make_inputs, its rewrite)
        # leaves it to start with the others and ends nothing that started
        try:
            early.static = _start_anchor(ctx, job, opts, workdir, WHOLE_STATIC, static_plan(ctx, plan))
        except Exception:  # noqa: BLE001 - the search proposes it again and says why it fails
            early.static = None
        except BaseException:
            early.close()
            raise
    return early


def _start_anchor(ctx: Context, job: dict[str, Any], opts: Any, workdir: Path, name: str, plan: Any) -> Anchor | None:
    """Candidate ``name``'s tree (``plan``: the whole-model anchor as :func:`.candidates.anchor_plan`
    proposes it, or its static-shape twin, rewritten by the search's own path) and its child, sent
    ``go`` (it waits for the reference's weights); None where ``plan`` is None or does not rewrite."""
    from ..engine.measure import start_cold
    from ..errors import StackpartError
    from .candidate import Candidate
    from .search import candidate_rewrite, candidate_variant, materialise

    if plan is None:
        return None
    c = Candidate(name, plan)
    try:
        result = candidate_rewrite(c, ctx.session.src)
    except StackpartError:
        return None  # the search says why, when it proposes it
    if not result.changes:
        return None
    tree = workdir / ("anchor" if name == WHOLE else "anchor-static")
    materialise(c, ctx.session.src, tree, result)
    variant = candidate_variant(c, tree, result)
    child = start_cold(dict(job, wait_for_weights=True), variant, workdir, opts)
    try:
        child.go()
        return Anchor(variant, child, sorted((ch.relpath, ch.new) for ch in result.changes))
    except BaseException:
        _end(child)
        raise
