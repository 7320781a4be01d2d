"""A program whose own torch.compile raises (``fullgraph=True`` over a branch on a tensor's value)
is diagnosed, not only explained: the ladder sets that compile aside, the search measures the
program with compilation off as its reference, and the plan changes the program's compile so
that it runs (docs/design.md, "Programs whose own compile raises")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from programs import last_json, run_programs

from rewriter.cli import main
from rewriter.diagnose.candidate import AS_IS
from rewriter.diagnose.decide import COMPILATION_OFF, Choice, when_as_is_raises
from rewriter.diagnose.own_raised import unwrap
from rewriter.errors import StackpartError
from rewriter.plan import load_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"

pytestmark = pytest.mark.skipif(not hasattr(torch.compiler, "set_stance"), reason="torch < 2.6")


def _eager(script: Path, out: Path) -> dict:
    """The user's script with compilation off: the outputs the rewritten program must give."""
    code = ("import runpy, sys, torch\ntorch.compiler.set_stance('force_eager')\n"
            f"sys.argv = [{str(script)!r}, {str(out)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n")
    return {"code": code, "args": [], "cwd": script.parent}


def test_a_per_layer_fullgraph_compile_that_raises_is_diagnosed_and_fixed(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_raises", src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60",
                 "--shape", "batch=2,seq=5", "--shape", "batch=2,seq=7"]) == 0
    [action] = load_plan(plan).plan.actions
    assert action.action == "compile" and action.target == "train.py::apply_compile", action
    assert action.own_call is not None and action.own_call.fullgraph is False, action  # what made it raise goes
    assert "with compilation off" in action.why, action.why
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    notes = " ".join(search["measurement"].get("notes") or [])
    assert "the program as it is raises" in notes and "model.py:12" in notes, notes
    [as_is] = [c for c in search["measurement"]["candidates"] if c["candidate"] == AS_IS]
    assert as_is["baseline"] == "the program with compilation off" and not as_is["rule"], as_is
    md = (plan.parent / "stackpart-diagnose" / "report.md").read_text()
    assert "**as-is** (the baseline: the program with compilation off)" in md
    [breaks] = [r for r in report["rungs"] if r["name"] == "graph_breaks"]
    assert breaks["status"] == "ok" and "model.py:12" in breaks["verdict"], breaks  # measured on the model, compile aside
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    before, eager, after = run_programs([
        {"script": pristine / "train.py", "args": [tmp_path / "before.pt"]},
        _eager(pristine / "train.py", tmp_path / "eager.pt"),
        {"script": src / "train.py", "args": [tmp_path / "after.pt"]},
    ])
    assert before["rc"] != 0 and "data-dependent" in before["stderr"], before  # the program as it was raised
    counts = last_json(after, "train.py after the rewrite")
    assert counts["unique_graphs"] > 0, counts  # its compile is live, and runs
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "eager.pt"))
    last_json(eager, "train.py with compilation off")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _Decorated(torch.nn.Module):
    @torch.compile(backend="eager", fullgraph=True)
    def forward(self, x):
        return x + 1


def test_unwrap_takes_off_every_compile_the_model_object_carries():
    net = _Net()
    net.layers.append(_Decorated())
    net.layers[0].compile(backend="eager")  # module.compile()
    net.layers[1] = torch.compile(net.layers[1], backend="eager")  # a compiled child
    net.layers[2].forward = torch.compile(net.layers[2].forward, backend="eager")  # a compiled forward attribute
    bare, n = unwrap(torch.compile(net, backend="eager"))  # and the root
    assert bare is net and n == 5
    assert all(type(m) is torch.nn.Linear for m in net.layers[:3])
    assert not hasattr(_Decorated.forward, "_torchdynamo_orig_callable")  # the method as written
    assert net.layers[0]._compiled_call_impl is None and "forward" not in vars(net.layers[2])
    assert unwrap(net) == (net, 0)


def _rows(**steps):
    return {n: {"step_ms": t} for n, t in steps.items()}


