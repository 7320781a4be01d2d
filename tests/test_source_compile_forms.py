"""What the source does to a function outside its ``def`` that the plan's rules must read: the
program's compile written as a rebinding, ``f = torch.compile(f, ...)``, is its compile of that
function as ``@torch.compile`` is (``own_call`` edits that call; ``disable`` and a second compile
are refused or left alone as for the decorator), and a function registered with
``allow_in_graph`` is never given a compile of its own (compiled code that calls it runs it on
fake tensors, where a compiled function fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.cli import main

ALLOWED = """\
import torch
import torch.nn as nn


def scale_helper(x):
    return x * 0.5 + 1.0


{register}


def other(x):
    return x + 1


class Block(nn.Module):
    def forward(self, x):
        return other(scale_helper(x))
"""

TRAIN = """\
import torch
from model import MLP

model = MLP()


def train_step(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


train_step = torch.compile(train_step{options})

for i in range(4):
    train_step(torch.randn(8, 32), torch.randn(8))
"""


def _rewrite(tmp_path: Path, files: dict[str, str], action: str, code: int) -> Path:
    """``rewrite --apply`` of ``files`` with one action; assert the exit code (nothing written on 2)
    and return SRC."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for name, text in files.items():
        (src / name).write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + action)
    got = main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"])
    assert got == code
    if code == 2:
        assert {p.name: p.read_text() for p in src.iterdir() if p.is_file()} == files
    return src


@pytest.mark.parametrize("register, line", [
    ("torch.compiler.allow_in_graph(scale_helper)", 9),
    ("torch._dynamo.allow_in_graph(scale_helper)", 9),
    ("torch.compiler.allow_in_graph([scale_helper, other])", 9),
])
def test_a_compile_of_a_function_the_source_allows_in_graph_is_refused(tmp_path, capsys, register, line):
    source = ALLOWED.format(register=register)
    _rewrite(tmp_path, {"model.py": source}, "  - action: compile\n    target: model.py::scale_helper\n", 2)
    err = capsys.readouterr().err
    assert "plan.yaml:3:" in err and "compile model.py::scale_helper" in err, err
    assert f"registers with allow_in_graph at model.py:{line} ({register})" in err, err
    assert "Cannot access data pointer of Tensor" in err, err


def test_the_decorator_form_of_allow_in_graph_is_read_too(tmp_path, capsys):
    source = ALLOWED.format(register="").replace("def scale_helper", "@torch.compiler.allow_in_graph\ndef scale_helper")
    _rewrite(tmp_path, {"model.py": source}, "  - action: compile\n    target: model.py::scale_helper\n", 2)
    assert "registers with allow_in_graph at model.py:5 (@torch.compiler.allow_in_graph)" in capsys.readouterr().err


def test_a_compile_of_a_function_not_registered_is_written(tmp_path, capsys):
    source = ALLOWED.format(register="torch.compiler.allow_in_graph(scale_helper)")
    src = _rewrite(tmp_path, {"model.py": source}, "  - action: compile\n    target: model.py::other\n", 0)
    assert "@torch.compile\ndef other" in (src / "model.py").read_text()


MODEL = "import torch.nn as nn\n\n\nclass MLP(nn.Module):\n    def forward(self, x):\n        return x.sum(-1)\n"


def test_own_call_edits_the_rebinding_call_and_only_that_line(tmp_path, capsys):
    train = TRAIN.format(options=", fullgraph=True")
    action = "  - action: compile\n    target: train.py::train_step\n    strategy: whole\n    own_call: {mode: reduce-overhead}\n"
    src = _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, action, 0)
    after = (src / "train.py").read_text()
    assert after == train.replace("fullgraph=True)", 'fullgraph=True, mode="reduce-overhead")'), after
    # idempotent: the same plan on the rewritten tree changes nothing
    plan = tmp_path / "plan.yaml"
    assert main(["rewrite", "--plan", str(plan), str(src), "--check"]) == 0


