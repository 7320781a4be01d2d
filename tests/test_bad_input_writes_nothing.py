"""Bad input writes nothing: a ``harness.call`` the built model lacks (bad configuration, found
only once the model is built) is exit 2 with ``file:line: field: what``, and neither diagnose nor
validate makes a folder, writes a report or touches a previous run's; the user's own code raising
in setup is a harness failure whose partial report is the product (docs/guide.md, "Exit codes")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rewriter.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = '''\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    def inverse(self, y):
        return y - self.fc.bias
'''

HARNESS = '''\
import torch

from model import Net


def build_model():
    return Net()


def make_inputs(batch: int = 2):
    {body}return (torch.randn(batch, 4),)
'''


def _src(tmp_path: Path, body: str = "") -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS.format(body=body))
    return src


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and its modification time (ns)."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def _error(capsys) -> str:
    return [row for row in capsys.readouterr().err.splitlines() if row.startswith("error: ")][-1]


def test_diagnose_with_a_call_the_model_lacks_exits_2_naming_the_flag_and_writes_no_folder(tmp_path, capsys):
    src = _src(tmp_path)
    before = _tree(src)
    out = tmp_path / "out"
    code = main(["diagnose", "--harness", "harness.py", str(src), "--device", "cpu", "--call", "invers",
                 "-o", str(out / "plan.yaml")])
    err = _error(capsys)
    assert code == 2, err
    assert err == ("error: harness.py: --call: build_model() built a Net, which has no method 'invers' to call with the "
                   "inputs; did you mean 'inverse'?"), err
    assert not out.exists()
    assert {k: v for k, v in _tree(src).items() if "__pycache__" not in k} == before


def test_diagnose_with_a_plans_call_the_model_lacks_names_the_plans_line(tmp_path, capsys):
    """``--harness plan.yaml``: the value came from the plan, so the error is at its ``call:`` line,
    as validate's is."""
    src = _src(tmp_path)
    plan = tmp_path / "harness.yaml"
    plan.write_text("version: 1\nharness:\n  file: harness.py\n  call: invers\n  device: cpu\nactions: []\n")
    out = tmp_path / "out"
    code = main(["diagnose", "--harness", str(plan), str(src), "-o", str(out / "plan.yaml")])
    err = _error(capsys)
    assert code == 2 and err.startswith(f"error: {plan}:4:3: harness.call: build_model() built a Net, which has no method "
                                        "'invers'"), err
    assert not out.exists()


def test_diagnose_with_a_call_the_model_lacks_leaves_the_previous_report_as_it_was(tmp_path, capsys):
    """A report folder of an earlier run (its report.json is diagnose's): no artifact of it is
    cleared and diagnose.log is not overwritten."""
    src = _src(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "report.json").write_text(json.dumps({"version": 1, "rungs": [], "complete": True}))
    (reports / "report.md").write_text("# the last run\n")
    (reports / "diagnose.log").write_text("12:00:00 diagnose: the last run\n")
    before = _tree(reports)
    code = main(["diagnose", "--harness", "harness.py", str(src), "--device", "cpu", "--call", "forwad",
                 "-o", str(tmp_path / "plan.yaml"), "--report-dir", str(reports)])
    assert code == 2 and "no method 'forwad'" in _error(capsys)
    assert _tree(reports) == before
    assert not (tmp_path / "plan.yaml").exists()


def test_the_users_code_raising_in_setup_still_gets_its_partial_report(tmp_path, capsys):
    """The contrast: make_inputs raising is the user's code failing, not bad input."""
    src = _src(tmp_path, body="raise ValueError('no data')\n    ")
    out = tmp_path / "out"
    code = main(["diagnose", "--harness", "harness.py", str(src), "--device", "cpu", "-o", str(out / "plan.yaml")])
    err = _error(capsys)
    assert code == 2 and "diagnose stopped at rung setup" in err and "raised ValueError: no data" in err, err
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["rungs"] == [] and "raised ValueError: no data" in report["error"], report
    assert (out / "stackpart-diagnose" / "diagnose.log").is_file() and not (out / "plan.yaml").exists()


def test_validate_with_a_call_the_model_lacks_exits_2_at_the_plans_line_and_writes_nothing(tmp_path, capsys):
    src = _src(tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nharness:\n  file: harness.py\n  call: invers\n  shapes:\n    - {batch: 2}\n"
                    "  device: cpu\nactions: []\n")
    before_src, before_dir = _tree(src), sorted(os.listdir(tmp_path))
    code = main(["validate", "--plan", str(plan), str(src)])
    err = _error(capsys)
    assert code == 2, err
    assert err == (f"error: {plan}:4:3: harness.call: build_model() built a Net, which has no method 'invers' to call "
                   "with the inputs; did you mean 'inverse'?"), err
    assert sorted(os.listdir(tmp_path)) == before_dir  # no .stackpart/validation beside the plan
    assert {k: v for k, v in _tree(src).items() if "__pycache__" not in k} == before_src
