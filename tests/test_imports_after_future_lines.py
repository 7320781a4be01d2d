"""An import the rewrite adds at the top of a file goes below the file's ``from __future__``
imports and its docstring, also where they share a line with other statements
(``from __future__ import annotations; import os``, ``\"\"\"Doc.\"\"\"; from __future__ import ...``) and
where the docstring is an implicit concatenation (``"Doc " "more."``, one constant to CPython).

CPython compiles a ``__future__`` import only before every other statement but the docstring
(https://docs.python.org/3/reference/simple_stmts.html#future-statements); ``ast.parse`` does not
check that, the compiler does. LibCST's ``AddImportsVisitor`` counts only a line holding a single
import or a single docstring as part of the file's head, so it put ``import torch`` above such a
line: a file that no longer compiles (and a docstring that is no longer the module's).
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

from rewriter.cli import main

CLASS = "\n\nclass Net:\n    def forward(self, x):\n        return x\n"
FUNC = "\n\ndef main():\n    pass\n"
COMPILE = "  - {action: compile, target: m.py::Net}\n"
ALLOCATOR = '  - {action: allocator, target: m.py::main, settings: "expandable_segments:True"}\n'
CONFIG = "  - {action: dynamo_config, target: m.py::Net.forward, settings: {capture_scalar_outputs: true}}\n"

CASES = {
    "future_then_import_on_one_line": ("from __future__ import annotations; import sys\n" + CLASS, COMPILE, "import torch", 1),
    "docstring_then_future_on_one_line": ('"""Doc."""; from __future__ import annotations\n' + CLASS, COMPILE, "import torch", 1),
    "docstring_line_then_future_line": ('"""Doc."""\nfrom __future__ import annotations; import os\n' + CLASS, COMPILE,
                                        "import torch", 2),
    "two_future_lines_then_imports": ("from __future__ import annotations\nfrom __future__ import division; import os\n"
                                      "import sys\n" + CLASS, CONFIG, "import torch", 3),
    "docstring_then_a_statement_on_one_line": ('"""Doc."""; VERSION = 1\n' + CLASS, COMPILE, "import torch", 1),
    "concatenated_docstring": ('"Doc " "more."\nimport os\n' + CLASS, COMPILE, "import torch", 2),
    "allocator_imports_os": ('"""Doc."""; from __future__ import annotations\n' + FUNC, ALLOCATOR, "import os", 1),
    "crlf": ("from __future__ import annotations; import sys\r\n" + CLASS.replace("\n", "\r\n"), COMPILE, "import torch", 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_added_import_goes_below_the_future_imports_and_the_file_compiles(tmp_path, capsys, case):
    text, action, added, after_line = CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    path = src / "m.py"
    path.write_bytes(text.encode())
    doc = ast.get_docstring(ast.parse(text))
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + action)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 0, capsys.readouterr().err
    new = path.read_bytes().decode()
    compile(new, str(path), "exec", dont_inherit=True)  # a misplaced __future__ import raises SyntaxError here
    assert ast.get_docstring(ast.parse(new)) == doc
    old_lines, new_lines = text.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
    assert [op for op, *_ in ops if op not in ("equal", "insert")] == []  # the user's lines byte for byte
    # the import comes right after the head (the docstring and __future__ lines, then the file's imports)
    assert new_lines[after_line].rstrip("\r\n") == added, new
    assert new_lines[after_line].endswith("\r\n") == text.endswith("\r\n")


def test_a_rewrite_that_would_not_compile_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    """The last gate before a file is written: where the original compiles and the rewritten text
    does not (here LibCST's own placement of the import, with :func:`imports_below_head` taken
    out), the rewrite is refused at the action's plan line with CPython's message and the line."""
    from rewriter.rewrite import transform

    monkeypatch.setattr(transform, "imports_below_head", lambda old, new: new)
    text = CASES["future_then_import_on_one_line"][0]
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + COMPILE)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    assert (src / "m.py").read_text() == text and [p.name for p in src.iterdir()] == ["m.py"]
    assert f"{plan}:3: actions[0] (compile m.py::Net)" in err, err
    assert "m.py:3: the rewritten file would not compile: from __future__ imports must occur at the beginning" in err, err
    assert "nothing was written" in err
