"""``stackpart validate --plan plan.yaml SRC``: materialise, run the variants, judge, report.

Exit codes: 0 pass, 1 fail (reasons in the report), 2 error (bad plan or harness, build
failure, out of memory, timeout).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import StackpartError, src_dir
from ..engine.cost import breakdown
from ..engine.options import Options as EngineOptions
from ..engine.measure import environment, relabel
from ..engine.options import on_device
from ..rewrite.notices import add_checkpoint_key_warnings, not_written


#: validate's knobs are the engine's (re-exported: the CLI and tests build them from here).
Options = EngineOptions

#: The variant validate adds where the original tree compiles itself: the program as it runs, its
#: own compile included, the baseline the speed gate compares the plan with (docs/design.md,
#: "Validate's baseline is the program as it runs").
AS_RUN = "as-is"


def validate_command(plan_path: str, src: str, opts: Options | None = None) -> int:
    """Run the whole validation and write the report; returns the exit code.

    Raises:
        StackpartError: a bad plan, a plan without ``harness:``, a target that does not resolve,
            or a ``harness.call`` the built model lacks (:class:`rewriter.errors.ConfigError`, at
            the plan's line; found by the eager reference's child): printed by the CLI, exit 2,
            nothing written.
    """
    import torch

    from ..plan import load_plan
    from ..terminal import stderr
    from ..engine.materialize import materialize
    from ..harness import check_harness, resolve_device
    from .report import default_report_dir, report_header, write_report

    opts = opts or Options(replicates=0, windows=0)  # timed as the search times, for this device (on_device)
    loaded = load_plan(plan_path)
    spec = loaded.plan.harness
    if spec is None:
        raise StackpartError(
            "validate needs a 'harness:' section (file, model, inputs, shapes)", path=plan_path, line=1
        )
    srcp = src_dir(src)
    check_harness(loaded, srcp)  # before any child starts: the file, its callables, the shape keys
    device = resolve_device(spec).device
    notes: list[str] = []
    if device.startswith("cuda") and not torch.cuda.is_available():  # named explicitly (unset resolves)
        device = "cpu"
        notes.append(f"no CUDA on this machine: ran on CPU although the harness asks for {spec.device}")
    spec_run = spec.model_copy(update={"device": device})
    opts = on_device(opts, device)
    out_dir = opts.out or default_report_dir(plan_path)
    workdir = Path(tempfile.mkdtemp(prefix="stackpart-validate-"))
    started = time.perf_counter()
    try:
        trees = materialize(loaded, srcp, workdir)
        materialize_s = time.perf_counter() - started
        add_checkpoint_key_warnings(loaded, srcp, trees.result)  # the warnings rewrite prints for this diff
        # the timing note goes into every output: JSON, Markdown, chart, terminal
        report = report_header(loaded, srcp, trees.result, spec_run, opts.backend, environment(device, spec.device))
        stderr().print(f"validate: {report['timing_note']}", highlight=False)
        if not trees.result.changes:
            notes.append(unchanged_note(len(loaded.plan.actions), trees.result))
        results, timing, verdict = _run_all(report, loaded, trees, spec_run, opts, workdir, notes)
        report["variants"] = results
        report["timing"] = timing
        report["validate_wall_s"] = time.perf_counter() - started
        report.setdefault("_clock", {})["materialize_s"] = materialize_s
        report["overhead"] = breakdown(report, results)
        report["verdict"] = verdict.to_json()
        report = relabel(report, tree_labels(trees, workdir))
        paths = write_report(report, out_dir)
    finally:
        if opts.keep:
            stderr().print(f"validate: temp dir kept at {workdir}", highlight=False)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    _print_summary(report, paths)
    return report["verdict"]["exit_code"]


def unchanged_note(actions: int, result: Any) -> str:
    """The note for a plan whose diff is empty: a plan with no actions, one whose every action is
    not written (held back, or left to a decorator with other options), or one whose edits SRC
    already holds (a tree ``rewrite --apply`` wrote), where the plan variant is that tree as it is.

    Args:
        actions: how many actions the plan has.
        result: the rewrite of SRC (:class:`rewriter.rewrite.transform.RewriteResult`).
    """
    if not actions:
        return "the plan has no actions: the plan variant is the original tree"
    if len(not_written(result)) == actions:
        return (f"the plan changes nothing in SRC ({actions} action(s) not written): the plan variant is the "
                "original tree")
    return ("SRC already holds this plan's edits (an empty diff, as after `rewrite --apply`): the plan variant is "
            "the tree as it is, so no 'as-is' row times it a second time")


def _own_calls_not_run(loaded: Any, results: dict[str, Any]) -> list[tuple[str, int]] | None:
    """The plan's ``own_call`` edits in files the harness never imported (the eager reference's
    ``src_imported``, :func:`rewriter.engine.child.runtime_compiles`), as ``(file, plan line)``,
    or None: such an edit (a ``torch.compile`` in ``serve.py``'s ``main``) cannot run in
    any child, so "no graph captured" is validate's blind spot there, not the plan's failure. None
    also where the plan compiles anything else (then "no graph captured" may be that compile's)."""
    imported = (results.get("eager") or {}).get("runtime_compiles", {}).get("src_imported")
    if imported is None:
        return None
    compiles = [(i, a) for i, a in enumerate(loaded.plan.actions) if a.action == "compile"]
    unrun = [(a.target.split("::")[0], loaded.action_lines[i]) for i, a in compiles
             if getattr(a, "own_call", None) is not None and "::" in a.target and a.target.split("::")[0] not in imported]
    # only where every compile of the plan is such an edit: a compile the harness does run that
    # captured nothing is the plan's failure, whatever else the plan holds
    return unrun if unrun and len(unrun) == len(compiles) else None


def _run_all(report, loaded, trees, spec_run, opts, workdir, notes):  # type: ignore[no-untyped-def]
    """The eager reference, the plan and the baselines measured side by side by the engine
    (:func:`rewriter.engine.measure.measure`), then judged: the plan's problems are failures, a
    baseline's failure is a note, and speed and amortization are gated on CUDA. The eager
    reference is the original tree with compilation off (``torch.compiler.set_stance("force_eager")``
    for its whole run): for a tree that already compiles (one stackpart rewrote and applied) it is
    still eager, and nothing stackpart measures it with enters a compiled frame."""
    from ..engine.measure import measure
    from ..engine.options import Variant
    from ..engine.verdict import Verdict
    from .baselines import idle as idle_baselines
    from .unreached import never_called

    verdict = Verdict(notes=notes)
    mark_dynamic = [
        (loaded.action_lines[i] if i < len(loaded.action_lines) else None, a.arg, a.dim)
        for i, a in enumerate(loaded.plan.actions)
        if a.action == "mark_dynamic"
    ]
    # the reference is the original with compilation off, also where its code calls torch.compile
    variants = [Variant("eager", trees.original, judged=False, stance="force_eager"),
                Variant("plan", trees.rewritten, compiles=report["plan_compiles"], mark_dynamic=mark_dynamic,
                        plan_name=Path(loaded.path).name, library_modules=trees.result.library_modules,
                        site=_site_at(loaded))]
    # where the plan changes nothing, its variant is the original tree: as-is would time it again
    own = compiles_itself(trees.original, spec_run) if trees.result.changes else []
    if own:
        # compiles=False: a compile in a script the harness does not run leaves it eager, as the harness runs it
        variants.append(Variant(AS_RUN, trees.original, judged=False))
        own_note = (f"the original tree compiles itself ({', '.join(own[:3])}{', ...' if len(own) > 3 else ''}): "
                    f"'{AS_RUN}' is the program as it runs, its own compile included; 'eager' is the same program with "
                    "compilation off, the numerical reference")
        notes.append(own_note)
    variants += [Variant(b, trees.original, prepare=b, judged=False) for b in opts.variants if b not in ("eager", "plan")]
    m = measure(spec_run, variants, opts, workdir, amortization=report.get("amortization"), stop_on_wrong_numbers=True,
                on_event=functools.partial(_progress, labels=tree_labels(trees, workdir)))
    if m.config_error is not None:  # bad input the built model showed: an error at the plan's line, not a report
        from ..harness import config_error_at

        raise config_error_at(loaded, m.config_error["message"], m.config_error.get("field"), m.config_error.get("hint"))
    report["reference_overlapped"] = m.reference_overlapped
    report["timing_wall_s"] = m.timing_wall_s
    report.setdefault("_clock", {}).update(m.clock)
    results = m.results
    as_run = results.get(AS_RUN) or {}
    if own and own_note in verdict.notes and not as_run.get("error") and (as_run.get("compile") or {}).get("unique_graphs") == 0:
        # the source's compile is in code the harness does not run (a script's main): say what ran
        i = verdict.notes.index(own_note)
        # harness.call: a torch.compile wrapper compiles forward, not the method the step calls
        ran = ("the harness's model ran none of it" if spec_run.call is None else
               f"the harness's step calls model.{spec_run.call}, which none of it compiled (a torch.compile wrapper "
               "compiles forward only)")
        verdict.notes[i] = (f"the original tree compiles itself in its source ({', '.join(own[:3])}"
                            f"{', ...' if len(own) > 3 else ''}), but {ran} ('{AS_RUN}' "
                            f"compiled 0 graphs): '{AS_RUN}' is the model as the harness runs it, without that compile")
    verdict.errors.extend(m.errors)
    verdict.notes.extend(m.hints.get("eager", []) + m.hints.get("plan", []))
    for row in results.values():
        row.pop("error_kind", None)
        for n in row.pop("notes", []):
            if n not in verdict.notes:
                verdict.notes.append(n)
    unrun = _own_calls_not_run(loaded, results)
    uncalled = [] if unrun else never_called(loaded, results.get("plan") or {}, trees.original)
    for f in (results.get("plan") or {}).get("problems", []):
        if uncalled and "captured no graph" in f:
            for u in uncalled:
                verdict.errors.append(
                    f"{loaded.path}:{u.plan_line}: the plan's compile of {u.target} ({u.site}) was never called during "
                    "the harness's steps (Dynamo was asked to convert no frame: torch._dynamo counters frames.total 0), "
                    "so validate measured nothing of it; compile code the harness's step runs, or make the harness "
                    "call it")
            continue
        if unrun and "captured no graph" in f:
            files = ", ".join(dict.fromkeys(file for file, _ in unrun))
            f = (f"{loaded.path}:{unrun[0][1]}: the plan edits the program's own compile in {files}, which the harness "
                 "does not run: validate measures "
                 "what the harness builds and cannot measure that edit in place (diagnose measures such a call through "
                 "stand-ins on the harness's model; its validation report says so)")
            verdict.errors.append(f + "; to validate it here, make the harness build the model through that code")
            continue
        (verdict.errors if f.startswith("the rewritten tree failed") else verdict.failures).append(f)
    for b, said in idle_baselines(results, spec_run.call).items():
        results[b]["baseline_idle"] = said
        verdict.notes.append(said)
    for b in [v.name for v in variants if v.prepare or v.name == AS_RUN]:
        row = results.get(b) or {}
        if row.get("problems") and row.get("error"):
            verdict.notes.append(f"baseline {b} failed and is left out: {row['error']}")
    for row in results.values():
        row.pop("problems", None)
    verdict.notes.extend(m.notes)
    if verdict.errors or not m.timing:
        return results, m.timing, verdict
    _judge_speed(report, results, m, opts, verdict)
    if report.get("amortization") is None:
        verdict.notes.append("the plan has no 'amortization:' section: break-even runs reported, not gated")
    return results, m.timing, verdict


def compiles_itself(tree: Path, harness: Any = None) -> list[str]:
    """``file.py:line`` of each compile the tree does itself that compiles something the program
    runs (:func:`rewriter.diagnose.own_compile.own_compiles`, static: a compile in a script the
    harness does not run counts too, and its ``as-is`` variant then runs as eager does).
    ``harness``: the plan's harness, whose ``build_model``/``make_inputs`` stackpart calls by name:
    a compile in them is the program's (``return torch.compile(Net())``), not one in a helper
    nothing calls, as diagnose's search reads it."""
    from ..diagnose.own_compile import harness_entries, own_compiles

    entries = harness_entries(harness) if harness else frozenset()
    return [c.where for c in own_compiles(tree, entries=entries) if c.idle is None]


def _judge_speed(report: dict[str, Any], results: dict[str, Any], m: Any, opts: Options, verdict: Any) -> None:
    """The speed and amortization rule (:func:`rewriter.engine.verdict.speed_failures`), gated on
    CUDA (``--speed-gate``). The plan is compared with the program as it runs: the ``as-is``
    variant where the tree compiles itself and that ran (diagnose's search decides against the
    same program, :func:`rewriter.diagnose.decide.gate_failures`, so a plan it chose is one this
    gate passes), else ``eager`` (compilation off, the same program where it does not compile,
    and the only one that runs where its own compile raises). Where ``as-is`` is the reference,
    the plan against compilation off is reported, never gated."""
    from ..engine.noise import process_noise
    from ..engine.verdict import NOISE, contended_band, speed_failures

    # a baseline that compiled no graph ran eager: the plan is not compared with it (.baselines.idle)
    mean_ms = {v: r["step_ms"] for v, r in results.items() if r.get("step_ms") is not None and not r.get("baseline_idle")}
    # the same variants with their host core contended (--host both, on CUDA): gated like the quiet
    # figures within their own measured band, as diagnose's search decides on the worse condition
    contended = {v: r["contended_step_ms"] for v, r in results.items()
                 if r.get("contended_step_ms") is not None and not r.get("baseline_idle")}
    if contended:
        report["contended_band"] = contended_band(process_noise(m.timing))
    band = report.get("contended_band", NOISE)
    if "plan" not in mean_ms or any(f.startswith("the rewritten model raised") for f in verdict.failures):
        return
    as_run = AS_RUN in mean_ms and not (results[AS_RUN].get("error"))
    gate = opts.speed_gate == "on" or (opts.speed_gate == "auto" and report["environment"]["timed_on"] == "cuda")

    def against(ref: str, times: dict[str, float]) -> dict[str, float]:
        return {("eager" if k == ref else k): v for k, v in times.items() if k not in ("eager", AS_RUN) or k == ref}

    ref = AS_RUN if as_run else "eager"
    if as_run:
        verdict.notes.append(f"the speed gate compares the plan with '{AS_RUN}', the program as it runs")
        results["plan"]["amortization"] = _against_as_run(report, results)
    elif AS_RUN in results:
        verdict.notes.append(f"'{AS_RUN}' did not run or was not timed (its own compile may raise): the speed gate "
                             "compares the plan with 'eager', the program with compilation off, as diagnose's search "
                             "does where the program's own compile raises")
    speed = speed_failures(against(ref, mean_ms), opts.min_speedup, results["plan"].get("amortization"),
                           against(ref, contended) if "plan" in contended and ref in contended else None, band,
                           "the program as it is" if as_run else "eager")
    if gate:
        verdict.failures.extend(speed)
    elif speed:
        verdict.notes.extend(
            f"not gated ({'CPU timing' if opts.speed_gate == 'auto' else '--speed-gate off'}): {s}" for s in speed
        )
    if as_run and "eager" in mean_ms:
        off = speed_failures({"plan": mean_ms["plan"], "eager": mean_ms["eager"]}, opts.min_speedup, None,
                             reference="the program with compilation off")
        verdict.notes.extend(f"reported, not gated (the program as it runs is the baseline): {s}" for s in off)
    if not gate:
        verdict.notes.append(
            "speed and amortization were reported but not gated: "
            + ("timings are CPU wall-clock, not GPU (--speed-gate on to gate them)" if opts.speed_gate == "auto" else "--speed-gate off")
        )


def _against_as_run(report: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's break-even against the program as it runs (:func:`rewriter.engine.amortize.
    amortize` with its own compile per start as the reference's), where the engine's figure is
    against compilation off: the amortization gate then judges what the plan changes, as the
    search's net does, and a plan that compiles for less than the program (regional compilation,
    its compile turned off) is not refused as "not faster than eager"."""
    from ..engine.amortize import amortize

    plan, own = results["plan"], results[AS_RUN]
    was = plan.get("amortization")
    if was is None:
        return None
    deployment = report.get("amortization") or {}
    return amortize(own["step_ms"] / 1e3, plan["step_ms"] / 1e3, float(plan.get("compile_s_per_start") or 0.0),
                    int(was.get("compiles_per_start") or 0), int(plan.get("shape_buckets") or 0), deployment.get("runs"),
                    int(deployment.get("restarts") or 1), float(own.get("compile_s_per_start") or 0.0),
                    "the program as it is")


def _site_at(loaded: Any) -> dict[str, Any] | None:
    """The plan's ``site:`` and where it is written (the plan file as given, its line), for the
    child's error when the harness never calls it (:func:`rewriter.engine.build.site_ran`)."""
    if loaded.plan.site is None:
        return None
    return {"target": loaded.plan.site, "path": loaded.path, "line": loaded.site_line}


def tree_labels(trees: Any, workdir: Path) -> dict[str, str]:
    """The temp trees' paths -> what validate's outputs call them: ``a/`` the original, ``b/`` the
    rewritten (the diff's convention), the rest of the temp dir nothing."""
    return {f"{trees.original}/": "a/", f"{trees.rewritten}/": "b/", f"{workdir}/": ""}


def _progress(name: str, event: str, detail: Any, labels: dict[str, str] | None = None) -> None:
    """One plain line per child event as it happens (a terminal and a CI log alike); a long one
    keeps its start and its end (:func:`rewriter.terminal.progress_line`). ``labels``: the temp
    trees' paths as the report names them (:func:`tree_labels`), so a progress line says
    ``b/model.py:12`` as the summary does, not a temp dir that is gone once validate ends."""
    from ..terminal import progress_line, stderr

    detail = relabel(detail, labels or {})

    if event == "cold":
        comp = detail.get("compile") or {}
        failed = f"failed: {detail['error']}" if detail.get("error") else ""  # the reference's own error has no problems list
        what = "; ".join(detail.get("problems") or []) or failed or (
            f"cold phase done: {detail.get('compile_s_per_start') or 0:.3f} s compile per start, "
            f"{comp.get('unique_graphs', 0)} graph(s), {comp.get('recompiles', 0)} recompile(s)")
        text = f"{name}: {progress_line(' '.join(what.split()))}"
    elif event == "timing":
        text = f"timing every variant interleaved at {detail}"
    else:
        text = f"{name}: {detail}"
    stderr().print(f"validate: {text}", highlight=False)


def _print_rewrite_notices(console: Any, report: dict[str, Any]) -> None:
    """The rewrite's warnings and its actions not written (``rewrite_notices``,
    :func:`rewriter.validate.report.report_header`), as ``stackpart rewrite`` prints them."""
    from ..rewrite.notices import Notice

    for n in report.get("rewrite_notices") or []:
        console.print(Notice(**n).markup, highlight=False)


def _print_summary(report: dict[str, Any], paths: list[Path]) -> None:
    """The verdict on stderr: the rewrite's warnings first (:func:`_print_rewrite_notices`), then
    PASS/FAIL/ERROR with the diff's hash, each variant's step time, cold first call and numerics,
    the verdict's errors, failures and notes, and the files written."""
    from ..terminal import stderr

    console = stderr()
    v = report["verdict"]
    _print_rewrite_notices(console, report)
    status = {0: "[green]PASS[/]", 1: "[red]FAIL[/]", 2: "[red]ERROR[/]"}[v["exit_code"]]
    skipped = report.get("actions_not_written") or []
    without = f" ({len(skipped)} action(s) of the plan not written, above: measured without them)" if skipped else ""
    # --backend compiles the in-place baselines only: the plan and `as-is` compile as their code says
    ran = [n for n in report["variants"] if n in ("whole", "regional")]
    backend = f", baselines ({', '.join(ran)}) compiled with backend {report['backend']}" if report.get("backend") and ran else ""
    console.print(f"validate: {status} diff sha256 {report['diff_sha256'][:12]}{backend}{without}", highlight=False)
    for name, var in report["variants"].items():
        if var.get("step_ms") is not None:
            unit = "ms/step" + ("" if report["environment"]["timed_on"] == "cuda" else " (CPU)")
            busy = var.get("contended_step_ms")
            console.print(
                f"  {name:9s} {var['step_ms']:.3f} {unit}"
                + (f" ({busy:.3f} with the host core contended)" if busy is not None else "")
                + f", cold first call {var.get('cold_first_call_s', 0):.2f} s, numerics {var.get('numerics', '-')}"
                + (", compiled no graph (not compared)" if var.get("baseline_idle") else ""),
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
