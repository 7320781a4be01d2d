"""Which classes enclose a plan's compiled class is read upward (every file that builds or
subclasses it: on a transformers-sized SRC, a hundred files for a decoder layer, most of a rewrite's
time). The rewrite now asks that only where an enclosing compile can exist: a whole-model compile
call of some class in SRC, or a compile decorator on some class's ``forward``, and only where that
class may build the plan's class (:meth:`rewriter.rewrite.enclosing.Enclosing.may_enclose`, read
downward from it). These tests pin that the upward reading is skipped where nothing can enclose
(it is made to raise), and still refuses where something does."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewrite_tree import rewrite_files
from tiny_programs import NET_MODEL
from rewriter.rewrite import enclosing

#: ``model.py``: ``Net`` builds two ``Block``s (model.py:17); ``Head`` builds none.
MODEL = NET_MODEL + """

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 2)

    def forward(self, x):
        return self.proj(x)
"""


def _train(compiled: str) -> str:
    return f"import torch\nfrom model import {compiled}\n\n\ndef main():\n    model = torch.compile({compiled}())\n    return model(torch.randn(3, 8))\n"


ADD = "  - {action: compile, target: model.py::Block}\n"


@pytest.fixture
def upward_raises(monkeypatch):
    """The upward reading made to raise: a test that passes with it never asked it."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the upward reading of enclosing classes ran")

    monkeypatch.setattr(enclosing.Enclosing, "enclosers", refuse)


def test_no_compile_anywhere_reads_no_encloser(tmp_path: Path, capsys, upward_raises) -> None:
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _train("Head").replace("torch.compile(Head())", "Head()")}, ADD, 0)
    assert "@torch.compile" in (tmp_path / "src" / "model.py").read_text()


def test_a_whole_compile_of_a_class_that_builds_no_block_reads_no_encloser(tmp_path: Path, capsys, upward_raises) -> None:
    """``torch.compile(Head())``: Head builds no Block, so the plan's Block compile is written."""
    rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _train("Head")}, ADD, 0)
    assert (tmp_path / "src" / "model.py").read_text().count("@torch.compile") == 1


def test_a_decorated_forward_of_a_class_that_builds_no_block_reads_no_encloser(tmp_path: Path, capsys, upward_raises) -> None:
    """``@torch.compile`` on ``Head.forward``: Head builds no Block."""
    model = MODEL.replace(
        "    def forward(self, x):\n        return self.proj(x)", "    @torch.compile\n    def forward(self, x):\n        return self.proj(x)")
    rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": "from model import Net\n"}, ADD, 0)
    assert (tmp_path / "src" / "model.py").read_text().count("@torch.compile") == 2


def test_a_whole_compile_of_the_class_that_builds_the_block_is_still_refused(tmp_path: Path, capsys) -> None:
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": _train("Net")}, ADD, 2)
    assert "Net.__init__ builds Block at model.py:17" in err and "train.py:6" in err


def test_a_decorated_forward_of_the_class_that_builds_the_block_is_still_refused(tmp_path: Path, capsys) -> None:
    model = MODEL.replace("    def forward(self, x):\n        for b", "    @torch.compile\n    def forward(self, x):\n        for b")
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": "from model import Net\n"}, ADD, 2)
    assert "Net.__init__ builds Block at model.py:17" in err


def test_a_subclass_that_inherits_the_building_init_is_read_downward(tmp_path: Path, capsys) -> None:
    """``class BigNet(Net): pass`` compiled whole: BigNet runs Net's ``__init__``, which builds the
    blocks; the downward reading follows the base (:meth:`Enclosing.base_of`) and the refusal stands."""
    model = MODEL + "\n\nclass BigNet(Net):\n    pass\n"
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": _train("BigNet")}, ADD, 2)
    assert "BigNet" in err and "builds Block" in err


