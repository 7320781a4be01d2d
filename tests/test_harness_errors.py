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
