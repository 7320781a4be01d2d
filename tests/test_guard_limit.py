"""Per-block compile that survives per-instance guards (the KV cache passed through every layer):
the ``+recompile_limit`` twin and the ``recompile_limit`` setting of the ``dynamo_config`` action.
Fast: fake rung results and a rewrite on a tiny source; the measured behaviour is in the slow test."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.diagnose.candidates import Candidate
from rewriter.diagnose.kinds.recompile_limit import limit_evidence, with_recompile_limit
from rewriter.diagnose.rung import Finding, RungResult
from rewriter.errors import StackpartError
from rewriter.plan import parse_plan
from rewriter.rewrite.transform import plan_rewrite

ENTRY = 'import torch\n\n\ndef build_model():\n    """Build."""\n    return torch.nn.Linear(2, 2)\n'


def _plan(text: str):
    return parse_plan("version: 1\nactions:\n" + textwrap.dedent(text)).plan


def _ctx(limit_hit: bool, shapes: int = 2):
    rung = RungResult("instance_recompiles", "t", verdict="v")
    rung.measurement = {"instances": 8, "class": "LlamaDecoderLayer", "limit_hit": limit_hit, "recompile_limit": 8,
                        "limit_hits": [{"last_reason": "kwargs['past_key_values'].layers[7].is_initialized == False"}]}
    rung.findings.append(Finding("guard", "guard failure: kwargs['cache'].layers[0].is_initialized == False"))
    spec = SimpleNamespace(shapes=[{"seq": 16 - i} for i in range(shapes)])
    return SimpleNamespace(results={"instance_recompiles": rung}, session=SimpleNamespace(spec=spec))


def test_a_recompile_limit_hit_gets_a_per_block_twin_bounding_instances_x_shapes(monkeypatch):
    monkeypatch.setattr("rewriter.diagnose.kinds.config.config_target",
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
    # the per-instance guard, not the limit's last reason
    assert "(kwargs['cache'].layers[0].is_initialized == False)" in notes[0]
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


LLAMA = textwrap.dedent("""\
    import torch
    import transformers


    def build_model():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                                          num_attention_heads=4, num_key_value_heads=2)
        return transformers.LlamaForCausalLM(config).eval()


    def make_inputs(batch: int = 2, seq: int = 16):
        return {"input_ids": torch.randint(0, 256, (batch, seq))}
""")


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_the_kv_cache_guard_trap_gets_a_per_block_candidate_that_stays_compiled(tmp_path):
    """transformers' Llama with its default cache, 8 layers, two lengths: the plain per-block
    candidate hits the recompile limit (its child runs under fail_on_recompile); the twin with the
    limit raised holds a graph per instance and shape, with no fallback, and the report says a plain
    regional compile would fall back silently."""
    pytest.importorskip("transformers")
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(LLAMA)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2, "seq": 16}, {"batch": 2, "seq": 12}],
                                 mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager")
    rows = {r["candidate"]: r for r in outcome.search.table()}
    assert "recompile limit" in str(rows["per-block"]).lower() or "RecompileLimit" in str(rows["per-block"]), rows["per-block"]
    twin = rows["per-block+recompile_limit"]
    assert twin["numerics"] == "ok" and twin["fallbacks"] == 0 and twin["graphs"] >= 8, twin
    assert any(p.startswith("plain regional compile of LlamaDecoderLayer") and "falls back to eager silently" in p
               for p in outcome.search.pruned), outcome.search.pruned
