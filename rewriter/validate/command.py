"""``stackpart validate --plan plan.yaml SRC``: materialise, run the variants, judge, report.

Exit codes: 0 pass, 1 fail (reasons in the report), 2 error (bad plan or harness, build
failure, out of memory, timeout).
"""

from __future__ import annotations

import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StackpartError
from .cost import breakdown, may_overlap, room_to_overlap
from .variants import VARIANTS


@dataclass
class Options:
    """Knobs of one validation (CLI flags).

    Attributes:
        out: report directory (default: ``.stackpart/validation`` next to the plan).
        backend: ``torch.compile`` backend of the two baselines (the plan's own options say how
            the plan compiles).
        min_speedup: the plan must reach ``t_best_baseline / t_plan >= min_speedup``.
        speed_gate: ``auto`` (gate speed and amortization only when timed on CUDA), ``on``, ``off``.
        timeout_s: per child process.
        warmup, reps, budget_s: timing: warm-up calls, max interleaved rounds, seconds per shape.
        seed: torch seed for model and inputs.
        keep: keep the temp dir (trees, job files, child stderr) for debugging.
        variants: which baselines to run besides eager and plan.
        overlap: let the reference's run overlap the first compiled variant's cold phase (on
            CUDA with >= 8 CPUs only; see :func:`.cost.may_overlap`).
        construct_on_device: build each child's model with the harness device as the default
            device (parameter init on the GPU; host build when that raises), see
            :func:`rewriter.harness.build_model`.
    """

    out: Path | None = None
    backend: str = "inductor"
    min_speedup: float = 0.95
    speed_gate: str = "auto"
    timeout_s: float = 600.0
    warmup: int = 3
    reps: int = 30
    budget_s: float = 10.0
    seed: int = 0
    keep: bool = False
    variants: tuple[str, ...] = VARIANTS
    overlap: bool = True
    construct_on_device: bool = True


def _environment(device: str, requested: str) -> dict[str, Any]:
    import torch

    cuda = device.startswith("cuda")
    return {
        "timed_on": "cuda" if cuda else "cpu",
        "requested_device": requested,
        "device_name": torch.cuda.get_device_name(0) if cuda else (platform.processor() or platform.machine()) + " CPU",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
    }


def validate_command(plan_path: str, src: str, opts: Options | None = None) -> int:
    """Run the whole validation and write the report; returns the exit code.

    Raises:
        StackpartError: a bad plan, a plan without ``harness:``, a target that does not resolve
            (printed by the CLI, exit 2, nothing written).
    """
    import torch

    from ..plan import load_plan
    from ..terminal import stderr
    from .materialize import file_sha256, materialize, tree_hashes
    from .report import default_report_dir, timing_banner, write_report

    opts = opts or Options()
    loaded = load_plan(plan_path)
    spec = loaded.plan.harness
    if spec is None:
        raise StackpartError(
            "validate needs a 'harness:' section (file, model, inputs, shapes)", path=plan_path, line=1
        )
    device = spec.device
    notes: list[str] = []
    if device.startswith("cuda") and not torch.cuda.is_available():
        device = "cpu"
        notes.append(f"no CUDA on this machine: ran on CPU although the harness asks for {spec.device}")
    spec_run = spec.model_copy(update={"device": device})
    srcp = Path(src)
    out_dir = opts.out or default_report_dir(plan_path)
    workdir = Path(tempfile.mkdtemp(prefix="stackpart-validate-"))
    started = time.perf_counter()
    try:
        trees = materialize(loaded, srcp, workdir)
        materialize_s = time.perf_counter() - started
        digest = trees.result.digest()
        report: dict[str, Any] = {
            "report_version": 1,
            "diff_sha256": digest,
            "plan": str(Path(plan_path).resolve()),
            "plan_sha256": file_sha256(Path(plan_path)),
            "src": str(srcp.resolve()),
            "tree_sha256": tree_hashes(srcp),
            "changed_files": [c.relpath for c in trees.result.changes],
            "harness": spec_run.model_dump(),
            "backend": opts.backend,
            "amortization": loaded.plan.amortization.model_dump() if loaded.plan.amortization else None,
            "plan_compiles": any(a.action == "compile" for a in loaded.plan.actions),
            "environment": _environment(device, spec.device),
            "created_unix": time.time(),
        }
        report["timing_note"] = timing_banner(report)  # in every output: JSON, Markdown, chart, terminal
        stderr().print(f"validate: {report['timing_note']}", highlight=False)
        if not trees.result.changes:
            notes.append("the plan changes nothing in SRC: the plan variant is the original tree")
        results, timing, verdict = _run_all(report, loaded, trees, spec_run, opts, workdir, notes)
        report["variants"] = results
        report["timing"] = timing
        report["validate_wall_s"] = time.perf_counter() - started
        report.setdefault("_clock", {})["materialize_s"] = materialize_s
        report["overhead"] = breakdown(report, results)
        report["verdict"] = verdict.to_json()
        report = _relabel(report, {f"{trees.original}/": "a/", f"{trees.rewritten}/": "b/", f"{workdir}/": ""})
        paths = write_report(report, out_dir)
    finally:
        if opts.keep:
            stderr().print(f"validate: temp dir kept at {workdir}", highlight=False)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    _print_summary(report, paths)
    return report["verdict"]["exit_code"]


