"""A plan's ``compile`` of ``Block`` where the source compiles an enclosing class's ``forward`` with a
decorator (``@torch.compile`` or ``@torch._dynamo.optimize(...)`` on ``Net.forward``, ``Net.__init__``
building the ``Block``s): Dynamo traces ``Block.forward`` inside the compiled ``Net.forward`` and
inlines it, so the plan's decorator never gets a graph (pinned below on CPU torch with
``CompileCounter``). The rewrite refuses it at the plan line, exit 2, nothing written, naming the
decorator's ``file:line``, the construction and the ways through. A decorator with
``disable=True`` (the source's, or the plan's ``own_call``) compiles nothing and is not counted.
"""

from __future__ import annotations

import pytest

from rewrite_tree import rewrite_files

BLOCK = """\
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))
"""

NET = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    {decorator}
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""

HEAD = "import torch\nimport torch.nn as nn\n\n\n"
ADD = "  - {action: compile, target: model.py::Block}\n"
WRITTEN = "    @torch.compile\n    def forward(self, x):\n        return torch.relu"


def _model(decorator: str) -> str:
    """model.py: ``Block`` (lines 5-11) and ``Net`` (from line 14; its decorator at line 19)."""
    return f"{HEAD}{BLOCK}\n\n{NET.format(decorator=decorator)}"


def _pinned(decorator: str) -> tuple[int, int]:
    """``(frames the enclosing decorator compiled, frames the plan's decorator on Block.forward
    compiled)`` for one call of ``Net`` whose ``forward`` carries ``decorator`` (its backend
    ``outer``), both counted with ``CompileCounter`` on CPU."""
    import torch
    from torch._dynamo.testing import CompileCounter

    outer, plan = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "outer": outer, "plan": plan}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan)\n    def forward")
    exec(compile(f"{block}\n\n{NET.format(decorator=decorator)}", "pinned_decorated.py", "exec"), namespace)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            namespace["Net"]()(torch.randn(3, 4))
    finally:
        torch._dynamo.reset()
    return outer.frame_count, plan.frame_count


def test_a_decorated_forward_of_a_block_inside_a_compiled_forward_gets_no_graph_of_its_own():
    """What the refusal rests on: with ``Net.forward`` compiled by its decorator, the plan's
    decorator on ``Block.forward`` compiles no frame; with the enclosing decorator turned off
    (``disable=True``) it does, and the enclosing one none."""
    assert _pinned("@torch.compile(backend=outer)") == (1, 0)
    assert _pinned("@torch._dynamo.optimize(outer)") == (1, 0)
    outer, plan = _pinned("@torch.compile(backend=outer, disable=True)")
    assert outer == 0 and plan >= 1, (outer, plan)


@pytest.mark.parametrize("decorator", [
    "@torch.compile",
    "@torch.compile(mode='max-autotune', dynamic=False)",
    "@torch.compile(disable=False)",
    "@torch._dynamo.optimize('eager')",
])
def test_a_block_an_enclosing_decorated_forward_runs_is_refused_naming_the_decorator(tmp_path, capsys, decorator):
    err = rewrite_files(tmp_path, capsys, {"model.py": _model(decorator)}, ADD, 2)
    assert ("plan.yaml:3: actions[0] (compile model.py::Block): compile of Block: the source compiles Net.forward "
            f"with a decorator at model.py:19: {decorator}, and Net encloses Block: Net.__init__ builds Block at "
            "model.py:17: self.blocks = nn.ModuleList([Block() for _ in range(2)]); Dynamo traces Block.forward inside "
            "that compiled Net.forward and inlines it, so this compile and its options would never be used") in err, err
    assert ("keep this action and turn that decorator off (action compile, target model.py::Net.forward, own_call: "
            "{disable: true})") in err and "strategy: nested" in err, err


def test_a_decorator_on_the_forward_a_subclass_inherits_is_refused_naming_the_base(tmp_path, capsys):
    """``Net(Base)`` builds the blocks and runs ``Base.forward``, which the source decorates."""
    base = ("class Base(nn.Module):\n    @torch.compile\n    def forward(self, x):\n        for block in self.blocks:\n"
            "            x = block(x)\n        return x\n\n\n")
    net = ("class Net(Base):\n    def __init__(self):\n        super().__init__()\n"
           "        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n")
    err = rewrite_files(tmp_path, capsys, {"model.py": f"{HEAD}{BLOCK}\n\n{base}{net}"}, ADD, 2)
    assert ("compile of Block: the source compiles Base.forward (which Net inherits) with a decorator at model.py:15: "
            "@torch.compile, and Net encloses Block: Net.__init__ builds Block at model.py:25") in err, err
    assert "target model.py::Base.forward, own_call: {disable: true}" in err, err


