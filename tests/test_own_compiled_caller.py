"""A compiled function of the program's compiles what it calls: ``train_step = torch.compile(
train_step)`` where ``train_step`` calls ``model(x)`` compiles the whole model, so the search
proposes no compile of the model, of its blocks or of a class the function calls (a second compile
of code the program compiles). Static reading and the search's composition only: no diagnose run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rewriter.diagnose.candidates import OwnScope, conflict
from rewriter.diagnose.own_compile import own_compiles
from rewriter.plan import CompileAction, MarkDynamicAction

MODEL = """\
import torch.nn as nn


class Head(nn.Module):
    def forward(self, x):
        return x


class MLP(nn.Module):
    def forward(self, x):
        return x
"""

TRAIN = """\
import torch
from model import MLP, Head

model = MLP()
head = Head()


def loss_of(x):
    return head(x).sum()


def train_step(x):
    return model(x).sum()


def head_step(x):
    return loss_of(x)


def plain(x):
    return x + 1


train_step = torch.compile(train_step)
head_step = torch.compile(head_step)
plain = torch.compile(plain)
"""


class MLP:
    """Stands for the harness's model: the scope reads only its class name."""


def _scope(tmp_path: Path, train: str = TRAIN) -> OwnScope:
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(train)
    evidence = SimpleNamespace(blocks=None, own_compiled_modules=[], declared=None, profile=None)
    ctx = SimpleNamespace(reference=lambda: (MLP(), None, None), evidence=evidence, session=SimpleNamespace(src=tmp_path))
    return OwnScope.of(ctx, own_compiles(tmp_path))


def test_what_a_compiled_function_calls_is_read(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    calls = {o.covers[1]: o.calls for o in own_compiles(tmp_path)}
    assert calls["train.py::train_step"] == ("MLP",)
    assert set(calls["train.py::head_step"]) == {"train.py::loss_of", "Head"}  # through its file's helper
    assert calls["train.py::plain"] == ()


def test_a_compiled_function_that_calls_the_model_covers_the_whole_model(tmp_path):
    scope = _scope(tmp_path)
    assert [r.covers[1] for r in scope.whole] == ["train.py::train_step"]
    why = conflict(CompileAction(action="compile", target="model.py::MLP"), scope)
    assert why is not None and "the program compiles the whole model itself (train.py:24: torch.compile(train_step))" in why, why
    assert conflict(MarkDynamicAction(action="mark_dynamic", target="model.py::MLP.forward", arg="x", dim=0), scope) is not None


def test_a_class_a_compiled_function_calls_is_not_compiled_again(tmp_path):
    scope = _scope(tmp_path, TRAIN.replace("train_step = torch.compile(train_step)\n", ""))
    assert not scope.whole
    why = conflict(CompileAction(action="compile", target="model.py::Head"), scope)
    assert why is not None and "train.py::head_step itself (train.py:24: torch.compile(head_step)), which calls model.py::Head" in why, why
    assert conflict(CompileAction(action="compile", target="train.py::loss_of"), scope) is not None


def test_a_compiled_function_that_calls_nothing_of_the_model_prunes_nothing_else(tmp_path):
    scope = _scope(tmp_path, TRAIN.replace("train_step = torch.compile(train_step)\nhead_step = torch.compile(head_step)\n", ""))
    assert not scope.whole and [r.covers[1] for r in scope.functions] == ["train.py::plain"]
    assert conflict(CompileAction(action="compile", target="model.py::MLP"), scope) is None
