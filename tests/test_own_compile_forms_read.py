"""Forms of a program's own compile that the rewrite's reading of SRC
(:class:`rewriter.rewrite.program_compiles.ProgramCompiles`) and diagnose's
(:func:`rewriter.diagnose.own_compile.own_compiles`) read as the program's compile:

* a whole-model compile under ``if __name__ == "__main__":`` of a model built there, or built by a
  factory function of the same file (``model = build(); model = torch.compile(model)``), or of the
  model's own file, imported (``from model import build``);
* ``net = net.eval()`` (``.to(device)``, ``.train()``, ...: methods that return the module itself)
  before or after the compile, which keeps the binding;
* a per-layer loop that compiles through a helper of the same file, one call deep
  (``for layer in model.layers: compile_layer(layer)``), or over ``self.<container>`` in a method
  of the model's class.

Each is refused beside a plan compile of the class it compiles, exit 2, nothing written, as the
same compile written in the forms read before is; the premise of each (what compiles at run time)
is pinned on CPU torch with :class:`torch._dynamo.testing.CompileCounter`.
"""

from __future__ import annotations

import warnings

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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)
"""

ADD_NET = "  - {action: compile, target: model.py::Net}\n"
ADD_BLOCK = "  - {action: compile, target: model.py::Block}\n"


def _run(code: str, namespace: dict) -> None:
    """Exec ``code`` (MODEL and a program) as a script run as ``__main__`` runs it (its ``if __name__
    == "__main__":`` block taken: Dynamo reads a frame's globals through ``sys.modules[__name__]``,
    which an exec'd ``__main__`` is not), Dynamo reset around it."""
    import torch

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code.replace('if __name__ == "__main__":', "if True:"), "pinned_program.py", "exec"), namespace)
    torch._dynamo.reset()


def _with_plan_decorator(cls: str) -> str:
    """MODEL with the plan's ``@torch.compile(backend=plan_backend)`` on ``cls.forward``."""
    head = "class Block(nn.Module):" if cls == "Block" else "class Net(nn.Module):"
    before, after = MODEL.split(head)
    return before + head + after.replace("    def forward(self, x):",
                                         "    @torch.compile(backend=plan_backend)\n    def forward(self, x):", 1)


# --- a whole-model compile under the main guard, of a model a factory builds ------------------------

FACTORY = "\n\ndef build():\n    model = Net()\n    model = model.eval()\n    return model\n"
WHOLE = {
    "built in the guard": ("import torch\nfrom model import Net\n\nif __name__ == \"__main__\":\n    model = Net()\n"
                           "    model = torch.compile(model)\n    model(torch.randn(3, 4))\n", "train.py:6"),
    "built by a factory, compiled in the guard": (
        "import torch\nfrom model import Net\n" + FACTORY + "\n\nif __name__ == \"__main__\":\n    model = build()\n"
        "    model = torch.compile(model)\n    model(torch.randn(3, 4))\n", "train.py:13"),
    "a factory that returns the call": (
        "import torch\nfrom model import Net\n\n\ndef build():\n    return Net()\n\n\nif __name__ == \"__main__\":\n"
        "    model = build()\n    model.compile()\n", "train.py:11"),
    "built by a factory at the top level": (
        "import torch\nfrom model import Net\n" + FACTORY + "\n\nmodel = build()\nmodel = torch.compile(model)\n"
        "model(torch.randn(3, 4))\n", "train.py:12"),
    # the factory in the model's file, imported (model.py with FACTORY appended: rewrite_files' MODEL_WITH_BUILD)
    "a factory imported from the model's file": (
        "import torch\nfrom model import build\n\nif __name__ == \"__main__\":\n    model = build()\n"
        "    model = torch.compile(model)\n", "train.py:6"),
    "a factory imported under an alias, compiled in a function": (
        "import torch\nfrom model import build as make\n\n\ndef main():\n    model = torch.compile(make())\n"
        "    return model\n", "train.py:6"),
    # torch.compile bound to another name: the file writes no ``compile(`` at all
    "compiled through an import alias": (
        "import torch\nfrom torch import compile as tc\nfrom model import Net\n\nmodel = tc(Net())\n"
        "model(torch.randn(3, 4))\n", "train.py:5"),
}


