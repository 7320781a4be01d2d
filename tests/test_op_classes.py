"""The op mix's categories of aten operators (:mod:`rewriter.diagnose.classify`): an attention,
GEMM or norm op's own backward is that op's kind, not pointwise math."""

from __future__ import annotations

import pytest

from rewriter.diagnose.classify import classify_aten


@pytest.mark.parametrize("op, kind", [
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("aten::_scaled_dot_product_efficient_attention_backward", "attention"),
    ("aten::native_layer_norm_backward", "norm"),
    ("aten::gelu_backward", "elementwise"),
    ("aten::threshold_backward", "elementwise"),
    ("aten::mm", "gemm"),
])
def test_an_ops_backward_keeps_its_kind(op, kind):
    assert classify_aten(op) == kind
