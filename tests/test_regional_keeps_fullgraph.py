"""A program whose whole-model ``torch.compile(..., fullgraph=True)`` raises at a graph break: the
search's ``as-is+regional`` edit turns that call into one compile per repeated block. Where every
break the graph-breaks rung found lies outside the blocks (a branch on ``.item()`` in the model's
own ``forward``), the blocks' compiles never trace it, so the edit keeps the call's
``fullgraph=True`` on them (the user's guarantee of no graph break inside a block); where a break
is inside a block, the edit sets ``fullgraph=False`` as every other edit of that call does
(rewriter/diagnose/own_candidates.py ``_regional``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from rewriter.cli import main

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not hasattr(torch.compiler, "set_stance"), reason="torch < 2.6")]

BREAK = "        if x.sum().item() > 0:\n            x = x * 2\n"

MODEL = '''\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
{block}        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
{net}        for block in self.blocks:
            x = block(x)
        return x
'''

HARNESS = textwrap.dedent('''\
    import torch

    from model import Net


    def build_model():
        torch.manual_seed(0)
        return torch.compile(Net().eval(), fullgraph=True, backend="eager")


    def make_inputs(batch: int = 2, seq: int = 8):
        return (torch.randn(batch, seq, 16, generator=torch.Generator().manual_seed(seq)),)
''')


def _regional_row(tmp_path: Path, *, in_block: bool) -> dict:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL.format(block=BREAK if in_block else "", net="" if in_block else BREAK))
    (src / "harness.py").write_text(HARNESS)
    out = tmp_path / "out"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
                 "--shape", "batch=2,seq=8", "--shape", "batch=2,seq=12", "--steps", "1"]) == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    rungs = {r["name"]: r for r in report["rungs"]}
    rows = {c["candidate"]: c for c in rungs["search"]["measurement"]["candidates"]}
    assert "as-is+regional" in rows, list(rows)
    return rows["as-is+regional"]


def test_a_break_outside_the_blocks_keeps_fullgraph_on_the_blocks(tmp_path):
    row = _regional_row(tmp_path, in_block=False)
    assert row["actions"] == ["compile harness.py::build_model (the program's own compile, edited: regional='blocks')"], row
    assert row["numerics"] == "ok" and row["fallbacks"] == 0, row  # the blocks compile with fullgraph=True and run


def test_a_break_inside_a_block_drops_fullgraph(tmp_path):
    row = _regional_row(tmp_path, in_block=True)
    assert row["actions"] == [
        "compile harness.py::build_model (the program's own compile, edited: fullgraph=False, regional='blocks')"], row
