"""Code a compiled function reaches through calls into helpers of the same file is traced: the
rules see a branch or a graph break there (Dynamo inlines the call), and the message names the
call chain. Checked against Dynamo's own graph-break counter (``backend="eager"``)."""

from __future__ import annotations

import textwrap

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES

CODE = textwrap.dedent(
    """\
    import torch
    from torch import nn

    def gate(x):
        if x.sum() > 0:
            return x
        return -x

    def outer(x):
        return gate(x) * 2

    @torch.compiler.disable
    def logged(x):
        if x.any():
            x = x + 1
        return x

    def unused(x):
        if x.any():
            return x
        return x

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def norm(self, x):
            if x.max() > 1:
                x = x / x.max()
            return x

        def forward(self, x):
            x = self.norm(self.fc(x))
            x = logged(x)
            return outer(x)

    model = torch.compile(Block())
    """
)


def test_branches_in_called_helpers_are_reported_with_the_call_chain():
    found = [f for f in check_text(CODE, "m.py", ALL_RULES).findings if f.code == "SP104"]
    assert [f.line for f in found] == [5, 29]  # gate (two calls deep), Block.norm; not logged, not unused
    assert found[0].message.endswith("(`gate` is called from `outer`, called from compiled `forward`)")
    assert found[1].message.endswith("(`norm` is called from compiled `forward`)")


def test_an_item_in_a_helper_is_reported_too():
    code = CODE.replace("        if x.max() > 1:\n            x = x / x.max()\n", "        x = x / x.max().item()\n")
    found = [(f.code, f.line) for f in check_text(code, "m.py", ALL_RULES).findings if f.code in ("SP103", "SP104")]
    assert found == [("SP104", 5), ("SP103", 29)]


def test_the_reported_branches_break_the_compiled_graph_in_torch():
    """Dynamo's own break reasons put a data-dependent branch at each reported line, none in the
    disabled helper (a skipped call instead) or in the function nothing calls."""
    torch = pytest.importorskip("torch")

    ns: dict = {"__name__": "helpers_example"}
    exec(compile(CODE.replace("model = torch.compile(Block())\n", ""), "m.py", "exec"), ns)
    torch._dynamo.reset()
    out = torch._dynamo.explain(ns["Block"]())(torch.ones(2, 4))
    torch._dynamo.reset()
    lines = {r.user_stack[-1].lineno for r in out.break_reasons
             if "generic_jump" in r.reason or "Data-dependent" in r.reason}
    assert lines == {5, 29}


OPS = """\
import torch


@torch.compiler.disable
def eager_only(x):
    if x.any():
        x = x + 1
    return x


def clip(x):
    if x.abs().max() > 1:
        x = x / x.abs().max()
    return scale(eager_only(x))


def scale(x):
    return x * x.sum().item()
"""
MODEL = """\
from torch import nn

from .ops import clip


class Block(nn.Module):
    def forward(self, x):
        return clip(x) * 2
"""
TRAIN = """\
import torch
from pkg.model import Block

model = torch.compile(Block())
"""


@pytest.mark.parametrize("given", [["train.py"], ["pkg/ops.py"], ["pkg/model.py"], ["train.py", "pkg/model.py", "pkg/ops.py"]])
def test_helpers_imported_from_another_project_file_are_followed(tmp_path, monkeypatch, given):
    """The compile in train.py reaches Block.forward (pkg/model.py), which calls `clip` imported from
    pkg/ops.py, which calls `scale`: both are reported whichever of the files is committed, with
    the chain; the disabled helper is not."""
    from rewriter.check.command import run_check

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/ops.py").write_text(OPS)
    (tmp_path / "pkg/model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    outcome, _ = run_check(given, use_config=False, jobs=1)
    found = sorted((f.path, f.line, f.code) for f in outcome.findings if f.code in ("SP103", "SP104"))
    assert found == [("pkg/ops.py", 12, "SP104"), ("pkg/ops.py", 18, "SP103")]
    by_line = {f.line: f.message for f in outcome.findings}
    assert "(`clip` is called from `Block.forward` in pkg/model.py) (reached from the torch.compile at train.py:4)" in by_line[12]
    assert "(`scale` is called from `clip`, called from `Block.forward` in pkg/model.py)" in by_line[18]
