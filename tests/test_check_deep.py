"""``stackpart check`` on deeply nested valid Python: findings, or one ``skipped:`` line naming the
file, never a traceback.

An ``elif`` chain nests each branch in the ``orelse`` of the one before it: a 1,000-branch chain is
1,000 levels of ``ast.If``, deeper than a recursive walk gets under Python's recursion limit (the
project summary's walk raised RecursionError there, exit 1 in the pre-commit hook). Each case is
checked in this process (the CLI's own path: Python's default limit, no worker) under a project
root; the elif chain also without one (the file's own facts, another walk).
"""

from __future__ import annotations

import ast

import pytest

from rewriter.check.command import check_command, run_check
from rewriter.check.file_summary import summarize

HEAD = "import torch\n\n@torch.compile\ndef f(x):\n"
TAIL = "    return x.sum().item()\n"


def _elif(n: int) -> str:
    return "    if x == 0:\n        x = x + 0\n" + "".join(f"    elif x == {i}:\n        x = x + {i}\n" for i in range(1, n))


def _nested_ifs(n: int) -> str:
    body = "".join("    " * (i + 1) + f"if x.sum() > {i}:\n" for i in range(n))
    return body + "    " * (n + 1) + "x = x + 1\n"


# name -> (body of the compiled function before its `.item()` line, what check must say)
CASES = {
    "elif1000": (_elif(1000), "finding"),
    "match1000": ("    match x:\n" + "".join(f"        case {i}:\n            x = x + {i}\n" for i in range(1000)), "finding"),
    "except1000": ("    try:\n        pass\n" + "".join(f"    except E{i}:\n        pass\n" for i in range(1000)), "finding"),
    "ifs98": (_nested_ifs(98), "finding"),  # CPython's indentation limit is 100 levels
    "parens199": ("    y = " + "(" * 199 + "x" + ")" * 199 + "\n", "finding"),  # its bracket limit is 200
    "ifexp1000": ("    y = " + "x if x else " * 1000 + "x\n", "finding"),
    "lambda150": ("    y = " + "lambda: " * 150 + "x\n", "finding"),
    "ifs1000": (_nested_ifs(1000), "skip"),  # CPython: too many levels of indentation
    "sum5000": ("    y = " + "+".join(["x"] * 5000) + "\n", "skip-or-finding"),
    "not3000": ("    y = " + "not " * 3000 + "x\n", "skip-or-finding"),
}


@pytest.mark.parametrize(("name", "project"), [(n, True) for n in CASES] + [("elif1000", False)],
                         ids=[*CASES, "elif1000-alone"])
def test_deep_files_give_findings_or_one_skip_line(tmp_path, monkeypatch, name, project):
    body, expect = CASES[name]
    if project:
        (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / f"{name}.py"
    text = HEAD + body + TAIL
    path.write_text(text)
    item_line = text.count("\n")  # the `.item()` is the last line
    outcome, _ = run_check([path.name], jobs=1, project=project)  # a RecursionError would end the test here
    skipped = [s for s in outcome.skipped if s.startswith(f"{path.name}")]
    found = [f for f in outcome.findings if f.code == "SP103"]
    if expect == "finding" or (expect == "skip-or-finding" and not skipped):
        assert [f.line for f in found] == [item_line], (outcome.findings, outcome.skipped)
        assert not outcome.skipped
    else:
        assert len(skipped) == 1 and "\n" not in skipped[0] and "skipped:" in skipped[0]
        assert not outcome.findings
    if name == "ifs98":  # every nested branch on a tensor's value is reported
        assert len([f for f in outcome.findings if f.code == "SP104"]) == 98


def test_the_project_summary_of_a_1000_branch_elif_chain_keeps_its_compile_sites():
    """The statement walk is iterative: the compile after the chain is still a site."""
    text = "import torch\n\ndef g(x):\n" + _elif(1000) + "    return x\n\nfast = torch.compile(g)\n"
    summary = summarize(ast.parse(text))
    assert summary["sites"] == [["function", "g", None, None, None, text.count("\n")]]
    # and a class defined after a chain that deep is still read
    text2 = "import torch\nfrom torch import nn\n\ndef g(x):\n" + _elif(1000) + "    return x\n\n" \
        "class M(nn.Module):\n    def forward(self, x):\n        return g(x)\n\nm = torch.compile(M())\n"
    summary2 = summarize(ast.parse(text2))
    assert summary2["classes"]["M"]["methods"] == ["forward"]
    assert summary2["sites"][0][:2] == ["instance", "M"]


def test_the_hook_exits_1_with_the_finding_after_a_1000_branch_elif_chain(tmp_path, monkeypatch, capsys):
    """The pre-commit hook's own entry (exit 1 for findings, not a traceback)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elif.py").write_text(HEAD + _elif(1000) + TAIL)
    assert check_command(["elif.py"], jobs=1) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert f"elif.py:{(HEAD + _elif(1000) + TAIL).count(chr(10))}:12: SP103" in out
