"""The planner's rules on measured rung results: each verdict becomes the action the ladder says,
with its evidence; the plans load and rewrite. Rung results are set directly (the rungs
themselves are covered by test_diagnose_workloads.py), which also covers the CUDA-only branches
(CUDA graphs, the allocator) on a CPU machine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.diagnose.rungs import granularity
from rewriter.diagnose.context import Context
from rewriter.diagnose.planner import plan
from rewriter.diagnose.report import plan_yaml
from rewriter.diagnose.rung import RungResult
from rewriter.diagnose.session import Session
from rewriter.harness import load_harness
from rewriter.plan import Amortization, load_plan, parse_plan
from rewriter.rewrite.transform import plan_rewrite

WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


def context(tmp_path: Path, name: str, cuda: bool, monkeypatch) -> Context:
    src = tmp_path / name
    shutil.copytree(WORKLOADS / name, src)
    spec = load_plan(src / "plan.yaml").plan.harness
    ctx = Context(session=Session(load_harness(spec, src)), out_dir=tmp_path, backend="inductor",
                  amortization=Amortization(runs=1000, restarts=2), amortization_assumed=False)
    model, _, _ = ctx.reference()
    ctx.evidence.blocks = granularity.find_blocks(model, src)
    monkeypatch.setattr(Session, "cuda", property(lambda self: cuda))
    return ctx


def result(name: str, implies: str = "none", **measurement) -> RungResult:
    return RungResult(name, name, measurement=measurement, verdict="v", implies=implies)


def check_plan(ctx: Context, decision) -> None:
    loaded = parse_plan(plan_yaml(decision.plan))
    assert all(a.why for a in loaded.plan.actions)
    plan_rewrite(loaded, ctx.session.src, unsafe=True)


@pytest.mark.parametrize("cuda, mode", [(True, "reduce-overhead"), (False, "default")])
def test_launch_bound_with_stable_shapes_is_whole_model_capture(tmp_path, monkeypatch, cuda, mode):
    ctx = context(tmp_path, "launch_bound", cuda, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.9)
    ctx.results["recompiles"] = result("recompiles", recompiles=0, varying_input_dims=[], shapes=1)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.95, fusible_share=0.0, compile_gain_bound=1.0, basis="self-device")
    decision = plan(ctx)
    [a] = decision.plan.actions
    assert (a.action, a.target, a.strategy, a.options.mode) == ("compile", "model.py::TinyMLP", "whole", mode)
    assert "90% fixed overhead" in a.why
    assert decision.plan.amortization == Amortization(runs=1000, restarts=2)
    check_plan(ctx, decision)


def test_an_errored_recompiles_rung_is_not_evidence_of_stable_shapes(tmp_path, monkeypatch):
    """diagnose_hf (before the symlink fix): the recompiles rung raised, and the plan said
    "0 recompiles across 1 shapes" and captured CUDA graphs."""
    ctx = context(tmp_path, "launch_bound", True, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.9)
    ctx.results["recompiles"] = RungResult("recompiles", "recompiles", status="error", reason="IndexError: list index out of range")
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.95, fusible_share=0.0, compile_gain_bound=1.0, basis="self-device")
    decision = plan(ctx)
    assert all(getattr(getattr(a, "options", None), "mode", None) != "reduce-overhead" for a in decision.plan.actions)
    assert not any("0 recompiles" in a.why for a in decision.plan.actions)
    assert "the recompiles rung did not run ok: shapes are treated as varying (no CUDA graphs)" in decision.notes


def test_launch_bound_with_varying_shapes_compiles_per_block(tmp_path, monkeypatch):
    ctx = context(tmp_path, "launch_bound", True, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.9)
    ctx.results["recompiles"] = result("recompiles", recompiles=2, shapes=3, varying_input_dims=[{"tensor": 0, "dim": 0, "sizes": [2, 3, 4]}], varying_block_dims=[{"arg": 0, "dim": 0, "sizes": [2, 3, 4]}])
    decision = plan(ctx)
    kinds = {(a.action, a.target) for a in decision.plan.actions}
    assert ("compile", "model.py::Layer") in kinds
    [c] = [a for a in decision.plan.actions if a.action == "compile"]
    assert c.strategy == "region" and c.options.mode == "default"  # no CUDA graphs per region
    [md] = [a for a in decision.plan.actions if a.action == "mark_dynamic"]
    assert (md.target, md.arg, md.dim) == ("model.py::TinyMLP.forward", "x", 0)
    check_plan(ctx, decision)


def test_gemm_dominated_plans_no_compile_and_says_about_one(tmp_path, monkeypatch):
    ctx = context(tmp_path, "gemm_bound", True, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.01)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.93, fusible_share=0.03, compile_gain_bound=1.036, basis="self-device")
    decision = plan(ctx)
    assert decision.plan.actions == []
    assert decision.expected_speedup == "~1.0x"
    assert any("compile would return ~1.0x (at most 1.036x)" in n for n in decision.notes)


FRAGMENTING = "fragmenting: 2100 alloc retries, 0 OOMs in 3 steady steps"


def test_fragmentation_gets_the_allocator_only_at_the_entry_the_user_names(tmp_path, monkeypatch):
    """H200 run 2 put the allocator on harness.py::build_model: the harness is scaffolding. With
    --entry the action goes there; without it the finding is reported with how to get it."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):  # the caller's own setting is not ours to read
        monkeypatch.delenv(var, raising=False)
    ctx = context(tmp_path, "fragmentation", True, monkeypatch)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.9, fusible_share=0.0, compile_gain_bound=1.0, basis="self-device")
    ctx.results["memory"] = result("memory", "allocator: expandable_segments:True", alloc_retries=0)
    ctx.results["memory"].verdict = FRAGMENTING
    decision = plan(ctx)
    assert decision.plan.actions == []
    assert any("2100 alloc retries" in n and "pass --entry file.py::func" in n for n in decision.notes)

    ctx.entry = "train.py::main"
    decision = plan(ctx)
    [a] = decision.plan.actions
    assert (a.action, a.target) == ("allocator", "train.py::main")
    assert "2100 alloc retries" in a.why
    result_ = plan_rewrite(parse_plan(plan_yaml(decision.plan)), ctx.session.src)
    [change] = result_.changes
    assert change.relpath == "train.py" and b"PYTORCH_CUDA_ALLOC_CONF" in change.new


