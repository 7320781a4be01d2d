"""A plan's ``compile`` of ``Block`` where the program compiles ``Net`` whole and ``Net.__init__``
builds the ``Block``s (``self.blocks = nn.ModuleList([Block() ...])``, ``self.block = Block()``,
``nn.Sequential(*[Block() ...])``, through a class in between, a class imported from another file):
Dynamo traces ``Block.forward`` inside the whole-model compile and inlines it, so the plan's
decorator is never used (pinned below on CPU torch with counting backends). The rewrite refuses it
at the plan line, exit 2, nothing written, naming the program's call, which class builds which
(``file:line``) and the ways through: the call turned regional over the blocks, or off, or
``strategy: nested``. Where the source does not say the class is built there (a factory,
``getattr``, a name bound in a parameter) or the call compiles nothing, nothing is refused.
"""

from __future__ import annotations

from pathlib import Path

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

HEAD = "import torch\nimport torch.nn as nn\n\n\n"


def _model(init: str, extra: str = "", head: str = HEAD, block: str = BLOCK) -> str:
    """A model file: ``head``, ``block``, ``extra`` and ``Net`` whose ``__init__`` body is ``init``."""
    return (f"{head}{block}\n\n{extra}class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"{init}\n    def forward(self, x):\n        for block in self.children():\n            x = block(x)\n"
            "        return x\n")


LIST = _model("        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n")

TRAIN = """\
import torch
from model import Net


def main():
    model = torch.compile(Net())
    return model(torch.randn(3, 4))
"""

ADD = "  - {action: compile, target: model.py::Block}\n"


def _rewrite(tmp_path: Path, capsys, files: dict[str, str], actions: str, code: int) -> str:
    return rewrite_files(tmp_path, capsys, files, actions, code)


def test_a_compiled_forward_of_a_block_inside_a_whole_model_compile_is_never_used():
    """What the refusal rests on (CPU torch, counting backends): with ``Net`` compiled whole, the
    decorated ``Block.forward`` gets no graph of its own; with the program's compile off, or turned
    regional (each block compiled in place), it does, and the loop's own compile gets none."""
    import warnings

    import torch

    got: list[str] = []

    def backend(name: str):  # noqa: ANN202
        def compile_fn(gm, example_inputs):  # noqa: ANN001, ANN202
            got.append(name)
            return gm.forward
        return compile_fn

    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": backend("plan")}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")  # the plan's
    net = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n\n"
           "    def forward(self, x):\n        for block in self.blocks:\n            x = block(x)\n        return x\n")
    exec(compile(f"{block}\n\n{net}", "pinned_model.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(namespace["Net"](), backend=backend("whole"))(torch.randn(2, 4))
        assert got == ["whole"], got
        got.clear()
        torch._dynamo.reset()
        namespace["Net"]()(torch.randn(2, 4))  # the program's compile off: the plan's compile runs, once a block
        assert got == ["plan", "plan"], got
        got.clear()
        torch._dynamo.reset()
        net = namespace["Net"]()
        for each in net.blocks:  # the program's call turned regional (own_call: {regional: blocks})
            each.compile(backend=backend("regional"))
        net(torch.randn(2, 4))  # the plan's decorator gets the graphs, the loop's block.compile() none: one is dead
    assert got == ["plan", "plan"], got
    torch._dynamo.reset()


@pytest.mark.parametrize("init, line, built, regional", [
    ("        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n", 17,
     "self.blocks = nn.ModuleList([Block() for _ in range(2)])", "blocks"),
    ("        self.block = Block()\n", 17, "self.block = Block()", None),
    ("        self.stack = nn.Sequential(*[Block() for _ in range(3)])\n", 17,
     "self.stack = nn.Sequential(*[Block() for _ in range(3)])", "stack"),
    # a local list the container is then built from
    ("        layers = []\n        for _ in range(2):\n            layers.append(Block())\n"
     "        self.layers = nn.ModuleList(layers)\n", 20, "self.layers = nn.ModuleList(layers)", "layers"),
    ("        self.blocks = nn.ModuleList()\n        self.blocks.append(Block())\n", 18,
     "self.blocks.append(Block())", "blocks"),
])
def test_a_block_net_builds_is_refused_naming_the_call_and_the_construction(tmp_path, capsys, init, line, built,
                                                                           regional):
    err = _rewrite(tmp_path, capsys, {"model.py": _model(init), "train.py": TRAIN}, ADD, 2)
    assert ("plan.yaml:3: actions[0] (compile model.py::Block): compile of Block: the program compiles an instance "
            "of Net whole itself, at train.py:6: torch.compile(Net()), and Net encloses Block: Net.__init__ builds "
            f"Block at model.py:{line}: {built}; Dynamo traces Block.forward inside that compile and inlines it, so "
            "this compile and its options would never be used") in err, err
    assert "keep this action and turn that call off (action compile, target train.py::main, own_call: " \
           "{disable: true})" in err and "strategy: nested" in err, err
    if regional:
        assert f"turn that call regional (action compile, target train.py::main, strategy: region, own_call: {{regional: {regional}}}" in err
    else:  # one Block, no container: no regional loop to name
        assert "regional" not in err, err


def test_two_levels_deep_names_each_construction_and_the_path_to_the_blocks(tmp_path, capsys):
    encoder = ("class Encoder(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
               "        self.layers = nn.ModuleList([Block() for _ in range(n)])\n\n\n")
    model = _model("        self.encoder = Encoder(2)\n        self.head = nn.Linear(4, 4)\n", extra=encoder)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, ADD, 2)
    assert ("Net encloses Block: Net.__init__ builds Encoder at model.py:23: self.encoder = Encoder(2); "
            "Encoder.__init__ builds Block at model.py:17: self.layers = nn.ModuleList([Block() for _ in range(n)]);"
            ) in err, err
    assert "own_call: {regional: encoder.layers}" in err, err
    edit = "  - {action: compile, target: train.py::main, strategy: region, own_call: {regional: encoder.layers}}\n"
    _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, edit, 0)  # the way through it names


