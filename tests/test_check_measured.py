"""SP101 agrees with diagnose: a whole-model compile that diagnose's search measured and kept (the
program's own compile chosen over a timed regional candidate) is reported as a note that says what
was measured, and the hook passes; without such a measurement it fails as before.

The report is written with diagnose's own writers (:func:`rewriter.diagnose.report.to_json`,
:meth:`rewriter.diagnose.search.SearchOutcome.table`), so a change of its format shows here.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rewriter.check.command import check_command, run_check
from rewriter.diagnose.candidates import Candidate
from rewriter.diagnose.decide import Choice
from rewriter.diagnose.report import plan_yaml, to_json
from rewriter.diagnose.rung import RungResult
from rewriter.diagnose.search import SearchOutcome
from rewriter.plan import Plan

MODEL = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)


class GPT(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.h = nn.ModuleList([Block() for _ in range(n)])

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return x
"""

TRAIN = """\
import torch

from model import GPT


def main():
    model = GPT()
    model = torch.compile(model)
    return model(torch.ones(2, 8))
"""
COMPILE = "train.py:8: torch.compile(model)"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _diagnosed(root: Path, chosen: str, timed: dict[str, float], own: list[str], actions: list | None = None,
               gain_measured: bool = True) -> Path:
    """plan.yaml and stackpart-diagnose/report.json as diagnose writes them after a search that
    timed ``timed`` (candidate -> ms/step) and chose ``chosen``."""
    from rewriter.plan import parse_plan

    chosen_plan = Plan(version=1, actions=actions or [])
    cands = [Candidate(name, chosen_plan if name == chosen else Plan(version=1)) for name in timed]
    out = SearchOutcome(cands, own_setup=own, backend="inductor")
    out.rows = {name: {"step_ms": ms} for name, ms in timed.items()}
    status = {name: ("chosen" if name == chosen else "slower than 'as-is'") for name in timed}
    out.choice = Choice(chosen, f"{chosen!r} chosen", status)
    rung = RungResult("search", "Which complete plan wins, measured as a whole?")
    rung.measurement = {"candidates": out.table(), "own_compile_setup": own, "gain_measured": gain_measured, "backend": "inductor",
                        "chosen": chosen, "decision": out.choice.text}
    text = plan_yaml(chosen_plan)
    parse_plan(text, "plan.yaml")
    (root / "plan.yaml").write_text(text)
    report = root / "stackpart-diagnose" / "report.json"
    report.parent.mkdir(exist_ok=True)
    report.write_text(json.dumps(to_json({"src": str(root)}, [rung], chosen_plan, [], None), default=str))
    return report


def _sp101(outcome):
    return [f for f in outcome.findings if f.code == "SP101"]


def test_without_a_measurement_sp101_fails_the_hook(tree, capsys):
    assert check_command(["train.py"], jobs=1) == 1
    [f] = _sp101(run_check(["train.py"], jobs=1)[0])
    assert f.severity == "error" and f.line == 8


def test_a_whole_compile_measured_better_passes_the_hook_and_says_what_was_measured(tree, capsys):
    _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, [COMPILE])
    assert check_command(["train.py"], jobs=1) == 0
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if "SP101" in x)
    assert line.startswith("train.py:8:13: SP101 note: whole-model torch.compile of GPT")
    assert "diagnose's search chose 'as-is' (2.000 ms/step, the program's own compile kept) over 'per-block' (2.400 ms/step" in line
    assert "stackpart-diagnose/report.json" in line
    assert "0 finding(s), 1 kept by measurement (not failing)" in err
    [f] = _sp101(run_check(["train.py"], jobs=1)[0])
    assert f.as_dict()["severity"] == "note"
    # an addition that composes with the program's compile keeps it too
    _diagnosed(tree, "as-is+disable", {"as-is": 2.2, "as-is+disable": 2.0, "per-block": 2.4}, [COMPILE])
    assert check_command(["train.py"], jobs=1) == 0


