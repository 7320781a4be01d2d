"""Without a measured gain (CPU, ``--backend eager``) the fewest recompiles plus graph breaks over
the harness's shapes decide where the program as it is recompiles (docs/design.md, "The search";
docs/decisions.md, "Without a measured gain, the fewest recompiles and graph breaks decide"): a
program that compiles ``model.forward`` with ``dynamic=False`` and serves ten sequence lengths hits
the recompile limit; diagnose, given three of them, plans ``dynamic=True`` on that call (0
recompiles, no graph break), not its regional form (2, as many as the program), and the rewritten
program recompiles less when it runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from programs import before_after  # tests/programs.py: the script before and after, in one process

from rewriter.cli import main
from rewriter.plan import load_plan

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "own_forward_static"


def test_a_static_forward_compile_that_recompiles_per_length_is_planned_dynamic(tmp_path):
    import torch

    src = tmp_path / "src"
    shutil.copytree(CASE, src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--backend", "eager",
                 "--budget", "60", "--shape", "seq=8", "--shape", "seq=12", "--shape", "seq=16"]) == 0
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    m = search["measurement"]
    rows = {c["candidate"]: c for c in m["candidates"]}
    chosen, asis = rows[m["chosen"]], rows["as-is"]
    assert asis["recompiles"] == 2 and chosen["recompiles"] == 0, (m["chosen"], chosen, asis)
    assert asis["graph_breaks"] == 0 == chosen["graph_breaks"], (chosen, asis)
    assert "as-is+regional" in rows and rows["as-is+regional"]["recompiles"] >= 1, rows.get("as-is+regional")
    assert m["chosen"] == "as-is+dynamic", m["decision"]
    regional = rows["as-is+regional"]
    assert ("the program as it is recompiles 2 time(s) and breaks the graph 0 time(s) over the harness's shapes (2 in all), "
            "so the fewest recompiles + graph breaks decide (recompiles + graph breaks): 'as-is+dynamic' 0 + 0 = 0, "
            f"'as-is+regional' {regional['recompiles']} + {regional['graph_breaks']} = "
            f"{regional['recompiles'] + regional['graph_breaks']}") in m["decision"], m["decision"]
    [edit] = load_plan(plan).plan.actions
    assert (edit.target, edit.own_call.edits()) == ("serve.py::build", {"dynamic": True}), edit
    assert "fewest recompiles + graph breaks over the harness's shapes: 0 + 0 = 0 vs 2 + 0 = 2 as is" in edit.why, edit.why
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    assert "torch.compile(model.forward, backend=\"eager\", dynamic=True)" in (src / "serve.py").read_text()
    before, after = before_after(pristine, src, "serve.py", tmp_path)
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    # ten lengths: one compile per length up to the recompile limit (8) as it was, one dynamic graph after
    assert before["frames_compiled"] == torch._dynamo.config.recompile_limit, before
    assert after["frames_compiled"] < before["frames_compiled"] and 0 < after["unique_graphs"] < before["unique_graphs"], \
        (before, after)
