"""The ``attention`` action (docs/library-models.md): transformers' own ``attn_implementation``
lever, set from the plan's site by ``set_attn_implementation``, and its ``+sdpa`` twins in the
search, measured like any candidate. Tiny Llama configs built with ``attn_implementation="eager"``,
random weights, no download."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from programs import last_json, run_programs  # tests/programs.py: several programs in one process

from rewriter.cli import main
from rewriter.diagnose.evidence import Evidence
from rewriter.errors import StackpartError
from rewriter.plan import load_plan, parse_plan
from rewriter.rewrite.transform import plan_rewrite

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

LLAMA = "transformers.models.llama.modeling_llama:LlamaForCausalLM"


def harness(attn: str | None = "eager") -> str:
    extra = f", attn_implementation={attn!r}" if attn else ""
    return textwrap.dedent(f"""\
        import torch
        import transformers


        def build_model():
            torch.manual_seed(0)
            config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                              num_attention_heads=4, num_key_value_heads=2{extra})
            model = transformers.LlamaForCausalLM(config)
            model.config.use_cache = False
            return model.eval()


        def make_inputs(batch: int = 2, seq: int = 16):
            return {{"input_ids": torch.randint(0, 256, (batch, seq))}}
    """)


def project(tmp_path: Path, actions: str, attn: str | None = "eager") -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "harness.py").write_text(harness(attn))
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nsite: harness.py::build_model\nactions:\n" + textwrap.indent(textwrap.dedent(actions), "  "))
    return src, plan


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("value,says,near", [
    ("spda", "expected one of 'sdpa', 'eager', 'flex_attention'", "did you mean 'sdpa'?"),
    ("flash_attention_2", "got 'flash_attention_2'", "needs the flash-attn package or a Hub kernel"),
    ("3", "got 3", None),
])
def test_a_bad_implementation_is_refused_at_its_line(value, says, near):
    text = f"version: 1\nsite: harness.py::build_model\nactions:\n  - action: attention\n    target: {LLAMA}\n    implementation: {value}\n"
    with pytest.raises(StackpartError) as info:
        parse_plan(text, "plan.yaml")
    msg = str(info.value)
    assert msg.startswith("plan.yaml:6:5: actions[0].implementation: ") and says in msg, msg
    assert near is None or near in msg, msg


def test_attention_names_a_library_class_and_defaults_to_sdpa():
    loaded = parse_plan(f"version: 1\nsite: harness.py::build_model\nactions:\n  - action: attention\n    target: {LLAMA}\n")
    assert loaded.plan.actions[0].implementation == "sdpa"
    with pytest.raises(StackpartError, match=r"plan.yaml:4:5: .*attention sets a transformers model's attn_implementation"):
        parse_plan("version: 1\nsite: harness.py::build_model\nactions:\n  - action: attention\n    target: model.py::Net\n",
                   "plan.yaml")


def test_generation_like_attention_refuses_a_target_under_src_naming_what_it_sets():
    with pytest.raises(StackpartError) as info:
        parse_plan("version: 1\nsite: harness.py::build_model\nactions:\n  - action: generation\n    target: model.py::Net\n",
                   "plan.yaml")
    assert str(info.value).startswith(
        "plan.yaml:4:5: actions[0]: target: generation sets a transformers model's generation_config from the plan's "
        "site; name the model class by import path (e.g. 'transformers:LlamaForCausalLM'), got 'model.py::Net'"), str(info.value)


@pytest.mark.parametrize("target,implementation,says,near", [
    ("transformers.models.llama.modeling_llama:LlamaDecoderLayer", "sdpa", "is not a transformers model class", None),
    ("transformers.models.llama.modeling_llama:LlamaForCausalLn", "sdpa", "no class or function 'LlamaForCausalLn'",
     "did you mean 'LlamaForCausalLM'"),
    ("transformers.models.gpt2.modeling_gpt2:GPT2LMHeadModel", "flex_attention",
     "GPT2LMHeadModel does not support attn_implementation='flex_attention' (transformers' GPT2LMHeadModel._supports_flex_attn is False)", None),
])
def test_a_bad_target_is_one_line_exit_2_nothing_written(tmp_path, capsys, target, implementation, says, near):
    src, plan = project(tmp_path, f"- action: attention\n  target: {target}\n  implementation: {implementation}\n")
    before = tree_bytes(src)
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {plan}:4:"), err
    assert says in err and (near is None or near in err), err
    assert tree_bytes(src) == before


RUN = textwrap.dedent("""\
    import json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import harness
    model = harness.build_model()
    again = harness.build_model()
    torch.manual_seed(1)
    with torch.no_grad():
        logits = model(**harness.make_inputs()).logits
    torch.save(logits, sys.argv[2])
    print(json.dumps({"attn": model.config._attn_implementation, "inner": model.model.config._attn_implementation,
                      "again": again.config._attn_implementation}))
