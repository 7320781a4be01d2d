"""An ``own_call`` edit that changes whether the program's ``model = torch.compile(model)`` binds
torch.compile's wrapper changes its checkpoint keys (``_orig_mod.`` prefix): ``stackpart rewrite``
warns, naming each line of SRC that saves, loads or reads them (rewriter/rewrite/checkpoint_keys.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rewriter.cli import main

NET = """\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""

TRAIN = """\
import torch
from model import Net


def main(path):
    model = Net()
    model = torch.compile(model, backend="eager"{off})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    torch.save({{"model": model.state_dict(), "opt": optimizer.state_dict()}}, path)
"""


def test_the_keys_each_form_gives_on_cpu_torch():
    """The facts the warning states, on CPU torch with the eager backend."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = torch.compile(Net(), backend="eager")
        wrapped(x)
        assert next(iter(wrapped.state_dict())) == "_orig_mod.layers.0.weight"
        regional = Net()
        for block in regional.layers:  # what own_call: {regional: layers} writes
            block.compile(backend="eager")
        regional(x)
        assert next(iter(regional.state_dict())) == "layers.0.weight"
        assigned = Net()
        assigned.layers[0] = torch.compile(assigned.layers[0], backend="eager")  # not what it writes
        assert "layers.0._orig_mod.weight" in assigned.state_dict()
        off = Net()
        assert torch.compile(off, backend="eager", disable=True) is off
        with pytest.raises(RuntimeError, match="Missing key"):
            regional.load_state_dict(wrapped.state_dict())  # strict=True: the old checkpoint does not load
        regional.load_state_dict({k.replace("_orig_mod.", "", 1): v for k, v in wrapped.state_dict().items()})


def _rewrite(tmp_path: Path, capsys, files: dict[str, str], own_call: str, strategy: str = "region",
             *extra: str) -> str:
    """``rewrite`` (a preview) of ``files`` with one ``own_call`` edit of ``train.py::main``; its stderr."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    for name, text in files.items():
        (src / name).write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - action: compile\n    target: train.py::main\n    strategy: {strategy}\n"
                    f"    own_call: {own_call}\n")
    assert main(["rewrite", "--plan", str(plan), str(src), *extra]) == 0
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("own_call, how", [
    ("{regional: layers}", "compiled block by block in place (regional: layers)"),
    ("{disable: true}", "turned off (disable: true)"),
])
def test_an_edit_that_unwraps_the_model_warns_at_the_state_dict_use(tmp_path, capsys, own_call, how):
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": TRAIN.format(off="")}, own_call)
    assert err.startswith("warning: "), err
    assert f"plan.yaml:3: own_call on train.py:7 (`model = torch.compile(model, backend=\"eager\")`), {how}" in err, err
    assert "checkpoint keys (`_orig_mod.<param>`) lose the `_orig_mod.` prefix" in err, err
    assert "checkpoints saved before the rewrite load with strict=True only after stripping it" in err, err
    assert "at train.py:10 (model.state_dict(...))" in err, err
    assert "optimizer" not in err, err  # an optimizer's state_dict names no module
    assert err.count("warning:") == 1


def test_turning_the_programs_call_back_on_warns_that_the_keys_gain_the_prefix(tmp_path, capsys):
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": TRAIN.format(off=", disable=True")},
                   "{disable: false}", "whole")
    assert "turned back on (disable: false): model becomes torch.compile's wrapper" in err, err
    assert "checkpoint keys (`<param>`) gain the `_orig_mod.` prefix (`_orig_mod.<param>`)" in err, err
    assert "at train.py:10 (model.state_dict(...))" in err, err


def test_a_mention_of_orig_mod_in_another_file_is_named_and_the_apply_and_summary_carry_it(tmp_path, capsys):
    """A loader that strips the prefix (in a file the plan does not touch) and a load in it: both
    named, in --apply's output and the --summary-md's Warnings."""
    train = TRAIN.format(off="").replace('    torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, path)\n',
                                         "    save(model, path)\n").replace("from model import Net\n",
                                                                           "from model import Net\nfrom ckpt import save\n")
    ckpt = ("import torch\n\n\ndef save(net, path):\n    sd = {k.removeprefix('_orig_mod.'): v for k, v in net.state_dict().items()}\n"
            "    torch.save(sd, path)\n\n\ndef load(models, path):\n    models['net'].load_state_dict(torch.load(path))\n")
    summary = tmp_path / "summary.md"
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": train, "ckpt.py": ckpt}, "{regional: layers}",
                   "region", "--apply", "--no-validate", "--summary-md", str(summary))
    assert "at ckpt.py:5 ('_orig_mod.'), ckpt.py:6 (torch.save(sd, ...)), ckpt.py:10 (models['net'].load_state_dict(...))" \
        in err, err
    assert "applied: 1 file(s) changed" in err, err
    text = summary.read_text()
    assert "**Warnings**" in text and "ckpt.py:5" in text and "lose the `_orig_mod.` prefix" in text, text