@pytest.mark.parametrize("var", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_no_allocator_action_when_expandable_segments_are_already_on(tmp_path, monkeypatch, var):
    """The action sets expandable_segments; when the OOM happened with them on, it would change
    nothing (setdefault keeps the value): the plan says so and plans no action."""
    ctx = context(tmp_path, "fragmentation", True, monkeypatch)
    ctx.results["memory"] = result("memory", "allocator: expandable_segments:True", alloc_retries=0)
    ctx.results["memory"].verdict = FRAGMENTING
    ctx.entry = "train.py::main"
    for other in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(var, "max_split_size_mb:128, expandable_segments:True")
    decision = plan(ctx)
    assert not [a for a in decision.plan.actions if a.action == "allocator"]
    assert any(f"{var}=max_split_size_mb:128, expandable_segments:True already set" in n for n in decision.notes)
    monkeypatch.setenv(var, "expandable_segments:False")
    assert [a.action for a in plan(ctx).plan.actions if a.action == "allocator"] == ["allocator"]


def test_entry_must_name_a_function_under_src(tmp_path):
    from rewriter.diagnose.runner import check_entry
    from rewriter.errors import StackpartError

    src = tmp_path / "fragmentation"
    shutil.copytree(WORKLOADS / "fragmentation", src)
    check_entry("train.py::main", src)
    with pytest.raises(StackpartError, match="did you mean 'main'"):
        check_entry("train.py::mian", src)
    with pytest.raises(StackpartError, match="expected file.py::func"):
        check_entry("train.main", src)
    with pytest.raises(StackpartError, match="no file 'run.py' under SRC"):
        check_entry("run.py::main", src)


def test_dominant_algorithmic_op_gets_a_kernel_in_every_candidate(tmp_path, monkeypatch):
    """H200 run 2 (dominant_op): top-k was 70% of the step but the "compile does not pay back"
    verdict left the plan without the kernel: a kernel does not depend on compile amortization.
    The search measures it alone ('kernel') and with every compile candidate."""
    from rewriter.diagnose.candidates import propose

    from rewriter.diagnose.rung import Finding

    ctx = context(tmp_path, "dominant_op", True, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.17)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.0, fusible_share=0.1, compile_gain_bound=1.1, basis="self-device")
    dom = {"op": "aten::topk", "category": "reduction", "ms": 0.5, "share": 0.7, "kernels": [], "function": None}
    ctx.results["top_ops"] = result("top_ops", "kernel for aten::topk", basis="self-device", top=[dom], dominant=dom)
    ctx.results["top_ops"].findings.append(Finding("dominant_op", "aten::topk called here (1x per step)", "model.py", 9, "select_top"))
    decision = plan(ctx)
    [k] = [a for a in decision.plan.actions if a.action == "kernel"]
    assert (k.action, k.target, k.call, k.kernel) == ("kernel", "model.py::select_top", "torch.topk", "topk")
    assert "70% of the step" in k.why
    check_plan(ctx, decision)
    cands, _ = propose(ctx)
    by_name = {c.name: c for c in cands}
    assert [a.action for a in by_name["kernel"].plan.actions] == ["kernel"]
    assert by_name["as-is"].plan.actions == []
    assert all(any(a.action == "kernel" for a in c.plan.actions) for c in cands if c.name != "as-is" and not c.name.endswith("-no-kernel"))
    [plain] = [c for c in cands if c.name.endswith("-no-kernel")]
    assert plain.compiles and not any(a.action == "kernel" for a in plain.plan.actions)