def test_the_program_with_compilation_off_is_the_baseline_never_the_plan():
    rows = _rows(**{AS_IS: 1.0, "as-is+no-fullgraph": 1.4, "as-is+dynamic": 1.2})
    kept = Choice(AS_IS, "the program with compilation off, the only candidate left", {AS_IS: "chosen"},
                  {AS_IS: 0.0, "as-is+no-fullgraph": -4.0, "as-is+dynamic": -2.0})
    c = when_as_is_raises(kept, rows, [AS_IS, "as-is+no-fullgraph", "as-is+dynamic"])
    assert c.chosen == "as-is+dynamic"  # the largest net of those that run
    assert c.status[AS_IS].startswith("the baseline") and c.status["as-is+dynamic"] == "chosen"
    assert "the program as it is raises" in c.text and "with compilation off" in c.text
    assert "the program as it is, the only" not in c.text


def test_no_candidate_that_runs_is_an_error_not_change_nothing():
    rows = {AS_IS: {"step_ms": 1.0}, "as-is+no-fullgraph": {"problems": ["raised: UserError"]}}
    kept = Choice(AS_IS, "the program as it is", {AS_IS: "chosen", "as-is+no-fullgraph": "failed: raised: UserError"}, {})
    raised = {"message": "raised UserError: data-dependent", "path": "model.py", "line": 11, "hint": "fullgraph=False on that compile"}
    with pytest.raises(StackpartError, match="no edit of it that stackpart proposed ran") as info:
        when_as_is_raises(kept, rows, [AS_IS, "as-is+no-fullgraph"], raised)
    err = info.value
    assert (err.path, err.line) == ("model.py", 11)  # the line that raised, where the user changes it
    assert "what to change in that compile: fullgraph=False" in err.message


def test_a_recompile_count_with_compilation_off_is_no_yardstick():
    """Without a measured gain, candidates that recompile more than as-is go last; where as-is ran with
    compilation off (0 recompiles by construction) that would push every one down, and the status
    said 'against 0 as it is'. Among the candidates that run, the fewest recompiles + graph breaks
    come first, as in every search without a measured gain, then the ladder's order."""
    from rewriter.diagnose.decide import decide

    rows = {AS_IS: {"step_ms": 1.0, "compile": {"recompiles": 0}},
            "as-is+no-fullgraph": {"step_ms": 1.2, "compile": {"recompiles": 3}},
            "as-is+dynamic": {"step_ms": 1.3, "compile": {"recompiles": 0}}}
    order = [AS_IS, "as-is+no-fullgraph", "as-is+dynamic"]
    c = decide(rows, order, [], 1000, 1, False, baseline=COMPILATION_OFF)
    c = when_as_is_raises(c, rows, order)
    assert c.chosen == "as-is+dynamic", c  # 0 recompiles against 3: the fewest first
    assert c.status["as-is+no-fullgraph"].startswith("not chosen: 3 + 0 = 3 recompile(s) + graph break(s)"), c.status
    assert not any("as it is" in said for n, said in c.status.items() if n != AS_IS), c.status
    rows["as-is+dynamic"]["compile"]["recompiles"] = 3  # equal counts: the ladder's order
    c = when_as_is_raises(decide(rows, order, [], 1000, 1, False, baseline=COMPILATION_OFF), rows, order)
    assert c.chosen == "as-is+no-fullgraph", c



def test_a_candidate_validate_refuses_is_passed_over_for_one_it_takes():
    """The plan for a program that raises is one ``rewrite --apply`` takes on a GPU: validate gates
    the plan against the program with compilation off, so a candidate slower than that (beyond the
    noise) is passed over for one within it, even where the refused one compiles for less."""
    from rewriter.diagnose.decide import GATED, decide

    rows = {AS_IS: {"step_ms": 1.0}, "as-is+no-fullgraph": {"step_ms": 1.5, "compile_s_per_start": 0.5},
            "as-is+regional": {"step_ms": 1.01, "compile_s_per_start": 2.0}}
    order = [AS_IS, "as-is+no-fullgraph", "as-is+regional"]
    c = when_as_is_raises(decide(rows, order, [], 10, 1, True, baseline=COMPILATION_OFF), rows, order)
    assert c.chosen == "as-is+regional", c
    said = c.status["as-is+no-fullgraph"]
    assert said.startswith(GATED + "slower than the program with compilation off: 1.500 ms vs 1.000 ms"), said
    assert "validate's speed gate refuses" not in c.text, c.text


