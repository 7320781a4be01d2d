"""``run_distributed``: launch the harness under torchrun, one process per GPU (or per CPU
process group member with gloo), then merge the ranks' traces into findings.

stackpart writes no launcher of its own: it runs ``python -m torch.distributed.run --standalone
--nproc-per-node N -m rewriter.distributed.worker --config run.json`` in a subprocess (the same
``torchrun`` people use) and reads back the files each rank wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import StackpartError
from ..plan import DISTRIBUTED_SETTINGS, Harness
from . import advise
from .findings import COLLECTIVE_BOUND_SHARE, STRAGGLER_SHARE, DistributedFindings, merge
from .report import markdown
from .trace import MIN_GAP_US, analyze_trace, load_trace
from .worker import WRAPPERS

#: Settings the worker applies when it wraps the model (the others are advice for the user's code).
RUNNABLE_SETTINGS = {"ddp": {"bucket_cap_mb"}, "fsdp2": {"reshard_after_forward", "forward_prefetch"}, "none": set()}
#: Module-level dict a harness file may define to choose the wrapper:
#: ``STACKPART_DISTRIBUTED = {"wrap": "fsdp2", "settings": {"reshard_after_forward": True}}``.
HARNESS_ATTR = "STACKPART_DISTRIBUTED"


def _harness_defaults(spec: Harness, src: Path) -> dict[str, Any]:
    """The harness file's :data:`HARNESS_ATTR`, or {} (the file is imported to check it)."""
    from ..harness import load_harness

    h = load_harness(spec, src)
    found = getattr(h.build_model, "__globals__", {}).get(HARNESS_ATTR, {})
    if not isinstance(found, dict):
        raise StackpartError(f"{HARNESS_ATTR} must be a dict like {{'wrap': 'ddp'}}", path=spec.file)
    return found


def _check_settings(wrap: str, settings: dict[str, Any], where: str) -> None:
    """Raise StackpartError (prefixed with ``where``) for a key of ``settings`` that the worker
    does not apply under ``wrap`` (:data:`RUNNABLE_SETTINGS`), saying whether it is a known
    setting that is advice for the user's training loop (:data:`rewriter.plan.DISTRIBUTED_SETTINGS`)."""
    allowed = RUNNABLE_SETTINGS[wrap]
    for key in settings:
        if key not in allowed:
            advisory = key in DISTRIBUTED_SETTINGS.get(wrap, {})
            raise StackpartError(
                f"{where}: setting {key!r} "
                + ("is advice for your training loop, not run by diagnose" if advisory else f"is not a {wrap} setting")
                + f"; runnable {wrap} settings: {', '.join(sorted(allowed)) or 'none'}"
            )