def test_own_call_on_a_rebinding_with_options_is_refused_at_its_line(tmp_path, capsys):
    train = TRAIN.format(options=', options={"epilogue_fusion": True}')
    action = "  - action: compile\n    target: train.py::train_step\n    strategy: whole\n    own_call: {mode: reduce-overhead}\n"
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, action, 2)
    err = capsys.readouterr().err
    assert "plan.yaml:3:" in err and "train.py:13: own_call: the call passes options=" in err, err
    assert "found none" not in err


def test_own_call_regional_on_a_rebinding_is_refused(tmp_path, capsys):
    action = "  - action: compile\n    target: train.py::train_step\n    own_call: {regional: layers}\n"
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN.format(options="")}, action, 2)
    assert "train.py:13: own_call: regional" in capsys.readouterr().err


def test_a_compile_of_a_function_the_source_rebinds_compiled_is_left_alone(tmp_path, capsys):
    train = TRAIN.format(options="")
    src = _rewrite(tmp_path, {"model.py": MODEL, "train.py": train},
                        "  - action: compile\n    target: train.py::train_step\n", 0)
    assert (src / "train.py").read_text() == train, "a second compile was added"


def test_a_disable_of_a_function_the_source_rebinds_compiled_is_refused(tmp_path, capsys):
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN.format(options="")},
             "  - action: disable\n    target: train.py::train_step\n", 2)
    err = capsys.readouterr().err
    assert "disable of train_step, which the source compiles at train.py:13 (train_step = torch.compile(train_step))" in err, err


def test_a_class_body_rebinding_is_the_methods_compile(tmp_path, capsys):
    model = MODEL + "\n    forward = torch.compile(forward)\n"
    model = "import torch\n" + model
    action = ("  - action: compile\n    target: model.py::MLP\n    own_call: {dynamic: false}\n"
              "  - action: mark_dynamic\n    target: model.py::MLP.forward\n    arg: x\n    dim: 0\n")
    _rewrite(tmp_path, {"model.py": model}, action, 2)
    assert "MLP.forward is already compiled in the source" in capsys.readouterr().err
    src = _rewrite(tmp_path, {"model.py": model}, action.split("  - action: mark_dynamic")[0], 0)
    assert "    forward = torch.compile(forward, dynamic=False)\n" in (src / "model.py").read_text()


def test_two_rebinding_calls_of_one_file_are_both_edited(tmp_path, capsys):
    """Each own_call edit of a rebinding is written after the traversal; the first one's
    deep_replace rebuilt the tree, and the second, looking for the node it had seen, wrote nothing
    (and a second rewrite of the result then changed the file again)."""
    train = TRAIN.format(options=", fullgraph=True") + (
        "\n\ndef eval_step(x):\n    return model(x).sum()\n\n\neval_step = torch.compile(eval_step, fullgraph=True)\n")
    action = "".join(f"  - action: compile\n    target: train.py::{name}\n    strategy: whole\n    own_call: {{fullgraph: false}}\n"
                     for name in ("train_step", "eval_step"))
    src = _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, action, 0)
    after = (src / "train.py").read_text()
    assert after == train.replace(", fullgraph=True)", ")"), after
    assert main(["rewrite", "--plan", str(tmp_path / "plan.yaml"), str(src), "--check"]) == 0


def test_a_compile_of_a_function_a_rebound_compiled_function_calls_is_refused(tmp_path, capsys):
    """The source compiles ``train_step`` by rebinding it; a plan's compile of ``loss_of``, which
    ``train_step`` calls, would compile that code a second time: refused at the plan's line, naming
    the source's compile and the ``own_call`` edit of it."""
    train = TRAIN.format(options="").replace(
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n", "    loss = loss_of(x, y)\n").replace(
        "def train_step", "def loss_of(x, y):\n    return torch.nn.functional.mse_loss(model(x), y)\n\n\ndef train_step")
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, "  - action: compile\n    target: train.py::loss_of\n", 2)
    err = capsys.readouterr().err
    assert "plan.yaml:3:" in err, err
    assert ("compile of loss_of, which train_step calls, and the source compiles train_step at train.py:17 "
            "(train_step = torch.compile(train_step))") in err, err
    assert "target train.py::train_step, own_call:" in err, err


