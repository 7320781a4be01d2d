"""A program built on an installed library's model (transformers, tiny configs, random weights)
whose harness imports its model function from the program's own file (``from train import
build_model``, as docs/guide.md's step 1 has it):

- the plan's site, where the rewrite applies actions on the library's classes, is that function
  where it is defined (``train.py::build_model``), which the rewrite can decorate; the harness holds
  only the import, which the rewrite cannot decorate (it refuses such a site)."""

from __future__ import annotations

import textwrap

import pytest

from rewriter.cli import main
from rewriter.plan import load_plan
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
HARNESS = textwrap.dedent("""\
    import torch
    from train import build_model


    def make_inputs(batch: int = 2, seq: int = 16):
        return {"input_ids": torch.randint(0, 256, (batch, seq))}
""")


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

