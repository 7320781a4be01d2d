"""``own_call: {regional: <container>}`` on a compile in a generic helper whose parameter is what it
compiles (``utils/compiling.py::maybe_compile(model)`` holding ``return torch.compile(model)``):
the loop it writes, ``for block in model.blocks.children()``, holds only for a caller that passes a
model whose class sets ``blocks`` in its ``__init__``. The rewrite reads the helper's callers under
SRC and writes the loop only where every one of them passes an instance of such a class of SRC;
otherwise it refuses at the plan line, exit 2, nothing written, naming the caller's ``file:line``
and why (the class lacks the container, or its class cannot be read statically).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rewrite_tree import rewrite_files

MODEL = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class Late(nn.Module):
    def build(self):
        self.blocks = nn.ModuleList([Block()])
"""

HELPER = """\
import torch


def maybe_compile(model):
    return torch.compile(model, backend="eager")
"""

TRAIN = """\
from model import Head, Net
from utils.compiling import maybe_compile


def main():
    net = maybe_compile(Net())
{more}    return net
"""

PLAN = "  - {action: compile, target: utils/compiling.py::maybe_compile, own_call: {regional: blocks}}\n"

REGIONAL = """\
def maybe_compile(model):
    for block in model.blocks:
        block.compile(backend="eager")
    return model
"""


def _rewrite(tmp_path: Path, capsys, files: dict[str, str], code: int) -> str:
    """``rewrite --apply`` of the model, the helper and ``files`` with :data:`PLAN`
    (:func:`rewrite_tree.rewrite_files`)."""
    tree = {"model.py": MODEL, "utils/__init__.py": "", "utils/compiling.py": HELPER, **files}
    return rewrite_files(tmp_path, capsys, tree, PLAN, code)


def test_a_caller_passing_a_model_without_the_container_is_refused(tmp_path, capsys):
    train = TRAIN.format(more="    head = maybe_compile(Head())\n")
    err = _rewrite(tmp_path, capsys, {"train.py": train}, 2)
    assert ("plan.yaml:3: actions[0] (compile utils/compiling.py::maybe_compile): own_call: regional: blocks: "
            "maybe_compile compiles its parameter model, and train.py:7 passes Head() (model.py::Head), whose "
            "__init__ sets no attribute 'blocks': `for block in model.blocks` would raise AttributeError "
            "there") in err, err
    assert "turn the compile regional where the model's class is known" in err, err


@pytest.mark.parametrize("more, where, why", [
    # a parameter of the caller: any model may come in
    ("    head = wrap(net)\n\n\ndef wrap(m):\n    return maybe_compile(m)\n", "train.py:11",
     "m is a parameter of wrap"),
    # built by a factory
    ("    other = maybe_compile(make())\n", "train.py:7", "make() is not a call of a class of SRC"),
    # a class of an installed library
    ("    other = maybe_compile(nn.Linear(4, 4))\n", "train.py:7", "nn.Linear(4, 4) is not a call of a class of SRC"),
    # the container set outside __init__
    ("    other = maybe_compile(Late())\n", "train.py:7", "(model.py::Late), whose __init__ sets no attribute 'blocks'"),
    # the helper passed on as a value: its calls cannot be followed
    ("    fns = [maybe_compile]\n", "train.py:7", "maybe_compile is used as a value"),
])
def test_a_caller_whose_argument_is_not_known_to_hold_the_container_is_refused(tmp_path, capsys, more, where, why):
    train = TRAIN.format(more=more).replace("from model import", "import torch.nn as nn\nfrom model import Late,") \
        if "Late" in more or "nn." in more else TRAIN.format(more=more)
    if "Late" in more or "nn." in more:
        where = f"train.py:{int(where.rsplit(':', 1)[1]) + 1}"
    err = _rewrite(tmp_path, capsys, {"train.py": train}, 2)
    assert f"own_call: regional: blocks: maybe_compile compiles its parameter model, and {where}" in err, err
    assert why in err, err


def test_a_helper_no_file_of_src_calls_is_refused(tmp_path, capsys):
    err = _rewrite(tmp_path, capsys, {}, 2)
    assert "no file under SRC calls maybe_compile" in err, err


