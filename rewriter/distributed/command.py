"""``stackpart diagnose --nproc N`` and ``stackpart validate --nproc N``: the commands' bodies
(the CLI only parses arguments and calls these)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ..errors import StackpartError
from .findings import DistributedFindings
from .launch import RUNNABLE_SETTINGS, _harness_defaults, run_distributed
from .report import summary_lines

#: validate's own default (``stackpart validate --min-speedup``): the plan's step may be at most
#: ~5% slower than the original's and still pass (run-to-run noise).
MIN_SPEEDUP = 0.95


def diagnose_distributed_command(
    harness: str,
    src: str,
    output: str,
    *,
    nproc: int,
    wrap: str | None,
    model: str | None = None,
    inputs: str | None = None,
    call: str | None = None,
    shapes: tuple[str | dict[str, int], ...] = (),
    mode: str | None = None,
    dtype: str | None = None,
    device: str | None = None,
    report_dir: str | None = None,
    timeout: float = 300.0,
    steps: int = 3,
    **_ignored: Any,
) -> int:
    """Diagnose collectives across ``nproc`` processes and write a plan with ``distributed``
    entries (advisory) plus ``findings.md``/``findings.json`` and the ranks' traces.

    ``--harness``/``--shape``/``--mode``... are read as single-process ``diagnose`` reads them.
    The single-process ladder (compile, kernels, memory) is not rerun: run ``diagnose`` without
    ``--nproc`` for it. Returns 0.

    Raises:
        StackpartError: bad flags or harness, or a failed distributed run (exit 2).
    """
    from ..diagnose.report import default_report_dir as diagnose_report_dir
    from ..diagnose.report import plan_yaml
    from ..diagnose.runner import harness_from_flags, parse_shape
    from ..harness import load_harness, resolve_device
    from ..plan import Plan, parse_plan
    from ..shapes import with_own_default_shape
    from ..terminal import stderr

    spec, amort = harness_from_flags(harness, src, model=model, inputs=inputs,
                                     shapes=[parse_shape(s) for s in shapes], mode=mode, dtype=dtype, device=device,
                                     call=call)
    spec = resolve_device(spec)
    # no --shape and no harness.shapes: the inputs function's own defaults are the shape the ranks
    # run and the plan states, as diagnose's
    spec, shape_note = with_own_default_shape(spec, load_harness(spec, Path(src)).make_inputs)
    if shape_note is not None:
        stderr().print(f"diagnose: no --shape given: {shape_note}", highlight=False)
    if mode is None and spec.mode == "inference":
        stderr().print("note: harness mode is inference; DDP's all-reduce runs in backward: pass --mode training",
                       highlight=False)
    plan_out = Path(output)
    out_dir = Path(report_dir) if report_dir else diagnose_report_dir(plan_out) / "distributed"
    stderr().print(f"launching {nproc} processes under torchrun ({spec.device}) ...", highlight=False)
    findings = run_distributed(spec, src, nproc, out_dir, wrap=wrap, steps=steps,
                               timeout_s=max(float(timeout), 120.0))
    plan = Plan.model_validate({"version": 1, "harness": spec.model_dump(), "actions": findings.suggestions,
                                **({"amortization": amort.model_dump()} if amort else {})})
    text = plan_yaml(plan)
    parse_plan(text, str(plan_out))  # what we write must load
    plan_out.parent.mkdir(parents=True, exist_ok=True)
    plan_out.write_text(text, encoding="utf-8")
    for line in summary_lines(findings):
        stderr().print(line, highlight=False)
    for note in findings.notes:
        stderr().print(f"note: {note}", highlight=False)
    stderr().print(f"plan: {plan_out} ({len(findings.suggestions)} distributed entries); "
                   f"report: {out_dir / 'findings.md'}; traces: {out_dir}", highlight=False)
    return 0


def _step_s(f: DistributedFindings) -> float:
    """The step time of a synchronous run: the slowest rank's median timed step (seconds)."""
    return max(r.step_s or r.step_us / 1e6 for r in f.ranks)


