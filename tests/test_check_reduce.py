"""check hands LibCST only the top-level statements the rules can reach (rewriter.check.reduce;
docs/decisions.md, "check's speed and the splice's round trip"): the findings must be exactly those
of a check of the whole file, at the same lines and columns, for every rule's own examples buried
among unrelated code."""

from __future__ import annotations

import ast
import sys

import pytest

from rewriter.check.engine import check_text
from rewriter.check.reduce import reduce_source
from rewriter.check.rules import ALL_RULES
from rewriter.check.runner import check_files

#: Unrelated top-level code: functions and a class no compiled code names, each with what a rule
#: would flag inside a compiled region (.item(), print), so reaching them by mistake shows.
NOISE = '''

def unrelated_{i}(x):
    # a comment inside
    if x.sum().item() > 0:
        print("never compiled")
    return x


class Unrelated{i}:
    def forward(self, x):
        return x.tolist()


TABLE_{i} = [1, 2, (3, "x")]
LIMIT_{i}: int = -{i}

'''


def _buried(code: str, before: int = 5, after: int = 5) -> str:
    head, sep, rest = code.partition("\n\n")
    noise = lambda n, base: "".join(NOISE.format(i=base + i) for i in range(n))  # noqa: E731
    # imports stay first (a rule may need them above its code); noise before and after the rest
    return head + "\n" + noise(before, 0) + sep + rest.rstrip("\n") + "\n" + noise(after, 100)


def _key(findings):
    return [(f.code, f.line, f.col, f.end_line, f.end_col) for f in findings]


EXAMPLES = [(r.CODE, i, ex.code) for r in ALL_RULES for i, ex in enumerate([*r.INVALID, *r.VALID])]


@pytest.mark.parametrize("code,index,text", EXAMPLES, ids=[f"{c}-{i}" for c, i, _ in EXAMPLES])
def test_findings_on_the_reduced_text_are_the_whole_files_at_the_same_positions(tmp_path, code, index, text):
    text = _buried(text)
    path = tmp_path / "model.py"
    path.write_text(text)
    [whole] = [check_text(text, str(path), ALL_RULES)]
    [reduced] = check_files([str(path)], ALL_RULES, jobs=1)
    assert reduced.error == whole.error and reduced.skipped == whole.skipped
    assert _key(reduced.findings) == _key(whole.findings)


def test_unreached_definitions_leave_the_text_and_the_reached_ones_stay():
    text = (
        "import torch\n\n\ndef helper(x):\n    return x\n\n\ndef unused(x):\n    return x\n\n\n"
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        return helper(x)\n\n\n"
        "m = torch.compile(Model())\n"
    )
    reduced, line_map = reduce_source(text, ast.parse(text))
    assert "def unused" not in reduced and "def helper" in reduced and "class Model" in reduced
    # every kept line is the original line its map names
    original = text.splitlines(keepends=True)
    for k, line in enumerate(reduced.splitlines(keepends=True)):
        assert original[line_map[k] - 1] == line


def test_a_data_assignment_stays_only_where_kept_code_reads_it():
    """A name bound to a literal (a generated table: 400,000 such lines took check 2 min 39 s)
    is dropped unless a kept statement reads it; an assignment of anything else always stays."""
    text = ("import torch\n\nSIZES = (8, 16)\nUNUSED = [1, 2, 3]\nNEG: int = -1\nLIMIT = torch.tensor(1)\n"
            "torch._dynamo.config.cache_size_limit = 64\n\n\n@torch.compile\ndef f(x):\n    return x[: SIZES[0]]\n")
    reduced, line_map = reduce_source(text, ast.parse(text))
    assert "SIZES = (8, 16)" in reduced and "def f" in reduced
    assert "UNUSED" not in reduced and "NEG" not in reduced
    assert "LIMIT = torch.tensor(1)" in reduced and "cache_size_limit = 64" in reduced
    original = text.splitlines(keepends=True)
    assert all(original[line_map[k] - 1] == line for k, line in enumerate(reduced.splitlines(keepends=True)))


def test_a_file_with_nothing_to_drop_is_given_unchanged():
    text = "import torch\n\n\n@torch.compile\ndef f(x):\n    return x\n"
    assert reduce_source(text, ast.parse(text)) == (text, None)


