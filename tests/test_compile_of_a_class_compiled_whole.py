"""A plan's ``compile`` of a class ``Net`` whose instance the program compiles whole itself, with a
call the plan does not edit (``model = torch.compile(Net())`` in another file, at a script's top
level, or ``model.compile()``): Dynamo inlines the decorated ``forward`` into that compile, so the
plan's decorator and its options are never used (pinned in tests/test_own_compile_off.py,
``test_a_compiled_forward_inside_a_whole_model_compile_is_never_used``). The rewrite refuses it at
the plan line, naming the program's call and the way through: an ``own_call`` edit of it, or
``strategy: nested``. What compiles nothing (``disable=True``, a discarded result) is no such call.
"""

from __future__ import annotations

import pytest

MODEL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


def helper(x):
    return x + 1
"""

TRAIN = """\
import torch
from model import Net


def main():
    model = torch.compile(Net())
    return model(torch.randn(3, 4))
"""

ADD = "  - {action: compile, target: model.py::Net}\n"


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("target", ["model.py::Net", "model.py::Net.forward"])
def test_a_compile_of_a_class_another_file_compiles_whole_is_refused_naming_the_call(tmp_path, capsys, target):
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN}, f"  - {{action: compile, target: {target}}}\n", 2)
    err = _err(capsys)
    assert f"plan.yaml:3: actions[0] (compile {target}): compile of Net: the program compiles an instance of it " \
           "whole itself, at train.py:6: torch.compile(Net())" in err, err
    assert "would never be used" in err, err
    assert "edit that call instead (action compile, target train.py::main, own_call: {disable: true}; " \
           "not regional" in err and "strategy: nested, beside a strategy: whole action" in err, err


@pytest.mark.parametrize("train, line, edit", [
    # a script's top level: no plan target names the call
    ("import torch\nfrom model import Net\n\nmodel = torch.compile(Net(), mode='max-autotune')\nmodel(torch.randn(3, 4))\n",
     "train.py:4: torch.compile(Net(), mode='max-autotune')", "change that call by hand"),
    ("import torch\nfrom model import Net\n\nif __name__ == '__main__':\n    model = torch.compile(Net())\n",
     "train.py:5: torch.compile(Net())", "change that call by hand"),
    # the instance bound first, compiled in place or wrapped
    ("import torch\nfrom model import Net\n\n\ndef main():\n    model = Net().eval()\n    model.compile()\n    return model\n",
     "train.py:7: model.compile()", "target train.py::main, own_call"),
    ("import torch\nfrom model import Net\n\n\ndef main():\n    model = Net()\n    model = torch.compile(model)\n    return model\n",
     "train.py:7: torch.compile(model)", "target train.py::main, own_call"),
    # a module that holds it compiled
    ("import torch\nimport torch.nn as nn\nfrom model import Net\n\n\nclass Outer(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.net = torch.compile(Net())\n",
     "train.py:9: torch.compile(Net())", "target train.py::Outer.__init__, own_call"),
])
def test_the_forms_of_the_programs_whole_compile(tmp_path, capsys, train, line, edit):
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, ADD, 2)
    err = _err(capsys)
    assert f"at {line}; Dynamo traces Net.forward" in err and edit in err, err


def test_the_same_file_is_read_too(tmp_path, capsys):
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": MODEL + "\n\ndef build():\n    return torch.compile(Net())\n"}, ADD, 2)
    assert "at model.py:19: torch.compile(Net())" in _err(capsys)


@pytest.mark.parametrize("train, action", [
    (TRAIN.replace("torch.compile(Net())", "torch.compile(Net(), disable=True)"), ADD),  # off: returns the instance
    (TRAIN.replace("    model = torch.compile(Net())\n", "    model = Net()\n    torch.compile(model)\n"), ADD),  # discarded
    # a hint to that compile, beside the plan's whole compile (the nested rule asks one): an edit of the call
    (TRAIN, "  - {action: compile, target: train.py::main, strategy: whole, own_call: {fullgraph: true}}\n"
            "  - {action: compile, target: model.py::Net, strategy: nested}\n"),
    (TRAIN, "  - {action: compile, target: model.py::helper}\n"),  # not the class
    (TRAIN.replace("Net()", "Other()").replace("import Net", "import Net, Other"), ADD),  # another class
    # the way through the refusal names: the plan edits the program's call
    (TRAIN, "  - {action: compile, target: train.py::main, strategy: whole, own_call: {disable: true}}\n" + ADD),
])
def test_what_is_not_refused(tmp_path, train, action):
    from test_source_compile_forms import _rewrite

    model = MODEL + "\n\nclass Other(Net):\n    pass\n"
    _rewrite(tmp_path, {"model.py": model, "train.py": train}, action, 0)


def test_an_own_call_that_keeps_the_call_on_is_refused_by_the_own_call_rule(tmp_path, capsys):
    """The plan edits the program's call and keeps it on: the refusal names that own_call action
    (the rule of ebf2f72), not the unedited-call one."""
    from test_source_compile_forms import _rewrite

    plan = "  - {action: compile, target: train.py::main, strategy: whole, own_call: {fullgraph: true}}\n" + ADD
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN}, plan, 2)
    err = _err(capsys)
    assert "the own_call of actions[0] keeps that call on" in err, err


@pytest.mark.parametrize("train", [
    # bound to a name the function never uses: the program calls the original Net, nothing compiles
    "import torch\nfrom model import Net\n\n\ndef main():\n    compiled = torch.compile(Net())\n"
    "    return Net()(torch.randn(3, 4))\n",
    # the same at a script's top level, the name used nowhere in SRC
    "import torch\nfrom model import Net\n\nunused_net = torch.compile(Net())\n",
])
def test_a_call_whose_result_nothing_uses_is_not_refused_as_diagnose_reads_it(tmp_path, train):
    """Diagnose reads such a call as compiling nothing (own_compiles' idle, kind unused) and proposes
    a compile of Net over it; the rewrite refusing it made diagnose's own plan unusable (diagnose
    exited 2 after writing plan.yaml, at the validation report's rewrite)."""
    from test_source_compile_forms import _rewrite

    from rewriter.diagnose.own_compile import own_compiles

    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "train.py").write_text(train)
    assert [o.idle_kind for o in own_compiles(tmp_path / "probe")] == ["unused"]
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": train}, ADD, 0)


