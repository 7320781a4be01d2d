"""validate's naive regional baseline on a model whose block already carries ``@torch.compile``
on its ``forward``: the baseline runs (the program's own compile is the regional one there)
instead of failing with torch's "compile_wrapper already has a get_compiler_config attribute"."""

from __future__ import annotations


def test_regional_baseline_leaves_a_block_the_program_compiles_to_it() -> None:
    import torch
    import torch.nn as nn

    from rewriter.engine.variants import prepare

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        @torch.compile(backend="eager")
        def forward(self, x):
            return x + torch.relu(self.fc(x))

    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return x * torch.sigmoid(self.fc(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])
            self.mlps = nn.ModuleList([Plain(), Plain()])

        def forward(self, x):
            for b, m in zip(self.blocks, self.mlps):
                x = m(b(x))
            return x

    torch._dynamo.reset()
    model = Net()
    x = torch.randn(2, 8)
    expected = model(x)
    done = prepare("regional", model, "eager")
    assert done["blocks"] == 4, done
    assert "2 block(s) left to the program's own compile" in done["compiled"], done
    torch.testing.assert_close(model(x), expected)
    assert all(hasattr(m.forward, "_torchdynamo_orig_callable") for m in model.mlps)  # the plain blocks compiled
    torch._dynamo.reset()