LLAMA_DIMS = [{"arg": 0, "dim": 1, "sizes": [512, 384]}, {"arg": 1, "dim": 0, "sizes": [512, 384]}, {"arg": 2, "dim": 0, "sizes": [512, 384]}]


def llama(tmp_path, monkeypatch, runs: int = 1_000_000) -> Context:
    ctx = context(tmp_path, "llama", True, monkeypatch)
    ctx.amortization = Amortization(runs=runs, restarts=30)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.159)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.51, fusible_share=0.307, compile_gain_bound=1.325, basis="self-device")
    ctx.results["recompiles"] = result("recompiles", recompiles=1, shapes=2, varying_input_dims=[{"tensor": 0, "dim": 1, "sizes": [512, 384]}], varying_block_dims=LLAMA_DIMS)
    return ctx


def test_the_candidates_are_complete_plans_and_compose(tmp_path, monkeypatch):
    """The search's candidates: per-block bare, with disables, with the marks; nested + whole;
    whole; CUDA graphs pruned when shapes vary. No mark_dynamic inside a compiled model (nested,
    whole)."""
    from rewriter.diagnose.candidates import propose

    ctx = llama(tmp_path, monkeypatch)
    cands, pruned = propose(ctx)
    by_name = {c.name: c for c in cands}
    assert cands[0].rule and cands[-1].name == "as-is"
    assert {"per-block", "per-block+mark_dynamic", "nested+whole", "whole", "as-is"} <= set(by_name), list(by_name)
    # two harness shapes on CUDA: one recording each, proposed and said (test below)
    assert "whole+cudagraphs" in by_name
    marks = lambda c: [a for a in c.plan.actions if a.action == "mark_dynamic"]  # noqa: E731
    assert not marks(by_name["per-block"]) and marks(by_name["per-block+mark_dynamic"])
    assert not marks(by_name["whole"]) and not marks(by_name["nested+whole"])
    assert {(a.target, a.strategy) for a in by_name["nested+whole"].plan.actions} == {
        ("model.py::DecoderLayer", "nested"), ("model.py::Llama", "whole")}
    for c in cands:
        check_plan(ctx, type(plan(ctx))(c.plan))


