"""Outputs a person reads: the terminal summary, report.md (+ PNG charts), report.json, plan.yaml.

report.json is versioned (``REPORT_VERSION``) and written even when a rung failed fatally, with
the rungs measured so far. Charts need matplotlib (the ``charts`` extra); without it report.md
says so and everything else is written.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import yaml

from .pruned import merge
from .rung import RungResult
from .rungs.top_ops import short_name

REPORT_VERSION = 1


#: First line of every plan diagnose writes; an existing ``-o`` without it is not overwritten.
PLAN_HEADER = "# Written by `stackpart diagnose`: every action's `why:` is the evidence that chose it.\n"


def plan_yaml(plan: Any) -> str:
    """The plan as YAML that :func:`rewriter.plan.load_plan` reads back (defaults left out)."""
    data = plan.model_dump(mode="json", exclude_defaults=True)
    data = {"version": 1, **{k: v for k, v in data.items() if k != "version"}}
    if "harness" in data and plan.harness is not None:
        data["harness"] = plan.harness.model_dump(mode="json")
    # read like docs/design.md: action, target, its fields, then why
    data["actions"] = [
        {"action": a["action"], "target": a["target"], **{k: v for k, v in a.items() if k not in ("action", "target", "why")}, **({"why": a["why"]} if "why" in a else {})}
        for a in data.get("actions", [])
    ]
    header = PLAN_HEADER
    return header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def to_json(meta: dict[str, Any], rungs: list[RungResult], plan: Any, notes: list[str], error: str | None) -> dict[str, Any]:
    import torch

    return {
        "version": REPORT_VERSION,
        "complete": error is None,
        "error": error,
        "environment": {"torch": torch.__version__, "python": platform.python_version(), "cuda": torch.cuda.is_available()},
        **meta,
        "rungs": [r.to_json() for r in rungs],
        "plan": plan.model_dump(mode="json") if plan is not None else None,
        "notes": notes,
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


def charts(out_dir: Path, rungs: dict[str, RungResult]) -> tuple[list[str], str | None]:
    """Op-mix and per-block PNGs; returns (file names, note when skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "charts skipped: matplotlib is not installed (pip install 'stackpart[charts]')"
    made = []
    mix = rungs.get("op_mix")
    if mix is not None and mix.ok:
        ms = {k: v for k, v in mix.measurement["ms"].items() if v > 0}
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.barh(list(ms), list(ms.values()), color="#4878a8")
        ax.set_xlabel(f"ms per step ({mix.measurement['basis']})")
        ax.set_title("Op mix by category")
        fig.tight_layout()
        fig.savefig(out_dir / "op_mix.png", dpi=100)
        plt.close(fig)
        made.append("op_mix.png")
    gran = rungs.get("granularity")
    if gran is not None and gran.ok and gran.measurement.get("per_instance_ms"):
        per = gran.measurement["per_instance_ms"]
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.bar(range(len(per)), list(per.values()), color="#6a9f58")
        ax.set_xticks(range(len(per)), [n.rsplit(".", 1)[-1] for n in per], fontsize=7)
        ax.set_ylabel(f"ms per step ({gran.measurement['basis']})")
        ax.set_title(f"Per-block time: {gran.measurement['class']}")
        fig.tight_layout()
        fig.savefig(out_dir / "blocks.png", dpi=100)
        plt.close(fig)
        made.append("blocks.png")
    search = rungs.get("search")
    rows = [r for r in (search.measurement.get("candidates", []) if search is not None else []) if r.get("step_ms") is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        contended = any(r.get("contended_step_ms") for r in rows)
        for r in rows:
            x, y = r.get("compile_s_per_start") or 0.0, r["step_ms"]
            color = "#c44e52" if r["chosen"] else "#4878a8"
            ax.scatter([x], [y], color=color, s=40 if r["chosen"] else 20)
            ax.annotate(r["candidate"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            if r.get("contended_step_ms"):  # the same plan with its host core contended: hollow, joined to it
                ax.plot([x, x], [y, r["contended_step_ms"]], color=color, linewidth=0.8, alpha=0.5)
                ax.scatter([x], [r["contended_step_ms"]], facecolors="none", edgecolors=color, s=40 if r["chosen"] else 20)
        ax.set_xlabel("total compile per process start, s")
        ax.set_ylabel("step ms (mean over shapes)")
        ax.set_title("Candidate plans: step time vs compile time (chosen in red"
                     + ("; hollow: host core contended)" if contended else ")"), fontsize=9 if contended else None)
        fig.tight_layout()
        fig.savefig(out_dir / "candidates.png", dpi=100)
        plt.close(fig)
        made.append("candidates.png")
    return made, None


def _cell(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.3f}" if abs(x) < 100 else f"{x:,.0f}"
    if isinstance(x, list):
        return " + ".join(_cell(v) for v in x) or "–"
    return str(x).replace("|", "\\|").replace("\n", " ")


#: The candidates table's columns: (header, row key).
CANDIDATE_COLUMNS = (
    ("candidate", "candidate"), ("step ms", "step_ms"), ("step ms, host core contended", "contended_step_ms"),
    ("cold compile s", "cold_compile_s"),
    ("new-shape compile s", "new_shape_compile_s"), ("graphs", "graphs"), ("graph breaks", "graph_breaks"),
    ("compile s / start", "compile_s_per_start"), ("recompiles", "recompiles"), ("fallbacks", "fallbacks"),
    ("numerics", "numerics"), ("net saving s", "net_s"),
    ("status", "status"),
)


def candidates_markdown(search: RungResult | None) -> list[str]:
    """report.md's candidates table (step ms per shape in a second table), what was pruned."""
    if search is None or not search.measurement.get("candidates"):
        return []
    m = search.measurement
    lines = ["## Candidate plans, measured", "",
             f"Each candidate rewritten into its own tree and run in its own process by the engine validate uses "
             f"(backend `{m.get('backend')}`, clean compile caches); {m.get('decision', '')}", "",
             "| " + " | ".join(h for h, _ in CANDIDATE_COLUMNS) + " |", "|" + "---|" * len(CANDIDATE_COLUMNS)]
    for r in m["candidates"]:
        cells = [_cell(r.get(k)) for _, k in CANDIDATE_COLUMNS]
        if r["chosen"]:
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    shapes = list(dict.fromkeys(k for r in m["candidates"] for k in r.get("step_ms_per_shape", {})))
    if shapes:
        two = any(r.get("process_ms_per_shape") for r in m["candidates"])
        lines += ["", "Step ms per shape (median of interleaved rounds" + ("; in brackets both processes' medians, the faster "
                  "one stands" if two else "") + "):", "", "| candidate | " + " | ".join(shapes) + " |", "|---|" + "---|" * len(shapes)]
        for r in m["candidates"]:
            procs = r.get("process_ms_per_shape") or {}
            lines.append(f"| {r['candidate']} | " + " | ".join(
                _cell(r.get("step_ms_per_shape", {}).get(k)) + (f" ({' / '.join(f'{x:.3f}' for x in procs[k])})" if k in procs else "")
                for k in shapes) + " |")
    lines += ["", "Actions per candidate:", ""]
    lines += [f"- **{r['candidate']}**{_rule_label(r)}"
              f"{' (the baseline: ' + r['baseline'] + ')' if r.get('baseline') else ''}: "
              + ("; ".join(f"`{a}`" for a in r["actions"]) or "no action") for r in m["candidates"]]
    if m.get("pruned"):
        lines += ["", "Pruned by evidence:", ""] + [f"- {p}" for p in merge(m["pruned"])]
    return lines + [""]


def _rule_label(row: dict[str, Any]) -> str:
    """`` (the rule's proposal)`` on the row that is the rules' proposal as they made it; on a row
    that is what is left of it once the search dropped some of its actions, those actions named."""
    if row.get("rule"):
        return " (the rule's proposal)"
    if row.get("rule_dropped"):
        said = ", ".join(f"`{t}`" for t in row["rule_dropped"])
        return f" (the rule proposed {said}, pruned: see below; this row is what is left of it)"
    return ""


#: The terminal's narrower table (fits 80 columns): (header, row key).
#: The candidates table's columns on the terminal, the status second: rich drops the columns that do
#: not fit from the right, and which candidate was chosen must survive a narrow terminal.
TERMINAL_COLUMNS = (("candidate", "candidate"), ("status", "status"), ("step ms", "step_ms"),
                    ("compile s", "compile_s_per_start"), ("recomp.", "recompiles"), ("fallb.", "fallbacks"),
                    ("numerics", "numerics"), ("net s", "net_s"))


def short_status(status: str) -> str:
    """The status's gist for the terminal: ``chosen``, ``failed: <first reason>``, ``tie``,
    ``slower``, ``behind when busy`` (ahead or tied on a quiet host core, not with it contended),
    ``gate: slower when busy`` (refused by validate's speed gate), ``no payback``, ``skipped: budget``,
    ``more recompiles`` (without a measured gain, more recompiles than the program as it is),
    ``more recompiles+breaks`` and ``more graph breaks`` (without a measured gain, ranked behind by
    recompiles plus graph breaks, or by graph breaks among equal sums: :mod:`.decide`),
    ``config: no fewer breaks`` (a ``dynamo_config`` twin that saw no fewer graph breaks than the
    candidate it came from: :func:`.kinds.config.judge`), ``same as as-is`` (a candidate that
    changes nothing in SRC)."""
    if status.startswith("failed"):
        reason = status.removeprefix("failed: ")
        for key, label in (("recompile limit", "recompile limit"), ("wrong numbers", "wrong numbers"),
                           ("raised", "raised"), ("does not rewrite", "does not rewrite"), ("captured no graph", "no graph"),
                           ("fail_on_recompile", "recompiles"), ("weights", "state_dict")):
            if key in reason:
                return f"failed: {label}"
        return "failed"
    if status.startswith("refused by validate's speed gate"):  # decide.GATED
        return "gate: slower when busy" if "with the host core contended" in status else "gate: slower"
    for key, label in (("with the host core contended", "behind when busy"), ("the least behind", "tie, dearer"),
                       ("within the noise", "tie, dearer"), ("the largest net", "tie, dearer"), ("does not pay back", "no payback"), ("net ", "less net"),
                       ("budget", "skipped: budget"), ("recompile(s) over the shapes against", "more recompiles"),
                       ("graph break(s) = ", "more recompiles+breaks"), ("more of them graph breaks", "more graph breaks"),
                       ("gain is not measured", "later in order"),
                       ("the config kept no graph break", "config: no fewer breaks"),
                       ("changes nothing", "same as as-is")):
        if key in status:
            return label
    return status.split(":")[0][:20]


def candidates_terminal(console: Any, search: RungResult | None) -> None:
    """The candidates table on the terminal (rich)."""
    if search is None or not search.measurement.get("candidates"):
        return
    from rich.table import Table

    from rich import box

    rows = search.measurement["candidates"]
    columns = [c for c in TERMINAL_COLUMNS if c[1] != "net_s" or any(r.get("net_s") is not None for r in rows)]
    if any(r.get("contended_step_ms") for r in rows):  # the step with the host core contended, beside the quiet one
        columns.insert([k for _, k in columns].index("step_ms") + 1, ("busy ms", "contended_step_ms"))
    table = Table(title="stackpart diagnose: candidate plans, measured (details in report.md)", show_lines=False,
                  padding=(0, 1), box=box.SIMPLE_HEAD)
    for header, _ in columns:
        if header == "candidate":
            table.add_column(header, no_wrap=True, overflow="ellipsis", min_width=12, max_width=24)
        else:
            # every column one line: rich drops a column that may wrap when the others fill the width
            table.add_column(header, no_wrap=True, overflow="ellipsis" if header == "status" else "fold",
                             min_width=8 if header == "status" else len(header))
    at = [key for _, key in columns].index("status")
    for r in rows:
        cells = [_cell(r.get(k)).replace("\\|", "|") for _, k in columns]
        cells[at] = short_status(r.get("status") or "")
        k = [key for _, key in columns].index("numerics")
        cells[k] = {"reference": "ref"}.get(cells[k], cells[k])
        if r["chosen"]:
            cells = [f"[bold green]{c}[/]" for c in cells]
        table.add_row(*cells)
    console.print(table)


def _brief(m: dict[str, Any]) -> str:
    parts = []
    for k, v in m.items():
        if isinstance(v, (dict, list)) or v is None:
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts[:6])


def memory_markdown(mem: RungResult | None, search: RungResult | None) -> list[str]:
    """The memory rung's sweep per measured pass (every step's figures are in report.json) and
    the allocator candidate's two arms where the search measured it; [] when neither ran."""
    lines: list[str] = []
    passes = (mem.measurement.get("passes") or []) if mem is not None else []
    if passes:
        lines += [f"## Memory over the shape sweep ({mem.measurement.get('device_counter')})", "",
                  "| pass | steps | device allocs | device frees | retries | reserved at end (MiB) | reserved - allocated at end | peak reserved | mean ms/step |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for p in passes:
            lines.append(f"| {p['pass']} | {p['steps']} | {p['device_allocs']} | {p['device_frees']} | {p['alloc_retries']} | {p['end_reserved_mib']:.0f} | "
                         f"{p['end_unallocated_mib']:.0f} | {p['peak_reserved_mib']:.0f} | {p['step_ms_mean']:.2f} |")
        lines.append("")
    alloc = (search.measurement.get("allocator") or {}) if search is not None else {}
    if alloc:
        lines += ["## The allocator candidate, measured", ""]
        if "without" in alloc:
            lines += [alloc.get("protocol", ""), "", "| arm | mean ms/step | peak reserved (MiB) | device allocs (steady) | retries | error |", "|---|---|---|---|---|---|"]
            for arm in ("without", "with"):
                a = alloc[arm]
                lines.append(f"| {arm} expandable_segments | {a.get('step_ms_mean', '-')} | {a.get('peak_reserved_mib', '-')} | "
                             f"{a.get('steady_device_allocs', '-')} | {a.get('alloc_retries', '-')} | {_cell(a.get('error') or '')} |")
            lines.append("")
        lines += [alloc.get("skipped") or alloc.get("error") or alloc["effect"]["text"], ""]
    return lines


def dynamo_config_markdown(settings: list[dict[str, Any]] | None, environment: dict[str, str] | None = None) -> list[str]:
    """report.md's list of the ``torch._dynamo.config`` knobs the program's run set away from
    torch's defaults (:func:`.dynamo_settings.read`, report.json's ``meta.dynamo_config``), each
    with what it changes where stackpart knows it, and the environment variables torch's compile
    stack read at import (:func:`.dynamo_settings.environment`, ``meta.compile_environment``);
    [] where there are neither."""
    if not settings and not environment:
        return []
    lines = ["## The program's torch._dynamo.config", ""]
    if settings:
        lines += ["Set away from torch's defaults as the program ran (its imports, model function and first steps); "
                  "the ladder's compiles ran under them, and so do the search's candidates unless their plan sets a knob "
                  "itself:", ""] + [f"- {s['text']}" for s in settings] + [""]
    if environment:
        lines += ["Set in the environment diagnose ran in (torch reads these when it is imported and makes them the "
                  "knobs' defaults, so a knob set this way is not listed as set away from its default):", ""]
        lines += [f"- `{k}={v}`" for k, v in environment.items()] + [""]
    return lines


def markdown(meta: dict[str, Any], rungs: list[RungResult], plan_text: str | None, notes: list[str], images: list[str], chart_note: str | None, error: str | None) -> str:
    """report.md: the ladder table, charts, top-10, findings with file:line, notes and the plan."""
    lines = [f"# stackpart diagnose: {meta.get('harness', {}).get('file', '')}", ""]
    lines.append(f"device `{meta.get('device')}`" + (f" ({meta['device_rule']})" if meta.get('device_rule') else "") + (f", {meta['cpu_threads']['text']}" if meta.get('cpu_threads') else "") + f", mode `{meta.get('mode')}`, dtype `{meta.get('dtype')}`, reference shape `{meta.get('reference_shape')}`, compile backend `{meta.get('backend')}`"
                 + (f", each step calls `model.{call}`" if (call := meta.get('harness', {}).get('call')) else ""))
    if meta.get("seconds") is not None:
        lines.append(f"whole ladder: {meta['seconds']} s")
    lines.append("")
    lines += dynamo_config_markdown(meta.get("dynamo_config"), meta.get("compile_environment"))
    if error:
        lines += [f"**Stopped early:** {error}", ""]
    lines += ["## The ladder", "", "| rung | status | measurement | threshold (source) | verdict | implies | s |", "|---|---|---|---|---|---|---|"]
    for r in rungs:
        cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines.append(f"| {r.title} | {r.status} | {cell(_brief(r.measurement))} | {cell(r.threshold)} | {cell(r.verdict or r.reason)} | {cell(r.implies)} | {r.seconds} |")
    lines.append("")
    if images or chart_note:
        lines += ["## Charts", ""]
        lines += [f"![{i}]({i})" for i in images]
        if chart_note:
            lines.append(f"_{chart_note}_")
        lines.append("")
    top = next((r for r in rungs if r.name == "top_ops" and r.ok), None)
    if top is not None:
        lines += [f"## Top-10 ops ({top.measurement['basis']})", "", "| op | category | ms/step | share | kernels | function |", "|---|---|---|---|---|---|"]
        for row in top.measurement["top"]:
            flag = " **(dominant)**" if top.measurement.get("dominant") and row["op"] == top.measurement["dominant"]["op"] else ""
            lines.append(f"| `{short_name(row['op'])}`{flag} | {row['category']} | {row['ms']} | {row['share']:.1%} | {', '.join(f'`{short_name(k)}`' for k in row['kernels'])} | {row['function'] or ''} |")
        lines.append("")
    lines += memory_markdown(next((r for r in rungs if r.name == "memory" and r.ok), None),
                             next((r for r in rungs if r.name == "search"), None))
    findings = [(r, f) for r in rungs for f in r.findings]
    if findings:
        lines += ["## Findings", ""]
        for r, f in findings:
            lines.append(f"- {f'`{f.where}`' if f.file else f.where} ({r.name}, {f.kind}{', ' + f.function if f.function else ''}): {f.message}")
        lines.append("")
    search = next((r for r in rungs if r.name == "search"), None)
    lines += candidates_markdown(search)
    # a pruned line is listed under the candidates already: the notes do not say it again
    shown = search is not None and search.measurement.get("candidates")
    listed = {f"search: pruned {p}" for p in merge(search.measurement.get("pruned") or [])} if shown else set()
    notes = [n for n in dict.fromkeys(notes) if n not in listed]
    if notes:
        lines += ["## Planner notes", ""] + [f"- {n}" for n in notes] + [""]
    if plan_text is not None:
        lines += ["## Plan", "", "```yaml", plan_text.rstrip(), "```", ""]
    return "\n".join(lines)


def terminal(console: Any, rungs: list[RungResult], notes: list[str], plan: Any, paths: dict[str, str],
             said: Any = None, dynamo_config: list[dict[str, Any]] | None = None,
             environment_config: list[dict[str, Any]] | None = None) -> None:
    """The summary on stderr, about 40 lines: the ladder's verdicts (one line per rung), the
    program's own ``torch._dynamo.config`` knobs that change what those counts mean, set by the
    program or by an environment variable (one line, :func:`.dynamo_settings.counts_line` of
    ``dynamo_config`` and ``environment_config``, report.json's ``meta.dynamo_config`` and
    ``meta.dynamo_config_environment``),
    the candidates table, the planner's notes not shown already, the plan's actions (one line each)
    and where the files went. Lines are cut to the console's width with an ellipsis; report.md
    holds them whole. ``said(text)``: whether that line was printed already as an event (``-v``),
    so no line is said twice."""
    from rich.markup import escape
    from rich.table import Table

    from rich import box

    from .dynamo_settings import counts_line

    table = Table(title="stackpart diagnose: the ladder (report.md has each measurement)", box=box.SIMPLE_HEAD,
                  padding=(0, 1), show_edge=False)
    name_width = max((len(r.name) for r in rungs), default=4)
    table.add_column("rung", no_wrap=True, min_width=name_width)
    table.add_column("status", no_wrap=True, min_width=7)
    table.add_column("verdict -> implies", no_wrap=True, overflow="ellipsis",
                     max_width=max(20, getattr(console, "width", 80) - name_width - 7 - 6))
    colors = {"ok": "green", "skipped": "yellow", "error": "red"}
    for r in rungs:
        verdict = " ".join(str(r.verdict or r.reason or "").split())
        implies = "" if not r.implies or r.implies == "none" else f" -> {' '.join(str(r.implies).split())}"
        table.add_row(r.name, f"[{colors.get(r.status, 'white')}]{r.status}[/]", f"{verdict}{implies}")
    console.print(table)
    knobs = counts_line(dynamo_config, environment_config)
    if knobs is not None:
        console.print(f"[bold]note:[/] {escape(knobs)}", highlight=False, no_wrap=True, overflow="ellipsis")
    search = next((r for r in rungs if r.name == "search"), None)
    candidates_terminal(console, search)
    verdict = f"search: {search.verdict}" if search is not None and search.verdict else None
    for n in dict.fromkeys(notes):  # the search's choice is the ladder's last row already
        if n != verdict and not (said is not None and said(n)):
            console.print(f"[bold]note:[/] {n}", highlight=False, no_wrap=True, overflow="ellipsis")
    if plan is not None:
        for a in plan.actions:
            console.print(f"[bold cyan]{a.action}[/] {a.target}  [dim]{' '.join(str(a.why or '').split())}[/]",
                          highlight=False, no_wrap=True, overflow="ellipsis")
        if not plan.actions:
            console.print("[bold]plan:[/] no actions")
    folder = Path(paths["report"]).parent if "report" in paths else None
    together = [what for what, p in paths.items() if what != "plan" and folder is not None and Path(p).parent == folder]
    for what, p in paths.items():
        if what not in together:
            console.print(f"wrote {what}: {p}", highlight=False)
        elif what == together[0]:  # the report folder's files on one line
            console.print(f"wrote into {folder}/: " + ", ".join(f"{Path(paths[w]).name}" + (" (Perfetto)" if w.startswith("trace") else "")
                                                         for w in together), highlight=False)


def default_report_dir(plan_out: str | Path) -> Path:
    """Where diagnose writes its report by default: ``stackpart-diagnose/`` next to the plan,
    ``stackpart-diagnose-<stem>/`` for a plan not named ``plan.yaml`` (two plans in one folder
    never overwrite each other's report)."""
    from ..plan import report_dir_for

    return report_dir_for(plan_out, "stackpart-diagnose")
