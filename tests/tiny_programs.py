"""Program texts that several test files write into a tree under test, kept once here.

Each is a whole file as a user would write it; a test that needs a variant derives it from these
(``str.replace``) so the variant's difference is what the test names.
"""

from __future__ import annotations

#: ``model.py``: a ``Net`` of two ``Block``s (``Linear(8, 8)`` then ``relu``), each block a
#: regional compile target (``model.py::Block``).
NET_MODEL = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
"""


def net_harness(batch: int = 2) -> str:
    """``harness.py`` for ``model.py``'s ``Net``: ``build_model()`` and ``make_inputs(batch)``, a
    ``(batch, 8)`` float tensor, ``batch`` defaulting to ``batch``."""
    return f"""\
import torch
from model import Net


def build_model():
    return Net()


def make_inputs(batch: int = {batch}):
    return (torch.randn(batch, 8),)
"""


#: ``harness.py`` for :data:`NET_MODEL` with ``batch`` defaulting to 2.
NET_HARNESS = net_harness()

#: A compiled function that divides by ``.item()``: the graph break ``check`` reports as SP103.
ITEM_STEP = "import torch\n\n@torch.compile\ndef step(x):\n    return x / x.sum().item()\n"

#: ``mark_dynamic`` with ``min=1``, which ``check`` reports as SP106 and fixes to :data:`MIN1_FIXED`.
MIN1 = "import torch\n\ntorch._dynamo.mark_dynamic(x, 1, min=1, max=64)\n"
#: SP106's fix of :data:`MIN1`: maybe_mark_dynamic accepts the size-1 call that mark_dynamic(min=1) raises at.
MIN1_FIXED = MIN1.replace("mark_dynamic(x, 1, min=1, max=64)", "maybe_mark_dynamic(x, 1)")