def test_stable_shapes_on_cuda_add_the_cuda_graphs_candidate(tmp_path, monkeypatch):
    from rewriter.diagnose.candidates import propose

    ctx = llama(tmp_path, monkeypatch)
    ctx.results["recompiles"] = result("recompiles", recompiles=0, shapes=1, varying_input_dims=[])
    by_name = {c.name: c for c in propose(ctx)[0]}
    [c] = by_name["whole+cudagraphs"].plan.actions
    assert (c.strategy, c.options.mode) == ("whole", "reduce-overhead")


def test_varying_shapes_get_the_cuda_graphs_candidate_only_for_a_few_shapes(tmp_path, monkeypatch):
    """T5 and ViT in the zoo run two fixed shapes each, launch-bound (T5's step 87% fixed overhead):
    one CUDA graph recording per shape is worth measuring, and the compile's why says what a shape
    outside them costs. More than four harness shapes: pruned, and said with the count."""
    from rewriter.diagnose.candidates import CUDAGRAPH_SHAPES, propose

    ctx = llama(tmp_path, monkeypatch)
    assert len(ctx.session.spec.shapes) <= CUDAGRAPH_SHAPES
    by_name = {c.name: c for c in propose(ctx)[0]}
    [c] = [a for a in by_name["whole+cudagraphs"].plan.actions if a.action == "compile"]
    assert (c.strategy, c.options.mode) == ("whole", "reduce-overhead")
    assert "shapes vary" in c.why and f"one recording per input shape, the harness's {len(ctx.session.spec.shapes)} shapes" in c.why
    assert "a shape outside them records another graph" in c.why
    many = [{"batch": 8, "seq": s} for s in (128, 256, 384, 512, 640)]
    wider = ctx.session.spec.model_copy(update={"shapes": many})
    monkeypatch.setattr(type(ctx.session), "spec", property(lambda self: wider))
    cands, pruned = propose(ctx)
    assert "whole+cudagraphs" not in {c.name for c in cands}
    assert "whole+cudagraphs: shapes vary across the harness's 5 shapes (more than 4: each new shape is a new CUDA graph recording)" in pruned


def test_no_cuda_graphs_on_a_few_shapes_where_the_recompiles_rung_did_not_run_or_the_model_generates(tmp_path, monkeypatch):
    """Nothing read is not "a few shapes": the planner treats the shapes as varying, and so does the
    search (the why would say "one recording per shape" of shapes never compared). A model called
    through a method (``generate``) runs many input shapes within one harness shape."""
    from rewriter.diagnose.candidates import cudagraph_shapes, propose

    ctx = llama(tmp_path, monkeypatch)
    ran = ctx.results.pop("recompiles")
    cands, pruned = propose(ctx)
    assert "whole+cudagraphs" not in {c.name for c in cands}
    assert any(p.startswith("whole+cudagraphs: the recompiles rung did not run") for p in pruned), pruned
    ctx.results["recompiles"] = ran
    assert cudagraph_shapes(ctx) == 2
    calling = ctx.session.spec.model_copy(update={"call": "generate"})
    monkeypatch.setattr(type(ctx.session), "spec", property(lambda self: calling))
    assert cudagraph_shapes(ctx).startswith("shapes vary and the model is called through .generate()")


def test_the_rule_proposal_compiles_the_region_and_marks_every_varying_block_input(tmp_path, monkeypatch):
    ctx = llama(tmp_path, monkeypatch)
    decision = plan(ctx)
    [c] = [a for a in decision.plan.actions if a.action == "compile"]
    assert (c.target, c.strategy) == ("model.py::DecoderLayer", "region")
    marks = {(a.target, a.arg, a.dim) for a in decision.plan.actions if a.action == "mark_dynamic"}
    assert marks == {("model.py::Llama.forward", "x", 1), ("model.py::Llama.forward", "cos", 0), ("model.py::Llama.forward", "sin", 0)}
    check_plan(ctx, decision)


