"""The model zoo: every family measured as its users call it, beside the one-line anchors.

Each family is built from an installed package (transformers, diffusers, timm) from a config with
random weights (no download) and called with the library's defaults (``model(**inputs)``; the KV
cache returned where the library returns it). Each variant runs in its own process with a fresh
Inductor cache, bf16 on the GPU:

* ``eager``: the model as built;
* ``whole``: ``torch.compile(model)``;
* ``per-block``: ``block.compile()`` on every instance of the most repeated block class (the
  regional compilation recipe, https://docs.pytorch.org/tutorials/recipes/regional_compilation.html);
* ``regions``: the library's one-liner: diffusers' ``model.compile_repeated_blocks()`` where the
  model declares ``_repeated_blocks``, else accelerate's ``accelerate.utils.compile_regions(model)``
  (skipped where neither is installed);
* ``as-is`` (with ``--own-compile``, where the harness's ``build_model`` returns
  ``torch.compile(model)``): the program as it runs, its own compile included; every other variant
  but the plan takes that compile off first (``model._orig_mod``);
* ``plan``: ``stackpart diagnose`` on the family's harness (its ladder + search seconds recorded),
  ``stackpart rewrite --apply`` of the plan it writes, and the rewritten harness's model timed.

``stackpart diagnose`` runs first, alone on the machine (it times its candidates itself). Then every
variant's process runs its compile phase at once: the first call at each shape (cold compile at the
first, new-shape compile at the next), as a program alternating shapes pays them. Once every compile
phase has ended, the processes time their steps one at a time, in rounds interleaved across them
(:data:`ROUNDS`, each rotated by one, :func:`round_order`: a drift over the call falls on every variant
alike; parts 1-12 timed each process's steps in one go, one process after another) (``--serial``: each process after the
last, as parts 1-11 of BENCHMARKS.md ran; unlike those parts, it too compiles every shape before it
times any, where they timed each shape right after its first call). Each process's launching
thread is timed on one shared CPU core, the one of median speed, as the engine's timed children are
(``--pin off``: where the scheduler puts it, as parts 1-12 ran). ``--overlap-diagnose`` starts the
variants other than the plan with diagnose, for a family whose diagnose and slowest compile do not fit
one call one after the other (UNet's whole compile recompiles for 266 s): diagnose then shares the
host, so it chooses the plan with those compiles running (the verdicts say so:
``plan_chosen_beside_compiles``) and its ladder + search seconds are recorded, not judged.
``--replicate plan,whole`` runs the named variants in a second process each (``plan#2``, started and
timed with the others, after them in each round's order): the spread between two processes of one compile (``replicates`` in the
verdicts), which a figure from one process does not show; the verdicts stay on the first processes.
Where every passing variant, the plan and eager ran twice, the same bars on each one's faster process
(the engine's rule for a plan timed twice) are reported beside them (``on_faster_process``).
Where the plan has no actions, its process runs eager's program, and the same bars on the median over
every process of that program (eager, the plan and their second processes) are reported beside
(``on_one_program``, :func:`one_program`).
So the first-call seconds are those of compiles sharing the host's cores, and each shape's steady step
(median of ``--steps`` CUDA-event timed calls after 3 warm-ups, ms) is timed with every shape compiled:
under automatic dynamic shapes the first shape then runs the dynamic graph, as the engine times it.
Per variant and shape (the first shape is the reference): first-call seconds, step, numerics and
silent eager fallbacks; beside the step, ``blocked_ms``: the same model timed five calls at a time
between two events (no wait for each output, as the engine's blocked timing), and ``round_ms``, each
round's median in the order timed (a slow phase of the host shows as rounds apart), and ``best_round_ms``,
the lowest of them. The verdicts are on the step; the same bars on ``blocked_ms`` (``on_blocked_ms``) and
on ``best_round_ms`` (``on_best_round``) are reported beside them. The best round is the estimator for a
host whose noise only adds time (Chen and Revels, "Robust benchmarking in noisy environments",
arXiv:1608.04295; Python's ``timeit`` docs take the minimum for the same reason): where a slow phase of
the host covers half the rounds, as in BENCHMARKS.md's "Model zoo, part 18" (every process at 11-12 ms a
step in rounds 1-5, 5 ms after), a median over rounds is the phase's, not the program's. Numerics follow
``torch._dynamo.utils.same``'s ``fp64_ref`` rule on the main output (logits, last hidden state or
sample): ``RMSE(variant, ref) <= 2 x RMSE(eager low precision, ref) + 1e-3`` where ``ref`` is the same
weights run eager in float32 (both built by the harness and run under the ``force_eager`` stance, since
a rewritten harness compiles what it builds). A fallback is Dynamo's recompile-limit warning in the variant's
process (after it the frame runs eager without an error).

Verdicts per family (docs/design.md, "The search"): the plan runs at >= 0.95x the speed of the
fastest variant that passes numerics without fallback, is never slower than eager, and is not
"change nothing" where a variant is >= 1.2x faster than eager. Beside them, never instead, the
variants whose main output at the first shape is the plan's bit for bit (a sha256 of its float32
bytes: ``plan_outputs_bitwise_equal_to``): where the fastest is one of them, a gap between the two
steps is one between two processes of one computation.

Run on the GPU machine (transformers, diffusers, timm, accelerate installed there; the shared wheels
for stackpart's own needs, benchmarks/README.md):
``OUT=$OUT python3 benchmarks/zoo.py --only llama,mixtral`` (300-340 s a family with all five variants
on the H200, BENCHMARKS.md part 12). It runs in parts across sessions; ``$OUT/zoo.json`` and
``$OUT/zoo.md`` hold the families run. CPU smoke on tiny configs (float32, backend eager for the
search): ``OUT=/tmp/o python benchmarks/zoo.py --smoke --only llama``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rewriter.engine.cores, when run as a script
OUT = Path(os.environ.get("OUT", "out")).resolve()  # absolute: diagnose runs in the family's work folder
CLI = "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))"

_LM = '''
def make_inputs(batch: int = 8, seq: int = 512):
    g = torch.Generator().manual_seed(1000003 * batch + seq)
    return {{"input_ids": torch.randint(0, {vocab}, (batch, seq), generator=g)}}
'''

#: family -> (harness body, shapes on the GPU, shapes in --smoke, GPU config, smoke config).
#: The harness body gets ``CONFIG`` (a dict) and ``torch`` in scope and defines build_model/make_inputs.
FAMILIES: dict[str, dict] = {
    "llama": dict(
        build="model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))",
        inputs=_LM.format(vocab=32000),
        gpu=dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
                 intermediate_size=5632, vocab_size=32000),
        smoke=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=32000),
        shapes=[dict(batch=8, seq=512), dict(batch=8, seq=384)]),
    "mixtral": dict(
        build="model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**CONFIG))",
        inputs=_LM.format(vocab=32000),
        gpu=dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                 intermediate_size=1792, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000),
        smoke=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, vocab_size=32000),
        shapes=[dict(batch=8, seq=512), dict(batch=8, seq=384)]),
    "qwen2_moe": dict(
        build="model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(**CONFIG))",
        inputs=_LM.format(vocab=32000),
        gpu=dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                 intermediate_size=2816, moe_intermediate_size=704, shared_expert_intermediate_size=1408,
                 num_experts=8, num_experts_per_tok=2, vocab_size=32000),
        smoke=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                   num_experts=4, num_experts_per_tok=2, vocab_size=32000),
        shapes=[dict(batch=8, seq=512), dict(batch=8, seq=384)]),
    "gpt2": dict(
        build="model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))",
        inputs=_LM.format(vocab=50257),
        gpu=dict(n_embd=1024, n_layer=16, n_head=16, vocab_size=50257),
        smoke=dict(n_embd=64, n_layer=2, n_head=4, vocab_size=50257),
        shapes=[dict(batch=8, seq=512), dict(batch=8, seq=384)]),
    "bert": dict(
        build="model = transformers.BertModel(transformers.BertConfig(**CONFIG))",
        inputs=_LM.format(vocab=30522),
        gpu=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
        smoke=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
        shapes=[dict(batch=32, seq=512), dict(batch=32, seq=384)]),
    "t5": dict(
        build="model = transformers.T5ForConditionalGeneration(transformers.T5Config(**CONFIG))",
        inputs='''
def make_inputs(batch: int = 8, seq: int = 512):
    g = torch.Generator().manual_seed(1000003 * batch + seq)
    return {"input_ids": torch.randint(0, 32128, (batch, seq), generator=g),
            "decoder_input_ids": torch.randint(0, 32128, (batch, seq // 4), generator=g)}
''',
        gpu=dict(d_model=768, num_layers=12, num_decoder_layers=12, num_heads=12, d_ff=3072, d_kv=64),
        smoke=dict(d_model=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_ff=128, d_kv=16),
        shapes=[dict(batch=8, seq=512), dict(batch=8, seq=384)]),
    "vit": dict(
        build="model = transformers.ViTModel(transformers.ViTConfig(**CONFIG))",
        inputs='''
def make_inputs(batch: int = 32, image: int = 224):
    g = torch.Generator().manual_seed(batch + image)
    return {"pixel_values": torch.randn(batch, 3, image, image, generator=g)}
''',
        gpu=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
        smoke=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                   image_size=32, patch_size=8),
        shapes=[dict(batch=32, image=224), dict(batch=16, image=224)]),
    "whisper": dict(
        build="model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**CONFIG))",
        inputs='''
def make_inputs(batch: int = 8, dec: int = 64):
    g = torch.Generator().manual_seed(batch + dec)
    n = CONFIG.get("max_source_positions", 1500) * 2
    return {"input_features": torch.randn(batch, CONFIG.get("num_mel_bins", 80), n, generator=g),
            "decoder_input_ids": torch.randint(0, 51865, (batch, dec), generator=g)}
''',
        gpu=dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                 decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),
        smoke=dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                   max_source_positions=64, max_target_positions=64),
        shapes=[dict(batch=8, dec=64), dict(batch=8, dec=48)]),
    "unet": dict(
        build="model = diffusers.UNet2DConditionModel(**CONFIG)",
        inputs='''
def make_inputs(batch: int = 4, latent: int = 64):
    g = torch.Generator().manual_seed(batch + latent)
    return {"sample": torch.randn(batch, 4, latent, latent, generator=g), "timestep": torch.tensor(10),
            "encoder_hidden_states": torch.randn(batch, 77, CONFIG["cross_attention_dim"], generator=g)}
''',
        gpu=dict(block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768, layers_per_block=2),
        smoke=dict(block_out_channels=(32, 64), cross_attention_dim=32, layers_per_block=1, norm_num_groups=8,
                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=8),
        shapes=[dict(batch=4, latent=64), dict(batch=4, latent=48)], smoke_shapes=[dict(batch=2, latent=16), dict(batch=2, latent=8)]),
    "dit": dict(
        build="model = diffusers.DiTTransformer2DModel(**CONFIG)",
        inputs='''
def make_inputs(batch: int = 8, latent: int = 32):
    g = torch.Generator().manual_seed(batch + latent)
    return {"hidden_states": torch.randn(batch, 4, latent, latent, generator=g), "timestep": torch.tensor([10] * batch),
            "class_labels": torch.randint(0, 1000, (batch,), generator=g)}
''',
        gpu=dict(num_layers=12, num_attention_heads=12, attention_head_dim=64, sample_size=32),
        smoke=dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, sample_size=8, norm_num_groups=8),
        shapes=[dict(batch=8, latent=32), dict(batch=8, latent=24)], smoke_shapes=[dict(batch=2, latent=8)]),
    "resnet50": dict(
        build='model = timm.create_model("resnet50", pretrained=False)',
        inputs='''
def make_inputs(batch: int = 64, image: int = 224):
    g = torch.Generator().manual_seed(batch + image)
    return {"x": torch.randn(batch, 3, image, image, generator=g)}
''',
        gpu={}, smoke={}, shapes=[dict(batch=64, image=224), dict(batch=32, image=224)]),
    "convnext": dict(
        build='model = timm.create_model("convnext_tiny", pretrained=False)',
        inputs='''
def make_inputs(batch: int = 64, image: int = 224):
    g = torch.Generator().manual_seed(batch + image)
    return {"x": torch.randn(batch, 3, image, image, generator=g)}
''',
        gpu={}, smoke={}, shapes=[dict(batch=64, image=224), dict(batch=32, image=224)]),
}


def harness_text(name: str, smoke: bool, own_compile: bool = False) -> str:
    """The family's ``harness.py``: ``build_model()`` and ``make_inputs(**shape)`` (stackpart's harness
    format). ``own_compile``: ``build_model()`` returns ``torch.compile(model)`` (torch's defaults), a
    program that compiles the model itself, as most programs that need stackpart do."""
    fam = FAMILIES[name]
    lib = fam["build"].split("=", 1)[1].strip().split(".", 1)[0]
    ret = "model.eval()\n    return torch.compile(model)" if own_compile else "return model.eval()"
    what = ", compiled whole by the program itself" if own_compile else ""
    return (f'"""Zoo harness: {name} from the installed {lib}, random weights, the library\'s defaults{what}."""\n'
            f"import torch\nimport {lib}\n\nCONFIG = {fam['smoke' if smoke else 'gpu']!r}\n\n\n"
            f"def build_model():\n    torch.manual_seed(0)\n    {fam['build']}\n    {ret}\n\n"
            + textwrap.dedent(fam["inputs"]))