def test_built_by_follows_constructions_and_bases(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL + "\n\nclass Outer(nn.Module):\n    def __init__(self):\n"
                                       "        super().__init__()\n        self.net = Net()\n\n\nclass BigNet(Net):\n    pass\n")
    e = enclosing.Enclosing(tmp_path, 100)
    assert e.built_by([("model.py", "Outer")]) == {("model.py", "Net"), ("model.py", "Block")}
    assert e.built_by([("model.py", "BigNet")]) == {("model.py", "Block")}
    assert e.built_by([("model.py", "Head")]) == set()
    assert e.may_enclose([("model.py", "Outer")], ("model.py", "Block"))
    assert not e.may_enclose([("model.py", "Head")], ("model.py", "Block"))


def test_a_whole_compile_through_an_imported_alias_is_still_read(tmp_path: Path, capsys) -> None:
    """The program's compile calls are searched only in functions whose lines name a compile
    function (``program_compiles._naming_compile``): a name an import binds to ``torch.compile``
    counts, so ``tc(Net())`` in ``main`` (no ``compile`` written on its lines) is read and the
    plan's Block compile refused."""
    train = ("import torch\nfrom torch import compile as tc\nfrom model import Net\n\n\ndef helper(fn):\n"
             "    return torch.compile(fn)\n\n\ndef main():\n    model = tc(Net())\n    return model\n")
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": train}, ADD, 2)
    assert "train.py:11" in err and "Net.__init__ builds Block" in err


def test_the_functions_searched_follow_the_files_functions_in_order() -> None:
    from rewriter.rewrite.program_compiles import _naming_compile

    text = ("import torch\n\n\nclass A:\n    def f(self):\n        return 1\n\n    @torch.compile\n    def g(self):\n"
            "        def inner():\n            return 2\n        return inner\n\n\ndef h(m):\n    return torch.compile(m)\n\n\n"
            "def k(x):\n    return x\n")
    # f, g, inner, h, k: g by its decorator's line, h by its call; inner's own lines name none
    assert _naming_compile(text, {"torch": "torch"}) == [False, True, False, True, False]
    assert _naming_compile("def f(:\n", {}) is None


NESTED_TRAIN = ("import torch\nfrom model import Net\n{sep}\n\ndef main():\n    def inner():\n        return torch.compile(Net())\n"
                "    model = inner()\n    return model(torch.randn(3, 4))\n")


@pytest.mark.parametrize("sep", ["\x0c", "# page\u2028two", "# a\x0bb", "X = 'a\x85b'"])
def test_a_page_break_or_an_odd_line_separator_above_a_compile_does_not_hide_it(tmp_path: Path, capsys, sep) -> None:
    """A form feed line (a page break), or a ``\\v``, ``\\x85`` or ``\\u2028`` in a comment or a
    string, is no line end to Python: ``inner``'s compile on its last line stays in ``inner``, is
    read, and the plan's Block compile is refused, naming the call's line as Python counts it."""
    err = rewrite_files(tmp_path, capsys, {"model.py": MODEL, "train.py": NESTED_TRAIN.format(sep=sep)}, ADD, 2)
    assert "the program compiles an instance of Net whole itself, at train.py:7: torch.compile(Net())" in err, err
    assert "Net.__init__ builds Block at model.py:17" in err, err


def test_the_lines_a_function_spans_are_counted_as_python_counts_them() -> None:
    from rewriter.rewrite.program_compiles import _naming_compile

    text = "\x0c\n# a\u2028b\x0bc\ndef f(m):\n    return torch.compile(m)\n\n\ndef g(x):\n    return x\n"
    assert _naming_compile(text, {"torch": "torch"}) == [True, False]
    assert _naming_compile(text.replace("\n", "\r"), {"torch": "torch"}) == [True, False]


def test_a_whole_compile_of_a_class_whose_line_starts_with_a_form_feed_is_still_refused(tmp_path: Path, capsys) -> None:
    """``\\fclass Net``: a page break before the class is no indentation to Python, so ``Net`` is a
    top-level class, its whole compile in ``train.py`` holds the Block, and the plan's compile is
    refused."""
    model = MODEL.replace("\n\nclass Net(", "\n\n\x0cclass Net(")
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": _train("Net")}, ADD, 2)
    assert "the program compiles an instance of Net whole itself, at train.py:6: torch.compile(Net())" in err, err
    assert "Net.__init__ builds Block at model.py:17" in err, err