def test_launch_bound_recompile_storm_gets_per_block_compile_and_mark_dynamic(tmp_path, monkeypatch):
    """H200 run 2, recompile_storm: 48% fixed overhead, fusible, 4 sequence lengths: the rule
    proposes the region with the marks (the search then measures it)."""
    ctx = context(tmp_path, "recompile_storm", True, monkeypatch)
    ctx.amortization = Amortization(runs=1_000_000, restarts=1)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.481)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.365, fusible_share=0.614, compile_gain_bound=1.465, basis="self-device")
    ctx.results["recompiles"] = result("recompiles", recompiles=3, shapes=4, varying_input_dims=[{"tensor": 0, "dim": 1, "sizes": [256, 384, 520, 800]}],
                                       varying_block_dims=[{"arg": 0, "dim": 1, "sizes": [256, 384, 520, 800]}])
    decision = plan(ctx)
    kinds = {(a.action, a.target) for a in decision.plan.actions}
    assert kinds == {("compile", "model.py::Block"), ("mark_dynamic", "model.py::SeqNet.forward")}
    [c] = [a for a in decision.plan.actions if a.action == "compile"]
    assert c.strategy == "region" and "launch-bound (48% fixed overhead) but shapes vary" in c.why
    check_plan(ctx, decision)


def test_block_inputs_are_found_through_a_sliced_or_enumerated_module_list(tmp_path, monkeypatch):
    """H200 diagnose_hf: HF Llama/Mixtral loop ``for decoder_layer in self.layers[:
    self.config.num_hidden_layers]``; the planner found no block input there and left the
    varying sequence dim unmarked."""
    import importlib

    from rewriter.diagnose.planner import boundary_args

    (tmp_path / "hf_like.py").write_text(
        "import torch\n\n\n"
        "class Sliced(torch.nn.Module):\n"
        "    def forward(self, input_ids, mask=None):\n"
        "        hidden_states = self.embed(input_ids)\n"
        "        for decoder_layer in self.layers[: self.n]:\n"
        "            hidden_states = decoder_layer(hidden_states, mask, attention_mask=mask)\n"
        "        return hidden_states\n\n\n"
        "class Enumerated(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        for i, block in enumerate(self.h[1:]):\n"
        "            x = block(x, i)\n"
        "        return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("hf_like")
    assert boundary_args(mod.Sliced(), "layers") == ["hidden_states", "mask"]
    assert boundary_args(mod.Enumerated(), "h") == ["x", None]  # i is a loop variable, not bound at top level
    assert boundary_args(mod.Sliced(), "blocks") == []


def test_a_boundary_that_cannot_be_marked_whole_gets_no_mark_dynamic(tmp_path, monkeypatch):
    """HF Llama (transformers 5.24, CPU): the plan marked hidden_states while cos/sin arrived as
    position_embeddings=(cos, sin); the first call raised ConstraintViolationError. Either every
    varying block input is marked or none is."""
    ctx = llama(tmp_path, monkeypatch)
    ctx.results["recompiles"].measurement["varying_block_other_dims"] = [
        {"input": "position_embeddings[0]", "dim": 1, "sizes": [512, 384]}]
    decision = plan(ctx)
    assert [a.action for a in decision.plan.actions] == ["compile"]
    [note] = [n for n in decision.notes if n.startswith("not marked dynamic")]
    assert "position_embeddings[0] dim 1 (a keyword or nested argument)" in note
    assert "expect one automatic-dynamic recompile" in note
    check_plan(ctx, decision)


def test_nested_and_keyword_block_inputs_are_named():
    import torch

    from rewriter.diagnose.rungs.recompiles import nested_tensor_shapes, varying_named

    cos = torch.zeros(1, 5, 8)
    a = nested_tensor_shapes((torch.zeros(2, 5), (cos, cos)), {"position_embeddings": (cos, cos), "mask": None})
    assert a == {"args[1][0]": (1, 5, 8), "args[1][1]": (1, 5, 8),
                 "position_embeddings[0]": (1, 5, 8), "position_embeddings[1]": (1, 5, 8)}
    b = {k: (1, 7, 8) for k in a}
    assert varying_named([a, b])[0] == {"input": "args[1][0]", "dim": 1, "sizes": [5, 7]}
    assert len(varying_named([a, b])) == 4


def test_a_varying_int_block_argument_blocks_every_mark(tmp_path, monkeypatch):
    """Review: block(x, T) with x.view(b, T, ...) inside: x dim 1 was marked and the first call
    raised "specialized it to be a constant"."""
    from rewriter.diagnose.rungs.recompiles import int_inputs

    assert int_inputs((object(), 12, (3, True)), {"seq_len": 12, "flag": False}) == {"args[1]": 12, "args[2][0]": 3, "seq_len": 12}
    ctx = llama(tmp_path, monkeypatch)
    ctx.results["recompiles"].measurement["varying_block_other_dims"] = [{"input": "args[3]", "dim": None, "sizes": [512, 384]}]
    decision = plan(ctx)
    assert not [a for a in decision.plan.actions if a.action == "mark_dynamic"]
    assert any("block input args[3] (an int: [384, 512])" in n for n in decision.notes)


def test_names_reached_follows_the_files_own_functions_and_methods(tmp_path):
    """What a unit can call, statically: a helper reached through a method and a module-level
    function still counts as inside the block (its graph break needs the disable)."""
    from rewriter.diagnose.locate import names_reached

    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n\n"
        "def gate(x):\n    return x * x.mean().item()\n\n"
        "def mix(x):\n    return gate(x) + 1\n\n"
        "def unrelated(x):\n    return x\n\n"
        "class Block(torch.nn.Module):\n"
        "    def forward(self, x):\n        return self.inner(x)\n\n"
        "    def inner(self, x):\n        return mix(x)\n\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n        return unrelated(x)\n"
    )
    reached = names_reached(path, "Block.forward")
    assert {"inner", "mix", "gate"} <= reached and "unrelated" not in reached
    assert names_reached(path, "Nope.forward") == set()
    assert names_reached(tmp_path / "missing.py", "Block.forward") == set()


