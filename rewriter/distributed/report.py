"""Render :class:`~rewriter.distributed.findings.DistributedFindings` as Markdown (the
``findings.md`` next to the traces) and as short terminal lines."""

from __future__ import annotations

import yaml

from .findings import DistributedFindings


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def summary_lines(f: DistributedFindings) -> list[str]:
    """Three to five lines for the terminal: verdict, dominant collective, stragglers, stalls."""
    lines = [
        f"collectives ({f.nproc} x {f.backend}, {f.wrap}): {f.verdict}: exposed communication "
        f"{f.exposed_share:.0%} of the step on the least-waiting rank "
        f"(threshold {f.thresholds['collective_bound_share']:.0%})"
    ]
    if f.dominant:
        d = f.dominant
        lines.append(
            f"dominant collective: {d.kind}, {d.share_of_step:.0%} of the step, "
            f"{d.overlap_share:.0%} overlapped, {d.calls_per_step:.0f} call(s)/step"
        )
    for s in f.stragglers:
        lines.append(
            f"straggler: rank {s.rank} computes {s.excess_share:.0%} longer than the median "
            f"(threshold {f.thresholds['straggler_share']:.0%})"
        )
    if f.host_stalls:
        h = f.host_stalls[0]
        lines.append(f"largest host stall: {h.where}, {_ms(h.total_us_per_step)} ms/step")
    return lines


def markdown(f: DistributedFindings) -> str:
    """The findings as a Markdown document (tables in ms)."""
    t = f.thresholds
    out = [
        f"# Collectives on the critical path: {f.verdict}",
        "",
        f"{f.nproc} processes, backend `{f.backend}`, wrapper `{f.wrap}` "
        f"{f.settings or ''}, mode `{f.mode}`, {f.timeline} timeline, "
        f"{f.grad_bytes / 2**20:.1f} MB of gradients.",
        "",
        f"Exposed communication (communication not overlapped by compute) is "
        f"**{f.exposed_share:.0%}** of the step on the rank that waits least; collective-bound "
        f"at >= {t['collective_bound_share']:.0%}.",
        "",
        "## Per rank (ms per step, mean of the profiled steps)",
        "",
        "| rank | step (timed) | step (trace) | compute | communication | exposed comm | "
        "collective-aligned gaps | host stalls |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in f.ranks:
        timed = f"{r.step_s * 1000:.2f}" if r.step_s is not None else "-"
        out.append(
            f"| {r.rank} | {timed} | {_ms(r.step_us)} | {_ms(r.compute_us)} | {_ms(r.comm_us)} | "
            f"{_ms(r.exposed_comm_us)} ({r.exposed_share:.0%}) | {_ms(r.collective_gap_us)} | "
            f"{_ms(r.host_stall_us)} |"
        )
    out += ["", "## Collectives (mean per step and rank)", ""]
    if f.collectives:
        out += [
            "| collective | calls/step | time (ms) | share of step | exposed (ms) | overlapped |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for c in f.collectives:
            mark = " (dominant)" if c is f.dominant else ""
            out.append(
                f"| {c.kind}{mark} | {c.calls_per_step:.1f} | {_ms(c.time_us)} | "
                f"{c.share_of_step:.0%} | {_ms(c.exposed_us)} | {c.overlap_share:.0%} |"
            )
    else:
        out.append("No collective ran in the profiled steps.")
    out += ["", f"## Stragglers (own compute > median by more than {t['straggler_share']:.0%})", ""]
    if f.stragglers:
        for s in f.stragglers:
            out.append(
                f"- rank {s.rank}: {_ms(s.compute_us)} ms compute vs median "
                f"{_ms(s.median_compute_us)} ms (+{s.excess_share:.0%})"
            )
    else:
        out.append("None.")
    out += ["", f"## Host stalls (gaps >= {t['min_gap_us']:.0f} µs with no compute and no collective)", ""]
    if f.host_stalls:
        for h in f.host_stalls:
            out.append(f"- {h.where}: {_ms(h.total_us_per_step)} ms/step over {h.count} gap(s)")
    else:
        out.append("None.")
    if f.suggestions:
        out += ["", "## Plan entries (advisory: launcher/wrapper settings, not source edits)", "",
                "```yaml", yaml.safe_dump(f.suggestions, sort_keys=False, width=100).rstrip(), "```"]
    if f.notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in f.notes]
    if f.artifacts:
        out += ["", "Files: " + ", ".join(f"`{a}`" for a in f.artifacts)]
    return "\n".join(out) + "\n"
