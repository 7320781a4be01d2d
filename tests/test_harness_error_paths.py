"""A harness error names the user's file relative to SRC, as the rest of the CLI names files
(rewrite's ``m.py:1:7``, check_harness's ``harness.py``, the rungs' ``model.py:12``), and says the
place once: ``error: harness.py:8: diagnose stopped at rung setup: ...; partial results in ...``,
not ``/abs/src/harness.py:8: ... (/abs/src/harness.py:8)``. validate's children keep its own
``a/`` (original) and ``b/`` (rewritten) prefixes, once."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.errors import StackpartError

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        {init}
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        {forward}
        return self.fc(x)
"""
HARNESS = """\
import sys
import torch
from model import Net
{top}


def build_model():
    {build}
    return Net()


def make_inputs(batch=2):
    {inputs}
    return (torch.randn(batch, 4),)
"""
#: where the user's code raises -> (its file relative to SRC, its line, what the line says)
CASES = {
    "import": (dict(top="raise ImportError('no such thing')"), "harness.py", 4,
               "importing the harness raised ImportError: no such thing"),
    "model_init": (dict(init="raise ValueError('no init')"), "model.py", 8,
                   "diagnose stopped at rung setup: harness.model: build_model() raised ValueError: no init"),
    "build_model": (dict(build="raise ValueError('no model')"), "harness.py", 8,
                    "diagnose stopped at rung setup: harness.model: build_model() raised ValueError: no model"),
    "make_inputs": (dict(inputs="raise ValueError('no data')"), "harness.py", 13,
                    "diagnose stopped at rung setup: harness.inputs: make_inputs(batch=2) raised ValueError: no data"),
    "sys_exit": (dict(build="sys.exit(3)"), "harness.py", 8,
                 "diagnose stopped at rung setup: harness build_model(): called sys.exit(3)"),
    "forward": (dict(forward="raise ValueError('no forward')"), "model.py", 12,
                "diagnose stopped at rung batch_scaling: harness build_model() model forward at {'batch': 2}: raised "
                "ValueError: no forward"),
}


def _tree(root: Path, harness_dir: str = "", **parts: str) -> Path:
    src = root / "src"
    (src / harness_dir).mkdir(parents=True, exist_ok=True)
    (src / "model.py").write_text(MODEL.format(init=parts.get("init", "pass"), forward=parts.get("forward", "pass")))
    (src / harness_dir / "harness.py").write_text(HARNESS.format(
        top=parts.get("top", ""), build=parts.get("build", "pass"), inputs=parts.get("inputs", "pass")))
    return src


def _error_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("cwd", ["above", "inside"])
def test_diagnose_names_the_users_line_relative_to_src_once(tmp_path, capsys, monkeypatch, name, cwd):
    parts, file, line, said = CASES[name]
    src = _tree(tmp_path, **parts)
    monkeypatch.chdir(src if cwd == "inside" else tmp_path)
    code = main(["diagnose", "--harness", "harness.py", "." if cwd == "inside" else "src", "--device", "cpu",
                 "--no-search", "--shape", "batch=2", "-o", str(tmp_path / "out" / "plan.yaml")])
    err = _error_line(capsys)
    head = err.split("; partial results in ")[0]
    assert code == 2 and head == f"error: {file}:{line}: {said}", err
    assert head.count(file) == 1 and str(tmp_path) not in head, err


def test_a_harness_in_a_subfolder_names_the_model_file_under_src(tmp_path, capsys, monkeypatch):
    """The frame search was the harness's own folder: model.py at SRC's top was not found from
    bench/harness.py and the line fell back to the harness file without a line."""
    src = _tree(tmp_path, "bench", init="raise ValueError('no init')")
    monkeypatch.chdir(tmp_path)
    code = main(["diagnose", "--harness", "bench/harness.py", "src", "--device", "cpu", "--no-search",
                 "--shape", "batch=2", "-o", str(tmp_path / "out" / "plan.yaml")])
    err = _error_line(capsys)
    assert code == 2 and err.startswith("error: model.py:8: diagnose stopped at rung setup: harness.model: "), err
    assert src.exists()


