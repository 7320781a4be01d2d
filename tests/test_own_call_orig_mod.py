"""``own_call: {disable: true}`` on ``model = torch.compile(model)`` where the program reads
``model._orig_mod``: with ``disable=True`` torch.compile returns the module itself, which has no
``_orig_mod``, so the rewritten program would raise ``AttributeError``. The rewrite refuses the
edit at that read (as ``regional`` does), and diagnose's reading of the call
(:func:`rewriter.diagnose.own_compile.own_compiles`) refuses the key, so the search proposes no
``as-is+no-compile`` for it and says why.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rewriter.errors import StackpartError

TRAIN = """\
import torch
from model import Net


def build():
    model = torch.compile(Net())
    model(torch.randn(3, 4))
{read}    return model
"""

SAVE = "    torch.save(model._orig_mod.state_dict(), 'ckpt.pt')\n"


def test_disable_true_returns_the_module_itself_which_has_no_orig_mod():
    """What the refusal relies on (CPU torch): the wrapper holds the module as ``_orig_mod``; with
    ``disable=True`` torch.compile returns the module, where reading it raises."""
    import torch

    m = torch.nn.Linear(2, 2)
    assert torch.compile(m, backend="eager")._orig_mod is m
    assert torch.compile(m, disable=True) is m
    with pytest.raises(AttributeError, match="_orig_mod"):
        torch.compile(m, disable=True)._orig_mod  # noqa: B018 - the read is the point
    assert getattr(torch.compile(m, disable=True), "_orig_mod", m) is m  # the way through, either way


@pytest.mark.parametrize("read, line", [
    (SAVE, 8),
    ("    raw = model._orig_mod\n", 8),
    ("    sd = model._orig_mod.state_dict()\n    torch.save(sd, 'ckpt.pt')\n", 8),
])
def test_disable_true_on_a_call_whose_orig_mod_the_function_reads_is_refused_at_the_read(tmp_path, read, line):
    from test_own_compile_reading import _NET, _rewrite

    (tmp_path / "model.py").write_text(_NET)
    body = TRAIN.format(read=read)
    with pytest.raises(StackpartError) as err:
        _rewrite(tmp_path, body, "{disable: true}", "whole")
    msg = str(err.value)
    assert msg.startswith(f"plan.yaml:3: actions[0] (compile train.py::build): train.py:{line}: own_call: disable: true "
                          "makes torch.compile(Net()) return the module itself"), msg
    assert "reads model._orig_mod on this line" in msg and "raise AttributeError" in msg, msg
    assert 'getattr(model, "_orig_mod", model)' in msg and "drop disable: true" in msg, msg


@pytest.mark.parametrize("body, own_call", [
    (TRAIN.format(read="    raw = getattr(model, '_orig_mod', model)\n"), "{disable: true}"),  # the way through
    (TRAIN.format(read=""), "{disable: true}"),  # no read
    (TRAIN.format(read=SAVE).replace("torch.compile(Net())", "torch.compile(Net(), disable=True)"),
     "{disable: true}"),  # already off: nothing changes
    (TRAIN.format(read=SAVE), "{fullgraph: true}"),  # still the wrapper
    (TRAIN.format(read="    other = Net()\n    raw = other._orig_mod\n"), "{disable: true}"),  # another name
])
def test_what_is_not_refused(tmp_path, body, own_call):
    from test_own_compile_reading import _NET, _rewrite

    (tmp_path / "model.py").write_text(_NET)
    new = _rewrite(tmp_path, body, own_call, "whole")
    assert new != body or "disable=True" in body


WRAPPER = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def forward(self, x):
        return x + 1


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.compile(Block())

    def forward(self, x):
        return self.block(x)

    def raw_block(self):
        return self.block._orig_mod
"""