def test_a_compile_in_the_main_guard_of_a_factorys_model_inlines_the_plans_decorator():
    """The premise (CPU torch, CompileCounter): the script run as ``__main__`` compiles the model its
    factory builds whole, and Dynamo inlines the plan's decorated ``Net.forward`` into that compile:
    the plan's compile receives no frame."""
    from torch._dynamo.testing import CompileCounter

    plan, program = CompileCounter(), CompileCounter()
    script = WHOLE["built by a factory, compiled in the guard"][0].split("\n", 2)[2]
    code = _with_plan_decorator("Net") + script.replace("torch.compile(model)", "torch.compile(model, backend=program_backend)")
    _run(code, {"plan_backend": plan, "program_backend": program})
    assert (plan.frame_count, program.frame_count >= 1) == (0, True), (plan.frame_count, program.frame_count)


@pytest.mark.parametrize("train, where", list(WHOLE.values()), ids=list(WHOLE))
def test_a_whole_model_compile_in_the_main_guard_or_of_a_factorys_model_is_read(tmp_path, capsys, train, where):
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL + FACTORY, "train.py": train}, ADD_NET, 2)
    assert f"compile of Net: the program compiles an instance of it whole itself, at {where}:" in err, err
    assert "Dynamo traces Net.forward inside that compile and inlines it" in err, err


@pytest.mark.parametrize("train", [
    # a factory that passes its argument through: its class is the caller's, not read
    "import torch\nfrom model import Net\n\n\ndef build(m):\n    return m\n\n\nif __name__ == \"__main__\":\n"
    "    model = build(Net)\n    model = torch.compile(model)\n",
    # a factory of two classes: which one the program compiles is not read
    "import torch\nfrom model import Net, Block\n\n\ndef build(big):\n    if big:\n        return Net()\n"
    "    return Block()\n\n\nmodel = build(True)\nmodel = torch.compile(model)\n",
    # a factory that calls a factory: followed one call deep only
    "import torch\nfrom model import Net\n\n\ndef make():\n    return Net()\n\n\ndef build():\n    return make()\n\n\n"
    "model = build()\nmodel = torch.compile(model)\n",
    # a factory of another file that returns a class of a third file: not read
    "import torch\nfrom factory import build_other\n\nmodel = torch.compile(build_other())\n",
])
def test_a_factory_that_does_not_say_its_class_is_not_read(tmp_path, capsys, train):
    other = "from model import Net\n\n\ndef build_other():\n    return Net()\n"
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "factory.py": other, "train.py": train}, ADD_NET, 0)


# --- methods that return the module itself keep the binding ----------------------------------------

SELF_RETURNING = {
    "eval before": "    net = Net()\n    net = net.eval()\n    net = torch.compile(net)\n",
    "to(device) before, compiled in place": "    net = Net()\n    net = net.to(device).train()\n    net.compile()\n",
    "eval after": "    net = Net()\n    net = torch.compile(net)\n    net = net.eval()\n",
    "train after a compile of the call": "    net = torch.compile(Net())\n    net = net.train()\n",
}


def _main(body: str) -> str:
    return ("import torch\nfrom model import Net\n\n\ndef main(device=\"cpu\"):\n" + body
            + "    return net(torch.randn(3, 4))\n")


@pytest.mark.parametrize("method", ["eval", "train", "to", "float"])
def test_methods_that_return_the_module_keep_the_compiled_wrapper(method):
    """The premise (CPU torch, CompileCounter): ``net.eval()`` (``train``, ``to``, ``float``, and
    ``half``, ``cuda`` alike: nn.Module's ``return self``) on torch.compile's wrapper returns that
    wrapper, which still compiles; on the module before the compile, the module itself."""
    import torch
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    namespace: dict = {}
    exec(compile(MODEL, "pinned_model.py", "exec"), namespace)
    net = namespace["Net"]()
    args = ("cpu",) if method == "to" else ()
    assert getattr(net, method)(*args) is net and net.half() is net
    net.float()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(net, backend=counter)
        again = getattr(compiled, method)(*args)
        assert again is compiled
        again(torch.randn(3, 4))
    assert counter.frame_count >= 1, counter.frame_count
    torch._dynamo.reset()


@pytest.mark.parametrize("body", list(SELF_RETURNING.values()), ids=list(SELF_RETURNING))
def test_a_self_returning_rebinding_keeps_the_programs_compile_read(tmp_path, capsys, body):
    """Read by the rewrite (a plan compile of ``Net`` is refused) and by diagnose (what the
    compile covers is class ``Net``, not unknown)."""
    from rewriter.diagnose.own_compile import own_compiles

    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _main(body)}, ADD_NET, 2)
    assert "compile of Net: the program compiles an instance of it whole itself, at train.py:" in err, err
    [own] = [o for o in own_compiles(tmp_path / "src") if o.where.startswith("train.py")]
    assert (own.covers, own.idle) == (("class", "Net"), None), own


