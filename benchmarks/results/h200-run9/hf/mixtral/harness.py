"""Harness for stackpart diagnose (benchmarks/diagnose_hf.py): HF transformers MixtralForCausalLM from a
config with random weights, imported from the copy of transformers in this tree."""

import importlib
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = 'cuda'
CONFIG = {'vocab_size': 32000, 'hidden_size': 1024, 'intermediate_size': 1792, 'num_hidden_layers': 16, 'num_attention_heads': 16, 'num_key_value_heads': 8, 'num_local_experts': 8, 'num_experts_per_tok': 2, 'max_position_embeddings': 2048, 'attn_implementation': 'sdpa', 'use_cache': False}


def _mine(path):
    return os.path.abspath(path).startswith(HERE + os.sep)


if not _mine(transformers.__file__):
    raise ImportError(f"transformers was imported from {transformers.__file__}, not from the copy under {HERE}")


def build_model():
    modeling = importlib.import_module('transformers.models.mixtral.modeling_mixtral')
    if not _mine(modeling.__file__) or os.path.islink(modeling.__file__):
        raise ImportError(f"{modeling.__name__} is {modeling.__file__}, not the real copy under {HERE}")
    torch.manual_seed(0)
    config = transformers.MixtralConfig(**CONFIG)
    with torch.device(DEVICE):
        model = modeling.MixtralForCausalLM(config)
    info = {
        "class": 'MixtralForCausalLM',
        "params": sum(p.numel() for p in model.parameters()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation", None) if hasattr(config, "num_local_experts") else None,
        "modeling_file": os.path.relpath(modeling.__file__, HERE),
        "transformers": transformers.__version__,
    }
    print("harness-info: " + json.dumps(info), file=sys.stderr, flush=True)
    return model.eval()


def make_inputs(batch: int = 8, seq: int = 512):
    g = torch.Generator().manual_seed(1000003 * batch + seq)
    return {"input_ids": torch.randint(0, 32000, (batch, seq), generator=g)}