def shapes_of(name: str, smoke: bool) -> list[dict]:
    """The family's shapes, the first the reference. ``smoke``: its ``smoke_shapes``, else the GPU shapes
    scaled down (sequence / 64, decoder length / 8, batch at most 2, images 32 px), each kept once:
    ``stackpart diagnose`` refuses a repeated shape (it hides recompiles)."""
    fam = FAMILIES[name]
    if smoke:
        if "smoke_shapes" in fam:
            return fam["smoke_shapes"]
        scaled = [{k: (max(2, v // 64) if k == "seq" else max(2, v // 8) if k == "dec" else min(v, 2) if k == "batch"
                       else 32 if k == "image" else v) for k, v in s.items()} for s in fam["shapes"]]
        return [s for i, s in enumerate(scaled) if s not in scaled[:i]]
    return fam["shapes"]


#: Part of :data:`WORKER`, its own string so a test can run it: ``count_configs(cls)`` wraps
#: ``cls.__init__`` (Inductor's ``CachingAutotuner``) to count every Triton kernel made in the process
#: and those given more than one config, which it benchmarks at first launch. Counted at
#: construction: Inductor clears ``configs`` once it has compiled them, before any launch.
AUTOTUNE_CENSUS = r'''
def count_configs(cls):
    census = {"kernels": 0, "with_configs_to_benchmark": 0}
    made = cls.__init__
    def counting(self, *args, **kwargs):
        made(self, *args, **kwargs)
        census["kernels"] += 1
        configs = kwargs.get("configs", args[2] if len(args) > 2 else None)
        if len(configs or getattr(self, "configs", None) or []) > 1:
            census["with_configs_to_benchmark"] += 1
    cls.__init__ = counting
    return census

def autotune_census():
    # Inductor's Triton kernels made in this process and how many had more than one config to
    # benchmark at first launch: where that is 0, compiling beside other processes cannot have moved
    # a kernel's choice, only its compile seconds. Installed before anything compiles.
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except Exception as exc:  # an internal module: other torch versions may move it
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return count_configs(CachingAutotuner)
'''

#: Part of :data:`WORKER`, its own string so another script can run it (benchmarks/attention_path.py):
#: ``blocks(model)``, the repeated block a per-block variant compiles (needs ``torch`` in scope).
BLOCKS = r'''
def blocks(model):
    """Every instance of the most repeated class among ModuleList/Sequential children that hold
    modules of their own: a block, not a leaf layer (a DiT's Linear layers in its feed-forward
    ModuleLists outnumber its transformer blocks). A tie in count goes to the class met first:
    ``modules()`` visits a block before what it holds, so DiT's blocks win over the GELU projections
    inside them and T5's over their feed-forward layers, and Whisper's encoder layers over its decoder's."""
    inst = {}
    for m in model.modules():
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            for c in m.children():
                if next(c.children(), None) is not None:
                    inst.setdefault(type(c), []).append(c)
    if not inst:
        return []
    return inst[max(inst, key=lambda cls: len(inst[cls]))]  # the first of the most repeated
'''

#: One variant in its own process: prints one JSON line. argv: src variant device shapes-json steps.
#: After its compile phase it prints ZOO-READY; each line "go ROUNDS [core]" on stdin then times one round of its
#: steps (ZOO-ROUND when done), and "done" makes it print its result.
WORKER = r'''
import hashlib, json, logging, math, statistics, sys, time
import torch
src, variant, device, shapes, steps = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
kind = variant.removesuffix("#2")  # "whole#2": a second process of "whole" (--replicate, REPLICA)
sys.path.insert(0, src)
import harness
''' + AUTOTUNE_CENSUS + r'''
try:  # a census, never a failure of the variant
    CENSUS = autotune_census()
except Exception as exc:
    CENSUS = {"error": f"{type(exc).__name__}: {exc}"[:200]}

class _Fallbacks(logging.Handler):
    hits = []
    def emit(self, record):
        msg = record.getMessage()
        if "recompile_limit" in msg or "cache_size_limit" in msg:
            self.hits.append(msg.splitlines()[0][:300])
logging.getLogger("torch._dynamo").addHandler(_Fallbacks())

dtype = torch.bfloat16 if device == "cuda" else torch.float32

def main_out(out):
    for key in ("logits", "last_hidden_state", "sample"):
        v = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
        if isinstance(v, torch.Tensor):
            return v
    if isinstance(out, (tuple, list)):
        return out[0]
    return out

''' + BLOCKS + r'''
def sync():
    if device == "cuda":
        torch.cuda.synchronize()

def timed(fn):
    if device == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        return a.elapsed_time(b)
    s = time.perf_counter(); fn(); return (time.perf_counter() - s) * 1e3

res = {"variant": variant, "torch": torch.__version__, "shapes": [], "fallbacks": []}
try:
    model = harness.build_model()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model = model.to(device=device, dtype=dtype)
    note = ""
    from torch._dynamo.eval_frame import OptimizedModule
    if kind not in ("as-is", "plan") and isinstance(model, OptimizedModule):
        model = model._orig_mod  # --own-compile: every other variant replaces the program's own compile
        note = "the program's own compile taken off"
    if kind == "whole":
        model = torch.compile(model)
    elif kind == "per-block":
        bl = blocks(model)
        for b in bl:
            b.compile()
        note = f"{len(bl)} x {type(bl[0]).__name__}" if bl else "no repeated block"
    elif kind == "regions":
        if getattr(model, "_repeated_blocks", None) and hasattr(model, "compile_repeated_blocks"):
            model.compile_repeated_blocks()
            note = "diffusers compile_repeated_blocks"
        else:
            from accelerate.utils import compile_regions
            model = compile_regions(model)
            note = "accelerate compile_regions"
    res["note"] = note
    ref_model = None
    feeds = []
    with torch.no_grad():
        # the compile phase: the first call at every shape (cold compile, then new-shape compiles), numerics at the first
        for i, shape in enumerate(shapes):
            inputs = {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
                      for k, v in harness.make_inputs(**shape).items()}
            feeds.append(inputs)
            t = time.perf_counter(); out = model(**inputs); sync(); first = time.perf_counter() - t
            row = {"shape": shape, "first_call_s": first}
            if i == 0:
                # numerics: the same weights in float32 eager are the reference; eager at this dtype is the yardstick.
                # Both run under the force_eager stance: a rewritten harness's build_model compiles what it builds.
                if ref_model is None:
                    ref_model = harness.build_model()
                    ref_model.load_state_dict(state)
                    ref_model = ref_model.to(device=device, dtype=torch.float32)
                    low = harness.build_model(); low.load_state_dict(state); low = low.to(device=device, dtype=dtype)
                f32 = {k: (v.float() if v.is_floating_point() else v) for k, v in inputs.items()}
                with torch.compiler.set_stance("force_eager"):
                    ref = main_out(ref_model(**f32)).float()
                    eager_low = main_out(low(**inputs)).float()
                got = main_out(out).float()
                rmse = lambda a: float(torch.sqrt(torch.mean((a - ref) ** 2)))
                row["rmse"] = rmse(got)
                # the main output's bytes: two variants with one digest computed the same values bit for bit
                row["output_sha256"] = hashlib.sha256(got.contiguous().cpu().numpy().tobytes()).hexdigest()
                row["eager_rmse"] = rmse(eager_low)
                row["numerics_ok"] = bool(torch.isfinite(got).all()) and row["rmse"] <= 2.0 * row["eager_rmse"] + 1e-3
                del ref_model, low
            res["shapes"].append(row)
        del out
        res["compiled_at"] = time.time()
        res["autotune"] = dict(CENSUS)
        # the parent lets one process at a time time its steps, once every compile phase has ended, in
        # rounds it interleaves across the processes ("go ROUNDS [core]" for each round, then "done")
        print("ZOO-READY", flush=True)
        samples, blocked, windows, rounds_ms = [[] for _ in feeds], [[] for _ in feeds], [], [[] for _ in feeds]
        from rewriter.engine.host_state import Probe
        probe = Probe(f"zoo-{variant}")  # the timed process's host state, as the engine's children write it (STACKPART_HOST_STATE)
        while True:
            go = sys.stdin.readline().split()
            if not go:  # the parent is gone: no one to time for
                sys.exit(3)
            if go[0] == "done":
                probe.stop(model)
                break
            rounds = int(go[1])
            if len(go) > 2 and "pinned_core" not in res:  # pin this (the launching) thread to the core the parent chose, as the engine's timed children do
                import os
                try:
                    os.sched_setaffinity(0, {int(go[2])})
                    res["pinned_core"] = int(go[2])
                except (AttributeError, OSError, ValueError) as exc:
                    res["pinned_core"] = f"not pinned: {exc}"
            # one round: every shape compiled, as a program alternating them runs
            windows.append([time.time()])
            per = max(3, math.ceil(steps / rounds))
            probe.start(model, res.get("pinned_core") if isinstance(res.get("pinned_core"), int) else None,
                        lambda: model(**feeds[0]))
            for i, inputs in enumerate(feeds):
                for _ in range(3):
                    model(**inputs)
                probe.before()
                samples[i] += [timed(lambda: model(**inputs)) for _ in range(per)]
                rounds_ms[i].append(statistics.median(samples[i][-per:]))  # this round's median, in the order timed
                probe.after({"shape": i, "n": per}, [x / 1e3 for x in samples[i][-per:]])
                # the same steps back to back, 5 calls between two events (the engine's blocked timing,
                # docs/measuring-on-a-gpu.md): a loop that does not wait for each output; reported, not judged
                blocked[i] += [timed(lambda: [model(**inputs) for _ in range(5)]) / 5 for _ in range(max(1, per // 5))]
            windows[-1].append(time.time())
            print("ZOO-ROUND", flush=True)
        for row, ms, bl, per_round in zip(res["shapes"], samples, blocked, rounds_ms):
            if ms:
                row.update(median_ms=statistics.median(ms), min_ms=min(ms), blocked_ms=statistics.median(bl),
                           round_ms=[round(x, 4) for x in per_round], best_round_ms=min(per_round))
        res["timing_windows"] = windows
        res["timing_window"] = [windows[0][0], windows[-1][1]] if windows else []
    from torch._dynamo.utils import counters
    res["unique_graphs"] = int(counters["stats"].get("unique_graphs", 0))
    res["graph_breaks"] = int(sum(counters["graph_break"].values()))
    res["fallbacks"] = _Fallbacks.hits
except Exception as exc:
    import traceback
    res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    res["traceback"] = traceback.format_exc()[-2000:]
print(json.dumps(res))
'''


def _env(cache: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    env["TRITON_CACHE_DIR"] = str(cache / "triton")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class VariantProcess:
    """One variant of one family in a fresh process with empty compile caches, gated: it runs its
    compile phase (the first call at every shape, numerics at the first) at once, says ZOO-READY,
    and times its steps only when :meth:`finish` lets it, so that no other process compiles while
    it is timed. ``timeout``: seconds for each of the two phases; a process past it is killed at
    once. Its result is the last stdout line that parses as a JSON object naming its variant (a
    harness may print lines of its own)."""

    def __init__(self, src: Path, variant: str, device: str, shapes: list[dict], steps: int, timeout: float):
        self.variant, self.timeout = variant, timeout
        self.cache = Path(tempfile.mkdtemp(prefix="zoo-cache-"))
        self.started = time.perf_counter()
        self.stderr = open(self.cache / "stderr.txt", "w+")  # a file, not a pipe: compile logs would fill a pipe
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(src), variant, device, json.dumps(shapes), str(steps)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=_env(self.cache))
        self.lines: queue.Queue = queue.Queue()
        self.compile_s: float | None = None  # seconds from the start to ZOO-READY, stamped as the line arrives
        self.result: dict | None = None
        self.error: str | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line == "ZOO-READY":
                self.compile_s = time.perf_counter() - self.started
            self.lines.put(line)
        self.lines.put(None)

    def _drain(self, until: float, stop_at: str | None) -> bool:
        """Read stdout until the line ``stop_at`` (ZOO-READY, ZOO-ROUND: True is returned) or its end
        (False), keeping the result line; past ``until`` (perf_counter seconds) raises queue.Empty."""
        while (line := self.lines.get(timeout=max(0.0, until - time.perf_counter()))) is not None:
            if stop_at is not None and line == stop_at:
                return True
            if line.startswith("{"):
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("variant") == self.variant:
                    self.result = obj
        return False

    def wait_ready(self) -> bool:
        """Wait for the end of the compile phase; False (the error kept, the process killed) if it
        ended or ran past the timeout."""
        try:
            if self._drain(self.started + self.timeout, stop_at="ZOO-READY"):
                return True
        except queue.Empty:
            self.error = f"timeout after {self.timeout:.0f} s in the compile phase"
            self.kill()
        return False

    @property
    def timing(self) -> bool:
        """Whether it is ready to time (its compile phase ended, no error, still running)."""
        return self.error is None and self.compile_s is not None and self.proc.poll() is None

    def time_round(self, rounds: int, core: int | None = None) -> None:
        """Let the process time one of ``rounds`` rounds of its steps (each shape, ``steps / rounds``
        calls), its launching thread pinned to CPU ``core`` where one is given, and wait for it."""
        try:
            if self.timing:
                self.proc.stdin.write(f"go {rounds}\n" if core is None else f"go {rounds} {core}\n")
                self.proc.stdin.flush()
                if not self._drain(time.perf_counter() + self.timeout, stop_at="ZOO-ROUND") and self.error is None:
                    self.error = f"exit {self.proc.poll()} in the timing phase"
        except queue.Empty:
            self.error = f"timeout after {self.timeout:.0f} s in the timing phase"
            self.kill()
        except BrokenPipeError:
            pass

    def finish(self) -> dict:
        """Collect its result (after its rounds) or the error, and end it."""
        try:
            if self.timing:
                self.proc.stdin.write("done\n")
                self.proc.stdin.flush()
                self._drain(time.perf_counter() + self.timeout, stop_at=None)
        except queue.Empty:
            self.error = f"timeout after {self.timeout:.0f} s in the timing phase"
        except BrokenPipeError:
            pass
        self.kill()
        self.stderr.seek(0)
        err = self.stderr.read()[-600:]
        self.close()
        res = (self.result if self.result is not None and not self.error
               else {"variant": self.variant, "error": self.error or f"exit {self.proc.returncode}: {err}"})
        res["process_s"] = time.perf_counter() - self.started
        if self.compile_s is not None:
            res["compile_phase_s"] = self.compile_s
        return res

    def kill(self) -> None:
        """End the process now (idempotent) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """Kill it, close its stderr file and remove its caches (idempotent; :meth:`finish` ends with it)."""
        self.kill()
        self.stderr.close()
        shutil.rmtree(self.cache, ignore_errors=True)


def _overlap(p: VariantProcess, q: VariantProcess) -> bool:
    """Whether the two processes' compile phases overlapped in time (a phase that did not end ran
    to the process's end)."""
    def span(x: VariantProcess) -> tuple[float, float]:
        return x.started, x.started + (x.compile_s if x.compile_s is not None else float("inf"))
    (a0, a1), (b0, b1) = span(p), span(q)
    return a0 < b1 and b0 < a1


def timing_core(mode: str) -> int | None:
    """The CPU core every timed process's launching thread is pinned to: ``shared``, the core of
    median speed at a pure-Python loop, as the engine's ``--pin shared`` picks it
    (:mod:`rewriter.engine.cores`: one shared core cut the spread between identical processes from
    7-18% to about 1% on the H200); ``off`` or fewer than 3 cores: None (the scheduler places them)."""
    if mode == "off" or not hasattr(os, "sched_getaffinity"):
        return None
    from rewriter.engine.cores import core_speeds, pin_plan

    cores = sorted(os.sched_getaffinity(0))
    return pin_plan(["timed"], cores, "shared", core_speeds(cores)).get("timed")


#: Timing rounds per process under the parallel protocol (:func:`run_variants`): eight of ``--steps 40``
#: (five calls per shape a round). A host that runs one process's Python at two speeds for seconds at
#: a time (BENCHMARKS.md, "Model zoo, part 17": T5's plan and whole compile, one kernel list, 16 ms per
#: step in their first rounds and 12 in their last) weighs less in a median over more rounds.
ROUNDS = 8


def round_order(procs: list, r: int) -> list:
    """The order round ``r`` times ``procs`` in: rotated by ``r`` (round 0 as given, round 1 from the
    second, ...), so each process takes each place in turn and no process is timed last in one round
    and first in the next (with three or more). Every other round reversed instead gives the process
    at either end two slots back to back, both in one phase of the host (BENCHMARKS.md, "Model zoo,
    part 17": T5's plan took both slow ones)."""
    k = r % len(procs) if procs else 0
    return procs[k:] + procs[:k]


def run_variants(jobs: list[tuple[str, Path]], device: str, shapes: list[dict], steps: int, timeout: float,
                 parallel: bool, core: int | None = None,
                 early: list[VariantProcess] | tuple = (), rounds: int = ROUNDS,
                 choose_core: Callable[[], int | None] | None = None) -> Iterator[tuple[str, dict]]:
    """Each ``(variant, src)`` in its own process (:class:`VariantProcess`), yielded as
    ``(variant, result)`` as each ends, in ``jobs`` order. ``parallel``: every compile phase at
    once, then the steps timed one process at a time in ``rounds`` rounds interleaved across the
    processes (:func:`round_order`), so that a drift of the host or device over the
    call (BENCHMARKS.md, "Model zoo, part 13": one compile timed second and sixth in one call) falls
    on every variant alike; the first-call seconds are those of compiles sharing the host. Else one
    process after another, one round each. Either way each process compiles
    every shape before it times any, and times its steps on CPU ``core`` (:func:`timing_core`) where
    one is given; ``choose_core`` (:func:`timing_core` with the ``--pin`` mode), where given, picks that
    core when the compile phases are done, right before the steps are timed, as the engine does
    (the core speeds of the host at the call's start are minutes old by then, and were read while
    nothing compiled). ``early`` (parallel only): processes started before (``--overlap-diagnose``),
    timed first, in their order. Every process is killed and its cache removed however this ends
    (an error, or a caller that stops reading)."""
    procs: list[VariantProcess] = list(early)
    try:
        if not parallel:
            for variant, src in jobs:
                procs.append(proc := VariantProcess(src, variant, device, shapes, steps, timeout))
                proc.wait_ready()
                proc.time_round(1, choose_core() if choose_core else core)
                yield variant, proc.finish()
            return
        procs += [VariantProcess(src, variant, device, shapes, steps, timeout) for variant, src in jobs]
        for proc in procs:
            proc.wait_ready()
        if choose_core is not None:
            core = choose_core()
        for r in range(rounds):  # interleaved, rotated: a drift over the call hits all alike
            for proc in round_order(procs, r):
                proc.time_round(rounds, core)
        for proc in procs:
            res = proc.finish()
            res["compiled_alongside"] = (["diagnose"] if proc in early else []) + [
                q.variant for q in procs if q is not proc and _overlap(proc, q)]
            yield proc.variant, res
    finally:
        for proc in procs:
            proc.close()


def run_cli(argv: list[str], env: dict, cwd: Path, timeout: float) -> tuple[int, str]:
    """``stackpart ARGV`` in a fresh process, as a user runs it: its exit code and its stdout +
    stderr. Past ``timeout`` seconds it gets SIGTERM, as ``timeout(1)`` sends (diagnose then writes
    its report and diagnose.log with what it measured), then SIGKILL 30 s later; the exit code is 124
    and the output what it printed before."""
    p = subprocess.Popen([sys.executable, "-c", CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, cwd=cwd)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return 124, out or ""


def run_plan(work: Path, name: str, device: str, shapes: list[dict], smoke: bool, timeout: float,
             knobs: tuple[str, ...] = (), cli: Callable[[list[str], dict, Path, float], tuple[int, str]] = run_cli,
             report: Path | None = None) -> dict:
    """``stackpart diagnose`` then ``rewrite --apply`` on a copy of the family's SRC (``work/src``
    copied to ``work/plan_src``); the plan's actions, the exit codes and the seconds. ``knobs``: more
    ``diagnose`` options (tests/zoo_cpu.py passes ``--steps 1 --budget 60 --no-overlap``). ``cli``:
    how a command runs, :func:`run_cli`'s signature (tests/zoo_cpu.py runs them in its own process).
    ``report``: diagnose's report folder (default ``work/report``); ``--keep-reports`` puts it under
    OUT, so a call stopped at its time limit still brings back the streamed diagnose.log."""
    src = work / "plan_src"
    report = report or work / "report"
    shutil.copytree(work / "src", src)
    shape_args = [a for s in shapes for a in ("--shape", ",".join(f"{k}={v}" for k, v in s.items()))]
    argv = ["diagnose", "--harness", "harness.py", str(src), "-o", str(work / "plan.yaml"),
            "--report-dir", str(report), "--dtype", "bfloat16" if device == "cuda" else "float32",
            "--device", device, *shape_args, *knobs]
    cache = Path(tempfile.mkdtemp(prefix="zoo-cache-"))
    t = time.perf_counter()
    out: dict = {}
    out["diagnose_exit"], tail = cli(argv, _env(cache), work, timeout)
    out["diagnose_tail"] = tail[-3000:]
    out["ladder_search_s"] = time.perf_counter() - t
    out["where_the_seconds_went"] = seconds_breakdown(report / "report.json")
    plan = work / "plan.yaml"
    if out["diagnose_exit"] == 0 and plan.exists():
        import yaml
        actions = (yaml.safe_load(plan.read_text()) or {}).get("actions") or []
        out["actions"] = [{k: a.get(k) for k in ("action", "target", "strategy", "options", "knob") if a.get(k) is not None}
                          for a in actions]
        out["apply_exit"], tail = cli(["rewrite", "--plan", str(plan), str(src), "--apply"], _env(cache), work, 120)
        out["apply_tail"] = tail[-800:]
    shutil.rmtree(cache, ignore_errors=True)  # after the apply, whose torch import makes the folder again
    return out


def seconds_breakdown(report_json: Path) -> dict:
    """From diagnose's report.json: its own seconds, each rung's seconds, the search's clock (the reference's start
    before the search, waits for builds, cold phases, timing) and the program as it is's child
    phases (``phases_s``: build, first calls, block share, float64 run, ...); ``{}`` without it."""
    try:
        report = json.loads(report_json.read_text())
    except (OSError, ValueError):
        return {}
    rungs = {r["name"]: r.get("seconds") for r in report.get("rungs", [])}
    search = next((r for r in report.get("rungs", []) if r["name"] == "search"), {})
    measured = search.get("measurement") or {}
    as_is = next((row for row in measured.get("candidates", []) if row.get("candidate") == "as-is"), {})
    return {"diagnose_s": report.get("seconds"),  # from diagnose's start: the process's interpreter and imports before it are not in it
            "rungs_s": rungs, "search_clock_s": measured.get("clock"), "as_is_phases_s": as_is.get("phases_s"),
            "notes": [n for n in measured.get("notes", []) if "started" in n or "cold phases ran" in n],
            "search_ms": search_figures(measured)}


def search_figures(measured: dict) -> dict:
    """What the search timed of the candidate it chose and of each other timed one: per shape each
    process's median step (ms; two processes on a GPU), the quiet figure the decision used, and the
    contended one. Beside the zoo's own process of the plan, a gap between the two shows whether
    the plan's figure moved between processes or the zoo's protocol moved it."""
    out: dict = {"chosen": measured.get("chosen")}
    for row in measured.get("candidates", []):
        if row.get("step_ms") is None:
            continue
        out[row.get("candidate")] = {"step_ms": row["step_ms"], "process_ms_per_shape": row.get("process_ms_per_shape"),
                                     "contended_ms_per_shape": row.get("contended_ms_per_shape")}
        if row.get("contended_windows_ms_per_shape"):  # each contended window's median: their spread is the contended band
            out[row.get("candidate")]["contended_windows_ms_per_shape"] = row["contended_windows_ms_per_shape"]
    return out


#: The wall-time bar on ladder + search (the whole ``stackpart diagnose`` process), seconds (issue 30).
LADDER_SEARCH_BAR_S = 180.0


def verdicts(variants: dict[str, dict], plan: dict | None = None) -> dict:
    """The issue's targets over one family's measured variants (module docstring); with the
    plan's diagnose record (:func:`run_plan`) also its ladder + search seconds against
    :data:`LADDER_SEARCH_BAR_S` (a diagnose that did not exit 0 has not met it; one that shared the
    host with the variants' compile phases, ``--overlap-diagnose``, is flagged and, where it met it,
    not judged: None)."""
    second = {k: v for k, v in variants.items() if k.endswith(REPLICA)}
    variants = {k: v for k, v in variants.items() if not k.endswith(REPLICA)}
    out = _speed_verdicts(variants)
    if second:
        out["replicates"] = replicate_spread(variants, second)
        faster = faster_processes(variants, second)
        if faster:  # the same bars on each variant's faster process, as the engine's figures are: beside, not instead
            out["on_faster_process"] = {k: v for k, v in _speed_verdicts(faster).items()
                                        if k not in ("plan_outputs_bitwise_equal_to",)}
    pooled = one_program(variants, second)
    if pooled:  # a plan of no actions runs eager's program: the bars on its processes pooled, beside
        out["on_one_program"] = {k: v for k, v in _speed_verdicts(pooled).items()
                                 if k not in ("plan_outputs_bitwise_equal_to",)}
    passing = {k: v for k, v in variants.items() if _passes(v)}
    if passing and all("blocked_ms" in sh for v in passing.values() for sh in v["shapes"]):
        # the same bars on the blocked figures: reported beside, not instead (module docstring)
        out["on_blocked_ms"] = {k: v for k, v in _speed_verdicts(variants, "blocked_ms").items()
                                if k not in ("passing", "plan_outputs_bitwise_equal_to")}
    if passing and all("best_round_ms" in sh for v in passing.values() for sh in v["shapes"]):
        # each variant's fastest round: the host's slow phases only add time (module docstring)
        out["on_best_round"] = {k: v for k, v in _speed_verdicts(variants, "best_round_ms").items()
                                if k not in ("passing", "plan_outputs_bitwise_equal_to")}
    if plan and plan.get("ladder_search_s") is not None:
        out["ladder_search_s"] = round(plan["ladder_search_s"], 1)
        out["ladder_search_within_3_min"] = plan.get("diagnose_exit") == 0 and plan["ladder_search_s"] <= LADDER_SEARCH_BAR_S
        if plan.get("overlapped"):  # diagnose shared the host with the variants' compiles
            out["plan_chosen_beside_compiles"] = True
            if out["ladder_search_within_3_min"]:  # its seconds are not a figure of its own; a failed one still failed
                out["ladder_search_within_3_min"] = None
    return out


#: A second process of a variant (``--replicate``) is named ``<variant>#2``.
REPLICA = "#2"


def replicate_spread(first: dict[str, dict], second: dict[str, dict]) -> dict:
    """Per variant run twice (``--replicate``): each shape's step (and ``blocked_ms``) in its two
    processes, and the largest relative spread between them, ``|a - b| / min(a, b)``: how far one
    process's figure is from another's of the same compile, which the verdicts on one process do
    not see. Not judged."""
    out = {}
    for name, v2 in second.items():
        v1 = first.get(name.removesuffix(REPLICA))
        if not v1 or "error" in v1 or "error" in v2:
            out[name] = {"error": (v2.get("error") or (v1 or {}).get("error") or "its first process did not run")[:200]}
            continue
        row: dict = {}
        for key in ("median_ms", "blocked_ms"):
            pairs = [(a.get(key), b.get(key)) for a, b in zip(v1["shapes"], v2["shapes"])]
            if all(a and b for a, b in pairs):
                row[key] = [[round(a, 3), round(b, 3)] for a, b in pairs]
                row[f"{key}_spread"] = round(max(abs(a - b) / min(a, b) for a, b in pairs), 4)
        out[name] = row
    return out


def faster_processes(first: dict[str, dict], second: dict[str, dict]) -> dict[str, dict]:
    """Every variant with each shape's ``median_ms`` the lower of its two processes' (the engine's
    rule for a variant timed twice, :func:`rewriter.engine.replicas.merge_replicates`: a slow
    process is a one-sided error), where every variant that passes, the plan and eager included,
    ran twice (``--replicate``); else ``{}``: a bar between one variant's faster of two and
    another's one process would favour the first."""
    wanted = [k for k, v in first.items() if _passes(v) or k in ("plan", "eager")]
    if not wanted or any(k + REPLICA not in second or "error" in second[k + REPLICA] for k in wanted):
        return {}
    out = {}
    for k in wanted:
        v, v2 = first[k], second[k + REPLICA]
        shapes = [dict(a, median_ms=min(a["median_ms"], b["median_ms"])) if a.get("median_ms") and b.get("median_ms") else a
                  for a, b in zip(v["shapes"], v2["shapes"])]
        out[k] = dict(v, shapes=shapes)
    return out


def one_program(first: dict[str, dict], second: dict[str, dict]) -> dict[str, dict]:
    """Where the plan has no actions, its process runs eager's program (the source as it is): every
    variant as measured, with ``plan`` and ``eager`` both given, per shape, the median of the
    ``median_ms`` of every process of that one program (``eager``, ``plan`` and their ``#2``
    processes), so the bar between them is 1.0 and the bar against another variant uses three or four
    processes of the program, not one. Else ``{}``. Why: two processes of one program differ by
    more than the 5% bar on a launch-bound step (BENCHMARKS.md, "Model zoo, part 17": ViT's eager
    processes 4.3 and 4.6-4.8 ms per step, all rounds, the same kernels)."""
    plan, eager = first.get("plan"), first.get("eager")
    if not plan or not eager or plan.get("actions") != [] or not _passes(plan) or not _passes(eager):
        return {}
    procs = [v for k in ("plan", "eager") for v in (first[k], second.get(k + REPLICA)) if v and _passes(v)]
    shapes = [dict(row, median_ms=statistics.median(p["shapes"][i]["median_ms"] for p in procs))
              for i, row in enumerate(eager["shapes"])]
    return dict(first, plan=dict(plan, shapes=shapes), eager=dict(eager, shapes=shapes))


def _passes(v: dict) -> bool:
    """A variant that ran, passed numerics and fell back nowhere."""
    return bool("error" not in v and not v.get("fallbacks") and v.get("shapes") and v["shapes"][0].get("numerics_ok", False))


def _speed_verdicts(variants: dict[str, dict], key: str = "median_ms") -> dict:
    """The speed bars: the plan against the fastest variant passing numerics without a fallback, and
    eager, on each shape's ``key`` figure (ms)."""

    def step(v):  # the mean of the per-shape steady steps
        return statistics.mean(s[key] for s in v["shapes"])
    good = {k: step(v) for k, v in variants.items() if _passes(v)}
    out: dict = {"passing": sorted(good, key=good.get)}
    if not good or "plan" not in variants or "eager" not in variants:
        return out
    fastest = min(good, key=good.get)
    plan, eager = variants["plan"], variants["eager"]
    if not _passes(plan):
        out["plan_ok"] = False
        return out
    out["fastest"] = fastest
    out["plan_speed_vs_fastest"] = good[fastest] / good["plan"]
    out["plan_within_5pct_of_fastest"] = out["plan_speed_vs_fastest"] >= 0.95
    out["plan_not_slower_than_eager"] = good["plan"] <= step(eager) * 1.02
    best_vs_eager = step(eager) / good[fastest]
    out["best_vs_eager"] = best_vs_eager
    # "a variant >= 1.2x faster than eager" is another variant: a plan of no actions is eager's program
    others = [t for k, t in good.items() if k != "plan"]
    out["not_change_nothing_when_1_2x"] = bool(plan.get("actions")) or not others or step(eager) / min(others) < 1.2
    same = bitwise_equal_to_plan(variants)
    if same:  # a fact beside the verdicts, never a verdict: the figures stay as measured
        out["plan_outputs_bitwise_equal_to"] = same
        out["fastest_computes_the_plans_outputs"] = fastest in same
    return out


def bitwise_equal_to_plan(variants: dict[str, dict]) -> list[str]:
    """The variants whose main output at the first shape is the plan's bit for bit (the same
    ``output_sha256`` of its float32 bytes). Where the fastest passing variant is one of them, the
    plan computes what it computes, and a gap between their steps is one between two processes of
    one computation (``--replicate`` measures that spread); the verdicts still judge the figures
    as measured."""
    def digest(v):
        return (v.get("shapes") or [{}])[0].get("output_sha256") if "error" not in v else None
    mine = digest(variants.get("plan") or {"error": "none"})
    return sorted(k for k, v in variants.items() if k != "plan" and mine and digest(v) == mine)


def markdown(results: dict) -> str:
    lines = ["| family | variant | step ms per shape | cold s | new-shape s | RMSE vs fp32 (eager's) | fallbacks | note |",
             "|---|---|---|---|---|---|---|---|"]
    for fam, r in results.items():
        for vname, v in r["variants"].items():
            if "error" in v:
                lines.append(f"| {fam} | {vname} | error: {v['error'][:120]} | | | | | |")
                continue
            if vname == "diagnose":
                acts = "; ".join(f"{a.get('action')} {a.get('target')} {a.get('strategy') or ''}".strip() for a in v.get("actions") or [])
                lines.append(f"| {fam} | diagnose | | | | | | exit {v['diagnose_exit']}, apply exit {v['apply_exit']}, "
                             f"actions: {acts or 'none'}, ladder+search {v['ladder_search_s']:.0f} s |")
                continue
            sh = v["shapes"]
            num = f"{sh[0].get('rmse', float('nan')):.4g} ({sh[0].get('eager_rmse', float('nan')):.4g})" + ("" if sh[0].get("numerics_ok") else " FAIL")
            note = v.get("note", "")
            if vname == "plan":
                note = f"{len(r.get('plan', {}).get('actions') or [])} actions, ladder+search {r.get('plan', {}).get('ladder_search_s', 0):.0f} s"
            lines.append(f"| {fam} | {vname} | {' / '.join('%.2f' % s['median_ms'] for s in sh)} | {sh[0]['first_call_s']:.1f} | "
                         f"{sh[1]['first_call_s'] if len(sh) > 1 else float('nan'):.1f} | {num} | {len(v.get('fallbacks') or [])} | {note} |")
        lines.append(f"| {fam} | verdicts | {json.dumps(r.get('verdicts', {}))} | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="llama,mixtral", help="comma-separated families (default llama,mixtral)")
    ap.add_argument("--variants", default="eager,whole,per-block,regions,plan",
                    help="comma-separated; 'diagnose': stackpart's diagnose and apply only (ladder+search seconds, no timing of the plan)")
    ap.add_argument("--smoke", action="store_true", help="tiny configs on the CPU, float32")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per variant process and per diagnose")
    ap.add_argument("--deadline", type=float, default=560.0, help="no family starts after this many seconds")
    ap.add_argument("--pin", choices=("shared", "off"), default="shared",
                    help="the timed processes' launching thread: on the core of median speed (default), or where the scheduler puts it")
    ap.add_argument("--overlap-diagnose", action="store_true",
                    help="start the variants other than the plan with diagnose, for a family whose diagnose and variants do not fit "
                         "one call one after the other (UNet); diagnose then shares the host: it chooses the plan beside those "
                         "compiles, and its seconds are not judged")
    ap.add_argument("--serial", action="store_true",
                    help="each variant's process after the last (default: their compile phases at once, the steps timed one at a time)")
    ap.add_argument("--replicate", default="",
                    help="comma-separated variants also run in a second process ('<variant>#2', timed in the same rounds "
                         "as the others): the spread between two processes of one compile, reported apart (not judged)")
    ap.add_argument("--own-compile", action="store_true",
                    help="the harness compiles the model itself (build_model returns torch.compile(model)): the "
                         "program as users have it when they already compile; add the 'as-is' variant (the program "
                         "as it runs, its own compile included); the other variants take that compile off first")
    ap.add_argument("--keep-reports", action="store_true",
                    help="write each family's diagnose report (report.md, diagnose.log, search.log, plan.yaml) under OUT/reports/")
    args = ap.parse_args(argv)
    import torch
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    started = time.perf_counter()
    for name in args.only.split(","):
        if time.perf_counter() - started > args.deadline:
            results[name] = {"variants": {}, "not_run": "deadline"}
            continue
        work = Path(tempfile.mkdtemp(prefix=f"zoo-{name}-"))
        (work / "src").mkdir()
        (work / "src" / "harness.py").write_text(harness_text(name, args.smoke, args.own_compile))
        shapes = shapes_of(name, args.smoke)
        report = OUT / "reports" / name if args.keep_reports else None
        if report is not None:  # a diagnose killed before its report.json must not leave an earlier run's read as its own
            shutil.rmtree(report, ignore_errors=True)
        r: dict = {"shapes": shapes, "device": device, "variants": {},
                   "timing_core": f"{args.pin}: chosen after the compile phases, before the timing (each variant's pinned_core)",
                   "protocol": "serial" if args.serial else f"compile phases in parallel, steps timed one process at a time in {ROUNDS} interleaved rounds"}
        results[name] = r

        def save(variant: str | None) -> None:
            """Print ``variant``'s result (None: the diagnose record) and rewrite zoo.json and zoo.md."""
            shown = r["variants"][variant] if variant else {k: v for k, v in r["plan"].items() if not k.endswith("_tail")}
            print(f"{name} {variant or 'diagnose and apply'}: "
                  f"{json.dumps({k: v for k, v in shown.items() if k != 'traceback'})[:400]}", flush=True)
            r["verdicts"] = verdicts(r["variants"], r.get("plan"))
            # rewritten after every step: a call stopped at its wall limit keeps what finished
            (OUT / "zoo.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                                                      "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                                                      "results": results}, indent=1))
            (OUT / "zoo.md").write_text(markdown(results))

        wanted = args.variants.split(",")
        others = [v for v in wanted if v not in ("diagnose", "plan")]
        twice = [v for v in args.replicate.split(",") if v]
        if set(twice) - set(wanted):
            print(f"{name}: --replicate {','.join(sorted(set(twice) - set(wanted)))} ignored: not in --variants",
                  file=sys.stderr, flush=True)
        early: list[VariantProcess] = []
        if args.overlap_diagnose and not ("plan" in wanted and others and not args.serial):
            print(f"{name}: --overlap-diagnose ignored: it needs 'plan' and another variant in --variants, "
                  "and no --serial", file=sys.stderr, flush=True)
        elif args.overlap_diagnose:
            r["protocol"] = ("the variants other than the plan compiled beside diagnose (which chose the plan with them "
                             "compiling); steps timed one process at a time after every compile phase")
            early = [VariantProcess(work / "src", v, device, shapes, args.steps, args.timeout)
                     for v in others + [o + REPLICA for o in reversed(others) if o in twice]]
            others = []
        try:
            if "diagnose" in wanted or "plan" in wanted:  # diagnose first, alone unless --overlap-diagnose: it times candidates
                r["plan"] = run_plan(work, name, device, shapes, args.smoke, args.timeout, report=report)
                r["plan"]["overlapped"] = bool(early)
                save(None)  # a call stopped in the variants' compile phase keeps the diagnose
                if "diagnose" in wanted:  # the plan's diagnose and apply only: its seconds, not its speed
                    r["variants"]["diagnose"] = {"variant": "diagnose", "diagnose_exit": r["plan"].get("diagnose_exit"),
                                                 "apply_exit": r["plan"].get("apply_exit"), "actions": r["plan"].get("actions"),
                                                 "ladder_search_s": round(r["plan"]["ladder_search_s"], 1)}
                    save("diagnose")
            jobs = [(v, work / "src") for v in others]
            if "plan" in wanted:
                if r["plan"].get("apply_exit") in (0, None) and r["plan"].get("diagnose_exit") == 0:
                    jobs.append(("plan", work / "plan_src"))
                else:
                    r["variants"]["plan"] = {"variant": "plan", "error": f"diagnose exit {r['plan'].get('diagnose_exit')}, "
                                             f"apply exit {r['plan'].get('apply_exit')}"}
                    save("plan")
            jobs += [(v + REPLICA, src) for v, src in reversed(jobs) if v in twice]
            for variant, res in run_variants(jobs, device, shapes, args.steps, args.timeout, parallel=not args.serial,
                                             choose_core=lambda: timing_core(args.pin), early=early):
                if variant.removesuffix(REPLICA) == "plan":
                    res["actions"] = r["plan"].get("actions")
                r["variants"][variant] = res
                save(variant)
        finally:  # early processes that never reached run_variants (an error or an interrupt before it)
            for proc in early:
                proc.close()
        if report is not None and report.is_dir():
            (report / "trace.json").unlink(missing_ok=True)  # the profiler's trace: large, in report.json's figures
            if (work / "plan.yaml").exists():
                shutil.copy(work / "plan.yaml", report / "plan.yaml")
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
