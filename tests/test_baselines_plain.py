"""validate's ``whole`` and ``regional`` baselines are plain compiles of the model even where the
program compiles it itself: the program's compile is taken off first (rewriter/engine/variants.py,
``plain_model``). On top of the program's whole-model compile a block's compile runs inside the
program's compiled frame and never gets a graph of its own, so the "regional" row measured the
program's compile again under another name."""

from __future__ import annotations

import torch
from torch._dynamo.testing import CompileCounter

from rewriter.engine.variants import plain_model, prepare
from tiny_programs import NET_MODEL


_NAMESPACE: dict = {}
exec(compile(NET_MODEL, "model.py", "exec"), _NAMESPACE)  # tiny_programs' Net: two Linear(8, 8) Blocks
Block, Net = _NAMESPACE["Block"], _NAMESPACE["Net"]


def _regional_graphs(model: torch.nn.Module) -> int:
    """Graphs the regional baseline's own compile captures on one call of ``model``."""
    torch._dynamo.reset()
    counter = CompileCounter()
    prepare("regional", model, counter)
    model(torch.randn(2, 8))
    return counter.frame_count


def test_the_regional_baseline_of_a_program_compiled_whole_compiles_its_blocks():
    program = torch.compile(Net(), backend="eager")  # the program's own: model = torch.compile(model)
    plain, taken = plain_model(program)
    assert taken == ["<model>"]
    assert type(plain) is Net
    assert _regional_graphs(plain) >= 1  # the blocks compiled: graphs of Block.forward of their own


def test_on_top_of_the_programs_compile_the_blocks_get_no_graph_of_their_own():
    """The premise: without plain_model, the baseline's block compiles run inside the program's
    compiled frame (Dynamo inlines them) and capture nothing."""
    program = torch.compile(Net(), backend="eager")
    assert _regional_graphs(program) == 0


def test_in_place_and_per_block_compiles_are_taken_off_too():
    net = Net()
    net.compile(backend="eager")  # module.compile(): the compiled call on the module itself
    net.blocks[1] = torch.compile(net.blocks[1], backend="eager")  # a wrapper held by the container
    plain, taken = plain_model(net)
    assert plain is net and sorted(taken) == ["<model>", "blocks.1"]
    assert type(net.blocks[1]) is Block and net._compiled_call_impl is None
    counter = CompileCounter()
    torch._dynamo.reset()
    prepare("whole", plain, counter)
    plain(torch.randn(2, 8))
    assert counter.frame_count == 1  # one whole-model graph: nothing of the program's left underneath


def test_a_program_that_compiles_nothing_is_left_as_it_is():
    net = Net()
    plain, taken = plain_model(net)
    assert plain is net and taken == []
