"""Loading a harness: a syntax error in it (or in a module it imports) is one `path:line:col` line."""

from __future__ import annotations

import pytest

from rewriter.errors import StackpartError
from rewriter.harness import load_harness
from rewriter.plan import Harness

GOOD_HARNESS = "from model import Net\n\ndef build_model():\n    return Net()\n\ndef make_inputs():\n    return ()\n"


@pytest.mark.parametrize(
    "files, where",
    [
        ({"harness.py": "import torch\n\ndef build_model(:\n    pass\n"}, "harness.py:3:17"),
        ({"harness.py": GOOD_HARNESS, "model.py": "import torch\nclass Net(torch.nn.Module:\n    pass\n"}, "model.py:2:26"),
    ],
)
def test_syntax_error_names_file_line_and_col(tmp_path, files, where):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(StackpartError) as info:
        load_harness(Harness(file="harness.py", device="cpu"), tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(tmp_path / where) + ": ") and "syntax error: invalid syntax" in text, text


@pytest.mark.parametrize("file", ["../harness.py", "/abs/harness.py", "harness.txt", "sub/../../h.py"])
def test_harness_file_outside_src_or_not_python_is_a_plan_error(tmp_path, file):
    from rewriter.plan import load_plan

    (tmp_path / "plan.yaml").write_text(f"version: 1\nharness:\n  file: {file}\nactions: []\n")
    with pytest.raises(StackpartError) as info:
        load_plan(tmp_path / "plan.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'plan.yaml'}:3:3: harness.file: expected a .py file relative to SRC")


def test_diagnose_harness_flag_not_python_names_the_flag(tmp_path, capsys):
    from rewriter.cli import main

    (tmp_path / "harness.txt").write_text(GOOD_HARNESS)
    assert main(["diagnose", "--harness", "harness.txt", str(tmp_path), "-o", str(tmp_path / "plan.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --harness: expected a .py file relative to SRC") and "Traceback" not in err, err
    assert not (tmp_path / "plan.yaml").exists()