#: ``f``, which calls ``g``, compiled by the source in each spelling of torch.compile.
CALLS = "import torch\n\n\ndef g(x):\n    return x * 2\n\n\n{decorator}def f(x):\n    return g(x) + 1\n{rebinding}"
SPELLINGS = {
    "decorator": ("@torch.compile(fullgraph={full})\n", ""),
    "rebinding": ("", "\n\nf = torch.compile(f, fullgraph={full})\n"),
    "optimize decorator": ('@torch._dynamo.optimize("eager", nopython={full})\n', ""),
    "optimize rebinding": ("", '\n\nf = torch._dynamo.optimize("eager", nopython={full})(f)\n'),
}


@pytest.mark.parametrize("decorator, rebinding", list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_a_disable_inside_a_fullgraph_source_compile_is_refused_in_every_spelling(tmp_path, capsys, decorator,
                                                                                    rebinding):
    """``torch._dynamo.optimize(..., nopython=True)`` is the source's ``fullgraph=True`` compile of
    ``f`` as ``torch.compile(fullgraph=True)`` is, as a decorator and as a rebinding: a plan's
    ``disable`` of ``g``, which ``f`` calls, makes a graph break there, which raises (refused);
    with ``nopython=False`` the break is allowed and the disable is written."""
    source = CALLS.format(decorator=decorator.format(full=True), rebinding=rebinding.format(full=True))
    _rewrite(tmp_path, {"m.py": source}, "  - action: disable\n    target: m.py::g\n", 2)
    assert "disable of g inside f, which the source compiles with fullgraph=True" in capsys.readouterr().err
    source = CALLS.format(decorator=decorator.format(full=False), rebinding=rebinding.format(full=False))
    src = _rewrite(tmp_path, {"m.py": source}, "  - action: disable\n    target: m.py::g\n", 0)
    assert "@torch.compiler.disable\ndef g(x):" in (src / "m.py").read_text()


def test_a_compile_inside_an_optimize_rebinding_is_refused_naming_it(tmp_path, capsys):
    """``f = torch._dynamo.optimize(...)(f)`` traces ``g``, which ``f`` calls: a plan's compile of
    ``g`` would compile it a second time. The refusal names the rebinding, and, since own_call does
    not edit torch._dynamo.optimize, says to edit it by hand."""
    source = CALLS.format(decorator="", rebinding='\n\nf = torch._dynamo.optimize("eager")(f)\n')
    _rewrite(tmp_path, {"m.py": source}, "  - action: compile\n    target: m.py::g\n", 2)
    err = " ".join(capsys.readouterr().err.split())
    assert ("compile of g, which f calls, and the source compiles f at m.py:12 "
            "(f = torch._dynamo.optimize(\"eager\")(f))") in err, err
    assert "edit the source's compile of f by hand (own_call does not edit torch._dynamo.optimize" in err, err


def test_optimize_traces_what_the_function_calls_and_nopython_refuses_a_disabled_call():
    """What the two refusals above rest on (CPU torch, CompileCounter): ``torch._dynamo.optimize(backend)(f)``
    traces ``g`` into ``f``'s graph (one frame, both ops), and with ``nopython=True`` a disabled ``g``
    raises instead of breaking the graph."""
    import torch
    from torch._dynamo.testing import CompileCounter

    def g(x):
        return x * 2

    def f(x):
        return g(x) + 1

    @torch.compiler.disable
    def g_eager(x):
        return x * 2

    def f_eager_g(x):
        return g_eager(x) + 1

    torch._dynamo.reset()
    counter = CompileCounter()
    torch._dynamo.optimize(counter)(f)(torch.randn(2))
    assert (counter.frame_count, counter.op_count) == (1, 2)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch._dynamo.optimize(CompileCounter(), nopython=True)(f_eager_g)(torch.randn(2))
    torch._dynamo.reset()