def _run_all(report, loaded, trees, spec_run, opts, workdir, notes):  # type: ignore[no-untyped-def]
    """Cold phase per variant (each its own process; all start together, but the cold phases run
    one after the other, and only once every process has built, so no build competes with a
    compile being measured; on a GPU host the eager reference's own run may overlap the plan's
    cold phase, see :func:`.cost.may_overlap`), then interleaved timing across the still-running warm
    processes; every child is terminated on the way out."""
    children: dict[str, Any] = {}
    try:
        return _run_children(report, loaded, trees, spec_run, opts, workdir, notes, children)
    finally:
        t_teardown = time.perf_counter()
        # every result is read by now (or no longer wanted: a child still building, compiling or
        # waiting for a failed reference); all are terminated at once and then reaped
        for child in children.values():
            child.terminate()
        for child in children.values():
            child.close()
        report.setdefault("_clock", {})["teardown_s"] = time.perf_counter() - t_teardown


def _run_children(report, loaded, trees, spec_run, opts, workdir, notes, children):  # type: ignore[no-untyped-def]
    from .runner import ServedChild
    from .verdict import Verdict, constraint_hint, numerics_failures, speed_failures

    verdict = Verdict(notes=notes)
    mark_dynamic = [
        (loaded.action_lines[i] if i < len(loaded.action_lines) else None, a.arg, a.dim)
        for i, a in enumerate(loaded.plan.actions)
        if a.action == "mark_dynamic"
    ]
    ref = workdir / "ref"
    ref.mkdir()
    caches = workdir / "caches"
    job = {
        "harness": spec_run.model_dump(),
        "trees": {"original": str(trees.original), "rewritten": str(trees.rewritten)},
        "backend": opts.backend,
        "seed": opts.seed,
        "ref": str(ref),
        "warmup": opts.warmup,
        "reps": opts.reps,
        "budget_s": opts.budget_s,
        "construct_on_device": opts.construct_on_device,
    }
    variants = ["eager", "plan"] + [v for v in opts.variants if v not in ("eager", "plan")]
    results: dict[str, dict[str, Any]] = {}
    cold: dict[str, dict[str, Any]] = {}
    # Every variant's process starts at once: their interpreter starts, imports and model builds
    # (CPU work, tens of seconds for an HF model) overlap the eager reference's cold phase, which
    # compiles nothing. Before the first measured compile every child must have built (and now
    # waits for its ``go``), so no build runs beside a compile being timed; the compiled variants
    # then run their cold phases one after the other. With ``overlap`` the reference's own run
    # (outputs, block share, the float64 run) goes on during the first compiled variant's cold
    # phase, which waits for it only before its first comparison: the reference then holds one
    # core and the GPU's spare time while the compile runs on the others.
    clock: dict[str, float] = {"waiting_for_builds_s": 0.0}
    t_spawn = time.perf_counter()
    for variant in variants:
        children[variant] = ServedChild(
            dict(job, phase="cold", variants=[variant], reference=variant == "eager"),
            workdir, f"cold-{variant}", caches / variant, opts.timeout_s,
        )
    overlap = may_overlap(opts.overlap, spec_run.device)
    report["reference_overlapped"] = False
    built: dict[str, bool] = {}

    def record(variant: str, child: Any) -> bool:
        """Collect ``variant``'s cold phase; False when validation cannot go on."""
        res = child.wait_cold()
        results[variant] = {
            "child_wall_s": res.wall_s,
            "startup_s": getattr(child, "built_at", child.started) - child.started,
        }
        if res.error:
            err = res.error
            text = f"{err['kind']}: {err['message']}"
            results[variant]["error"] = text
            if variant == "eager":
                verdict.errors.append(f"the original model (eager reference) failed: {text}")
                _stderr_hint(verdict, res)
                return False
            if variant == "plan":
                if err["kind"] == "raised":
                    verdict.failures.append(f"the rewritten model raised: {err['message']}")
                    hint = constraint_hint(err["message"], mark_dynamic, Path(loaded.path).name)
                    if hint:
                        verdict.notes.append(hint)
                else:
                    verdict.errors.append(f"the rewritten tree failed: {text}")
                    _stderr_hint(verdict, res)
            else:
                verdict.notes.append(f"baseline {variant} failed and is left out: {text}")
            return True
        cold[variant] = res.payload
        results[variant].update(_cold_summary(res.payload))
        sd_err = res.payload.get("info", {}).get("state_dict_error")
        if sd_err:
            results[variant]["error"] = sd_err
            if variant == "plan":
                verdict.failures.append(f"the rewritten model does not load the original's weights: {sd_err}")
        return True

    pending = None  # the reference, when its run overlaps the next variant's cold phase
    for k, variant in enumerate(variants):
        child = children[variant]
        if k == 1:
            clock["reference_s"] = time.perf_counter() - t_spawn
            t_wait = time.perf_counter()
            for other in variants[1:]:
                built[other] = children[other].wait_built()
            clock["waiting_for_builds_s"] = time.perf_counter() - t_wait
        started = built.get(variant, False) or (variant not in built and child.wait_built())
        if started:
            child.go()
        saved = child.wait_weights_saved() if k == 0 and overlap and started else None
        if saved is not None:
            room = room_to_overlap(saved)
            if room is None:
                pending = child
                report["reference_overlapped"] = True
                verdict.notes.append(
                    "the eager reference's run overlapped the plan's cold phase (one CPU core, spare GPU time); "
                    "--no-overlap times the plan's cold compile alone"
                )
                continue
            verdict.notes.append(f"reference not overlapped with the plan's cold phase: {room}")
        if pending is not None:
            pending, reference = None, pending
            if not record("eager", reference):
                return results, [], verdict
        if not record(variant, child):
            return results, [], verdict
    if "plan" in cold and "state_dict_error" not in cold["plan"].get("info", {}):
        fails = numerics_failures(cold["plan"])
        verdict.failures.extend(fails)
        results["plan"]["numerics"] = "FAIL" if fails else "ok"
        if report["plan_compiles"] and not cold["plan"].get("compile", {}).get("unique_graphs"):
            verdict.failures.append(
                "silent fallback to eager: the plan asks for torch.compile but Dynamo captured no graph"
            )
        hits = cold["plan"].get("compile", {}).get("recompile_limit_hits", [])
        for hit in hits:
            verdict.failures.append(f"silent fallback to eager: a plan region hit the recompile limit: {hit}")
        stance = cold["plan"].get("fail_on_recompile", {})
        if stance.get("ok") is False:
            verdict.failures.append(
                f"recompiles after warm-up (fail_on_recompile): {stance.get('error', '')}"
            )
        elif not stance.get("supported"):
            verdict.notes.append("torch.compiler.set_stance is missing in this torch: fail_on_recompile check skipped")
    hp_run = (cold.get("eager") or {}).get("high_precision")
    if hp_run:
        if hp_run["dtype"] is None:
            verdict.notes.append(
                "no high-precision reference: the original failed in float64 and float32 ("
                + "; ".join(hp_run["tried"]) + "); low-precision outputs judged by the relative-RMSE fallback"
            )
        elif hp_run["tried"]:
            verdict.notes.append(
                f"high-precision reference ran in {hp_run['dtype']} ({'; '.join(hp_run['tried'])})"
            )
    for b in ("whole", "regional"):
        if b in cold and "compile" in cold[b]:
            results[b]["numerics"] = "ok" if not numerics_failures(cold[b]) else "differs"
    results["eager"]["numerics"] = "reference"
    report.setdefault("_clock", {}).update(clock)
    if verdict.errors:
        return results, [], verdict
    if results["plan"].get("numerics") == "FAIL":
        verdict.notes.append("timing skipped: the rewritten model's numbers are wrong")
        return results, [], verdict
    timeable = [v for v in variants if v in cold and "state_dict_error" not in cold[v].get("info", {})]
    timeable = [v for v in timeable if children[v].alive]
    t_timing = time.perf_counter()
    timing, error = _interleave({v: children[v] for v in timeable}, spec_run.shapes, opts)
    report["timing_wall_s"] = time.perf_counter() - t_timing
    if error:
        verdict.errors.append(f"the timing run failed: {error}")
        return results, [], verdict

    mean_ms = {
        v: statistics.fmean(row["timing"][v]["median_ms"] for row in timing) for v in timeable
    }
    amortization = report.get("amortization")
    from .amortize import amortize

    for v in timeable:
        results[v]["step_ms"] = mean_ms[v]
        results[v]["speedup_vs_eager"] = mean_ms["eager"] / mean_ms[v] if mean_ms[v] > 0 else None
        if v != "eager":
            c = cold[v]
            compiles = 1 + c["compile"]["recompiles"] if c["compile"]["unique_graphs"] else 0
            results[v]["amortization"] = amortize(
                mean_ms["eager"] / 1e3,
                mean_ms[v] / 1e3,
                results[v]["compile_s_per_start"],
                max(compiles, results[v]["shape_buckets"]),
                results[v]["shape_buckets"],
                amortization["runs"] if amortization else None,
                amortization["restarts"] if amortization else 1,
            )
    gate = opts.speed_gate == "on" or (opts.speed_gate == "auto" and report["environment"]["timed_on"] == "cuda")
    if "plan" in mean_ms and not any(f.startswith("the rewritten model raised") for f in verdict.failures):
        speed = speed_failures(mean_ms, opts.min_speedup, results["plan"].get("amortization"))
        if gate:
            verdict.failures.extend(speed)
        elif speed:
            verdict.notes.extend(
                f"not gated ({'CPU timing' if opts.speed_gate == 'auto' else '--speed-gate off'}): {s}" for s in speed
            )
        if not gate:
            verdict.notes.append(
                "speed and amortization were reported but not gated: "
                + ("timings are CPU wall-clock, not GPU (--speed-gate on to gate them)" if opts.speed_gate == "auto" else "--speed-gate off")
            )
    if amortization is None:
        verdict.notes.append("the plan has no 'amortization:' section: break-even runs reported, not gated")
    return results, timing, verdict


