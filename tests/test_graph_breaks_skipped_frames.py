"""A graph break inside a loop (``for blk in self.blocks: ... .item()``) is one Dynamo cannot
resume after: it runs that whole frame eager and compiles only the blocks. ``explain`` then
reported "1 graph, 0 breaks", so the graph-breaks rung said "no graph breaks", and the recompiles
rung called the break one that "appears only once shapes are dynamic"."""

from __future__ import annotations

import torch

from rewriter.diagnose.context import Context
from rewriter.diagnose.rungs import graph_breaks
from rewriter.diagnose.session import Session
from rewriter.harness import load_harness
from rewriter.plan import Harness

HARNESS = """\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).relu()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
            if x.abs().max().item() > 1e4:
                x = x / 2
        return x


def build_model():
    torch.manual_seed(0)
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
"""


def test_a_break_that_skips_its_frame_is_reported_with_its_line(tmp_path):
    (tmp_path / "harness.py").write_text(HARNESS)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"batch": 2}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    with torch._dynamo.config.patch(capture_scalar_outputs=False):
        r = graph_breaks.run(ctx)
    assert r.measurement["frame_skipping_breaks"] == 1, r.measurement
    [f] = r.findings
    assert (f.file, f.line, f.function) == ("harness.py", 21, "Net.forward"), f
    assert "could not resume after" in r.verdict and r.verdict != "no graph breaks", r.verdict
    assert r.implies and "restructure" in r.implies


LIBRARY_HARNESS = """\
import torch
import mylib


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(mylib.helper(self.lin(x)))


def build_model():
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
"""


def test_a_library_break_explain_returned_is_not_counted_again(tmp_path, monkeypatch):
    """explain names a library break by the file as its package holds it, Dynamo's log by its
    absolute path: the two never matched, and every library break was reported a second time as
    one that runs its frame eager."""
    lib = tmp_path / "lib" / "mylib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("def helper(x):\n    y = x * 2\n    print('a side effect')\n    return y + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(LIBRARY_HARNESS)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"batch": 2}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, src)), out_dir=tmp_path)
    r = graph_breaks.run(ctx)
    assert r.measurement["graph_break_count"] >= 1 and r.measurement["frame_skipping_breaks"] == 0, (r.measurement, r.findings)
    assert not [f for f in r.findings if "could not resume" in f.message], r.findings


def test_the_bucket_proposal_reads_the_model_class_through_torch_compiles_wrapper(tmp_path):
    """A harness that returns torch.compile(model) had its bucket candidate pruned as "the model
    class is not under SRC": the class read was OptimizedModule's."""

    from rewriter.diagnose.candidates import bucket_action

    (tmp_path / "harness.py").write_text(HARNESS.replace("    return Net()", "    return torch.compile(Net(), backend='eager')"))
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"batch": 2}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    ctx.measured = lambda rung: {"varying_input_dims": [{"tensor": 0, "dim": 0, "sizes": [2, 3]}]}
    action, why = bucket_action(ctx)
    assert why is None and action.target == "harness.py::Net.forward" and action.arg == "x", (action, why)


OWN_COMPILE_HARNESS = """\
import torch


def scale(x):
    return torch.relu(x) * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    @torch.compile(backend="eager")
    def forward(self, x):
        for _ in range(2):
            x = scale(self.fc(x))
            if x.abs().max().item() > 1e4:
                x = x / 2
        return x


def build_model():
    torch.manual_seed(0)
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
"""


def test_a_break_only_the_log_records_on_the_programs_own_compile_is_in_the_verdict(tmp_path):
    """The program's own compile of a frame with a break in a loop: Dynamo's counter stays at 0
    (the frame runs eager, ``scale`` compiles) while its graph-break log names the break; the
    verdict says both figures and the site the findings hold, never "no graph breaks"."""
    (tmp_path / "harness.py").write_text(OWN_COMPILE_HARNESS)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"batch": 2}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    with torch._dynamo.config.patch(capture_scalar_outputs=False):
        r = graph_breaks.run(ctx)
    assert r.measurement["graph_break_count"] == 0 and r.measurement["graph_count"] >= 1, r.measurement
    [f] = r.findings
    assert (f.file, f.line, f.function) == ("harness.py", 17, "Net.forward"), f
    assert "no graph breaks" not in r.verdict, r.verdict
    assert "0 graph breaks" in r.verdict and "1 graph break" in r.verdict and "harness.py:17" in r.verdict, r.verdict
    assert r.implies and "restructure" in r.implies