@pytest.mark.parametrize("median, noisy", [(1.02, False), (3.0, True)])
def test_batch_scaling_flags_a_noisy_machine(median, noisy):
    """A newcomer on a loaded 2-core VM saw the launch-bound verdict flip between runs with no
    warning: a median far above the minimum now says the timing is noisy."""
    from types import SimpleNamespace

    from rewriter.diagnose.rungs import batch_scaling
    from rewriter.diagnose.context import Context

    session = SimpleNamespace(
        spec=SimpleNamespace(shapes=[{"batch": 2}]),
        build=lambda shape: (None, shape),
        step_fn=lambda model, inputs: inputs["batch"],
        time_many=lambda steps: [{"min_ms": 1.0 + b, "median_ms": (1.0 + b) * median, "iters": 5} for b in steps],
        run=lambda step, what=None: None,
        forward_name=lambda: "build_model() model forward",
    )
    r = batch_scaling.run(Context(session=session, out_dir=None, backend="eager", amortization=None))
    assert r.measurement["median_over_min"] == median
    assert ("timing noisy" in r.verdict) is noisy


def test_one_varying_input_dim_adds_bucketed_candidates(tmp_path, monkeypatch):
    """Bucketed candidates: per-block with the bucket the recompiles rung implies, and whole with
    CUDA graphs made stable by bucketing (one graph per bucket); the engine's numerics decide
    (unsafe)."""
    import inspect

    from rewriter.diagnose.candidates import next_pow2, propose

    assert [next_pow2(n) for n in (1, 2, 3, 384, 512, 513)] == [1, 2, 4, 512, 512, 1024]
    ctx = llama(tmp_path, monkeypatch)
    # One recompile (automatic dynamic serves the rest): bucketing per-block can at most save it.
    names, pruned = [c.name for c in propose(ctx)[0]], propose(ctx)[1]
    assert "per-block+bucket" not in names and "whole+cudagraphs+bucket" in names
    assert any(p.startswith("per-block+bucket: 1 recompile(s)") for p in pruned), pruned
    ctx.results["recompiles"].measurement["recompiles"] = 3
    by_name = {c.name: c for c in propose(ctx)[0]}
    model, _, _ = ctx.reference()
    first = list(inspect.signature(type(model).forward).parameters)[1]
    for name in ("per-block+bucket", "whole+cudagraphs+bucket"):
        [b] = [a for a in by_name[name].plan.actions if a.action == "bucket"]
        assert (b.target, b.arg, b.dim, b.buckets) == ("model.py::Llama.forward", first, 1, [512]), name
        assert not [a for a in by_name[name].plan.actions if a.action == "mark_dynamic"]
        check_plan(ctx, type(plan(ctx))(by_name[name].plan))
    [c] = [a for a in by_name["whole+cudagraphs+bucket"].plan.actions if a.action == "compile"]
    assert c.options.mode == "reduce-overhead"
    ctx.results["recompiles"].measurement["varying_input_dims"].append({"tensor": 1, "dim": 0, "sizes": [3, 4]})
    cands, pruned = propose(ctx)
    assert not [c for c in cands if "bucket" in c.name]
    assert any(p.startswith("+bucket: 2 input dims vary") for p in pruned)


