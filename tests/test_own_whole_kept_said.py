"""A script the harness does not run compiles the whole model itself (``model =
torch.compile(model)``) and its stand-in 'whole' wins the search: the plan has no actions (the
program's own call is kept as it is). The terminal summary and report.md say so, next to the
candidates table whose 'chosen' row is 'whole'; without it the two read as a contradiction."""

from __future__ import annotations

import json
from pathlib import Path

from rewriter.cli import main

MODEL = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
'''

SERVE = '''import torch

from model import Net


def main():
    model = torch.compile(Net(), backend="eager")
    with torch.no_grad():
        model(torch.randn(4, 16))


if __name__ == "__main__":
    main()
'''

HARNESS = '''import torch

from model import Net


def build_model():
    return Net()


def make_inputs(batch: int = 4):
    return (torch.randn(batch, 16),)
'''


def test_the_kept_own_compile_is_said_where_the_empty_plan_is(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("model.py", MODEL), ("serve.py", SERVE), ("harness.py", HARNESS)):
        (src / name).write_text(text)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60"]) == 0
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    assert search["measurement"]["chosen"] == "whole", search["measurement"]["decision"]
    assert "actions: []" in plan.read_text()
    said = "serve.py:7: torch.compile(Net(), backend=\"eager\")) is in serve.py, which the harness does not run"
    md = (plan.parent / "stackpart-diagnose" / "report.md").read_text()
    assert said in md and "it is kept as it is" in md, md
    err = capsys.readouterr().err
    assert "the program's own whole-model compile (serve.py:7" in err, err