def test_where_every_edit_that_runs_is_refused_the_plan_says_so_and_what_to_do():
    """Every edit that runs is slower than compilation off: the program must change to run, so the
    fastest edit is still the plan, and its sentence says that validate's gate refuses it, how to take
    it anyway, and where the compile to take off is."""
    from rewriter.diagnose.decide import decide

    rows = {AS_IS: {"step_ms": 1.0}, "as-is+no-fullgraph": {"step_ms": 1.5}, "as-is+regional": {"step_ms": 1.3}}
    order = [AS_IS, "as-is+no-fullgraph", "as-is+regional"]
    raised = {"message": "Unsupported: data-dependent branch", "path": "model.py", "line": 11, "hint": None}
    c = when_as_is_raises(decide(rows, order, [], 1000, 1, True, baseline=COMPILATION_OFF), rows, order, raised)
    assert c.chosen == "as-is+regional", c  # the faster of the two that run
    assert "every edit that runs is slower than the program with compilation off (slower than the program with " \
           "compilation off: 1.300 ms vs 1.000 ms per step)" in c.text, c.text
    assert "`stackpart validate --speed-gate off`" in c.text and "take that compile off at model.py:11" in c.text, c.text
    assert "as it is" not in c.text.split("raises", 1)[1], c.text  # the baseline named as what it is


def test_the_gate_is_not_applied_where_the_gain_is_not_measured():
    """With a backend that cannot speed anything up (eager on CPU) validate does not gate speed
    either: the ladder's order decides among the edits that run."""
    from rewriter.diagnose.decide import decide

    rows = {AS_IS: {"step_ms": 1.0}, "as-is+no-fullgraph": {"step_ms": 1.5}, "as-is+regional": {"step_ms": 1.3}}
    order = [AS_IS, "as-is+no-fullgraph", "as-is+regional"]
    c = when_as_is_raises(decide(rows, order, [], 1000, 1, False, baseline=COMPILATION_OFF), rows, order)
    assert c.chosen == "as-is+no-fullgraph" and "speed gate" not in c.text, c


BACKEND_RAISES = """\
import torch


def my_backend(gm, example_inputs):
    raise RuntimeError("my backend does not support this graph")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)


def build_model():
    return torch.compile(Net(), backend=my_backend)


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
"""


def test_a_backend_that_raises_is_not_set_aside(tmp_path, capsys):
    """On a CPU the search runs every compile on the eager backend, where the program's own backend
    never runs: a plan 'validated' there kept the compile that raises. Such a failure stops diagnose
    with the explained error (exit 2), and nothing is planned."""
    (tmp_path / "harness.py").write_text(BACKEND_RAISES)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "-o", str(plan), "--device", "cpu",
                 "--budget", "30"]) == 2
    assert not plan.exists()
    assert "BackendCompilerFailed" in capsys.readouterr().err


def test_a_model_that_raises_with_compilation_off_too_says_so(tmp_path):
    """The compile raised first, but the model is broken on its own (a wrong width): the user who
    turns fullgraph off meets that bug next, so the error says it, at its line."""
    from rewriter.diagnose.session import HarnessFailure, Session
    from rewriter.harness import load_harness
    from rewriter.plan import Harness

    (tmp_path / "harness.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 8)\n        self.proj = torch.nn.Linear(4, 8)\n\n"
        "    def forward(self, x):\n        x = self.fc(x)\n        if x.abs().max().item() > 1e4:\n            x = x / 2\n"
        "        return self.proj(x)\n\n\ndef build_model():\n    return torch.compile(Net(), backend='eager', fullgraph=True)\n\n\n"
        "def make_inputs(batch: int = 2):\n    return (torch.randn(batch, 8),)\n")
    spec = Harness.model_validate({"file": "harness.py", "model": "build_model", "shapes": [{"batch": 2}], "device": "cpu"})
    s = Session(load_harness(spec, tmp_path))
    model, inputs = s.build()
    with pytest.raises(HarnessFailure) as info:
        s.run_as_the_program_runs(s.step_fn(model, inputs))
    msg = info.value.message
    assert "with compilation off (torch.compiler.set_stance('force_eager')) the model raises too" in msg, msg
    assert "harness.py:14" in msg, msg  # self.proj(x): the model's own bug
    torch._dynamo.reset()