def test_a_helper_that_puts_its_parameter_in_eval_mode_is_read_through_its_callers(tmp_path, capsys):
    """``def maybe_compile(model): model = model.eval(); return torch.compile(model)`` compiles its
    parameter: ``own_call: {regional: blocks}`` is checked against what its callers pass (here a
    Net that sets no ``blocks``: the loop would raise AttributeError), not written unread."""
    helper = ("import torch\nfrom model import Net\n\n\ndef maybe_compile(model):\n    model = model.eval()\n"
              "    return torch.compile(model)\n\n\ndef main():\n    return maybe_compile(Net())\n")
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": helper},
                        "  - {action: compile, target: train.py::maybe_compile, own_call: {regional: blocks}}\n", 2)
    assert "maybe_compile compiles its parameter model" in err and "sets no attribute 'blocks'" in err, err


# --- per-layer loops through a helper, and over self in a method of the model's class --------------

HELPER_IN_PLACE = "\n\ndef compile_layer(l):\n    l.compile()\n"
HELPER_WRAPS = "\n\ndef compile_layer(l):\n    return torch.compile(l)\n"
LOOPS = {
    "helper in place": ("import torch\nfrom model import Net\n" + HELPER_IN_PLACE + "\n\ndef build():\n    model = Net()\n"
                        "    for layer in model.layers:\n        compile_layer(layer)\n    return model\n",
                        "train.py:12: compile_layer(layer), through compile_layer's l.compile() at train.py:6",
                        "receives every graph while the loop's compile receives none", "train.py::compile_layer"),
    "helper whose wrapper is assigned back": (
        "import torch\nfrom model import Net\n" + HELPER_WRAPS + "\n\nif __name__ == \"__main__\":\n    model = Net()\n"
        "    for i, layer in enumerate(model.layers):\n        model.layers[i] = compile_layer(layer)\n",
        "train.py:12: compile_layer(layer), through compile_layer's torch.compile(l) at train.py:6",
        "the loop's torch.compile wrapper traces it and inlines it", "train.py::compile_layer"),
}
#: a method of the model's class that compiles its own blocks (GPT-2's ``self.h``)
METHOD = ("    def compile_blocks(self):\n        for block in self.h:\n            block.compile()\n\n"
          "    def forward(self, x):\n        for layer in self.layers:")


def test_loops_through_a_helper_or_a_method_compile_each_block_in_place():
    """The premise (CPU torch, CompileCounter): a loop that calls a helper compiling its parameter
    in place, or a method of the model looping over ``self.h``, compiles each block as the loop
    written inline does: the plan's decorated ``Block.forward`` gets every frame, the loop's none;
    the helper's wrapper assigned back traces and inlines the decorated forward instead."""
    from torch._dynamo.testing import CompileCounter

    model = _with_plan_decorator("Block").replace("        self.head = nn.Linear(4, 4)\n",
                                                  "        self.head = nn.Linear(4, 4)\n        self.h = self.layers\n")
    model = model.replace("    def forward(self, x):\n        for layer in self.layers:",
                          METHOD.replace("block.compile()", "block.compile(backend=program_backend)"))
    programs = {
        "in place": HELPER_IN_PLACE.replace("l.compile()", "l.compile(backend=program_backend)")
                    + "\nmodel = Net()\nfor layer in model.layers:\n    compile_layer(layer)\nmodel(torch.randn(3, 4))\n",
        "method": "\nmodel = Net()\nmodel.compile_blocks()\nmodel(torch.randn(3, 4))\n",
        "wrapper": HELPER_WRAPS.replace("torch.compile(l)", "torch.compile(l, backend=program_backend)")
                   + "\nmodel = Net()\nfor i, layer in enumerate(model.layers):\n    model.layers[i] = compile_layer(layer)\n"
                     "model(torch.randn(3, 4))\n",
    }
    for name, program in programs.items():
        plan, counted = CompileCounter(), CompileCounter()
        _run(model + program, {"plan_backend": plan, "program_backend": counted})
        counts = (plan.frame_count, counted.frame_count)
        assert (counts[0] == 0 and counts[1] >= 2) if name == "wrapper" else (counts[0] >= 2 and counts[1] == 0), \
            (name, counts)


