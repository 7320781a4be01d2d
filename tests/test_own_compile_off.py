"""The program's own compile is a candidate like any other, off included: ``as-is+no-compile``
writes ``disable=True`` on its call (``torch.compile``'s own switch), and the decision counts that
compile's cost per start (docs/design.md, "The search").
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import libcst as cst
import pytest

from rewriter.diagnose.own_candidates import NO_COMPILE, compile_off
from rewriter.plan import CompileAction, parse_plan

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "diagnose" / "own_whole_decorated"


@pytest.mark.parametrize("before, after", [
    ("import torch\n@torch.compile\ndef f(x): return x\n", "import torch\n@torch.compile(disable=True)\ndef f(x): return x\n"),
    ("import torch\ndef f(m):\n    return torch.compile(m, fullgraph=True)\n",
     "import torch\ndef f(m):\n    return torch.compile(m, fullgraph=True, disable=True)\n"),
    ("import torch\ndef f(m):\n    m.compile(mode='max-autotune')\n",
     "import torch\ndef f(m):\n    m.compile(mode='max-autotune', disable=True)\n"),
    # disable: false turns it back on: torch's default, so the keyword goes
    ("import torch\ndef f(m):\n    return torch.compile(m, disable=True)\n", "import torch\ndef f(m):\n    return torch.compile(m)\n"),
])
def test_disable_is_written_on_the_programs_call_and_nothing_else_changes(before, after):
    from test_own_call import _edit

    edits = {"disable": "disable=True" in after}
    assert _edit(before, edits) == after
    assert _edit(after, edits) == after  # idempotent


def test_a_bare_decorator_turned_off_and_on_again_keeps_its_empty_parentheses():
    """The documented difference of the round trip (docs/decisions.md, "A compile turned off is read,
    and turned back on"): ``disable=True`` needs parentheses, and ``disable: false`` removes only the
    keyword, so a bare ``@torch.compile`` comes back as ``@torch.compile()``, the same compile."""
    from test_own_call import _edit

    before = "from torch import compile as tc\n@tc\ndef f(x): return x\n"
    off = _edit(before, {"disable": True})
    assert off == "from torch import compile as tc\n@tc(disable=True)\ndef f(x): return x\n"
    assert _edit(off, {"disable": False}) == before.replace("@tc\n", "@tc()\n")


def test_a_call_turned_off_compiles_nothing_torch_returns_what_it_was_given():
    """What the edit relies on: ``disable=True`` makes ``torch.compile`` return its argument."""
    import torch

    m = torch.nn.Linear(2, 2)
    assert torch.compile(m, fullgraph=True, disable=True) is m


def test_the_plan_reads_disable_as_no_compile_and_refuses_it_with_regional():
    plan = parse_plan("version: 1\nactions:\n  - action: compile\n    target: model.py::f\n    strategy: whole\n"
                      "    own_call: {disable: true}\n").plan
    [action] = plan.actions
    assert action.compiles is False and action.own_call.edits() == {"disable": True}
    from rewriter.diagnose.candidate import Candidate

    assert Candidate(NO_COMPILE, plan).compiles is False  # the engine expects no graph from it
    with pytest.raises(Exception, match="own_call.disable turns the call off"):
        CompileAction(action="compile", target="model.py::f", strategy="region",
                      own_call={"disable": True, "regional": "layers"})
    with pytest.raises(Exception, match="expected true or false, got null"):
        parse_plan("version: 1\nactions:\n  - action: compile\n    target: model.py::f\n    own_call: {disable: null}\n")


def test_a_call_with_disable_true_is_no_compile_to_any_reader(tmp_path):
    """A tree whose compile a plan turned off is the eager program it is: diagnose's reading of the
    program's compiles, validate's second as-is variant and check's rules (SP101 flagged the
    disabled whole-model decorator, failing the commit that applied the plan) all leave it out."""
    from rewriter.check.engine import check_text
    from rewriter.check.rules import ALL_RULES
    from rewriter.diagnose.own_compile import own_compiles
    from rewriter.validate.command import compiles_itself

    (tmp_path / "serve.py").write_text("import torch\nfrom model import Net\nmodel = torch.compile(Net(), disable=True)\n"
                                       "print(model)\n")
    assert own_compiles(tmp_path) == [] and compiles_itself(tmp_path) == []
    model = CASE / "model.py"
    code = model.read_text().replace('@torch.compile(backend="eager")', '@torch.compile(backend="eager", disable=True)')
    assert "disable=True" in code
    assert [f.code for f in check_text(code, "model.py", ALL_RULES).findings] == []
    assert "SP101" in [f.code for f in check_text(model.read_text(), "model.py", ALL_RULES).findings]  # it compiles


def _ctx(tmp_path, backend):
    from rewriter.diagnose.own_compile import own_compiles

    shutil.copytree(CASE, tmp_path / "src")
    owns = own_compiles(tmp_path / "src")
    spec = parse_plan("version: 1\nharness: {file: harness.py}\nactions: []\n").plan.harness
    return SimpleNamespace(backend=backend, session=SimpleNamespace(spec=spec), amortization_assumed=True), owns


def test_the_off_candidate_edits_every_call_the_program_runs(tmp_path):
    from rewriter.diagnose.candidates import OwnScope

    ctx, owns = _ctx(tmp_path, "inductor")
    own = [o for o in owns if o.idle is None]
    assert own and all(o.covers[0] == "function" for o in own), own  # a decorator in the model's source: the harness runs it
    pruned: list[str] = []
    [(name, decision)] = compile_off(ctx, OwnScope(functions=own), pruned)
    assert name == NO_COMPILE and pruned == []
    assert [(a.target, a.own_call.edits()) for a in decision.plan.actions] == [(o.site, {"disable": True}) for o in own]
    assert "turned off (disable=True" in decision.plan.actions[0].why


def test_with_a_backend_that_does_not_optimise_the_off_candidate_is_pruned_with_why(tmp_path):
    """On the eager backend the gain is not measured, and the ladder's order would hand the plan to
    the first candidate that runs: turning the program's compile off untimed."""
    from rewriter.diagnose.candidates import OwnScope

    ctx, owns = _ctx(tmp_path, "eager")
    pruned: list[str] = []
    assert compile_off(ctx, OwnScope(functions=[o for o in owns if o.idle is None]), pruned) == []
    assert pruned == [f"{NO_COMPILE}: backend eager does not optimise, so what the program's own compile gains over "
                      "compilation off is not measured"]


