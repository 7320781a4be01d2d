"""Outputs that hold tensors inside objects (transformers' DynamicCache) are compared by those
tensors, not by identity, so validate does not fail a plan that changed nothing with ``got
DynamicCache(...), expected DynamicCache(...)`` (docs/library-models.md)."""

from __future__ import annotations

import pytest
import torch

from rewriter.engine.compare import compare_trees, state_tensors


class Layer:
    def __init__(self, k: torch.Tensor) -> None:
        self.keys, self.values, self.seen = k, k * 2, 3


class Cache:
    def __init__(self, scale: float = 1.0) -> None:
        self.layers = [Layer(torch.ones(2, 3) * scale), Layer(torch.zeros(2, 3))]


class Config:  # no tensors, identity equality
    hidden = 8


def test_an_object_holding_tensors_is_compared_by_them():
    assert [p for p, _ in state_tensors(Cache())] == [".layers[0].keys", ".layers[0].values", ".layers[1].keys", ".layers[1].values"]
    same = compare_trees({"out": torch.ones(2), "cache": Cache(), "config": Config()},
                         {"out": torch.ones(2), "cache": Cache(), "config": Config()})
    assert same.ok and same.leaves == 5
    wrong = compare_trees({"cache": Cache(2.0)}, {"cache": Cache()})
    assert not wrong.ok and wrong.mismatches[0].path == "['cache'].layers[0].keys"


def test_transformers_dynamic_cache_is_compared_by_its_keys_and_values():
    transformers = pytest.importorskip("transformers")

    def cache(scale: float) -> object:
        c = transformers.DynamicCache()
        for i in range(2):
            c.update(torch.ones(1, 2, 3, 4) * scale, torch.zeros(1, 2, 3, 4), i)
        return c

    assert compare_trees({"past_key_values": cache(1.0)}, {"past_key_values": cache(1.0)}).ok
    assert not compare_trees({"past_key_values": cache(1.5)}, {"past_key_values": cache(1.0)}).ok
