"""The diagnostic ladder on the workloads of fixtures/workloads/: on CPU, each gets the verdict
CPU can measure and the plan action that verdict implies, and every plan rewrites cleanly.

Each test runs only the rungs its verdict needs (``only=``) to keep the suite fast on a shared
2-core machine; tests/test_diagnose.py runs the whole ladder end to end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.diagnose.runner import diagnose
from rewriter.plan import Amortization, load_plan
from rewriter.rewrite.transform import plan_rewrite

WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def run(name: str, tmp_path: Path, only: set[str], **kw):
    src = tmp_path / name
    shutil.copytree(WORKLOADS / name, src)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only=only, backend="eager", **kw)
    loaded = load_plan(tmp_path / "plan.yaml")
    result = plan_rewrite(loaded, src, unsafe=True)
    rungs = {r.name: r for r in outcome.rungs}
    return outcome, rungs, loaded.plan, result


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_launch_bound_gets_whole_model_compile(tmp_path):
    outcome, rungs, plan, result = run("launch_bound", tmp_path, {"batch_scaling", "recompiles"})
    bs = rungs["batch_scaling"]
    assert bs.measurement["fixed_share"] >= 0.15, bs.measurement
    assert bs.verdict.startswith("launch-bound")
    [compile_] = [a for a in plan.actions if a.action == "compile"]
    assert compile_.target == "model.py::TinyMLP" and compile_.strategy == "whole"
    assert compile_.options.mode == "default"  # CPU: no CUDA graphs
    assert "fixed overhead" in compile_.why
    assert any(b"@torch.compile" in c.new for c in result.changes)


def test_gemm_bound_plans_no_compile(tmp_path):
    outcome, rungs, plan, result = run("gemm_bound", tmp_path, {"op_mix"})
    mix = rungs["op_mix"]
    assert mix.measurement["basis"] == "self-CPU (no CUDA)"
    assert mix.measurement["gemm_share"] >= 0.80
    assert mix.verdict.startswith("GEMM-dominated")
    assert not [a for a in plan.actions if a.action == "compile"]
    assert any("~1.0x" in n for n in outcome.notes)
    assert not result.changes


def test_fusible_traffic_gets_per_block_compile(tmp_path):
    outcome, rungs, plan, result = run("fusible", tmp_path, {"op_mix", "granularity"})
    assert rungs["op_mix"].measurement["fusible_share"] >= 0.30
    assert rungs["granularity"].measurement["class"] == "NormBlock"
    assert rungs["granularity"].measurement["share"] >= 0.5
    [compile_] = plan.actions
    assert (compile_.action, compile_.target, compile_.strategy) == ("compile", "model.py::NormBlock", "region")
    assert compile_.options.fullgraph
    assert "fullgraph=True: the graph_breaks rung found no break" in compile_.why, compile_.why  # said, not only written


def test_dominant_topk_gets_kernel_action_at_its_call(tmp_path):
    outcome, rungs, plan, result = run("dominant_op", tmp_path, {"top_ops"})
    top = rungs["top_ops"]
    assert top.measurement["basis"] == "self-CPU (no CUDA)"
    assert top.measurement["dominant"]["op"] == "aten::topk", top.measurement["top"]
    assert top.measurement["dominant"]["share"] >= 0.10
    [site] = [f for f in top.findings if f.kind == "dominant_op"]
    assert (site.file, site.line, site.function) == ("model.py", line_of(tmp_path / "dominant_op" / "model.py", "torch.topk("), "select_top")
    [kernel] = [a for a in plan.actions if a.action == "kernel"]
    assert (kernel.target, kernel.call, kernel.kernel) == ("model.py::select_top", "torch.topk", "topk")


def test_host_stall_sync_is_attributed_to_its_line(tmp_path):
    outcome, rungs, plan, result = run("host_stall", tmp_path, {"gaps"})
    gaps = rungs["gaps"]
    assert gaps.measurement["host_stall_ms"] == "skipped: no CUDA"
    [sync] = gaps.findings
    assert sync.kind == "host_sync"
    assert (sync.file, sync.line) == ("model.py", line_of(tmp_path / "host_stall" / "model.py", "peak = x.abs().max().item()"))
    assert "6x per step" in sync.message  # one per block


def test_graph_break_helper_is_disabled_and_block_compiled(tmp_path):
    outcome, rungs, plan, result = run("graph_break", tmp_path, {"graph_breaks"})
    gb = rungs["graph_breaks"]
    assert gb.measurement["graph_break_count"] >= 1
    assert {(f.file, f.function) for f in gb.findings} == {("model.py", "route")}
    assert all(f.line == line_of(tmp_path / "graph_break" / "model.py", "if x.mean() > 0") for f in gb.findings)
    kinds = {(a.action, a.target) for a in plan.actions}
    assert kinds == {("disable", "model.py::route"), ("compile", "model.py::Block")}
    [compile_] = [a for a in plan.actions if a.action == "compile"]
    assert not compile_.options.fullgraph  # a disabled helper inside is a graph break
    assert "fullgraph=True" not in compile_.why, compile_.why


def test_recompile_storm_marks_the_block_input_dynamic(tmp_path):
    outcome, rungs, plan, result = run("recompile_storm", tmp_path, {"recompiles"})
    rc = rungs["recompiles"]
    assert rc.measurement["recompiles"] >= 1
    assert rc.measurement["varying_shape_keys"] == ["seq"]
    assert rc.measurement["varying_block_dims"] == [{"arg": 0, "dim": 1, "sizes": [64, 96, 130, 200]}]
    # the block-shape hook runs in an eager pass: Dynamo never guards on it (H200 run 2 did)
    assert not any("_forward_pre_hooks" in f.message for f in rc.findings)
    [mark] = [a for a in plan.actions if a.action == "mark_dynamic"]
    assert (mark.target, mark.arg, mark.dim) == ("model.py::SeqNet.forward", "x", 1)
    assert ("compile", "model.py::Block") in {(a.action, a.target) for a in plan.actions}
    text = next(c.new.decode() for c in result.changes if c.relpath == "model.py")
    assert "torch._dynamo.maybe_mark_dynamic(x, 1)" in text  # as the amortization rung measured it


def test_per_instance_recompiles_disable_the_helper_reading_layer_idx(tmp_path):
    outcome, rungs, plan, result = run("instance_recompiles", tmp_path, {"instance_recompiles"})
    ir = rungs["instance_recompiles"]
    assert ir.measurement["instances"] == 12
    assert ir.measurement["recompiles"] >= 1
    assert ir.measurement["limit_hit"] is True
    guard = next(f for f in ir.findings if f.kind == "guard")
    assert "layer_idx" in guard.message  # Dynamo's own guard text
    assert (guard.file, guard.function) == ("model.py", "Block.residual_scale")
    assert guard.line == line_of(tmp_path / "instance_recompiles" / "model.py", "if self.layer_idx % 2 == 0")
    kinds = {(a.action, a.target) for a in plan.actions}
    assert kinds == {("disable", "model.py::Block.residual_scale"), ("compile", "model.py::Block")}


def test_guard_in_the_block_forward_itself_plans_no_compile(tmp_path):
    src = tmp_path / "instance_recompiles"
    shutil.copytree(WORKLOADS / "instance_recompiles", src)
    model = src / "model.py"
    text = model.read_text().replace("torch.tanh(h) * self.residual_scale()", "torch.tanh(h) * (1.0 if self.layer_idx % 2 == 0 else 0.5)")
    model.write_text(text)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"instance_recompiles"}, backend="eager")
    assert not outcome.plan.actions
    assert any("guard in its own forward" in n and "recompile limit hit" in n for n in outcome.notes)


def test_fragmentation_memory_rung_says_no_cuda(tmp_path):
    outcome, rungs, plan, result = run("fragmentation", tmp_path, {"memory"})
    assert rungs["memory"].status == "skipped"
    assert rungs["memory"].verdict == "skipped: no CUDA"
    assert not [a for a in plan.actions if a.action == "allocator"]


def test_compile_that_does_not_pay_back_compiles_nothing(tmp_path):
    """One run: no compile can pay back its measured cost, even at a step of zero (the eager
    backend's bound), so the search keeps the program as it is."""
    outcome, rungs, plan, result = run(
        "fusible", tmp_path, {"op_mix", "search"}, amortization_spec=Amortization(runs=1, restarts=1)
    )
    status = outcome.search.choice.status
    compiled = [c.name for c in outcome.search.candidates if c.compiles]
    assert compiled and all(status[n].startswith("does not pay back") for n in compiled), status
    assert all(outcome.search.rows[n]["compile_s_per_start"] > 0 for n in compiled)
    assert outcome.search.choice.chosen == "as-is"
    assert not [a for a in plan.actions if a.action == "compile"]
    assert plan.amortization == Amortization(runs=1, restarts=1)


@pytest.mark.slow
def test_inductor_compile_gain_is_measured_not_bounded(tmp_path, monkeypatch):
    """The one Inductor search: with a backend that optimises, the gain per step is measured and
    the amortization rule decides on the net saving (the rule's proposal against the program as
    it is, to keep Inductor's CPU compiles to one)."""
    from rewriter.diagnose import candidates, search

    def two(ctx, own=None):  # noqa: ANN001, ANN202
        cands, pruned = candidates.propose(ctx, own)
        return [c for c in cands if c.rule or c.name == "as-is"], pruned

    monkeypatch.setattr(search, "propose", two)
    src = tmp_path / "fusible"
    shutil.copytree(WORKLOADS / "fusible", src)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"op_mix", "granularity", "search"}, backend="inductor")
    found = outcome.search
    assert found.gain_measured
    [rule] = [c for c in found.candidates if c.rule]
    assert isinstance(found.choice.net_s[rule.name], float)
    assert found.rows[rule.name]["compile_s_per_start"] > 0
    if found.choice.chosen == rule.name:
        assert all("search: " in a.why for a in outcome.plan.actions)