def test_an_alias_of_torch_compile_keeps_the_function_that_calls_it():
    text = ("import torch\nfrom torch import compile as tc\n\n\ndef build(m):\n    return tc(m)\n\n\n"
            "def other(x):\n    return x\n")
    reduced, _ = reduce_source(text, ast.parse(text))
    assert "def build" in reduced and "def other" not in reduced


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs a Python older than the syntax")
def test_code_for_a_newer_python_is_checked_by_libcst_alone(tmp_path):
    """CPython 3.11 refuses PEP 695 generics (torch's testing/_internal/py312_intrinsics.py); LibCST
    reads them, as before CPython became the gate: the file is checked, not a syntax error."""
    path = tmp_path / "m.py"
    path.write_text("import torch\n\n\ndef f[T](x: T) -> T:\n    if x.sum().item() > 0:\n        return x\n"
                    "    return x\n\n\ng = torch.compile(f)\n")
    [result] = check_files([str(path)], ALL_RULES, jobs=1)
    assert result.error is None and result.skipped is None and result.parsed
    broken = tmp_path / "b.py"
    broken.write_text("import torch\nm = torch.compile(f\n")
    [bad] = check_files([str(broken)], ALL_RULES, jobs=1)
    assert bad.error and "syntax error" in bad.error


# --- classes and functions defined inside the function that compiles them ------------------------

NESTED = '''\
import torch
from torch import nn


def make_model():
    class Inner(nn.Module):
        def forward(self, x):
            return x.item()  # SP103
    return torch.compile(Inner())


def make_bound():
    class Bound(nn.Module):
        def forward(self, x):
            return x.tolist()  # SP103
    m = Bound()
    m.compile()
    return m


def make_step():
    def helper(x):
        return x.item()  # SP103
    return torch.compile(helper)


def make_decorated():
    class Decorated(nn.Module):
        @torch.compile
        def forward(self, x):
            return x.item()  # SP103
    return Decorated()


def make_in_branch(flag):
    if flag:
        class Branch(nn.Module):
            def forward(self, x):
                return x.tolist()  # SP103
        return torch.compile(Branch())
    return None


def make_step_in_try():
    try:
        def guarded(x):
            return x.item()  # SP103
        return torch.compile(guarded)
    except RuntimeError:
        return None


def make_either(big):
    if big:
        class Either(nn.Module):
            def forward(self, x):
                return x.tolist()  # SP103
    else:
        class Either(nn.Module):
            def forward(self, x):
                return x.item()  # SP103
    return torch.compile(Either())


def make_redefined():
    class Again(nn.Module):
        def forward(self, x):
            return x.item()
    class Again(nn.Module):
        def forward(self, x):
            return x + 1
    return torch.compile(Again())
'''


def _lines_of(text: str, needle: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if needle in line]


def test_a_class_or_def_compiled_in_the_function_that_defines_it_is_checked(tmp_path):
    """``torch.compile(Inner())`` / ``m.compile()`` of a class of the same function reaches its
    ``forward`` (it had no finding: only top-level classes were looked up), also under an ``if``,
    and so does a nested ``def`` under a ``try``, and a class defined in each branch of an ``if``
    (one in the function's own body and a decorated
    nested ``forward`` already were reached). Buried among definitions the reduction drops, the findings are at the original
    lines."""
    text = _buried(NESTED)
    path = tmp_path / "nested.py"
    path.write_text(text)
    [result] = check_files([str(path)], ALL_RULES, jobs=1)
    assert result.error is None and result.skipped is None
    nested = _lines_of(text, "# SP103")
    # both branches' Either (only the else branch's was checked); the first Again is replaced
    # before the compile runs, so its .item() is no finding
    assert len(nested) == 8
    assert sorted((f.code, f.line) for f in result.findings) == [("SP103", n) for n in nested]
    assert _key(result.findings) == _key(check_text(text, str(path), ALL_RULES).findings)


def test_a_nested_class_not_compiled_where_it_is_defined_has_no_finding(tmp_path):
    """Not compiled, compiled by name in another function (where that name is no class of this
    file), or named before its ``class`` statement: no finding, and no error."""
    text = '''\
import torch
from torch import nn


def plain():
    class Eager(nn.Module):
        def forward(self, x):
            return x.item()
    return Eager()


def elsewhere():
    return torch.compile(Eager())


def too_late():
    m = torch.compile(Late())
    class Late(nn.Module):
        def forward(self, x):
            return x.item()
    return m
'''
    path = tmp_path / "plain.py"
    path.write_text(text)
    [result] = check_files([str(path)], ALL_RULES, jobs=1)
    assert result.error is None and result.skipped is None
    assert result.findings == []


def test_a_nested_class_shadows_the_top_level_class_of_its_name(tmp_path):
    """Compiling the class (or def) of a function does not reach the top-level one of the same
    name (the class did: the file's own facts and its summary both looked it up at the top
    level; the def did through the summary)."""
    text = '''\
import torch
from torch import nn


class Inner(nn.Module):
    def forward(self, x):
        return x.item()


def make():
    class Inner(nn.Module):
        def forward(self, x):
            return x.tolist()
    return torch.compile(Inner())


def step(x):
    return x.item()


def make_step():
    def step(x):
        return x + 1
    return torch.compile(step)
'''
    path = tmp_path / "shadow.py"
    path.write_text(text)
    [result] = check_files([str(path)], ALL_RULES, jobs=1)
    assert [(f.code, f.line) for f in result.findings] == [("SP103", 13)]