def test_a_syntax_error_in_a_module_the_harness_imports_is_relative_to_src(tmp_path, capsys, monkeypatch):
    src = _tree(tmp_path)
    (src / "model.py").write_text("import torch\nclass Net(torch.nn.Module:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    code = main(["diagnose", "--harness", "harness.py", "src", "--device", "cpu", "--no-search",
                 "--shape", "batch=2", "-o", str(tmp_path / "out" / "plan.yaml")])
    assert code == 2 and _error_line(capsys) == "error: model.py:2:26: importing the harness failed: syntax error: invalid syntax"


def test_validate_names_the_original_trees_file_once(tmp_path, capsys, monkeypatch):
    src = _tree(tmp_path, build="raise ValueError('no model')")
    (tmp_path / "plan.yaml").write_text("version: 1\nharness: {file: harness.py, device: cpu}\nactions: []\n")
    monkeypatch.chdir(tmp_path)
    code = main(["validate", "--plan", "plan.yaml", "src", "--baselines", "none", "--reps", "2", "--warmup", "1"])
    err = capsys.readouterr().err
    errors = [row for row in err.splitlines() if row.startswith("error:")]
    assert code == 2 and errors == [
        "error: the original model (eager reference) failed: harness: a/harness.py:8: harness.model: build_model() "
        "raised ValueError: no model"], errors
    # the progress line says it failed (not "cold phase done"), at the same a/ path, no temp dir
    assert "validate: eager: failed: harness: a/harness.py:8: harness.model: build_model() raised" in err, err
    assert "cold phase done" not in err and "stackpart-validate-" not in err, err
    assert src.exists()


def test_validates_progress_line_names_the_rewritten_tree_as_b(tmp_path, capsys):
    """The progress line printed the child's temp path (/tmp/stackpart-validate-*/rewritten/model.py:12,
    gone once validate ends) while the summary said b/model.py:12."""
    from types import SimpleNamespace

    from rewriter.validate.command import _progress, tree_labels

    work = tmp_path / "stackpart-validate-x"
    trees = SimpleNamespace(original=work / "original", rewritten=work / "rewritten")
    _progress("plan", "cold", {"problems": [f"the rewritten model raised: ValueError: x ({work}/rewritten/model.py:12)"]},
              labels=tree_labels(trees, work))
    assert capsys.readouterr().err == "validate: plan: the rewritten model raised: ValueError: x (b/model.py:12)\n"


def test_the_child_puts_a_harness_path_under_its_tree_for_the_parent_to_relabel(tmp_path):
    from rewriter.engine.build import in_tree

    with pytest.raises(StackpartError) as info, in_tree(tmp_path):
        raise StackpartError("x", path="harness.py", line=3)
    assert info.value.path == str(tmp_path / "harness.py")
    with pytest.raises(StackpartError) as info, in_tree(tmp_path):
        raise StackpartError("x", path="/elsewhere/plan.yaml", line=3)
    assert info.value.path == "/elsewhere/plan.yaml"


def test_the_searchs_error_names_files_relative_to_src_and_its_place_once(tmp_path):
    from rewriter.diagnose.search import _as_is_failed

    original = tmp_path / "stackpart-search-x" / "original"
    placed = _as_is_failed([f"the original model (eager reference) failed: harness: {original}/harness.py:10: boom"],
                           original, "harness.py")
    assert str(placed) == ("the search could not measure the program as it is: the original model (eager reference) "
                           "failed: harness: harness.py:10: boom")
    unplaced = _as_is_failed(["the original model (eager reference) failed: timeout: no output in 5 s"], original,
                             "harness.py")
    assert str(unplaced).startswith("harness.py: the search could not measure the program as it is: ")


def test_a_syntax_error_outside_src_keeps_its_own_file(tmp_path, monkeypatch):
    """An installed module's syntax error is not put at the harness file (whose line it is not)."""
    from rewriter.harness import load_harness
    from rewriter.plan import Harness

    site = tmp_path / "site"
    site.mkdir()
    (site / "brokenlib.py").write_text("def f(:\n    pass\n")
    monkeypatch.syspath_prepend(str(site))
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text("import brokenlib\n\n\ndef build_model():\n    pass\n\n\ndef make_inputs():\n    pass\n")
    with pytest.raises(StackpartError) as info:
        load_harness(Harness(file="harness.py", device="cpu"), src)
    assert str(info.value).startswith(f"{site / 'brokenlib.py'}:1:7: importing the harness failed: syntax error"), info.value