def test_the_search_counts_the_compiles_each_candidate_observes_per_shape(tmp_path):
    """H200 run 2 (recompile_storm) charged 4 compiles (1 + recompiles) to every candidate. Each
    candidate is now run at every harness shape in its own process: the per-block plan with the
    marks compiles once, the bare one again when the dim first changes (automatic dynamic)."""
    outcome, rungs, plan, result = run("recompile_storm", tmp_path, {"recompiles", "granularity", "search"})
    rows = outcome.search.rows
    marked = rows["per-block+mark_dynamic"]
    assert [p["shape"]["seq"] for p in marked["per_shape_cold"]] == [64, 96, 130, 200]
    assert [p["new_graphs"] > 0 for p in marked["per_shape_cold"]] == [True, False, False, False]
    assert marked["shape_buckets"] == 1
    bare = rows["per-block"]
    assert bare["compile"]["recompiles"] >= 1 and bare["shape_buckets"] >= 2


def test_guard_after_a_graph_break_in_the_block_forward_is_still_per_instance(tmp_path):
    """A newcomer's model: a data-dependent branch in the block's forward, then a per-instance
    int. Dynamo resumes after the break in ``torch_dynamo_resume_in_forward_at_N``, and the
    per-instance guard fails there: the rung counted only ``forward`` and said one graph served
    every instance, so the plan compiled the block."""
    src = tmp_path / "instance_recompiles"
    shutil.copytree(WORKLOADS / "instance_recompiles", src)
    model = src / "model.py"
    text = model.read_text().replace(
        "        return x + torch.tanh(h) * self.residual_scale()",
        "        if h.sum() > 0:\n            h = h * 0.5\n        return x + torch.tanh(h) * (1.0 / (self.layer_idx + 1))",
    )
    model.write_text(text)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"instance_recompiles"}, backend="eager")
    rung = {r.name: r for r in outcome.rungs}["instance_recompiles"]
    assert rung.measurement["recompiles"] >= 1, rung.verdict
    [guard, *_] = [f for f in rung.findings if f.kind == "guard"]
    assert guard.line == line_of(model, "(1.0 / (self.layer_idx + 1))")
    assert not [a for a in outcome.plan.actions if a.action == "compile"]