def _held(tmp_path: Path, capsys, held: str) -> str:
    """``rewrite`` (a preview) of ``own_call: {disable: true}`` on ``Net.__init__``, whose layers
    line is replaced by ``held`` (a module it holds compiled), with train.py saving its
    state_dict; its stderr on one line."""
    net = NET.replace("        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])\n", held).replace(
        "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(net)
    (src / "train.py").write_text("import torch\nfrom model import Net\n\n\ndef main(path):\n"
                                  "    torch.save(Net().state_dict(), path)\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: model.py::Net.__init__\n    strategy: region\n"
                    "    own_call: {disable: true}\n")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    return " ".join(capsys.readouterr().err.split())


def test_a_module_held_by_another_names_the_keys_under_it(tmp_path, capsys):
    err = _held(tmp_path, capsys, "        self.block = torch.compile(nn.Linear(4, 4))\n")
    assert "self.block becomes the module itself" in err, err
    assert "the keys of the module that holds it (`block._orig_mod.<param>`) lose the `_orig_mod.` prefix" in err, err
    assert "at train.py:6 (Net().state_dict(...))" in err, err


@pytest.mark.parametrize("files, own_call", [
    # the keys stay: an option of a call that stays on
    ({"train.py": TRAIN.format(off="")}, "{fullgraph: true}"),
    # model.compile() compiles in place: no wrapper before or after
    ({"train.py": TRAIN.format(off="").replace("model = torch.compile(model, ", "model.compile(")}, "{regional: layers}"),
    # a call that compiles a function: no module wrapped
    ({"train.py": TRAIN.format(off="").replace("torch.compile(model, ", "torch.compile(model.forward, ")
      .replace("    model = torch.compile", "    model.forward = torch.compile")}, "{disable: true}"),
    # SRC never saves nor loads the keys (an optimizer's state_dict names no module)
    ({"train.py": TRAIN.format(off="").replace('"model": model.state_dict(), ', "")}, "{disable: true}"),
])
def test_no_warning_where_the_keys_stay_or_nothing_uses_them(tmp_path, capsys, files, own_call):
    err = _rewrite(tmp_path, capsys, {"model.py": NET, **files}, own_call)
    assert "warning" not in err, err


def test_code_a_warning_quotes_is_printed_as_written(tmp_path, capsys):
    """``sd[name]`` in a warning is code, not console markup (rich read ``[name]`` as a style)."""
    train = TRAIN.format(off="").replace("model.state_dict()", "nets[name].state_dict()")
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": train}, "{disable: true}")
    assert "train.py:10 (nets[name].state_dict(...))" in err, err


def test_an_annotated_assignment_of_the_call_warns_too(tmp_path, capsys):
    """``model: nn.Module = torch.compile(model)`` binds the wrapper as a plain assignment does: the
    edit that unwraps it changes the keys the same way, and is warned of."""
    train = TRAIN.format(off="").replace("    model = torch.compile(", "    model: torch.nn.Module = torch.compile(")
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": train}, "{disable: true}", "whole")
    assert "own_call on train.py:7 (`model: torch.nn.Module = torch.compile(model, backend=\"eager\")`), turned off " \
           "(disable: true): model becomes the module itself" in err, err
    assert "at train.py:10 (model.state_dict(...))" in err, err


@pytest.mark.parametrize("value", ["torch.compile(model, backend=\"eager\") if compiled else model",
                                   "model if not compiled else torch.compile(model, backend=\"eager\")"])
def test_a_compile_in_a_conditional_expression_warns_too(tmp_path, capsys, value):
    """``model = torch.compile(model) if compiled else model`` binds the wrapper where the branch
    compiles: turned off, those keys lose the prefix as a plain assignment's do."""
    train = TRAIN.format(off="").replace("def main(path):", "def main(path, compiled=True):").replace(
        "    model = torch.compile(model, backend=\"eager\")\n", f"    model = {value}\n")
    assert value in train
    err = _rewrite(tmp_path, capsys, {"model.py": NET, "train.py": train}, "{disable: true}")
    assert f"own_call on train.py:7 (`model = {value}`), turned off (disable: true): model becomes the module itself" in err, err
    assert "at train.py:10 (model.state_dict(...))" in err, err


def test_a_module_held_in_a_container_names_its_keys_as_state_dict_does(tmp_path, capsys):
    """``self.blocks[0] = torch.compile(...)``: state_dict names it ``blocks.0``, so the warning's
    key is ``blocks.0._orig_mod.<param>``, not ``blocks[0]._orig_mod.<param>``."""
    err = _held(tmp_path, capsys, "        self.blocks = nn.ModuleList([nn.Linear(4, 4)])\n"
                                  "        self.blocks[0] = torch.compile(nn.Linear(4, 4))\n")
    assert "(`blocks.0._orig_mod.<param>`)" in err, err
