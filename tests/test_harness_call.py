"""``harness.call``: the model's method each step calls (``model.inverse(z)``), checked on the built
model, honoured by every step, and diagnosed: a program whose own ``torch.compile(model)`` compiles
``forward`` only runs that method eager, and the search proposes compiling the method itself
(docs/guide.md, "The harness"; docs/design.md, "The search")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.errors import StackpartError
from rewriter.plan import load_plan, parse_plan
from tiny_programs import net_harness

ROOT = Path(__file__).resolve().parents[1]
FLOW = ROOT / "fixtures" / "diagnose" / "own_compile_other_method"


def _spec(call: str | None, **extra: object):
    fields = {"file": "harness.py", **({"call": call} if call is not None else {}), **extra}
    return parse_plan(json.dumps({"version": 1, "harness": fields, "actions": []})).plan.harness


def test_call_must_be_an_identifier_and_is_named_at_its_plan_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nharness:\n  file: harness.py\n  call: model.inverse\nactions: []\n")
    with pytest.raises(StackpartError) as err:
        load_plan(plan)
    assert err.value.line == 4 and "harness.call" in str(err.value) and "identifier" in str(err.value), str(err.value)
    assert _spec(None).call is None and _spec("inverse").call == "inverse"


def _flow_harness(tmp_path: Path, call: str | None, monkeypatch):
    from rewriter.harness import load_harness

    src = tmp_path / "src"
    shutil.copytree(FLOW, src, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return load_harness(_spec(call, device="cpu"), src)


def test_a_call_the_built_model_lacks_is_refused_naming_the_field_the_class_and_the_near_name(tmp_path, monkeypatch):
    from rewriter.harness import build_model

    h = _flow_harness(tmp_path, "invers", monkeypatch)
    with pytest.raises(StackpartError) as err:
        build_model(h)
    e = err.value
    assert e.path == "harness.py", e.path
    assert e.message.startswith("harness.call: build_model() built a Flow, which has no method 'invers'"), e.message
    assert "did you mean 'inverse'?" in e.message, e.message
    # an attribute that is no method is refused too, with what it is
    h = _flow_harness(tmp_path / "b", "training", monkeypatch)
    with pytest.raises(StackpartError) as err:
        build_model(h)
    assert "no method 'training' (its training is a bool)" in err.value.message, err.value.message


def test_every_step_calls_the_method_and_a_torch_compile_wrapper_runs_it_eager(tmp_path, monkeypatch):
    """Through the program's ``torch.compile(Flow())`` the method is the wrapped module's and
    compiles no frame; :func:`compile_entry` compiles it (the diagnose rungs' own compile) without
    touching the model, and the engine's step calls it."""
    import torch
    from torch._dynamo.utils import counters

    from rewriter.engine.steps import step_fn
    from rewriter.harness import build, call_model, compile_entry

    h = _flow_harness(tmp_path, "inverse", monkeypatch)
    model, inputs = build(h)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        out = call_model(model, inputs, "inverse")
    inner = model._orig_mod
    torch.testing.assert_close(out, inner.inverse(*inputs))
    assert out.shape == inputs[0].shape and counters["stats"]["unique_graphs"] == 0
    torch.testing.assert_close(step_fn(model, inputs, False, "inverse")(), out)
    compiled = compile_entry(inner, "inverse", backend="eager")
    torch.testing.assert_close(call_model(compiled, inputs, "inverse"), out)
    assert counters["stats"]["unique_graphs"] >= 1
    assert "inverse" not in vars(inner)  # the model the ladder keeps is left as built
    torch._dynamo.reset()


def _kind_ctx(src: Path, model, compiles_itself: bool, call: str | None = "inverse"):
    from rewriter.diagnose.candidate import AS_IS, Candidate

    spec = _spec(call)
    ctx = SimpleNamespace(session=SimpleNamespace(spec=spec, src=src), evidence=SimpleNamespace(compiles_itself=compiles_itself),
                          reference=lambda: (model, None, None))
    base = parse_plan("version: 1\nactions: []\n").plan.model_copy(update={"harness": spec})
    return ctx, [Candidate(AS_IS, base), Candidate("per-block", base)]


def test_the_kind_compiles_the_called_method_right_after_as_is_where_the_step_compiled_nothing(tmp_path, monkeypatch):
    import torch

    from rewriter.diagnose.kinds.called_method import with_called_method

    h = _flow_harness(tmp_path, "inverse", monkeypatch)
    from rewriter.harness import build_model

    model, _ = build_model(h)
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)  # the program's own compile
    ctx, cands = _kind_ctx(h.src, model, compiles_itself=False)
    out, pruned = with_called_method(ctx, cands)
    assert [c.name for c in out] == ["as-is", "compile-inverse", "per-block"] and pruned == []
    [action] = out[1].plan.actions
    assert (action.action, action.target, action.strategy, action.own_call) == ("compile", "model.py::Flow.inverse", "region", None)
    assert "compiled no graph" in action.why and "OptimizedModule.__getattr__" in action.why, action.why
    assert out[1].plan.harness.call == "inverse"
    # module.compile() in place: the same, said of that call
    ctx, cands = _kind_ctx(h.src, model._orig_mod, compiles_itself=False)
    model._orig_mod.compile(backend="eager")
    out, _ = with_called_method(ctx, cands)
    assert "the program's model.compile() compiles Flow.__call__ (forward) only" in out[1].plan.actions[0].why
    # a step that compiles by itself: the program's compile is what the as-is+ edits change
    ctx, cands = _kind_ctx(h.src, model, compiles_itself=True)
    out, [why] = with_called_method(ctx, cands)
    assert [c.name for c in out] == ["as-is", "per-block"] and why.startswith("compile-inverse: one step of model.inverse"), why
    # no harness.call: nothing to add, nothing said
    ctx, cands = _kind_ctx(h.src, model, compiles_itself=False, call=None)
    assert with_called_method(ctx, cands) == (cands, [])
    # a method outside SRC (torch's own nn.Module.state_dict) is said, not proposed
    ctx, cands = _kind_ctx(h.src, model, compiles_itself=False, call="state_dict")
    out, [why] = with_called_method(ctx, cands)
    assert len(out) == 2 and "torch's own" in why, why