def test_classes_named_reads_a_class_line_as_python_does(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_bytes(b"\x0cclass Net:\n    pass\n")
    (tmp_path / "b.py").write_bytes(b"x = 1\rclass Net:\r    pass\r")
    (tmp_path / "c.py").write_bytes(b"class \\\n        Net:\n    pass\n\n\nclass Network:\n    pass\n")
    e = enclosing.Enclosing(tmp_path, 100)
    assert sorted(e.classes_named({"Net"})) == [("a.py", "Net"), ("b.py", "Net"), ("c.py", "Net")]


@pytest.mark.parametrize("imports, decorator", [
    ("from torch._dynamo import optimize as opt\n", "@opt('eager')"),
    ("from torch import compile as tc\n", "@tc"),
    ("", "@(torch.compile)"),
])
def test_an_enclosing_forward_compiled_through_an_alias_is_read_where_src_writes_a_compile_decorator(
        tmp_path: Path, capsys, imports, decorator) -> None:
    """``Net.forward`` compiled by a decorator no line of ``model.py`` spells ``@...compile`` (an
    import's alias, a parenthesized name), where another file of SRC writes ``@torch.compile``:
    the decorator is read (:func:`rewriter.actions.base.find_decorator`) and the plan's Block
    compile refused, naming it."""
    model = MODEL.replace("import torch.nn as nn\n", "import torch.nn as nn\n" + imports).replace(
        "    def forward(self, x):\n        for b", f"    {decorator}\n    def forward(self, x):\n        for b")
    step = "import torch\n\n\n@torch.compile\ndef step(x):\n    return x + 1\n"
    err = rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": step}, ADD, 2)
    line = 20 if imports else 19
    assert f"compile of Block: the source compiles Net.forward with a decorator at model.py:{line}: {decorator}" in err, err
    assert f"Net.__init__ builds Block at model.py:{line - 2}" in err, err


def test_past_the_downward_limit_the_decorated_enclosers_are_read_upward(tmp_path: Path, capsys) -> None:
    """More compile-decorated classes than ``decorated_enclosers.MAX_DOWNWARD`` (a tree a plan was
    applied over): the plan's class is read upward at once, and the refusal of a decorated ``Net``
    that builds it stands; with ``Net`` undecorated the plan is written."""
    from rewriter.rewrite.decorated_enclosers import MAX_DOWNWARD

    many = "".join(f"\n\nclass Head{k}(nn.Module):\n    @torch.compile\n    def forward(self, x):\n        return x\n"
                   for k in range(MAX_DOWNWARD + 1))
    decorated = MODEL.replace("    def forward(self, x):\n        for b", "    @torch.compile\n    def forward(self, x):\n        for b")
    err = rewrite_files(tmp_path / "on", capsys, {"model.py": decorated + many, "train.py": "from model import Net\n"}, ADD, 2)
    assert "Net.__init__ builds Block at model.py:17" in err, err
    rewrite_files(tmp_path / "off", capsys, {"model.py": MODEL + many, "train.py": "from model import Net\n"}, ADD, 0)


def test_a_plan_that_compiles_no_forward_parses_no_compile_writing_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """A plan whose compile targets a free function (no class's ``forward``): no enclosing compile
    can inline it, so the program's compile calls are not read at all (``every_call`` made to raise)."""
    from rewriter.rewrite.program_compiles import ProgramCompiles

    def refuse(*_args, **_kwargs):
        raise AssertionError("every file that writes a compile call was parsed")

    monkeypatch.setattr(ProgramCompiles, "every_call", refuse)
    model = MODEL + "\n\ndef step(x):\n    return x * 2\n"
    rewrite_files(tmp_path, capsys, {"model.py": model, "train.py": _train("Net")},
                  "  - {action: compile, target: model.py::step}\n", 0)
    assert "@torch.compile\ndef step" in (tmp_path / "src" / "model.py").read_text()