@pytest.mark.parametrize("blocks_file, head", [
    ("blocks.py", HEAD + "from blocks import Block\n\n\n"),
    ("blocks.py", HEAD + "from blocks import Block as Layer\n\n\n"),
    ("blocks.py", HEAD + "import blocks as parts\n\n\n"),
    ("parts/blocks.py", HEAD + "from parts.blocks import Block\n\n\n"),
])
def test_a_block_imported_from_another_file(tmp_path, capsys, blocks_file, head):
    called = "Layer()" if "as Layer" in head else "parts.Block()" if "as parts" in head else "Block()"
    model = _model(f"        self.blocks = nn.ModuleList([{called} for _ in range(2)])\n", head=head, block="")
    target = f"  - {{action: compile, target: {blocks_file}::Block}}\n"
    err = _rewrite(tmp_path, capsys, {"model.py": model, blocks_file: HEAD + BLOCK, "train.py": TRAIN}, target, 2)
    assert (f"actions[0] (compile {blocks_file}::Block): compile of Block: the program compiles an instance of Net "
            f"whole itself, at train.py:6: torch.compile(Net()), and Net encloses Block: Net.__init__ builds Block at "
            f"model.py:") in err, err


@pytest.mark.parametrize("head, called", [
    ("import model as M\n", "M.Net()"),
    ("import model\n", "model.Net()"),
])
def test_a_net_called_through_its_module_name(tmp_path, capsys, head, called):
    train = TRAIN.replace("from model import Net\n", head).replace("Net()", called).replace("model = torch", "net = torch"
                                                                                          ).replace("return model(", "return net(")
    err = _rewrite(tmp_path, capsys, {"model.py": LIST, "train.py": train}, ADD, 2)
    assert (f"compile of Block: the program compiles an instance of Net whole itself, at train.py:6: "
            f"torch.compile({called}), and Net encloses Block: Net.__init__ builds Block at model.py:17") in err, err


OTHER = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
    "        self.lin = nn.Linear(4, 4)\n"


@pytest.mark.parametrize("top, local, called", [
    ("", "import model as M", "M.Net()"),
    ("", "from model import Net", "Net()"),
    ("import other as M\n", "import model as M", "M.Net()"),  # the module's name rebound in the function
    ("from other import Net\n", "from model import Net", "Net()"),
])
def test_a_net_imported_inside_the_function_that_compiles_it(tmp_path, capsys, top, local, called):
    train = (f"import torch\n{top}\n\ndef main():\n    {local}\n    net = torch.compile({called})\n"
             "    return net(torch.randn(3, 4))\n")
    err = _rewrite(tmp_path, capsys, {"model.py": LIST, "other.py": OTHER, "train.py": train}, ADD, 2)
    assert (f"compile of Block: the program compiles an instance of Net whole itself, at train.py:{6 + bool(top)}: "
            f"torch.compile({called}), and Net encloses Block: Net.__init__ builds Block at model.py:17") in err, err


@pytest.mark.parametrize("top, local, called", [
    ("import model as M\n", "import other as M", "M.Net()"),
    ("from model import Net\n", "from other import Net", "Net()"),
])
def test_a_net_of_another_module_imported_inside_the_function_is_not_refused(tmp_path, capsys, top, local, called):
    """The function's own import binds the name to ``other.Net``, which builds no ``Block``: the
    module-level import of ``model`` under the same name is not what it compiles."""
    train = (f"import torch\n{top}\n\ndef main():\n    {local}\n    net = torch.compile({called})\n"
             "    return net(torch.randn(3, 4))\n")
    _rewrite(tmp_path, capsys, {"model.py": LIST, "other.py": OTHER, "train.py": train}, ADD, 0)