def test_a_headline_longer_than_its_limit_is_cut_with_how_much():
    from rewriter.tracebacks import HEADLINE_LIMIT, headline

    said = headline(RuntimeError("Unexpected optimization option x, known options are " + "['a', " * 4000))
    assert len(said) < HEADLINE_LIMIT + 80 and said.endswith("more characters)"), said[-80:]


def test_gradients_are_named_as_the_users_model_names_them():
    """A reference with compilation off keeps the program's wrapper (``_orig_mod.``); a regional
    variant has none. Their gradients are the same parameters, and were judged 'output structure differs'."""
    from rewriter.engine.steps import after_step

    torch.manual_seed(0)
    net = _Net()
    wrapped = torch.compile(net, backend="eager")
    x = torch.randn(2, 4)
    with torch.compiler.set_stance("force_eager"):
        wrapped(x).sum().backward()
        grads = after_step(wrapped, (x,), {k: v.clone() for k, v in wrapped.state_dict().items()}, 0, None)["grads"]
    assert sorted(grads) == sorted(n for n, _ in net.named_parameters()), sorted(grads)


def test_a_fullgraph_compile_in_a_script_the_harness_does_not_run_gets_fullgraph_off(tmp_path):
    """The search measures such a compile through its stand-in 'whole', stackpart's own compile,
    which breaks the graph where the program's fullgraph=True raises. It said 'kept as it is', and
    the user's script went on raising; the plan now sets fullgraph=False on that call."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_script_raises", src, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60",
                 "--shape", "batch=4", "--shape", "batch=8"]) == 0
    edits = [a for a in load_plan(plan).plan.actions if a.action == "compile" and a.own_call is not None]
    assert [a.target for a in edits] == ["train.py::main"], load_plan(plan).plan.actions
    assert edits[0].own_call.fullgraph is False and "graph_breaks rung found" in edits[0].why, edits[0]


def test_such_a_compile_over_a_model_with_no_repeated_block_is_measured_through_whole_and_gets_fullgraph_off(tmp_path):
    """The same script over a model with no repeated block: its call cannot be turned regional, so
    'whole' alone stands in for it (every other compile would compile its code a second time). The
    plan sets fullgraph=False on that call where the graph_breaks rung found the break, the
    rewrite writes it, and the script runs."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_script_raises_one_unit", src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60",
                 "--shape", "batch=4"]) == 0
    actions = load_plan(plan).plan.actions
    [edit] = [a for a in actions if a.action == "compile"]
    assert edit.target == "train.py::main" and edit.own_call.model_dump(exclude_none=True) == {"fullgraph": False}, actions
    assert "through its stand-in 'whole'" in edit.why and "graph_breaks rung found 1 graph break(s)" in edit.why, edit.why
    assert "with compilation off (as it is, the program raises)" in edit.why, edit.why  # as-is is no plan here
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    assert rows["whole"].get("step_ms") is not None, rows
    pruned = " ".join(search["measurement"]["pruned"])
    assert "cannot be turned regional: no repeated block in the model" in pruned, pruned
    assert "would compile it a second time" not in pruned, pruned
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    assert 'model = torch.compile(model, backend="eager")' in (src / "train.py").read_text()
    before, after = run_programs([{"script": pristine / "train.py"}, {"script": src / "train.py"}])
    assert before["rc"] != 0 and "item" in before["stderr"], before
    assert after["rc"] == 0 and len(after["stdout"].split()) == 2, after


