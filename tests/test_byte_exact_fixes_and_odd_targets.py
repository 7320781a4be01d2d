"""Hostile files: ``check --fix``/``--diff`` and ``rewrite`` change only the bytes they mean to,
and a plan target that never runs is refused. What each guards:

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



# --- a target under `if TYPE_CHECKING:` -------------------------------------------------------
#
# Before the fix the definitions under `if TYPE_CHECKING:` counted as targets: the class that only
# type checkers see got `@torch.compile` (a diff that changes nothing at run time, exit 0), and a
# class defined there and again in `else:` was refused as "defined 2 times".

TYPE_CHECKING_ONLY = """\
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    class Block(nn.Module):
        def forward(self, x):
            return x + 1
"""

TYPE_CHECKING_ELSE = """\
import typing

import torch
from torch import nn

if typing.TYPE_CHECKING:
    class Block(nn.Module):
        def forward(self, x):
            return x + 1
else:
    class Block(nn.Module):
        def forward(self, x):
            return x + 2
"""


def _plan(tmp_path: Path, target: str) -> Path:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\n"
        "harness: {file: h.py, model: build_model, inputs: make_inputs, shapes: [{batch: 2}]}\n"
        "actions:\n"
        "  - action: compile\n"
        f"    target: {target}\n"
        "    why: test\n"
    )
    return plan


def test_a_class_only_under_type_checking_is_refused_in_one_line(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "tc.py").write_text(TYPE_CHECKING_ONLY)
    plan = _plan(tmp_path, "tc.py::Block")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"{plan}:4:" in lines[0]
    assert "'Block' is defined only under `if TYPE_CHECKING:` (line 7) in tc.py, which never runs" in lines[0]
    assert (src / "tc.py").read_text() == TYPE_CHECKING_ONLY


def test_the_else_of_type_checking_is_the_target(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "tc.py").write_text(TYPE_CHECKING_ELSE)
    plan = _plan(tmp_path, "tc.py::Block")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    out = capsys.readouterr().out
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+        @torch.compile"]
    # the decorator lands on the else branch's forward (line 12), not the TYPE_CHECKING one
    assert "@@ -9,5 +9,6 @@" in out and "             return x + 2" in out


# --- a definition inside a `match` case ---------------------------------------------------------
#
# Before the fix, target resolution did not look into `match` cases but the transforms did: a
# class defined at module level and again in a case resolved as defined once, and rewrite put the
# decorator on both (exit 0); a class defined only in a case was "no class or function".

MATCH_TWICE = """\
import sys

import torch
from torch import nn


class Block(nn.Module):
    def forward(self, x):
        return x + 1


match sys.platform:
    case "win32":
        class Block(nn.Module):
            def forward(self, x):
                return x + 2
