"""The printed diff of an insertion-only rewrite has no '-' lines: difflib's autojunk
heuristic paired the blank lines around an inserted decorator with other blank lines in 55 of
5,014 rewrites of benchmarks/roundtrip_corpus.py."""

from __future__ import annotations

import difflib
import subprocess

import pytest

from rewriter.diff import file_diff


def _file(n: int) -> str:
    return "import torch\n\n\n" + "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(n))


def test_an_insertion_only_change_prints_only_plus_lines():
    old = _file(100)  # 400+ lines, a third of them blank: difflib's autojunk marks blank lines junk
    new = old.replace("def f50(x):", "@torch.compile\ndef f50(x):").replace("def f7(x):", "@torch.compiler.disable\ndef f7(x):")
    diff = file_diff("m.py", old.encode(), new.encode())
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "diff "))]
    assert not [line for line in body if line.startswith("-")], diff
    assert sum(line.startswith("+") for line in body) == 2


def test_the_hunks_match_difflibs_where_difflib_prints_insertions_only():
    old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
    new = old.replace("e\n", "e\nE\n")
    ours = file_diff("m.py", old.encode(), new.encode()).split("\n", 1)[1]
    theirs = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/m.py", "b/m.py"))
    assert ours == theirs


def test_other_changes_still_get_difflibs_diff():
    old = b"a\nb\nc\n"
    new = b"a\nB\nc\n"
    assert file_diff("m.py", old, new).endswith("@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")


@pytest.mark.parametrize("old,new", [
    (b"x = 1\n", b"import torch\nx = 1\n"),
    (b"x = 1", b"x = 1\ny = 2"),  # no newline at the end of either
    (b"", b"import os\n"),
    (b"a\n" * 10, b"a\n" * 10 + b"b\n"),
])
def test_the_insertion_diff_applies_with_git(tmp_path, old, new):
    (tmp_path / "m.py").write_bytes(old)
    patch = file_diff("m.py", old, new)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    proc = subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), capture_output=True)
    assert proc.returncode == 0, (patch, proc.stderr)
    assert (tmp_path / "m.py").read_bytes() == new


def test_a_real_file_whose_difflib_diff_had_minus_lines_now_prints_insertions_only(tmp_path):
    """sympy/solvers/ode/hypergeometric.py, one of the 55 (benchmarks/results/roundtrip-2026-12-01.json)."""
    sympy = pytest.importorskip("sympy")
    from pathlib import Path

    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    path = Path(sympy.__file__).parent / "solvers" / "ode" / "hypergeometric.py"
    if not path.exists():
        pytest.skip("this sympy has no hypergeometric.py")
    src = tmp_path / "src"
    src.mkdir()
    (src / "h.py").write_bytes(path.read_bytes())
    plan = parse_plan("version: 1\nactions:\n"
                      "  - {action: mark_dynamic, target: h.py::equivalence_hypergeometric, arg: A, dim: 0}\n"
                      "  - {action: compile, target: h.py::match_2nd_hypergeometric}\n")
    result = plan_rewrite(plan, src)
    [change] = result.changes
    old, new = change.old.decode().splitlines(True), change.new.decode().splitlines(True)
    plain = [l for l in difflib.unified_diff(old, new) if l.startswith("-") and not l.startswith("---")]
    assert plain, "difflib now prints this one insertion-only: pick another file of the 55"
    body = result.diff().splitlines()
    assert not [l for l in body if l.startswith("-") and not l.startswith("---")], result.diff()


@pytest.mark.parametrize("name", ["tab\tx.py", 'q"uote.py', "back\\slash.py", "nl\nx.py", "with space é.py"])
@pytest.mark.parametrize("old", [b"x = 1\n", None])
def test_a_file_name_git_must_quote_gives_a_diff_git_applies(tmp_path, name, old):
    # newcomer round 10: an unquoted tab in `--- a/tab\tx.py` ended the name for git apply
    # ("src/tab: No such file or directory"); git's own diffs C-quote such names
    new = b"import torch\nx = 1\n"
    if old is not None:
        (tmp_path / name).write_bytes(old)
    patch = file_diff(name, old, new)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    proc = subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), capture_output=True)
    assert proc.returncode == 0, (patch, proc.stderr)
    assert (tmp_path / name).read_bytes() == new
    ascii_name = "ascii.py"
    assert file_diff(ascii_name, b"a\n", b"b\n").startswith("diff --git a/ascii.py b/ascii.py\n")
