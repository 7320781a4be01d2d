"""The program's own ``torch._dynamo.config`` settings, read as it ran (after setup built the model
and ran its steps) and reported: in report.md's and report.json's setup, each with what it
changes, and in the rungs whose counts they change (the recompiles past torch's default recompile
limit a program raised; ``.item()`` kept in the graph)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MODEL = '''import torch
import torch.nn as nn


class Counted(nn.Module):
    """Guards on its call counter: one graph per call."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.calls
'''

TRAIN = '''import os

import torch
import torch._dynamo

from cfgmodel import Counted

torch._dynamo.config.suppress_errors = True
torch._dynamo.config.cache_size_limit = 64


def build():
    # a computed value: no reading of the source sees it
    torch._dynamo.config.capture_scalar_outputs = os.environ.get("CFG_PROGRAM_SCALARS", "1") == "1"
    return torch.compile(Counted(), backend="eager")
'''

HARNESS = '''import torch

from cfgtrain import build


def build_model():
    return build()


def make_inputs(batch: int = 1):
    return (torch.randn(batch, 8),)
'''

SHAPES = [{"batch": b} for b in range(1, 11)]


@pytest.fixture
def program(tmp_path):
    """The program's tree (the knobs it sets in this process, where the diagnosis runs as the
    ladder does, are put back after the test by tests/conftest.py's ``torch_config_restored``)."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("cfgmodel.py", MODEL), ("cfgtrain.py", TRAIN), ("harness.py", HARNESS)):
        (src / name).write_text(text)
    return src


def _diagnose(src: Path, tmp_path: Path):
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=SHAPES, mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only={"graph_breaks", "recompiles"}, backend="eager")
    out = tmp_path / "out" / "stackpart-diagnose"
    return outcome, json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def test_the_programs_dynamo_config_is_reported_with_what_it_changes(program, tmp_path):
    from rewriter.engine.blocks import recompile_limit

    name, default = recompile_limit()[0], 8
    outcome, report, md = _diagnose(program, tmp_path)
    said = {s["name"]: (s["value"], s["default"]) for s in report["dynamo_config"]}
    # the program's three knobs and no other (an earlier test's program leaves none set)
    assert said == {"suppress_errors": (True, False), name: (64, default), "capture_scalar_outputs": (True, False)}, said
    assert "## The program's torch._dynamo.config" in md, md
    assert ("- torch._dynamo.config.suppress_errors = True (torch's default: False): a compile error in compiled code "
            "does not raise") in md, md
    assert "(torch's default: 8): a code object keeps compiling new graphs up to this many" in md, md
    rungs = {r.name: r for r in outcome.rungs}
    assert "counted under the program's torch._dynamo.config.capture_scalar_outputs = True" in rungs["graph_breaks"].verdict, \
        rungs["graph_breaks"].verdict


def test_the_recompiles_rung_counts_and_says_the_recompiles_past_the_default_limit_the_program_raised(program, tmp_path):
    from rewriter.engine.blocks import recompile_limit

    name = recompile_limit()[0]
    outcome, report, _ = _diagnose(program, tmp_path)
    r = next(x for x in outcome.rungs if x.name == "recompiles")
    m = r.measurement
    # one graph per call of forward (its call counter), ten calls: nine recompiles of one code
    # object, the eighth and ninth past torch's default of 8 graphs
    forward = [f for f in r.findings if f.kind == "recompile"]  # one per recompile, in Dynamo's order
    assert m["recompiles"] == len(forward) == len(SHAPES) - 1 and not m["limit_hit"], (m, r.findings)
    assert m["recompile_limit_raised"] == {"name": name, "value": 64, "default": 8, "past_default": 2}, m
    assert (f"the program raised torch._dynamo.config.{name} from 8 to 64: 2 of these recompile(s) are past the "
            "default, where torch would have run those frames eager") in r.verdict, r.verdict
    past = [f for f in forward if "past torch's default recompile limit 8, which the program raised to 64" in f.message]
    assert past == forward[-2:], forward
    assert "counted under the program's torch._dynamo.config.suppress_errors = True" in r.verdict, r.verdict


SUPPRESSING = '''import torch
import torch._dynamo
import torch.nn as nn