def test_the_decision_takes_a_compile_off_that_does_not_pay_back_its_start():
    """A program whose compile costs 40 s per start for a step within the noise of compilation off,
    over 1,000 runs: off nets the 40 s; over 10 million runs the 1% the compile gains is worth more."""
    from rewriter.diagnose.decide import decide

    rows = {"as-is": {"step_ms": 10.0, "compile_s_per_start": 40.0}, NO_COMPILE: {"step_ms": 10.1}}
    c = decide(rows, ["as-is", NO_COMPILE], [], 1000, 1, True)
    assert c.chosen == NO_COMPILE and round(c.net_s[NO_COMPILE]) == 40, c
    c = decide(rows, ["as-is", NO_COMPILE], [], 10_000_000, 1, True)
    assert c.chosen == "as-is", c


def test_the_off_plan_is_one_line_of_the_users_decorator_and_passes_check(tmp_path, capsys):
    """Applied, the plan changes the decorator's line only (no suppression comment: a call turned
    off is no compile for SP101 to flag), and `stackpart check` passes the tree."""
    from rewriter.cli import main

    src = tmp_path / "src"
    shutil.copytree(CASE, src)
    before = (src / "model.py").read_text()
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n"
                    "    own_call: {disable: true}\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    after = (src / "model.py").read_text()
    assert after == before.replace('    @torch.compile(backend="eager")\n', '    @torch.compile(backend="eager", disable=True)\n')
    assert after != before
    capsys.readouterr()
    assert main(["check", "--plan", str(plan), "--src", str(src), str(src / "model.py")]) == 0, capsys.readouterr().out


