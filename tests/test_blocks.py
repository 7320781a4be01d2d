"""Repeated blocks on models nobody here wrote: transformers' ResNet keeps its blocks in
four stages of four widths, ViT in one ModuleList; a planted model's blocks differ in width.

The finder must see one class across every container, the granularity rung must sum its share,
and the per-instance rung must count graphs and the recompile limit as Dynamo does: every
expectation about compiling is measured here with torch itself (its counters and its own log
records, read by this file's own handler), never written down. CPU, backend eager."""

from __future__ import annotations

import importlib.util
import logging
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from rewriter.diagnose.runner import diagnose
from rewriter.engine.blocks import find_block_groups, shape_signature
from rewriter.engine.variants import repeated_blocks
from rewriter.plan import Harness

RESNET = """\
import torch
import transformers


def build_model():
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64], depths=[2, 2, 2, 2],
                                       layer_type="basic", num_labels=3)
    return transformers.ResNetForImageClassification(config)


def make_inputs(batch: int = 2, size: int = 32):
    return {"pixel_values": torch.randn(batch, 3, size, size)}
"""

VIT = """\
import torch
import transformers


def build_model():
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=37,
                                    image_size=32, patch_size=8, num_labels=3)
    return transformers.ViTForImageClassification(config)


def make_inputs(batch: int = 2, size: int = 32):
    return {"pixel_values": torch.randn(batch, 3, size, size)}
"""