def run_distributed(
    harness_spec: Harness,
    src: str | Path,
    nproc: int,
    out_dir: str | Path,
    *,
    wrap: str | None = None,
    settings: dict[str, Any] | None = None,
    library_modules: list[str] | None = None,
    site: dict[str, Any] | None = None,
    warmup: int = 2,
    steps: int = 3,
    with_stack: bool = True,
    threads_per_rank: int = 1,
    timeout_s: float = 600.0,
    straggler_share: float = STRAGGLER_SHARE,
    collective_bound_share: float = COLLECTIVE_BOUND_SHARE,
    min_gap_us: float = MIN_GAP_US,
) -> DistributedFindings:
    """Run the harness on ``nproc`` processes under torchrun and diagnose its collectives.

    Args:
        harness_spec: the plan's ``harness:`` (``mode: training`` for DDP: its collectives run
            in backward). ``device: cuda`` uses NCCL, one GPU per process; ``cpu`` uses gloo.
        src: the tree the harness file is relative to.
        nproc: processes (GPUs); at least 2.
        out_dir: where ranks write ``rank{R}.trace.json`` / ``rank{R}.steps.json`` and this
            writes ``findings.json``, ``findings.md`` and ``merged.trace.json`` (one Perfetto
            timeline, a process per rank).
        wrap: ``ddp``, ``fsdp2`` or ``none``; default: the harness file's
            ``STACKPART_DISTRIBUTED["wrap"]``, else ``ddp``.
        settings: wrapper settings to run with (``bucket_cap_mb``; ``reshard_after_forward``,
            ``forward_prefetch``), over the harness file's.
        library_modules, site: the plan's generated ``_stackpart/library.py`` files (relative to
            ``src``) and its ``site:`` with where it is written: every rank checks that the site
            ran while the harness built the model (:func:`rewriter.engine.build.site_ran`), as
            validate's single-process children do, so a plan whose site never runs is an error
            rather than the program timed without its library actions.
        warmup, steps: warm-up steps, then ``steps`` timed steps and ``steps`` profiled ones.
        with_stack: record Python stacks, to attribute host stalls to file:line.
        threads_per_rank: intra-op threads per CPU rank.
        timeout_s: wall-clock limit for the whole torchrun.
        straggler_share, collective_bound_share, min_gap_us: thresholds (see
            :mod:`rewriter.distributed.findings` and :mod:`rewriter.distributed.trace`).

    Returns:
        the merged findings, with ``suggestions`` (``distributed`` plan entries targeting
        ``<harness file>::<model callable>``) when the step is collective-bound.

    Raises:
        StackpartError: ``nproc < 2``, fewer GPUs than ``nproc``, an unknown wrapper or
            setting, a ``harness.call`` method under a DDP or FSDP2 wrapper (it bypasses the
            wrapper's forward), a harness that fails to import or build (its file:line, from the rank
            that hit it), a torchrun failure or timeout (with the tail of its output).
    """
    src = Path(src)
    out = Path(out_dir)
    wrap, merged_settings = _resolve_wrapper(harness_spec, src, nproc, wrap, settings)
    config = {
        "harness": harness_spec.model_dump(),
        "src": str(src.resolve()),
        "out_dir": str(out.resolve()),
        "wrap": wrap,
        "settings": merged_settings,
        "warmup": warmup,
        "steps": steps,
        "with_stack": with_stack,
        "threads": threads_per_rank,
        "library_modules": list(library_modules or []),
        "site": site,
    }
    config_path = _write_run_config(out, config)
    cmd, env = _torchrun_command(config_path, nproc, threads_per_rank)
    proc = _run_torchrun(cmd, env, timeout_s)
    _raise_rank_errors(out, nproc, proc)
    findings = _merge_ranks(out, nproc, harness_spec, straggler_share=straggler_share,
                            collective_bound_share=collective_bound_share, min_gap_us=min_gap_us)
    _write_findings(out, nproc, findings)
    return findings


