"""On CPU the search forces torch's ``eager`` backend. A ``nested_compile_region`` in a training
step raises under it for an attention block ("fake_mode should be enabled for HOPs": the higher-order
op's backward needs the fake mode AOTAutograd sets up), although the same plan compiles on every
AOTAutograd backend. The candidate's failure says so and names the option that measures it, so the
user does not read it as the model's."""

from __future__ import annotations

import json
from pathlib import Path

from rewriter.cli import main

MODEL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + y.transpose(1, 2).reshape(B, T, C)


class Net(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.emb = nn.Embedding(64, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
        self.head = nn.Linear(d, 64)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)
'''

HARNESS = '''import torch

from model import Net


def build_model():
    return Net()


def make_inputs(batch: int = 2, seq: int = 8):
    return (torch.randint(0, 64, (batch, seq)),)
'''


def test_a_nested_candidate_that_only_the_eager_backend_fails_says_so(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--mode", "training",
                 "--budget", "90"]) == 0
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    status = rows["nested+whole"]["status"]
    if "fake_mode should be enabled for HOPs" in status:  # a torch that raises it (2.13 does)
        assert "--backend aot_eager measures it" in status, status
    else:
        assert not status.startswith("failed"), status
