"""SP103 agrees with diagnose: where diagnose measured the advice the finding gives
(``capture_scalar_outputs`` for ``.item()``) at that graph break and pruned it ("the config kept
no graph break in the graph"), the finding is a note that says so and the hook passes; any other
report (no break at that line, a break the knob does not capture, a knob twin chosen or not
pruned) keeps it failing.

The report is written with diagnose's own writers (:func:`rewriter.diagnose.report.to_json`,
:meth:`rewriter.diagnose.search.SearchOutcome.table`), so a change of its format shows here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewriter.check.command import check_command, run_check
from rewriter.diagnose.candidates import Candidate
from rewriter.diagnose.decide import Choice
from rewriter.diagnose.report import plan_yaml, to_json
from rewriter.diagnose.rung import Finding, RungResult
from rewriter.diagnose.search import SearchOutcome
from rewriter.plan import CompileAction, DynamoConfigAction, DynamoSettings, Plan

MODEL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if x.sum().item() > 0:
            h = h * 2
        return h
"""

RUN = """\
import torch

from model import Net


def main():
    model = torch.compile(Net())
    return model(torch.ones(2, 8))
"""

#: Dynamo's reason for the break, as the graph_breaks rung records it (torch 2.13).
ITEM = ("Unsupported Tensor.item() call with capture_scalar_outputs=False Explanation: Dynamo does not support tracing "
        "`Tensor.item()` with config.capture_scalar_outputs=False.")
JUDGED = ("pruned after measurement: the config kept no graph break in the graph (1 break(s) seen, 2 graph(s), vs 1 and 2 "
          "for 'as-is' without it); a process-wide knob that changes nothing is not planned")
TWIN = "as-is+capture_scalar_outputs"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _diagnosed(root: Path, twin_status: str = JUDGED, line: int = 12, reason: str = ITEM) -> None:
    """plan.yaml and stackpart-diagnose/report.json as diagnose writes them after a graph_breaks
    rung that found ``reason`` at model.py:``line`` and a search that timed the program as it is
    and its ``capture_scalar_outputs`` twin, whose status is ``twin_status``."""
    from rewriter.plan import parse_plan

    knob = DynamoConfigAction(action="dynamo_config", target="model.py::Net.__init__",
                              settings=DynamoSettings(capture_scalar_outputs=True), why="graph breaks")
    own = CompileAction(action="compile", target="run.py::main", strategy="whole", own_call={"mode": "default"}, why="x")
    cands = [Candidate("as-is", Plan(version=1)), Candidate(TWIN, Plan(version=1, actions=[knob, own]))]
    out = SearchOutcome(cands, own_setup=["run.py:7: torch.compile(Net())"], backend="inductor")
    out.rows = {"as-is": {"step_ms": 2.0}, TWIN: {"step_ms": 2.1}}
    chosen = TWIN if twin_status == "chosen" else "as-is"
    out.choice = Choice(chosen, f"{chosen!r} chosen", {"as-is": "chosen" if chosen == "as-is" else "slower", TWIN: twin_status})
    search = RungResult("search", "Which complete plan wins, measured as a whole?")
    search.measurement = {"candidates": out.table(), "own_compile_setup": out.own_setup, "gain_measured": True,
                          "backend": "inductor", "chosen": chosen, "decision": out.choice.text}
    breaks = RungResult("graph_breaks", "Graph breaks", measurement={"graph_break_count": 1},
                        findings=[Finding("graph_break", reason, "model.py", line, "Net.forward")])
    plan = Plan(version=1)
    text = plan_yaml(plan)
    parse_plan(text, "plan.yaml")
    (root / "plan.yaml").write_text(text)
    report = root / "stackpart-diagnose" / "report.json"
    report.parent.mkdir(exist_ok=True)
    report.write_text(json.dumps(to_json({"src": str(root)}, [breaks, search], plan, [], None), default=str))


def _sp103(outcome):
    return [f for f in outcome.findings if f.code == "SP103"]


def test_without_a_measurement_sp103_fails_the_hook(tree):
    assert check_command(["model.py", "run.py"], jobs=1) == 1
    [f] = _sp103(run_check(["model.py", "run.py"], jobs=1)[0])
    assert f.severity == "error" and f.line == 12 and "capture_scalar_outputs = True" in f.message


def test_the_knob_measured_and_pruned_at_that_break_is_a_note_that_says_so(tree, capsys):
    _diagnosed(tree)
    assert check_command(["model.py", "run.py"], jobs=1) == 0
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if "SP103" in x)
    assert line.startswith("model.py:12:12: SP103 note: .item() inside compiled `forward`"), line
    assert ("Kept by measurement, so not failing: diagnose measured capture_scalar_outputs for the graph break at "
            f"model.py:12 and pruned it ({TWIN!r}: the config kept no graph break in the graph") in line, line
    assert "(stackpart-diagnose/report.json); run diagnose again when the model changes" in line, line
    assert "0 finding(s), 1 kept by measurement (not failing)" in err
    [f] = _sp103(run_check(["model.py", "run.py"], jobs=1)[0])
    assert f.as_dict()["severity"] == "note"


@pytest.mark.parametrize("case", ["twin-chosen", "twin-not-pruned", "twin-failed", "other-line", "jump-not-captured"])
def test_what_is_no_such_evidence_keeps_failing(tree, capsys, case):
    if case == "twin-chosen":
        _diagnosed(tree, twin_status="chosen")
    elif case == "twin-not-pruned":  # it removed a break; it lost on speed
        _diagnosed(tree, twin_status="later in order: slower than 'as-is'")
    elif case == "twin-failed":
        _diagnosed(tree, twin_status="failed: timing: the child exited 1")
    elif case == "other-line":  # the code moved since diagnose ran
        _diagnosed(tree, line=13)
    else:  # a break the knob does not keep in the graph: the report measured nothing about it
        _diagnosed(tree, reason="Data-dependent branching: generic_jump TensorVariable()")
    assert check_command(["model.py", "run.py"], jobs=1) == 1
    out = capsys.readouterr().out
    assert "SP103 note" not in out and "Kept by measurement" not in out, out
