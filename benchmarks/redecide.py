"""Re-run the search's decision (``rewriter.diagnose.decide``) on candidates measured earlier.

The decision is a function of the measured rows (step ms, compile seconds per start, whether the
candidate failed), the deployment (runs, restarts) and the measured noise band; with the band
measured between two processes per plan it no longer needs the raw rounds (the paired interval of
the rounds is reported, not decided on). So a change of the decision rule can be checked against
every H200 run kept under ``benchmarks/results/`` without a GPU:

    python benchmarks/redecide.py benchmarks/results/h200-run29/diagnose_hf.json benchmarks/results/h200-run30/diagnose_hf.json

or on diagnose's own reports (``benchmarks/results/h200-run*/reports/*/report.json``, the zoo's),
prints, per diagnose run in those files, the plan that run chose and the plan today's rule
chooses from the same figures (Markdown table on stdout). A run whose plans were timed in one
process each (no measured band) is marked: there the rounds' interval took part in the decision
and is not kept in the JSON, so the re-decision drops it and may differ for that reason alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewriter.diagnose.decide import decide, noise_bands  # noqa: E402


def rows_of(search: dict) -> tuple[dict[str, dict], list[str]]:
    """The decision's input rows from one ``search`` entry of diagnose_hf.json, in its order (with
    the host-core-contended step where the search timed it, so today's rule weighs both)."""
    rows, order = {}, []
    for c in search.get("candidates", []):
        name = c["candidate"]
        order.append(name)
        failed = c.get("numerics") not in ("ok", "reference") or str(c.get("status", "")).startswith("failed")
        rows[name] = {"step_ms": c.get("step_ms"), "compile_s_per_start": c.get("compile_s_per_start"),
                      "problems": [c.get("status")] if failed else []}
        if c.get("contended_step_ms"):  # runs from 39 on (run 38's digest left it out)
            rows[name]["contended_step_ms"] = c["contended_step_ms"]
    if "as-is" in order:  # the program as it is is the last resort of the tie-break, as in the search
        order.remove("as-is")
        order.append("as-is")
    return rows, order


def _payload(path: Path) -> dict:
    """``path`` as a diagnose_hf.json payload: that file as it is, or one diagnose's ``report.json``
    (its search rung's measurement, its amortization; the model named by the report's folder, the
    run by the folder above ``reports/``) as a payload of one row."""
    payload = json.loads(path.read_text())
    if "rungs" not in payload:
        return payload
    search = next((r.get("measurement") or {} for r in payload["rungs"] if r.get("name") == "search"), {})
    amort = payload.get("amortization") or {}
    return {"runs": amort.get("runs", 1_000_000), "restarts": amort.get("restarts", 1),
            "rows": [{"model": path.parent.name, "run": path.parents[2].name if len(path.parents) > 2 else 0,
                      "search": search}]}


def redecide(path: Path) -> list[dict]:
    """One line per diagnose run in ``path`` (a diagnose_hf.json, or a diagnose report's
    report.json): the model, the run, the plan it chose, today's choice from the same figures, the
    band and whether it was measured."""
    payload = _payload(path)
    out = []
    for k, row in enumerate(payload.get("rows", [])):
        search = row.get("search") or {}
        if not any(c.get("step_ms") is not None for c in search.get("candidates", [])):
            continue  # the run failed or timed nothing: no decision to re-run
        rows, order = rows_of(search)
        noise = search.get("noise")
        c = decide(rows, order, [], int(payload.get("runs", 1_000_000)), int(payload.get("restarts", 30)), True, noise)
        out.append({"file": str(path), "model": row.get("model"), "run": row.get("run", k), "then": search.get("chosen"),
                    "now": c.chosen, "band": f"{noise_bands(noise)[0]:.1%} measured" if noise else "assumed (one process per plan)",
                    "steps": ", ".join(f"{n} {rows[n]['step_ms']:.2f}" for n in order if rows[n]["step_ms"] is not None)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="diagnose_hf.json files, or diagnose's report.json files")
    args = ap.parse_args(argv)
    print("| file | model | run | chosen then | chosen now | band | step ms |")
    print("|---|---|---|---|---|---|---|")
    for path in args.files:
        for r in redecide(path):
            print(f"| {Path(r['file']).parent.name}/{Path(r['file']).name} | {r['model']} | {r['run']} | {r['then']} | "
                  f"**{r['now']}** | {r['band']} | {r['steps']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