@pytest.mark.parametrize("train", [
    TRAIN.format(more=""),
    # a name bound to an instance of Net, an aliased import, a keyword argument, a module import
    "from model import Net\nfrom utils.compiling import maybe_compile as mc\n\n\ndef main():\n"
    "    net = Net().eval()\n    return mc(net)\n",
    "from model import Net\nfrom utils import compiling\n\n\ndef main():\n    return compiling.maybe_compile(model=Net())\n",
    "import model\nimport utils.compiling\n\nnet = utils.compiling.maybe_compile(model.Net())\n",
])
def test_every_caller_passing_a_model_with_the_container_is_written(tmp_path, capsys, train):
    _rewrite(tmp_path, capsys, {"train.py": train}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


SUB = "from model import Net\nfrom utils.compiling import maybe_compile\n\n\nclass Sub(Net):\n{body}\n\ndef main():\n    return maybe_compile(Sub())\n"


@pytest.mark.parametrize("body", [
    "    pass\n",
    "    def __init__(self):\n        super().__init__()\n        self.scale = 2\n",
])
def test_a_caller_passing_a_subclass_that_runs_its_imported_bases_init_is_written(tmp_path, capsys, body):
    """``class Sub(Net)`` in the caller's file, ``Net`` imported from model.py: ``Sub()`` runs
    ``Net.__init__``, which sets ``blocks``, so the loop holds there and is written."""
    _rewrite(tmp_path, capsys, {"train.py": SUB.format(body=body)}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


def test_a_caller_passing_a_subclass_whose_imported_base_comes_after_a_mixin_is_written(tmp_path, capsys):
    """``class Sub(Mixin, Net)``, the mixin without an ``__init__`` of its own: ``Sub()`` runs
    ``Net.__init__`` (the method resolution order), which sets ``blocks``."""
    train = SUB.format(body="    pass\n").replace("class Sub(Net)", "class Mixin:\n    pass\n\n\nclass Sub(Mixin, Net)")
    _rewrite(tmp_path, capsys, {"train.py": train}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


def test_a_caller_passing_a_subclass_whose_init_skips_its_bases_is_refused(tmp_path, capsys):
    body = "    def __init__(self):\n        nn.Module.__init__(self)\n"
    train = SUB.format(body=body).replace("from model import Net\n", "import torch.nn as nn\nfrom model import Net\n")
    err = _rewrite(tmp_path, capsys, {"train.py": train}, 2)
    assert "train.py:12 passes Sub() (train.py::Sub), whose __init__ sets no attribute 'blocks'" in err, err


@pytest.mark.parametrize("where, importer", [
    ("utils/train.py", "from . import maybe_compile"),
    ("utils/sub/train.py", "from .. import maybe_compile"),
])
def test_a_caller_importing_the_helper_from_its_package_is_read(tmp_path, capsys, where, importer):
    """``from . import maybe_compile`` (or ``..``) where the helper is defined in the package's
    ``__init__.py``: that file calls the helper too, so the ``Head()`` it passes refuses the loop
    that the root's caller alone (``Net()``) would allow."""
    caller = f"from model import Head\n{importer}\n\n\ndef main():\n    return maybe_compile(Head())\n"
    tree = {"model.py": MODEL, "utils/__init__.py": HELPER, "utils/sub/__init__.py": "", where: caller,
            "train.py": "from model import Net\nfrom utils import maybe_compile\n\nnet = maybe_compile(Net())\n"}
    plan = PLAN.replace("utils/compiling.py", "utils/__init__.py")
    err = rewrite_files(tmp_path, capsys, tree, plan, 2)
    assert f"and {where}:6 passes Head() (model.py::Head), whose __init__ sets no attribute 'blocks'" in err, err


@pytest.mark.parametrize("target", ["model.py::Block", "model.py::Block.forward"])
def test_a_compile_of_the_blocks_the_helpers_regional_loop_compiles_is_refused(tmp_path, capsys, target):
    """The loop the edit writes compiles each ``Block`` of the ``Net`` a caller passes in place, and
    the plan's decorator on ``Block.forward`` would compile them too: the decorator gets every
    graph and the loop's ``block.compile()`` none (pinned with CompileCounter in
    tests/test_compile_of_a_class_an_enclosing_compile_holds.py), so the plan is refused."""
    tree = {"model.py": MODEL, "utils/__init__.py": "", "utils/compiling.py": HELPER, "train.py": TRAIN.format(more="")}
    err = rewrite_files(tmp_path, capsys, tree, PLAN + f"  - {{action: compile, target: {target}}}\n", 2)
    assert (f"plan.yaml:4: actions[1] (compile {target}): compile of Block: actions[0] ({tmp_path / 'plan.yaml'}:3) "
            "own_call.regional: blocks turns utils/compiling.py::maybe_compile's compile (torch.compile(model, "
            "backend=\"eager\")) into a compile of each Block of Net.blocks in place (the model train.py:6 passes: "
            "Net()) (Net.__init__ builds Block at model.py:16: self.blocks = nn.ModuleList([Block() for _ in "
            "range(2)])), and this action compiles Block too: each block is compiled twice") in err, err


def test_a_compile_of_a_class_no_caller_passes_blocks_of_is_written(tmp_path, capsys):
    tree = {"model.py": MODEL, "utils/__init__.py": "", "utils/compiling.py": HELPER, "train.py": TRAIN.format(more="")}
    rewrite_files(tmp_path, capsys, tree, PLAN + "  - {action: compile, target: model.py::Head}\n", 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


BUILT = MODEL + """

class Built(nn.Module):
    def __init__(self):
        super().__init__()
        self.build(2)

    def build(self, n):
        self.blocks = nn.ModuleList([Block() for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class Rebuilt(Built):
    def build(self, n):
        self.lin = nn.Linear(4, 4)
"""


def test_a_container_a_method_called_from_init_builds_holds_the_regional_loop():
    """What the reading below rests on (CPU torch, CompileCounter): ``Built.__init__`` calls
    ``self.build(2)``, which sets ``blocks``; the loop the edit writes walks them without an
    AttributeError and each block's compile receives its graph."""
    import torch
    from torch._dynamo.testing import CompileCounter

    namespace: dict = {}
    exec(compile(BUILT, "pinned_built.py", "exec"), namespace)
    torch._dynamo.reset()
    counter = CompileCounter()
    model = namespace["Built"]()
    for block in model.blocks:  # the loop own_call: {regional: blocks} writes in maybe_compile
        block.compile(backend=counter)
    model(torch.randn(2, 4))
    assert counter.frame_count == 2, counter.frame_count
    torch._dynamo.reset()


def test_a_caller_passing_a_model_whose_init_calls_the_method_that_sets_the_container_is_written(tmp_path, capsys):
    train = TRAIN.format(more="").replace("from model import Head, Net", "from model import Built").replace(
        "Net()", "Built()")
    _rewrite(tmp_path, capsys, {"model.py": BUILT, "train.py": train}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


def test_a_caller_passing_a_subclass_that_overrides_that_method_is_refused(tmp_path, capsys):
    """``Rebuilt`` overrides ``build``: ``Built.__init__``'s ``self.build(2)`` runs the override,
    which sets no ``blocks`` (the subclass in the model's file, or in the caller's)."""
    train = TRAIN.format(more="").replace("from model import Head, Net", "from model import Rebuilt").replace(
        "Net()", "Rebuilt()")
    err = _rewrite(tmp_path, capsys, {"model.py": BUILT, "train.py": train}, 2)
    assert "train.py:6 passes Rebuilt() (model.py::Rebuilt), whose __init__ sets no attribute 'blocks'" in err, err
    train = ("import torch.nn as nn\nfrom model import Built\nfrom utils.compiling import maybe_compile\n\n\n"
             "class Mine(Built):\n    def build(self, n):\n        self.lin = nn.Linear(4, 4)\n\n\n"
             "def main():\n    return maybe_compile(Mine())\n")
    err = _rewrite(tmp_path, capsys, {"model.py": BUILT, "train.py": train}, 2)
    assert "train.py:12 passes Mine() (train.py::Mine), whose __init__ sets no attribute 'blocks'" in err, err


#: ``utils/__init__.py`` re-exports the helper; the callers below import it from the package.
REEXPORT = "from .compiling import maybe_compile\n"


@pytest.mark.parametrize("init, importer, called", [
    # the package re-exports it; a caller imports it from the package
    (REEXPORT, "from utils import maybe_compile", "maybe_compile"),
    # through the package as a module, and under an alias the package gives it
    (REEXPORT, "import utils", "utils.maybe_compile"),
    ("from .compiling import maybe_compile as compile_model\n", "from utils import compile_model", "compile_model"),
    # a star import of the module that defines it
    ("from .compiling import *\n", "from utils import maybe_compile", "maybe_compile"),
    ("from .compiling import *\n", "import utils", "utils.maybe_compile"),
])
def test_a_caller_importing_the_helper_through_a_re_export_is_read(tmp_path, capsys, init, importer, called):
    """A caller that imports the helper from the package whose ``__init__.py`` re-exports it calls
    the helper too: the ``Head()`` it passes refuses the loop that ``train.py``'s ``Net()`` alone
    would allow."""
    other = f"from model import Head\n{importer}\n\n\ndef main():\n    return {called}(Head())\n"
    err = _rewrite(tmp_path, capsys, {"utils/__init__.py": init, "train.py": TRAIN.format(more=""),
                                      "other.py": other}, 2)
    assert ("and other.py:6 passes Head() (model.py::Head), whose __init__ sets no attribute 'blocks': "
            "`for block in model.blocks` would raise AttributeError there") in err, err


def test_a_helper_called_only_through_re_exports_is_written_where_every_caller_passes_the_container(
        tmp_path, capsys):
    """``pkg/__init__.py`` re-exports what ``utils/__init__.py`` re-exports; the only caller imports
    it from ``pkg`` and passes ``Net()``: the chain is followed and the loop written."""
    train = "from model import Net\nfrom pkg import maybe_compile\n\nnet = maybe_compile(Net().eval())\n"
    _rewrite(tmp_path, capsys, {"utils/__init__.py": REEXPORT, "pkg/__init__.py": "from utils import maybe_compile\n",
                                "train.py": train}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL



@pytest.mark.parametrize("all_", ["", "__all__ = ['maybe_compile']\n"])
def test_a_helper_re_exported_by_a_star_import_is_called_through_it(tmp_path, capsys, all_):
    """``utils/__init__.py``'s ``from .compiling import *`` binds ``maybe_compile`` in the package
    (the name is public, and ``__all__`` lists it where the module has one): the only caller
    imports it from there and passes ``Net()``, so the loop is written."""
    helper = HELPER.replace("import torch\n", "import torch\n" + all_, 1)
    train = "from model import Net\nfrom utils import maybe_compile\n\nnet = maybe_compile(Net())\n"
    _rewrite(tmp_path, capsys, {"utils/__init__.py": "from .compiling import *\n", "utils/compiling.py": helper,
                                "train.py": train}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n" + all_ + "\n\n" + REGIONAL


def test_a_star_import_binds_no_name_its_modules_all_leaves_out(tmp_path, capsys):
    """``__all__ = ["other"]`` in ``utils/compiling.py``: ``from .compiling import *`` binds no
    ``maybe_compile`` in ``utils``, so a caller importing it from there is no call of the helper."""
    helper = HELPER.replace("import torch\n", "import torch\n__all__ = ['other']\n", 1)
    err = _rewrite(tmp_path, capsys, {"utils/__init__.py": "from .compiling import *\n", "utils/compiling.py": helper,
                                      "train.py": "from utils import maybe_compile\n\nnet = maybe_compile(None)\n"}, 2)
    assert "no file under SRC calls maybe_compile" in err, err


#: A factory the caller's file defines: what it returns is not read.
BUILD = "\n\ndef build():\n    return Net()\n"


@pytest.mark.parametrize("more, line, why", [
    # bound to a function's return: a factory, whatever its body returns
    ("    other = build()\n    maybe_compile(other)\n", 8, "build() is not a call of a class of SRC"),
    # bound to Net(), then rebound where which binding reaches the call is not read
    ("    other = Net()\n    if net:\n        other = Head()\n    maybe_compile(other)\n", 10,
     "other is bound at train.py:9 by more than a plain `other = ...` of main's own lines"),
    ("    other = Net()\n    for other in [Head()]:\n        pass\n    maybe_compile(other)\n", 10,
     "other is bound at train.py:8 by more than"),
    ("    other = Net()\n    other: object = Head()\n    maybe_compile(other)\n", 9, "other is bound at train.py:8"),
    ("    other = Net()\n    other, n = Head(), 1\n    maybe_compile(other)\n", 9, "other is bound at train.py:8"),
    ("    other = Net()\n    (other := Head())\n    maybe_compile(other)\n", 9, "other is bound at train.py:8"),
    # a comprehension's own target
    ("    other = Net()\n    [maybe_compile(other) for other in [Head()]]\n", 8, "other is bound at train.py:8"),
    # a later line of a loop around the call
    ("    other = Net()\n    for _ in range(2):\n        maybe_compile(other)\n        other = Head()\n", 9,
     "other is bound at train.py:10"),
])
def test_a_caller_passing_a_name_whose_class_the_source_does_not_settle_is_refused(tmp_path, capsys, more, line, why):
    """Where the caller passes a name, its class is read from the last ``name = Class()`` of the
    caller's own lines before the call, and only where nothing else binds the name there: a
    variable from a function's return, or one a branch, a loop, an annotated, unpacking or ``:=``
    assignment may rebind, is refused at the call."""
    err = _rewrite(tmp_path, capsys, {"train.py": TRAIN.format(more=more) + BUILD}, 2)
    assert f"and train.py:{line} passes other, whose class cannot be read statically: {why}" in err, err


@pytest.mark.parametrize("more", [
    "    other = Head()\n    other = Net()\n    maybe_compile(other)\n",
    "    other = Net()\n    maybe_compile(other)\n    other = Head()\n",
    # the call's own statement binds the name after the call returns (the usual opt-in compile)
    "    other = Net()\n    if net:\n        other = maybe_compile(other)\n",
    "    other = Net()\n    try:\n        other = maybe_compile(other)\n    except RuntimeError:\n        pass\n",
    "    other = Net()\n    other: object = maybe_compile(other)\n",
    # bound otherwise after the call, outside any loop around it
    "    other = Net()\n    maybe_compile(other)\n    for other in [Head()]:\n        pass\n",
    # a bare annotation binds nothing
    "    other: object\n    other = Net()\n    maybe_compile(other)\n",
])
def test_a_caller_passing_a_name_the_last_plain_assignment_before_it_binds_to_the_model_is_written(
        tmp_path, capsys, more):
    """``other = Head(); other = Net(); maybe_compile(other)``: the call gets the ``Net``; a binding
    after the call, not in a loop around it (``if flag: other = maybe_compile(other)`` included: the
    name is bound once the call has returned), cannot reach it, and ``other: object`` binds nothing."""
    _rewrite(tmp_path, capsys, {"train.py": TRAIN.format(more=more)}, 0)
    assert (tmp_path / "src" / "utils" / "compiling.py").read_text() == "import torch\n\n\n" + REGIONAL


SKIPS = {
    "its own __init__ runs nn.Module's, not Net's": "class Sub(Net):\n    def __init__(self):\n"
                                                    "        nn.Module.__init__(self)\n        self.lin = nn.Linear(4, 4)\n",
    "a mixin before Net whose __init__ does not call super()": "class Mixin:\n    def __init__(self):\n"
                                                              "        self.scale = 2\n\n\nclass Sub(Mixin, Net):\n    pass\n",
}


def test_a_subclass_whose_init_never_runs_its_bases_has_no_container_for_the_regional_loop():
    """What the refusal below rests on (CPU torch, CompileCounter): ``Sub()`` never runs
    ``Net.__init__`` (its own runs ``nn.Module.__init__``; or a mixin's, which does not call
    ``super().__init__()``, comes first in the method resolution order), so the loop
    ``own_call: {regional: blocks}`` writes raises AttributeError; a ``Sub`` whose ``__init__``
    calls ``super().__init__()`` has the blocks, and each block's compile gets its graph."""
    import torch
    from torch._dynamo.testing import CompileCounter

    for sub in SKIPS.values():
        namespace: dict = {}
        exec(compile(MODEL + "\n\n" + sub, "pinned_skips.py", "exec"), namespace)
        with pytest.raises(AttributeError, match="blocks"):
            for block in namespace["Sub"]().blocks:  # the loop maybe_compile's regional edit writes
                block.compile()
    namespace = {}
    exec(compile(MODEL + "\n\nclass Sub(Net):\n    def __init__(self):\n        super().__init__()\n",
                 "pinned_runs.py", "exec"), namespace)
    torch._dynamo.reset()
    counter = CompileCounter()
    model = namespace["Sub"]()
    for block in model.blocks:
        block.compile(backend=counter)
    model(torch.randn(2, 4))
    assert counter.frame_count == 2, counter.frame_count
    torch._dynamo.reset()


@pytest.mark.parametrize("sub", list(SKIPS.values()), ids=list(SKIPS))
def test_a_caller_passing_a_subclass_of_the_same_file_whose_init_never_runs_its_bases_is_refused(
        tmp_path, capsys, sub):
    """``Sub`` beside ``Net`` in model.py: ``Net.__init__`` sets ``blocks``, but ``Sub()`` never runs
    it, so the loop would raise AttributeError at run time."""
    train = TRAIN.format(more="").replace("from model import Head, Net", "from model import Sub").replace("Net()", "Sub()")
    tree = {"model.py": MODEL + "\n\n" + sub, "utils/__init__.py": "", "utils/compiling.py": HELPER, "train.py": train}
    err = rewrite_files(tmp_path, capsys, tree, PLAN, 2)
    assert "train.py:6 passes Sub() (model.py::Sub), whose __init__ sets no attribute 'blocks'" in err, err
