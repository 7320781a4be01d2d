"""Smaller edges of a rewrite: the cap on source files holds for what a rewrite writes (a file just
under it that the edits push over could not be read back by the next run of the same plan), and a
parameter named with any Python identifier (PEP 3131: ``ä``) can be marked."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter import source as source_mod
from rewriter.cli import main
from rewriter.errors import StackpartError
from rewriter.plan import parse_plan

PLAN = "version: 1\nactions:\n  - action: compile\n    target: m.py::f\n"


def _tree(tmp_path: Path, size: int) -> tuple[Path, Path, bytes]:
    """``m.py`` of exactly ``size`` bytes (padded by a comment) with a function to compile."""
    src = tmp_path / "src"
    src.mkdir()
    head = b"import torch\n\n\ndef f(x):\n    return x + 1\n\n"
    data = head + b"#" + b"x" * (size - len(head) - 2) + b"\n"
    assert len(data) == size
    (src / "m.py").write_bytes(data)
    (tmp_path / "plan.yaml").write_text(PLAN)
    return src, tmp_path / "plan.yaml", data


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_a_rewrite_that_would_push_a_file_over_the_cap_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(source_mod, "MAX_SOURCE_BYTES", 4096)
    src, plan, data = _tree(tmp_path, 4090)  # read: under the cap; rewritten (+15 bytes): over it
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {plan}:3: actions[0] (compile m.py::f): m.py would be 4,105 bytes once rewritten, "
                          "over the "), err
    assert "cap on the source files stackpart reads" in err
    assert "nothing was written" in err
    assert (src / "m.py").read_bytes() == data


def test_a_rewrite_that_stays_under_the_cap_can_be_read_back_by_the_same_plan(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(source_mod, "MAX_SOURCE_BYTES", 4096)
    src, plan, _ = _tree(tmp_path, 4096 - 15)  # rewritten: exactly the cap
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0, err
    assert len((src / "m.py").read_bytes()) == 4096
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--check")
    assert code == 0, err  # the same plan on its own output: nothing pending, no "over the cap"


def test_a_non_ascii_parameter_name_is_marked(tmp_path, capsys):
    import torch

    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("import torch\n\n\ndef f(ä):\n    return ä + 1\n", encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: ä\n    dim: 0\n",
                    encoding="utf-8")
    code, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0, err
    text = (src / "m.py").read_text(encoding="utf-8")
    assert "def f(ä):\n    torch._dynamo.mark_dynamic(ä, 0)\n" in text
    namespace: dict = {}
    exec(compile(text, "m.py", "exec"), namespace)
    x = torch.ones(3)
    namespace["f"](x)
    assert 0 in x._dynamo_dynamic_indices


@pytest.mark.parametrize("name", ["ä", "größe", "_x1", "match", "名前"])
def test_any_python_identifier_is_a_valid_arg(name):
    parse_plan(f"version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: {name}\n    dim: 0\n")


@pytest.mark.parametrize("name", ["if", "'1x'", "'a-b'", "'a b'"])
def test_a_keyword_or_a_non_identifier_arg_is_refused_at_its_line(name):
    with pytest.raises(StackpartError) as info:
        parse_plan(f"version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: {name}\n    dim: 0\n",
                   "plan.yaml")
    assert str(info.value).startswith("plan.yaml:5:") and "expected a Python identifier" in str(info.value)
