"""A program built on an installed library's model (transformers, tiny configs, random weights)
whose harness imports its model function from the program's own file (``from train import
build_model``, as docs/guide.md's step 1 has it):

- the plan's site, where the rewrite applies actions on the library's classes, is that function
  where it is defined (``train.py::build_model``), which the rewrite can decorate; the harness holds
  only the import, which the rewrite cannot decorate (it refuses such a site);
- where the program compiles each of the library's blocks itself (``for layer in
  model.model.layers: layer.compile()``), a compile of the block's library class (the per-block
  candidate, targeted by import path) is a second compile of what the program compiles, refused as
  a compile of the block under SRC is: the program's own call is what to change."""

from __future__ import annotations

import runpy
import textwrap
from types import SimpleNamespace

import pytest

from rewriter.cli import main
from rewriter.plan import CompileAction, load_plan
from rewriter.rewrite.transform import plan_rewrite

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TRAIN = textwrap.dedent("""\
    import torch
    import transformers


    def build_model():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, use_cache=False)
        model = transformers.LlamaForCausalLM(config).eval()
    {compile}    return model


    def main():
        model = build_model()
        print(model(torch.randint(0, 256, (2, 16))).logits.shape)


    if __name__ == "__main__":
        main()
""")
PER_LAYER = "    for layer in model.model.layers:\n        layer.compile()\n"
HARNESS = textwrap.dedent("""\
    import torch
    from train import build_model


    def make_inputs(batch: int = 2, seq: int = 16):
        return {"input_ids": torch.randint(0, 256, (batch, seq))}
""")
BLOCK = "transformers.models.llama.modeling_llama:LlamaDecoderLayer"


def _tree(src, compile: str = "") -> None:
    src.mkdir(parents=True, exist_ok=True)
    (src / "train.py").write_text(TRAIN.format(compile=compile))
    (src / "harness.py").write_text(HARNESS)


def test_the_site_is_the_model_function_where_the_program_defines_it(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    _tree(src)
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=2,seq=16", "--steps", "1", "--no-search"])
    assert rc == 0
    loaded = load_plan(out / "plan.yaml")
    assert [a for a in loaded.plan.actions if a.library], loaded.plan.actions  # the rules' proposal targets the library
    assert loaded.plan.site == "train.py::build_model"
    result = plan_rewrite(loaded, src)  # the rewrite takes diagnose's own plan
    train = next(c for c in result.changes if c.relpath == "train.py")
    assert "@apply_plan\ndef build_model():" in train.new.decode()
    assert "harness.py" not in {c.relpath for c in result.changes}


def test_a_compile_of_the_library_block_the_program_compiles_per_layer_is_refused(tmp_path):
    from rewriter.diagnose.candidates import OwnScope, conflict
    from rewriter.diagnose.own_compile import own_compiles

    src = tmp_path / "src"
    _tree(src, PER_LAYER)
    model = runpy.run_path(str(src / "train.py"))["build_model"]()  # compiles nothing until called
    layers = list(model.model.layers)
    block = {"modules": layers, "cls": type(layers[0]), "target": None, "attr": "layers", "containers": []}
    evidence = SimpleNamespace(blocks=[block], own_compiled_modules=None, declared=None, profile=None)
    ctx = SimpleNamespace(reference=lambda: (model, None, None), evidence=evidence, session=SimpleNamespace(src=src))
    scope = OwnScope.of(ctx, own_compiles(src))
    assert scope.block_target == BLOCK
    why = conflict(CompileAction(action="compile", target=BLOCK, strategy="region"), scope)
    assert why == ("the program compiles each LlamaDecoderLayer itself (train.py:11: layer.compile()): a compile of "
                   f"{BLOCK} would compile it a second time; change the program's own call instead")
    # a class of the library outside the blocks the program compiles stays free to compile
    assert conflict(CompileAction(action="compile", target="transformers.models.llama.modeling_llama:LlamaRotaryEmbedding",
                                  strategy="region"), scope) is None
