"""diagnose end to end on HF transformers models installed as a package (small configs, random
weights, no download). Their blocks live in transformers, outside SRC; the plan targets them by
import path and applies them from the harness's model function (the plan's site). The diff must
touch only files under SRC and ``git apply`` must take it; the rewritten program must run with the
compile live and give the same outputs; validate must pass the plan on the model's defaults.

The transformers families of benchmarks/zoo.py (Llama, GPT-2, Mixtral, ViT, ...) are diagnosed,
rewritten and run this way by tests/zoo_cpu.py (test_zoo_cpu_a/b/c.py), the plan's shape, the
diff, ``git apply`` and the idempotent second rewrite included; here: transformers' ResNet (a
convolutional model, no zoo family), and validate on the library's defaults."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest
from programs import last_json, run_programs  # tests/programs.py: several programs in one process

from rewriter.cli import main
from rewriter.plan import LIBRARY_TARGET_RE, load_plan
from rewriter.rewrite.transform import plan_rewrite

pytest.importorskip("transformers")

TOKENS = "{\"input_ids\": torch.randint(0, 256, (batch, seq))}"
IMAGES = "{\"pixel_values\": torch.randn(batch, 3, 32, 32)}"
#: name -> (config class, model class, config kwargs, inputs expression, shapes, block class)
CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2",
              TOKENS, ["batch=2,seq=16", "batch=2,seq=12"], "transformers.models.llama.modeling_llama:LlamaDecoderLayer"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128",
             TOKENS, ["batch=2,seq=16", "batch=2,seq=12"], "transformers.models.gpt2.modeling_gpt2:GPT2Block"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification", "embedding_size=8, hidden_sizes=[8, 16], depths=[2, 2], layer_type='basic'",
               IMAGES, ["batch=2", "batch=3"], "transformers.models.resnet.modeling_resnet:"),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
#: validate without the whole/regional baselines (reported, never judged) and with few timing
#: rounds (CPU timings are not gated): the verdict and its notes are what these tests read.
VALIDATE_FAST = ["--backend", "eager", "--reps", "3", "--warmup", "1", "--baselines", ""]


def write_harness(src, name, use_cache=False, training=False):
    config, cls, kwargs, inputs, _, _ = CONFIGS[name]
    src.mkdir(parents=True, exist_ok=True)
    (src / "harness.py").write_text(textwrap.dedent(f"""\
        import torch
        import transformers


        def build_model():
            torch.manual_seed(0)
            config = transformers.{config}({kwargs})
            model = transformers.{cls}(config)
            if hasattr(model.config, "use_cache"):
                model.config.use_cache = {use_cache}
            return model.{"train" if training else "eval"}()


        def make_inputs(batch: int = 2, seq: int = 16):
            return {inputs}
    """))


#: Runs the tree's harness as the user's program would, with every torch.compile forced to the
#: eager backend (what Dynamo captures is real; Inductor's codegen is skipped to keep CPU tests
#: fast): saves the logits and prints Dynamo's graph count and the compiled modules as JSON.
RUN = textwrap.dedent("""\
    import json, sys
    import torch
    from rewriter.engine.build import force_backend
    force_backend("eager")
    sys.path.insert(0, sys.argv[1])
    import harness
    torch.manual_seed(0)
    model = harness.build_model()
    torch.manual_seed(1)
    inputs = harness.make_inputs(batch=2)
    with torch.no_grad():
        out = model(**inputs)
    logits = out.logits if hasattr(out, "logits") else out[0]
    from torch._dynamo.utils import counters
    torch.save(logits, sys.argv[2])
    print(json.dumps({"graphs": counters["stats"]["unique_graphs"], "compiled_blocks": sum(
        getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())}))
