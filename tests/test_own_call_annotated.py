"""own_call regional on an annotated assignment of the program's compile (``model: nn.Module =
torch.compile(...)``): the loop is written and the annotation kept, as for a plain assignment."""

import textwrap
from pathlib import Path
import subprocess
import sys

def test_regional_edit_of_an_annotated_assignment(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(textwrap.dedent('''\
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x


        def build():
            model: nn.Module = torch.compile(Net(), backend="eager")
            return model
    '''))
    (tmp_path / "plan.yaml").write_text(textwrap.dedent('''\
        version: 1
        actions:
          - action: compile
            target: model.py::build
            own_call: {regional: layers}
    '''))
    r = subprocess.run([sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(tmp_path / "plan.yaml"), str(src), "--apply", "--no-validate"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (src / "model.py").read_text()
    assert '    model: nn.Module = Net()\n    for block in model.layers:\n        block.compile(backend="eager")\n    return model\n' in text, text
