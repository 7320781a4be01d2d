"""The program's own ``model.compile_repeated_blocks(...)`` (diffusers' regional compile: each class
in the model's ``_repeated_blocks`` compiled in place) is the program's own compile: read
statically, editable with ``own_call``, and never compiled a second time by a plan, the search or
the site's generated code. A tiny ``ModelMixin`` with random weights; nothing is downloaded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.cli import main
from rewriter.diagnose.own_compile import compile_setup, own_compiles

MODEL = '''import torch
import torch.nn as nn
from diffusers.models.modeling_utils import ModelMixin


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.fc(x)


class TinyNet(ModelMixin):
    _repeated_blocks = ["Block"]

    def __init__(self, dim=8, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def post(x):
    return x * 2
'''

TRAIN = '''import torch

from model import TinyNet


def build():
    model = TinyNet()
    model.compile_repeated_blocks(backend="eager", fullgraph=True)
    return model
'''


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def _plan(tmp_path: Path, body: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text("version: 1\nactions:\n" + body)
    return str(path)


def test_the_programs_compile_repeated_blocks_is_read_as_its_own_compile(tmp_path):
    src = _tree(tmp_path)
    assert compile_setup(src) == ['train.py:8: model.compile_repeated_blocks(backend="eager", fullgraph=True)']
    [own] = own_compiles(src, entries=frozenset({"train.py::build"}))  # the harness's model function
    assert (own.where, own.covers, own.fullgraph, own.site, own.idle) == (
        "train.py:8", ("declared", "TinyNet"), True, "train.py::build", None)
    assert own.can("dynamic") is None and own.value("backend") == "eager"


def test_an_own_call_edit_of_compile_repeated_blocks_sets_its_keys_at_the_call(tmp_path, capsys):
    src = _tree(tmp_path)
    plan = _plan(tmp_path, "  - action: compile\n    target: train.py::build\n    own_call: {dynamic: true, fullgraph: false}\n")
    assert main(["rewrite", "--plan", plan, str(src), "--apply", "--no-validate"]) == 0
    assert '    model.compile_repeated_blocks(backend="eager", dynamic=True)\n' in (src / "train.py").read_text()
    capsys.readouterr()
    assert main(["rewrite", "--plan", plan, str(src)]) == 0  # idempotent: the edited call is found again
    assert capsys.readouterr().out == ""


def test_the_regional_edit_to_compile_repeated_blocks_is_idempotent(tmp_path, capsys):
    (tmp_path / "train.py").write_text("import torch\n\n\ndef build(pipe):\n    pipe.transformer = torch.compile(pipe.transformer)\n")
    plan = _plan(tmp_path, "  - action: compile\n    target: train.py::build\n    own_call: {regional: compile_repeated_blocks}\n")
    assert main(["rewrite", "--plan", plan, str(tmp_path), "--apply", "--no-validate"]) == 0
    assert "    pipe.transformer.compile_repeated_blocks()\n" in (tmp_path / "train.py").read_text()
    capsys.readouterr()
    assert main(["rewrite", "--plan", plan, str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("action, says", [
    ("  - action: compile\n    target: model.py::Block\n", "each Block (in TinyNet._repeated_blocks)"),
    ("  - action: compile\n    target: model.py::Block.forward\n    strategy: nested\n"
     "  - action: compile\n    target: model.py::TinyNet\n    strategy: whole\n", "each Block (in TinyNet._repeated_blocks)"),
    ("  - action: compile\n    target: model.py::TinyNet\n    strategy: whole\n", "the blocks TinyNet declares (Block)"),
])
def test_a_plan_that_compiles_the_programs_regional_blocks_again_is_refused_at_its_call(tmp_path, capsys, action, says):
    src = _tree(tmp_path)
    assert main(["rewrite", "--plan", _plan(tmp_path, action), str(src)]) == 2
    err = capsys.readouterr().err
    assert "plan.yaml:3: actions[0]" in err and says in err, err
    assert 'at train.py:8: model.compile_repeated_blocks(backend="eager", fullgraph=True)' in err
    assert "action compile, target train.py::build, own_call" in err  # the edit that changes it instead


def test_a_compile_of_other_code_and_an_edit_of_the_programs_call_are_not_refused(tmp_path, capsys):
    src = _tree(tmp_path)
    plan = _plan(tmp_path, "  - action: compile\n    target: model.py::post\n"
                           "  - action: compile\n    target: train.py::build\n    own_call: {mode: max-autotune}\n")
    assert main(["rewrite", "--plan", plan, str(src)]) == 0
    out = capsys.readouterr().out
    assert "+@torch.compile\n" in out and "mode='max-autotune'" in out.replace('"', "'"), out


def test_check_reports_the_refusal_rather_than_a_drift_that_adds_a_compile(tmp_path, capsys, monkeypatch):
    src = _tree(tmp_path)
    plan = _plan(tmp_path, "  - action: compile\n    target: model.py::Block\n")
    monkeypatch.chdir(src)
    code = main(["check", "--plan", plan, "--src", ".", "-j", "1", "model.py", "train.py"])
    got = capsys.readouterr()
    assert code == 2, got
    assert "plan drift" not in got.out + got.err and "@torch.compile" not in got.out
    assert "train.py:8" in got.err


def test_a_library_block_the_site_compiles_already_is_not_compiled_again_from_the_site(tmp_path, capsys):
    (tmp_path / "app.py").write_text(
        "from diffusers import FluxTransformer2DModel\n\n\ndef build():\n    model = FluxTransformer2DModel()\n"
        "    model.compile_repeated_blocks(fullgraph=True)\n    return model\n")
    path = tmp_path / "plan.yaml"
    path.write_text("version: 1\nsite: app.py::build\nactions:\n  - action: compile\n"
                    "    target: diffusers.models.transformers.transformer_flux:FluxSingleTransformerBlock\n")
    assert main(["rewrite", "--plan", str(path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "plan.yaml:4: actions[0]" in err
    assert "each FluxSingleTransformerBlock (in FluxTransformer2DModel._repeated_blocks)" in err
    assert "at app.py:6: model.compile_repeated_blocks(fullgraph=True)" in err
    assert not (tmp_path / "_stackpart").exists()


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_search_adds_no_compile_of_the_blocks_the_program_compiles(tmp_path, monkeypatch):
    """:class:`rewriter.diagnose.candidates.OwnScope` reads the call as covering the declared blocks,
    so a per-block or whole candidate on top of it is pruned, however its target is spelt."""
    from rewriter.diagnose.candidates import OwnScope, conflict
    from rewriter.diagnose.declared import read
    from rewriter.diagnose.rungs.granularity import find_blocks
    from rewriter.plan import CompileAction

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    text = MODEL + "\n\n" + TRAIN.split("\n\n\n", 1)[1]
    (tmp_path / "prog.py").write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "compile_repeated_blocks" in t)
    at = f"prog.py:{line}"
    prog = _load(tmp_path / "prog.py", "stackpart_test_own_repeated_prog")
    model = prog.build()
    declared = read(model)
    evidence = SimpleNamespace(declared=declared, blocks=find_blocks(model, tmp_path, declared), own_compiled_modules=None,
                               profile=None)
    ctx = SimpleNamespace(reference=lambda: (model, None, None), evidence=evidence, session=SimpleNamespace(src=tmp_path))
    scope = OwnScope.of(ctx, own_compiles(tmp_path, entries=frozenset({"prog.py::build"})))
    assert [r.where for r in scope.block] == [at] and not scope.whole
    for target, strategy in [("prog.py::Block", "region"), ("somelib.blocks:Block", "region"), ("prog.py::TinyNet", "whole")]:
        why = conflict(CompileAction(action="compile", target=target, strategy=strategy), scope)
        assert why is not None and f"compiles each Block itself ({at}" in why, (target, why)
    assert conflict(CompileAction(action="compile", target="prog.py::post"), scope) is None


@pytest.mark.parametrize("action, code", [
    ("  - action: compile\n    target: model.py::Block\n", 2),
    ("  - action: compile\n    target: model.py::TinyNet\n    strategy: whole\n", 0),
    ("  - action: compile\n    target: model.py::Block.forward\n    strategy: nested\n"
     "  - action: compile\n    target: model.py::TinyNet\n    strategy: whole\n", 0),
])
def test_a_compile_repeated_blocks_turned_off_is_no_compile_and_its_blocks_are_turned_back_on_there(
        tmp_path, capsys, action, code):
    """``compile_repeated_blocks(..., disable=True)`` compiles nothing: a whole-model compile of the
    class that declares the blocks is no second compile; a compile of the blocks themselves is what
    that call compiles once on again, refused naming ``own_call: {disable: false}``."""
    src = _tree(tmp_path)
    (src / "train.py").write_text(TRAIN.replace("fullgraph=True)", "fullgraph=True, disable=True)"))
    assert main(["rewrite", "--plan", _plan(tmp_path, action), str(src)]) == code
    err = " ".join(capsys.readouterr().err.split())
    if code == 2:
        assert "plan.yaml:3: actions[0]" in err and "train.py:8" in err and "passes disable=True" in err, err
        assert "action compile, target train.py::build, own_call: {disable: false}" in err, err


@pytest.mark.parametrize("disable, off, code", [(True, False, 0), (False, True, 2)])
def test_the_plans_own_call_disable_on_compile_repeated_blocks_is_what_the_rules_read(tmp_path, capsys, disable, off, code):
    """A plan that turns the program's ``compile_repeated_blocks`` off may compile the whole model;
    one that turns a call the source turned off back on may not compile the model a second time."""
    src = _tree(tmp_path)
    if off:
        (src / "train.py").write_text(TRAIN.replace("fullgraph=True)", "fullgraph=True, disable=True)"))
    plan = _plan(tmp_path, "  - action: compile\n    target: model.py::TinyNet\n    strategy: whole\n"
                           f"  - action: compile\n    target: train.py::build\n    own_call: {{disable: {str(disable).lower()}}}\n")
    assert main(["rewrite", "--plan", plan, str(src)]) == code, capsys.readouterr().err
    if code == 2:
        assert "the blocks TinyNet declares (Block)" in capsys.readouterr().err
