"""The validation report: ``validation.json`` (the record ``rewrite --apply`` checks),
``validation.md`` (a table a reviewer pastes into a pull request) and ``validation.png`` (step time
and compile time per variant; matplotlib, the optional ``charts`` extra), all bound to the sha256
of the diff (:meth:`rewriter.rewrite.transform.RewriteResult.digest`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

REPORT_VERSION = 1
JSON_NAME, MD_NAME, PNG_NAME = "validation.json", "validation.md", "validation.png"


def default_report_dir(plan_path: str | Path) -> Path:
    """Where validate writes and ``rewrite --apply`` looks: ``.stackpart/validation/`` next to
    the plan file, ``.stackpart/validation-<stem>/`` for a plan not named ``plan.yaml``, so two
    plans in one folder never overwrite each other's report."""
    from ..plan import report_dir_for

    path = Path(plan_path).resolve()
    return report_dir_for(path.parent / ".stackpart" / path.name, "validation")


def _baselines_line(report: dict[str, Any]) -> str:
    """What the in-place baselines were compiled with, or that none ran (``--baselines none``)."""
    variants = report.get("variants", {})
    ran = [n for n in variants if n in ("whole", "regional")]
    if not ran:
        return "- no in-place baseline (whole, regional) was run"
    idle = [n for n in ran if (variants[n] or {}).get("baseline_idle")]
    return (f"- baselines ({', '.join(ran)}) compiled with backend `{report['backend']}`"
            + "".join(f"; {variants[n]['baseline_idle']}" for n in idle))


def report_header(loaded: Any, src: Path, result: Any, harness: Any, backend: str, environment: dict[str, Any]) -> dict[str, Any]:
    """The fields every validation report starts with, whoever measured it (``validate`` or
    diagnose's search): what ``rewrite --apply`` checks (the diff's sha256, the plan file's, SRC's
    file hashes) and what the timings were taken on, with the ``timing_note`` every output carries.

    ``loaded`` is the plan as written (:class:`rewriter.plan.LoadedPlan`), ``result`` its rewrite
    of ``src`` (unsafe actions included), ``harness`` the harness as it ran (device resolved).
    ``rewrite_notices`` holds the lines ``stackpart rewrite`` prints beside that diff (its
    warnings, each action not written and why: :func:`rewriter.rewrite.notices.notices`, as
    ``{"kind", "text"}``) and ``actions_not_written`` the indices of the plan's actions the measured tree does not hold.
    """
    import time

    from ..engine.materialize import file_sha256, tree_hashes
    from ..rewrite.notices import not_written, notices

    plan = loaded.plan
    header: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "diff_sha256": result.digest(),
        "plan": str(Path(loaded.path).resolve()),
        "plan_sha256": file_sha256(Path(loaded.path)),
        "src": str(Path(src).resolve()),
        "tree_sha256": tree_hashes(Path(src)),
        "changed_files": [c.relpath for c in result.changes],
        "harness": harness.model_dump(),
        "backend": backend,
        "amortization": plan.amortization.model_dump() if plan.amortization else None,
        "plan_compiles": any(a.action == "compile" and a.compiles for a in plan.actions),
        "rewrite_notices": [n.to_json() for n in notices(loaded, result)],
        "actions_not_written": not_written(result),
        "environment": environment,
        "created_unix": time.time(),
    }
    header["timing_note"] = timing_banner(header)
    return header


def _ms(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}"


def _s(x: Any) -> str:
    return "–" if x is None else f"{x:.2f}"


