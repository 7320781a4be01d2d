"""The instance-recompiles rung on a model that compiles itself whole (``model.compile()`` in its
build, as a user of transformers writes it): the rung's compile of the decoder layer's forward,
traced from inside the program's own compile, failed in Dynamo ("'CatchErrorsWrapper' object has
no attribute '__closure__'"), so the rung reported an error on a program that runs. The program's
own whole-model compile is now set aside for the sweep."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from rewriter.diagnose.context import Context  # noqa: E402
from rewriter.diagnose.rungs import instance_recompiles  # noqa: E402
from rewriter.diagnose.session import Session  # noqa: E402
from rewriter.diagnose.rungs.granularity import find_blocks  # noqa: E402
from rewriter.harness import load_harness  # noqa: E402
from rewriter.plan import Harness  # noqa: E402

HARNESS = """\
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build_model():
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.compile(backend="eager", fullgraph=True)
    return model


def make_inputs(batch: int = 1, seq: int = 32):
    return {"input_ids": torch.randint(0, 256, (batch, seq))}
"""


def test_the_rung_runs_on_a_model_that_compiles_itself_whole(tmp_path):
    (tmp_path / "harness.py").write_text(HARNESS)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"seq": 32}, {"seq": 48}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    model, _, _ = ctx.reference()
    ctx.evidence.blocks = find_blocks(model, tmp_path)
    r = instance_recompiles.run(ctx)
    assert r.status == "ok", (r.status, r.reason)
    assert r.measurement.get("instances") == 2 or "instances" in str(r.measurement), r.measurement
    assert model._compiled_call_impl is not None  # the program's own compile is put back


FORWARD_ATTRIBUTE = HARNESS.replace('model.compile(backend="eager", fullgraph=True)',
                                    'model.forward = torch.compile(model.forward, backend="eager")')


def test_the_rung_runs_on_a_model_whose_forward_attribute_is_compiled(tmp_path):
    """``model.forward = torch.compile(model.forward)`` in the build: the third form a model
    carries its compile in (:func:`rewriter.engine.watch.compiled_modules`). The rung's compile of
    the decoder layer traced from inside it failed in Dynamo as ``model.compile()``'s did; it is
    set aside for the sweep and put back after."""
    (tmp_path / "harness.py").write_text(FORWARD_ATTRIBUTE)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"seq": 10}, {"seq": 14}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    model, _, _ = ctx.reference()
    compiled = model.__dict__["forward"]
    ctx.evidence.blocks = find_blocks(model, tmp_path)
    r = instance_recompiles.run(ctx)
    assert r.status == "ok", (r.status, r.reason)
    assert r.measurement["instances"] == 2, r.measurement
    assert model.__dict__.get("forward") is compiled  # the program's own compile is put back


def test_a_probe_failing_inside_dynamo_is_said_to_be_stackparts_probe(tmp_path, monkeypatch):
    """The rung's compile of the block (its probe) failing inside Dynamo was reported as
    "build_model() model forward: raised InternalTorchDynamoError: ...", the user's forward
    raising, on a program that runs; the message names stackpart's probe."""
    import torch
    from torch._dynamo.exc import InternalTorchDynamoError

    from rewriter.diagnose.session import HarnessFailure

    (tmp_path / "harness.py").write_text(HARNESS.replace('model.compile(backend="eager", fullgraph=True)', ""))
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"seq": 10}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    model, _, _ = ctx.reference()
    ctx.evidence.blocks = find_blocks(model, tmp_path)

    def compile_that_fails(fn, **_):
        def compiled(*args, **kwargs):
            raise InternalTorchDynamoError("AttributeError: 'CatchErrorsWrapper' object has no attribute '__closure__'")
        return compiled

    monkeypatch.setattr(torch, "compile", compile_that_fails)
    with pytest.raises(HarnessFailure) as info:
        instance_recompiles.run(ctx)
    said = info.value.describe()
    assert "stackpart's probe (LlamaDecoderLayer.forward compiled by itself" in said, said
    assert "failed inside Dynamo (InternalTorchDynamoError: AttributeError" in said, said
    assert "build_model() model forward: raised" not in said, said


COMPILED_CHILD = HARNESS.replace('model.compile(backend="eager", fullgraph=True)',
                                 'model.lm_head = torch.compile(model.lm_head, backend="eager")')


def test_the_rung_runs_on_a_model_with_a_compiled_child(tmp_path):
    """``model.lm_head = torch.compile(model.lm_head)`` in the build: the wrapper's own ``forward``
    attribute is its compiled call, not a compiled ``forward`` of the user's module, and without
    it the wrapper has none (nn.Module's NotImplementedError). The wrapper is set aside as one
    compile (:func:`rewriter.engine.watch.carried_compiles`): the module it wraps runs for the
    sweep, and the wrapper is put back after."""
    (tmp_path / "harness.py").write_text(COMPILED_CHILD)
    spec = Harness.model_validate({"file": "harness.py", "shapes": [{"seq": 10}, {"seq": 14}], "device": "cpu"})
    ctx = Context(session=Session(load_harness(spec, tmp_path)), out_dir=tmp_path)
    model, _, _ = ctx.reference()
    wrapper = model.lm_head
    ctx.evidence.blocks = find_blocks(model, tmp_path)
    r = instance_recompiles.run(ctx)
    assert r.status == "ok", (r.status, r.reason)
    assert r.measurement["instances"] == 2, r.measurement
    assert model.lm_head is wrapper and "forward" in vars(wrapper)  # the program's own compile is put back
