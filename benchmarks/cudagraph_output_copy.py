"""Probe: does the engine's copy of a first call's outputs survive CUDA graph replays when the
output holds a transformers ``DynamicCache``? (docs/decisions.md, "CUDA graphs and outputs kept
across calls").

A small Llama (the library's defaults: the cache returned), bf16 on CUDA, compiled with
``mode="reduce-overhead"``: one call, its outputs copied two ways (pytree's tensors only, as the
engine did; :func:`rewriter.engine.steps.copied`, which also clones the tensors an object holds),
two more calls, then each copy's cache read back to the host. Prints one JSON line per way:
``{"copy": ..., "read_ok": bool, "error": str | None}``; writes ``$OUT/cudagraph_output_copy.json``.

Usage: ``OUT=dir python benchmarks/cudagraph_output_copy.py`` (needs CUDA, transformers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def main() -> None:
    import torch
    import transformers
    from torch.utils import _pytree as pytree

    from rewriter.engine.compare import state_tensors
    from rewriter.engine.steps import copied

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    ids = torch.randint(0, 1024, (2, 64), device="cuda")
    with torch.no_grad():
        out = compiled(ids)
        ways = {"pytree tensors only": pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, out),
                "steps.copied": copied(out)}
        for _ in range(2):
            compiled(ids)
    rows = []
    for name, copy in ways.items():
        try:
            total = sum(float(t.float().abs().sum().cpu()) for _, t in state_tensors(copy.past_key_values))
            rows.append({"copy": name, "read_ok": True, "error": None, "cache_abs_sum": total})
        except Exception as exc:  # noqa: BLE001 - the probe reports what raised
            rows.append({"copy": name, "read_ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    result = {"torch": torch.__version__, "transformers": transformers.__version__,
              "device": torch.cuda.get_device_name(), "rows": rows}
    for r in rows:
        print(json.dumps(r))
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / "cudagraph_output_copy.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
