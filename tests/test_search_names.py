"""Every candidate the search proposes has its own name (a newcomer's model, 2026-12-01): two
plans of one name shared a job file, the second child died on the first's file descriptors and
the search waited out its budget, then called every candidate 'not measured: the search budget
was spent'."""

from __future__ import annotations

import textwrap

import pytest

from rewriter.cli import main

MODEL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.ln = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, 4 * dim)
            self.fc2 = nn.Linear(4 * dim, dim)

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


    class Net(nn.Module):
        def __init__(self, dim=64, depth=3):
            super().__init__()
            self.inp = nn.Linear(16, dim)
            self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
            self.out = nn.Linear(dim, 8)

        def forward(self, x):
            h = self.inp(x)
            for b in self.blocks:
                h = b(h)
            if h.sum().item() > 1e9:
                h = h * 0.5
            return self.out(h)
""")

HARNESS = textwrap.dedent("""\
    import torch

    from model import Net


    def build_model():
        return Net()


    def make_inputs(batch: int = 4, seq: int = 32):
        return (torch.randn(batch, seq, 16),)
""")


def test_unique_names_tell_plans_apart_by_fullgraph_else_by_a_count():
    from rewriter.diagnose.candidates import Candidate, _unique
    from rewriter.plan import parse_plan

    def cand(name, options):
        text = ("version: 1\nharness: {file: harness.py, shapes: [{batch: 2}], device: cpu}\n"
                f"actions:\n  - {{action: compile, target: model.py::Block, options: {options}}}\n")
        return Candidate(name, parse_plan(text).plan)

    first = cand("per-block", "{fullgraph: true}")
    assert _unique(cand("per-block", "{fullgraph: false}"), [first]) == "per-block-fullgraph"
    assert _unique(cand("per-block", "{fullgraph: true, dynamic: true}"), [first]) == "per-block-2"
    assert _unique(cand("whole", "{}"), [first]) == "whole"


def test_measure_refuses_two_variants_of_one_name(tmp_path):
    from rewriter.engine.measure import measure
    from rewriter.engine.options import Options, Variant

    with pytest.raises(ValueError, match="variant names must be unique, got per-block more than once"):
        measure(None, [Variant("eager", tmp_path), Variant("per-block", tmp_path), Variant("per-block", tmp_path)],
                Options(), tmp_path)


@pytest.mark.slow
def test_a_graph_break_outside_the_blocks_gives_distinct_candidates_all_measured(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    out = tmp_path / "plan.yaml"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "--shape", "batch=4,seq=32", "--shape", "batch=4,seq=20",
               "-o", str(out), "--device", "cpu", "--budget", "300", "--timeout", "120"])
    assert rc == 0
    import json

    report = json.loads((tmp_path / "stackpart-diagnose" / "report.json").read_text())
    rows = next(r for r in report["rungs"] if r["name"] == "search")["measurement"]["candidates"]
    names = [r["candidate"] for r in rows]
    assert len(names) == len(set(names)), names
    assert not any(r["status"].startswith("not measured") for r in rows), [(r["candidate"], r["status"]) for r in rows]
    assert "per-block+fullgraph" in names, names  # the second per-block plan differs in fullgraph and says so
    assert (tmp_path / ".stackpart" / "validation" / "validation.json").is_file()  # rewrite --apply follows