def test_a_method_call_under_a_data_parallel_wrapper_is_refused_before_launch(tmp_path):
    from rewriter.distributed.launch import run_distributed

    (tmp_path / "harness.py").write_text("def build_model():\n    pass\n\n\ndef make_inputs():\n    pass\n")
    with pytest.raises(StackpartError) as err:
        run_distributed(_spec("inverse", device="cpu"), tmp_path, 2, tmp_path / "out", wrap="ddp")
    assert err.value.message.startswith("harness.call: 'inverse' with wrapper ddp"), err.value.message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_diagnose_compiles_the_sampling_method_and_the_rewritten_script_samples_compiled(tmp_path, monkeypatch):
    """End to end on CPU (eager backend): the flow script compiles ``Flow()`` whole and samples
    through ``model.inverse``; diagnose measures as-is compiling nothing, chooses ``compile-inverse``
    (graphs compiled), the plan records ``call: inverse``, ``rewrite --apply`` takes it through the
    validation gate, and the user's script samples the same values with the sampling compiled."""
    import torch

    from programs import before_after
    from rewriter.cli import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src, pristine = tmp_path / "src", tmp_path / "pristine"
    for d in (src, pristine):
        shutil.copytree(FLOW, d, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "out" / "plan.yaml"
    assert main(["diagnose", "--harness", str(src / "harness.yaml"), str(src), "-o", str(plan), "--budget", "30"]) == 0
    loaded = load_plan(plan).plan
    assert loaded.harness.call == "inverse"
    [action] = loaded.actions
    assert (action.action, action.target) == ("compile", "model.py::Flow.inverse"), action
    report = json.loads((plan.parent / "stackpart-diagnose" / "report.json").read_text())
    [search] = [r for r in report["rungs"] if r["name"] == "search"]
    rows = {c["candidate"]: c for c in search["measurement"]["candidates"]}
    assert search["measurement"]["chosen"] == "compile-inverse", search["measurement"]["chosen"]
    assert rows["as-is"]["graphs"] == 0 and rows["compile-inverse"]["graphs"] >= 1, (rows["as-is"], rows["compile-inverse"])
    assert rows["compile-inverse"]["numerics"] == "ok"
    # the program's call made regional or dynamic compiles forward, which model.inverse never reaches: not measured
    assert set(rows) == {"as-is", "compile-inverse", "compile-Coupling.inverse"}, sorted(rows)
    assert rows["compile-Coupling.inverse"]["graphs"] >= 1, rows["compile-Coupling.inverse"]
    assert any(p.startswith("as-is+regional, as-is+dynamic: one step of model.inverse") for p in search["measurement"]["pruned"])
    # the per-block line agrees: the edit it points at was pruned, not measured
    [per_block] = [p for p in search["measurement"]["pruned"] if "compiles the whole model itself" in p]
    assert "its edit as-is+regional is pruned too" in per_block and "measured as as-is+regional" not in per_block, per_block
    assert report["harness"]["call"] == "inverse"
    assert "each step calls `model.inverse`" in (plan.parent / "stackpart-diagnose" / "report.md").read_text()
    # the ladder's probe of the block's forward measured nothing, and says so rather than "one graph serves"
    [inst] = [r for r in report["rungs"] if r["name"] == "instance_recompiles"]
    assert "never called Coupling.forward" in inst["verdict"], inst["verdict"]
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply"]) == 0
    before, after = before_after(pristine, src, "sample.py", tmp_path, force_backend="eager")
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"))
    assert before["sampling_graphs"] == 0 and after["sampling_graphs"] >= 1, (before, after)


def test_validates_whole_baseline_compiles_the_called_method(tmp_path, monkeypatch):
    """validate's ``whole`` baseline (``model.compile()``) compiles ``forward`` only; with
    ``harness.call`` the method the step calls is compiled too, so the baseline is a compile of
    what runs and not the eager model under another name."""
    import torch
    from torch._dynamo.utils import counters

    from rewriter.engine.variants import prepare
    from rewriter.harness import build, call_model

    h = _flow_harness(tmp_path, "inverse", monkeypatch)
    model, inputs = build(h)
    model = model._orig_mod  # the model alone, as a tree without the program's own compile builds it
    with torch.no_grad():
        expected = model.inverse(*inputs)
    torch._dynamo.reset()
    counters.clear()
    said = prepare("whole", model, "eager", "inverse")
    assert said["compiled"].endswith("model.inverse = torch.compile(model.inverse)"), said
    with torch.no_grad():
        torch.testing.assert_close(call_model(model, inputs, "inverse"), expected)
    assert counters["stats"]["unique_graphs"] >= 1
    torch._dynamo.reset()


ODD_MODEL = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)

    def decode(self, x):
        return torch.relu(self.lin(x))

    @property
    def sampler(self):
        return self.decode

    def stream(self, x):
        yield self.lin(x)

    async def later(self, x):
        return self.lin(x)