def test_a_regional_edit_of_a_function_that_imports_the_net_itself_is_read(tmp_path, capsys):
    """The ``own_call`` edit's class read through the function's own import: a compile of the
    blocks its regional loop walks is refused, and a path ``Net`` never sets is refused too."""
    train = ("import torch\nimport other as M\n\n\ndef main():\n    import model as M\n"
             "    net = torch.compile(M.Net())\n    return net(torch.randn(3, 4))\n")
    files = {"model.py": LIST, "other.py": OTHER, "train.py": train}
    err = _rewrite(tmp_path, capsys, files, REGIONAL + ADD, 2)
    assert "into a compile of each Block of Net.blocks in place (Net.__init__ builds Block at model.py:17" in err, err
    err = _rewrite(tmp_path, capsys, files, REGIONAL.replace("blocks", "blokcs"), 2)
    assert "own_call: regional: Net (model.py) sets no attribute 'blokcs'" in err and "did you mean 'blocks'?" in err, err


def test_a_package_relative_import(tmp_path, capsys):
    model = _model("        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n",
                   head=HEAD + "from .blocks import Block\n\n\n", block="")
    train = TRAIN.replace("from model import Net", "from pkg.model import Net")
    files = {"pkg/__init__.py": "", "pkg/model.py": model, "pkg/blocks.py": HEAD + BLOCK, "train.py": train}
    err = _rewrite(tmp_path, capsys, files, "  - {action: compile, target: pkg/blocks.py::Block.forward}\n", 2)
    assert "and Net encloses Block: Net.__init__ builds Block at pkg/model.py:" in err, err


def test_an_own_call_that_keeps_the_whole_compile_on_is_refused_naming_it(tmp_path, capsys):
    plan = "  - {action: compile, target: train.py::main, strategy: whole, own_call: {fullgraph: true}}\n" + ADD
    err = _rewrite(tmp_path, capsys, {"model.py": LIST, "train.py": TRAIN}, plan, 2)
    assert ("plan.yaml:4: actions[1] (compile model.py::Block): compile of Block: train.py::main compiles an "
            "instance of Net whole (torch.compile(Net())) and the own_call of actions[0] keeps that call on; Net "
            "encloses Block: Net.__init__ builds Block at model.py:17") in err, err
    assert "turn that call regional in actions[0] with strategy: region, own_call: {regional: blocks}" in err, err
    assert "turn the program's call off in actions[0] with own_call: {disable: true}" in err, err


def test_a_script_level_call_is_changed_by_hand(tmp_path, capsys):
    train = "import torch\nfrom model import Net\n\nmodel = torch.compile(Net())\nmodel(torch.randn(3, 4))\n"
    err = _rewrite(tmp_path, capsys, {"model.py": LIST, "train.py": train}, ADD, 2)
    assert "at train.py:4: torch.compile(Net()), and Net encloses Block" in err, err
    assert "change that call by hand (compile each Block in place, or turn it off)" in err, err