def _interleave(children: dict[str, Any], shapes: list[dict[str, int]], opts: Options) -> tuple[list[dict[str, Any]], str | None]:
    """Time every variant per shape: warm-up calls each, then rounds of one call per variant in
    a rotating order (each in its own warm process), until ``opts.reps`` rounds or
    ``opts.budget_s`` seconds (at least 3 rounds). Returns per-shape summaries, or an error."""
    from .timing import summarize

    names = list(children)
    rows = []
    for i, shape in enumerate(shapes):
        samples: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            reply = children[n].time(i, opts.warmup, 0)
            if "error" in reply:
                return [], f"{n}: {reply['error']['kind']}: {reply['error']['message']}"
        started = time.perf_counter()
        for rep in range(opts.reps):
            k = rep % len(names)
            for n in names[k:] + names[:k]:
                reply = children[n].time(i, 0, 1)
                if "error" in reply:
                    return [], f"{n}: {reply['error']['kind']}: {reply['error']['message']}"
                samples[n].extend(reply["samples"])
            if rep >= 2 and time.perf_counter() - started > opts.budget_s:
                break
        rows.append({"shape": shape, "timing": {n: summarize(v) for n, v in samples.items()}})
    return rows, None


def _relabel(obj: Any, prefixes: dict[str, str]) -> Any:
    """Replace temp-dir paths in every string: the original tree reads ``a/``, the rewritten
    ``b/`` (the diff's convention), so the report names files the reviewer can find."""
    if isinstance(obj, str):
        for old, new in prefixes.items():
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, dict):
        return {k: _relabel(v, prefixes) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_relabel(v, prefixes) for v in obj]
    return obj


