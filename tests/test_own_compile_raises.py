"""A program whose own torch.compile raises (a fullgraph compile over a branch on a tensor's value)
stopped diagnose at setup with Dynamo's error alone, as if the model were broken. The step is now
run again with compilation off, and the error says the model runs and its compile does not, with
what to try."""

from __future__ import annotations

import pytest
import torch

from rewriter.diagnose.session import HarnessFailure, Session
from rewriter.harness import load_harness
from rewriter.plan import Harness

MODEL = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc(x)
        if x.abs().max().item() > 1e4:
            x = x / 2
        return x


def build_model():
    torch.manual_seed(0)
    return torch.compile(Net(), backend="eager", fullgraph=True)


def broken_model():
    return torch.nn.Linear(3, 3)


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
"""


def _session(tmp_path, model):
    (tmp_path / "harness.py").write_text(MODEL)
    spec = Harness.model_validate({"file": "harness.py", "model": model, "shapes": [{"batch": 2}], "device": "cpu"})
    return Session(load_harness(spec, tmp_path))


@pytest.mark.skipif(not hasattr(torch.compiler, "set_stance"), reason="torch < 2.6")
def test_a_step_the_programs_own_compile_breaks_says_so(tmp_path):
    s = _session(tmp_path, "build_model")
    s.rung = "setup"
    model, inputs = s.build()
    with pytest.raises(HarnessFailure) as info:
        s.run_as_the_program_runs(s.step_fn(model, inputs))
    msg = info.value.message
    assert msg.startswith("raised ") and "the program's own torch.compile raised it" in msg, msg
    assert "fullgraph=False on that compile" in msg, msg
    torch._dynamo.reset()


def test_a_model_that_raises_eagerly_too_is_not_blamed_on_a_compile(tmp_path):
    s = _session(tmp_path, "broken_model")
    s.rung = "setup"
    model, inputs = s.build()
    with pytest.raises(HarnessFailure) as info:
        s.run_as_the_program_runs(s.step_fn(model, inputs))
    assert "own torch.compile" not in info.value.message