def timing_banner(report: dict[str, Any]) -> str:
    """The one line every output carries about what the timings are."""
    env = report["environment"]
    if env["timed_on"] == "cuda":
        return f"Timed on GPU ({env['device_name']}) with CUDA events; torch {env['torch']}."
    why = "no CUDA on this machine" if not env.get("cuda_available") else "the harness asks for the CPU"
    threads = f", {env['cpu_threads']['text']}" if env.get("cpu_threads") else ""
    return (
        f"CPU RUN: {why} ({env.get('device_rule', 'device cpu')}), so every figure below is CPU wall-clock "
        f"(perf_counter after synchronize) on {env['device_name']}{threads}, torch {env['torch']}. "
        "These are NOT GPU timings; validate on a GPU before trusting speed or amortization."
    )


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown report: the verdict and what it is bound to, tables per variant and per
    shape, why each compiled variant behaves as it does, then the amortization formula.

    ``report`` is the dict :func:`write_report` writes as ``validation.json``; the text is
    ``validation.md``, built section by section in page order by the helpers below. Times are in
    ms per step and s per process start.
    """
    lines = _summary_lines(report)
    lines += _rewrite_notice_lines(report)
    lines += _verdict_lines(report["verdict"])
    busy = _contended(report)
    lines += _variant_table_lines(report, busy)
    lines += numerics_lines(report)
    names = list(report["variants"])
    lines += _shape_table_lines(report, names)
    if busy:
        lines += _contended_shape_table_lines(report, names)
    lines += _behaviour_lines(report)
    lines += _AMORTIZATION_FOOTER
    return "\n".join(lines)


#: The last lines of ``validation.md``: how break-even runs are computed
#: (:mod:`rewriter.engine.amortize` computes them).
_AMORTIZATION_FOOTER = (
    "",
    "Amortization: break-even runs = t_compile x N_compiles / (t_eager - t_compiled), "
    "N_compiles = shape buckets x restarts x compiles per bucket (counted in the cold run).",
    "",
)


def _contended(report: dict[str, Any]) -> bool:
    """Whether any variant was also timed with the host core contended (``contended_step_ms``):
    the variants table then has that column and a second per-shape table follows the first."""
    return any(var.get("contended_step_ms") is not None for var in report["variants"].values())


def _summary_lines(report: dict[str, Any]) -> list[str]:
    """The title with the verdict (PASS; FAIL for exit code 1; else ERROR), the timing banner
    (:func:`timing_banner`), the diff, plan and SRC the report is bound to, the harness, and
    what the baselines were compiled with (:func:`_baselines_line`)."""
    v = report["verdict"]
    return [
        f"# stackpart validation: {'PASS' if v['passed'] else 'FAIL' if v['exit_code'] == 1 else 'ERROR'}",
        "",
        f"> {timing_banner(report)}",
        "",
        f"- diff sha256: `{report['diff_sha256']}`",
        f"- plan: `{report['plan']}` (sha256 `{report['plan_sha256'][:12]}`), SRC: `{report['src']}`",
        f"- harness: mode {report['harness']['mode']}, dtype {report['harness']['dtype']}, "
        f"device {report['environment']['timed_on']}, {len(report['harness']['shapes'])} shapes"
        + (f", each step calls model.{report['harness']['call']}" if report['harness'].get('call') else ""),
        _baselines_line(report),
        "",
    ]


def _rewrite_notice_lines(report: dict[str, Any]) -> list[str]:
    """The "The rewrite's warnings" section: the lines ``stackpart rewrite`` prints beside this diff
    (``rewrite_notices``, :func:`report_header`), led by how many of the plan's actions the
    measured tree does not hold; left out when there are none (a report written before the
    field existed has none)."""
    from ..rewrite.notices import Notice

    said = [Notice(**n).line for n in report.get("rewrite_notices") or []]
    if not said:
        return []
    skipped = report.get("actions_not_written") or []
    lead = ([f"{len(skipped)} of the plan's actions are not in the rewritten tree: the plan was measured without "
             "them.", ""] if skipped else [])
    return ["## The rewrite's warnings", ""] + lead + [f"- {x}" for x in said] + [""]


def _verdict_lines(verdict: dict[str, Any]) -> list[str]:
    """The verdict's errors, failures and notes, each a section of bullets, left out when empty."""
    lines: list[str] = []
    for title, items in (("Errors", verdict["errors"]), ("Failures", verdict["failures"]), ("Notes", verdict["notes"])):
        if items:
            lines += [f"## {title}", ""] + [f"- {x}" for x in items] + [""]
    return lines


