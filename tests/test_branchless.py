"""The branchless action end to end: a program that compiles its model itself, with a Python `if`
on a tensor's value in the compiled forward (a graph break no config knob fixes). ``diagnose``
(backend eager: the program's own) and ``rewrite --apply`` run, then the user's script runs on a
pristine copy of the tree and on the rewritten one (one process: tests/programs.py): the plan holds the ``branchless`` action at the ``if``'s line, the outputs are
the same, and Dynamo's graph-break log shows fewer breaks (torch 2.13 counts a data-dependent
jump in that log, not in ``counters["graph_break"]``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from programs import last_json, run_programs  # tests/programs.py: several programs in one process

from rewriter.cli import main
from rewriter.diagnose.evidence import Evidence
from rewriter.plan import load_plan

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "own_branch"

#: Runs the user's script as ``python serve.py OUT`` would, counting the "Graph break" records of
#: torch's graph_breaks log (torch._logging), and prints ``{"unique_graphs", "graph_breaks"}``.
_COUNTING = """
import json, logging, runpy, sys
import torch._logging
from torch._dynamo.utils import counters
seen = []
class Count(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith(("Graph break in user code", "Graph break: ")):
            seen.append(record.getMessage())
torch._logging.set_logs(graph_breaks=True)
handler = Count()
for name in ("torch.__graph_breaks", "torch._dynamo", "torch._dynamo.convert_frame"):
    logging.getLogger(name).addHandler(handler)
sys.path.insert(0, ".")
sys.argv = ["serve.py", sys.argv[1]]
runpy.run_path("serve.py", run_name="__main__")
print(json.dumps({"unique_graphs": counters["stats"]["unique_graphs"], "graph_breaks": len(seen)}))
"""


def _run_both(pristine: Path, src: Path, tmp_path: Path) -> tuple[dict, dict]:
    """:data:`_COUNTING` in the tree before the rewrite, then in the rewritten one, one after the
    other in one process (tests/programs.py: each tree's modules imported afresh)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    results = run_programs([{"code": _COUNTING, "cwd": pristine, "args": [tmp_path / "before.pt"]},
                            {"code": _COUNTING, "cwd": src, "args": [tmp_path / "after.pt"]}], env=env, timeout=120)
    return last_json(results[0], "serve.py before the rewrite"), last_json(results[1], "serve.py after it")


def test_a_data_dependent_if_in_the_programs_own_compile_becomes_torch_where(tmp_path):
    import torch

    src = tmp_path / "src"
    shutil.copytree(CASE, src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu",
                 "--shape", "batch_size=4", "--budget", "60"]) == 0
    actions = [a for a in load_plan(plan).plan.actions if a.action == "branchless"]
    line = next(i for i, text in enumerate((src / "model.py").read_text().splitlines(), 1) if "if h.mean() > 0" in text)
    assert [(a.target, a.line) for a in actions] == [("model.py::MeanGate.forward", line)]
    # unsafe: written after the validation diagnose ran for this plan passed (no --unsafe)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    code = (src / "model.py").read_text()
    assert "if h.mean() > 0" not in code and "torch.where(cond, torch.relu(h), h.tanh())" in code
    before, after = _run_both(tmp_path / "pristine", src, tmp_path)
    assert before["graph_breaks"] >= 1, before  # the fixture breaks to begin with
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert after["graph_breaks"] < before["graph_breaks"], (before, after)
    assert after["unique_graphs"] >= 1, after  # the program's own compile is still live


_MODEL = '''import torch


class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum() < 0:
            x = -x
        if x.mean() > 1:
            return x / 2
        return x
'''


def test_the_search_proposes_only_an_if_the_action_accepts(tmp_path):
    from rewriter.diagnose.kinds.branchless import branch_action

    (tmp_path / "model.py").write_text(_MODEL)
    action = branch_action(tmp_path, "model.py", 6, "why")
    assert (action.action, action.target, action.line) == ("branchless", "model.py::Gate.forward", 6)
    assert not action.safe  # written only with --unsafe or after a passing validation
    refused = branch_action(tmp_path, "model.py", 8, "why")
    assert refused == "model.py:8: the if body holds a return; expected only `name = expr` assignments"
    assert branch_action(tmp_path, "model.py", 7, "why").startswith("model.py:7: no `if` statement")


def test_a_break_that_is_not_a_branch_gets_no_twin():
    from rewriter.diagnose.kinds.branchless import BRANCH_RE

    assert BRANCH_RE.search("attempted to jump with TensorVariable()")
    assert BRANCH_RE.search("Data-dependent branching Explanation: Detected data-dependent branching")
    assert not BRANCH_RE.search("Unsupported Tensor.item() call with capture_scalar_outputs=False")
    assert not BRANCH_RE.search("Dynamic shape operator aten.nonzero.default")


def test_a_twin_that_removed_no_break_is_pruned_after_measurement():
    from types import SimpleNamespace

    from rewriter.diagnose.kinds.branchless import judge

    ctx = SimpleNamespace(evidence=Evidence(branch_twins={"as-is+branchless": "as-is", "whole+branchless": "whole"}))
    rows = {
        "as-is": {"compile": {"graph_breaks": 0, "graph_break_sites": ["model.py:17"], "unique_graphs": 3}},
        "as-is+branchless": {"compile": {"graph_breaks": 0, "graph_break_sites": [], "unique_graphs": 1}},
        "whole": {"compile": {"graph_breaks": 1, "unique_graphs": 2}},
        "whole+branchless": {"compile": {"graph_breaks": 1, "unique_graphs": 2}},
    }
    lines = judge(ctx, rows)
    assert "skipped" not in rows["as-is+branchless"]  # fewer breaks and graphs: kept for the decision
    assert rows["whole+branchless"]["skipped"].startswith("pruned after measurement: torch.where removed no graph break")
    assert [line.split(":", 1)[0] for line in lines] == ["whole+branchless"]


def test_the_ifs_comments_are_kept_above_the_selections(tmp_path):
    """The rewrite dropped every comment of the if: its line's, its branches' and their ends."""
    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    (tmp_path / "model.py").write_text(
        "import torch\n\n\n"
        "def f(x, y):\n"
        "    # keep the sign (issue #12)\n"
        "    if x.sum() < 0:  # IMPORTANT: negative batches\n"
        "        # flip it\n"
        "        y = -y  # flipped\n"
        "    else:\n"
        "        y = y * 2  # doubled\n"
        "    return y\n")
    plan = parse_plan("version: 1\nactions:\n  - action: branchless\n    target: model.py::f\n    line: 6\n", "plan.yaml")
    [change] = plan_rewrite(plan, tmp_path, unsafe=True).changes
    assert change.new.decode().splitlines()[4:11] == [
        "    # keep the sign (issue #12)",
        "    # IMPORTANT: negative batches",
        "    # flip it",
        "    # flipped",
        "    # doubled",
        "    y = torch.where(x.sum() < 0, -y, y * 2)",
        "    return y"], change.new.decode()