def test_a_call_whose_options_come_from_elsewhere_cannot_be_turned_off_and_says_why(tmp_path):
    """``**options`` may already set ``disable``: the rewrite refuses the edit, so the candidate is
    not proposed (it would fail to rewrite), and why is said."""
    from rewriter.diagnose.candidates import OwnScope
    from rewriter.diagnose.own_compile import _PROBE, own_compiles
    from rewriter.plan import OWN_CALL_KEYS

    assert set(_PROBE) == set(OWN_CALL_KEYS)  # every key the plan may edit is probed
    (tmp_path / "train.py").write_text("import torch\n\n\ndef build(model, opts):\n"
                                       "    return torch.compile(model, **opts)\n\n\nbuild(None, {})\n")
    [own] = own_compiles(tmp_path)
    assert own.can("disable") and "**opts" in own.can("disable"), own.refused
    ctx, _ = _ctx(tmp_path / "x", "inductor")
    ctx.evidence = SimpleNamespace(own_compiled_modules=[{"path": "<model>"}])  # the harness runs it
    pruned: list[str] = []
    assert compile_off(ctx, OwnScope(whole=[own]), pruned) == []
    assert len(pruned) == 1 and pruned[0].startswith(f"{NO_COMPILE}: train.py:5: ") and "**opts" in pruned[0], pruned


@pytest.mark.slow
def test_the_off_candidate_runs_in_the_engine_as_the_program_with_compilation_off(tmp_path, monkeypatch):
    """Forced into the search (as on a GPU, where the gain is measured): its tree is the user's
    decorator with disable=True, its child compiles nothing and is not failed for capturing no
    graph, and its outputs are the program's."""
    from test_own_call import _diagnose

    from rewriter.diagnose.candidate import Candidate

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    harness = "version: 1\nharness: {file: harness.py, shapes: [{batch: 4}, {batch: 6}], device: cpu}\n"
    off = parse_plan(harness + "actions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n"
                               "    own_call: {disable: true}\n").plan

    def propose(ctx, own=None):  # noqa: ANN001, ANN202 - replaces candidates.propose
        return [Candidate(NO_COMPILE, off), Candidate("as-is", parse_plan(harness + "actions: []\n").plan)], ["forced"]

    monkeypatch.setattr("rewriter.diagnose.search.propose", propose)
    outcome, _ = _diagnose(tmp_path)
    table = {r["candidate"]: r for r in outcome.search.table()}
    row, asis = table[NO_COMPILE], table["as-is"]
    assert row["numerics"] == "ok" and not row["status"].startswith("failed"), row
    assert row["graphs"] == 0 and asis["graphs"] >= 1, (row, asis)  # off: nothing compiled; as is: its decorator


def test_the_searchs_break_even_counts_the_programs_own_compile():
    """diagnose's validation report gates the chosen row's break-even (computed by the engine
    against its ``eager`` variant, the program as it runs in the search): the off plan, a step 1%
    slower than the compiled program and no compile, nets the 200 s compile it saves per start, and
    a regional edit with the program's step and a sixth of its compile pays back at once; neither
    is "never pays back: not faster than eager" (which rewrite --apply would refuse)."""
    from rewriter.engine.measure import Measurement, _Run
    from rewriter.engine.verdict import speed_failures

    m = Measurement()
    steps = {"eager": 10.0, NO_COMPILE: 10.1, "regional": 10.0}
    m.timing = [{"shape": {"b": 1}, "timing": {n: {"median_ms": t} for n, t in steps.items()}}]
    m.results = {"eager": {"compile_s_per_start": 200.0, "shape_buckets": 1},
                 NO_COMPILE: {"compile_s_per_start": 0.0, "shape_buckets": 0},
                 "regional": {"compile_s_per_start": 30.0, "shape_buckets": 1}}
    cold = {"eager": {"compile": {"unique_graphs": 1}, "shapes": [{"new_graphs": 1}]}, NO_COMPILE: {},
            "regional": {"compile": {"unique_graphs": 1}, "shapes": [{"new_graphs": 1}]}}
    _Run.step_figures(SimpleNamespace(m=m, cold=cold), list(steps), {"runs": 1_000_000, "restarts": 1})
    for name in (NO_COMPILE, "regional"):
        amort = m.results[name]["amortization"]
        assert amort["amortized"] is True, amort
        assert speed_failures({"plan": steps[name], "eager": steps["eager"]}, 0.0, amort) == []


