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
