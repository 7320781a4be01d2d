"""An error raised inside the harness during a rung is one line naming the rung,
the user's file:line where torch points (the last frame under SRC: Dynamo's user stack when the
Python traceback holds only torch's frames), and the exception's first full line, with the
cause torch states on the next line where its first line is only a heading."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.diagnose.runner import diagnose, harness_from_flags


@pytest.fixture(autouse=True)
def one_thread_then_reset(one_thread):
    """tests/conftest.py's ``one_thread``, and Dynamo reset after each test."""
    import torch

    yield
    torch._dynamo.reset()


HARNESS = """\
import torch
from model import Net

def build_model():
    return Net()

def make_inputs(batch: int = 2):
    x = torch.randn(batch, 4)
{mark}    return (x,)
"""


def _tree(tmp_path: Path, model: str, mark: str = "") -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(textwrap.dedent(model))
    (src / "harness.py").write_text(HARNESS.format(mark=mark))
    return src


def _diagnose_cli(tmp_path: Path, src: Path, capsys, *shape: str) -> tuple[int, str, dict]:
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               *[a for s in shape for a in ("--shape", s)], "--no-search"])
    err = " ".join(capsys.readouterr().err.split())  # the terminal wraps long lines
    return rc, err, json.loads((out / "stackpart-diagnose" / "report.json").read_text())


def _line_of(src: Path, needle: str) -> int:
    return next(i for i, line in enumerate((src / "model.py").read_text().splitlines(), 1) if needle in line)


def test_an_error_torch_raises_while_tracing_names_the_users_line_not_torchs(tmp_path, capsys):
    """A broadcast mismatch inside a block the model compiles itself: the Python traceback ends in
    torch's fake-tensor code; the user's line is Dynamo's user stack (real_stack)."""
    src = _tree(tmp_path, """\
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.bias = nn.Parameter(torch.zeros(5))

            def forward(self, x):
                y = x * 2
                return y + self.bias


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.block = torch.compile(Block(), backend="eager")

            def forward(self, x):
                return self.block(self.fc(x))
        """)
    rc, err, report = _diagnose_cli(tmp_path, src, capsys, "batch=2")
    assert rc == 2
    line = _line_of(src, "return y + self.bias")
    expected = (f"diagnose stopped at rung batch_scaling: harness build_model() model forward at {{'batch': 2}}: raised "
                "TorchRuntimeError: RuntimeError when making fake tensor call -- Dynamo failed to run FX node with fake tensors")
    assert expected in err and expected in report["error"], err
    assert f"error: model.py:{line}: " in err and f"(model.py:{line})" in report["error"]
    assert "Attempting to broadcast a dimension of length 5" in report["error"], "the cause, not only the heading"
    assert "\n" not in report["error"]


def test_a_constraint_violation_gives_its_cause_and_the_function_dynamo_was_compiling(tmp_path, capsys):
    """The user's own mark (min=2) met at batch 1: ConstraintViolationError's first line is only a
    heading, so the "You marked ... specialized it to be a constant (1)" line follows it; torch
    points at no line, so the function being compiled is named."""
    src = _tree(tmp_path, """\
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            @torch.compile(backend="eager")
            def forward(self, x):
                return self.fc(x).relu()
        """, mark="    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)\n")
    rc, err, report = _diagnose_cli(tmp_path, src, capsys, "batch=1")
    assert rc == 2
    error = report["error"]
    assert error.startswith("diagnose stopped at rung batch_scaling: harness build_model() model forward at {'batch': 1}: "
                            "raised ConstraintViolationError: Constraints violated (L['x'].size()[0])!"), error
    assert "-- You marked L['x'].size()[0] as dynamic but your code specialized it to be a constant (1)." in error
    assert f"(model.py:{_line_of(src, '@torch.compile')}, in Net.forward, which Dynamo was compiling)" in error
    # the terminal's line starts at that place and keeps the note, without the place a second time
    line = _line_of(src, '@torch.compile')
    said = error.split("; partial results")[0].replace(f"(model.py:{line}, in Net.forward", "(in Net.forward")
    assert f"error: model.py:{line}: {said}; partial results" in err, err


def test_a_compile_rung_error_is_recorded_with_rung_line_and_first_line_and_the_ladder_goes_on(tmp_path):
    """mark_dynamic inside the model's forward runs eager and fails only when compiled (torch 2.13:
    AssertionError "Attempt to trace forbidden callable"): the recompiles rung records it, naming
    the rung, the shape, the user's line and the message; the ladder does not stop. (Bound by name
    at import: the rungs skip ``torch._dynamo.mark_dynamic`` called through the module inside
    their own graph, :func:`rewriter.diagnose.as_run.marks_eager_only`, not a name bound before.)"""
    src = _tree(tmp_path, """\
        import torch
        import torch.nn as nn
        from torch._dynamo import mark_dynamic


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                h = self.fc(x)
                mark_dynamic(h, 0)
                return h.relu()
        """)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2}, {"batch": 3}],
                                 mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"recompiles", "granularity"}, backend="eager")
    rungs = {r.name: r for r in outcome.rungs}
    reason = rungs["recompiles"].reason
    assert rungs["recompiles"].status == "error"
    assert reason.startswith("rung recompiles: build_model() model forward under torch.compile(backend='eager') at {'batch': 2}: "
                             "raised AssertionError: Attempt to trace forbidden callable <function mark_dynamic"), reason
    assert reason.endswith(f"(model.py:{_line_of(src, 'mark_dynamic(h, 0)')})"), reason
    assert rungs["granularity"].status == "ok", "the ladder went on"


def test_headline_keeps_the_first_line_whole_and_adds_a_stated_cause():
    from rewriter.diagnose.session import headline

    long = "x" * 500
    assert headline(ValueError(f"{long}\nmore")) == f"ValueError: {long}"
    assert headline(RuntimeError("Heading!\n  - the cause\n  - another")) == "RuntimeError: Heading! -- the cause"
    assert headline(KeyError()) == "KeyError"


def test_a_candidate_that_raises_in_the_engine_names_the_users_line_and_keeps_the_whole_message(tmp_path):
    """The engine's child (the search's candidates, validate): the one-line message carries the
    shape, the first full line and the user's file:line under the candidate's tree; the whole
    message stays in ``detail`` for the constraint hints."""
    import importlib.util

    import torch

    from rewriter.engine.child import ModelRaised, _raised

    src = _tree(tmp_path, """\
        import torch


        def block(x):
            torch._dynamo.mark_dynamic(x, 0)
            return x * 2
        """)
    spec = importlib.util.spec_from_file_location("raising_block", src / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch._dynamo.reset()
    with pytest.raises(AssertionError) as info:
        torch.compile(module.block, backend="eager")(torch.ones(3))
    message = _raised(info.value, {"batch": 3}, {"tree": str(src)}, "plan")
    assert message == ("shape {'batch': 3}: AssertionError: Attempt to trace forbidden callable "
                       f"{str(info.value).splitlines()[0].split('callable ', 1)[1]} ({src / 'model.py'}:5)"), message
    assert "\n" not in message
    raised = ModelRaised(message, f"AssertionError: {info.value}")
    assert "from user code:" in raised.detail and str(raised) == message
