"""validate on a plan that edits the program's own compile in a script the harness does not run
(diagnose writes such a plan, measured through stand-ins): it said "FAIL: silent fallback to
eager: Dynamo captured no graph", a failure of the plan, where the edit simply never runs in any
child. It now says it cannot measure that edit in place, and why (an error: exit 2)."""

from __future__ import annotations

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL

SERVE = """\
import torch
from model import Net


def main():
    model = Net()
    model = torch.compile(model)  # the program's own compile
    return model(torch.randn(2, 8))
"""

PLAN = """\
version: 1
harness:
  file: harness.py
  shapes:
  - batch: 2
  device: cpu
actions:
- action: compile
  target: serve.py::main
  strategy: region
  own_call:
    regional: blocks
"""


def test_an_own_call_edit_the_harness_never_runs_is_said_not_failed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(NET_MODEL)
    (src / "harness.py").write_text(NET_HARNESS)
    (src / "serve.py").write_text(SERVE)
    (tmp_path / "plan.yaml").write_text(PLAN)
    code = main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(src), "--timeout", "120", "--backend", "eager"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert f"error: {tmp_path / 'plan.yaml'}:8: the plan edits the program's own compile in serve.py, which the harness does not run" in err, err
    assert "validate: FAIL" not in err and "validate: ERROR" in err, err  # not the plan's failure