def _variant_table_lines(report: dict[str, Any], busy: bool) -> list[str]:
    """The "Variants" table: its header, then a row per variant (:func:`_variant_row`); with
    ``busy`` (:func:`_contended`) a column for the step time with the host core contended."""
    lines = [
        "## Variants",
        "",
        "| variant | step ms (mean of medians) | vs eager "
        + ("| step ms, host core contended " if busy else "")
        + "| cold first call s | compile s / start "
        "| graphs | graph breaks | recompiles | recompile-limit fallbacks | fail_on_recompile "
        "| numerics | break-even runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if busy else ""),
    ]
    for name, var in report["variants"].items():
        lines.append(_variant_row(name, var, busy))
    return lines


def _variant_row(name: str, var: dict[str, Any], busy: bool) -> str:
    """One variant's row of the "Variants" table: step time (ms) and its speedup over eager,
    cold first call and compile per process start (s), Dynamo's graphs, graph breaks,
    recompilations and recompile-limit fallbacks, the ``fail_on_recompile`` stance, numerics and
    break-even runs; "–" where a figure was not measured. A variant that errored gets its error
    and empty cells."""
    comp = var.get("compile") or {}
    amort = var.get("amortization") or {}
    stance = var.get("fail_on_recompile") or {}
    stance_txt = (
        "–" if not stance.get("supported") or "ok" not in stance else "ok" if stance["ok"] else "RECOMPILED"
    )
    numerics = var.get("numerics", "–")
    be = amort.get("break_even_runs")
    be_txt = "–" if be is None else be if isinstance(be, str) else f"{be:,.0f}"
    sp = var.get("speedup_vs_eager")
    speed = "–" if sp is None else "no graph" if var.get("baseline_idle") else f"{sp:.2f}x"
    if var.get("error"):
        return f"| {name} | error: {var['error']} | | | | | | | | | | |" + (" |" if busy else "")
    return (
        f"| {name} | {_ms(var.get('step_ms'))} | {speed} "
        + (f"| {_ms(var.get('contended_step_ms'))} " if busy else "")
        + f"| {_s(var.get('cold_first_call_s'))} | {_s(var.get('compile_s_per_start'))} "
        f"| {comp.get('unique_graphs', '–')} | {comp.get('graph_breaks', '–')} "
        f"| {comp.get('recompiles', '–')} | {len(comp.get('recompile_limit_hits', []))} "
        f"| {stance_txt} | {numerics} | {be_txt} |"
    )


