"""diagnose on a tree ``rewrite --apply`` wrote: a ``mark_dynamic`` action at the region boundary
(``torch._dynamo.maybe_mark_dynamic`` in the model's ``forward``) with the program's per-block
compile in a script the harness does not run. The graph-break and recompile rungs compile the
whole model for their experiment; the mark in that ``forward`` must not make them fail with
Dynamo's "Attempt to trace forbidden callable", and a mark in eager code still marks."""

from __future__ import annotations

from pathlib import Path

from rewriter.diagnose.runner import diagnose, harness_from_flags

MODEL = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(50, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])

    def forward(self, ids):
        x = self.emb(ids)
        torch._dynamo.maybe_mark_dynamic(x, 1)
        for block in self.blocks:
            x = block(x)
        return x.sum(1)
'''

TRAIN = '''import torch

from model import Net


def main():
    model = Net()
    for block in model.blocks:
        block.compile(fullgraph=True)
    for seq in (5, 7, 9):
        model(torch.randint(0, 50, (2, seq)))


if __name__ == "__main__":
    main()
'''

HARNESS = '''import torch

from model import Net


def build_model():
    return Net()


def make_inputs(batch: int = 2, seq: int = 5):
    return (torch.randint(0, 50, (batch, seq)),)
'''


def test_rungs_that_compile_the_whole_model_pass_over_a_mark_at_the_region_boundary(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("model.py", MODEL), ("train.py", TRAIN), ("harness.py", HARNESS)):
        (src / name).write_text(text)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2, "seq": 5}, {"batch": 2, "seq": 9}],
                                 mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks", "recompiles"}, backend="eager", steps=1)
    rungs = {r.name: r for r in outcome.rungs}
    for name in ("graph_breaks", "recompiles"):
        assert rungs[name].status == "ok", (name, rungs[name].reason)
    assert rungs["graph_breaks"].verdict == "no graph breaks", rungs["graph_breaks"].verdict


def test_a_mark_in_eager_code_still_marks_and_the_originals_come_back() -> None:
    import torch
    import torch._dynamo

    from rewriter.diagnose.as_run import marks_eager_only

    before = torch._dynamo.maybe_mark_dynamic
    t = torch.randn(2, 5)
    with marks_eager_only():
        torch._dynamo.maybe_mark_dynamic(t, 1)
    assert 1 in getattr(t, "_dynamo_weak_dynamic_indices", set())
    assert torch._dynamo.maybe_mark_dynamic is before
