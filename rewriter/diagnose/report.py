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

from .rung import RungResult
from .top_ops import short_name

REPORT_VERSION = 1


#: First line of every plan diagnose writes; an existing ``-o`` without it is not overwritten.
PLAN_HEADER = "# Written by `stackpart diagnose`: every action's `why:` is the evidence that chose it.\n"


def plan_yaml(plan: Any) -> str:
    """The plan as YAML that :func:`rewriter.plan.load_plan` reads back (defaults left out)."""
    data = plan.model_dump(mode="json", exclude_defaults=True)
    data = {"version": 1, **{k: v for k, v in data.items() if k != "version"}}
    if "harness" in data and plan.harness is not None:
        data["harness"] = plan.harness.model_dump(mode="json")
    # read like DESIGN.md: action, target, its fields, then why
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
    return made, None


def _brief(m: dict[str, Any]) -> str:
    parts = []
    for k, v in m.items():
        if isinstance(v, (dict, list)) or v is None:
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts[:6])


def markdown(meta: dict[str, Any], rungs: list[RungResult], plan_text: str | None, notes: list[str], images: list[str], chart_note: str | None, error: str | None) -> str:
    """report.md: the ladder table, charts, top-10, findings with file:line, notes and the plan."""
    lines = [f"# stackpart diagnose: {meta.get('harness', {}).get('file', '')}", ""]
    lines.append(f"device `{meta.get('device')}`, mode `{meta.get('mode')}`, dtype `{meta.get('dtype')}`, reference shape `{meta.get('reference_shape')}`, compile backend `{meta.get('backend')}`")
    if meta.get("seconds") is not None:
        lines.append(f"whole ladder: {meta['seconds']} s")
    lines.append("")
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
    findings = [(r, f) for r in rungs for f in r.findings]
    if findings:
        lines += ["## Findings", ""]
        for r, f in findings:
            lines.append(f"- `{f.where}` ({r.name}, {f.kind}{', ' + f.function if f.function else ''}): {f.message}")
        lines.append("")
    if notes:
        lines += ["## Planner notes", ""] + [f"- {n}" for n in notes] + [""]
    if plan_text is not None:
        lines += ["## Plan", "", "```yaml", plan_text.rstrip(), "```", ""]
    return "\n".join(lines)


def terminal(console: Any, rungs: list[RungResult], notes: list[str], plan: Any, paths: dict[str, str]) -> None:
    """The rich summary on stderr: the ladder, planner notes, actions and where files went."""
    from rich.table import Table

    table = Table(title="stackpart diagnose: the ladder", show_lines=False)
    for col in ("rung", "status", "verdict", "implies"):
        table.add_column(col, overflow="fold")
    colors = {"ok": "green", "skipped": "yellow", "error": "red"}
    for r in rungs:
        table.add_row(r.title, f"[{colors.get(r.status, 'white')}]{r.status}[/]", r.verdict or r.reason, r.implies)
    console.print(table)
    for n in notes:
        console.print(f"[bold]note:[/] {n}")
    if plan is not None:
        for a in plan.actions:
            console.print(f"[bold cyan]{a.action}[/] {a.target}  [dim]{a.why}[/]")
        if not plan.actions:
            console.print("[bold]plan:[/] no actions")
    for what, p in paths.items():
        console.print(f"wrote {what}: {p}")


def default_report_dir(plan_out: str | Path) -> Path:
    """Where diagnose writes its report by default: ``stackpart-diagnose/`` next to the plan,
    ``stackpart-diagnose-<stem>/`` for a plan not named ``plan.yaml`` (two plans in one folder
    never overwrite each other's report)."""
    from ..plan import report_dir_for

    return report_dir_for(plan_out, "stackpart-diagnose")