def validate_distributed_command(
    plan_path: str,
    src: str,
    *,
    nproc: int,
    out: str | None = None,
    timeout_s: float = 600.0,
    min_speedup: float = MIN_SPEEDUP,
    speed_gate: str = "auto",
    steps: int = 3,
) -> int:
    """Run the original tree and the plan (its rewritten tree, with the plan's runnable
    ``distributed`` settings) on ``nproc`` processes each and compare step time and exposed
    communication. Writes ``validation-distributed.json``/``.md`` under ``out`` (default
    ``.stackpart/validation/distributed`` next to the plan).

    Returns:
        0 pass, 1 fail (the plan's step is slower than ``1 / min_speedup`` times the original's).
        ``speed_gate`` as in ``validate``: ``auto`` gates on CUDA only (on CPU with gloo the
        speed is reported, not gated), ``on`` always, ``off`` never.

    Raises:
        StackpartError: a plan without ``harness:``, conflicting settings, a failed run.
    """
    from ..engine.verdict import below
    from ..harness import resolve_device
    from ..plan import DistributedAction, load_plan
    from ..terminal import stderr
    from ..engine.materialize import materialize
    from ..validate.report import default_report_dir as validation_report_dir

    loaded = load_plan(plan_path)
    spec = loaded.plan.harness
    if spec is None:
        raise StackpartError("validate needs a 'harness:' section", path=plan_path, line=1)
    spec = resolve_device(spec)
    entries = [(i, a) for i, a in enumerate(loaded.plan.actions) if isinstance(a, DistributedAction)]
    defaults = _harness_defaults(spec, Path(src))
    wrap = str(defaults.get("wrap", "ddp"))
    settings: dict[str, Any] = {}
    advice: list[str] = []
    for i, a in entries:
        if a.wrapper != wrap:
            raise loaded.error(i, f"wrapper {a.wrapper} but the harness runs {wrap}")
        for key, value in a.settings.items():
            if key in RUNNABLE_SETTINGS[wrap]:
                if key in settings and settings[key] != value:
                    raise loaded.error(i, f"{key}: {value!r} conflicts with {settings[key]!r} from an earlier entry")
                settings[key] = value
            else:
                advice.append(f"actions[{i}] {key}: {value!r} (a training-loop change: not run by validate)")
    out_dir = Path(out) if out else validation_report_dir(plan_path) / "distributed"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stackpart-validate-dist-") as tmp:
        trees = materialize(loaded, Path(src), Path(tmp))
        base = run_distributed(spec, trees.original, nproc, out_dir / "original", wrap=wrap,
                               steps=steps, timeout_s=timeout_s)
        site = ({"target": loaded.plan.site, "path": loaded.path, "line": loaded.site_line}
                if loaded.plan.site else None)
        cand = run_distributed(spec, trees.rewritten, nproc, out_dir / "plan", wrap=wrap,
                               settings=settings, library_modules=trees.result.library_modules, site=site,
                               steps=steps, timeout_s=timeout_s)
    t0, t1 = _step_s(base), _step_s(cand)
    speedup = t0 / t1 if t1 > 0 else float("inf")
    gated = speed_gate == "on" or (speed_gate == "auto" and spec.device.startswith("cuda"))
    passed = speedup >= min_speedup or not gated
    result = {
        "plan": str(plan_path),
        "diff_sha256": trees.result.digest(),
        "nproc": nproc,
        "backend": base.backend,
        "wrap": wrap,
        "settings_run": settings,
        "not_run": advice,
        "original": {"step_s": t0, "exposed_share": base.exposed_share, "verdict": base.verdict},
        "plan_run": {"step_s": t1, "exposed_share": cand.exposed_share, "verdict": cand.verdict},
        "speedup": speedup,
        "min_speedup": min_speedup,
        "speed_gated": gated,
        "passed": passed,
    }
    (out_dir / "validation-distributed.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        f"# Distributed validation: {'pass' if passed else 'fail'}",
        "",
        f"{nproc} x {base.backend}, {wrap}, settings run: {settings or 'none'}; diff sha256 "
        f"`{result['diff_sha256'][:12]}`.",
        "",
        "| run | step (ms, slowest rank median) | exposed communication | verdict |",
        "|---|---:|---:|---|",
        f"| original | {t0 * 1e3:.2f} | {base.exposed_share:.0%} | {base.verdict} |",
        f"| plan | {t1 * 1e3:.2f} | {cand.exposed_share:.0%} | {cand.verdict} |",
        "",
        f"Speed-up {below(speedup, min_speedup) if speedup < min_speedup else f'{speedup:.2f}'}x (gate >= {min_speedup:g}x"
        + ("" if gated else "; not gated: CPU/gloo timings do not predict NCCL on GPUs, or --speed-gate off")
        + ").",
    ] + ([""] + [f"- {a}" for a in advice] if advice else [])
    (out_dir / "validation-distributed.md").write_text("\n".join(md) + "\n")
    stderr().print(f"distributed validation: {'pass' if passed else 'fail'}: step {t0 * 1e3:.2f} -> "
                   f"{t1 * 1e3:.2f} ms ({speedup:.2f}x), exposed communication {base.exposed_share:.0%} -> "
                   f"{cand.exposed_share:.0%}; report: {out_dir / 'validation-distributed.md'}", highlight=False)
    for a in advice:
        stderr().print(f"not run: {a}", highlight=False)
    return 0 if passed else 1