@pytest.mark.parametrize("train, at, dead, target", list(LOOPS.values()), ids=list(LOOPS))
def test_a_per_layer_loop_through_a_helper_is_read_as_the_programs_loop(tmp_path, capsys, train, at, dead, target):
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD_BLOCK, 2)
    assert f"compile of Block: the program compiles each Block of Net.layers in place itself, in a loop at {at} " \
           "(Net.__init__ builds Block at model.py:17" in err, err
    assert dead in err and f"turn the loop's compile off (action compile, target {target}, own_call: {{disable: true}})" \
        in err, err


def test_the_helpers_compile_turned_off_as_the_refusal_says_lets_the_plans_compile_through(tmp_path, capsys):
    plan = ("  - {action: compile, target: train.py::compile_layer, strategy: whole, own_call: {disable: true}}\n"
            + ADD_BLOCK)
    train = LOOPS["helper in place"][0]
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, plan, 0)
    assert "    l.compile(disable=True)\n" in (tmp_path / "src" / "train.py").read_text()


def test_a_loop_over_self_in_a_method_of_the_model_is_read(tmp_path, capsys):
    """``Net.compile_blocks`` loops over ``self.h`` (GPT-2's name for its blocks): the instance is
    the method's class, read as a loop over ``model.h`` with ``model = Net()`` is."""
    model = MODEL.replace("        self.head = nn.Linear(4, 4)\n",
                          "        self.head = nn.Linear(4, 4)\n        self.h = nn.ModuleList([Block()])\n")
    model = model.replace("    def forward(self, x):\n        for layer in self.layers:", METHOD)
    err = rewrite_files(tmp_path, capsys, {"model.py": model}, ADD_BLOCK, 2)
    assert ("compile of Block: the program compiles each Block of Net.h in place itself, in a loop at model.py:23: "
            "block.compile() (Net.__init__ builds Block at model.py:19: self.h = nn.ModuleList([Block()]))") in err, err
    assert "turn the loop's compile off (action compile, target model.py::Net.compile_blocks, own_call: {disable: true})" \
        in err, err


@pytest.mark.parametrize("train", [
    # the helper's wrappers kept in a container of the program's own: the model's blocks are not replaced
    "import torch\nfrom model import Net\n" + HELPER_WRAPS + "\n\ndef build():\n    model = Net()\n    fast = {}\n"
    "    for i, layer in enumerate(model.layers):\n        fast[i] = compile_layer(layer)\n    return model, fast\n",
    # the helper given something other than what the loop walks
    "import torch\nfrom model import Net\n" + HELPER_IN_PLACE + "\n\ndef build():\n    model = Net()\n"
    "    for layer in model.layers:\n        compile_layer(model.head)\n    return model\n",
    # two calls deep: the loop calls a helper that calls the compiling helper
    "import torch\nfrom model import Net\n" + HELPER_IN_PLACE + "\n\ndef prepare(m):\n    compile_layer(m)\n\n\n"
    "def build():\n    model = Net()\n    for layer in model.layers:\n        prepare(layer)\n    return model\n",
])
def test_helper_forms_that_compile_no_block_of_the_model_or_lie_deeper_refuse_nothing(tmp_path, capsys, train):
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD_BLOCK, 0)


@pytest.mark.parametrize("text, writes", [
    ("m = torch.compile(model)", True), ("model.compile()", True), ("compile (fn)", True),
    ("from torch import compile as tc", True), ("from torch._dynamo import optimize as opt", True),
    ("pattern = re.compile(r'x')", False), ("recompile(x)", False), ("# the default is 0 (no compile).", False), ("is_torchdynamo_compiling()", False),
    ("import my_compile as m", False), ("p = re .compile('x')", True), ("core.compile(x)", True),
    ("# torch.compile(model)\nx = 1", True),  # a comment is kept too: a kept file is parsed, never misread
    # what Python lets stand between the tokens: a line continuation, a parenthesized callee, a
    # comment inside brackets (each read by find_sites, a refusal missed where the file is dropped)
    ("m = torch.compile\\\n(model)", True), ("model.compile \\\n ()", True), ("m = (torch.compile)(model)", True),
    ("(model.compile)()", True), ("m = (torch.compile  # whole\n     (model))", True),
    ("from torch import compile as\\\n    tc", True), ("from torch import (compile  # c\n    as tc)", True),
    ("from torch._dynamo import (optimize  # o\n    as opt)", True), ("from torch import compile\\\nas tc", True),
    ("(re.compile)('x')", False), ("p = re.compile\\\n('x')", False),
    ('x = f("recompile#", torch.compile(model)\n)', True),  # a "#" in a string hides no call after it
    ("import compile_utils as cu", False), ("from torch import compile as_", False),
])
def test_which_files_may_hold_a_programs_compile(text, writes):
    """The literal-first scan that keeps SRC's files for the reading of the program's compiles
    (a file it drops is never read): every form of a compile call and of an import alias kept."""
    from rewriter.rewrite.program_compiles import writes_compile_call

    assert writes_compile_call(text) is writes


