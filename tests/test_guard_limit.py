"""Per-block compile that survives per-instance guards (the KV cache passed through every layer):
the ``+recompile_limit`` twin and the ``recompile_limit`` setting of the ``dynamo_config`` action.
Fast: fake rung results and a rewrite on a tiny source; the measured behaviour is in the slow test."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.diagnose.candidates import Candidate
from rewriter.diagnose.guard_limit_candidates import limit_evidence, with_recompile_limit
from rewriter.diagnose.rung import RungResult
from rewriter.errors import StackpartError
from rewriter.plan import parse_plan
from rewriter.rewrite import plan_rewrite

ENTRY = 'import torch\n\n\ndef build_model():\n    """Build."""\n    return torch.nn.Linear(2, 2)\n'


def _plan(text: str):
    return parse_plan("version: 1\nactions:\n" + textwrap.dedent(text)).plan


def _ctx(limit_hit: bool, shapes: int = 2):
    rung = RungResult("instance_recompiles", "t", verdict="v")
    rung.measurement = {"instances": 8, "class": "LlamaDecoderLayer", "limit_hit": limit_hit, "recompile_limit": 8,
                        "limit_hits": [{"last_reason": "kwargs['past_key_values'].layers[7].is_initialized == False"}]}
    spec = SimpleNamespace(shapes=[{"seq": 16 - i} for i in range(shapes)])
    return SimpleNamespace(results={"instance_recompiles": rung}, session=SimpleNamespace(spec=spec))


def test_a_recompile_limit_hit_gets_a_per_block_twin_bounding_instances_x_shapes(monkeypatch):
    monkeypatch.setattr("rewriter.diagnose.config_candidates.config_target",
                        lambda ctx: ("harness.py::build_model", "the harness's model function"))
    per_block = Candidate("per-block", _plan("  - action: compile\n    target: model.py::Block\n"))
    whole = Candidate("whole", _plan("  - action: compile\n    target: model.py::Net\n    strategy: whole\n"))
    cands, notes = with_recompile_limit(_ctx(True, shapes=3), [per_block, whole])
    assert [c.name for c in cands] == ["per-block+recompile_limit", "per-block", "whole"]
    action = cands[0].plan.actions[0]
    assert (action.action, action.target, action.settings.recompile_limit) == ("dynamo_config", "harness.py::build_model", 24)
    assert "8 instances x 3 shape(s)" in action.why
    assert notes[0].startswith("plain regional compile of LlamaDecoderLayer (accelerate's compile_regions, diffusers' "
                               "compile_repeated_blocks): falls back to eager silently here")
    assert "layers[7].is_initialized" in notes[0]
    # no limit hit: nothing proposed, nothing said
    assert with_recompile_limit(_ctx(False), [per_block]) == ([per_block], [])
    assert limit_evidence(_ctx(False)) is None


def test_recompile_limit_is_written_as_an_integer_and_edited_in_place(tmp_path):
    (tmp_path / "harness.py").write_text(ENTRY)
    plan = parse_plan("version: 1\nactions:\n  - action: dynamo_config\n    target: harness.py::build_model\n"
                      "    settings: {recompile_limit: 24}\n")
    [change] = plan_rewrite(plan, tmp_path).changes
    assert '    """Build."""\n    torch._dynamo.config.recompile_limit = 24\n' in change.new.decode()
    (tmp_path / "harness.py").write_text(ENTRY.replace('"""Build."""\n', '"""Build."""\n    torch._dynamo.config.recompile_limit = 8  # ours\n'))
    [change] = plan_rewrite(plan, tmp_path).changes
    assert "torch._dynamo.config.recompile_limit = 24  # ours\n" in change.new.decode()
    (tmp_path / "harness.py").write_text(ENTRY.replace('"""Build."""\n', '"""Build."""\n    torch._dynamo.config.recompile_limit = 24\n'))
    assert plan_rewrite(plan, tmp_path).changes == []  # already there: idempotent


@pytest.mark.parametrize("value, message", [("true", "recompile_limit"), ("0", "recompile_limit"), ("'16'", "recompile_limit")])
def test_a_bad_recompile_limit_is_refused(value, message):
    with pytest.raises(StackpartError) as exc:
        parse_plan(f"version: 1\nactions:\n  - action: dynamo_config\n    target: a.py::f\n    settings: {{recompile_limit: {value}}}\n")
    assert message in str(exc.value)