PLANTED = """\
import torch
import torch.nn as nn

WIDTHS = {widths}


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(16, width)
        self.down = nn.Linear(width, 16)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Planted(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(w) for w in WIDTHS])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def build_model():
    torch.manual_seed(0)
    return Planted()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 16),)
"""


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def write_harness(tmp_path: Path, text: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(textwrap.dedent(text))
    return src


def harness_module(src: Path):
    spec = importlib.util.spec_from_file_location(f"harness_{abs(hash(src))}", src / "harness.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def what_torch_says(model: nn.Module, cls: type, calls: list) -> dict:
    """Compile ``cls.forward`` once (backend eager), make ``calls`` under no_grad, and return what
    Dynamo itself recorded: graphs per call, and whether it hit the recompile limit (its warning
    on the ``torch._dynamo`` logger, and its ``unimplemented`` counter). Independent of stackpart."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    handler = _Records()
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    original = cls.__dict__["forward"]
    cls.forward = torch.compile(original, backend="eager")
    graphs = []
    try:
        with torch.no_grad():
            for inputs in calls:
                before = counters["stats"]["unique_graphs"]
                model(**inputs) if isinstance(inputs, dict) else model(*inputs)
                graphs.append(counters["stats"]["unique_graphs"] - before)
        warned = [m for m in handler.messages if "hit config.recompile_limit" in m or "hit config.cache_size_limit" in m]
        counted = sum(n for k, n in counters["unimplemented"].items() if "recompile limit" in k.lower())
    finally:
        cls.forward = original
        logger.removeHandler(handler)
        torch._dynamo.reset()
    return {"graphs": graphs, "warned": warned, "counted": counted}


def run_rungs(src: Path, tmp_path: Path, shapes: list[dict], only: set[str]) -> dict:
    spec = Harness(file="harness.py", shapes=shapes, mode="inference", device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only=only, backend="eager", steps=1)
    return {r.name: r for r in outcome.rungs}


def test_hf_resnet_blocks_are_found_across_all_four_stages_with_their_summed_share(tmp_path):
    """Today's finder took the stages ModuleList (4 x ResNetStage, each a different stage) or one
    stage's Sequential, and left the other stages' blocks out of the share."""
    transformers = pytest.importorskip("transformers")
    src = write_harness(tmp_path, RESNET)
    model = harness_module(src).build_model()
    expected = [n for n, m in model.named_modules() if isinstance(m, transformers.models.resnet.modeling_resnet.ResNetBasicLayer)]
    stages = sorted({n.rpartition(".")[0] for n in expected})
    assert len(stages) == 4  # the config's four stages hold them

    [group] = find_block_groups(model)  # the stages and the blocks' own conv layers are not blocks
    assert group.cls.__name__ == "ResNetBasicLayer"
    assert group.instances == expected
    assert [c.name for c in group.containers] == stages
    signatures = {shape_signature(m) for m in group.modules}
    assert len(group.shapes) == len(signatures) and 1 < len(signatures) < len(expected)
    assert sorted(n for s in group.shapes for n in s.instances) == sorted(expected)
    # validate's regional baseline compiles the same instances
    assert [id(m) for _, children in repeated_blocks(model) for m in children] == [id(m) for m in group.modules]
    from rewriter.engine.variants import prepare

    done = prepare("regional", harness_module(src).build_model(), "eager")
    assert done["blocks"] == len(expected) and "ResNetBasicLayer" in done["compiled"]

    rungs = run_rungs(src, tmp_path, [{"batch": 2, "size": 32}], {"granularity"})
    g = rungs["granularity"].measurement
    assert g["class"] == "ResNetBasicLayer" and g["instances"] == len(expected)
    assert g["containers"] == stages
    assert sorted(g["per_instance_ms"]) == sorted(expected)  # every stage's blocks are in the sum
    assert 0 < g["share"] <= 1
    assert g["distinct_shapes"] == len(signatures)
    assert f"{len(expected)} x ResNetBasicLayer in 4 containers" in rungs["granularity"].verdict


def test_hf_resnet_per_shape_graphs_and_the_recompile_limit_agree_with_torch(tmp_path):
    """HF ResNet-18 at two image sizes: its blocks differ in width, so one graph per parameter
    shape; the rung's graphs per shape, their sum and whether the recompile limit was hit are what
    torch itself measured and warned, not one graph serving all."""
    pytest.importorskip("transformers")
    src = write_harness(tmp_path, RESNET)
    shapes = [{"batch": 2, "size": 32}, {"batch": 2, "size": 24}]
    harness = harness_module(src)
    model = harness.build_model().eval()
    [group] = [g for g in find_block_groups(model) if g.cls.__name__ == "ResNetBasicLayer"]
    torch.manual_seed(0)
    truth = what_torch_says(model, group.cls, [harness.make_inputs(**s) for s in shapes])
    assert truth["graphs"][0] == len(group.shapes)  # one graph per parameter-shape group, measured

    rungs = run_rungs(src, tmp_path, shapes, {"instance_recompiles", "granularity"})
    ir = rungs["instance_recompiles"]
    assert ir.status == "ok", ir.reason
    m = ir.measurement
    assert m["distinct_shapes"] == len(group.shapes) == rungs["granularity"].measurement["distinct_shapes"]
    assert m["graphs_per_shape"] == truth["graphs"]
    assert m["graphs"] == sum(truth["graphs"])
    assert m["limit_hit"] is bool(truth["warned"] or truth["counted"])
    assert len(m["limit_hits"]) == len(truth["warned"])
    if truth["warned"]:
        assert f"recompile limit ({m['recompile_limit']}) hit" in ir.verdict
        assert f"({m['recompile_limit']})" in truth["warned"][0]
    else:
        assert f"{len(group.shapes)} parameter shapes" in ir.verdict and "within the recompile limit" in ir.verdict
    assert m["recompiles"] == 0  # size guards only: no per-instance value state


@pytest.mark.parametrize("widths, limit", [(10, None), (4, None), (4, 3), (3, 3)])
def test_planted_widths_report_the_recompile_limit_exactly_when_torch_hits_it(tmp_path, widths, limit):
    """Instances of one class that differ in width: one graph per width; past the limit Dynamo runs
    the rest eager. The rung must say so exactly when torch does (lowering the limit shows the
    value is read from Dynamo's config and warning, not assumed to be 8)."""
    import torch._dynamo.config as config

    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    with config.patch(**({name: limit} if limit is not None else {})):
        planted(tmp_path, widths, config, name)


def planted(tmp_path: Path, widths: int, config, name: str) -> None:
    src = write_harness(tmp_path, PLANTED.format(widths=[8 + 4 * i for i in range(widths)]))
    harness = harness_module(src)
    model = harness.build_model()
    torch.manual_seed(0)
    truth = what_torch_says(model, type(model.blocks[0]), [harness.make_inputs()])
    hit = bool(truth["warned"] or truth["counted"])
    assert hit is (widths > getattr(config, name))  # what torch did, in the terms of this case

    rungs = run_rungs(src, tmp_path, [{"batch": 2}], {"instance_recompiles"})
    ir = rungs["instance_recompiles"]
    m = ir.measurement
    assert m["distinct_shapes"] == widths and m["instances"] == widths
    assert m["limit_hit"] is hit
    assert m["graphs"] == truth["graphs"][0]
    assert m["recompile_limit"] == getattr(config, name)
    assert [f.kind for f in ir.findings].count("recompile_limit") == (1 if hit else 0)
    if hit:
        assert f"recompile limit ({getattr(config, name)}) hit" in ir.verdict and "the rest run eager" in ir.verdict
        assert m["limit_hits"][0]["function"] == "forward"
    else:
        assert f"{widths} parameter shapes" in ir.verdict and "within the recompile limit" in ir.verdict


def test_hf_vit_encoder_layers_are_the_block(tmp_path):
    transformers = pytest.importorskip("transformers")
    src = write_harness(tmp_path, VIT)
    model = harness_module(src).build_model()
    expected = [n for n, m in model.named_modules() if isinstance(m, transformers.models.vit.modeling_vit.ViTLayer)]
    [first, *_] = find_block_groups(model)
    assert first.instances == expected and len(first.shapes) == 1
    rungs = run_rungs(src, tmp_path, [{"batch": 2, "size": 32}], {"granularity", "instance_recompiles"})
    g = rungs["granularity"].measurement
    assert (g["class"], g["instances"], g["distinct_shapes"]) == ("ViTLayer", len(expected), 1)
    assert sorted(g["per_instance_ms"]) == sorted(expected)
    assert rungs["instance_recompiles"].status == "ok", rungs["instance_recompiles"].reason
    ir = rungs["instance_recompiles"].measurement
    assert ir["graphs_per_shape"] == [1] and ir["limit_hit"] is False


def test_stacks_and_module_dicts_of_one_class_are_one_block():
    """An encoder ModuleDict and a decoder ModuleList holding one class: one block, two containers,
    one shape group per width; an MoE block's experts stay inside their block."""

    class Block(nn.Module):
        def __init__(self, width: int, experts: int = 0) -> None:
            super().__init__()
            self.fc = nn.Linear(width, width)
            self.experts = nn.ModuleList([nn.Sequential(nn.Linear(width, width)) for _ in range(experts)])

    class Stacks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.ModuleDict({"a": Block(4, 2), "b": Block(4, 2)})
            self.decoder = nn.ModuleList([Block(8, 2)])

    model = Stacks()
    [group] = find_block_groups(model)
    assert group.cls is Block
    assert group.instances == ["encoder.a", "encoder.b", "decoder.0"]
    assert [c.name for c in group.containers] == ["encoder", "decoder"]
    assert [s.instances for s in group.shapes] == [["encoder.a", "encoder.b"], ["decoder.0"]]


def test_the_compile_count_agrees_with_the_graphs_dynamo_captured_per_shape():
    """The compiles the amortization counts are the graphs Dynamo captured per shape: a cold run
    with new_graphs 7 + 1 is 8 compiles, not 2 (the shapes that compiled). Two code objects
    compiled once each are 2 compiles, not 1 + 0 recompiles."""
    from rewriter.engine.cold import compiles_counted

    resnet = {"compile": {"unique_graphs": 8, "recompiles": 7},
              "shapes": [{"new_graphs": 7, "new_recompiles": 6}, {"new_graphs": 1, "new_recompiles": 2}]}
    assert compiles_counted(resnet) == sum(e["new_graphs"] for e in resnet["shapes"])
    two_frames = {"compile": {"unique_graphs": 2, "recompiles": 0}, "shapes": [{"new_graphs": 2, "new_recompiles": 0}]}
    assert compiles_counted(two_frames) == 2
    assert compiles_counted({"compile": {"unique_graphs": 0, "recompiles": 0}, "shapes": [{"new_graphs": 0, "new_recompiles": 0}]}) == 0


BROKEN = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = self.fc(x)
        print("a graph break inside the block")
        return y.relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def build_model():
    torch.manual_seed(0)
    return Net().eval()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 16),)
"""


def test_a_graph_break_is_not_read_as_one_graph_per_instance(tmp_path):
    """Two graphs per call from a break inside the block, no recompile across instances: the
    verdict says the instances share the code and a break splits each call (it said "one graph
    serves all 2 instances ... (2 + 2)" on GPT-2)."""
    src = write_harness(tmp_path, BROKEN)
    ir = run_rungs(src, tmp_path, [{"batch": 2}, {"batch": 3}], {"instance_recompiles"})["instance_recompiles"]
    m = ir.measurement
    assert m["recompiles"] == 0 and m["graphs_per_shape"][0] == 2, m
    assert "one graph serves" not in ir.verdict
    assert "share one compiled code" in ir.verdict and "a graph break splits each call" in ir.verdict, ir.verdict


def test_two_graphs_per_call_are_not_called_a_graph_break_the_graph_break_rung_did_not_count(tmp_path, monkeypatch):
    """A newcomer's tiny Llama (transformers 5.24): 'no graph breaks' in the graph-break rung and
    'a graph break splits each call' here. With that rung run and finding none, the verdict says
    what was counted and does not name a break."""
    from dataclasses import replace

    from rewriter.diagnose.rung import RungResult
    from rewriter.diagnose.rungs import graph_breaks

    monkeypatch.setattr(graph_breaks, "RUNG", replace(graph_breaks.RUNG, run=lambda ctx: RungResult(
        "graph_breaks", "graph_breaks", verdict="no graph breaks")))
    src = write_harness(tmp_path, BROKEN)
    res = run_rungs(src, tmp_path, [{"batch": 2}, {"batch": 3}], {"graph_breaks", "instance_recompiles"})
    ir = res["instance_recompiles"]
    assert res["graph_breaks"].ok and not res["graph_breaks"].findings
    assert "a graph break splits" not in ir.verdict, ir.verdict
    assert "each call ran more than one graph, though the graph-break rung counted no graph break" in ir.verdict, ir.verdict


def test_dynamos_counters_are_read_once_per_shape(tmp_path, monkeypatch):
    """The counts after one shape are the next shape's "before" (they were read twice per shape,
    each time listing the compiled code's cache entries); the figures add up as before."""
    from rewriter.diagnose.rungs import instance_recompiles

    calls = []
    real = instance_recompiles._dynamo_counts

    def counted(code):
        calls.append(code)
        return real(code)

    monkeypatch.setattr(instance_recompiles, "_dynamo_counts", counted)
    shapes = [{"batch": 2}, {"batch": 3}, {"batch": 4}]
    m = run_rungs(write_harness(tmp_path, BROKEN), tmp_path, shapes, {"instance_recompiles"})["instance_recompiles"].measurement
    assert len(calls) == len(shapes) + 1
    assert m["shapes_run"] == 3 and sum(m["graphs_per_shape"]) == m["graphs"], m


SIZED = """
import torch
from torch import nn


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Blk() for _ in range(4))

    def forward(self, x):  # the odd blocks see 12 of the 24 tokens, the even ones 8
        for i, block in enumerate(self.blocks):
            k = 8 + 4 * (i % 2)
            x = torch.cat([block(x[:, :k]), x[:, k:]], dim=1)
        return x


def build_model():
    torch.manual_seed(0)
    return Net().eval()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 24, 16),)
"""


def test_instances_called_at_different_sizes_are_not_said_to_share_one_graph(tmp_path):
    """Flux's single-stream block (diffusers, tiny config): "one graph serves all 2 instances ... at
    each input shape (4 graph(s) ... (2 + 2))". Instances that see tensors of different sizes at one
    input shape recompile on those sizes: more than one graph per shape, no per-instance state."""
    src = write_harness(tmp_path, SIZED)
    ir = run_rungs(src, tmp_path, [{"batch": 2}, {"batch": 3}], {"instance_recompiles"})["instance_recompiles"]
    m = ir.measurement
    assert m["recompiles"] == 0 and m["graphs_per_shape"][0] == 2 and m["shape_recompiles"] >= 1, m
    assert "one graph serves" not in ir.verdict, ir.verdict
    assert "share one compiled code, without a recompile on per-instance state" in ir.verdict, ir.verdict
    assert "tensors of different sizes get a graph each" in ir.verdict and "dynamic shapes" in ir.verdict, ir.verdict


WRAPPED = """
import functools

import torch
from torch import nn


def checkpointing(forward):
    # transformers 5's GradientCheckpointingLayer: the frame Dynamo compiles is this wrapper,
    # whose code is named forward_with_checkpointing while __name__ says forward
    @functools.wraps(forward)
    def forward_with_checkpointing(self, *args, **kwargs):
        return forward(self, *args, **kwargs)
    return forward_with_checkpointing


class Blk(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx
        self.lin = nn.Linear(16, 16)

    @checkpointing
    def forward(self, x, state):
        if not state[self.idx]:  # per-instance state, as DynamicCache.layers[i].is_initialized
            state[self.idx] = True
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Blk(i) for i in range(2))

    def forward(self, x):
        state = [False, False]
        for block in self.blocks:
            x = block(x, state)
        return x


def build_model():
    torch.manual_seed(0)
    return Net().eval()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 16),)
"""

GPT2 = """
import torch
import transformers


def build_model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=128)
    return transformers.GPT2LMHeadModel(config).eval()


def make_inputs(batch: int = 2, seq: int = 16):
    return {"input_ids": torch.randint(0, 128, (batch, seq))}
"""


def test_a_wrapped_forward_s_per_instance_recompiles_are_counted(tmp_path):
    """A block whose forward is wrapped (functools.wraps) recompiles in the wrapper's frame, named
    by its code (``forward_with_checkpointing``), not ``__name__``: its per-instance recompiles
    were not matched and the verdict said "share one compiled code, without a recompile across
    instances" over 2 + 2 graphs."""
    src = write_harness(tmp_path, WRAPPED)
    ir = run_rungs(src, tmp_path, [{"batch": 2}], {"instance_recompiles"})["instance_recompiles"]
    assert ir.measurement["graphs_per_shape"] == [2], ir.measurement
    assert ir.measurement["recompiles"] == 1, ir.measurement
    assert "share one compiled code" not in ir.verdict and "1 recompile(s) across 2 instances of Blk" in ir.verdict, ir.verdict


def test_tiny_gpt2_s_per_instance_cache_recompile_is_reported(tmp_path):
    """A newcomer's 2-layer GPT-2 (transformers 5.24): each GPT2Block recompiles on the
    DynamicCache's ``layers[0].is_initialized`` guard in GradientCheckpointingLayer's wrapper; the
    rung said the instances share one compiled code without a recompile."""
    pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    if GPT2Block.forward.__code__.co_name == GPT2Block.forward.__name__:
        pytest.skip("this transformers does not wrap the layer's forward")
    src = write_harness(tmp_path, GPT2)
    ir = run_rungs(src, tmp_path, [{"batch": 2, "seq": 16}], {"instance_recompiles"})["instance_recompiles"]
    assert ir.measurement["recompiles"] >= 1, ir.measurement
    assert "without a recompile across instances" not in ir.verdict, ir.verdict


TRAINED = """
import torch
from torch import nn


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Blk() for _ in range(3))

    def forward(self, x):  # the first block's input is the data's, the others' a block's output
        for block in self.blocks:
            x = block(x)
        return x


def build_model():
    torch.manual_seed(0)
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 16),)
"""


def test_a_requires_grad_recompile_in_training_is_not_said_to_be_on_sizes(tmp_path):
    """Training, one shape: the first block's input does not require grad, the others' do, and the
    block recompiles on that ("tensor 'x' requires_grad mismatch", which the recompiles rung
    names). The verdict said "recompile(s) on tensor sizes that differ between calls: dynamic
    shapes", contradicting it."""
    src = write_harness(tmp_path, TRAINED)
    spec = Harness(file="harness.py", shapes=[{"batch": 2}], mode="training", device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", only={"instance_recompiles"}, backend="eager", steps=1)
    ir = {r.name: r for r in outcome.rungs}["instance_recompiles"]
    m = ir.measurement
    assert m["recompiles"] == 0 and m["shape_recompiles"] == 0, m
    assert m["property_recompiles"] >= 1 and m["properties"] == ["requires_grad"], m
    assert "sizes" not in ir.verdict and "dynamic shapes" not in ir.verdict, ir.verdict
    assert "requires_grad mismatch" in ir.verdict and "tensors that differ in requires_grad get a graph each" in ir.verdict, ir.verdict