def test_where_the_stand_ins_call_raises_as_is_is_the_baseline_never_the_plan():
    """The harness's model without the program's compile (the stand-in search's ``as-is``) is the
    program with compilation off where that call's fullgraph=True raises at the breaks the ladder
    found: the fastest row as it may be, the plan is the stand-in that runs (written as the
    call's fullgraph=False), and the sentences say what the baseline is."""
    from types import SimpleNamespace

    from rewriter.diagnose.decide import decide
    from rewriter.diagnose.own_candidates import standin_raises
    from rewriter.diagnose.rung import Finding

    brk = Finding("graph_break", "Unsupported Tensor.item() call", "model.py", 13, "Net.forward")
    ctx = SimpleNamespace(measured=lambda rung: {"graph_break_count": 1},
                          results={"graph_breaks": SimpleNamespace(findings=[brk])})
    own = SimpleNamespace(current={"fullgraph": True}, can=lambda key: None, where="run.py:9",
                          text="run.py:9: torch.compile(model, fullgraph=True)")
    raised = standin_raises(ctx, own)
    assert raised is not None and (raised["path"], raised["line"]) == ("model.py", 13), raised
    rows = _rows(**{AS_IS: 0.05, "whole": 0.15})
    order = [AS_IS, "whole"]
    c = when_as_is_raises(decide(rows, order, [], 1000, 1, True, baseline=COMPILATION_OFF), rows, order, raised)
    assert c.chosen == "whole" and c.status[AS_IS].startswith("the baseline"), c
    # the same call without fullgraph=True runs as it is: as-is stays a plan
    assert standin_raises(ctx, SimpleNamespace(current={}, can=lambda key: None, where="run.py:9", text="x")) is None


def test_a_stand_in_that_cannot_be_regional_strikes_every_compile_but_the_whole_model_one():
    """Where the program's whole-model compile is measured through 'whole' alone, a per-block or
    nested compile beside it would compile its code a second time: no edit of that call writes it."""
    from types import SimpleNamespace

    from rewriter.diagnose.candidates import OwnScope, conflict
    from rewriter.plan import CompileAction

    own = SimpleNamespace(text="train.py:12: torch.compile(model, fullgraph=True)")
    scope = OwnScope(whole_only=(own, "no repeated block in the model"))
    whole = CompileAction(action="compile", target="model.py::Net", strategy="whole")
    block = CompileAction(action="compile", target="model.py::Block")
    assert conflict(whole, scope) is None
    said = conflict(block, scope)
    assert said and "cannot be turned regional (no repeated block in the model)" in said and "second time" in said, said


def test_a_baseline_that_was_not_timed_still_gives_the_candidate_that_runs():
    """Where the program with compilation off has no step time (its timing failed), decide keeps
    as-is (nothing to compare with, gain measured); the candidate that runs is still the plan, and
    its sentence says the baseline was not timed rather than failing on the missing figure."""
    from rewriter.diagnose.decide import decide

    rows = {AS_IS: {"error": "timing: the reference timed out"}, "as-is+no-fullgraph": {"step_ms": 1.2}}
    order = [AS_IS, "as-is+no-fullgraph"]
    c = when_as_is_raises(decide(rows, order, [], 1000, 1, True, baseline=COMPILATION_OFF), rows, order)
    assert c.chosen == "as-is+no-fullgraph", c
    assert "1.200 ms/step (the program with compilation off was not timed)" in c.text, c.text