def _cold_summary(payload: dict[str, Any]) -> dict[str, Any]:
    shapes = payload.get("shapes", [])
    out: dict[str, Any] = {
        "compiled": payload.get("info", {}).get("compiled"),
        "compile": payload.get("compile"),
        "fail_on_recompile": payload.get("fail_on_recompile"),
        "per_shape_cold": [
            {k: e[k] for k in ("shape", "first_call_s", "steady_s", "compile_s", "new_graphs", "new_recompiles")}
            for e in shapes
        ],
    }
    if shapes:
        out["cold_first_call_s"] = shapes[0]["first_call_s"]
        compiled = [e for e in shapes if e["new_graphs"] or e["new_recompiles"]]
        out["compile_s_per_start"] = sum(e["compile_s"] for e in compiled)
        out["shape_buckets"] = len(compiled)
    if payload.get("block_share"):
        out["block_share"] = payload["block_share"]
    if payload.get("high_precision"):
        out["high_precision_run"] = payload["high_precision"]
    worst = _worst_high_precision(shapes)
    if worst:
        out["numerics_vs_high_precision"] = worst
    if "phases_s" in payload:
        out["phases_s"] = payload["phases_s"]
    if "max_memory_allocated_bytes" in payload:
        out["max_memory_allocated_bytes"] = payload["max_memory_allocated_bytes"]
    return out