torch._dynamo.config.suppress_errors = True


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


def build_model():
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
'''


def _summary(src: Path, tmp_path: Path, only: set[str]) -> tuple[object, str]:
    """Diagnose ``src`` (harness.py, on the CPU, rungs ``only``) with its terminal summary
    captured; the outcome and the summary's text."""
    import io

    from rich.console import Console

    from rewriter.diagnose.runner import diagnose, harness_from_flags

    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2}], mode=None, dtype=None,
                                 device="cpu")
    text = io.StringIO()
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only=only, backend="eager",
                       console=Console(file=text, width=400))
    return outcome, text.getvalue()


def test_the_terminal_summary_names_the_knob_the_program_set_that_changes_the_counts(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SUPPRESSING)
    _, summary = _summary(src, tmp_path, {"graph_breaks"})
    lines = [ln for ln in summary.splitlines() if "torch._dynamo.config" in ln and ln.startswith("note:")]
    assert lines == ["note: the program's torch._dynamo.config: suppress_errors = True (torch's default: False): the "
                     "ladder's graph breaks and recompiles are counted under this setting (report.md's \"The program's "
                     "torch._dynamo.config\" says what each changes)"], summary


def test_the_terminal_summary_says_nothing_of_a_knob_that_does_not_change_the_counts(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SUPPRESSING.replace("suppress_errors = True", "verbose = True"))
    outcome, summary = _summary(src, tmp_path, {"graph_breaks"})
    report = json.loads((tmp_path / "out" / "stackpart-diagnose" / "report.json").read_text())
    assert [s["name"] for s in report["dynamo_config"]] == ["verbose"], report["dynamo_config"]  # listed in the report
    assert "torch._dynamo.config" not in summary, summary  # not a knob the counts depend on


SWALLOWING = '''import torch
import torch._dynamo
import torch.nn as nn

torch._dynamo.config.suppress_errors = True


def failing_backend(gm, example_inputs):
    raise RuntimeError("this backend cannot compile")


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Tail(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.compile(Head(), backend=BACKEND)
        self.tail = torch.compile(Tail(), backend=BACKEND)

    def forward(self, x):
        return self.tail(self.head(x))


def build_model():
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
'''


def test_frames_run_eager_after_a_compile_error_suppress_errors_swallowed_are_counted_with_the_first(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SWALLOWING.replace("BACKEND", "failing_backend"))
    outcome, _ = _summary(src, tmp_path, {"graph_breaks"})
    r = next(x for x in outcome.rungs if x.name == "graph_breaks")
    # both compiled modules' forward raised in the backend and ran eager; Head's compiled first
    assert r.measurement["suppressed_compile_errors"] == {
        "frames": 2, "first": {"name": "forward", "file": "harness.py", "line": 17,
                               "error": "BackendCompilerFailed: backend='failing_backend' raised: RuntimeError: this "
                                        "backend cannot compile"}}, r.measurement
    said = ("2 frame(s) ran eager after a compile error swallowed by suppress_errors; the first, Head.forward "
            "(harness.py:17): BackendCompilerFailed: backend='failing_backend' raised: RuntimeError: this backend cannot "
            "compile")
    assert said in r.verdict, r.verdict
    assert r.findings == [], r.findings  # no graph break: the planner keeps nothing eager for it
    assert r.measurement["graph_count"] == 0  # the program's compile captured nothing: never measured by explain instead


def test_no_frame_is_said_to_run_eager_where_the_compile_raised_nothing(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SWALLOWING.replace("BACKEND", '"eager"'))
    outcome, _ = _summary(src, tmp_path, {"graph_breaks"})
    r = next(x for x in outcome.rungs if x.name == "graph_breaks")
    assert "suppressed_compile_errors" not in r.measurement and "swallowed" not in r.verdict, r
    assert r.measurement["graph_count"] == 2, r.measurement