@pytest.mark.parametrize("harness, code", [("harness: {file: train.py, call: generate}\n", 2), ("", 0)])
def test_a_decorated_method_the_plans_harness_calls_is_refused(tmp_path, capsys, harness, code):
    """With ``harness.call: generate`` the workload runs ``Net.generate``, whose decorator runs the
    blocks inside its compiled frame; without it the workload runs ``forward``, which no decorator
    compiles, and the plan's compile of ``Block`` is written."""
    src = tmp_path / "src"
    model = (_model("") + "\n    @torch.compile\n    def generate(self, x):\n"
             "        for block in self.blocks:\n            x = block(x)\n        return x\n")
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": "from model import Net\n"}, ADD, code,
                        head=harness)
    if code == 2:
        assert "compile of Block: the source compiles Net.generate with a decorator at model.py:25: @torch.compile" in err, err
        assert "target model.py::Net.generate, own_call: {disable: true}" in err, err
    else:
        assert WRITTEN in (src / "model.py").read_text()


@pytest.mark.parametrize("decorator, actions", [
    # turned off in the source: it returns forward as it was, whose blocks' decorated forward compiles
    ("@torch.compile(disable=True)", ADD),
    ("@torch._dynamo.optimize('eager', disable=True)", ADD),
    # turned off by the plan, the way through the refusal names
    ("@torch.compile", "  - {action: compile, target: model.py::Net.forward, own_call: {disable: true}}\n" + ADD),
    # a hint to the decorator's compile
    ("@torch.compile", "  - {action: compile, target: model.py::Net.forward, strategy: whole, own_call: {fullgraph: false}}\n"
                       "  - {action: compile, target: model.py::Block, strategy: nested}\n"),
    # another decorator, no compile
    ("@torch.no_grad()", ADD),
])
def test_what_is_not_refused(tmp_path, capsys, decorator, actions):
    rewrite_files(tmp_path, capsys, {"model.py": _model(decorator)}, actions, 0)
    if ADD in actions:  # the plan's compile of Block is written
        assert WRITTEN in (tmp_path / "src" / "model.py").read_text()


def test_a_decorator_turned_back_on_by_the_plan_is_counted(tmp_path, capsys):
    """``own_call: {disable: false}`` turns the source's ``disable=True`` decorator back on."""
    actions = "  - {action: compile, target: model.py::Net.forward, own_call: {disable: false}}\n" + ADD
    err = rewrite_files(tmp_path, capsys, {"model.py": _model("@torch.compile(disable=True)")}, actions, 2)
    assert "actions[1] (compile model.py::Block): compile of Block: the source compiles Net.forward with a decorator" in err, err


def test_a_plan_that_compiles_the_enclosing_class_too_is_read_as_the_plans_own_nesting(tmp_path, capsys):
    """The plan compiles ``Net`` and ``Block`` (as on a transformers file where a plan compiles a
    decoder layer and its MoE block): ``Block``'s compile is inlined into the plan's own compile of
    ``Net``, refused before anything is written (:mod:`rewriter.rewrite.enclosed_compiles`). In a tree
    that already holds both decorators (written by hand, or by an earlier stackpart), ``Net.forward``'s
    decorator is still the plan's own, not the source's: the refusal is the same, naming the plan's
    action rather than a decorator of the source."""
    from rewriter.cli import main

    both = "  - {action: compile, target: model.py::Net}\n" + ADD
    err = rewrite_files(tmp_path, capsys, {"model.py": _model("")}, both, 2)
    said = "actions[1] (compile model.py::Block): compile of Block: actions[0] ("
    assert said in err and "plan.yaml:3) compiles Net, and Net encloses Block" in err, err
    applied = tmp_path / "applied"
    (applied / "model.py").parent.mkdir(parents=True)
    (applied / "model.py").write_text(_model("@torch.compile").replace(
        "    def forward(self, x):\n        return torch.relu", WRITTEN, 1))
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(tmp_path / "plan.yaml"), str(applied), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "the source compiles" not in err, err