def test_fix_rewrites_a_nested_compile_and_keeps_the_nested_finding(tmp_path):
    """``check --fix`` (the whole text, no reduction) on code inside a function: SP102's fix
    applies, and the nested class's SP103 stays at its line."""
    text = '''\
import torch
from torch import nn


def make():
    class Inner(nn.Module):
        def forward(self, x):
            return x.tolist()
    m = Inner()
    m = torch.compile(m)
    torch.save(m.state_dict(), "ckpt.pt")
    return m
'''
    path = tmp_path / "fix.py"
    path.write_text(text)
    [result] = check_files([str(path)], ALL_RULES, fix=True, jobs=1)
    assert result.fixed is not None and "    m.compile()\n" in result.fixed
    assert [(f.code, f.line) for f in result.findings] == [("SP103", 8)]


NESTED_MODELS = '''\
import torch
from torch import nn


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)


def build():
    class Block(nn.Module):
        def forward(self, x):
            return x + 1

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.h = nn.ModuleList([Block() for _ in range(12)])

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = GPT()

    model = torch.compile(GPT())  # SP101
    clf = torch.compile(Classifier())  # SP101
    block = torch.compile(Block(), mode="reduce-overhead")  # SP109
    return model, clf, block


def top():
    return torch.compile(GPT())
'''


def test_a_model_defined_in_a_function_is_judged_by_its_own_blocks(tmp_path):
    """SP101 and SP109 looked up top-level classes only: a model class defined in the function
    that builds and compiles it (and one holding it) had no finding, and its blocks were no
    repeated block. The top-level GPT of the same name repeats nothing and keeps no finding,
    and the local GPT's list is not credited to it."""
    path = tmp_path / "nested_models.py"
    path.write_text(NESTED_MODELS)
    [result] = check_files([str(path)], ALL_RULES, jobs=1)
    assert result.error is None and result.skipped is None
    expected = [(code, n) for code in ("SP101", "SP109") for n in _lines_of(NESTED_MODELS, f"# {code}")]
    assert sorted((f.code, f.line) for f in result.findings) == sorted(expected)
    sp101 = [f for f in result.findings if f.code == "SP101"]
    assert all("self.h is an nn.ModuleList of Block" in f.message or "backbone" in f.message for f in sp101), sp101
    assert _key(result.findings) == _key(check_text(NESTED_MODELS, str(path), ALL_RULES).findings)


# --- a file that compiles nothing ----------------------------------------------------------------

#: A helper a trainer compiles with fullgraph=True: ``.item()`` in an ``if`` and ``range(int(...))``
#: (SP110, SP111 once compiled), and no compile of its own.
FULLGRAPH_HELPER = '''\
import torch


def step(x):
    """Run under torch.compile(fullgraph=True) by train.py."""
    if x.sum().item() > 0:
        x = x + 1
    for _ in range(int(x.sum().item())):
        x = x * 2
    return x
'''


def test_a_file_that_compiles_nothing_reaches_libcst_only_for_the_rules_of_any_code(tmp_path):
    """The rules that report only in compiled code do not parse a file that neither compiles nor
    is compiled from another file (torch's own sources mention fullgraph and call ``int(`` in
    files that compile nothing); compiled from another file of the project, the same file is
    checked and reported; SP106, wrong wherever the call is made, still parses a file that
    compiles nothing."""
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "helper.py").write_text(FULLGRAPH_HELPER)
    [result] = check_files([str(alone / "helper.py")], ALL_RULES, jobs=1)
    assert (result.error, result.parsed, result.findings) == (None, False, [])

    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '0'\n")
    (project / "helper.py").write_text(FULLGRAPH_HELPER)
    (project / "train.py").write_text("import torch\n\nfrom helper import step\n\nfast = torch.compile(step, fullgraph=True)\n")
    [result] = check_files([str(project / "helper.py")], ALL_RULES, jobs=1)
    assert result.parsed and {f.code for f in result.findings} == {"SP110", "SP111"}, result.findings

    (alone / "marks.py").write_text("import torch\n\n\ndef mark(x):\n    torch._dynamo.mark_dynamic(x, 0, min=1)\n")
    [result] = check_files([str(alone / "marks.py")], ALL_RULES, jobs=1)
    assert [f.code for f in result.findings] == ["SP106"], result.findings
