"""diagnose end to end on HF transformers models built from small configs (random weights, no
download): Llama, GPT-2 and Mixtral. The plan must load and rewrite cleanly; the blocks live in
transformers (outside SRC), which the report must say instead of targeting them."""

from __future__ import annotations

import json
import textwrap

import pytest

from rewriter.cli import main
from rewriter.plan import load_plan
from rewriter.rewrite import plan_rewrite

pytest.importorskip("transformers")

CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", "vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2"),
}


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_diagnose_runs_end_to_end_on_hf_model(tmp_path, name):
    config, cls, kwargs = CONFIGS[name]
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(textwrap.dedent(f"""\
        import torch
        import transformers


        def build_model():
            torch.manual_seed(0)
            config = transformers.{config}({kwargs})
            model = transformers.{cls}(config)
            model.config.use_cache = False
            return model


        def make_inputs(batch: int = 2, seq: int = 16):
            return {{"input_ids": torch.randint(0, 256, (batch, seq))}}
    """))
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=2,seq=16", "--shape", "batch=2,seq=12", "--steps", "2"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["complete"] is True
    by = {r["name"]: r for r in report["rungs"]}
    failed = {n: r["reason"] for n, r in by.items() if r["status"] == "error"}
    assert not failed, failed
    assert by["op_mix"]["measurement"]["total_ms"] > 0
    assert by["granularity"]["measurement"]["instances"] == 2
    assert by["granularity"]["measurement"]["target"] is None  # the decoder layer lives in transformers
    loaded = load_plan(out / "plan.yaml")
    assert not loaded.plan.actions  # nothing under SRC to target
    assert plan_rewrite(loaded, src).changes == []
    assert any("defined outside SRC: no compile target" in n for n in report["notes"])