@pytest.mark.parametrize("files, actions", [
    # the program's compile turned off: it returns the instance, whose blocks' decorated forward compiles
    ({"train.py": TRAIN.replace("torch.compile(Net())", "torch.compile(Net(), disable=True)")}, ADD),
    # the ways through the refusal names
    ({}, "  - {action: compile, target: train.py::main, strategy: region, own_call: {regional: blocks}}\n"),
    ({}, "  - {action: compile, target: train.py::main, strategy: whole, own_call: {disable: true}}\n" + ADD),
    ({}, "  - {action: compile, target: train.py::main, strategy: whole, own_call: {fullgraph: true}}\n"
         "  - {action: compile, target: model.py::Block, strategy: nested}\n"),
    # built where the source does not say which class: a factory, getattr, a class passed in
    ({"model.py": _model("        self.blocks = nn.ModuleList([make_block() for _ in range(2)])\n",
                         extra="def make_block():\n    return Block()\n\n\n")}, ADD),
    ({"model.py": _model("        self.blocks = nn.ModuleList([getattr(sys.modules[__name__], 'Block')() "
                         "for _ in range(2)])\n", head="import sys\n" + HEAD)}, ADD),
    ({"model.py": _model("        make = lambda: Block()\n        self.blocks = nn.ModuleList([make() for _ in range(2)])\n")},
     ADD),
    ({"model.py": _model("        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n").replace(
        "def __init__(self):\n        super().__init__()\n        self.blocks", "def __init__(self, Block=Block):\n"
        "        super().__init__()\n        self.blocks")}, ADD),
    # built but not held by Net: a throw-away instance
    ({"model.py": _model("        Block()\n        self.lin = nn.Linear(4, 4)\n")}, ADD),
    # the program compiles another class, which builds no Block
    ({"train.py": TRAIN.replace("Net", "Other"),
      "model.py": LIST + "\n\nclass Other(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                         "        self.lin = nn.Linear(4, 4)\n"}, ADD),
    # the program compiles a class of another file that builds a Block of its own, of the same name
    ({"train.py": TRAIN.replace("from model import Net", "from other import Net"), "other.py": LIST}, ADD),
    # Net builds the blocks, but nothing compiles Net
    ({"train.py": "from model import Net\n\n\ndef main():\n    return Net()\n"}, ADD),
])
def test_what_is_not_refused(tmp_path, capsys, files, actions):
    _rewrite(tmp_path, capsys, {"model.py": LIST, "train.py": TRAIN, **files}, actions, 0)
    if ADD in actions:  # the plan's compile of Block is written
        model = (tmp_path / "src" / "model.py").read_text()
        assert "    @torch.compile\n    def forward(self, x):\n        return torch.relu" in model, model


def test_classes_that_build_each_other_end(tmp_path, capsys):
    """A cycle of constructions (A builds B, B builds A, which would recurse at run time) is read
    once each: the reading ends, and the Block one of them builds is enclosed by both."""
    cycle = ("class A(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.b = B()\n\n\n"
             "class B(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.a = A()\n"
             "        self.blocks = nn.ModuleList([Block()])\n\n\n")
    model = _model("        self.a = A()\n", extra=cycle)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, ADD, 2)
    assert "Net.__init__ builds A at model.py:" in err and "A.__init__ builds B" in err and "B.__init__ builds Block" in err, err
    train = TRAIN.replace("Net", "A")
    _rewrite(tmp_path, capsys, {"model.py": model, "train.py": train}, ADD, 2)


def test_the_reading_parses_only_files_that_build_the_class(tmp_path, monkeypatch):
    """SRC's files are read as text once; only those whose text calls the class (or imports it
    under another name) and is its file or names its module are parsed, each once for every class
    asked about."""
    from rewriter.rewrite import enclosing
    from rewriter.rewrite.program_compiles import ProgramCompiles

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(LIST)
    (src / "train.py").write_text(TRAIN)
    for i in range(20):
        (src / f"other{i}.py").write_text(f"import torch.nn as nn\n\n\nclass Other{i}(nn.Module):\n    pass\n")
    (src / "same_name.py").write_text(LIST)  # its own Block, called, in a file that never names model.py
    parsed: list[str] = []
    parse = enclosing.Enclosing._constructions

    def counted(self, rel):  # noqa: ANN001, ANN202
        if rel not in self._built:
            parsed.append(rel)
        return parse(self, rel)

    monkeypatch.setattr(enclosing.Enclosing, "_constructions", counted)
    reading = ProgramCompiles(src)
    assert sorted(reading.enclosers(("model.py", "Block"))) == [("model.py", "Net")]
    assert reading.enclosers(("model.py", "Net")) == {}
    assert parsed == ["model.py", "train.py"], parsed  # train.py calls Net(); the other files call neither


REGIONAL = "  - {action: compile, target: train.py::main, strategy: region, own_call: {regional: blocks}}\n"


def test_a_block_compiled_by_the_plan_and_by_a_regional_loop_gets_its_graphs_from_one_only():
    """What the refusal below rests on (CPU torch, :class:`torch._dynamo.testing.CompileCounter`):
    the same ``Block`` instances compiled by the plan (``@torch.compile`` on ``Block.forward``) and
    by the program's call turned regional (``block.compile()`` on each): the decorator gets every
    frame, the loop's compile none. With the plan's compile on a class inside the regional blocks
    (``Layer`` compiled in place, ``Layer.__init__`` builds the ``Block``), the reverse: the loop's
    compile traces the decorated ``Block.forward`` and inlines it, and the decorator gets none."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, loop = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
    layer = ("class Layer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n"
             "    def forward(self, x):\n        return self.block(x) + 1\n")
    exec(compile(f"{block}\n\n{layer}", "pinned_blocks.py", "exec"), namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
        blocks = torch.nn.ModuleList([namespace["Block"]() for _ in range(2)])
        for each in blocks:
            each.compile(backend=loop)
        x = torch.randn(2, 4)
        for each in blocks:
            x = each(x)
        assert plan.frame_count > 0 and loop.frame_count == 0, (plan.frame_count, loop.frame_count)
        plan.clear()
        torch._dynamo.reset()
        layers = torch.nn.ModuleList([namespace["Layer"]() for _ in range(2)])
        for each in layers:
            each.compile(backend=loop)
        for each in layers:
            x = each(x)
        assert plan.frame_count == 0 and loop.frame_count > 0, (plan.frame_count, loop.frame_count)
    torch._dynamo.reset()


@pytest.mark.parametrize("plan, line, at, other", [
    (REGIONAL + ADD, 4, 1, 0),
    (REGIONAL + "  - {action: compile, target: model.py::Block.forward}\n", 4, 1, 0),
    (ADD + REGIONAL, 3, 0, 1),  # the compile of Block first: refused at it all the same
])
def test_a_compile_of_the_blocks_a_regional_edit_compiles_is_refused_naming_both(tmp_path, capsys, plan, line, at,
                                                                                   other):
    err = _rewrite(tmp_path, capsys, {"model.py": LIST, "train.py": TRAIN}, plan, 2)
    assert (f"plan.yaml:{line}: actions[{at}] (compile model.py::Block"
            f"{'.forward' if 'Block.forward' in plan else ''}): compile of Block: actions[{other}] "
            f"({tmp_path / 'plan.yaml'}:{4 if other else 3}) own_call.regional: blocks turns train.py::main's compile "
            "(torch.compile(Net())) into a compile of each Block of Net.blocks in place (Net.__init__ builds Block at "
            "model.py:17: self.blocks = nn.ModuleList([Block() for _ in range(2)])), and this action compiles Block "
            "too: each block is compiled twice, and this action's decorated Block.forward receives every graph while "
            "the loop's block.compile() receives none") in err, err
    assert (f"keep one: the regional edit of actions[{other}] (drop this action: the program's call then compiles "
            f"each Block in place), or this action (turn the program's call off in actions[{other}]: own_call: "
            "{disable: true} instead of regional)") in err, err


def test_a_compile_of_a_block_inside_the_regional_blocks_is_refused(tmp_path, capsys):
    layer = ("class Layer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n"
             "    def forward(self, x):\n        return self.block(x)\n\n\n")
    model = _model("        self.blocks = nn.ModuleList([Layer() for _ in range(2)])\n", extra=layer)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, REGIONAL + ADD, 2)
    assert ("plan.yaml:4: actions[1] (compile model.py::Block): compile of Block: actions[0] "
            f"({tmp_path / 'plan.yaml'}:3) own_call.regional: blocks turns train.py::main's compile "
            "(torch.compile(Net())) into a compile of each Layer of Net.blocks in place, and Layer encloses Block (Net.__init__ builds Layer at model.py:") in err, err
    assert ("Dynamo traces Block.forward inside each Layer's compile and inlines it, so this compile and its options "
            "would never be used") in err, err
    assert "keep the regional edit of actions[0]: drop this action" in err, err


@pytest.mark.parametrize("model", [
    # the plan's Block is held outside the container the loop walks
    _model("        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])\n        self.head = Block()\n"),
    # the program compiles another class, which builds no Block
    LIST.replace("class Net(", "class Unused(") + "\n\nclass Net(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n        self.blocks = nn.ModuleList([nn.Linear(4, 4)])\n",
])
def test_a_compile_of_a_block_the_regional_loop_does_not_walk_is_written(tmp_path, capsys, model):
    _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, REGIONAL + ADD, 0)
    assert "    @torch.compile\n    def forward(self, x):\n        return torch.relu" in (tmp_path / "src" / "model.py").read_text()


@pytest.mark.parametrize("subclass, where", [
    # no __init__ of its own: Net's runs
    ("class MyNet(Net):\n    pass\n", "model.py"),
    # its own __init__ runs Net's first
    ("class MyNet(Net):\n    def __init__(self):\n        super().__init__()\n        self.scale = 2\n", "model.py"),
    # in another file, the base imported under another name
    ("from model import Net as Base\n\n\nclass MyNet(Base):\n    def forward(self, x):\n        return x\n", "mynet.py"),
])
def test_a_subclass_that_inherits_the_init_that_builds_the_blocks_encloses_them(tmp_path, capsys, subclass, where):
    files = {"model.py": LIST, "train.py": TRAIN.replace("from model import Net", f"from {where[:-3]} import MyNet")
             .replace("Net()", "MyNet()")}
    if where == "model.py":
        files["model.py"] = LIST + "\n\n" + subclass
    else:
        files[where] = subclass
    err = _rewrite(tmp_path, capsys, files, ADD, 2)
    assert ("compile of Block: the program compiles an instance of MyNet whole itself, at train.py:6: "
            "torch.compile(MyNet()), and MyNet encloses Block: MyNet inherits Net.__init__; Net.__init__ builds Block "
            "at model.py:17: self.blocks = nn.ModuleList([Block() for _ in range(2)])") in err, err
    assert "own_call: {regional: blocks}" in err, err


@pytest.mark.parametrize("subclass", [
    # its own __init__ does not run Net's: it builds no Block
    "class MyNet(Net):\n    def __init__(self):\n        nn.Module.__init__(self)\n        self.lin = nn.Linear(4, 4)\n",
    # a mixin before Net whose own __init__ does not call super().__init__: Net's never runs
    "class Mixin:\n    def __init__(self):\n        self.scale = 2\n\n\nclass MyNet(Mixin, Net):\n    pass\n",
    # a mixin of an installed library before Net: what its __init__ does is not read
    "from collections import OrderedDict\n\n\nclass MyNet(OrderedDict, Net):\n    pass\n",
    # a mixin whose own base is a class of SRC: the order __init__s run in is not read
    "class Base:\n    def __init__(self):\n        pass\n\n\nclass Mixin(Base):\n    pass\n\n\n"
    "class MyNet(Mixin, Net):\n    pass\n",
])
def test_a_subclass_that_does_not_surely_run_the_init_that_builds_the_blocks_is_not_refused(tmp_path, capsys, subclass):
    train = TRAIN.replace("from model import Net", "from model import MyNet").replace("Net()", "MyNet()")
    _rewrite(tmp_path, capsys, {"model.py": LIST + "\n\n" + subclass, "train.py": train}, ADD, 0)


MIXINS = {
    "a mixin without an __init__": "class Mixin:\n    pass\n",
    "a cooperative one": "class Mixin(nn.Module):\n    def __init__(self, *args, **kwargs):\n"
                         "        super().__init__(*args, **kwargs)\n        self.scale = 2\n",
}


def test_a_second_base_whose_init_builds_the_blocks_runs_it_and_inlines_the_decorated_forward():
    """What the refusal of ``class MyNet(Mixin, Net)`` rests on (CPU torch, CompileCounter): the
    mixin has no ``__init__`` of its own, or one that calls ``super().__init__()``, so ``MyNet()``
    runs ``Net.__init__`` (the method resolution order); with ``MyNet`` compiled whole the decorator
    on ``Block.forward`` gets no frame."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    for mixin in MIXINS.values():
        plan, whole = CompileCounter(), CompileCounter()
        namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan}
        block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
        net = LIST.replace(BLOCK, block).replace(HEAD, "").replace("self.children()", "self.blocks")
        code = f"{net}\n\n{mixin}\n\nclass MyNet(Mixin, Net):\n    pass\n"
        exec(compile(code, "pinned_mixin.py", "exec"), namespace)
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(namespace["MyNet"](), backend=whole)(torch.randn(2, 4))
        assert (plan.frame_count, whole.frame_count) == (0, 1), mixin
    torch._dynamo.reset()


