"""The first call's outputs are copied before the next calls (rewriter/engine/steps.py
``copied``): under CUDA graphs (``mode="reduce-overhead"``) the next replay overwrites a graph's
outputs, and the copy compared later must hold none of them. A transformers ``DynamicCache`` in
the output (Llama and Mixtral return one by default) is an object pytree does not flatten: its
keys and values were left uncopied, and Llama's and Mixtral's whole compiles with CUDA graphs
failed on an H100 with "accessing tensor output of CUDAGraphs that has been overwritten by a
subsequent run" when the comparison read them (BENCHMARKS.md, "Model zoo, part 19"). Here the
replay is played by writing into the original tensors in place."""

from __future__ import annotations

import pytest

from rewriter.engine.compare import compare_trees, state_tensors
from rewriter.engine.steps import copied

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_a_cache_in_the_output_is_copied_with_its_tensors():
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 64, (1, 8)))
    held = state_tensors(out.past_key_values)
    assert len(held) >= 4, held  # two layers' keys and values
    copy = copied(out)
    expected = {p: t.clone() for p, t in held}
    for _, t in held:
        t.fill_(0)  # the next replay, overwriting the graph's static outputs in place
    out.logits.fill_(0)
    copied_held = dict(state_tensors(copy.past_key_values))
    assert copied_held.keys() == expected.keys()
    for p, t in expected.items():
        assert torch.equal(copied_held[p], t), p
    assert copy.logits.abs().sum() > 0
    assert type(copy.past_key_values) is type(out.past_key_values)


def test_a_held_tensor_with_a_grad_fn_is_copied_detached():
    """Training: the tensors an object holds may carry a grad_fn, which ``copy.deepcopy`` refuses."""
    import torch

    class Holder:
        def __init__(self, t):
            self.state = [t]

    w = torch.ones(3, requires_grad=True)
    out = {"y": w * 2, "held": Holder(w * 3)}
    copy = copied(out)
    assert copy["held"].state[0].grad_fn is None and torch.equal(copy["held"].state[0], torch.full((3,), 3.0))
    assert copy["held"] is not out["held"]
    assert not compare_trees(copy, {"y": w.detach() * 2, "held": Holder(torch.full((3,), 3.0))}).mismatches
