"""benchmarks/attention_path.py, the probe of which attention path each compile of a zoo family
traces (a fused SDPA op or its math decomposition), on the CPU with the zoo's tiny ViT."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_path.py"


def test_every_way_of_compiling_records_the_attention_op_its_forward_graph_traced():
    spec = importlib.util.spec_from_file_location("attention_path_under_test", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.probe("vit", smoke=True, device="cpu")
    for mode in mod.MODES:
        assert "error" not in out[mode], (mode, out[mode])
        # the tiny ViT has 2 layers: one SDPA per layer, on the CPU its flash kernel, in one graph or
        # one per compiled block instance
        ops = [op for g in out[mode]["graphs"] for op in g["ops"] if "scaled_dot_product" in op]
        assert ops == ["aten._scaled_dot_product_flash_attention_for_cpu.default"] * len(ops) and ops, (mode, out[mode])
        assert all(g["sdpa_masks"] == ["none"] for g in out[mode]["graphs"]), out[mode]  # ViT attends without a mask
    assert sum(out["whole-static"]["graphs"][0]["ops"].values()) == 2, out["whole-static"]


def test_the_sdpa_arguments_each_way_of_compiling_traces_are_recorded():
    """benchmarks/sdpa_choice.py on the CPU: one SDPA call layout per way of compiling (the tiny ViT's
    two layers call it alike), each with the Dynamo graph's FakeTensor layout of q, k and v and the
    call's keywords; the GPU-only parts (eligibility, timing) are absent, not faked."""
    spec = importlib.util.spec_from_file_location("sdpa_choice_under_test", PROBE.parent / "sdpa_choice.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.probe("vit", smoke=True, device="cpu")
    for mode in ("whole", "block"):
        (call,) = out[mode]
        q = call["args"][0]
        assert q["dtype"] == "torch.float32" and len(q["shape"]) == 4 and q["stride"][-1] == 1, call
        assert call["attn_mask"] is None and call["kwargs"]["is_causal"] is False and call["eligible"] is None
    assert "timing" not in out