@pytest.mark.parametrize("mixin", list(MIXINS.values()), ids=list(MIXINS))
@pytest.mark.parametrize("where", ["model.py", "mixins.py"])
def test_a_subclass_whose_init_building_base_comes_after_a_mixin_encloses_the_blocks(tmp_path, capsys, mixin, where):
    sub = "\n\nclass MyNet(Mixin, Net):\n    pass\n"
    train = TRAIN.replace("from model import Net", "from model import MyNet").replace("Net()", "MyNet()")
    files = {"train.py": train}
    if where == "model.py":
        files["model.py"] = LIST + "\n\n" + mixin + sub
    else:
        files["model.py"] = LIST.replace(HEAD, HEAD + "from mixins import Mixin\n\n\n") + sub
        files[where] = "import torch.nn as nn\n\n\n" + mixin
    err = _rewrite(tmp_path, capsys, files, ADD, 2)
    assert ("the program compiles an instance of MyNet whole itself, at train.py:6: torch.compile(MyNet()), and "
            "MyNet encloses Block: MyNet inherits Net.__init__; Net.__init__ builds Block at model.py:") in err, err


def test_a_subclass_that_inherits_the_decorated_forward_after_a_mixin_is_refused(tmp_path, capsys):
    heir = "class Mixin:\n    pass\n\n\nclass BigBlock(Mixin, Block):\n    pass\n\n\n"
    model = _model("        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n", extra=heir)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, ADD, 2)
    assert "and Net encloses BigBlock, a subclass of Block that inherits its forward" in err, err