def test_the_way_through_is_not_regional_whose_blocks_the_plans_compile_would_inline(tmp_path, capsys):
    """Turned regional, the program compiles each block in place; the plan's decorated
    ``Net.forward`` then traces those blocks and inlines them, so the regional compile is the one
    never used (CPU torch: the blocks' backend gets no graph). The refusal's way through is
    ``disable: true``, not ``regional``."""
    import warnings

    import torch

    got = []

    def backend(name):
        def compile_fn(gm, example_inputs):
            got.append(name)
            return gm.forward
        return compile_fn

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

        @torch.compile(backend=backend("plan"))
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch._dynamo.reset()
    net = Net()
    for block in net.layers:  # what own_call: {regional: layers} writes
        block.compile(backend=backend("regional"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net(torch.randn(2, 4))
    assert got == ["plan"], got
    torch._dynamo.reset()

    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN}, ADD, 2)
    err = _err(capsys)
    assert "own_call: {disable: true}; not regional" in err and "{regional" not in err, err
    plan = "  - {action: compile, target: train.py::main, strategy: whole, own_call: {fullgraph: true}}\n" + ADD
    _rewrite(tmp_path, {"model.py": MODEL, "train.py": TRAIN}, plan, 2)
    err = _err(capsys)
    assert "(own_call: {disable: true}) in actions[0] (not regional" in err and "{regional" not in err, err


@pytest.mark.parametrize("files, target, line", [
    # imported under another name: the class is the module's Net
    ({"model.py": MODEL, "train.py": TRAIN.replace("import Net", "import Net as N").replace("Net()", "N()")},
     "model.py::Net", "train.py:6: torch.compile(N())"),
    # two dots: the package above the file's own
    ({"pkg/__init__.py": "", "pkg/model.py": MODEL, "pkg/sub/__init__.py": "",
      "pkg/sub/train.py": TRAIN.replace("from model import", "from ..model import")},
     "pkg/model.py::Net", "pkg/sub/train.py:6: torch.compile(Net())"),
    # called through its module's name: ``import model as M``, ``import model``, a package's module
    ({"model.py": MODEL, "train.py": TRAIN.replace("from model import Net", "import model as M").replace("Net()", "M.Net()")},
     "model.py::Net", "train.py:6: torch.compile(M.Net())"),
    ({"model.py": MODEL, "train.py": TRAIN.replace("from model import Net", "import model").replace(
        "    model = torch.compile(Net())\n    return model(", "    net = model.Net()\n    net = torch.compile(net)\n    return net(")},
     "model.py::Net", "train.py:7: torch.compile(net)"),
    ({"pkg/__init__.py": "", "pkg/model.py": MODEL,
      "train.py": TRAIN.replace("from model import Net", "import pkg.model").replace("Net()", "pkg.model.Net()")},
     "pkg/model.py::Net", "train.py:6: torch.compile(pkg.model.Net())"),
])
def test_the_class_is_resolved_through_an_alias_and_a_relative_import(tmp_path, capsys, files, target, line):
    from rewriter.cli import main

    src = tmp_path / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - {{action: compile, target: {target}}}\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    assert {p.relative_to(src).as_posix(): p.read_text() for p in src.rglob("*.py")} == files
    err = _err(capsys)
    assert f"compile of Net: the program compiles an instance of it whole itself, at {line}" in err, err


def test_an_alias_names_the_class_it_imports_not_its_own_spelling(tmp_path):
    """``from model import Solo as Net`` compiles a Solo: a plan's compile of model.py's Net is
    used, and written."""
    from test_source_compile_forms import _rewrite

    model = MODEL + "\n\nclass Solo(nn.Module):\n    def forward(self, x):\n        return x\n"
    train = TRAIN.replace("import Net", "import Solo as Net")
    src = _rewrite(tmp_path, {"model.py": model, "train.py": train}, ADD, 0)
    assert "@torch.compile" in (src / "model.py").read_text()


@pytest.mark.parametrize("train", [
    TRAIN.replace("from model import Net", "import model as M").replace("Net()", "M.Solo()"),  # another class of it
    TRAIN.replace("from model import Net", "import other as M").replace("Net()", "M.Net()"),  # another file's Net
])
def test_a_class_called_through_a_module_is_the_class_that_module_defines(tmp_path, train):
    from test_source_compile_forms import _rewrite

    model = MODEL + "\n\nclass Solo(nn.Module):\n    def forward(self, x):\n        return x\n"
    src = _rewrite(tmp_path, {"model.py": model, "other.py": MODEL, "train.py": train}, ADD, 0)
    assert "@torch.compile" in (src / "model.py").read_text()
