"""The torch names ``kernel: stub`` accepts come from a list that matches the torch tested with."""

from __future__ import annotations

import pytest

from rewriter.actions import torch_api


def test_the_list_is_the_installed_torchs():
    torch = pytest.importorskip("torch")
    if torch.__version__.split("+")[0] != torch_api.TORCH_VERSION.split("+")[0]:
        pytest.skip(f"the list is torch {torch_api.TORCH_VERSION}'s; this is torch {torch.__version__}")
    version, functions, methods = torch_api.collect()
    from rewriter.actions._torch_api_names import FUNCTIONS, TENSOR_METHODS

    assert sorted(functions ^ FUNCTIONS) == [], "run python -m rewriter.actions.torch_api"
    assert sorted(methods ^ TENSOR_METHODS) == [], "run python -m rewriter.actions.torch_api"


@pytest.mark.parametrize("path,known", [
    ("torch.special.erf", True), ("torch.nn.functional.gelu", True), ("torch.topk", True),
    ("torch.linalg.norm", True), ("torch.fft.rfft", True),
    ("torch.not_an_op", False), ("torch.nn.Linear", False), ("torch.nn", False), ("numpy.sort", False),
    ("torch._C._nn.gelu", False),
])
def test_is_torch_function(path, known):
    assert torch_api.is_torch_function(path) is known


def test_is_tensor_method():
    assert torch_api.is_tensor_method("erf") and torch_api.is_tensor_method("softmax")
    assert not torch_api.is_tensor_method("special") and not torch_api.is_tensor_method("__add__")
