"""A plan's ``compile`` of ``Block`` where the program compiles each ``Block`` itself in a loop
(``for layer in model.layers: layer.compile()``, ``model.layers[i] = torch.compile(layer)``,
torchtune's ``for m in model.modules(): if isinstance(m, Block): m.compile()``), or each instance
of a class that builds the ``Block``s: each block would be compiled twice and one of the two
compiles is dead (pinned below on CPU torch with CompileCounter). The rewrite refuses it at the
plan line, exit 2, nothing written, naming the loop's ``file:line`` and the ways through (drop the
action, or turn the loop's compile off); where the loop's compile is off, or walks other modules,
the plan's compile is written.
"""

from __future__ import annotations

import pytest

from rewrite_tree import rewrite_files

MODEL = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.stack = nn.ModuleList([Layer() for _ in range(2)])
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        for layer in self.stack:
            x = layer(x)
        return self.head(x)
"""

LOOPS = {
    "in place": "    for layer in model.layers:\n        layer.compile()\n",
    "a wrapper assigned back": "    for i, layer in enumerate(model.layers):\n        model.layers[i] = torch.compile(layer)\n",
    "isinstance over modules()": "    for m in model.modules():\n        if isinstance(m, Block):\n            m.compile()\n",
    "a class that builds the blocks": "    for layer in model.stack:\n        layer.compile()\n",
    "isinstance of that class": "    for m in model.modules():\n        if isinstance(m, Layer):\n            m.compile()\n",
}


def _train(loop: str) -> str:
    return f"import torch\nfrom model import Block, Layer, Net\n\n\ndef build():\n    model = Net()\n{loop}    return model\n"


ADD = "  - {action: compile, target: model.py::Block}\n"


@pytest.mark.parametrize("loop", list(LOOPS.values()), ids=list(LOOPS))
def test_a_block_a_program_loop_compiles_is_compiled_by_one_of_the_two_only(loop):
    """What the refusal rests on (CPU torch, CompileCounter): the plan's decorator on
    ``Block.forward`` and the program's loop over the same blocks: one of the two compiles gets
    every frame and the other none. In place (``layer.compile()``, also through ``isinstance``) the
    decorator gets them; a ``torch.compile(layer)`` wrapper, or a loop over a class that builds the
    blocks, traces the decorated ``Block.forward`` and inlines it."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, program = CompileCounter(), CompileCounter()
    namespace: dict = {"plan_backend": plan, "program_backend": program}
    model = MODEL.replace("    def forward(self, x):\n        return torch.relu",
                          "    @torch.compile(backend=plan_backend)\n    def forward(self, x):\n        return torch.relu")
    code = _train(loop.replace(".compile()", ".compile(backend=program_backend)").replace(
        "torch.compile(layer)", "torch.compile(layer, backend=program_backend)"))
    # the model holds only the modules the loop walks (Blocks, or Layers that build them)
    model = model.replace("[Block() for _ in range(2)]" if "Layer" in loop or "stack" in loop else
                          "[Layer() for _ in range(2)]", "[]")
    exec(compile(model + "\n\n" + code.split("\n", 2)[2], "pinned_loop.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace["build"]()(torch.randn(2, 4))
    inlined = "torch.compile(layer)" in loop or "Layer" in loop or "stack" in loop
    counts = (plan.frame_count, program.frame_count)
    assert (counts[0] == 0 and counts[1] >= 2) if inlined else (counts[0] >= 2 and counts[1] == 0), counts
    torch._dynamo.reset()


@pytest.mark.parametrize("loop, what", [
    (LOOPS["in place"], "each Block of Net.layers in place itself, in a loop at train.py:8: layer.compile() "
     "(Net.__init__ builds Block at model.py:26: self.layers = nn.ModuleList([Block() for _ in range(2)])), and this "
     "action compiles Block too: each block is compiled twice, and this action's decorated Block.forward receives "
     "every graph while the loop's compile receives none"),
    (LOOPS["a wrapper assigned back"], "each Block of Net.layers in place itself, in a loop at train.py:8: "
     "torch.compile(layer) (Net.__init__ builds Block at model.py:26: self.layers = nn.ModuleList([Block() for _ in "
     "range(2)])), and this action compiles Block too: each block is compiled twice, and the loop's torch.compile "
     "wrapper traces it and inlines it, so this compile and its options would never be used"),
    (LOOPS["isinstance over modules()"], "each Block its model holds in place itself, in a loop at train.py:9: "
     "m.compile(), and this action compiles Block too: each block is compiled twice"),
    (LOOPS["a class that builds the blocks"], "each Layer of Net.stack in place itself, in a loop at train.py:8: "
     "layer.compile() (Net.__init__ builds Layer at model.py:27: self.stack = nn.ModuleList([Layer() for _ in "
     "range(2)]); Layer.__init__ builds Block at model.py:17: self.block = Block()), and Layer encloses Block: Dynamo "
     "traces Block.forward inside each Layer's compile and inlines it"),
    (LOOPS["isinstance of that class"], "each Layer its model holds in place itself, in a loop at train.py:9: "
     "m.compile() (Layer.__init__ builds Block at model.py:17: self.block = Block()), and Layer encloses Block"),
])
@pytest.mark.parametrize("target", ["model.py::Block", "model.py::Block.forward"])
def test_a_compile_of_a_block_a_program_loop_compiles_is_refused_naming_the_loop(tmp_path, capsys, loop, what, target):
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _train(loop)},
                        f"  - {{action: compile, target: {target}}}\n", 2)
    assert f"plan.yaml:3: actions[0] (compile {target}): compile of Block: the program compiles {what}" in err, err
    assert "turn the loop's compile off (action compile, target train.py::build, own_call: {disable: true})" in err, err


