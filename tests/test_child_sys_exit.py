"""A program whose build_model calls sys.exit (its own argparse reading the command line, say)
made validate's child say only "cold-eager exited with code 3 and wrote no result". The child
now says the program called sys.exit, with the user's line."""

from __future__ import annotations

import pytest

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL

#: tiny_programs' two-block model and harness, whose build_model exits unless given the program's flag
HARNESS = NET_HARNESS.replace("import torch\n", "import sys\nimport torch\n", 1).replace(
    "def build_model():\n    return Net()", 'def build_model():\n    if "--lr" not in sys.argv:\n        sys.exit(3)\n    return Net()')

assert "sys.exit(3)" in HARNESS and "import sys" in HARNESS

PLAN = """\
version: 1
harness:
  file: harness.py
  shapes:
  - batch: 2
  device: cpu
actions:
- action: compile
  target: model.py::Block
"""


@pytest.mark.parametrize("launcher", ["zygote", "popen"])
def test_sys_exit_in_the_harness_is_named_with_its_line_in_validate(tmp_path, capsys, monkeypatch, launcher):
    """Both ways a child starts (forked from the pre-imported server, or with ``STACKPART_ZYGOTE=0``
    a fresh interpreter) say the same."""
    from rewriter.engine import runner, zygote

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    if launcher == "popen":
        monkeypatch.setenv(zygote.SWITCH, "0")
    else:
        monkeypatch.delenv(zygote.SWITCH, raising=False)
    started = []
    start = runner._start_child
    monkeypatch.setattr(runner, "_start_child", lambda *a: started.append(start(*a)) or started[-1])
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(NET_MODEL)
    (src / "harness.py").write_text(HARNESS)
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(src), "--timeout", "120"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the program called sys.exit(3) at a/harness.py:8" in err, err  # a/: validate's original tree
    assert "exited with code" not in err, err
    assert started and all(isinstance(p, zygote.Forked) == (launcher == "zygote") for p in started), started