def test_classes_that_name_each_other_as_base_end(tmp_path, capsys):
    """A cycle of bases (which Python would refuse at import) is read once each: the reading ends,
    and the subclass that inherits the ``__init__`` that builds the blocks encloses them."""
    cycle = ("class A(B):\n    def __init__(self):\n        super().__init__()\n"
             "        self.blocks = nn.ModuleList([Block()])\n\n\nclass B(A):\n    pass\n")
    model = HEAD + BLOCK + "\n\n" + cycle
    train = TRAIN.replace("Net", "B")
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": train}, ADD, 2)
    assert "B encloses Block: B inherits A.__init__; A.__init__ builds Block at model.py:" in err, err


GENERATE = LIST.replace("        return x\n", "        return x\n\n    def generate(self, x, steps: int = 3):\n"
                        "        for _ in range(steps):\n            for block in self.blocks:\n                x = block(x)\n"
                        "        return x\n", 1)

SAMPLE = TRAIN.replace("return model(torch.randn(3, 4))", "return model.generate(torch.randn(3, 4))")


def test_a_compiled_block_runs_compiled_where_the_step_calls_another_method_of_the_wrapper():
    """What the exception rests on (CPU torch, counting backends): ``torch.compile(Net())``
    compiles ``forward`` only, so ``model.generate(x)`` runs the wrapped ``Net`` eager and the
    decorated ``Block.forward`` compiles frames of its own; the whole-model compile gets none."""
    import torch
    from torch._dynamo.testing import CompileCounter

    plan_backend, program_backend = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan_backend}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
    exec(compile(GENERATE.replace(BLOCK, block).replace(HEAD, ""), "pinned_generate.py", "exec"), namespace)
    torch._dynamo.reset()
    model = torch.compile(namespace["Net"](), backend=program_backend)
    with torch.no_grad():
        model.generate(torch.randn(3, 4))
    assert program_backend.frame_count == 0 and plan_backend.frame_count >= 1, (program_backend.frame_count, plan_backend.frame_count)
    torch._dynamo.reset()