OFF_SOURCE = """\
import torch


def helper(x):
    return torch.sin(x) + 1


@torch.compile(backend="eager", disable=True)
def step(x):
    return helper(x) * 2


def other(x):
    return x + 1


other = torch.compile(other, disable=True)
"""


def test_a_tree_whose_compile_is_turned_off_takes_a_compile_of_what_it_calls(tmp_path):
    """After the off plan is applied (``disable=True`` on ``step``'s decorator), a re-diagnosed plan
    may compile ``helper``, which ``step`` calls: ``step`` compiles nothing, so that is no second
    compile of traced code (it was refused as one)."""
    from test_source_compile_forms import _rewrite

    src = _rewrite(tmp_path, {"model.py": OFF_SOURCE}, "  - action: compile\n    target: model.py::helper\n", 0)
    assert "@torch.compile\ndef helper(x):" in (src / "model.py").read_text()


@pytest.mark.parametrize("target, line", [("step", 8), ("other", 17)])
def test_a_compile_of_a_function_whose_own_compile_is_off_is_refused_with_the_edit_that_turns_it_on(
        tmp_path, capsys, target, line):
    """A plain ``compile`` of a function carrying ``@torch.compile(..., disable=True)`` (or rebound to
    ``torch.compile(f, disable=True)``) was "no changes: src already is what the plan asks" and the
    function stayed eager; it is refused at the plan line, naming the source's call and
    ``own_call: {disable: false}``."""
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": OFF_SOURCE}, f"  - action: compile\n    target: model.py::{target}\n", 2)
    err = " ".join(capsys.readouterr().err.split())
    assert f"model.py:{line}" in err and "passes disable=True" in err, err
    assert f"target model.py::{target}, own_call: {{disable: false}}" in err, err


FULL_SOURCE = """\
import torch


def helper(x):
    return torch.sin(x) + 1


@torch.compile(backend="eager", fullgraph=True{off})
def step(x):
    return helper(x) * 2
"""


@pytest.mark.parametrize("action", [
    "{action: disable, target: model.py::step}",
    "{action: disable, target: model.py::other}",
    "{action: mark_dynamic, target: model.py::step, arg: x, dim: 0}",
    "{action: mark_dynamic, target: model.py::other, arg: x, dim: 0}",
    "{action: dynamo_config, target: model.py::step, settings: {capture_scalar_outputs: true}}",
])
def test_a_function_whose_own_compile_is_off_is_eager_to_every_rule(tmp_path, action):
    """``disable``, ``mark_dynamic`` and ``dynamo_config`` of a function whose own compile passes
    ``disable=True`` (a decorator or a rebinding) are edits of eager code: none of the rules that
    refuse them in a compiled frame applies."""
    from test_source_compile_forms import _rewrite

    _rewrite(tmp_path, {"model.py": OFF_SOURCE}, f"  - {action}\n", 0)


@pytest.mark.parametrize("action", [
    "{action: disable, target: model.py::helper}",
    "{action: mark_dynamic, target: model.py::step, arg: x, dim: 0}",
    "{action: mark_dynamic, target: model.py::helper, arg: x, dim: 0}",
    "{action: dynamo_config, target: model.py::step, settings: {capture_scalar_outputs: true}}",
    "{action: compile, target: model.py::helper}",
])
def test_a_plan_that_turns_the_programs_compile_off_reads_it_as_no_compile(tmp_path, action):
    """With ``own_call: {disable: true}`` on ``step`` (a live ``fullgraph=True`` compile in the
    source), the plan's other edits of ``step`` and of what it calls are edits of eager code."""
    from test_source_compile_forms import _rewrite

    off = "  - {action: compile, target: model.py::step, strategy: whole, own_call: {disable: true}}\n"
    _rewrite(tmp_path, {"model.py": FULL_SOURCE.format(off="")}, off + f"  - {action}\n", 0)


