"""Run in a subprocess by test_transformers_real.py: build tiny Llama and GPT-2 models from configs
(no download) with the ``transformers`` first on ``sys.path``, and report what Dynamo saw.

``python transformers_worker.py save OUT.pt llama,gpt2 [--tiny]``: build each model from a fixed seed, save its
state_dict, inputs and outputs. ``python transformers_worker.py check OUT.pt llama,gpt2 [--tiny]``: build each model
again (from the package on sys.path, which the test puts first), load the saved state_dict
strictly, run the saved inputs and print one JSON line: per model, the state_dict keys match,
the max abs output difference, and Dynamo's counters. ``--tiny``: one layer, one input shape
(the Inductor test).
"""

from __future__ import annotations

import json
import sys

import torch


def build(name: str, layers: int = 2):
    import transformers

    torch.manual_seed(0)
    if name == "llama":
        config = transformers.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        )
        config._attn_implementation = "eager"
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=layers, n_head=4, n_positions=64)
    config._attn_implementation = "eager"
    return transformers.GPT2LMHeadModel(config).eval()


def forward(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def main(mode: str, path: str, models: list[str], tiny: bool = False) -> None:
    import transformers
    from torch._dynamo.utils import counters

    report = {"transformers": transformers.__file__}
    saved = torch.load(path) if mode == "check" else {}
    for name in models:
        counters.clear()
        model = build(name, layers=1 if tiny else 2)
        if mode == "save":
            ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
            inputs = [ids] if tiny else [ids, ids[:, :7].clone()]
            saved[name] = {"state": model.state_dict(), "ids": inputs,
                           "out": [forward(model, x) for x in inputs]}
            report[name] = {"stats": dict(counters["stats"])}
            continue
        ref = saved[name]
        keys_equal = list(model.state_dict()) == list(ref["state"])
        model.load_state_dict(ref["state"], strict=True)
        outs = [forward(model, ids) for ids in ref["ids"]]
        diff = max(float((o - r).abs().max()) for o, r in zip(outs, ref["out"]))
        report[name] = {
            "keys_equal": keys_equal,
            "max_abs_diff": diff,
            "stats": dict(counters["stats"]),
            "frames": dict(counters["frames"]),
            "graph_break": {str(k): v for k, v in counters["graph_break"].items()},
        }
    if mode == "save":
        torch.save(saved, path)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3].split(","), tiny="--tiny" in sys.argv[4:])
