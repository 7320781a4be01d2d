"""How far each candidate's step moves between diagnose runs, from the stored H200 results.

Reads every ``benchmarks/results/**/diagnose_hf.json`` (or the files given), keeps the searches
of one model and workload, and prints one row per run (the shared core's speed at diagnose's
calibration loop, :func:`rewriter.engine.cores.core_speeds`, read from the search's note; each
candidate's step, ms; the plan chosen), then per candidate the min, median and max over the runs
and max/min. The question it answers: is the gap between two candidates larger than what one
candidate moves from run to run on the same machine type (issue 12's "three runs choose the
same plan")?

    python benchmarks/run_drift.py                    # Llama throughput, every stored run
    python benchmarks/run_drift.py --model gpt2
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP_RE = re.compile(r"pinned to CPU core \d+, the one of median speed of \d+ at a pure-Python loop \((\d+) us a loop")


def runs(files: list[Path], model: str, workload: str) -> list[dict]:
    """One dict per stored search of ``model`` under ``workload``: ``file``, ``run``, ``loop_us``
    (None when the note is missing), ``steps`` (candidate -> ms), ``contended`` (candidate -> ms
    with the host core contended, where the search timed it), ``chosen``."""
    out = []
    for f in files:
        payload = json.loads(f.read_text())
        if payload.get("workload", "throughput") != workload:
            continue
        for k, row in enumerate(payload.get("rows", [])):
            search = row.get("search") or {}
            if row.get("model") != model or not search.get("candidates"):
                continue
            steps = {c["candidate"]: c["step_ms"] for c in search["candidates"] if c.get("step_ms") is not None}
            if len(steps) < 2:
                continue
            contended = {c["candidate"]: c["contended_step_ms"] for c in search["candidates"] if c.get("contended_step_ms")}
            loop = next((int(m.group(1)) for n in search.get("notes", []) if (m := LOOP_RE.search(n))), None)
            out.append({"file": str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f), "run": row.get("run", k),
                        "loop_us": loop, "steps": steps, "contended": contended, "chosen": search.get("chosen")})
    return out


def spread(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per candidate over ``rows``: ``min``, ``median``, ``max`` (ms), ``max_over_min`` and ``n``."""
    names = sorted({n for r in rows for n in r["steps"]})
    out = {}
    for n in names:
        xs = [r["steps"][n] for r in rows if n in r["steps"]]
        out[n] = {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "max_over_min": max(xs) / min(xs), "n": len(xs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--model", default="llama")
    ap.add_argument("--workload", default="throughput")
    a = ap.parse_args(argv)
    files = a.files or sorted((ROOT / "benchmarks" / "results").rglob("diagnose_hf.json"))
    rows = runs(files, a.model, a.workload)
    if not rows:
        print("no stored search of that model and workload")
        return 1
    names = sorted({n for r in rows for n in r["steps"]})
    print("| file | run | core loop us | " + " | ".join(names) + " | chosen |")
    print("|---|---|---|" + "---|" * len(names) + "---|")
    for r in rows:
        cells = [f"{r['steps'][n]:.2f}" if n in r["steps"] else "-" for n in names]
        print(f"| {r['file']} | {r['run']} | {r['loop_us'] or '-'} | " + " | ".join(cells) + f" | {r['chosen']} |")
    loaded = [r for r in rows if r["contended"]]
    if loaded:
        print()
        print("With the host core contended (ms):")
        print()
        print("| file | run | " + " | ".join(names) + " | chosen |")
        print("|---|---|" + "---|" * len(names) + "---|")
        for r in loaded:
            cells = [f"{r['contended'][n]:.2f}" if n in r["contended"] else "-" for n in names]
            print(f"| {r['file']} | {r['run']} | " + " | ".join(cells) + f" | {r['chosen']} |")
    print()
    print("| candidate | runs | min | median | max | max/min |")
    print("|---|---|---|---|---|---|")
    for n, s in spread(rows).items():
        print(f"| {n} | {s['n']} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} | {s['max_over_min']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