def test_a_read_of_self_attr_orig_mod_in_another_method_is_refused_by_the_cli(tmp_path, capsys):
    """``self.block = torch.compile(Block())`` in ``__init__``, ``self.block._orig_mod`` in another
    method of the class: refused with the read's ``file:line``, exit 2, nothing written."""
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": WRAPPER},
             "  - {action: compile, target: model.py::Wrapper.__init__, strategy: region, own_call: {disable: true}}\n", 2)
    err = " ".join(capsys.readouterr().err.split())
    assert "model.py:19: own_call: disable: true makes torch.compile(Block()) return the module itself" in err, err
    assert "self.block._orig_mod" in err and 'getattr(self.block, "_orig_mod", self.block)' in err, err


def test_regional_reads_self_attr_orig_mod_in_the_class_too(tmp_path, capsys):
    from test_source_compile_forms import _rewrite

    src = WRAPPER.replace("torch.compile(Block())", "torch.compile(Net())").replace(
        "class Wrapper", "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layers = nn.ModuleList([Block()])\n\n\nclass Wrapper")
    _rewrite(tmp_path, {"model.py": src},
             "  - {action: compile, target: model.py::Wrapper.__init__, strategy: region, own_call: {regional: layers}}\n", 2)
    err = " ".join(capsys.readouterr().err.split())
    assert "own_call: regional: the function reads self.block._orig_mod" in err, err


def test_the_search_does_not_propose_the_off_candidate_and_says_why(tmp_path):
    """diagnose probes ``disable`` with the rewrite's own check: the key is refused (with the read's
    ``file:line``), the other keys stand, and ``as-is+no-compile`` is pruned with that reason."""
    from test_own_compile_off import _ctx

    from rewriter.diagnose.candidates import OwnScope
    from rewriter.diagnose.own_candidates import NO_COMPILE, compile_off
    from rewriter.diagnose.own_compile import own_compiles
    from test_own_compile_reading import _NET

    (tmp_path / "model.py").write_text(_NET)
    (tmp_path / "train.py").write_text(TRAIN.format(read=SAVE) + "\n\nbuild()\n")
    [own] = [o for o in own_compiles(tmp_path) if o.where.startswith("train.py")]
    assert own.site == "train.py::build" and own.covers == ("class", "Net"), own
    why = own.can("disable")
    assert why and why.startswith("train.py:8: disable: true makes torch.compile(Net())"), own.refused
    assert own.can("fullgraph") is None and own.can("mode") is None, own.refused
    ctx, _ = _ctx(tmp_path / "x", "inductor")
    ctx.evidence = SimpleNamespace(own_compiled_modules=[{"path": "<model>"}])  # the harness runs it
    pruned: list[str] = []
    assert compile_off(ctx, OwnScope(whole=[own]), pruned) == []
    assert pruned == [f"{NO_COMPILE}: {own.text}: {why}"], pruned
    assert "_orig_mod" in pruned[0] and "AttributeError" in pruned[0]


def test_without_the_read_the_search_proposes_the_off_candidate(tmp_path):
    from test_own_compile_off import _ctx

    from rewriter.diagnose.candidates import OwnScope
    from rewriter.diagnose.own_candidates import NO_COMPILE, compile_off
    from rewriter.diagnose.own_compile import own_compiles
    from test_own_compile_reading import _NET

    (tmp_path / "model.py").write_text(_NET)
    (tmp_path / "train.py").write_text(TRAIN.format(read="    raw = getattr(model, '_orig_mod', model)\n") + "\n\nbuild()\n")
    [own] = [o for o in own_compiles(tmp_path) if o.where.startswith("train.py")]
    assert own.can("disable") is None, own.refused
    ctx, _ = _ctx(tmp_path / "x", "inductor")
    ctx.evidence = SimpleNamespace(own_compiled_modules=[{"path": "<model>"}])
    pruned: list[str] = []
    [(name, decision)] = compile_off(ctx, OwnScope(whole=[own]), pruned)
    assert name == NO_COMPILE and pruned == [] and decision.plan.actions[0].own_call.edits() == {"disable": True}
