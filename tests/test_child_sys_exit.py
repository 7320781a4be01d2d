"""A program whose build_model calls sys.exit (its own argparse reading the command line, say)
made validate's child say only "cold-eager exited with code 3 and wrote no result". The child
now says the program called sys.exit, with the user's line."""

from __future__ import annotations

from rewriter.cli import main

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)
"""

HARNESS = """\
import sys
import torch
from model import Net


def build_model():
    if "--lr" not in sys.argv:
        sys.exit(3)
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
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
  target: model.py::Net
"""


def test_sys_exit_in_the_harness_is_named_with_its_line_in_validate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(src), "--timeout", "120"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the program called sys.exit(3) at a/harness.py:8" in err, err  # a/: validate's original tree
    assert "exited with code" not in err, err
