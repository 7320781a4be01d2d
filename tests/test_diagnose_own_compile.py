"""The graph-break rung on a model that already carries ``@torch.compile``: counted as
the program runs, from Dynamo's own counters, with the break's file:line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rewriter.diagnose.runner import diagnose, harness_from_flags

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "own_compile"


def test_the_graph_break_count_of_an_already_compiled_model_is_dynamos_own(tmp_path, monkeypatch):
    import torch
    from torch._dynamo.utils import counters

    src = tmp_path / "src"
    shutil.copytree(CASE, src)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks"}, backend="eager")
    [rung] = [r for r in outcome.rungs if r.name == "graph_breaks"]
    # what Dynamo itself counts for one inference step of the program as written
    monkeypatch.syspath_prepend(str(src))
    sys.modules.pop("model", None)
    import model  # noqa: PLC0415 - the fixture's own module

    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        model.Net()(torch.randn(4, 8))
    expected = int(sum(counters["graph_break"].values()))
    torch._dynamo.reset()
    sys.modules.pop("model", None)
    assert expected >= 1
    assert rung.measurement["graph_break_count"] == expected, rung.measurement
    assert "program's own torch.compile" in rung.measurement["source"]
    [site] = {(f.file, f.line, f.function) for f in rung.findings}
    assert site == ("model.py", 10, "route"), rung.findings
    assert "in the program's own compiled code" in rung.verdict and "-1" not in rung.verdict


def test_the_search_names_the_programs_own_compile_calls(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(CASE, src)
    (src / "serve.py").write_text("import torch\n\nfrom model import Net\n\nmodel = Net()\nmodel.compile(fullgraph=False)\n"
                                  "x = torch.randn(2, 8)\ntorch._dynamo.mark_dynamic(x, 0, min=2)\n")
    from rewriter.diagnose.own_compile import compile_setup

    assert compile_setup(src) == ['model.py:20: @torch.compile(backend="eager")', "serve.py:6: model.compile(fullgraph=False)",
                                  "serve.py:8: torch._dynamo.mark_dynamic(x, 0, min=2)"]
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks", "search"}, backend="eager")
    [asis] = [r for r in outcome.search.table() if r["candidate"] == "as-is"]
    assert "the program's own: model.py:20: @torch.compile(backend=\"eager\")" in asis["actions"]
    assert asis["graphs"] >= 1  # it compiled at run time, in the engine's reference process
    assert any("the program as it is compiles itself" in n and "model.py:20" in n for n in outcome.notes)


def test_no_whole_model_candidate_compiles_the_programs_own_compiled_code_again(tmp_path):
    """A trainer that compiles each layer itself gets no whole-model compile on top (the model
    compiled twice): the program's own compile calls prune every whole-model candidate."""
    src = tmp_path / "src"
    shutil.copytree(CASE, src)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"batch_scaling", "graph_breaks", "search"}, backend="eager")
    found = outcome.search
    assert not [c for c in found.candidates if any(a.action == "compile" and a.strategy in ("whole", "nested") for a in c.plan.actions)]
    assert any("the program compiles code itself (model.py:20" in p and "second time" in p for p in found.pruned), found.pruned
    assert not [p for p in found.pruned if p.startswith("whole, whole+cudagraphs:")]  # said once, with the reason that holds
    assert not [a for a in outcome.plan.actions if a.action == "compile" and a.strategy == "whole"]


def test_the_static_compile_setup_skips_a_fifo_and_a_deep_file_in_src(tmp_path):
    """The scan of SRC for the program's own compile calls reads through the guarded
    path: a FIFO named *.py is never opened for reading (it would block), a file nested past
    CPython's parser is skipped, and the ordinary file is still reported."""
    import os
    import subprocess

    import pytest

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch\nm = torch.compile(torch.nn.Linear(2, 2))\n")
    os.mkfifo(src / "pipe.py")
    (src / "deep.py").write_text("import torch\nm = torch.compile(f)\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    code = ("import sys; from rewriter.diagnose.own_compile import compile_setup; "
            f"print(compile_setup({str(src)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "train.py:2: torch.compile(torch.nn.Linear(2, 2))" in proc.stdout
    assert "deep.py" not in proc.stdout and "pipe.py" not in proc.stdout