def test_setup_runs_the_step_with_compilation_off_once_per_failure(tmp_path):
    """Setup's step at a later harness shape raised in the program's fullgraph=True compile: the
    check that the same step runs with compilation off (``set_stance("force_eager")``) is one run
    of the model, read both where the error is explained and where the compile is set aside."""
    from types import SimpleNamespace

    from torch._dynamo import eval_frame

    from rewriter.diagnose.context import Context
    from rewriter.diagnose.runner import _Run, _setup
    from rewriter.diagnose.session import Session
    from rewriter.harness import load_harness
    from rewriter.plan import Harness

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_raises", src, ignore=shutil.ignore_patterns("__pycache__"))
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"batch": 2, "seq": 5}, {"batch": 2, "seq": 7}],
                                   "device": "cpu"})
    session = Session(load_harness(spec, src))
    run = _Run(spec, None, src, tmp_path / "plan.yaml", tmp_path, session, SimpleNamespace(event=lambda text: None))
    run.ctx = Context(session=session, out_dir=tmp_path)
    model, _, _ = run.ctx.reference()
    stances: list[str] = []
    model.register_forward_pre_hook(lambda module, args: stances.append(eval_frame._stance.stance))
    _setup(run)
    assert run.fatal is None and run.ctx.evidence.own_raised is not None, run.fatal
    assert stances.count("force_eager") == 1, stances
    torch._dynamo.reset()


FREE_FUNCTION = '''import torch


@torch.compile(fullgraph=True, backend="eager")
def scaled(x, scale):
    s = scale.item()
    if s > 1.0:
        x = x / s
    return x * s


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return scaled(self.fc(x), self.scale)


def build_model():
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
'''


def test_a_compiled_free_function_that_raises_stops_with_why_and_what_to_change(tmp_path, capsys):
    """A ``fullgraph=True`` compile the model does not carry (a free function its forward calls)
    cannot be set aside: diagnose exits 2, and the error says that the program's own compile raised
    it (the model runs with compilation off) and what to change, at the branch's line."""
    (tmp_path / "harness.py").write_text(FREE_FUNCTION)
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(tmp_path), "-o", str(plan), "--device", "cpu",
                 "--budget", "30"]) == 2
    err = capsys.readouterr().err
    assert "error: harness.py:7:" in err, err
    assert "the program's own torch.compile raised it" in err and "fullgraph=False on that compile" in err, err


def test_a_fullgraph_compile_of_a_free_train_step_is_read_as_the_whole_model_and_gets_fullgraph_off(tmp_path):
    """``@torch.compile(fullgraph=True)`` on ``train_step(model, x, y, opt)`` in a script the
    harness does not run: the function is passed the model (``model = Net()`` in ``main``), so its
    compile traces the whole model and raises at the model's branch on a tensor's value. The
    search measures it through its stand-in 'whole' (no per-block compile under it: a second
    compile of what it traces), the plan sets fullgraph=False on that decorator, and the script,
    which raised, runs with the outputs it gives with compilation off."""
    from rewriter.diagnose.own_compile import own_compiles

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "own_fullgraph_train_step", src, ignore=shutil.ignore_patterns("__pycache__"))
    pristine = tmp_path / "pristine"
    shutil.copytree(src, pristine)
    [own] = own_compiles(src)
    assert own.covers == ("function", "train.py::train_step") and own.calls == ("Net",), own
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", "harness.py", str(src), "-o", str(plan), "--device", "cpu", "--budget", "60",
                 "--shape", "batch=4"]) == 0
    actions = load_plan(plan).plan.actions
    [edit] = [a for a in actions if a.action == "compile"]
    assert edit.target == "train.py::train_step" and edit.own_call.model_dump(exclude_none=True) == {"fullgraph": False}, actions
    assert "with compilation off (as it is, the program raises)" in edit.why, edit.why
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    pruned = " ".join(search["measurement"]["pruned"])
    assert "per-block" in pruned and "would compile that code a second time" in pruned, pruned
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    assert '@torch.compile(backend="eager")' in (src / "train.py").read_text()
    before, after, eager = run_programs([{"script": pristine / "train.py"}, {"script": src / "train.py"},
                                         _eager(pristine / "train.py", tmp_path / "unused")])
    assert before["rc"] != 0 and "item" in before["stderr"], before
    assert after["rc"] == 0 and eager["rc"] == 0, (after, eager)
    assert float(after["stdout"].split()[-1]) == pytest.approx(float(eager["stdout"].split()[-1]), rel=1e-5)