""")


def run_trees(*runs: tuple[Path, Path]) -> list[dict]:
    """:data:`RUN` on each ``(tree, out)``, one after the other in one process (tests/programs.py:
    each tree's modules imported afresh): the JSON each prints."""
    results = run_programs([{"code": RUN, "cwd": tree, "args": [tree, out]} for tree, out in runs], timeout=240)
    return [last_json(r, f"RUN on {tree}") for r, (tree, _) in zip(results, runs)]


def test_rewrite_writes_the_action_and_the_site_runs_sdpa(tmp_path, capsys):
    src, plan = project(tmp_path, f"- action: attention\n  target: {LLAMA}\n  implementation: sdpa\n")
    harness_file = str(src / "harness.py")
    # check (the pre-commit hook) sees the pending site and generated module as drift
    assert main(["check", "--plan", str(plan), "--src", str(src), harness_file]) == 1
    assert "+@apply_plan" in capsys.readouterr().out
    result = plan_rewrite(load_plan(plan), src)
    library = next(c for c in result.changes if c.relpath == "_stackpart/library.py").new.decode()
    assert "from transformers.models.llama.modeling_llama import LlamaForCausalLM" in library
    assert "for module in _instances(model, LlamaForCausalLM, outermost=True):\n        _attention(module, \"sdpa\")" in library
    assert "module.set_attn_implementation(implementation)" in library
    shutil.copytree(src, tmp_path / "pristine")  # the program before the rewrite
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    before, after = run_trees((tmp_path / "pristine", tmp_path / "before.pt"), (src, tmp_path / "after.pt"))
    assert before["attn"] == "eager"
    assert after == {"attn": "sdpa", "inner": "sdpa", "again": "sdpa"}, after
    import torch

    # sdpa and eager attention agree within float32's tolerance (the engine's rule), not bit for bit
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"), rtol=1e-4, atol=1e-4)
    # idempotent, and check is clean once applied
    assert plan_rewrite(load_plan(plan), src).changes == []
    capsys.readouterr()
    assert main(["check", "--plan", str(plan), "--src", str(src), harness_file]) == 0, capsys.readouterr()
    # another implementation in the plan is drift in the generated module
    plan.write_text(plan.read_text().replace("implementation: sdpa", "implementation: eager"))
    assert main(["check", "--plan", str(plan), "--src", str(src), harness_file]) == 1
    out = capsys.readouterr().out
    assert '-        _attention(module, "sdpa")' in out and '+        _attention(module, "eager")' in out, out


def _ctx(src: Path, cuda: bool = False):
    """The parts of a diagnose Context the attention levers read: the harness's model, SRC, CUDA."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_attn_harness", src / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model()
    return SimpleNamespace(reference=lambda: (model, None, None), session=SimpleNamespace(src=src, cuda=cuda), evidence=Evidence())


def test_the_levers_prune_what_is_already_set_or_unsupported(tmp_path):
    from rewriter.diagnose.kinds.attention import levers

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(harness(None))  # transformers' default: sdpa
    actions, pruned = levers(_ctx(src))
    assert actions == []
    assert "+sdpa: LlamaForCausalLM already runs attn_implementation='sdpa'" in pruned, pruned
    # on CPU and on CUDA an sdpa model gets no flex_attention twin either (H200 run 24: one per candidate)
    actions, pruned = levers(_ctx(src, cuda=True))
    assert actions == [] and any(p.startswith("+flex_attention: LlamaForCausalLM runs attn_implementation='sdpa'")
                                 for p in pruned), pruned
    (src / "harness.py").write_text(harness("eager"))
    actions, pruned = levers(_ctx(src))
    assert [a.implementation for a in actions] == ["sdpa"] and any(p.startswith("+flex_attention: no CUDA") for p in pruned), pruned
    actions, pruned = levers(_ctx(src, cuda=True))
    assert [(a.target, a.implementation) for a in actions] == [(LLAMA, "sdpa"), (LLAMA, "flex_attention")], pruned
    assert "runs attn_implementation='eager'" in actions[0].why


@pytest.mark.slow
def test_diagnose_measures_the_sdpa_twins_on_an_eager_model(tmp_path):
    """An eager-attention Llama: the search proposes +sdpa twins of the compile candidates and of
    as-is, measures them, and they pass the engine's numerics (float32: within rtol/atol 1e-4)."""
    src, _ = project(tmp_path, "[]\n")
    out = tmp_path / "out"
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               "--shape", "batch=2,seq=16", "--steps", "1"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    search = next(r for r in report["rungs"] if r["name"] == "search")["measurement"]
    rows = {r["candidate"]: r for r in search["candidates"]}
    twins = [n for n in rows if n.endswith("+sdpa")]
    assert "as-is+sdpa" in twins and any(n != "as-is+sdpa" for n in twins), list(rows)
    for name in twins:
        assert rows[name]["numerics"] == "ok" and rows[name]["step_ms"] is not None, rows[name]
        assert any(a.startswith(f"attention {LLAMA}") for a in rows[name]["actions"]), rows[name]
        base = name.removesuffix("+sdpa")
        assert base in rows and list(rows).index(name) == list(rows).index(base) + 1  # right after its candidate
    assert any(p.startswith("+flex_attention: no CUDA") for p in search["pruned"]), search["pruned"]


def test_the_static_cache_candidate_gets_an_sdpa_twin(monkeypatch):
    """An eager-attention generation model gains from both levers: 'static-cache' is twinned like
    the compile candidates and as-is (a config twin is not)."""
    from types import SimpleNamespace

    from rewriter.diagnose.kinds import attention as ac
    from rewriter.diagnose.candidates import Candidate
    from rewriter.plan import parse_plan

    head = "version: 1\nharness: {file: harness.py, shapes: [{batch: 1}], device: cpu}\nsite: harness.py::build_model\n"
    lib = "transformers.models.llama.modeling_llama:LlamaForCausalLM"
    plans = parse_plan(head + f"actions:\n  - {{action: attention, target: '{lib}'}}\n  - {{action: generation, target: '{lib}'}}\n", "x").plan
    attention, generation = plans.actions
    static = Candidate("static-cache", plans.model_copy(update={"actions": [generation]}))
    asis = Candidate("as-is", plans.model_copy(update={"actions": []}))
    monkeypatch.setattr(ac, "levers", lambda ctx: ([attention], []))
    ctx = SimpleNamespace(evidence=Evidence(), site=None, session=SimpleNamespace(spec=None))
    out, _ = ac.with_attention(ctx, [static, asis])
    assert [c.name for c in out] == ["static-cache", "static-cache+sdpa", "as-is", "as-is+sdpa"]
    assert [a.action for a in out[1].plan.actions] == ["generation", "attention"]


def test_a_model_whose_classes_lie_under_src_gets_no_attention_target(tmp_path):
    """H200 run 24: Llama's modeling file copied under SRC; the walk up the bases ended at
    transformers' generic PreTrainedModel, whose twin every plan check refused."""
    import transformers

    from rewriter.diagnose.kinds.attention import model_target

    assert model_target(transformers.PreTrainedModel, tmp_path) is None
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    assert model_target(LlamaForCausalLM, tmp_path) == LLAMA
