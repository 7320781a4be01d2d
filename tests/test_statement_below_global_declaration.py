"""A statement inserted into a function that declares ``global torch`` (or ``nonlocal torch``)
goes below that declaration.

CPython refuses a function that reads a name before declaring it global ("name 'torch' is used
prior to global declaration", raised by the compiler's symbol table, not by ``ast.parse``;
https://docs.python.org/3/reference/simple_stmts.html#the-global-statement), so
``torch._dynamo.mark_dynamic(x, 0)`` above ``global torch`` made a file that no longer compiles.
A declaration below other statements of the function is refused in one line, nothing written:
going below it would move the statement past code that runs first.
"""

from __future__ import annotations

import difflib
import runpy
from pathlib import Path

import pytest

from rewriter.cli import main

MARK = "  - {action: mark_dynamic, target: m.py::run, arg: x, dim: 0}\n"
CONFIG = "  - {action: dynamo_config, target: m.py::run, settings: {capture_scalar_outputs: true}}\n"

CASES = {
    "global_then_local_import": ("import torch\n\n\ndef run(model, x):\n    global torch\n    import torch\n"
                                 "    return model(x)\n", MARK, 5),
    "docstring_then_global": ('import torch\n\n\ndef run(model, x):\n    """Run."""\n    global torch, other\n'
                              "    return model(x)\n", MARK, 6),
    "global_in_a_file_without_torch": ("from __future__ import annotations\n\n\ndef run(model, x):\n    global torch\n"
                                       "    return model(x)\n", MARK, 6),
    "dynamo_config": ("import torch\n\n\ndef run(model, x):\n    global torch\n    return model(x)\n", CONFIG, 5),
}


def _rewrite(tmp_path: Path, text: str, action: str) -> tuple[int, Path]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(text)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + action)
    return main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]), src / "m.py"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_statement_goes_below_the_declaration_and_the_file_runs(tmp_path, capsys, case):
    text, action, line = CASES[case]
    code, path = _rewrite(tmp_path, text, action)
    assert code == 0, capsys.readouterr().err
    new = path.read_text()
    compile(new, str(path), "exec", dont_inherit=True)  # above the declaration: SyntaxError here
    old_lines, new_lines = text.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
    assert [op for op, *_ in ops if op not in ("equal", "insert")] == []
    assert "torch._dynamo" in new_lines[line] and "global" in new_lines[line - 1], new
    import torch

    x = torch.ones(3, 4)
    assert runpy.run_path(str(path))["run"](lambda t: t * 2, x).sum().item() == 24.0


def test_a_declaration_below_other_statements_is_refused_and_nothing_is_written(tmp_path, capsys):
    text = "import torch\n\n\ndef run(model, x):\n    y = model(x)\n    global torch\n    return y\n"
    code, path = _rewrite(tmp_path, text, MARK)
    err = capsys.readouterr().err
    assert code == 2
    assert path.read_text() == text
    assert "plan.yaml:3: actions[0] (mark_dynamic m.py::run)" in err and "global torch" in err, err