def _shape_table_lines(report: dict[str, Any], names: list[str]) -> list[str]:
    """The "Step time per shape" table: a row per harness shape, a column per variant in
    ``names``, each cell the median step time with its p10–p90 range (ms), "–" where the variant
    timed no step at that shape."""
    lines = ["", "## Step time per shape (ms, median [p10–p90])", ""]
    lines.append("| shape | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for row in report.get("timing", []):
        cells = []
        for n in names:
            t = row["timing"].get(n)
            cells.append(
                "–" if not t or not t.get("n") else f"{t['median_ms']:.3f} [{t['p10_ms']:.3f}–{t['p90_ms']:.3f}]"
            )
        lines.append(f"| {row['shape']} | " + " | ".join(cells) + " |")
    return lines


def _contended_shape_table_lines(report: dict[str, Any], names: list[str]) -> list[str]:
    """The per-shape table again with the host core contended: median step time (ms) per shape
    and variant while a busy loop shares the timed processes' core, with the band
    (``contended_band``, a fraction, default 2%) the verdict gates it within."""
    lines = ["", f"## Step time per shape, host core contended (ms, median; a busy loop on the timed processes' "
             f"shared core; gated within a {report.get('contended_band', 0.02):.1%} band)", ""]
    lines.append("| shape | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for row in report.get("timing", []):
        cells = [_ms((row["timing"].get(n) or {}).get("contended_ms")) for n in names]
        lines.append(f"| {row['shape']} | " + " | ".join(cells) + " |")
    return lines


def _behaviour_lines(report: dict[str, Any]) -> list[str]:
    """The "Why the compiled variants behave as they do" section: for each variant with compile
    counters (eager never), :func:`_variant_behaviour_lines`."""
    lines = ["", "## Why the compiled variants behave as they do", ""]
    for name, var in report["variants"].items():
        comp = var.get("compile") or {}
        if name == "eager" or not comp:
            continue
        lines += _variant_behaviour_lines(report, name, var, comp)
    return lines


def _variant_behaviour_lines(report: dict[str, Any], name: str, var: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    """One compiled variant's heading (:func:`variant_heading`) and bullets: why a baseline
    compiled no graph, the repeated blocks' share for ``regional`` (:func:`block_share_lines`),
    recompile-limit hits, the first 5 recompilation reasons, graph breaks
    (:func:`graph_break_lines`) and its amortization (:func:`_amortization_lines`). ``comp`` is
    the variant's ``compile`` counters."""
    lines = [variant_heading(name, var)]
    if var.get("baseline_idle"):
        lines.append(f"  - {var['baseline_idle']}")
    if name == "regional":
        lines.extend(block_share_lines(report))
    for hit in comp.get("recompile_limit_hits", []):
        lines.append(f"  - recompile limit hit, frame runs eager from then on: {hit}")
    for r in comp.get("recompile_reasons", [])[:5]:
        lines.append(f"  - recompiled: {r}")
    lines.extend(graph_break_lines(comp))
    lines.extend(_amortization_lines(var.get("amortization")))
    return lines


def _amortization_lines(amort: dict[str, Any] | None) -> list[str]:
    """A variant's amortization bullet, or none without one: the verdict alone where compile time
    was not measured; against the program's own compile per start where the reference was
    measured (``reference_compile_s_per_start``); else t_compile (s) x N_compiles over the saving
    per step (shown in ms; ``saving_s`` is in s)."""
    if amort and amort.get("compile_measured") is False:
        return [f"  - amortization: {amort['verdict']}"]
    if amort and amort.get("reference_compile_s_per_start") is not None:
        return [
            f"  - amortization against the program as it runs: {amort['t_compile_s'] * amort['compiles_per_start']:.2f} s "
            f"compile per start vs its own {amort['reference_compile_s_per_start']:.2f} s, x {amort['restarts']} "
            f"restart(s); {1e3 * amort['saving_s']:.3f} ms saved per step: {amort['verdict']}"
        ]
    if amort:
        return [
            f"  - amortization: t_compile {amort['t_compile_s']:.2f} s x N_compiles {amort['n_compiles']} "
            f"({amort['shape_buckets']} shape bucket(s), {amort['compiles_per_start']} compile(s) per start, "
            f"{amort['restarts']} restart(s)) / {1e3 * amort['saving_s']:.3f} ms saved per step: {amort['verdict']}"
        ]
    return []


def variant_heading(name: str, var: dict[str, Any]) -> str:
    """A compiled variant's line in "Why the compiled variants behave as they do": its name and
    what was done to it (:func:`rewriter.engine.variants.prepare`'s ``compiled``), and where it
    is a baseline that compiled no graph (``baseline_idle``, :mod:`.baselines`) that it compiled
    none, so the line states what was measured."""
    idle = "; it compiled no graph" if var.get("baseline_idle") else ""
    return f"- **{name}** ({var.get('compiled', '')}{idle}):"


def numerics_lines(report: dict[str, Any]) -> list[str]:
    """Markdown: per compiled variant, its worst leaf under the high-precision rule
    ("eager vs fp64: X; plan vs fp64: Y; bound Z"); nothing for float32/float64 harnesses."""
    from ..engine.compare import high_precision_text, reference_text

    run = (report.get("variants", {}).get("eager") or {}).get("high_precision_run")
    rows = [
        (name, var["numerics_vs_high_precision"])
        for name, var in report.get("variants", {}).items()
        if var.get("numerics_vs_high_precision")
    ]
    if not run and not rows:
        return []
    out = ["", "## Numerics against a high-precision run of the original", ""]
    if run:
        out.append(reference_text(run) + " Worst leaf per variant:")
        out.append("")
    for name, hp in rows:
        text = high_precision_text(hp).replace("rewritten vs", f"{name} vs")
        out.append(
            f"- **{name}**: {text} at shape {hp['shape']}, {hp['quantity']} {hp['path']}: "
            f"{'within' if hp['ok'] else 'PAST'} the bound"
        )
    return out


def graph_break_lines(comp: dict[str, Any], show: int = 3) -> list[str]:
    """A variant's graph breaks, each once: at its file:line where Dynamo's log gave one
    (``graph_break_sites``), else the counters' reason with its count."""
    sites = comp.get("graph_break_sites") or []
    texts = [f"graph break at {s}" for s in sites] or [f"graph break: {r}" for r in comp.get("graph_break_reasons", [])]
    return [f"  - {t}" for t in texts[:show]]


def block_share_lines(report: dict[str, Any]) -> list[str]:
    """Markdown bullets: how much of the eager step the repeated blocks hold (what a regional
    compile can cover) and how many compiled frames a step enters."""
    shares = (report.get("variants", {}).get("eager") or {}).get("block_share") or []
    if not shares:
        return []
    parts = ", ".join(
        f"{row['shape']}: {100 * row['share']:.0f}%" for row in shares if row.get("share") is not None
    )
    calls = shares[0].get("block_calls", 0)
    return [
        f"  - the repeated blocks hold this share of the eager step (the rest stays eager under a "
        f"regional compile): {parts}",
        f"  - a step enters {calls} separately compiled frames (guards checked and eager glue run "
        "between each), against 1 for a whole-model compile without graph breaks",
    ]


def render_chart(report: dict[str, Any], path: Path) -> str | None:
    """Write the chart PNG; return None, or why no chart was written (matplotlib missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (pip install 'stackpart[charts]')"
    names = [n for n, v in report["variants"].items() if v.get("step_ms") is not None]
    steps = [report["variants"][n]["step_ms"] for n in names]
    compiles = [report["variants"][n].get("compile_s_per_start") or 0.0 for n in names]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    unit = "GPU, CUDA events" if report["environment"]["timed_on"] == "cuda" else "CPU wall-clock, NOT GPU"
    a1.bar(names, steps, color="#4c72b0")
    a1.set_title(f"step time, ms ({unit})", fontsize=9)
    a2.bar(names, compiles, color="#dd8452")
    a2.set_title("cold compile per process start, s", fontsize=9)
    fig.suptitle(f"stackpart validation, diff {report['diff_sha256'][:12]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


#: Where a report that did not pass goes when ``out_dir`` holds a passing one it must not replace.
FAILED_DIR = "failed"


def kept_passing(report: dict[str, Any], out_dir: Path) -> Path | None:
    """The passing report in ``out_dir`` that ``report`` must not replace, or None.

    A report that did not pass never replaces a passing one of the same diff, tree and plan (the
    report ``rewrite --apply`` accepts): one failed run (a flaky comparison, a machine that cannot
    build the model) would otherwise turn a validated diff into a refused one. A report that
    passes, or one for another diff, tree or plan, replaces the old one as before."""
    if report.get("verdict", {}).get("passed"):
        return None
    old = read_report(out_dir)
    if old is None or not old.get("verdict", {}).get("passed"):
        return None
    same = all(old.get(k) == report.get(k) for k in ("diff_sha256", "tree_sha256", "plan_sha256"))
    return Path(out_dir) / JSON_NAME if same else None


def write_report(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write the three files under ``out_dir`` (created); returns their paths. A report that did
    not pass goes to ``out_dir/failed/`` instead when ``out_dir`` holds a passing report of the same
    diff, tree and plan (:func:`kept_passing`), and its notes say so."""
    kept = kept_passing(report, out_dir)
    if kept is not None:
        out_dir = Path(out_dir) / FAILED_DIR
        report["verdict"]["notes"].append(
            f"kept the passing validation report {kept} of this diff (sha256 {str(report.get('diff_sha256'))[:12]}), "
            f"tree and plan: a run that does not pass never replaces it; this run's report is in {out_dir}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    note = render_chart(report, out_dir / PNG_NAME)
    if note:
        report["verdict"]["notes"].append(note)
    (out_dir / JSON_NAME).write_text(json.dumps(_jsonable(report), indent=1, sort_keys=False) + "\n")
    (out_dir / MD_NAME).write_text(render_markdown(report))
    return [out_dir / n for n in (JSON_NAME, MD_NAME, PNG_NAME) if (out_dir / n).exists()]


def read_report(path: Path) -> dict[str, Any] | None:
    """The JSON report at ``path`` (a file or a report dir), or None when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / JSON_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("report_version") == REPORT_VERSION else None
