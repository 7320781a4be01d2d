"""validate's list of the plan's compiles the harness's steps never called
(:func:`rewriter.validate.unreached.never_called`): only the actions that leave code compiled. An
``own_call: {disable: true}`` turns the program's compile off, so Dynamo converting no frame is what
it is expected to do, not a compile that was never called."""

from __future__ import annotations

from rewriter.plan import load_plan
from rewriter.validate.unreached import Unreached, never_called

MODEL = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def forward(self, x):
        return x * 2

    def unused(self, x):
        return x + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.compile(Block())

    def forward(self, x):
        return self.block(x)
"""

OFF = "  - action: compile\n    target: model.py::Net.__init__\n    own_call: {disable: true}\n"
UNUSED = "  - action: compile\n    target: model.py::Block.unused\n    options: {backend: eager}\n"
#: the plan child's Dynamo was asked to convert no frame in its cold phase
NO_FRAME = {"compile": {"frames_total": 0, "unique_graphs": 0}}


def _never_called(tmp_path, actions: str) -> list[Unreached]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (tmp_path / "plan.yaml").write_text("version: 1\nactions:\n" + actions)
    return never_called(load_plan(tmp_path / "plan.yaml"), NO_FRAME, src)


def test_a_plan_that_only_turns_the_program_compile_off_is_not_never_called(tmp_path):
    assert _never_called(tmp_path, OFF) == []


def test_beside_a_compile_never_called_only_that_compile_is_listed(tmp_path):
    assert _never_called(tmp_path, OFF + UNUSED) == [Unreached(6, "model.py::Block.unused", "model.py:9")]


def test_an_own_call_edit_that_keeps_the_compile_on_is_listed_at_its_call(tmp_path):
    on = OFF.replace("{disable: true}", "{fullgraph: true}")
    assert _never_called(tmp_path, on) == [Unreached(3, "model.py::Net.__init__", "model.py:16")]
