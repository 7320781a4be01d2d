"""The recompiles rung's repeated calls of the reference shape (the value-guard reading) share the
sweep's compiled model; the graphs they add for a changing value must not count against the
recompile limit the shape sweep reads: the sweep's ``limit_hit`` says whether the program's own
shapes reach Dynamo's limit, as it did when the repeated calls compiled a model of their own; and
a model whose state takes no more calls fails the repeated calls, not the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewriter.cli import main
from tiny_programs import net_harness


@pytest.mark.usefixtures("one_thread")
def test_the_repeated_calls_do_not_make_the_shape_sweep_hit_the_recompile_limit(tmp_path: Path):
    """A step counter and 7 shapes: 7 graphs over the shapes (under the limit of 8); the two more
    the repeated calls add for the counter are not the sweep's."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n        self.step = 0\n\n    def forward(self, x):\n"
        "        self.step += 1\n        x = x * self.step\n        return self.fc(x)\n")
    (src / "harness.py").write_text(net_harness(batch=4))
    plan = tmp_path / "out" / "plan.yaml"
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--no-search"]
    for b in range(2, 9):
        argv += ["--shape", f"batch={b}"]
    assert main(argv) == 0
    data = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [rung] = [r for r in data["rungs"] if r["name"] == "recompiles"]
    m = rung["measurement"]
    assert [v["attribute"] for v in m["value_guards"] if v["every_call"]] == ["step"], m["value_guards"]
    assert m["limit_hit"] is False, m


@pytest.mark.usefixtures("one_thread")
def test_a_model_that_takes_no_more_calls_fails_the_repeated_calls_not_the_shape_sweep(tmp_path: Path):
    """A model that breaks for good at its fourth call at batch 2 (a stream whose state repeated
    input spoils; the setup's and the sweep's calls are two of them): the two shapes are measured
    (the rung is ok, the varying dim found) and the repeated calls' failure is recorded, not the
    rung's. Repeated before the other shape, the sweep itself failed at batch 3."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n        self.at_two = 0\n        self.broken = False\n\n    def forward(self, x):\n"
        "        if x.shape[0] == 2:\n            self.at_two += 1\n"
        "        if self.broken or self.at_two > 3:\n            self.broken = True\n"
        "            raise RuntimeError('stream spoiled')\n        return self.fc(x)\n")
    (src / "harness.py").write_text(net_harness(batch=4))
    from rewriter.diagnose.runner import diagnose
    from rewriter.plan import Harness

    spec = Harness(file="harness.py", shapes=[{"batch": 2}, {"batch": 3}], mode="inference", device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only={"recompiles"}, backend="eager", steps=1)
    [rung] = [r for r in outcome.rungs if r.name == "recompiles"]
    assert rung.ok, (rung.status, rung.reason)
    assert rung.measurement["varying_input_dims"], rung.measurement
    assert "stream spoiled" in (rung.measurement["value_guards_error"] or ""), rung.measurement