'''


def _odd_harness(tmp_path: Path, call: str, monkeypatch, model: str = ODD_MODEL):
    from rewriter.harness import load_harness

    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "model.py").write_text(model)
    (src / "harness.py").write_text(net_harness(batch=4))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return load_harness(_spec(call, device="cpu"), src)


@pytest.mark.parametrize(("call", "what"), [("stream", "a generator function"), ("later", "a coroutine function")])
def test_a_call_whose_method_runs_nothing_when_called_is_refused(tmp_path, monkeypatch, call, what):
    """A generator or ``async def`` method returns a generator or coroutine without running its
    body: a step calling it would measure no work, so the harness is refused at ``harness.call``."""
    from rewriter.errors import ConfigError
    from rewriter.harness import build_model

    h = _odd_harness(tmp_path, call, monkeypatch)
    with pytest.raises(ConfigError) as err:
        build_model(h)
    e = err.value
    assert e.path == "harness.py" and e.field == "call", (e.path, e.field)
    assert f"harness.call: Net.{call} is {what}" in e.message, e.message
    assert "runs none of its body" in e.message, e.message


def test_a_call_whose_property_raises_is_refused_at_harness_call_naming_the_exception(tmp_path, monkeypatch):
    """A property that raises when read (here a RuntimeError, not the AttributeError ``getattr``'s
    default absorbs) is the harness's error at ``harness.call``, with the exception's type and
    message, never a traceback out of the check."""
    from rewriter.errors import ConfigError
    from rewriter.harness import build_model

    broken = ODD_MODEL + "\n    @property\n    def sample(self):\n        raise RuntimeError('no sampler configured')\n"
    h = _odd_harness(tmp_path, "sample", monkeypatch, broken)
    with pytest.raises(ConfigError) as err:
        build_model(h)
    e = err.value
    assert (e.path, e.field) == ("harness.py", "call"), (e.path, e.field)
    # the property's own file:line (its decorator's, as inspect.getsourcelines gives it), relative to SRC
    assert e.message.startswith("harness.call: reading Net.sample (model.py:26), a property of the model, raised "
                                "RuntimeError: no sampler configured"), e.message


def test_a_call_whose_attribute_raises_through_getattr_names_the_models_class(tmp_path, monkeypatch):
    """An attribute that is no property (the class's ``__getattr__`` raised) is named by the
    model's class and its ``file:line``."""
    from rewriter.errors import ConfigError
    from rewriter.harness import build_model

    broken = ODD_MODEL + ("\n    def __getattr__(self, name):\n        if name == 'sample':\n"
                          "            raise RuntimeError('no sampler configured')\n        return super().__getattr__(name)\n")
    h = _odd_harness(tmp_path, "sample", monkeypatch, broken)
    with pytest.raises(ConfigError) as err:
        build_model(h)
    assert err.value.message.startswith("harness.call: reading Net.sample (class Net, model.py:5), an attribute of the "
                                        "model, raised RuntimeError: no sampler configured"), err.value.message


def test_a_raising_attribute_of_a_class_defined_in_the_harness_file_names_its_line(tmp_path, monkeypatch):
    """The harness is imported under a private module name that is not in ``sys.modules``, where
    :func:`inspect.getsourcelines` cannot place a class: the class's ``file:line`` is still given,
    the line of its first decorator as for a class anywhere else."""
    from rewriter.errors import ConfigError
    from rewriter.harness import build_model, load_harness

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(
        "import functools\nimport torch\nimport torch.nn as nn\n\n\n"
        "@functools.total_ordering\n"  # line 6: a decorated class starts at its decorator
        "class Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n        return self.lin(x)\n\n"
        "    def __lt__(self, other):\n        return False\n\n"
        "    def __getattr__(self, name):\n        if name == 'sample':\n"
        "            raise RuntimeError('no sampler configured')\n        return super().__getattr__(name)\n\n\n"
        "def build_model():\n    return Net()\n\n\n"
        "def make_inputs(batch: int = 4):\n    return (torch.randn(batch, 8),)\n")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    h = load_harness(_spec("sample", device="cpu"), src)
    with pytest.raises(ConfigError) as err:
        build_model(h)
    assert err.value.message.startswith("harness.call: reading Net.sample (class Net, harness.py:6), an attribute of the "
                                        "model, raised RuntimeError: no sampler configured"), err.value.message


def test_a_call_that_is_a_property_is_said_to_be_one_naming_the_method_it_returns(tmp_path, monkeypatch):
    """A property returning a bound method is called by each step (``model.sampler(x)``), but no
    compile action names a property: the kind says so and names the method it returned."""
    from rewriter.diagnose.kinds.called_method import with_called_method
    from rewriter.harness import build_model

    h = _odd_harness(tmp_path, "sampler", monkeypatch)
    model, _ = build_model(h)
    ctx, cands = _kind_ctx(h.src, model, compiles_itself=False, call="sampler")
    out, [why] = with_called_method(ctx, cands)
    assert [c.name for c in out] == ["as-is", "per-block"]
    assert "Net.sampler is a property" in why and "harness.call: decode" in why, why
    assert "torch's own" not in why, why


def _flow_variant(tmp_path: Path, old: str, new: str, monkeypatch):
    """The flow fixture with ``old`` replaced by ``new`` in model.py, built: (model, one Coupling, src)."""
    from rewriter.harness import build_model

    h = _flow_harness(tmp_path, "inverse", monkeypatch)
    path = h.src / "model.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    model, _ = build_model(h)
    return model, model._orig_mod.layers[0], h.src


def test_the_static_reading_says_whether_the_called_method_reaches_a_forward(tmp_path, monkeypatch):
    from rewriter.diagnose.method_reach import reach

    model, block, src = _flow_variant(tmp_path, "", "", monkeypatch)
    read = reach(model._orig_mod, "inverse", src, block)
    assert (read.model_forward, read.block_forward, read.unsure) == (None, None, None), read
    assert read.read == ["model.py::Flow.inverse", "model.py::Coupling.inverse", "model.py::Coupling._scale_shift"]
    assert reach(model._orig_mod, "forward", src, block).model_forward == "Flow.forward"
    # a block called by a local name may be its forward: unsure, never "reaches none"
    model, block, src = _flow_variant(tmp_path / "a", "z = layer.inverse(z.flip(-1))", "z = layer(z.flip(-1))[0]", monkeypatch)
    read = reach(model._orig_mod, "inverse", src, block)
    assert read.unsure is not None and "layer(...)" in read.unsure, read
    # the model's forward through self.forward, the block's through a block method calling self(...)
    model, block, src = _flow_variant(tmp_path / "b", "        return z\n", "        return self.forward(z)[0]\n", monkeypatch)
    assert reach(model._orig_mod, "inverse", src, block).model_forward == "model.py::Flow.inverse:46"
    model, block, src = _flow_variant(tmp_path / "c", "        a, b = y.chunk(2, -1)\n", "        a, b = self(y)[0].chunk(2, -1)\n",
                                      monkeypatch)
    read = reach(model._orig_mod, "inverse", src, block)
    assert read.model_forward is None and read.block_forward == "model.py::Coupling.inverse:25", read


def _own_edit(name: str, spec, **own_call):
    from rewriter.diagnose.candidate import Candidate
    from rewriter.plan import CompileAction

    strategy = "region" if "regional" in own_call else "whole"
    action = CompileAction(action="compile", target="sample.py::build", strategy=strategy, own_call=own_call, why="w")
    return Candidate(name, parse_plan("version: 1\nactions: []\n").plan.model_copy(update={"harness": spec, "actions": [action]}))


def _nested_edit(spec):
    """``as-is+nested`` as the search proposes it: the program's call kept on plus a nested region
    of the block's helper inside it."""
    from rewriter.diagnose.candidate import Candidate
    from rewriter.plan import CompileAction

    keep_on = CompileAction(action="compile", target="sample.py::build", strategy="whole", own_call={"disable": False}, why="w")
    region = CompileAction(action="compile", target="model.py::Coupling._scale_shift", strategy="nested", why="w")
    return Candidate("as-is+nested", parse_plan("version: 1\nactions: []\n").plan.model_copy(
        update={"harness": spec, "actions": [keep_on, region]}))


def test_edits_of_the_programs_compile_are_pruned_where_the_called_method_reaches_no_forward(tmp_path, monkeypatch):
    """``Flow.inverse`` calls ``Coupling.inverse``, never a ``forward``: the program's call made
    regional or dynamic, or given nested regions, would compile nothing the step runs, so the
    search does not measure them; where the reading is unsure (a block called by a local name)
    they are kept."""
    from rewriter.diagnose.kinds.called_method import with_called_method

    for sub, old, new, pruned in (("a", "", "", True), ("b", "z = layer.inverse(z.flip(-1))", "z = layer(z.flip(-1))[0]", False)):
        model, block, src = _flow_variant(tmp_path / sub, old, new, monkeypatch)
        ctx, cands = _kind_ctx(src, model, compiles_itself=False)
        ctx.evidence.blocks = [{"cls": type(block), "modules": list(model._orig_mod.layers)}]
        spec = cands[0].plan.harness
        cands += [_own_edit("as-is+regional", spec, regional="layers"), _own_edit("as-is+dynamic", spec, dynamic=True),
                  _nested_edit(spec)]
        out, lines = with_called_method(ctx, cands)
        names = [c.name for c in out]
        if pruned:
            assert names == ["as-is", "compile-inverse", "compile-Coupling.inverse", "per-block"], names
            [line] = lines
            assert line.startswith("as-is+regional, as-is+dynamic, as-is+nested: one step of model.inverse as the program "
                                   "runs it compiled no graph, and Flow.inverse calls neither Flow.forward nor a block's "
                                   "forward"), line
            assert "model.py::Coupling.inverse" in line and "nested" in line.partition(": ")[2], line
        else:
            # unsure: no per-block candidate either (layer(z) may run the block's forward)
            assert names == ["as-is", "compile-inverse", "per-block", "as-is+regional", "as-is+dynamic",
                             "as-is+nested"] and lines == [], (names, lines)


def test_the_per_block_conflict_line_says_its_edit_was_pruned_where_a_kind_pruned_it():
    """per-block is struck by the program's whole-model compile, its line pointing at the edit of
    that call, ``as-is+regional``; where a later kind prunes that edit too (the step's method
    reaches no forward), the line says it was pruned rather than that it was measured."""
    from rewriter.diagnose.candidates import OwnScope, _Proposals
    from rewriter.diagnose.planner import Decision
    from rewriter.plan import CompileAction

    own = SimpleNamespace(text='sample.py:15: torch.compile(Flow(), backend="eager")', fullgraph=False)
    p = _Proposals(ctx=None, scope=OwnScope(whole=[own]))
    block = CompileAction(action="compile", target="model.py::Coupling", strategy="region", why="w")
    p.add("per-block", Decision(parse_plan("version: 1\nactions: []\n").plan.model_copy(update={"actions": [block]}), []))
    assert p.out == []
    [kept] = p.conflict_lines()
    assert kept.startswith("per-block: the program compiles the whole model itself") and kept.endswith(
        "change the program's own call instead (measured as as-is+regional where the harness runs that call)"), kept
    [pruned] = p.conflict_lines(dropped={"as-is+regional"})
    assert pruned.endswith("change the program's own call instead (its edit as-is+regional is pruned too, said on its "
                           "own line)"), pruned
    assert "measured as" not in pruned, pruned
    [absent] = p.conflict_lines(proposed={"as-is", "compile-inverse"})
    assert absent.endswith("change the program's own call instead (the search proposed no as-is+regional edit of "
                           "that call)"), absent
    [present] = p.conflict_lines(proposed={"as-is", "as-is+regional"})
    assert present.endswith("(measured as as-is+regional where the harness runs that call)"), present


def test_the_blocks_own_method_is_a_candidate_after_the_compile_of_the_method(tmp_path, monkeypatch):
    """``Flow.inverse`` calls ``layer.inverse(z)`` on each ``Coupling`` of a ModuleList: the search
    also measures ``torch.compile`` on ``Coupling.inverse`` (one compile reused across the blocks),
    placed after ``compile-inverse`` so the ladder's order keeps the whole method first where the
    gain is not measured."""
    from rewriter.diagnose.kinds.called_method import with_called_method
    from rewriter.diagnose.method_reach import reach

    model, block, src = _flow_variant(tmp_path, "", "", monkeypatch)
    assert reach(model._orig_mod, "inverse", src, block).block_calls == ["model.py::Coupling.inverse"]
    ctx, cands = _kind_ctx(src, model, compiles_itself=False)
    ctx.evidence.blocks = [{"cls": type(block), "modules": list(model._orig_mod.layers)}]
    out, lines = with_called_method(ctx, cands)
    assert [c.name for c in out] == ["as-is", "compile-inverse", "compile-Coupling.inverse", "per-block"] and lines == []
    [action] = out[2].plan.actions
    assert (action.action, action.target, action.strategy, action.own_call) == ("compile", "model.py::Coupling.inverse", "region", None)
    assert "calls Coupling.inverse on each Coupling block" in action.why, action.why
    # two block methods called: which is the region is not one candidate's choice, said
    model, block, src = _flow_variant(tmp_path / "two", "z = layer.inverse(z.flip(-1))",
                                      "z = layer.inverse(z.flip(-1)) + 0 * layer._scale_shift(z[:, :4])[0].sum()", monkeypatch)
    ctx, cands = _kind_ctx(src, model, compiles_itself=False)
    ctx.evidence.blocks = [{"cls": type(block), "modules": list(model._orig_mod.layers)}]
    out, [line] = with_called_method(ctx, cands)
    assert [c.name for c in out] == ["as-is", "compile-inverse", "per-block"], [c.name for c in out]
    assert line.startswith("compile-<block method>: model.inverse calls 2 methods of Coupling"), line


def test_a_baseline_that_compiled_no_graph_is_said_and_not_held_against_the_plan():
    """validate's ``regional`` baseline compiles the blocks' ``forward``; a step of
    ``model.inverse`` that calls ``layer.inverse`` compiles none of it: the report says so and the
    speed gate does not compare the plan with what is the eager model's step time."""
    from rewriter.engine.verdict import Verdict
    from rewriter.validate.baselines import idle
    from rewriter.validate.command import Options, _judge_speed

    def judged(graphs: int) -> tuple[dict, Verdict]:
        results = {"eager": {"step_ms": 10.0}, "plan": {"step_ms": 9.0},
                   "regional": {"step_ms": 6.0, "blocks": 4, "compile": {"unique_graphs": graphs}}}
        verdict = Verdict()
        for b, said in idle(results, "inverse").items():
            results[b]["baseline_idle"] = said
        _judge_speed({"environment": {"timed_on": "cpu"}}, results, SimpleNamespace(timing=[]),
                     Options(speed_gate="on", min_speedup=0.95), verdict)
        return results, verdict

    results, verdict = judged(0)
    assert results["regional"]["baseline_idle"] == (
        "the regional baseline compiled no graph: the step's method model.inverse calls no block's forward; its step "
        "time is the eager model's, so the plan is not compared with it")
    assert not any("baseline" in f for f in verdict.failures), verdict.failures
    # the same figures where the baseline compiled: the plan is held against it
    results, verdict = judged(4)
    assert "baseline_idle" not in results["regional"]
    assert any("slower than the better baseline (regional compile, 6.000 ms)" in f for f in verdict.failures), verdict.failures
    # no block found, or no harness.call: said as such
    assert "no repeated block was found" in idle({"regional": {"compile": {"unique_graphs": 0}}}, "inverse")["regional"]
    assert "the step calls no compiled block's forward" in idle({"regional": {"blocks": 2, "compile": {"unique_graphs": 0}}}, None)["regional"]
    assert idle({"regional": {"error": "raised", "compile": {"unique_graphs": 0}}}, "inverse") == {}


def test_the_section_header_of_a_baseline_that_compiled_no_graph_says_so():
    """validation.md's section of each compiled variant opens with what was done to it; where the
    regional baseline compiled no graph the header says the blocks were given a compile and that it
    compiled none, not that the blocks were compiled."""
    from rewriter.engine.variants import prepare
    from rewriter.validate.report import variant_heading

    import torch

    model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)]))
    said = prepare("regional", model, "eager", None)
    idle = {**said, "compile": {"unique_graphs": 0}, "baseline_idle": "the regional baseline compiled no graph: ..."}
    heading = variant_heading("regional", idle)
    assert heading.startswith("- **regional** (3 blocks given torch.compile in place (backend='eager')"), heading
    assert heading.endswith("; it compiled no graph):"), heading
    assert "blocks compiled in place" not in heading, heading
    # a baseline that compiled: no such clause
    assert "no graph" not in variant_heading("regional", {**said, "compile": {"unique_graphs": 3}})
    torch._dynamo.reset()


@pytest.mark.slow
def test_validate_reports_the_regional_baseline_of_a_method_step_as_compiling_nothing(tmp_path, monkeypatch):
    """End to end on CPU (eager backend): a plan compiling ``Flow.inverse``, validated with the
    regional baseline; the report's header, the baseline's row and its section say that baseline
    compiled no graph."""
    from rewriter.cli import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    shutil.copytree(FLOW, src, ignore=shutil.ignore_patterns("__pycache__"))
    plan = tmp_path / "plan.yaml"
    plan.write_text((FLOW / "harness.yaml").read_text().replace(
        "actions: []", "actions:\n  - {action: compile, target: model.py::Flow.inverse, strategy: region}"))
    out = tmp_path / "report"
    code = main(["validate", "--plan", str(plan), str(src), "--out", str(out), "--backend", "eager", "--baselines", "regional",
                 "--reps", "2", "--warmup", "1"])
    report = json.loads((out / "validation.json").read_text())
    regional = report["variants"]["regional"]
    assert code == 0, report["verdict"]
    assert regional["compile"]["unique_graphs"] == 0 and report["variants"]["plan"]["compile"]["unique_graphs"] >= 1
    said = "the regional baseline compiled no graph: the step's method model.inverse calls no block's forward"
    assert regional["baseline_idle"].startswith(said) and any(n.startswith(said) for n in report["verdict"]["notes"])
    md = (out / "validation.md").read_text()
    assert md.count(said) >= 2, md  # the baselines line and the regional section
    [head] = [ln for ln in md.splitlines() if ln.startswith("- **regional** (")]
    assert "blocks given torch.compile in place" in head and head.endswith("; it compiled no graph):"), head
    [row] = [ln for ln in md.splitlines() if ln.startswith("| regional |")]
    assert row.split("|")[3].strip() == "no graph", row  # its "vs eager" cell: no compile was timed