@pytest.mark.parametrize(("call", "code"), [("generate", 0), ("forward", 2), (None, 2)])
def test_a_compile_of_a_block_is_written_where_the_plans_harness_calls_another_method(tmp_path, capsys, call, code):
    """The plan's ``harness.call: generate`` declares a workload the whole-model compile does not
    run: the compile of ``Block`` is written; with ``call: forward`` or none it is refused."""
    from rewriter.cli import main
    from rewrite_tree import tree_bytes

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(GENERATE)
    (src / "train.py").write_text(SAMPLE)
    before = tree_bytes(src)
    harness = f"harness: {{file: train.py{', call: ' + call if call else ''}}}\n"
    (tmp_path / "plan.yaml").write_text("version: 1\n" + harness + "actions:\n" + ADD)
    capsys.readouterr()
    got = main(["rewrite", "--plan", str(tmp_path / "plan.yaml"), str(src), "--apply", "--no-validate"])
    err = " ".join(capsys.readouterr().err.split())
    assert got == code, err
    if code == 2:
        assert tree_bytes(src) == before and "Net encloses Block" in err, err
    else:
        assert "    @torch.compile\n    def forward(self, x):\n        return torch.relu" in (src / "model.py").read_text()


def test_a_subclass_that_inherits_the_decorated_forward_inlines_it_too():
    """What the refusal of a subclass rests on (CPU torch, CompileCounter): ``BigBlock(Block)``
    without a ``forward`` of its own runs ``Block.forward``; built by ``Net`` and ``Net`` compiled
    whole, the decorator on ``Block.forward`` gets no frame, and with ``Net``'s compile off it does."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, whole = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
    net = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n\n"
           "    def forward(self, x):\n        for block in self.blocks:\n            x = block(x)\n        return x\n")
    exec(compile(f"{block}\n\nclass BigBlock(Block):\n    pass\n\n\n{net}", "pinned_heir.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(namespace["Net"](), backend=whole)(torch.randn(2, 4))
        assert (plan.frame_count, whole.frame_count) == (0, 1)
        torch._dynamo.reset()
        namespace["Net"]()(torch.randn(2, 4))
    assert plan.frame_count > 0
    torch._dynamo.reset()


HEIR = "class BigBlock(Block):\n    pass\n\n\n"


@pytest.mark.parametrize("target", ["model.py::Block", "model.py::Block.forward"])
def test_a_compile_of_a_class_whose_subclass_net_builds_is_refused_naming_the_subclass(tmp_path, capsys, target):
    model = _model("        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n", extra=HEIR)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, f"  - {{action: compile, target: {target}}}\n", 2)
    assert (f"actions[0] (compile {target}): compile of Block: the program compiles an instance of Net whole itself, "
            "at train.py:6: torch.compile(Net()), and Net encloses BigBlock, a subclass of Block that inherits its "
            "forward: Net.__init__ builds BigBlock at model.py:21: self.blocks = nn.ModuleList([BigBlock() for _ in "
            "range(2)]); Dynamo traces Block.forward inside that compile") in err, err


def test_a_subclass_with_a_forward_of_its_own_is_not_refused(tmp_path, capsys):
    heir = "class BigBlock(Block):\n    def forward(self, x):\n        return x\n\n\n"
    model = _model("        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n", extra=heir)
    _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, ADD, 0)


def test_a_subclass_that_inherits_the_decorated_forward_gets_the_graphs_of_a_regional_loop_over_it():
    """What the refusal below rests on (CPU torch, CompileCounter): ``BigBlock(Block)`` without a
    ``forward`` of its own, held in ``Net.blocks``, each compiled in place by the regional loop
    (``block.compile()``): the plan's decorator on ``Block.forward`` gets every frame, the loop's
    compile none, as for ``Block`` itself."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, loop = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
    net = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n\n"
           "    def forward(self, x):\n        for block in self.blocks:\n            x = block(x)\n        return x\n")
    exec(compile(f"{block}\n\n{HEIR}{net}", "pinned_heir_regional.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = namespace["Net"]()
        for each in model.blocks:  # own_call: {regional: blocks}
            each.compile(backend=loop)
        model(torch.randn(2, 4))
    assert plan.frame_count > 0 and loop.frame_count == 0, (plan.frame_count, loop.frame_count)
    torch._dynamo.reset()


@pytest.mark.parametrize("target", ["model.py::Block", "model.py::Block.forward"])
def test_a_compile_of_a_class_whose_subclass_the_regional_loop_walks_is_refused_naming_the_subclass(
        tmp_path, capsys, target):
    model = _model("        self.blocks = nn.ModuleList([BigBlock() for _ in range(2)])\n", extra=HEIR)
    plan = REGIONAL + f"  - {{action: compile, target: {target}}}\n"
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, plan, 2)
    assert (f"plan.yaml:4: actions[1] (compile {target}): compile of Block: actions[0] ({tmp_path / 'plan.yaml'}:3) "
            "own_call.regional: blocks turns train.py::main's compile (torch.compile(Net())) into a compile of each "
            "BigBlock of Net.blocks in place (Net.__init__ builds BigBlock at model.py:21: self.blocks = "
            "nn.ModuleList([BigBlock() for _ in range(2)])), and this action compiles Block, whose forward BigBlock "
            "inherits: each block is compiled twice, and this action's decorated Block.forward receives every graph "
            "while the loop's block.compile() receives none") in err, err


def test_a_compile_of_a_class_whose_subclass_a_regional_layer_builds_is_refused(tmp_path, capsys):
    layer = ("class Layer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = BigBlock()\n\n"
             "    def forward(self, x):\n        return self.block(x)\n\n\n")
    model = _model("        self.blocks = nn.ModuleList([Layer() for _ in range(2)])\n", extra=HEIR + layer)
    err = _rewrite(tmp_path, capsys, {"model.py": model, "train.py": TRAIN}, REGIONAL + ADD, 2)
    assert ("into a compile of each Layer of Net.blocks in place, and Layer encloses BigBlock, a subclass of Block "
            "that inherits its forward (Net.__init__ builds Layer at model.py:") in err, err
    assert "Dynamo traces Block.forward inside each Layer's compile and inlines it" in err, err


BUILD = """\
    def build(self, n):
        self.blocks = nn.ModuleList([Block() for _ in range(n)])

"""
BUILT = _model("        self.build(2)\n").replace("    def forward(self, x):\n        for", BUILD + "    def forward(self, x):\n        for").replace(
    "self.children()", "self.blocks")


def test_blocks_built_in_a_method_init_calls_are_inlined_into_the_whole_compile_too():
    """What the refusal below rests on (CPU torch, CompileCounter): ``Net.__init__`` calls
    ``self.build(2)``, whose body builds the blocks; with ``Net`` compiled whole the decorated
    ``Block.forward`` gets no frame, as where ``__init__`` builds them itself."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    plan, whole = CompileCounter(), CompileCounter()
    namespace = {"torch": torch, "nn": torch.nn, "plan_backend": plan}
    block = BLOCK.replace("    def forward", "    @torch.compile(backend=plan_backend)\n    def forward")
    exec(compile(BUILT.replace(BLOCK, block).replace(HEAD, ""), "pinned_build.py", "exec"), namespace)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(namespace["Net"](), backend=whole)(torch.randn(2, 4))
    assert (plan.frame_count, whole.frame_count) == (0, 1), (plan.frame_count, whole.frame_count)
    torch._dynamo.reset()


def test_a_block_a_method_init_calls_builds_is_refused_naming_the_method(tmp_path, capsys):
    err = _rewrite(tmp_path, capsys, {"model.py": BUILT, "train.py": TRAIN}, ADD, 2)
    assert ("compile of Block: the program compiles an instance of Net whole itself, at train.py:6: "
            "torch.compile(Net()), and Net encloses Block: Net.__init__ builds Block through self.build() at "
            "model.py:20: self.blocks = nn.ModuleList([Block() for _ in range(n)]); Dynamo traces Block.forward "
            "inside that compile and inlines it") in err, err
    assert "own_call: {regional: blocks}" in err, err


@pytest.mark.parametrize("sub", [
    # the subclass overrides the method Net.__init__ calls: its instance runs the override, which builds no Block
    "class Sub(Net):\n    def build(self, n):\n        self.lin = nn.Linear(4, 4)\n",
    # a mixin before Net that defines it
    "class Mixin:\n    def build(self, n):\n        self.lin = nn.Linear(4, 4)\n\n\nclass Sub(Mixin, Net):\n    pass\n",
])
def test_a_subclass_that_overrides_the_method_that_builds_the_blocks_is_not_refused(tmp_path, capsys, sub):
    train = TRAIN.replace("from model import Net", "from model import Sub").replace("Net()", "Sub()")
    _rewrite(tmp_path, capsys, {"model.py": BUILT + "\n\n" + sub, "train.py": train}, ADD, 0)


def test_a_subclass_that_inherits_init_and_the_method_is_refused(tmp_path, capsys):
    train = TRAIN.replace("from model import Net", "from model import Sub").replace("Net()", "Sub()")
    err = _rewrite(tmp_path, capsys, {"model.py": BUILT + "\n\nclass Sub(Net):\n    pass\n", "train.py": train}, ADD, 2)
    assert "Sub encloses Block: Sub inherits Net.__init__; Net.__init__ builds Block through self.build() at model.py:20" \
        in err, err