@pytest.mark.parametrize("case", ["only-candidate", "regional-won", "own-regional-won", "own-off-won", "other-call",
                                  "other-file", "gain-not-measured"])
def test_what_is_no_evidence_keeps_failing(tree, capsys, case):
    from rewriter.plan import CompileAction

    if case == "only-candidate":  # nothing else was timed: "the only candidate left"
        _diagnosed(tree, "as-is", {"as-is": 2.0}, [COMPILE])
    elif case == "regional-won":
        _diagnosed(tree, "per-block", {"as-is": 2.4, "per-block": 2.0}, [COMPILE])
    elif case in ("own-regional-won", "own-off-won"):  # the search turned the program's own call regional (off): no whole compile kept
        own, strategy = ({"regional": "h"}, "region") if case == "own-regional-won" else ({"disable": True}, "whole")
        action = CompileAction(action="compile", target="train.py::main", strategy=strategy, own_call=own, why="measured")
        _diagnosed(tree, "as-is+regional", {"as-is": 2.4, "as-is+regional": 2.0}, [COMPILE], [action])
    elif case == "gain-not-measured":  # backend eager on CPU: the ladder's order chose, not the speed
        _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, [COMPILE], gain_measured=False)
    elif case == "other-call":  # the call measured is not the one committed
        _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, ["train.py:8: torch.compile(model, mode=\"max-autotune\")"])
    else:
        _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, ["other.py:8: torch.compile(model)"])
    assert check_command(["train.py"], jobs=1) == 1
    out = capsys.readouterr().out
    assert "SP101 note" not in out and "Kept by measurement" not in out
    if case.startswith("own-"):
        assert "the program's own compile kept" not in out, out
    if case == "only-candidate":  # the report is named, with why it is no evidence
        assert ("Not kept by measurement: diagnose's search timed no candidate besides 'as-is', so it measured no "
                "alternative to this compile (stackpart-diagnose/report.json)") in out


def test_a_moved_line_is_still_the_measured_call(tree, capsys):
    _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, [COMPILE])
    (tree / "train.py").write_text(TRAIN.replace("def main():\n", "def main():\n    # set up\n"))
    assert check_command(["train.py"], jobs=1) == 0


def test_an_own_call_edit_of_the_whole_compile_keeps_it_unless_its_validation_failed(tree, capsys):
    from rewriter.plan import CompileAction
    from rewriter.validate.report import JSON_NAME, default_report_dir

    action = CompileAction(action="compile", target="train.py::main", strategy="whole", own_call={"mode": "max-autotune"},
                           why="measured")
    _diagnosed(tree, "as-is+max-autotune", {"as-is": 2.4, "as-is+max-autotune": 2.0, "per-block": 2.2}, [COMPILE], [action])
    assert check_command(["train.py"], jobs=1) == 0
    report = default_report_dir(tree / "plan.yaml") / JSON_NAME
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"verdict": {"passed": False}}))
    # the as-is+ name alone still keeps the program's compile: the validation speaks for own_call only
    (tree / "stackpart-diagnose" / "report.json").write_text(
        (tree / "stackpart-diagnose" / "report.json").read_text().replace('"as-is+max-autotune"', '"own-max-autotune"'))
    assert check_command(["train.py"], jobs=1) == 1


def test_a_note_in_every_output_format(tree):
    from rewriter.check.output import render
    from rewriter.check.rules import ALL_RULES

    _diagnosed(tree, "as-is", {"as-is": 2.0, "per-block": 2.4}, [COMPILE])
    outcome, rules = run_check(["train.py"], jobs=1)
    assert [f["severity"] for f in json.loads(render(outcome, "json", rules))["findings"] if f["code"] == "SP101"] == ["note"]
    assert render(outcome, "github", rules).startswith("::notice file=train.py,line=8,")
    [result] = [r for r in json.loads(render(outcome, "sarif", ALL_RULES))["runs"][0]["results"] if r["ruleId"] == "SP101"]
    assert result["level"] == "note"