""")


def run_before_after(pristine, tree, tmp_path):
    """:data:`RUN` on ``pristine`` (the tree before the patch) then on ``tree`` (after it), one
    after the other in one process (tests/programs.py): the JSON each prints."""
    results = run_programs([{"code": RUN, "cwd": pristine, "args": [pristine, tmp_path / "before.pt"]},
                            {"code": RUN, "cwd": tree, "args": [tree, tmp_path / "after.pt"]}])
    return last_json(results[0], "the program before the patch"), last_json(results[1], "the program after it")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet"])
def test_diagnose_plans_library_blocks_from_the_site(tmp_path, name):
    """diagnose, the plan's shape, the diff, ``git apply``, the outputs before and after and the
    idempotent second rewrite, on a library model no zoo family covers (tests/zoo_cpu.py does
    the transformers language and vision families: Llama, Mixtral, Qwen2-MoE, GPT-2, BERT, T5,
    ViT, Whisper)."""
    import torch

    src = tmp_path / "src"
    write_harness(src, name)
    out = tmp_path / "out"
    shapes = [a for s in CONFIGS[name][4] for a in ("--shape", s)]
    rc = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"), "--device", "cpu",
               *shapes, "--steps", "2"])
    assert rc == 0
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["complete"] is True
    by = {r["name"]: r for r in report["rungs"]}
    failed = {n: r["reason"] for n, r in by.items() if r["status"] == "error"}
    assert not failed, failed
    loaded = load_plan(out / "plan.yaml")
    # a plan, not `actions: []`: library targets by import path, applied from the harness
    assert loaded.plan.actions, report["notes"]
    assert loaded.plan.site == "harness.py::build_model"
    compiles = [a for a in loaded.plan.actions if a.action == "compile"]
    assert compiles and all(LIBRARY_TARGET_RE.match(a.target) for a in compiles)
    assert any(a.target.startswith(CONFIGS[name][5]) or a.strategy == "whole" for a in compiles), compiles

    result = plan_rewrite(loaded, src)
    changed = sorted(c.relpath for c in result.changes)
    assert "harness.py" in changed and all((src / c).resolve().is_relative_to(src.resolve()) or c.startswith("_stackpart/") for c in changed)
    # git apply takes the diff, in a repository of SRC as it was
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    patch = tmp_path / "plan.diff"
    patch.write_text(result.diff())
    subprocess.run(["git", "-C", str(src), "apply", "--check", str(patch)], check=True)
    shutil.copytree(src, tmp_path / "pristine", ignore=shutil.ignore_patterns(".git"))
    subprocess.run(["git", "-C", str(src), "apply", str(patch)], check=True)
    before, after = run_before_after(tmp_path / "pristine", src, tmp_path)
    assert before == {"graphs": 0, "compiled_blocks": 0}
    assert after["graphs"] > 0 and after["compiled_blocks"] > 0, after  # the compile is live
    torch.testing.assert_close(torch.load(tmp_path / "after.pt"), torch.load(tmp_path / "before.pt"), rtol=1e-4, atol=1e-4)
    # a second rewrite of the applied tree changes nothing (idempotent)
    assert plan_rewrite(loaded, src).changes == []


@pytest.mark.slow
@pytest.mark.parametrize("name,training", [("gpt2", True), ("llama", False)])
def test_validate_passes_on_model_defaults(tmp_path, name, training):
    """Cache on (Llama: the model returns a DynamicCache) and dropout on (GPT-2 in training: its
    default 0.1): a per-block plan on the library block validates. GPT-2 compiles with Inductor
    (its own random numbers are what ``fallback_random`` makes comparable); Llama with
    ``aot_eager`` (Dynamo and AOTAutograd trace the layer and its cache update; Inductor's judged
    cache leaves are test_judge.py's Mixtral test)."""
    src = tmp_path / "src"
    write_harness(src, name, use_cache=not training, training=training)
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent(f"""\
        version: 1
        harness:
          file: harness.py
          shapes: [{{batch: 2, seq: 16}}]
          mode: {"training" if training else "inference"}
          device: cpu
        site: harness.py::build_model
        actions:
          - action: compile
            target: {CONFIGS[name][5]}
    """) + ("" if training else "    options: {backend: aot_eager}\n"))
    rc = main(["validate", "--plan", str(plan), str(src), *VALIDATE_FAST])
    report = json.loads((tmp_path / ".stackpart" / "validation" / "validation.json").read_text())
    assert rc == 0, json.dumps(report.get("failures") or report, default=str)[:3000]
    assert report["verdict"]["passed"] is True
    if training:  # the report says how dropout was made comparable
        notes = " ".join(report["verdict"]["notes"])
        assert "draws random numbers" in notes and "fallback_random" in notes, notes


GENERATE = textwrap.dedent("""\
    import torch
    import transformers


    class Generate(torch.nn.Module):
        \"\"\"A serving step: greedy generation with transformers' default (dynamic) KV cache.\"\"\"

        def __init__(self):
            super().__init__()
            config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=2)
            self.lm = transformers.LlamaForCausalLM(config)

        def forward(self, input_ids):
            return self.lm.generate(input_ids, max_new_tokens=6, do_sample=False, pad_token_id=0)


    def build_model():
        torch.manual_seed(0)
        return Generate().eval()


    def make_inputs(batch: int = 2, seq: int = 8):
        return {"input_ids": torch.randint(1, 256, (batch, seq))}
""")


@pytest.mark.slow
def test_validate_judges_generated_tokens_by_their_logits(tmp_path):
    """A greedy-generation harness: the per-block plan on the library's decoder layer validates,
    and its generated ids are judged by the teacher-forced logits (token agreement reported)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(GENERATE)
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""\
        version: 1
        harness:
          file: harness.py
          shapes: [{batch: 2, seq: 8}]
          device: cpu
        site: harness.py::build_model
        actions:
          - action: compile
            target: transformers.models.llama.modeling_llama:LlamaDecoderLayer
            options: {backend: eager}
    """))
    rc = main(["validate", "--plan", str(plan), str(src), *VALIDATE_FAST])
    report = json.loads((tmp_path / ".stackpart" / "validation" / "validation.json").read_text())
    assert rc == 0, json.dumps(report["verdict"], default=str)[:3000]
    judged = report["variants"]["plan"]["generated_tokens"]
    assert judged["judged_by"].startswith("teacher-forced logits")
    assert judged["per_shape"][0]["token_agreement"] == 1.0  # float32 on CPU: the same ids