def test_a_graph_break_outside_the_compiled_block_gets_no_disable(tmp_path):
    """A newcomer's model: a helper with ``.item()`` called from the model's own forward, after
    the blocks. Only the block is compiled, so the helper already runs eager: a ``disable`` on it
    does nothing. The plan says so instead; the helper inside the block still gets its disable."""
    src = tmp_path / "graph_break"
    shutil.copytree(WORKLOADS / "graph_break", src)
    model = src / "model.py"
    text = model.read_text().replace(
        "class BranchNet(nn.Module):",
        "def gate(x):\n    return x * x.abs().mean().item()\n\n\nclass BranchNet(nn.Module):",
    ).replace("            x = block(x)\n        return x", "            x = block(x)\n        return gate(x)")
    model.write_text(text)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks"}, backend="eager")
    gb = {r.name: r for r in outcome.rungs}["graph_breaks"]
    gate = [f for f in gb.findings if f.function == "gate"]
    assert gate and gate[0].callers[-1] == "gate"
    kinds = {(a.action, a.target) for a in outcome.plan.actions}
    assert kinds == {("disable", "model.py::route"), ("compile", "model.py::Block")}
    assert any("graph break at model.py:34 in gate: outside the per-block compile (its code never calls gate)" in n for n in outcome.notes), outcome.notes


def test_a_graph_break_in_the_block_forward_itself_is_said_with_its_line(tmp_path):
    """A break in the compiled block's own forward cannot be disabled away: the plan compiles the
    block (more than one graph, fullgraph off) and says where the break is and that `stackpart
    check` will report that line, so the pre-commit hook's finding on the planned code is expected."""
    src = tmp_path / "graph_break"
    shutil.copytree(WORKLOADS / "graph_break", src)
    model = src / "model.py"
    model.write_text(model.read_text().replace(
        "        h = self.fc(route(self.norm(x)))",
        "        h = self.norm(x)\n        if h.mean() > 0:\n            h = h * 0.5\n        h = self.fc(h)",
    ))
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks"}, backend="eager")
    [compile_] = [a for a in outcome.plan.actions if a.action == "compile"]
    assert compile_.target == "model.py::Block" and not compile_.options.fullgraph
    line = line_of(model, "if h.mean() > 0")
    assert any(f"graph break inside Block.forward itself at model.py:{line}" in n and "stackpart check" in n for n in outcome.notes), outcome.notes


