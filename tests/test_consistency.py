"""rewriter/consistency.py: what the source already holds, for functions defined anywhere a plan
target can name (rewriter.targets.collect_definitions), not only at the top of the module or a
class: a helper under ``try:``/``if`` was once invisible to these rules."""

from __future__ import annotations

from pathlib import Path

from rewriter.cli import main

DISABLED_UNDER_TRY = """\
import torch
import torch.nn as nn

try:
    @torch.compiler.disable
    def route(x):
        return x
except ImportError:
    route = None


class Block(nn.Module):
    def forward(self, x):
        return route(x)
"""

COMPILED_UNDER_IF = """\
import torch

if torch.__version__:
    @torch.compile(fullgraph=True)
    def outer(x):
        return helper(x)

    def helper(x):
        return x
"""


def _refusal(tmp_path: Path, capsys, source: str, action: str) -> str:
    """``rewrite`` of ``source`` (``model.py``) with one action: assert it is refused (exit 2,
    nothing written) and return its error line."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(source)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + action)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    assert (src / "model.py").read_text() == source
    [line] = capsys.readouterr().err.splitlines()
    return line


def test_fullgraph_around_a_helper_the_source_disables_under_try(tmp_path, capsys):
    line = _refusal(tmp_path, capsys, DISABLED_UNDER_TRY,
                    "  - action: compile\n    target: model.py::Block\n    options: {fullgraph: true}\n")
    assert "fullgraph=True on Block.forward around route, which the source keeps eager" in line, line
    assert "plan.yaml:3:" in line, line  # at the action's line


def test_disable_inside_a_function_the_source_compiles_fullgraph_under_if(tmp_path, capsys):
    line = _refusal(tmp_path, capsys, COMPILED_UNDER_IF, "  - action: disable\n    target: model.py::helper\n")
    assert "disable of helper inside outer, which the source compiles with fullgraph=True" in line, line


def test_the_same_plan_without_fullgraph_is_written(tmp_path, capsys):
    """The rule reads the literal ``fullgraph=True`` only: a compile without it composes."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(COMPILED_UNDER_IF.replace("fullgraph=True", "fullgraph=False"))
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: disable\n    target: model.py::helper\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert "@torch.compiler.disable" in (src / "model.py").read_text()


def test_dynamo_config_in_a_helper_a_source_compiled_function_calls_is_refused(tmp_path, capsys):
    """The flags are read while Dynamo traces; a helper that @torch.compile'd step() calls runs inside
    that trace, so setting them there is too late, as in the compiled function itself."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "run.py").write_text("import torch\n\n\ndef setup():\n    return 1\n\n\n@torch.compile\ndef step(x):\n"
                                "    setup()\n    return x + 1\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: dynamo_config\n    target: run.py::setup\n"
                    "    settings:\n      capture_scalar_outputs: true\n")
    before = (src / "run.py").read_bytes()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    assert "dynamo_config in setup, which runs inside step, a function the source compiles: Dynamo reads" in err, err
    assert (src / "run.py").read_bytes() == before


CONTRADICTS = """\
import torch
from torch.compiler import disable as keep


@torch.compiler.disable
def d(x):
    return x


@keep
def k(x):
    return x


@torch.compile
def c(x):
    return x


@torch._dynamo.optimize("eager")
def o(x):
    return x
"""


def test_a_compile_of_a_function_the_source_disables_is_refused(tmp_path, capsys):
    """The plan against the source, as the plan against itself: @torch.compile under
    @torch.compiler.disable compiles nothing (the disable's alias included)."""
    line = _refusal(tmp_path, capsys, CONTRADICTS, "  - action: compile\n    target: model.py::d\n")
    assert "compile of d, which the source keeps eager with @torch.compiler.disable" in line, line
    (tmp_path / "k").mkdir()
    line = _refusal(tmp_path / "k", capsys, CONTRADICTS, "  - action: compile\n    target: model.py::k\n")
    assert "compile of k, which the source keeps eager" in line, line


def test_a_disable_of_a_function_the_source_compiles_is_refused(tmp_path, capsys):
    line = _refusal(tmp_path, capsys, CONTRADICTS, "  - action: disable\n    target: model.py::c\n")
    assert "disable of c, which the source compiles with a decorator on that function" in line, line
    (tmp_path / "o").mkdir()
    line = _refusal(tmp_path / "o", capsys, CONTRADICTS, "  - action: disable\n    target: model.py::o\n")
    assert "disable of o, which the source compiles" in line, line


def test_a_compile_of_a_function_dynamo_optimize_compiles_is_left_alone(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(CONTRADICTS)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: model.py::o\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "model.py").read_text() == CONTRADICTS