@pytest.mark.parametrize("action, words", [
    ("{action: disable, target: model.py::helper}", "fullgraph"),
    ("{action: mark_dynamic, target: model.py::step, arg: x, dim: 0}", "mark_dynamic"),
    ("{action: mark_dynamic, target: model.py::helper, arg: x, dim: 0}", "mark_dynamic"),
    ("{action: dynamo_config, target: model.py::step, settings: {capture_scalar_outputs: true}}", "dynamo_config"),
    ("{action: compile, target: model.py::helper}", "second time"),
])
def test_a_plan_that_turns_the_programs_compile_back_on_reads_it_as_the_compile_it_is(tmp_path, capsys, action, words):
    """``own_call: {disable: false}`` on a source ``@torch.compile(fullgraph=True, disable=True)``
    makes that compile live again, its ``fullgraph=True`` included: the rules read it as the
    source's compile."""
    from test_source_compile_forms import _rewrite

    on = "  - {action: compile, target: model.py::step, strategy: whole, own_call: {disable: false}}\n"
    _rewrite(tmp_path, {"model.py": FULL_SOURCE.format(off=", disable=True")}, on + f"  - {action}\n", 2)
    err = " ".join(capsys.readouterr().err.split())
    assert words in err, err


def test_fullgraph_set_on_a_compile_that_stays_off_is_no_fullgraph_region(tmp_path):
    """``own_call: {fullgraph: true}`` on a call the source turned off edits the options kept for a
    later edit back on; the call still compiles nothing, so a function it calls that the source keeps
    eager (``@torch.compiler.disable``) is no graph break it would raise on."""
    from test_source_compile_forms import _rewrite

    source = FULL_SOURCE.format(off=", disable=True").replace("fullgraph=True, ", "").replace(
        "\ndef helper", "\n@torch.compiler.disable\ndef helper")
    src = _rewrite(tmp_path, {"model.py": source},
                   "  - {action: compile, target: model.py::step, strategy: whole, own_call: {fullgraph: true}}\n", 0)
    assert '@torch.compile(backend="eager", disable=True, fullgraph=True)' in (src / "model.py").read_text()


@pytest.mark.parametrize("line", ["    model = torch.compile(model, disable=True)\n",
                                  "    for block in model.layers:\n        block.compile(disable=True)\n"])
def test_a_regional_edit_of_a_call_turned_off_is_refused_unless_it_turns_it_on(tmp_path, line):
    """``own_call: {regional: layers}`` on a call with ``disable=True`` kept that keyword in
    ``block.compile(disable=True)`` (or left the off loop as "already regional"): a plan to compile
    each block that compiles none. It is refused naming ``disable: false``, which does the edit."""
    from test_own_compile_reading import _NET, _rewrite

    from rewriter.errors import StackpartError

    (tmp_path / "model.py").write_text(_NET)
    body = f"import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n{line}    return model\n"
    with pytest.raises(StackpartError, match=r"train.py:\d+: own_call: regional: .*disable=True.*add disable: false"):
        _rewrite(tmp_path, body, "{regional: layers}")
    assert _rewrite(tmp_path, body, "{regional: layers, disable: false}") == body.replace(
        line, "    for block in model.layers:\n        block.compile()\n")


def test_the_off_candidate_is_no_compile_to_the_search_budget():
    """The budget estimates a cold phase from its kin, the candidates that compile the same units:
    the off plan's action names the program's call as an edit of it does, and was kin of the
    compiling edits (its cheap eager cold phase estimated as their compile, and skipped as too long)."""
    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.search_budget import cost_key

    head = "version: 1\nactions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n"
    off = Candidate(NO_COMPILE, parse_plan(head + "    own_call: {disable: true}\n").plan)
    dyn = Candidate("as-is+dynamic", parse_plan(head + "    own_call: {dynamic: true}\n").plan)
    assert cost_key(off) is None and cost_key(dyn) is not None


OFF_MODEL = """\
import torch
import torch.nn as nn


class OffNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))
"""

OFF_TRAIN = """\
import torch
from offnet_model import OffNet


def main():
    model = torch.compile(OffNet(), disable=True)
    return model, model(torch.randn(3, 4))
"""


@pytest.mark.parametrize("train", [OFF_TRAIN, OFF_TRAIN.replace("torch.compile(OffNet(), disable=True)",
                                                                "OffNet()\n    model.compile(disable=True)")])