@pytest.mark.parametrize("text, spells", [
    (b"class A:\n    @torch.compile\n    def forward(self): ...\n", True),
    (b"from torch import compile as tc\n", True), (b"x = recompile as y\n", False),
    (b"@(torch.compile)\ndef f(): ...\n", True), (b"@dataclass\nclass A: ...\n", False),
    (b"optimizer = make()\n", False),
    # a form feed (a page break) before the decorator is white space to Python; a comment between
    # the import's compile and its as inside brackets
    (b"class A:\n\x0c    @torch.compile\n    def forward(self): ...\n", True),
    (b"\x0c@(torch.compile)\ndef f(): ...\n", True),
    (b"from torch import (compile  # c\n    as tc)\n", True), (b"from torch import compile as\\\n    tc\n", True),
])
def test_which_files_are_parsed_for_a_compile_decorator(text, spells):
    from rewriter.rewrite.decorated_enclosers import _may_spell

    assert _may_spell(text) is spells


#: ``train.py`` compiling ``Net`` whole with what Python lets stand between the tokens of the call
#: or of the import that names it (the line :meth:`ProgramCompiles.where` names): every one a
#: call :func:`rewriter.actions.own_call.find_sites` reads, in a file no ``compile(`` is written in.
SPELLED = {
    "a line continuation before the call's bracket": (
        "import torch\nfrom model import Net\n\nmodel = torch.compile\\\n    (Net())\nmodel(torch.randn(3, 4))\n",
        "train.py:4"),
    "a parenthesized callee": (
        "import torch\nfrom model import Net\n\nmodel = (torch.compile)(Net())\nmodel(torch.randn(3, 4))\n", "train.py:4"),
    "a parenthesized method": (
        "import torch\nfrom model import Net\n\nmodel = Net()\n(model.compile)()\nmodel(torch.randn(3, 4))\n", "train.py:5"),
    "a comment between the callee and its bracket": (
        "import torch\nfrom model import Net\n\nmodel = (torch.compile  # whole\n    (Net()))\n"
        "model(torch.randn(3, 4))\n", "train.py:4"),
    "an alias whose name is on the next line": (
        "import torch\nfrom torch import compile as\\\n    tc\nfrom model import Net\n\nmodel = tc(Net())\n"
        "model(torch.randn(3, 4))\n", "train.py:6"),
    "an alias with a comment before its as": (
        "import torch\nfrom torch import (compile  # the compiler\n    as tc)\nfrom model import Net\n\nmodel = tc(Net())\n"
        "model(torch.randn(3, 4))\n", "train.py:6"),
}


@pytest.mark.parametrize("train, where", list(SPELLED.values()), ids=list(SPELLED))
def test_a_whole_compile_spelled_across_tokens_python_allows_is_read(tmp_path, capsys, train, where):
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD_NET, 2)
    assert f"compile of Net: the program compiles an instance of it whole itself, at {where}:" in err, err


@pytest.mark.parametrize("imports, decorator", [
    ("", "\x0c    @torch.compile"),  # a page break before the only compile decorator of SRC
    ("from torch import (compile  # the compiler\n    as tc)\n", "    @tc"),
])
def test_a_decorated_forward_spelled_as_python_allows_is_read(tmp_path, capsys, imports, decorator):
    """``Net.forward`` compiled by a decorator after a form feed, or through an alias imported with a
    comment inside the import's brackets (another file writes ``@torch.compile``): the plan's Block
    compile is refused, naming it."""
    model = MODEL.replace("import torch.nn as nn\n", "import torch.nn as nn\n" + imports).replace(
        "    def forward(self, x):\n        for layer", f"{decorator}\n    def forward(self, x):\n        for layer")
    step = "import torch\n\n\n@torch.compile\ndef step(x):\n    return x + 1\n"
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": step}, ADD_BLOCK, 2)
    assert "compile of Block: the source compiles Net.forward with a decorator at model.py:" in err, err
