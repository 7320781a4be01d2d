"""Guards on values that change between calls at one input shape (a step counter, a cache's fill
level): found by calling a shape more than once, named with the attribute and its line, answered
with ``allow_unspec_int_on_nn_module`` (torch's own hint) and never with a higher recompile limit
for a value without bound; after ``rewrite --apply`` the user's own script runs with the same
outputs and recompiles less."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from programs import before_after  # tests/programs.py: the script before and after, in one process

from rewriter.cli import main
from rewriter.diagnose.evidence import Evidence
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"


def _calls(tmp_path: Path, body: str, calls: int = 3, arg: bool = False) -> list:
    """Write ``model.py`` with ``Net`` (``body`` is its forward's first lines), compile it (backend
    eager), call it ``calls`` times at one shape, and read the value guards from Dynamo's log."""
    import torch

    from rewriter.diagnose.dynamo_log import capture, reset
    from rewriter.diagnose.value_guards import read

    (tmp_path / "model.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n        self.step = 0\n        self.phase = 0\n\n"
        f"    def forward(self, x{', pos' if arg else ''}):\n{body}        return self.fc(x)\n")
    spec = importlib.util.spec_from_file_location(f"vg_model_{tmp_path.name}", tmp_path / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reset()
    compiled = torch.compile(mod.Net(), backend="eager")
    try:
        with capture() as log, torch.no_grad():
            for i in range(calls):
                compiled(torch.randn(2, 4), *([i] if arg else []))
    finally:
        reset()
    return read(log, tmp_path, calls)


def test_a_step_counter_changes_every_call_and_is_named_at_its_line(tmp_path):
    [v] = _calls(tmp_path, "        self.step += 1\n")
    assert (v.source, v.attribute, v.name) == ("self.step", "step", "Net.step")
    assert (v.file, v.line, v.function) == ("model.py", 13, "Net.forward")
    assert v.every_call and v.module_int and v.recompiles == 2 and v.values == [0, 1]
    from rewriter.diagnose.value_guards import describe

    text = describe(v)
    assert "allow_unspec_int_on_nn_module = True" in text and "tensor" in text
    assert "raise" not in text  # never a higher recompile limit for a value without bound


def test_a_value_that_changes_once_then_holds_is_bounded(tmp_path):
    """A phase that alternates 0, 1, 0: the third call finds its graph again."""
    [v] = _calls(tmp_path, "        self.phase = 1 - self.phase\n", calls=3)
    assert v.attribute == "phase" and not v.every_call and v.recompiles == 1


def test_an_int_argument_becomes_dynamic_after_one_recompile(tmp_path):
    """A Python int argument that changes every call: automatic dynamic shapes make it symbolic
    after one recompile (torch 2.13), so it is bounded and no module attribute."""
    [v] = _calls(tmp_path, "        x = x * pos\n", calls=4, arg=True)
    assert v.source == "pos" and v.attribute is None and not v.module_int
    assert v.recompiles == 1 and not v.every_call


def test_no_value_guard_without_a_changing_value(tmp_path):
    assert _calls(tmp_path, "        x = x + self.step\n") == []


def test_the_limit_remedy_raises_the_limit_only_for_bounded_values():
    from rewriter.diagnose.rung import RungResult
    from rewriter.diagnose.value_guards import limit_remedy

    class Ctx:
        results: dict = {}

    ctx = Ctx()
    assert limit_remedy(ctx, "recompile_limit", "0/7: self.layer_idx == 7") == \
        "raise torch._dynamo.config.recompile_limit above the graphs needed"
    r = RungResult("recompiles", "t")
    r.measurement = {"value_guards": [dict(source="self.fill", attribute="fill", values=[3, 4], calls=3, recompiles=2,
                                           every_call=True, module_int=True, hint=None, file="model.py", line=19,
                                           function="Layer.forward", callers=[])]}
    ctx.results = {"recompiles": r}
    text = limit_remedy(ctx, "recompile_limit", "0/7: self.fill == 7  # self.fill += 1")
    assert "Layer.fill changes every call (model.py:19)" in text and "allow_unspec_int_on_nn_module" in text
    assert "raise torch" not in text
    # a limit hit on another, bounded value still gets the higher limit
    assert limit_remedy(ctx, "recompile_limit", "0/7: self.layer_idx == 7").startswith("raise torch._dynamo.config.recompile_limit")
    # no reason logged: the value counts where the class whose limit was hit reads it
    assert "allow_unspec_int_on_nn_module" in limit_remedy(ctx, "recompile_limit", None, "Layer")
    assert limit_remedy(ctx, "recompile_limit", None, "Block").startswith("raise torch._dynamo.config.recompile_limit")


def test_the_knob_is_in_the_installed_torch_and_set_where_dynamo_reads_it():
    """torch >= 2.7 has the knob (2.6's config.py has none: the plan refuses it there, by
    :data:`rewriter.plan.DYNAMO_CONFIG_SINCE`); Dynamo reads it while tracing, so a line run after
    ``torch.compile`` but before the first call takes effect."""
    import torch
    import torch.nn as nn

    from rewriter.diagnose.dynamo_log import reset
    from rewriter.plan import DYNAMO_CONFIG_KEYS, DYNAMO_CONFIG_SINCE
    from torch._dynamo.utils import counters

    assert "allow_unspec_int_on_nn_module" in DYNAMO_CONFIG_KEYS and DYNAMO_CONFIG_SINCE["allow_unspec_int_on_nn_module"] == "2.7"
    assert torch._dynamo.config.allow_unspec_int_on_nn_module is False

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.step = 0

        def forward(self, x):
            self.step += 1
            return x * self.step

    reset()
    compiled = torch.compile(Net(), backend="eager")
    try:
        with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
            outs = [compiled(torch.ones(2)) for _ in range(6)]
        graphs = counters["stats"]["unique_graphs"]
    finally:
        reset()
    assert graphs == 2, graphs  # one static, one with the int symbolic: not one per value
    assert [float(o[0]) for o in outs] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("case, script, shapes, cls, attr, line, again", [
    ("own_step_counter", "train.py", ["batch=4", "batch=6"], "Net", "step", 25, True),
    ("own_decode_fill", "generate.py", ["batch=2", "batch=3"], "Layer", "fill", 19, False),
])
def test_diagnose_and_apply_set_the_knob_for_the_programs_own_compile(tmp_path, monkeypatch, case, script, shapes, cls, attr,
                                                                      line, again):
    """The user's script compiles the model (``model.compile()``, which the harness's model runs):
    before, the value recompiles every call and hits the recompile limit; diagnose's recompiles rung
    names it at its line (the step counter: found by the repeated calls of the reference shape, one
    call per shape fails the size guard first; torch's hint the remedy), the plan sets
    ``allow_unspec_int_on_nn_module`` in the model's ``__init__``, and after ``rewrite --apply``
    the script gives the same outputs with fewer graphs and no fallback to eager. The applied tree
    diagnosed again (``again``) exits 0 and plans the knob no second time."""
    import torch

    from rewriter.diagnose.rungs import top_ops

    # The toy's softmax is near the top-ops rung's 10% bar in self-CPU time, and its share moves
    # with the CPU's load: past the bar the kernel rule's candidates change the ladder's order,
    # which decides among candidates with the eager backend. Held out of reach, so this test does
    # not depend on a CPU timing (the value guard and its knob do not).
    monkeypatch.setattr(top_ops, "DOMINANT", 1.01)
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / case, src, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    plan = tmp_path / "out" / "plan.yaml"
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60"]
    for s in shapes:
        argv += ["--shape", s]
    assert main(argv) == 0
    actions = load_plan(plan).plan.actions
    knob = [a for a in actions if a.action == "dynamo_config"]
    assert [(a.target, a.settings.items()) for a in knob] == [
        (f"model.py::{'Decoder' if cls == 'Layer' else cls}.__init__", [("allow_unspec_int_on_nn_module", True)])]
    assert f"{cls}.{attr} at model.py:{line} changes every call" in knob[0].why
    # beside the knob, only an edit of the program's own call (its dynamic=True): no second compile
    assert all(a.action == "compile" and a.own_call is not None for a in actions if a not in knob), actions
    report = (plan.parent / "stackpart-diagnose" / "report.md").read_text()
    data = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [rung] = [r for r in data["rungs"] if r["name"] == "recompiles"]
    assert rung["status"] == "ok", rung["reason"]
    assert any(f["kind"] == "value_guard" and f["file"] == "model.py" and f["line"] == line for f in rung["findings"]), rung["findings"]
    if case == "own_step_counter":
        # one call per shape fails the size guard first; the repeated calls of the reference shape
        # find the counter, with its attribute and line, and the rung's remedy is torch's hint
        [v] = rung["measurement"]["value_guards"]
        assert (v["attribute"], v["file"], v["line"], v["every_call"]) == ("step", "model.py", 25, True), v
        [f] = [f for f in rung["findings"] if f["kind"] == "value_guard"]
        assert (f["file"], f["line"]) == ("model.py", 25) and f["message"].startswith("Net.step (Dynamo's guard: self.step == "), f
        assert "Net.step at model.py:25 changes every call" in rung["verdict"], rung["verdict"]
        implies = rung["implies"]
        assert "allow_unspec_int_on_nn_module = True" in implies and "recompile limit only recompiles more" in implies, implies
        assert implies.startswith("mark_dynamic at the region boundary"), implies  # the batch dim still varies across the shapes
    for text in (report, json.dumps(data)):
        assert "raise torch._dynamo.config.recompile_limit" not in text  # never for a value without bound
    [search] = [r for r in data["rungs"] if r["name"] == "search"]
    # the batch size varies too: without a measured gain the fewest recompiles + graph breaks decide,
    # and the knob with dynamic=True recompiles least (the knob alone still recompiles on the batch size)
    assert search["measurement"]["chosen"] == "as-is+dynamic+allow_unspec_int_on_nn_module", search["measurement"]["decision"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    assert (rows["as-is+dynamic+allow_unspec_int_on_nn_module"]["recompiles"] < rows["as-is+allow_unspec_int_on_nn_module"]["recompiles"]
            < rows["as-is"]["recompiles"]), rows
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0  # with diagnose's validation report
    assert "torch._dynamo.config.allow_unspec_int_on_nn_module = True" in (src / "model.py").read_text()
    before, after = before_after(tmp_path / "pristine", src, script, tmp_path)
    assert before["recompile_limit_hits"] == 1 and before["unique_graphs"] == 8, before
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert after["recompile_limit_hits"] == 0 and 0 < after["unique_graphs"] < before["unique_graphs"], (before, after)
    if again:
        plan2 = tmp_path / "again" / "plan.yaml"
        # a process of its own, as a user runs it: this one imported the tree's modules before the
        # rewrite, and the rewritten model sets a process-wide knob
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        proc = subprocess.run([sys.executable, "-m", "rewriter.cli", *argv[:4], "-o", str(plan2), *argv[6:]],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not [a for a in load_plan(plan2).plan.actions if a.action == "dynamo_config"], load_plan(plan2).plan.actions
        data2 = json.loads((plan2.parent / "stackpart-diagnose" / "report.json").read_text())
        [rung2] = [r for r in data2["rungs"] if r["name"] == "recompiles"]
        assert not [v for v in rung2["measurement"]["value_guards"] if v["every_call"]], rung2["measurement"]["value_guards"]


def test_a_torch_without_the_knob_refuses_the_plan_and_gets_no_twin(tmp_path, monkeypatch, capsys):
    """torch 2.6's config.py has capture_scalar_outputs and capture_dynamic_output_shape_ops but no
    allow_unspec_int_on_nn_module (read from its wheel): the plan is refused at the key's line with
    the version that has it, nothing written; the search proposes no twin and says why."""
    import rewriter.diagnose.kinds.value_guard as vg
    import rewriter.plan.loader as plan_mod
    from rewriter.diagnose.rung import RungResult

    monkeypatch.setattr(plan_mod, "dynamo_config_names",
                        lambda: ("2.6.0", frozenset({"capture_scalar_outputs", "capture_dynamic_output_shape_ops"})))
    model = "class Net:\n    def __init__(self):\n        self.step = 0\n"
    (tmp_path / "model.py").write_text(model)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: dynamo_config\n    target: model.py::Net.__init__\n"
                    "    settings: {allow_unspec_int_on_nn_module: true}\n")
    assert main(["rewrite", "--plan", str(plan), str(tmp_path), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    assert "the torch in use (2.6.0) has no 'allow_unspec_int_on_nn_module'" in err and "torch >= 2.7 has it" in err, err
    assert (tmp_path / "model.py").read_text() == model

    class Ctx:
        evidence = Evidence()

    r = RungResult("recompiles", "t")
    r.measurement = {"value_guards": [dict(source="self.step", attribute="step", values=[3, 4], calls=3, recompiles=2,
                                           every_call=True, module_int=True, hint=None, file="model.py", line=3,
                                           function="Net.forward", callers=[])]}
    ctx = Ctx()
    ctx.results = {"recompiles": r}
    monkeypatch.setattr(vg, "knob_exists", lambda: False)
    cands, pruned = vg.with_knob(ctx, ["as-is"])
    assert cands == ["as-is"] and ctx.evidence.value_guard_twins == {}
    [line] = pruned
    assert line.startswith("+allow_unspec_int_on_nn_module: Net.step at model.py:3 changes every call") and "torch >= 2.7" in line


def test_a_twin_that_recompiles_no_less_is_pruned_after_measurement():
    from rewriter.diagnose.kinds.value_guard import judge

    class Ctx:
        evidence = Evidence(value_guard_twins={"whole+allow_unspec_int_on_nn_module": "whole", "as-is+allow_unspec_int_on_nn_module": "as-is"})

    rows = {
        "whole": {"compile": {"recompiles": 5, "recompile_limit_hits": ["hit config.recompile_limit (8)"]}, "problems": ["fallback"]},
        "whole+allow_unspec_int_on_nn_module": {"compile": {"recompiles": 2, "recompile_limit_hits": []}},
        "as-is": {"compile": {"recompiles": 1, "recompile_limit_hits": []}},
        "as-is+allow_unspec_int_on_nn_module": {"compile": {"recompiles": 1, "recompile_limit_hits": []}},
    }
    [line] = judge(Ctx(), rows)
    assert line.startswith("as-is+allow_unspec_int_on_nn_module: pruned after measurement")
    assert "skipped" not in rows["whole+allow_unspec_int_on_nn_module"]  # fewer recompiles than its failed base: kept
    assert rows["as-is+allow_unspec_int_on_nn_module"]["skipped"].startswith(
        "pruned after measurement: allow_unspec_int_on_nn_module removed no recompile")
