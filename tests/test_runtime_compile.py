"""The run-time reading of the program's own compiles, as the harness runs them (the
frames Dynamo compiled, the compiled modules), reported by the search beside the static reading,
and where the two disagree, one sentence each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rewriter.diagnose.own_compile import OwnCompile
from rewriter.diagnose.runner import diagnose, harness_from_flags
from rewriter.diagnose.runtime_compile import disagreements, per_call, seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _search(tmp_path: Path, case: str, shapes: list[dict]):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / case, src, ignore=shutil.ignore_patterns("__pycache__"))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=shapes, mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"search"}, backend="eager")
    [asis] = [r for r in outcome.search.table() if r["candidate"] == "as-is"]
    report = json.loads((tmp_path / "stackpart-diagnose" / "report.json").read_text())
    [rung] = [r for r in report["rungs"] if r["name"] == "search"]
    return outcome, asis, rung["measurement"]


def test_the_search_names_each_frame_the_program_compiled_at_run_time(tmp_path):
    """``@torch.compile`` on a method (model.py), ``torch.compile`` on a submodule in the harness,
    and a gate compiled through ``getattr(torch, "compile")``, which the static reading misses."""
    outcome, asis, measurement = _search(tmp_path, "own_runtime", [{"batch": 4}, {"batch": 6}])
    seen_lines = [a for a in asis["actions"] if a.startswith("seen at run time: ")]
    assert "seen at run time: Net.project (model.py:32), 2 graphs, 1 recompile" in seen_lines, seen_lines
    assert ("seen at run time: Encoder.forward (model.py:15), 2 graphs, 1 recompile, compiled as module enc "
            "(Encoder, torch.compile(module))") in seen_lines, seen_lines
    assert 'the program\'s own: harness.py:7: torch.compile(model.enc, backend="eager")' in asis["actions"]
    assert measurement["own_compile_runtime"] == [a.removeprefix("seen at run time: ") for a in seen_lines]
    # the frames' graphs are Dynamo's own count, split by frame
    row = outcome.search.rows["as-is"]
    assert sum(f["graphs"] for f in row["runtime_compiles"]["frames"]) == row["compile"]["unique_graphs"] == 6
    notes = [n for n in outcome.notes if n.startswith("search: the program as it is: ")]
    assert notes == ["search: the program as it is: _gate (model.py:19) compiled at run time (2 graphs, 1 recompile), but "
                     "the static reading found no compile of it: no torch.compile call or decorator in SRC was read for it "
                     "(a compile through an alias or a wrapper the static reading does not follow, or one an installed "
                     "library makes)"], notes
    assert measurement["own_compile_disagreements"] == [n.removeprefix("search: the program as it is: ") for n in notes]
    assert "seen at run time: Net.project (model.py:32), 2 graphs" in (tmp_path / "stackpart-diagnose" / "report.md").read_text()


def test_a_compile_in_a_script_the_harness_does_not_run_is_said_not_to_have_run(tmp_path):
    outcome, asis, measurement = _search(tmp_path, "own_moe_trainer", [{"batch": 2, "seq": 6}])
    assert not [a for a in asis["actions"] if a.startswith("seen at run time")], asis["actions"]
    said = ('the program\'s own compile train.py:18: torch.compile(block, fullgraph=True, backend="eager") did not run in '
            "the harness: the harness's run never imported train.py, so the as-is row measures the model without it")
    assert measurement["own_compile_disagreements"] == [said]
    assert f"search: the program as it is: {said}" in outcome.notes


def test_the_frame_log_reads_fullgraph_resumes_entries_and_compiled_modules():
    """In process: Dynamo's compile callbacks name each frame, its graphs (a graph break's resume
    function merged into its frame), fullgraph, and the module the program compiled."""
    import torch

    from rewriter.engine.watch import CompileWatch, compiled_modules

    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) + 1

    class Breaks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            x = self.fc(x)
            torch._dynamo.graph_break()
            return x.relu()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.brk = Gate(), Breaks()

        def forward(self, x):
            return self.brk(self.gate(x))

    model = Net()
    model.gate.compile(backend="eager", fullgraph=True)
    model.brk = torch.compile(model.brk, backend="eager")
    with CompileWatch() as watch, torch.no_grad():
        model(torch.randn(2, 4))
        frames = {f["name"].rsplit(".", 1)[-1] + ":" + f["entry"]["path"]: f for f in watch.frames(model)}
        graphs = watch.stats().unique_graphs
    assert {k: (f["graphs"], f["resumes"], f["fullgraph"]) for k, f in frames.items()} == {
        "forward:gate": (1, 0, True), "forward:brk": (2, 1, False)}, frames
    assert graphs == 3
    assert [(m["path"], m["class"], m["how"], m["fullgraph"]) for m in compiled_modules(model)] == [
        ("gate", "Gate", "module.compile()", True), ("brk", "Breaks", "torch.compile(module)", False)]


def test_disagreements_name_what_only_one_reading_saw():
    own = [OwnCompile("model.py:20", "@torch.compile", False, ("function", "model.py::Block.forward")),
           OwnCompile("serve.py:5", "torch.compile(model)", False, ("class", "Net"))]
    frame = {"name": "Block.forward", "file": "model.py", "line": 20, "graphs": 2, "recompiles": 0, "fullgraph": False,
             "entry": {"kind": "function", "name": "Block.forward", "file": "model.py", "line": 20}}
    library = {"name": "Attention.forward", "file": "/venv/lib/site-packages/lib/attn.py", "line": 9, "graphs": 1,
               "recompiles": 0, "fullgraph": True,
               "entry": {"kind": "function", "name": "Attention.forward", "file": "/venv/lib/site-packages/lib/attn.py", "line": 9}}
    rc = {"frames": [frame, library], "modules": [], "src_imported": ["harness.py", "model.py", "serve.py"]}
    assert seen(rc) == ["Block.forward (model.py:20), 2 graphs", "Attention.forward (lib/attn.py:9), 1 graph, fullgraph"]
    assert disagreements(own, rc) == [
        "the program's own compile serve.py:5: torch.compile(model) did not run in the harness: serve.py is imported, but "
        "no frame or module it compiles was seen compiled (the call is not on the harness's path)",
        "Attention.forward (lib/attn.py:9) compiled at run time (1 graph, fullgraph), but the static reading found no "
        "compile of it: it is code outside SRC (lib/attn.py), compiled by an installed library or by a call in SRC the "
        "static reading does not follow (an alias, a wrapper)"]
    assert disagreements(own, None) == []


def test_a_compile_of_an_attribute_the_harness_returns_is_the_models_own_compile():
    """diffusers' ``pipe.unet = torch.compile(pipe.unet, ...)`` on a plain pipeline object, and a
    harness whose ``build_model`` returns ``load_pipeline().unet``: the compiled module is the
    harness's model itself (``<model>``), not an attribute ``unet`` of it. The call was made, so it
    accounts for that module and its frame; a compile of an attribute whose call was not made
    does not."""
    code = 'torch.compile(pipe.unet, mode="max-autotune", fullgraph=True)'
    own = [OwnCompile("pipeline.py:23", code, True, ("unknown", ""), lines=(23, 23))]
    frame = {"name": "UNet.forward", "file": "unet.py", "line": 24, "graphs": 1, "recompiles": 0, "fullgraph": True,
             "entry": {"kind": "module", "path": "<model>", "class": "UNet", "file": "unet.py", "line": 24}}
    module = {"path": "<model>", "class": "UNet", "how": "torch.compile(module)", "fullgraph": True}
    rc = {"frames": [frame], "modules": [module], "src_imported": ["harness.py", "pipeline.py", "unet.py"],
          "calls": [("pipeline.py", 23)]}
    assert disagreements(own, rc) == []
    assert per_call(own, rc) == [f"pipeline.py:23: {code}: 1 frame, 1 graph, 0 recompiles"]
    # a second compile of another attribute, made too: the root module is no longer its alone to claim
    other = OwnCompile("pipeline.py:24", "torch.compile(pipe.vae)", False, ("unknown", ""), lines=(24, 24))
    rc2 = dict(rc, calls=[("pipeline.py", 23), ("pipeline.py", 24)])
    assert per_call([*own, other], rc2)[0].endswith("compiled nothing"), per_call([*own, other], rc2)


def test_the_search_reads_a_pipelines_compiled_attribute_as_the_models_compile(tmp_path):
    """The fixture's harness returns ``load_pipeline().unet``, which ``pipeline.py`` compiles as
    ``pipe.unet = torch.compile(pipe.unet, ...)``: the as-is row gives that call its frame, and the
    report says neither that it did not run nor that the frame has no compile in SRC."""
    outcome, asis, measurement = _search(tmp_path, "own_pipeline_attr", [{"batch": 1, "size": 8}])
    call = 'pipeline.py:24: torch.compile(pipe.unet, mode="max-autotune", fullgraph=True)'
    assert f"seen at run time: {call}: 1 frame, 1 graph, 0 recompiles" in asis["actions"], asis["actions"]
    assert measurement["own_compile_disagreements"] == [], measurement["own_compile_disagreements"]