def test_recompiles_from_value_guards_are_not_blamed_on_shapes(tmp_path):
    """The newcomer's model again, across two shapes: the per-layer guard after the break
    recompiles too; the rung counts it apart from the shape recompiles and says mark_dynamic
    cannot remove it."""
    from rewriter.diagnose.rungs.recompiles import is_shape_guard

    assert is_shape_guard(["tensor 'x' size mismatch at index 1. expected 16, actual 24"])
    assert is_shape_guard([])
    assert not is_shape_guard(["self.layer_idx == 0"])
    src = tmp_path / "instance_recompiles"
    shutil.copytree(WORKLOADS / "instance_recompiles", src)
    model = src / "model.py"
    model.write_text(model.read_text().replace(
        "        return x + torch.tanh(h) * self.residual_scale()",
        "        if h.sum() > 0:\n            h = h * 0.5\n        return x + torch.tanh(h) * (1.0 / (self.layer_idx + 1))",
    ))
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"recompiles"}, backend="eager")
    rc = {r.name: r for r in outcome.rungs}["recompiles"]
    assert rc.measurement["value_guard_recompiles"] >= 1, rc.verdict
    assert "from guards on values, not shapes (self.layer_idx" in rc.verdict


def test_moe_expert_size_guards_are_not_per_instance_recompiles(tmp_path):
    """A newcomer's MoE (fixtures/compile/moe_block/before): each expert gets a data-dependent number of
    tokens, so the compiled block recompiled once on "tensor 'x' size mismatch at index 0". The
    rung called that a per-instance recompile with no location, and the planner dropped the
    block compile; a size guard is a dynamic shape, not per-instance state."""
    src = tmp_path / "moe"
    shutil.copytree(WORKLOADS.parent / "compile" / "moe_block" / "before", src)
    (src / "harness.py").write_text(
        "import torch\nfrom model import MoETransformer\n\n\ndef build_model():\n    torch.manual_seed(0)\n"
        "    return MoETransformer()\n\n\ndef make_inputs(batch: int = 2, seq: int = 16):\n"
        "    return (torch.randint(0, 128, (batch, seq)),)\n"
    )
    from rewriter.plan import Harness

    spec = Harness(file="harness.py", shapes=[{"batch": 2, "seq": 16}, {"batch": 2, "seq": 12}], mode="training", device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"instance_recompiles", "graph_breaks"}, backend="eager")
    rung = {r.name: r for r in outcome.rungs}["instance_recompiles"]
    assert rung.measurement["recompiles"] == 0, rung.verdict
    assert not any("guard in its own forward" in n for n in outcome.notes), outcome.notes
    assert ("compile", "model.py::Block") in {(a.action, a.target) for a in outcome.plan.actions}, outcome.notes


def test_a_graph_break_that_appears_only_with_dynamic_shapes_is_found_and_not_marked(tmp_path):
    """A newcomer's KV-cache decoder: `is_causal=(t > 1)` traces with static shapes (explain saw
    no break) and breaks once t is symbolic (a SymBool), which the plan's own mark_dynamic then
    caused on every call. The recompiles rung reads Dynamo's graph-break log across the shapes."""
    src = tmp_path / "recompile_storm"
    shutil.copytree(WORKLOADS / "recompile_storm", src)
    model = src / "model.py"
    text = model.read_text()
    assert "def forward(self, x):" in text
    text = text.replace("    def forward(self, x):\n", "    def forward(self, x):\n        x = F.scaled_dot_product_attention(x, x, x, is_causal=(x.shape[1] > 1))\n", 1)
    model.write_text(text)
    spec = load_plan(src / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", only={"graph_breaks", "recompiles"}, backend="eager")
    rungs = {r.name: r for r in outcome.rungs}
    assert rungs["graph_breaks"].measurement["graph_break_count"] == 0
    rc = rungs["recompiles"]
    assert rc.measurement["dynamic_only_graph_breaks"] >= 1, rc.verdict
    [f, *_] = [f for f in rc.findings if f.kind == "graph_break_dynamic"]
    assert (f.file, f.line) == ("model.py", line_of(model, "is_causal=(x.shape[1] > 1)")) and "SymBool" in f.message
    assert not [a for a in outcome.plan.actions if a.action == "mark_dynamic"]
    assert any("not marked dynamic" in n and "only once shapes are dynamic" in n for n in outcome.notes)
