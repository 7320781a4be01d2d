"""`stackpart check --fix` (the stackpart-fix pre-commit hook) interrupted after it has written
files: the plan's pending edits and the rules' safe fixes are written in two transactions, with
the rules run between them, so Ctrl-C or SIGTERM can stop it with the first written and the second
not. Each file is whole (the transaction of :mod:`rewriter.rewrite.apply`); the exit code is the
signal's, and stderr names every file already written, so a user who sees "aborted" knows the tree
is not as it was."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from rewriter.check import command as check_command
from rewriter.cli import main
from tiny_programs import MIN1

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpt(tmp_path, monkeypatch):
    """examples/gpt, whose model.py drifts from its plan (the compile of Block is pending), and
    min1.py beside it with a fixable SP106 finding."""
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    (tmp_path / "gpt" / "src" / "min1.py").write_text(MIN1)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _fix(*files: str) -> list[str]:
    return ["check", "--fix", "--no-validate", "--plan", "gpt/plan.yaml", "--src", "gpt/src", *files]


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_rules_run_names_the_plan_edits_already_written(gpt, monkeypatch, capsys, how):
    model = gpt / "gpt/src/model.py"
    before = model.read_bytes()

    def interrupted(*args, **kwargs):
        signal.raise_signal(getattr(signal, how))  # Ctrl-C / a CI cancel while the rules run
        raise AssertionError("the signal's handler raises")

    monkeypatch.setattr(check_command, "check_files", interrupted)
    if how == "SIGINT":
        assert main(_fix("gpt/src/model.py", "gpt/src/min1.py")) == 130
    else:
        with pytest.raises(SystemExit) as exc:
            main(_fix("gpt/src/model.py", "gpt/src/min1.py"))
        assert exc.value.code == 143
    err = capsys.readouterr().err
    assert model.read_bytes() != before and b"@torch.compile" in model.read_bytes()  # the plan's edit, whole
    assert (gpt / "gpt/src/min1.py").read_text() == MIN1  # the rules' fix: not written
    assert "interrupted after --fix wrote 1 file(s)" in err and "gpt/src/model.py" in err, err
    assert "min1.py" not in err


def test_a_signal_during_the_last_rename_of_the_fixes_counts_them_written(gpt, monkeypatch, capsys):
    """SIGINT inside the rename of the last fixed file: that transaction is complete, so the
    interrupt that stops check afterwards must still name the file as written."""
    fixed = gpt / "gpt/src/min1.py"
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if Path(dst).name == "min1.py":
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["check", "--fix", "gpt/src/min1.py"]) == 130
    err = capsys.readouterr().err
    assert "maybe_mark_dynamic(x, 1)" in fixed.read_text()
    assert "interrupted after --fix wrote 1 file(s)" in err and "gpt/src/min1.py" in err, err


def test_an_interrupt_before_anything_is_written_says_nothing_of_writes(gpt, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(check_command, "check_files", interrupted)
    assert main(["check", "--fix", "gpt/src/min1.py"]) == 130
    assert "wrote" not in capsys.readouterr().err
    assert (gpt / "gpt/src/min1.py").read_text() == MIN1