def test_a_block_kept_for_measurement_despite_a_guard_is_compiled_in_its_bucketed_candidate_too(tmp_path, monkeypatch):
    """Review: the per-block+bucket candidate trusted the guard the bare per-block candidate was
    built despite, and held only the bucket."""
    from rewriter.diagnose.candidates import propose
    from rewriter.diagnose.rung import Finding

    ctx = llama(tmp_path, monkeypatch)
    ctx.results["recompiles"].measurement["recompiles"] = 3
    ctx.results["instance_recompiles"] = result("instance_recompiles", recompiles=3, instances=4, limit_hit=False)
    ctx.results["instance_recompiles"].findings.append(
        Finding("guard", "guard failure: self.layer_idx == 0", "model.py", 30, "DecoderLayer.forward"))
    by_name = {c.name: c for c in propose(ctx)[0]}
    [bucketed] = [c for n, c in by_name.items() if n.startswith("per-block") and n.endswith("+bucket")]
    assert {a.action for a in bucketed.plan.actions} >= {"compile", "bucket"}, bucketed.plan.actions


def test_a_block_kept_for_measurement_despite_a_guard_keeps_its_marked_and_nested_candidates(tmp_path, monkeypatch):
    """A tiny GPT-2 (transformers 5.24), once its per-instance cache recompile was counted: the
    block compiled despite the guard lost its +mark_dynamic candidate, and nested+whole was pruned
    as "the block breaks the graph" though no graph break was seen (judged by the plan without a
    compile)."""
    from rewriter.diagnose.candidates import nested_supported, propose
    from rewriter.diagnose.rung import Finding

    ctx = llama(tmp_path, monkeypatch)
    ctx.results["instance_recompiles"] = result("instance_recompiles", recompiles=1, instances=4, limit_hit=False)
    ctx.results["instance_recompiles"].findings.append(
        Finding("guard", "guard failure: self.layer_idx == 0", "model.py", 30, "DecoderLayer.forward"))
    cands, pruned = propose(ctx)
    by_name = {c.name: c for c in cands}
    assert {"per-block", "per-block+mark_dynamic", "whole", "as-is"} <= set(by_name), list(by_name)
    assert [a for a in by_name["per-block+mark_dynamic"].plan.actions if a.action == "mark_dynamic"]
    assert not any("breaks the graph" in p for p in pruned), pruned
    if nested_supported():
        assert "nested+whole" in by_name, (list(by_name), pruned)
