"""Harness for stackpart diagnose (benchmarks/diagnose_hf.py): HF transformers GPT2LMHeadModel from a
config with random weights, imported from the copy of transformers in this tree."""

import importlib
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = 'cuda'
CONFIG = {'vocab_size': 50257, 'n_embd': 1024, 'n_layer': 16, 'n_head': 16, 'n_positions': 1024, 'resid_pdrop': 0.0, 'embd_pdrop': 0.0, 'attn_pdrop': 0.0, 'attn_implementation': 'sdpa', 'use_cache': False}


def _mine(path):
    return os.path.abspath(path).startswith(HERE + os.sep)


if not _mine(transformers.__file__):
    raise ImportError(f"transformers was imported from {transformers.__file__}, not from the copy under {HERE}")


def build_model():
    modeling = importlib.import_module('transformers.models.gpt2.modeling_gpt2')
    if not _mine(modeling.__file__) or os.path.islink(modeling.__file__):
        raise ImportError(f"{modeling.__name__} is {modeling.__file__}, not the real copy under {HERE}")
    torch.manual_seed(0)
    config = transformers.GPT2Config(**CONFIG)
    with torch.device(DEVICE):
        model = modeling.GPT2LMHeadModel(config)
    info = {
        "class": 'GPT2LMHeadModel',
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
    return {"input_ids": torch.randint(0, 50257, (batch, seq), generator=g)}