def _worst_high_precision(shapes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over every shape and quantity, the leaf closest to its bound under the high-precision
    rule (see :mod:`.compare`), with the shape and quantity it came from."""
    worst = None
    for entry in shapes:
        for what, comp in entry.get("compare", {}).items():
            hp = comp.get("high_precision")
            if not hp or not isinstance(hp.get("bound"), float) or not isinstance(hp.get("rmse"), float):
                continue
            ratio = hp["rmse"] / hp["bound"] if hp["bound"] > 0 else float("inf")
            if worst is None or ratio > worst["ratio"]:
                worst = dict(hp, shape=entry["shape"], quantity=what, ratio=ratio)
    return worst


def _stderr_hint(verdict: Any, res: Any) -> None:
    tb = res.error.get("traceback") if res.error else None
    tail = (tb or res.stderr_tail or "").strip().splitlines()[-3:]
    if tail:
        verdict.notes.append("child output tail: " + " | ".join(t.strip() for t in tail))


def _print_summary(report: dict[str, Any], paths: list[Path]) -> None:
    from ..terminal import stderr

    console = stderr()
    v = report["verdict"]
    status = {0: "[green]PASS[/]", 1: "[red]FAIL[/]", 2: "[red]ERROR[/]"}[v["exit_code"]]
    console.print(f"validate: {status} diff sha256 {report['diff_sha256'][:12]}", highlight=False)
    for name, var in report["variants"].items():
        if var.get("step_ms") is not None:
            unit = "ms/step" + ("" if report["environment"]["timed_on"] == "cuda" else " (CPU)")
            console.print(
                f"  {name:9s} {var['step_ms']:.3f} {unit}, cold first call {var.get('cold_first_call_s', 0):.2f} s, "
                f"numerics {var.get('numerics', '-')}",
                highlight=False,
            )
    for e in v["errors"]:
        console.print(f"[red]error[/]: {e}", highlight=False)
    for f in v["failures"]:
        console.print(f"[red]fail[/]: {f}", highlight=False)
    for n in v["notes"]:
        console.print(f"note: {n}", highlight=False)
    for p in paths:
        console.print(f"wrote {p}", highlight=False)
