"""Programs that compile themselves, one test per pattern: a model file plus the user's own script
that compiles it the way real projects do, and a harness that builds the model through that
script (so the program's compile runs where diagnose measures). ``diagnose`` and ``rewrite
--apply`` run, then the script runs on a pristine copy of the tree and on the rewritten one (one
process, one after the other: tests/programs.py): the same outputs, the compile still live (Dynamo's own counters, printed by the script), and the symptom measured smaller in
report.json (the chosen candidate's row against the as-is row)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from programs import before_after  # tests/programs.py: the script before and after, in one process

from rewriter.cli import main
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _copy(case: str, tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's tree as ``src`` (diagnosed and rewritten) and a pristine copy of it (the
    program before the rewrite)."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / case, src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src, tmp_path / "pristine")
    return src, tmp_path / "pristine"


def _round_trip(tmp_path: Path, case: str, script: str, shapes: list[str], live_before: bool = True,
                force_backend: str | None = None) -> dict:
    """diagnose, ``rewrite --apply`` and the user's ``script`` before and after, on a copy of
    ``fixtures/diagnose/<case>``; ``force_backend``: the script's compiles on that backend
    (:func:`programs.before_after`)."""
    import torch

    src, pristine = _copy(case, tmp_path)
    plan = tmp_path / "out" / "plan.yaml"
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "90"]
    for s in shapes:
        argv += ["--shape", s]
    assert main(argv) == 0
    assert load_plan(plan).plan.actions, "diagnose wrote an empty plan for a program whose compile it can change"
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0  # diagnose's own validation report lets it through
    before_counts, after_counts = before_after(pristine, src, script, tmp_path, force_backend=force_backend)
    assert (before_counts["unique_graphs"] > 0) == live_before, before_counts
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert after_counts["unique_graphs"] > 0, f"the user's compile is not live after the rewrite: {after_counts}"
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    m = search["measurement"]
    rows = {c["candidate"]: c for c in m["candidates"]}
    return {"src": src, "plan": load_plan(plan).plan, "m": m, "rows": rows, "chosen": rows[m["chosen"]], "asis": rows["as-is"],
            "before": before_counts, "after": after_counts,
            "md": (plan.parent / "stackpart-diagnose" / "report.md").read_text()}


def _no_whole_model_misreading(r: dict) -> None:
    assert not [p for p in r["m"]["pruned"] if "compiles the whole model itself" in p], r["m"]["pruned"]


def test_whole_model_compile_with_an_item_break_in_a_helper(tmp_path):
    """``model = torch.compile(model)`` in the user's build(); a helper's ``.item()`` breaks the
    graph in every block. The knob torch's hint names is set where the program's compile reads it
    (the model's constructor, which the user's script runs too), or the helper is kept eager."""
    r = _round_trip(tmp_path, "own_item_whole", "train.py", ["batch=4", "batch=6"])
    kinds = {(a.action, a.target) for a in r["plan"].actions}
    assert kinds & {("dynamo_config", "model.py::Net.__init__"), ("disable", "model.py::scaled")}, kinds
    assert r["chosen"]["graph_breaks"] < r["asis"]["graph_breaks"], (r["chosen"], r["asis"])
    assert r["after"]["graph_breaks"] < r["before"]["graph_breaks"], (r["after"], r["before"])
    assert any(line.startswith("granularity: whole model: Net (torch.compile(module))")
               for line in r["m"]["own_compile_runtime"]), r["m"]["own_compile_runtime"]
    # the program's call turned regional is measured like any other candidate
    assert r["rows"]["as-is+regional"]["numerics"] == "ok", r["rows"]["as-is+regional"]


def test_per_layer_compile_through_a_helper_is_read_as_per_layer(tmp_path):
    """``model.layers[i] = compile_layer(layer)``: statically the helper's ``torch.compile(layer)``
    could be anything; at run time the harness's model holds three compiled Blocks, so it is a
    per-layer compile, and the gate's data-dependent branch is kept eager on top of it. The
    harness's shape is the one the script runs: a second batch size would make the layers
    recompile, and then the fewest recompiles + graph breaks decide (their ``dynamic=True``), not this edit."""
    r = _round_trip(tmp_path, "own_per_layer", "train.py", ["batch=4"])
    _no_whole_model_misreading(r)
    assert ("disable", "model.py::gate") in {(a.action, a.target) for a in r["plan"].actions}, r["plan"].actions
    assert not [a for a in r["plan"].actions if a.action == "compile"], r["plan"].actions  # no second compile of a Block
    # the disabled call is still a graph break (Dynamo skips it), but the gate's own frame and its
    # resume graphs are gone: fewer graphs, in the report and in the user's script
    assert r["chosen"]["graphs"] < r["asis"]["graphs"], (r["chosen"], r["asis"])
    assert r["chosen"]["graph_breaks"] <= r["asis"]["graph_breaks"], (r["chosen"], r["asis"])
    assert r["after"]["unique_graphs"] < r["before"]["unique_graphs"], (r["after"], r["before"])
    assert any("per layer: 3 x Block (layers.0-2, torch.compile(module))" in line for line in r["m"]["own_compile_runtime"]), \
        r["m"]["own_compile_runtime"]


def test_method_compile_of_the_models_forward_turned_regional(tmp_path):
    """``model.forward = torch.compile(model.forward)`` over twelve identical blocks: the call
    turned regional at the call site traces one block and reuses it, and says so in compile time.
    The harness's shape is the one the script runs: a second batch size would make the call
    recompile, and then the fewest recompiles + graph breaks decide (its ``dynamic=True``), not this edit."""
    r = _round_trip(tmp_path, "own_method_whole", "serve.py", ["batch=4"])
    [edit] = [a for a in r["plan"].actions if a.action == "compile"]
    assert edit.target == "serve.py::build" and edit.own_call.regional == "layers", edit
    text = (r["src"] / "serve.py").read_text()
    assert "for block in model.layers:\n        block.compile(backend=\"eager\")" in text, text
    assert "torch.compile(model.forward" not in text
    assert r["chosen"]["compile_s_per_start"] < r["asis"]["compile_s_per_start"], (r["chosen"], r["asis"])
    assert r["after"]["unique_graphs"] <= r["before"]["unique_graphs"] * 2, (r["after"], r["before"])
    assert any("whole model: Net (forward = torch.compile(forward))" in line for line in r["m"]["own_compile_runtime"]), \
        r["m"]["own_compile_runtime"]
    assert main(["check", str(r["src"]), "--select", "SP101", "--select", "SP102"]) == 0


def test_a_no_op_compile_is_said_to_compile_nothing_and_the_plan_compiles(tmp_path):
    """``self = torch.compile(self)`` in the constructor compiles nothing (it rebinds a local): the
    report says so (not "not on the harness's path": the harness runs that constructor), it
    prunes nothing, and the plan's compile is live in the user's script afterwards."""
    # the plan's compile has no backend option (Inductor); eager runs it the same way (Dynamo's
    # graphs are what the test counts), without Inductor's C++ builds on the CPU
    r = _round_trip(tmp_path, "own_noop_self", "predict.py", ["batch=4", "batch=6"], live_before=False,
                    force_backend="eager")
    _no_whole_model_misreading(r)
    said = [d for d in r["m"]["own_compile_disagreements"] if "model.py:22" in d]
    assert said and "compiles nothing: it rebinds the local name self" in said[0], r["m"]["own_compile_disagreements"]
    assert "no frame or module of it compiled, as the source says" in said[0], said
    assert not any("not on the harness's path" in d for d in r["m"]["own_compile_disagreements"])
    assert r["asis"]["graphs"] == 0 and r["chosen"]["graphs"] > 0, (r["asis"], r["chosen"])
    assert [a for a in r["plan"].actions if a.action == "compile"], r["plan"].actions


def test_newcomers_whole_model_compile_in_a_script_the_harness_does_not_run(tmp_path):
    """``model = torch.compile(model)`` in train.py's main, a harness that builds the model alone:
    ``check`` flags the line (SP101) and diagnose's plan now addresses it. The program's compile is
    measured through stand-ins on the harness's model ('whole' for it, per-block for its regional
    form) and the choice is written as an edit of that call: after it, check passes the commit."""
    src, pristine = _copy("own_newcomer_train", tmp_path)
    (src / "pyproject.toml").write_text("[project]\nname = 'newcomer'\nversion = '0'\n")  # check's project root
    assert main(["check", str(src / "train.py"), str(src / "model.py"), "--select", "SP101"]) == 1
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "90",
                 "--shape", "batch=4", "--shape", "batch=6"]) == 0
    actions = load_plan(plan).plan.actions
    [edit] = [a for a in actions if a.action == "compile"]
    assert edit.target == "train.py::main" and edit.own_call.regional == "layers", actions
    assert "through stand-ins" in edit.why and "'whole'" in edit.why, edit.why
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    chosen = rows[search["measurement"]["chosen"]]
    assert chosen["compile_s_per_start"] < rows["whole"]["compile_s_per_start"], (chosen, rows["whole"])
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    before, after = before_after(pristine, src, "train.py", tmp_path)
    import torch

    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert after["unique_graphs"] > 0 and before["unique_graphs"] > 0, (before, after)
    assert main(["check", str(src / "train.py"), str(src / "model.py"), "--select", "SP101"]) == 0


def test_a_fullgraph_program_with_data_dependent_ops_keeps_fullgraph_on_its_regional_form(tmp_path):
    """``torch.compile(model, fullgraph=True)`` over routers with ``nonzero`` and ``.item()``: the
    call turned regional keeps ``fullgraph=True`` on every block, no ``disable`` is planned inside
    it, and the compile is live and cheaper afterwards. (The gaps rung is left out: its dispatch
    mode cannot run under a fullgraph=True program yet.) The harness's shape is the one the script
    runs: a second batch size would make the call recompile, and then the fewest recompiles + graph
    breaks decide (its ``dynamic=True``), not the regional form."""
    import torch

    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.diagnose.rungs import ladder

    src, pristine = _copy("own_fullgraph_item", tmp_path)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 8}], mode=None,
                                 dtype=None, device="cpu")
    plan = tmp_path / "out" / "plan.yaml"
    outcome = diagnose(spec, src, plan, only={r.name for r in ladder() if r.name != "gaps"} | {"search"}, backend="eager")
    actions = load_plan(plan).plan.actions
    assert not [a for a in actions if a.action == "disable"], actions
    [edit] = [a for a in actions if a.action == "compile"]
    assert edit.target == "run.py::build" and edit.own_call.regional == "layers", actions
    rows = {r["candidate"]: r for r in outcome.search.table()}
    chosen = rows[outcome.search.choice.chosen]
    assert chosen["compile_s_per_start"] < rows["as-is"]["compile_s_per_start"], (chosen, rows["as-is"])
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    text = (src / "run.py").read_text()
    assert 'block.compile(fullgraph=True, backend="eager")' in text, text
    before, after = before_after(pristine, src, "run.py", tmp_path)
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert after["unique_graphs"] > 0 and after["graph_breaks"] == 0 == before["graph_breaks"], (before, after)


def test_blocks_run_inside_compiled_free_functions_get_no_second_compile(tmp_path):
    """gpt-fast's ``decode_one_token = torch.compile(decode_one_token, ...)`` at module level, the
    model passed in as a parameter: the source does not say which class it calls, but at run time
    both Blocks ran inside those compiled frames. A compile of ``Block`` there would receive no
    graph (Dynamo inlines it into the compiled caller), so the search proposes none and the plan
    changes no byte of the model."""
    src, _ = _copy("own_free_functions", tmp_path)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu",
                 "--budget", "60"]) == 0
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    m = search["measurement"]
    rows = {c["candidate"] for c in m["candidates"]}
    assert not rows & {"per-block", "per-block+mark_dynamic"}, rows
    said = [p for p in m["pruned"] if p.startswith("per-block")]
    assert said and "2 of 2 Block instance(s) ran inside the program's own compiled code at run time" in said[0], m["pruned"]
    assert "generate.py:21: torch.compile(decode_one_token" in said[0], said
    assert not [a for a in load_plan(plan).plan.actions if a.action == "compile" and a.target.startswith("model.py::Block")]


def test_the_instance_rung_names_the_compiled_free_functions_that_hold_the_blocks_graphs(tmp_path):
    """Under the instance-recompiles probe (``Block.forward`` compiled by itself), the harness's
    step still runs gpt-fast's compiled ``prefill`` and ``decode_one_token``: the graphs Dynamo
    counts are theirs, one each, with the blocks traced inside them, and ``Block.forward``'s own
    compiled code gets none. The verdict says that, naming both frames, and claims no graph
    per call of the block."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src, _ = _copy("own_free_functions", tmp_path)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=(), mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"instance_recompiles"}, backend="eager")
    [rung] = [r for r in outcome.rungs if r.name == "instance_recompiles"]
    m = rung.measurement
    assert m["block_graphs"] == 0 and m["graphs"] == 2, m
    assert [(f["name"], f["where"], f["graphs"]) for f in m["program_frames"]] == [
        ("prefill", "generate.py:13", 1), ("decode_one_token", "generate.py:17", 1)], m["program_frames"]
    assert rung.verdict.startswith("Block.forward compiled into 2 graph(s) of the program's compiled functions "
                                   "prefill (generate.py:13, 1 graph), decode_one_token (generate.py:17, 1 graph)"), rung.verdict
    assert "each call ran more than one graph" not in rung.verdict and "graph(s) of Block.forward" not in rung.verdict, rung.verdict
