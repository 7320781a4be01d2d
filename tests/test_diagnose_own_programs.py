"""A program that ran before the rewrite still runs after it: one test per pattern that broke one.
Each fixture is a model file, the user's own script that compiles it (and marks or disables), and a
harness. ``diagnose`` and ``rewrite --apply`` run, then the user's script runs on a pristine copy of
the tree and on the rewritten one (one process, one after the other: tests/programs.py): the same
outputs, its compile still live (Dynamo's own counters, printed by the script), and
report.json/report.md name the user's own compile calls."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from programs import before_after  # tests/programs.py: the script before and after, in one process

from rewriter.cli import main
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _round_trip(tmp_path: Path, case: str, script: str, shapes: list[str]) -> dict:
    """Before / diagnose / rewrite --apply / after, on a copy of ``fixtures/diagnose/<case>``."""
    import torch

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / case, src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    plan = tmp_path / "out" / "plan.yaml"
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60"]
    for s in shapes:
        argv += ["--shape", s]
    assert main(argv) == 0
    if load_plan(plan).plan.actions:  # with the validation report diagnose wrote for this diff
        assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    else:  # nothing composes with the program's own setup: the plan says so and changes nothing
        tree = {f: f.read_bytes() for f in src.rglob("*.py")}
        main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"])
        assert {f: f.read_bytes() for f in src.rglob("*.py")} == tree
    before_counts, after_counts = before_after(tmp_path / "pristine", src, script, tmp_path)
    assert before_counts["unique_graphs"] > 0, before_counts  # the fixture's own compile is live to begin with
    before = torch.load(tmp_path / "before.pt")
    after = torch.load(tmp_path / "after.pt")
    torch.testing.assert_close(after, before)
    assert after_counts["unique_graphs"] > 0, f"the user's compile is no longer live after the rewrite: {after_counts}"
    # `stackpart check` does not flag the rewritten tree for a disable in a fullgraph region or a
    # mark in compiled code (SP108 must not flag stackpart's own diff)
    assert main(["check", str(src), "--select", "SP105", "--select", "SP108"]) == 0
    report_dir = plan.parent / "stackpart-diagnose"
    return {"src": src, "plan": load_plan(plan).plan, "report": json.loads((report_dir / "report.json").read_text()),
            "md": (report_dir / "report.md").read_text(), "before": before_counts, "after": after_counts}


def _names_own_calls(result: dict, *calls: str) -> None:
    """report.json's search rung and report.md both name each of the user's own compile calls."""
    [search] = [r for r in result["report"]["rungs"] if r["name"] == "search"]
    own = search["measurement"]["own_compile_setup"]
    for call in calls:
        assert any(call in x for x in own), (call, own)
        assert call in result["md"], call


def _pruned(result: dict) -> list[str]:
    [search] = [r for r in result["report"]["rungs"] if r["name"] == "search"]
    return search["measurement"]["pruned"]


def test_moe_trainer_that_compiles_each_layer_itself(tmp_path):
    """Before: disable on Experts.forward (inside the trainer's fullgraph=True layers) plus a
    second compile; the trainer raised 'Skip inlining torch.compiler.disable()d function'."""
    r = _round_trip(tmp_path, "own_moe_trainer", "train.py", ["batch=2,seq=6", "batch=2,seq=9"])
    own = 'train.py:18: torch.compile(block, fullgraph=True, backend="eager")'
    _names_own_calls(r, own)
    actions = [(a.action, a.target) for a in r["plan"].actions]
    assert not [a for a in actions if a[0] in ("compile", "disable")], actions
    assert any(f"each DecoderLayer itself ({own}" in p and "second time" in p for p in _pruned(r)), _pruned(r)
    assert r["after"]["graph_breaks"] == 0, r["after"]  # its fullgraph=True layers still compile whole


def test_serving_loop_that_marks_its_inputs(tmp_path):
    """Before: per-block compile plus maybe_mark_dynamic inside Encoder.forward, which the loop
    compiles whole: 'Attempt to trace forbidden callable maybe_mark_dynamic'."""
    r = _round_trip(tmp_path, "own_serve_marks", "serve.py", ["batch=2,seq=5", "batch=2,seq=7", "batch=2,seq=9"])
    own = 'serve.py:27: torch.compile(Encoder(), backend="eager")'
    _names_own_calls(r, own, "serve.py:20: torch._dynamo.mark_dynamic(ids, 1)")
    # the loop's whole-model compile is in serve.py, which the harness does not run: it is measured
    # through stand-ins on the harness's model and the choice is written as an edit of that call
    # (regional at the call site), never as a second compile; a mark the plan keeps is at the
    # block boundary, which the regional form leaves eager (the round trip's `check --select SP105`)
    compiles = [a for a in r["plan"].actions if a.action == "compile"]
    assert [(a.target, a.own_call.regional if a.own_call else None) for a in compiles] == [("serve.py::main", "blocks")], compiles
    assert "for block in model.blocks:" in (r["src"] / "serve.py").read_text()
    assert all(a.target == "model.py::Encoder.forward" for a in r["plan"].actions if a.action == "mark_dynamic")


def test_disabled_helper_beside_the_users_fullgraph_blocks(tmp_path):
    """Before: a compile of the blocks the script already compiles with fullgraph=True, beside
    the source's own @torch.compiler.disable helper."""
    r = _round_trip(tmp_path, "own_fullgraph_disabled", "compile_model.py", ["batch=4", "batch=6"])
    own = 'compile_model.py:17: block.compile(fullgraph=True, backend="eager")'
    _names_own_calls(r, own, "model.py:10: @torch.compiler.disable")
    assert not [a for a in r["plan"].actions if a.action == "compile"], r["plan"].actions
    assert any(f"each Block itself ({own}" in p for p in _pruned(r)), _pruned(r)
    assert not [p for p in _pruned(r) if "torch.compiler.disable" in p and "compiles code itself" in p]  # a disable is not a compile


def test_model_that_already_carries_torch_compile(tmp_path):
    """The model compiles its own Block (the harness runs that compile too): no second compile;
    the helper that breaks the graph inside that (not fullgraph) region is disabled on top of it,
    and measured so. The decorator recompiles over the two batch sizes, and without a measured
    gain (eager backend) the fewest recompiles + graph breaks decide: ``dynamic=True`` on the
    decorator itself (no recompile, the break once), not the disable (fewer recompiles than the
    program, but some, and its call still a graph break), which the ladder's order chose."""
    r = _round_trip(tmp_path, "own_decorated", "predict.py", ["batch=4", "batch=6"])
    _names_own_calls(r, 'model.py:20: @torch.compile(backend="eager")')
    [search] = [x for x in r["report"]["rungs"] if x["name"] == "search"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    row = rows["as-is+disable"]
    assert row["graphs"] >= 1 and row["numerics"] == "ok", row  # measured on the model's own compile
    assert search["measurement"]["chosen"] == "as-is+dynamic", search["measurement"]["decision"]
    assert rows["as-is+dynamic"]["recompiles"] < rows["as-is+disable"]["recompiles"] < rows["as-is"]["recompiles"], rows
    summed = {n: rows[n]["recompiles"] + rows[n]["graph_breaks"] for n in ("as-is+dynamic", "as-is+disable", "as-is")}
    assert summed["as-is+dynamic"] < summed["as-is+disable"] < summed["as-is"], rows
    assert (f"'as-is+dynamic' {rows['as-is+dynamic']['recompiles']} + {rows['as-is+dynamic']['graph_breaks']} = "
            f"{summed['as-is+dynamic']}") in search["measurement"]["decision"], search["measurement"]["decision"]
    assert [(a.action, a.target, a.own_call.edits()) for a in r["plan"].actions] == [
        ("compile", "model.py::Block.forward", {"dynamic": True})]  # the program's own decorator, edited
    assert '@torch.compile(backend="eager", dynamic=True)' in (r["src"] / "model.py").read_text()
    assert r["after"]["unique_graphs"] < r["before"]["unique_graphs"], (r["before"], r["after"])


def test_fullgraph_is_not_planned_around_a_helper_the_source_disables(tmp_path):
    """The disabled-helper pattern (own_fullgraph_disabled) without the user's script: the block
    calls a helper the source keeps eager; the per-block compile must not carry fullgraph=True (it
    would raise at the first call, and `stackpart check` would flag stackpart's own diff, SP108)."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.diagnose.rungs import ladder

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_disabled", src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "compile_model.py").unlink()
    model = (src / "model.py").read_text()
    model = model.replace("return x + torch.tanh(self.fc(x))", "return x + torch.tanh(record(self.fc(x)))")
    (src / "model.py").write_text(model.replace("return self.head(record(x))", "return self.head(x)"))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}, {"batch": 6}], mode=None,
                                 dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={r.name for r in ladder()}, backend="eager")
    [block] = [a for a in outcome.plan.actions if a.action == "compile"]
    assert block.target == "model.py::Block" and block.options.fullgraph is False, block
    assert any("reaches record, which the source keeps eager" in n for n in outcome.notes), outcome.notes


def test_what_the_programs_own_compiles_cover(tmp_path):
    from rewriter.diagnose.own_compile import own_compiles

    (tmp_path / "run.py").write_text(
        "import torch\nfrom model import Net\n\n\ndef f(x):\n    return x\n\n\nmodel = Net()\nmodel.compile(fullgraph=True)\n"
        "for i in range(3):\n    model.h[i] = torch.compile(model.h[i])\nfor _, b in model.layers.named_children():\n"
        "    b = torch.compile(b, fullgraph=True)\nenc = torch.compile(model.encoder)\ng = torch.compile(f, fullgraph=True)\n")
    got = [(o.where, o.fullgraph, o.covers) for o in own_compiles(tmp_path)]
    assert got == [("run.py:10", True, ("class", "Net")), ("run.py:12", False, ("children", "h")),
                   ("run.py:14", True, ("children", "layers")), ("run.py:15", False, ("unknown", "")),
                   ("run.py:16", True, ("function", "run.py::f"))]


def test_the_unmeasured_proposal_composes_with_the_programs_compile_too(tmp_path):
    """``diagnose --no-search`` writes the rules' proposal without the search: it is composed with
    the program's own compiles the same way (the MoE trainer: no second compile of its layers, no
    disable inside their fullgraph=True region)."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.diagnose.rungs import ladder

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_moe_trainer", src, ignore=shutil.ignore_patterns("__pycache__"))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2, "seq": 6}, {"batch": 2, "seq": 9}],
                                 mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={r.name for r in ladder()}, backend="eager")
    assert not [a for a in outcome.plan.actions if a.action in ("compile", "disable")], outcome.plan.actions
    assert any(n.startswith("not planned: the program compiles each DecoderLayer itself (train.py:18") for n in outcome.notes), outcome.notes
