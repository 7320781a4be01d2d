"""check hands LibCST only the top-level statements the rules can reach (rewriter.check.reduce,
issue 16 item 5): the findings must be exactly those of a check of the whole file, at the same
lines and columns, for every rule's own examples buried among unrelated code."""

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