"""


def test_a_class_also_defined_in_a_match_case_is_ambiguous(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(MATCH_TWICE)
    plan = _plan(tmp_path, "m.py::Block")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "'Block' is defined 2 times in m.py (lines 7, 14)" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_a_class_defined_only_in_a_match_case_is_a_target(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    text = MATCH_TWICE.replace("class Block(nn.Module):\n    def forward(self, x):\n        return x + 1\n", "")
    (src / "m.py").write_text(text)
    plan = _plan(tmp_path, "m.py::Block")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    out = capsys.readouterr().out
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+            @torch.compile"]


def test_a_class_inside_a_function_is_refused_saying_why(tmp_path, capsys):
    # before: "no class or function 'make.Inner' in f.py (f.py defines make)", as if mistyped
    src = tmp_path / "src"
    src.mkdir()
    text = "import torch\nfrom torch import nn\n\n\ndef make():\n    class Inner(nn.Module):\n        def forward(self, x):\n            return x\n    return Inner()\n"
    (src / "f.py").write_text(text)
    for target in ("f.py::make.Inner", "f.py::make.Inner.forward"):
        plan = _plan(tmp_path, target)
        assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert "'make' is a function, and what its body defines is made anew at every call" in line, line
        assert "(move 'Inner' to module or class scope to target it)" in line
    assert (src / "f.py").read_text() == text


# --- coding cookies CPython reads otherwise ----------------------------------------------------
#
# Before the fix: an unknown or non-text codec in the cookie was "not valid rot13 text
# (LookupError)"; a BOM with a latin-1 cookie (CPython: "encoding problem: latin-1 with BOM") was
# read and rewritten; a cookie on line 2 below a line of code (which CPython ignores: the file is
# UTF-8) decoded a UTF-8 file as latin-1.

from rewriter.errors import StackpartError
from rewriter.source import decode_file

BODY = b"import torch\n"


@pytest.mark.parametrize(
    "data, says",
    [
        (b"# coding: unknownenc\n" + BODY, "m.py:1: unknown encoding 'unknownenc' in the coding cookie"),
        (b"# -*- coding: rot13 -*-\n" + BODY, "m.py:1: 'rot13' in the coding cookie is not a text encoding"),
        (b"#!/usr/bin/env python\n# coding: hex\n" + BODY, "m.py:2: 'hex' in the coding cookie is not a text encoding"),
        (b"\xef\xbb\xbf# coding: latin-1\n" + BODY, "m.py:1: a UTF-8 BOM with a coding cookie naming 'latin-1'"),
    ],
    ids=["unknown", "rot13", "hex-line-2", "bom-latin1"],
)
def test_a_coding_cookie_cpython_refuses_is_one_line(data, says):
    with pytest.raises(StackpartError) as info:
        decode_file(data, "m.py")
    assert str(info.value).startswith(says), str(info.value)


def test_a_cookie_below_a_line_of_code_is_not_one():
    data = 'import os\n# coding: latin-1\ns = "café"\n'.encode()
    source = decode_file(data, "m.py")
    assert source.encoding == "utf-8" and 'café' in source.text
    # a cookie below a shebang or a blank line still counts, and a BOM with a utf-8 cookie is fine
    assert decode_file(b"#!/usr/bin/env python\n# coding: latin-1\nx = '\xe9'\n", "m.py").encoding == "latin-1"
    assert decode_file(b"\n# coding: latin-1\nx = '\xe9'\n", "m.py").encoding == "latin-1"
    assert decode_file(b"\xef\xbb\xbf# coding: utf-8\nx = 1\n", "m.py").bom


def test_check_reports_a_bad_cookie_as_an_error_and_checks_the_others(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_bytes(b"# coding: unknownenc\nimport torch\n\nm = torch.compile(f)\n")
    (tmp_path / "ok.py").write_text("import torch\n\n\n@torch.compile\ndef f(x):\n    return x.item()\n")
    assert main(["check", "--no-project", "bad.py", "ok.py"]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("ok.py:6:")
    assert "error: bad.py:1: unknown encoding 'unknownenc' in the coding cookie" in err
    assert "Traceback" not in err


def test_a_target_name_in_other_unicode_code_points_says_so(tmp_path, capsys):
    # before: "no such file under SRC (did you mean 'modèle.py'?)", the same text as the plan's
    import unicodedata

    src = tmp_path / "src"
    src.mkdir()
    (src / unicodedata.normalize("NFD", "modèle.py")).write_text(TYPE_CHECKING_ELSE)
    plan = _plan(tmp_path, unicodedata.normalize("NFC", "modèle.py") + "::Block")
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no such file under SRC (there is 'mode\\u0300le.py', the same name in other Unicode code points" in line, line
    assert "did you mean" not in line


# --- a file edited while stackpart runs ---------------------------------------------------------
#
# Before the fix `rewrite --apply` renamed bytes computed from its first read over a file edited
# since (the edit lost, exit 0), and `check --fix` read the file again just before writing and
# wrote the fix of the text it had checked over it (the same).

import rewriter.check.command as check_command
import rewriter.rewrite.command as rewrite_module
from rewriter.rewrite.apply import apply_changes
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite

EDIT = b"\n# the user's edit, made while stackpart ran\n"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(TYPE_CHECKING_ELSE)
    return _plan(tmp_path, "m.py::Block"), src


def test_apply_refuses_a_file_changed_since_it_was_read(tmp_path):
    plan, src = _tree(tmp_path)
    result = plan_rewrite(load_plan(plan), src)
    (src / "m.py").write_bytes(TYPE_CHECKING_ELSE.encode() + EDIT)
    with pytest.raises(StackpartError) as info:
        apply_changes(src, result.changes)
    assert "m.py: changed since stackpart read it" in str(info.value) and "nothing was changed" in str(info.value)
    assert (src / "m.py").read_bytes() == TYPE_CHECKING_ELSE.encode() + EDIT
    assert sorted(p.name for p in src.iterdir()) == ["m.py"]  # no temp file left


def test_rewrite_apply_keeps_an_edit_made_while_it_ran(tmp_path, monkeypatch, capsys):
    plan, src = _tree(tmp_path)

    def edited_meanwhile(*args, **kwargs):
        result = plan_rewrite(*args, **kwargs)
        (src / "m.py").write_bytes(TYPE_CHECKING_ELSE.encode() + EDIT)
        return result

    monkeypatch.setattr(rewrite_module, "plan_rewrite", edited_meanwhile)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "changed since stackpart read it" in line
    assert (src / "m.py").read_bytes() == TYPE_CHECKING_ELSE.encode() + EDIT


def test_check_fix_keeps_an_edit_made_while_it_ran(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.py"
    path.write_text(SPACED_EXCEPT)
    checked = check_command.check_files

    def edited_meanwhile(*args, **kwargs):
        results = checked(*args, **kwargs)
        path.write_bytes(SPACED_EXCEPT.encode() + EDIT)
        return results

    monkeypatch.setattr(check_command, "check_files", edited_meanwhile)
    assert main(["check", "--no-project", "--select", "SP106", "--fix", "m.py"]) == 2
    err = capsys.readouterr().err
    assert "error: m.py: changed while it was checked (edited meanwhile?); not fixed" in err
    assert path.read_bytes() == SPACED_EXCEPT.encode() + EDIT


def test_check_fix_of_plan_drift_creates_the_generated_files(tmp_path, monkeypatch, capsys):
    # the drift fix passed a new file's old bytes as b"" (not None): with the guard above it
    # would be refused as changed, and a rollback would have left an empty file in its place
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(
        "import torch\nimport transformers\n\n\ndef build_model():\n"
        "    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1))\n\n\n"
        "def make_inputs(batch=1):\n    return {'input_ids': torch.zeros(batch, 4, dtype=torch.long)}\n"
    )
    (tmp_path / "plan.yaml").write_text(
        "version: 1\nharness: {file: harness.py, model: build_model, inputs: make_inputs, shapes: [{batch: 1}]}\n"
        "site: harness.py::build_model\nactions:\n  - action: compile\n"
        "    target: transformers.models.gpt2.modeling_gpt2:GPT2Block\n    why: test\n"
    )
    (tmp_path / "pyproject.toml").write_text('[tool.stackpart]\nplan = "plan.yaml"\nsrc = "src"\n')
    assert main(["check", "--fix", "--no-validate", "src/harness.py"]) == 0, capsys.readouterr().err
    assert "from _stackpart.library import apply_plan" in (src / "harness.py").read_text()
    assert "def apply_plan" in (src / "_stackpart" / "library.py").read_text()


def test_check_does_not_report_code_under_type_checking(tmp_path, monkeypatch, capsys):
    # before: SP103 on the `.item()` of the stub only type checkers see (the `else:` class runs)
    monkeypatch.chdir(tmp_path)
    stub = TYPE_CHECKING_ELSE.replace("return x + 1", "return x.item()") + "\nm = torch.compile(Block())\n"
    (tmp_path / "a.py").write_text(stub)
    assert main(["check", "--no-project", "a.py"]) == 0
    assert capsys.readouterr().out == ""
    # the branch that runs is still checked
    (tmp_path / "b.py").write_text(stub.replace("return x + 2", "return x.tolist()"))
    assert main(["check", "--no-project", "b.py"]) == 1
    assert capsys.readouterr().out.startswith("b.py:13:")