def _resolve_wrapper(
    harness_spec: Harness, src: Path, nproc: int, wrap: str | None, settings: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The wrapper and its settings the ranks run with, checked before torchrun starts.

    ``wrap`` falls back to the harness file's ``STACKPART_DISTRIBUTED["wrap"]`` (imported by
    :func:`_harness_defaults`), then ``ddp``; ``settings`` override the file's key by key. The
    checks run in this order, so the first bad input is the one reported: ``nproc``, the wrapper,
    ``harness.call`` under a wrapper, each setting (:data:`RUNNABLE_SETTINGS`), the GPU count for
    ``device: cuda`` (``torch.cuda.device_count()``).

    Returns:
        ``(wrap, settings)``: one of :data:`rewriter.distributed.worker.WRAPPERS` and the merged
        settings dict.

    Raises:
        StackpartError: ``nproc < 2``; an unknown wrapper; a ``harness.call`` method with a DDP or
            FSDP2 wrapper (the call bypasses the wrapper's forward, where DDP's gradient bucket setup
            and FSDP2's unshard run); a setting the wrapper does not run; fewer visible GPUs than ``nproc``; a harness
            file that fails to import or whose ``STACKPART_DISTRIBUTED`` is not a dict.
    """
    if nproc < 2:
        raise StackpartError(f"--nproc {nproc}: the distributed run needs at least 2 processes",
                             hint="omit --nproc for a single-process diagnosis")
    defaults = _harness_defaults(harness_spec, src)
    wrap = wrap or str(defaults.get("wrap", "ddp"))
    if wrap not in WRAPPERS:
        raise StackpartError(f"unknown wrapper {wrap!r}; expected one of {', '.join(WRAPPERS)}")
    if harness_spec.call is not None and wrap != "none":
        raise StackpartError(
            f"harness.call: {harness_spec.call!r} with wrapper {wrap}: the wrapper's work (DDP's gradient bucket "
            f"setup, FSDP2's unshard) runs in its forward, which a call of model.{harness_spec.call} bypasses",
            path=harness_spec.file,
            hint="diagnose without --nproc, or pass --wrap none (the harness's own wrapper, if any, is then called as built)")
    merged_settings = {**dict(defaults.get("settings", {})), **(settings or {})}
    _check_settings(wrap, merged_settings, "settings")
    if harness_spec.device.startswith("cuda"):
        import torch

        have = torch.cuda.device_count()
        if have < nproc:
            raise StackpartError(f"--nproc {nproc} needs {nproc} GPUs; {have} visible",
                                 hint="set harness.device: cpu for a gloo run on CPU")
    return wrap, merged_settings


def _write_run_config(out: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` to ``out/run.json`` for :mod:`rewriter.distributed.worker` and return its path.

    ``out`` is created; the files an earlier run left there (``rank*.json``, ``findings.json``,
    ``findings.md``) are removed first, so a rank that writes nothing this time is reported as
    missing (:func:`_raise_rank_errors`) instead of its old result being merged.
    """
    out.mkdir(parents=True, exist_ok=True)
    for stale in list(out.glob("rank*.json")) + [out / "findings.json", out / "findings.md"]:
        stale.unlink(missing_ok=True)
    config_path = out / "run.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return config_path


def _torchrun_command(config_path: Path, nproc: int, threads_per_rank: int) -> tuple[list[str], dict[str, str]]:
    """The ``torchrun --standalone`` command line and environment that start ``nproc`` workers.

    torchrun is run as ``python -m torch.distributed.run`` with this interpreter (see
    https://pytorch.org/docs/stable/elastic/run.html). The environment is this process's with
    stackpart's package root put first on ``PYTHONPATH`` (the workers import
    ``rewriter.distributed.worker`` from the same checkout) and ``OMP_NUM_THREADS`` defaulting to
    ``threads_per_rank`` (intra-op threads per CPU rank), unless already set.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "rewriter.distributed.worker",
           "--config", str(config_path.resolve())]
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", str(threads_per_rank))
    return cmd, env


def _merge_ranks(
    out: Path, nproc: int, harness_spec: Harness, *,
    straggler_share: float, collective_bound_share: float, min_gap_us: float,
) -> DistributedFindings:
    """Merge the ranks' results in ``out`` into one :class:`DistributedFindings`.

    Reads each ``rank{R}.steps.json`` and the profiler trace it names, analyzes each trace
    (:func:`rewriter.distributed.trace.analyze_trace`; gaps shorter than ``min_gap_us``
    microseconds ignored), merges them (:func:`rewriter.distributed.findings.merge` with the
    straggler and collective-bound shares, fractions of the step) and adds the plan suggestions
    for ``<harness file>::<model callable>`` (:func:`rewriter.distributed.advise.suggest`) and the
    notes about what the run can and cannot show (:func:`_notes`). Called after
    :func:`_raise_rank_errors`, which has checked that every rank wrote its steps file.
    """
    traces, records = [], {}
    for rank in range(nproc):
        record = json.loads((out / f"rank{rank}.steps.json").read_text())
        records[rank] = record
        traces.append(analyze_trace(load_trace(out / record["trace"]), rank=rank, min_gap_us=min_gap_us))
    findings = merge(traces, records, straggler_share=straggler_share,
                     collective_bound_share=collective_bound_share, min_gap_us=min_gap_us)
    findings.suggestions = advise.suggest(findings, f"{harness_spec.file}::{harness_spec.model}")
    findings.notes = _notes(findings, harness_spec)
    return findings


def _write_findings(out: Path, nproc: int, findings: DistributedFindings) -> None:
    """Write ``merged.trace.json`` (:func:`_write_merged_trace`), then ``findings.json`` and
    ``findings.md`` (:func:`rewriter.distributed.report.markdown`) under ``out``, after listing
    every artifact of the run in ``findings.artifacts`` (file names relative to ``out``)."""
    _write_merged_trace(out, nproc)
    findings.artifacts = [f"rank{r}.trace.json" for r in range(nproc)] + ["merged.trace.json", "findings.json", "findings.md"]
    (out / "findings.json").write_text(json.dumps(findings.to_json(), indent=2) + "\n")
    (out / "findings.md").write_text(markdown(findings))


def _run_torchrun(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run torchrun in its own session so that a timeout or Ctrl-C ends it *and* its workers
    (killing torchrun alone would orphan the ranks)."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException as exc:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        if isinstance(exc, subprocess.TimeoutExpired):
            raise StackpartError(f"torchrun did not finish in {timeout_s:.0f} s; its processes were ended",
                                 hint="raise --timeout") from None
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _raise_rank_errors(out: Path, nproc: int, proc: subprocess.CompletedProcess) -> None:
    """Raise StackpartError for a run that left no result to merge: the first (by name)
    ``rank*.error.json`` (a StackpartError keeps its file:line and hint; another exception gives
    its type and traceback tail), else torchrun's exit code and the ranks without a
    ``rank{R}.steps.json``, with the tail of torchrun's output."""
    errors = sorted(out.glob("rank*.error.json"))
    if errors:
        data = json.loads(errors[0].read_text())
        if "stackpart" in data:
            fields = data["stackpart"]
            raise StackpartError(
                f"rank {data['rank']}: {fields['message']}", path=fields.get("path"),
                line=fields.get("line"), col=fields.get("col"), hint=fields.get("hint"),
            )
        last = data.get("traceback", "").strip().splitlines()[-6:]
        raise StackpartError(f"rank {data['rank']} raised {data['exception']}",
                             hint="traceback tail: " + " | ".join(s.strip() for s in last))
    missing = [r for r in range(nproc) if not (out / f"rank{r}.steps.json").exists()]
    if proc.returncode != 0 or missing:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise StackpartError(f"torchrun exited {proc.returncode}; ranks without results: {missing}",
                             hint=f"output tail: {tail}")


def _notes(f: DistributedFindings, spec: Harness) -> list[str]:
    """What this run's figures cannot show: a gloo run on CPU does not carry over to NCCL, DDP
    outside ``mode: training`` runs no collectives, a collective-bound step that no wrapper
    setting addresses."""
    notes = []
    if f.backend == "gloo":
        notes.append(
            "CPU run with gloo: communication is gloo's worker threads and compute is the ops on "
            "the training thread; shares measured here do not carry over to NCCL on GPUs. gloo has "
            "no reduce-scatter: FSDP2's reduce-scatter runs as gloo:all_reduce, counted as the "
            "reduce-scatter that issued it when issue order pairs them up."
        )
    if spec.mode != "training" and f.wrap == "ddp":
        notes.append("mode is inference: DDP runs no collectives outside backward; use mode: training")
    if f.collective_bound and not f.suggestions:
        notes.append("collective-bound, but no wrapper setting applies to this collective")
    return notes


def _write_merged_trace(out: Path, nproc: int) -> None:
    """One Chrome trace with every rank as its own process (open in Perfetto)."""
    events: list[dict[str, Any]] = []
    for rank in range(nproc):
        trace = load_trace(out / f"rank{rank}.trace.json")
        pids: dict[Any, int] = {}
        for e in trace.get("traceEvents", []):
            pid = pids.setdefault(e.get("pid"), rank * 100 + len(pids))
            events.append({**e, "pid": pid})
        for original, pid in pids.items():
            events.append({"ph": "M", "name": "process_name", "pid": pid,
                           "args": {"name": f"rank {rank} ({original})"}})
    (out / "merged.trace.json").write_text(json.dumps({"traceEvents": events}))
