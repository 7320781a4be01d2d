"""Hostile files met by a newcomer (round 10): ``check --fix``/``--diff`` and ``rewrite`` must
change only the bytes they mean to, and a plan target that never runs must be refused.

Each test failed before its fix:

* ``check --fix`` wrote LibCST's print of the whole file, not only the lines a fix edited: a
  space before ``except``'s colon was removed, and a lone-CR file lost its final ``\\r``
  (``rewrite`` splices, :mod:`rewriter.splice`; ``check --fix`` did not).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES
from rewriter.cli import main

#: SP106's fix (``mark_dynamic(min=1)`` -> ``maybe_mark_dynamic``) beside a line LibCST prints
#: differently (``except OSError :`` -> ``except OSError:``).
SPACED_EXCEPT = """\
import torch


def f(x):
    try:
        pass
    except OSError :
        pass
    torch._dynamo.mark_dynamic(x, 0, min=1)
    return x


g = torch.compile(f)
"""
FIXED_LINE = "    torch._dynamo.maybe_mark_dynamic(x, 0)\n"


def _expected(text: str) -> str:
    return text.replace("    torch._dynamo.mark_dynamic(x, 0, min=1)\n", FIXED_LINE)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(SPACED_EXCEPT, id="except-space-colon"),
        pytest.param(SPACED_EXCEPT.replace("\n", "\r"), id="lone-cr"),
        pytest.param(SPACED_EXCEPT.replace("\n", "\r\n"), id="crlf"),
    ],
)
def test_check_fix_changes_only_the_fixed_line(tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    path = Path("m.py")
    path.write_bytes(text.encode())
    want = _expected(text.replace("\r\n", "\n").replace("\r", "\n"))
    want = want.replace("\n", "\r\n") if "\r\n" in text else want.replace("\n", "\r") if "\r" in text else want
    result = check_text(text, "m.py", ALL_RULES, fix=True)
    assert result.fixed == want
    assert main(["check", "--no-project", "--select", "SP106", "--fix", "m.py"]) == 0
    assert path.read_bytes() == want.encode()


def test_check_diff_shows_only_the_fixed_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_text(SPACED_EXCEPT)
    assert main(["check", "--no-project", "--select", "SP106", "--diff", "m.py"]) == 1
    out = capsys.readouterr().out
    changed = [line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-    torch._dynamo.mark_dynamic(x, 0, min=1)", "+" + FIXED_LINE.rstrip("\n")]
    assert Path("m.py").read_text() == SPACED_EXCEPT