@pytest.mark.parametrize("loop", [
    # the loop's compile turned off: it compiles nothing
    LOOPS["in place"].replace("layer.compile()", "layer.compile(disable=True)"),
    # a loop over another container, of modules that build no Block
    "    for layer in model.head.children():\n        layer.compile()\n",
    "    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            m.compile()\n",
    # the compiled wrapper bound to a plain name and dropped: it compiles nothing in the model
    "    for layer in model.layers:\n        compiled = torch.compile(layer)\n",
    # wrappers kept in a container of the program's own: the model's blocks are not replaced
    "    fast = {}\n    for i, layer in enumerate(model.layers):\n        fast[i] = torch.compile(layer)\n",
    "    fast = {}\n    for m in model.modules():\n        if isinstance(m, Block):\n            fast[m] = torch.compile(m)\n",
])
def test_a_loop_that_compiles_no_block_refuses_nothing(tmp_path, capsys, loop):
    train = _train(loop).replace("import torch\n", "import torch\nimport torch.nn as nn\n", 1)
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD, 0)
    assert "    @torch.compile\n    def forward(self, x):\n        return torch.relu" in (tmp_path / "src" / "model.py").read_text()


def test_the_way_through_it_names_turns_the_loop_off(tmp_path, capsys):
    plan = "  - {action: compile, target: train.py::build, strategy: whole, own_call: {disable: true}}\n" + ADD
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _train(LOOPS["in place"])}, plan, 0)
    assert "layer.compile(disable=True)" in (tmp_path / "src" / "train.py").read_text()


def test_torchtunes_loop_over_a_model_passed_in_is_refused(tmp_path, capsys):
    """torchtune's ``compile_model(model)``: the model is a parameter, but ``isinstance`` names the
    class each compiled module is, so the loop compiles every ``Block`` it is given."""
    train = ("from model import Block\n\n\ndef compile_model(model, backend=\"eager\"):\n"
             "    for m in reversed(list(model.modules())):\n        if isinstance(m, Block):\n"
             "            m.compile(backend=backend)\n")
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD, 2)
    assert ("compile of Block: the program compiles each Block its model holds in place itself, in a loop at "
            "train.py:7: m.compile(backend=backend), and this action compiles Block too") in err, err


def test_wrappers_kept_apart_from_the_model_leave_its_own_blocks_to_the_plans_compile():
    """What the loop above rests on (CPU torch, CompileCounter): ``fast[i] = torch.compile(layer)``
    into a dict of the program's own leaves ``model.layers`` holding the plain blocks, so the
    model's own call runs the plan's decorated ``Block.forward`` (its compile gets the frames, the
    wrappers' none), and each wrapper called compiles its own frames: both compiles are used."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, program = CompileCounter(), CompileCounter()
    namespace: dict = {"plan_backend": plan, "program_backend": program}
    model = MODEL.replace("    def forward(self, x):\n        return torch.relu",
                          "    @torch.compile(backend=plan_backend)\n    def forward(self, x):\n        return torch.relu")
    code = ("def build():\n    model = Net()\n    fast = {}\n    for i, layer in enumerate(model.layers):\n"
            "        fast[i] = torch.compile(layer, backend=program_backend)\n    return model, fast\n")
    exec(compile(model + "\n\n" + code, "pinned_apart.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net, fast = namespace["build"]()
        net(torch.randn(2, 4))
        assert plan.frame_count >= 1 and program.frame_count == 0, (plan.frame_count, program.frame_count)
        fast[0](torch.randn(2, 4))
    assert program.frame_count >= 1, program.frame_count
    torch._dynamo.reset()

@pytest.mark.parametrize("script", [
    "if __name__ == \"__main__\":\n    model = Net()\n",
    "model = Net()\nif __name__ == '__main__':\n",  # the model built above the guard
])
def test_a_loop_under_the_main_guard_is_read_as_a_functions_body(tmp_path, capsys, script):
    """A script's per-layer loop at its top level under ``if __name__ == "__main__":`` compiles
    each ``Block`` in place as the same loop in a function does."""
    train = "import torch\nfrom model import Block, Layer, Net\n\n" + script + LOOPS["in place"]
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD, 2)
    assert ("compile of Block: the program compiles each Block of Net.layers in place itself, in a loop at "
            "train.py:7: layer.compile()") in err, err
    assert "turn the loop's compile off (by hand)" in err, err