def test_a_compile_of_a_class_whose_instance_another_file_compiles_with_disable_true_stands_and_compiles(
        tmp_path, monkeypatch, train):
    """``model = torch.compile(OffNet(), disable=True)`` (or ``model.compile(disable=True)``) in
    ``offnet_train.py`` is the program's compile of the instance, turned off, not a compile of
    ``OffNet.forward``: torch.compile returns the instance itself, so a plan's ``@torch.compile`` on
    ``forward`` (in ``offnet_model.py``) is written, not refused, and compiles when the program runs.
    The refusal of a compile whose target's own compile is off (a decorator or rebinding on the
    target: the rewrite would leave it as it is) does not apply."""
    import importlib
    import sys

    import torch

    from test_source_compile_forms import _rewrite

    src = _rewrite(tmp_path, {"offnet_model.py": OFF_MODEL, "offnet_train.py": train},
                   "  - {action: compile, target: offnet_model.py::OffNet, options: {backend: eager}}\n", 0)
    assert (src / "offnet_model.py").read_text() == OFF_MODEL.replace(
        "    def forward", '    @torch.compile(backend="eager")\n    def forward')
    assert (src / "offnet_train.py").read_text() == train
    monkeypatch.syspath_prepend(str(src))
    for name in ("offnet_model", "offnet_train"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        model, _ = importlib.import_module("offnet_train").main()
        assert type(model).__name__ == "OffNet"  # the instance itself: the program's compile is off
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # the plan's decorator compiled forward
    finally:
        for name in ("offnet_model", "offnet_train"):
            sys.modules.pop(name, None)
        torch._dynamo.reset()


@pytest.mark.parametrize("own_call, source_off, refused", [
    ("{disable: false}", True, "turns that call back on"),
    ("{fullgraph: true}", False, "keeps that call on"),
    ("{disable: true}", False, None),  # the program's compile off: the class's compile is the one that runs
    ("{fullgraph: true}", True, None),  # an option of a call that stays off
])
def test_a_compile_of_a_class_whose_instance_the_plan_keeps_compiled_whole_is_refused(
        tmp_path, capsys, own_call, source_off, refused):
    """The plan's ``own_call`` keeps (or turns back on) ``model = torch.compile(OffNet())`` in another
    file while it compiles ``OffNet``: Dynamo inlines the decorated ``forward`` into the whole-model
    compile, so that decorator and its options would never be used (on CPU torch its backend gets no
    graph). Refused at the class's compile, naming the program's call and the own_call action."""
    from test_source_compile_forms import _rewrite

    train = OFF_TRAIN if source_off else OFF_TRAIN.replace(", disable=True", "")
    plan = (f"  - {{action: compile, target: offnet_train.py::main, strategy: whole, own_call: {own_call}}}\n"
            "  - {action: compile, target: offnet_model.py::OffNet}\n")
    _rewrite(tmp_path, {"offnet_model.py": OFF_MODEL, "offnet_train.py": train}, plan, 2 if refused else 0)
    err = " ".join(capsys.readouterr().err.split())
    if refused:
        assert "plan.yaml:4: actions[1] (compile offnet_model.py::OffNet): compile of OffNet: offnet_train.py::main " \
               "compiles an instance of it whole (torch.compile(OffNet()" in err, err
        assert f"the own_call of actions[0] {refused}" in err and "would never be used" in err, err


def test_a_compiled_forward_inside_a_whole_model_compile_is_never_used(tmp_path, monkeypatch):
    """What the refusal above relies on (torch 2.13, CPU): the outer compile inlines the decorated
    ``forward``; the decorator's own backend gets no graph."""
    import importlib
    import sys

    import torch

    (tmp_path / "inlined_net.py").write_text(
        "import torch\n\nGRAPHS = []\n\n\ndef counting(gm, inputs):\n    GRAPHS.append(gm)\n    return gm.forward\n\n\n"
        "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(4, 4)\n\n"
        "    @torch.compile(backend=counting)\n    def forward(self, x):\n        return torch.relu(self.lin(x))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    torch._dynamo.reset()
    try:
        mod = importlib.import_module("inlined_net")
        torch.compile(mod.Net(), backend="eager")(torch.randn(3, 4))
        assert mod.GRAPHS == []
        mod.Net()(torch.randn(3, 4))  # alone, the decorator compiles
        assert len(mod.GRAPHS) == 1
    finally:
        sys.modules.pop("inlined_net", None)
        torch._dynamo.reset()
