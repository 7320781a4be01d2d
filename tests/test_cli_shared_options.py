"""The options `diagnose` and `validate` share are declared once in cli.py and still reach each
command with its own default; a distributed diagnose without --shape says which shape it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.cli import cli, main

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("backend", "timeout", "no_overlap", "pin", "host", "nproc")


def _captured(monkeypatch, target: str) -> dict:
    seen: dict = {}

    def fake(*args, **kwargs):
        seen.update(kwargs, args=args)
        return 0

    monkeypatch.setattr(target, fake)
    return seen


def _param(command: str, name: str):
    return next(p for p in cli.commands[command].params if p.name == name)


@pytest.mark.parametrize("name", SHARED)
def test_a_shared_option_has_one_flag_type_and_name_in_both_commands(name):
    d, v = _param("diagnose", name), _param("validate", name)
    assert d.opts == v.opts and type(d.type) is type(v.type) and d.is_flag == v.is_flag


def test_each_shared_flag_is_declared_once_in_the_cli_source():
    src = (ROOT / "rewriter" / "cli.py").read_text(encoding="utf-8")
    for flag in ("--backend", "--timeout", "--no-overlap", "--pin", "--host", "--nproc"):
        assert src.count(f'"{flag}"') == 1, flag


def test_validate_gives_the_engine_its_timeout_and_backend(tmp_path, monkeypatch):
    seen = _captured(monkeypatch, "rewriter.validate.command.validate_command")
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path), "--timeout", "7.5",
                 "--backend", "eager"]) == 0
    assert seen["args"][2].timeout_s == 7.5 and seen["args"][2].backend == "eager"
    seen.clear()
    assert main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(tmp_path)]) == 0
    assert seen["args"][2].timeout_s == 600.0 and seen["args"][2].backend == "inductor"  # validate's own defaults


def test_diagnose_gives_the_run_its_timeout_and_backend(tmp_path, monkeypatch):
    seen = _captured(monkeypatch, "rewriter.diagnose.runner.diagnose_command")
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "--timeout", "12", "--backend", "eager"]) == 0
    assert seen["timeout"] == 12.0 and seen["backend"] == "eager"
    seen.clear()
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path)]) == 0
    assert seen["timeout"] == 300.0 and seen["backend"] is None  # None: chosen by the device at run time


@pytest.mark.parametrize("command", ["diagnose", "validate"])
def test_a_timeout_of_zero_is_refused_by_both(tmp_path, capsys, command):
    flag = "--plan" if command == "validate" else "--harness"
    assert main([command, flag, str(tmp_path / "plan.yaml"), str(tmp_path), "--timeout", "0"]) == 2
    assert "Invalid value for '--timeout'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_each_help_states_the_commands_own_default(capsys):
    assert main(["validate", "--help"]) == 0
    measurement = " ".join(capsys.readouterr().out.split("Measurement:")[1].split("\n\n")[0].split())
    assert "backend of the two baselines. [default: inductor]" in measurement, measurement
    assert "Seconds per child process. [default: 600.0; x>0]" in measurement, measurement
    assert main(["diagnose", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "backend of the search's candidates (default: inductor on CUDA; eager on CPU" in out, out
    assert "Seconds one harness call may take. [default: 300.0; x>0]" in out, out


HARNESS = """\
import torch


def build_model():
    return torch.nn.Linear(8, 8)


def make_inputs(batch: int = 3, width: int = 8):
    return (torch.randn(batch, width),)
"""


@pytest.mark.parametrize("given", [False, True])
def test_distributed_diagnose_says_the_shape_it_runs_when_no_shape_is_given(tmp_path, monkeypatch, capsys, given):
    from rewriter.errors import StackpartError

    def launched(*args, **kwargs):  # the ranks are not started: the line comes before the launch
        raise StackpartError("not launched in this test")

    monkeypatch.setattr("rewriter.distributed.command.run_distributed", launched)
    (tmp_path / "harness.py").write_text(HARNESS)
    argv = ["diagnose", "--harness", "harness.py", str(tmp_path), "-o", str(tmp_path / "out" / "plan.yaml"),
            "--nproc", "2", "--device", "cpu", "--mode", "training"] + (["--shape", "batch=2,width=8"] if given else [])
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    said = [ln for ln in lines if ln.startswith("diagnose: no --shape given:")]
    assert said == ([] if given else [
        "diagnose: no --shape given: make_inputs()'s own defaults, batch=3,width=8 (one shape; pass "
        "--shape name=int,... (repeatable) for the shapes your program runs)"]), lines
    assert "error: not launched in this test" in lines
