"""Models from an installed library (issue 13), on one GPU: the plan applied from the user's site.

Five parts, each writing ``$OUT/library_models_<part>.{json,md}``:

* ``copy``: HF Llama 16 layers/2048 (bf16, 8x512, inference) built from the installed
  transformers. The same per-block plan (``compile`` of ``LlamaDecoderLayer``) is applied two ways:
  from the site (``transformers.models.llama.modeling_llama:LlamaDecoderLayer``, the generated
  ``_stackpart/library.py``) and by decorator on a copy of the modeling file under SRC
  (benchmarks/diagnose_hf.py's symlink farm). Each tree is timed in its own process, interleaved
  A B A B; the target is the site's step within 3% of the copy's.
* ``gentime``: the static-cache path and the plan a ``gen`` run wrote (``--plan-file``), timed
  interleaved (``--rounds`` x ``--repeats`` calls), without re-running diagnose;
* ``gen``: HF Llama 8 layers/2048 greedy generation, 32 new tokens from a 1x128 prompt, the
  default (dynamic) KV cache in the harness. Timed in their own processes: eager, transformers'
  static cache (``generation_config.cache_implementation = "static"``, which compiles the decode step
  itself), then ``stackpart diagnose`` on the harness (Inductor, the search decides) and the plan it
  writes, applied. ms/token = one ``generate`` call / 32. Targets: the plan <= 1.0x the static-cache
  path measured in the same run; no written plan slower than eager.
* ``genpaired``: the same comparison with the process-to-process variance paired out. ``--procs``
  processes (8), each building the weights once and three arms on instances holding them: the plan
  (``--plan-file``, rewritten once into a temp tree by ``stackpart rewrite``, its site function
  building the model), transformers' static cache set by hand, and eager with the default cache.
  Each arm is warmed until steady (Dynamo's counters and CUDA-graph recordings are watched), then
  timed in rotating rounds (A B C / B C A / C A B, ``--rounds`` x ``--repeats`` calls); the arm built
  and warmed first alternates between processes; one Inductor cache dir is shared by all of them.
  Reported: per-process medians and ratio plan/static, and over processes the geometric mean of the
  ratio with a 95% t interval over the log ratios (and plan/eager); whether the two static arms
  generated the same tokens. ``--budget`` (400 s): no process starts past it.
* ``gensep``: genpaired without the interference of two compiled instances in one process (H200
  run 22: both compiled arms re-recorded CUDA graphs 8-14 times per arm per process in the timed
  rounds). Each of ``--procs`` processes (8) holds ONE compiled arm, the plan or the static cache
  alternating by process, plus eager with the default cache as the in-process yardstick (eager
  compiles nothing, so it does not interfere); which of the two is built and warmed first
  alternates every two processes (plan first, static first, eager then plan, eager then static).
  The same TIME_PAIRED script runs with the arm list ``<arm>,eager``: warm-up until steady, then
  ``--rounds`` rounds alternating arm eager / eager arm, ``--repeats`` calls each. Per process:
  arm/eager, the ratio of the two arms' median ms/token. Over processes:
  ``plan/static = exp(mean log(plan/eager) over the plan processes - mean log(static/eager) over
  the static ones)`` with a 95% Welch t interval on that difference of log means
  (``welch_log_ratio``: formula and sources there), judged by ``ratio_verdict``; for reference
  the raw ratio of median ms/token across processes (plan processes' over static processes'; the
  process-to-process variance the eager yardstick divides out stays in it); the CUDA-graph
  recordings and Dynamo/Inductor counters per arm in the timed rounds (expected zero); whether
  each process's compiled arm generated the same tokens as its eager arm in every round. One
  Inductor cache dir shared by all processes; ``--budget`` (400 s) as genpaired.

Run on the H200 with the shared wheels (benchmarks/README.md):
``OUT=$OUT python3 benchmarks/library_models.py --part copy`` (about 2 min) and
``OUT=$OUT python3 benchmarks/library_models.py --part gen`` (about 6-8 min),
``OUT=$OUT python3 benchmarks/library_models.py --part genpaired`` (about 6-7 min),
``OUT=$OUT python3 benchmarks/library_models.py --part gensep`` (about 5-6 min, an estimate, not yet
run: run 22's genpaired processes took 52 s for the first (cold compile) and 37-45 s for the rest,
of which about 20 s is start-up, ~13.5 s the timed rounds of three arms and 4-16 s the warm-ups; a
gensep process times two arms (~11 s: 30 calls at ~80 ms compiled and at ~290 ms eager) and warms
one compiled arm, so ~35-40 s, and the first plan and the first static process may each compile
cold (~50 s): 2 x 50 + 6 x 38 = ~330 s for 8 processes, inside the 400 s budget). Its Inductor
cache is fresh unless TORCHINDUCTOR_CACHE_DIR is set. CPU smoke (tiny configs):
``OUT=/tmp/o python benchmarks/library_models.py --part copy --smoke`` (``--part genpaired
--smoke``: ~15 s, tests/test_library_models_genpaired.py; ``--part gensep --smoke``: ~16 s for its
2 processes, ~26 s with ``--procs 4`` on 2 CPU cores, tests/test_library_models_gensep.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out"))
CLI = "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))"

LLAMA16 = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
               num_key_value_heads=8, max_position_embeddings=2048)
LLAMA8 = dict(LLAMA16, num_hidden_layers=8)
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256)
NEW_TOKENS = 32


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "8"), **(extra or {}))


def run(cmd: list[str], timeout: float, cwd: Path = ROOT, extra_env: dict[str, str] | None = None) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env(extra_env), capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout or "", (exc.stderr or "") + f"\ntimeout after {timeout:.0f} s"


def last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the child's stdout")


FORWARD_HARNESS = '''"""Harness: HF Llama from the installed transformers, random weights."""
import torch
import transformers

CONFIG = {config!r}


def build_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**CONFIG, attn_implementation="sdpa", use_cache=False)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # 1.1B parameters: initialised on the GPU
        model = transformers.LlamaForCausalLM(config)
    return model.eval()


def make_inputs(batch: int = 8, seq: int = 512):
    g = torch.Generator().manual_seed(1000003 * batch + seq)
    return {{"input_ids": torch.randint(0, CONFIG["vocab_size"], (batch, seq), generator=g)}}
'''

#: Times one tree's model: built through its harness (so the plan's site or decorators apply),
#: bf16 on the device, ``steps`` forwards at (batch, seq) after warm-up; prints JSON.
TIME_FORWARD = textwrap.dedent("""\
    import json, statistics, sys, time
    import torch
    sys.path.insert(0, sys.argv[1])
    import harness
    batch, seq, steps, device = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    t0 = time.perf_counter()
    model = harness.build_model().to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    inputs = {k: v.to(device) for k, v in harness.make_inputs(batch=batch, seq=seq).items()}
    with torch.no_grad():
        first = time.perf_counter()
        model(**inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        first = time.perf_counter() - first
        for _ in range(3):
            model(**inputs)
        times = []
        for _ in range(steps):
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); model(**inputs); b.record(); torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            else:
                s = time.perf_counter(); model(**inputs); times.append((time.perf_counter() - s) * 1e3)
    compiled = sum(getattr(m, "_compiled_call_impl", None) is not None or hasattr(m.forward, "_torchdynamo_orig_callable")
                   or hasattr(type(m).forward, "_torchdynamo_orig_callable") for m in model.modules())
    print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "first_call_s": first,
                      "compiled_modules": compiled, "torch": torch.__version__}))
""")


def plan_text(target: str, site: str | None) -> str:
    return ("version: 1\n" + (f"site: {site}\n" if site else "") +
            f"actions:\n  - action: compile\n    target: {target}\n")


def part_copy(smoke: bool, rounds: int = 2) -> dict:
    """The site's per-block plan against the same plan by decorator on a copy under SRC."""
    diag = bench_module("diagnose_hf")
    device = "cpu" if smoke else "cuda"
    config = TINY if smoke else LLAMA16
    batch, seq, steps = (2, 16, 5) if smoke else (8, 512, 30)
    work = Path(tempfile.mkdtemp(prefix="library-copy-"))
    trees = {}
    # A: the installed package, the plan applied from the site
    site_src = work / "site"
    site_src.mkdir()
    (site_src / "harness.py").write_text(FORWARD_HARNESS.format(config=config))
    (work / "site.yaml").write_text(plan_text("transformers.models.llama.modeling_llama:LlamaDecoderLayer", "harness.py::build_model"))
    trees["site"] = (site_src, work / "site.yaml")
    # B: transformers' modeling file copied under SRC (the symlink farm), decorated there
    copy_src = diag.build_src(work / "copy", "llama", smoke=True, device="cpu")
    (copy_src / "harness.py").write_text(FORWARD_HARNESS.format(config=config).replace(
        "model = transformers.LlamaForCausalLM(config)", "model = __import__('transformers.models.llama.modeling_llama', fromlist=['x']).LlamaForCausalLM(config)"))
    (work / "copy.yaml").write_text(plan_text("transformers/models/llama/modeling_llama.py::LlamaDecoderLayer", None))
    trees["copy"] = (copy_src, work / "copy.yaml")
    out: dict = {"part": "copy", "model": "Llama", "config": config, "shape": f"{batch}x{seq}", "device": device, "trees": {}}
    for name, (src, plan) in trees.items():
        rc, so, se = run([sys.executable, "-c", CLI, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"], 120)
        out["trees"][name] = {"rewrite_rc": rc, "rewrite_stderr": se[-800:]}
    times: dict[str, list] = {"site": [], "copy": []}
    for round_ in range(rounds):
        for name in ("site", "copy"):
            rc, so, se = run([sys.executable, "-c", TIME_FORWARD, str(trees[name][0]), str(batch), str(seq), str(steps), device], 400)
            if rc != 0:
                times[name].append({"error": se.strip().splitlines()[-1:] if se.strip() else f"rc {rc}"})
                continue
            times[name].append(last_json(so))
    out["runs"] = times
    meds = {n: [r["median_ms"] for r in v if "median_ms" in r] for n, v in times.items()}
    if meds["site"] and meds["copy"]:
        out["site_ms"] = statistics.median(meds["site"])
        out["copy_ms"] = statistics.median(meds["copy"])
        out["site_over_copy"] = out["site_ms"] / out["copy_ms"]
        out["within_3pct"] = abs(out["site_over_copy"] - 1) <= 0.03
    shutil.rmtree(work, ignore_errors=True)
    return out


GEN_HARNESS = '''"""Harness: greedy generation of {new} tokens with transformers' default KV cache (HF Llama, installed)."""
import torch
import transformers

CONFIG = {config!r}


class Generate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = transformers.LlamaConfig(**CONFIG, attn_implementation="sdpa")
        self.lm = transformers.LlamaForCausalLM(config)

    def forward(self, input_ids):
        return self.lm.generate(input_ids, max_new_tokens={new}, min_new_tokens={new}, do_sample=False, pad_token_id=0)


def build_model():
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Generate()
    return model.eval()


def make_inputs(batch: int = 1, seq: int = 128):
    g = torch.Generator().manual_seed(7)
    return {{"input_ids": torch.randint(1, CONFIG["vocab_size"], (batch, seq), generator=g)}}
'''

#: Times generate through a tree's harness; argv: tree, device, variant (plain|static), repeats.
TIME_GENERATE = textwrap.dedent("""\
    import json, statistics, sys, time
    import torch
    sys.path.insert(0, sys.argv[1])
    import harness
    device, variant, repeats = sys.argv[2], sys.argv[3], int(sys.argv[4])
    model = harness.build_model().to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    if variant == "static":
        model.lm.generation_config.cache_implementation = "static"
    inputs = {k: v.to(device) for k, v in harness.make_inputs().items()}
    def once():
        if device == "cuda":
            torch.cuda.synchronize()
        s = time.perf_counter()
        with torch.no_grad():
            out = model(**inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - s, out
    warm = [once()[0] for _ in range(3)]
    times, out = [], None
    for _ in range(repeats):
        t, out = once()
        times.append(t)
    new = out.shape[1] - inputs["input_ids"].shape[1]
    print(json.dumps({"variant": variant, "ms_per_token": statistics.median(times) * 1e3 / new, "new_tokens": new,
                      "warm_s": warm, "times_s": times, "torch": torch.__version__}))
""")


def part_gen(smoke: bool, budget: float) -> dict:
    """Eager, transformers' static cache, and diagnose's plan, on one generation harness."""
    device = "cpu" if smoke else "cuda"
    config = TINY if smoke else LLAMA8
    work = Path(tempfile.mkdtemp(prefix="library-gen-"))
    src = work / "src"
    src.mkdir()
    new = 8 if smoke else NEW_TOKENS
    (src / "harness.py").write_text(GEN_HARNESS.format(config=config, new=new))
    repeats = 3 if smoke else 5
    out: dict = {"part": "gen", "model": "Llama", "config": config, "device": device, "new_tokens": new, "prompt": "1x128"}
    timings: dict = {}
    for variant in ("plain", "static"):
        rc, so, se = run([sys.executable, "-c", TIME_GENERATE, str(src), device, variant, str(repeats)], 300)
        timings["eager" if variant == "plain" else "static_cache"] = last_json(so) if rc == 0 else {"error": se.strip().splitlines()[-3:]}
    plan = work / "plan.yaml"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", CLI, "diagnose", "--harness", "harness.py", str(src), "-o", str(plan),
           "--shape", "batch=1,seq=128", "--dtype", "bfloat16" if not smoke else "float32", "--device", device,
           "--budget", str(budget), "--runs", "1000000", "--restarts", "30"]
    rc, so, se = run(cmd, 330)
    out["diagnose"] = {"rc": rc, "wall_s": time.perf_counter() - t0, "stderr_tail": se[-2500:]}
    if plan.exists():
        out["plan"] = plan.read_text()
        report = work / "stackpart-diagnose" / "report.json"
        if report.exists():
            data = json.loads(report.read_text())
            search = next((r for r in data["rungs"] if r["name"] == "search"), {})
            out["search"] = {k: search.get("measurement", {}).get(k) for k in ("chosen", "candidates", "pruned")}
            out["search_verdict"] = search.get("verdict")
        applied = work / "applied"
        shutil.copytree(src, applied)
        rc2, _, se2 = run([sys.executable, "-c", CLI, "rewrite", "--plan", str(plan), str(applied), "--apply", "--no-validate"], 120)
        out["rewrite_rc"] = rc2
        if rc2 == 0:
            rc3, so3, se3 = run([sys.executable, "-c", TIME_GENERATE, str(applied), device, "plain", str(repeats)], 400)
            timings["plan"] = last_json(so3) if rc3 == 0 else {"error": se3.strip().splitlines()[-3:]}
        else:
            out["rewrite_stderr"] = se2[-1500:]
    out["timings"] = timings
    ms = {k: v.get("ms_per_token") for k, v in timings.items() if isinstance(v, dict)}
    out["ms_per_token"] = ms
    if ms.get("plan") and ms.get("static_cache"):
        out["plan_over_static"] = ms["plan"] / ms["static_cache"]
        out["plan_at_most_static"] = ms["plan"] <= ms["static_cache"] * 1.0
    if ms.get("plan") and ms.get("eager"):
        out["plan_over_eager"] = ms["plan"] / ms["eager"]
    shutil.rmtree(work, ignore_errors=True)
    return out


def gen_trees(smoke: bool, plan_file: Path, part: str) -> tuple:
    """The generation harness under a temp ``src/`` and a copy with ``plan_file`` applied by
    ``stackpart rewrite``: ``(device, config, new tokens, work dir, src, applied, rewrite rc,
    rewrite stderr)``."""
    device = "cpu" if smoke else "cuda"
    config = TINY if smoke else LLAMA8
    new = 8 if smoke else NEW_TOKENS
    work = Path(tempfile.mkdtemp(prefix=f"library-{part}-"))
    src = work / "src"
    src.mkdir()
    (src / "harness.py").write_text(GEN_HARNESS.format(config=config, new=new))
    applied = work / "applied"
    shutil.copytree(src, applied)
    rc, _, se = run([sys.executable, "-c", CLI, "rewrite", "--plan", str(plan_file), str(applied), "--apply", "--no-validate"], 120)
    return device, config, new, work, src, applied, rc, se


def part_gentime(smoke: bool, plan_file: Path, rounds: int, repeats: int, plan_first: bool = False) -> dict:
    """The static-cache path and a written plan (``plan_file``, from a ``gen`` run), each timed in
    its own process, interleaved ``rounds`` times with ``repeats`` calls each: the same comparison
    as ``gen`` with the noise of one 5-call median averaged out."""
    device, config, new, work, src, applied, rc, se = gen_trees(smoke, plan_file, "gentime")
    out: dict = {"part": "gentime", "plan": Path(plan_file).read_text(), "rewrite_rc": rc, "rewrite_stderr": se[-800:],
                 "rounds": rounds, "repeats": repeats, "device": device}
    runs: dict[str, list] = {"eager": [], "static_cache": [], "plan": []}
    order = [("static_cache", src, "static"), ("plan", applied, "plain"), ("eager", src, "plain")]
    if plan_first:  # the position in the round is the only difference between the two arms
        order = [order[1], order[0], order[2]]
    out["order"] = [name for name, _, _ in order]
    for _ in range(rounds):
        for name, tree, variant in order:
            rc, so, se = run([sys.executable, "-c", TIME_GENERATE, str(tree), device, variant, str(repeats)], 200)
            runs[name].append(last_json(so)["ms_per_token"] if rc == 0 else {"error": se.strip().splitlines()[-2:]})
    out["ms_per_token_runs"] = runs
    med = {k: statistics.median([x for x in v if isinstance(x, float)]) for k, v in runs.items() if any(isinstance(x, float) for x in v)}
    out["ms_per_token"] = med
    if "plan" in med and "static_cache" in med:
        out["plan_over_static"] = med["plan"] / med["static_cache"]
    if "plan" in med and "eager" in med:
        out["plan_over_eager"] = med["plan"] / med["eager"]
    shutil.rmtree(work, ignore_errors=True)
    return out


#: One ``genpaired`` process: the weights are made once, then three arms on instances holding them
#: (``plan``: the rewritten tree's site function; ``static_cache``: the plain harness with
#: ``cache_implementation = "static"`` set by hand; ``eager``: the plain harness as it is), each
#: warmed until steady, then timed in interleaved rounds. argv: plain tree, rewritten tree, device,
#: rounds, repeats, shift (which arm is built and warmed first, and each round's rotation), the
#: most warm-up calls per arm, the arms (comma-separated, in rotation order: genpaired passes
#: ``plan,static_cache,eager``, gensep one compiled arm and ``eager``). Prints one JSON line.
TIME_PAIRED = textwrap.dedent("""\
    import importlib.util, json, platform, statistics, sys, time
    import torch
    import transformers
    from torch._dynamo.utils import counters
    src, applied, device = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds, repeats, shift, warm_max = (int(a) for a in sys.argv[4:8])
    ARMS = sys.argv[8].split(",")
    assert ARMS and set(ARMS) <= {"plan", "static_cache", "eager"} and len(set(ARMS)) == len(ARMS), ARMS
    cuda = device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32

    def load(tree, name):  # both trees hold a harness.py: two module names; the rewritten one imports _stackpart from its tree
        sys.path.insert(0, tree)
        try:
            spec = importlib.util.spec_from_file_location(name, tree + "/harness.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(tree)
        return module

    recordings = [0]  # CUDA-graph recordings (the static path's reduce-overhead compile): counted next to Dynamo's counters
    try:
        from torch._inductor import cudagraph_trees
        _node_init = cudagraph_trees.CUDAGraphNode.__init__

        def _counted(self, *args, **kwargs):
            recordings[0] += 1
            _node_init(self, *args, **kwargs)

        cudagraph_trees.CUDAGraphNode.__init__ = _counted
    except Exception:  # not in this torch: Dynamo's counters alone
        recordings = None

    def snap():
        state = {cat: dict(vals) for cat, vals in counters.items()}
        if recordings is not None:
            state["cudagraph_trees"] = {"recordings": recordings[0]}
        return state

    def delta(before, after):
        out = {}
        for cat, vals in after.items():
            d = {k: v - before.get(cat, {}).get(k, 0) for k, v in vals.items() if v != before.get(cat, {}).get(k, 0)}
            if d:
                out[cat] = d
        return out

    def merge(into, d):
        for cat, vals in d.items():
            for k, v in vals.items():
                into.setdefault(cat, {})[k] = into.get(cat, {}).get(k, 0) + v

    def rotate(k):
        return ARMS[k % len(ARMS):] + ARMS[:k % len(ARMS)]

    def once(model):
        if cuda:
            torch.cuda.synchronize()
        s = time.perf_counter()
        with torch.no_grad():
            out = model(**inputs)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - s, out

    plain = load(src, "harness_plain")
    site = load(applied, "harness_site") if "plan" in ARMS else None  # a process without the plan never imports it
    inputs = {k: v.to(device) for k, v in plain.make_inputs().items()}
    prompt = inputs["input_ids"].shape[1]
    t0 = time.perf_counter()
    reference = plain.build_model().to(device=device, dtype=dtype)  # the weights: made once in this process
    weights = reference.state_dict()
    order = rotate(shift)
    models, identical, cache_impl = {}, {}, {}
    for arm in order:  # every arm is built by its tree's build_model (seeded), then given the reference's weights
        model = (site if arm == "plan" else plain).build_model().to(device=device, dtype=dtype)
        model.load_state_dict(weights)
        if arm == "static_cache":
            model.lm.generation_config.cache_implementation = "static"  # transformers' lever, by hand
        state = model.state_dict()
        identical[arm] = state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in weights)
        cache_impl[arm] = model.lm.generation_config.cache_implementation
        models[arm] = model
    del reference, weights, state, model
    build_s = time.perf_counter() - t0
    site_applied = list(sys.modules["_stackpart.library"].APPLIED) if "_stackpart.library" in sys.modules else None

    warm, errors = {}, {}
    for arm in order:  # warm until steady: two calls in a row that compiled nothing and agree within 10%
        before, calls, compiled, steady, s = snap(), [], [], False, time.perf_counter()
        try:
            while len(calls) < warm_max:
                c0 = snap()
                calls.append(once(models[arm])[0])
                compiled.append(bool(delta(c0, snap())))
                if (len(calls) >= 3 and not compiled[-1] and not compiled[-2]
                        and abs(calls[-1] - calls[-2]) <= 0.10 * min(calls[-1], calls[-2])):
                    steady = True
                    break
        except Exception as exc:  # recorded; the other arms still run
            errors[arm] = f"warm-up: {type(exc).__name__}: {exc}"[:600]
        warm[arm] = {"calls_s": calls, "compiled_in_call": compiled, "steady": steady, "wall_s": time.perf_counter() - s,
                     "counters": delta(before, snap())}

    import os
    pinned = None  # the timed rounds' main thread on the parent's chosen core (rewriter.engine.cores, as the search pins)
    if os.environ.get("STACKPART_BENCH_PIN"):
        try:
            os.sched_setaffinity(0, {int(os.environ["STACKPART_BENCH_PIN"])})
            pinned = int(os.environ["STACKPART_BENCH_PIN"])
        except (OSError, AttributeError, ValueError):
            pass
    times = {arm: [] for arm in ARMS}
    round_medians = {arm: [] for arm in ARMS}
    tokens = {arm: [] for arm in ARMS}
    timed_counters = {arm: {} for arm in ARMS}
    round_orders = []
    new_tokens = set()
    for r in range(rounds):
        round_orders.append(rotate(shift + r))
        for arm in round_orders[-1]:
            if arm in errors:
                continue
            c0, ts = snap(), []
            try:
                for _ in range(repeats):
                    t, out = once(models[arm])
                    ts.append(t)
            except Exception as exc:
                errors[arm] = f"round {r}: {type(exc).__name__}: {exc}"[:600]
                continue
            merge(timed_counters[arm], delta(c0, snap()))
            new = out.shape[1] - prompt
            new_tokens.add(new)
            ms = [t * 1e3 / new for t in ts]
            times[arm] += ms
            round_medians[arm].append(statistics.median(ms))
            tokens[arm].append(out[:, prompt:].cpu())

    def same(a, b):
        if a not in tokens or b not in tokens:
            return None
        return bool(tokens[a]) and len(tokens[a]) == len(tokens[b]) and all(torch.equal(x, y) for x, y in zip(tokens[a], tokens[b]))

    def agreement(a, b):
        if not tokens.get(a) or not tokens.get(b):
            return None
        x, y = tokens[a][-1], tokens[b][-1]
        return (x == y).float().mean().item() if x.shape == y.shape else None

    print(json.dumps({
        "order": order, "round_orders": round_orders, "pinned_core": pinned, "build_s": build_s, "weights_identical": identical,
        "cache_implementation": cache_impl, "site_applied": site_applied, "warm": warm, "errors": errors,
        "ms_per_token": {a: statistics.median(v) for a, v in times.items() if v},
        "ms_per_token_min": {a: min(v) for a, v in times.items() if v},
        "round_medians": round_medians, "calls_per_arm": {a: len(v) for a, v in times.items()},
        # the same ratio paired within each round (the two arms' calls minutes closer in time), median over rounds
        "round_ratio_plan_static": statistics.median(a / b for a, b in zip(round_medians["plan"], round_medians["static_cache"]))
        if round_medians.get("plan") and len(round_medians["plan"]) == len(round_medians.get("static_cache", [])) else None,
        "timed_counters": timed_counters, "recompiled_in_timed_rounds": any(bool(c) for c in timed_counters.values()),
        "counts_cudagraph_recordings": recordings is not None,
        "new_tokens": sorted(new_tokens),
        "static_arms_same_tokens": same("plan", "static_cache"),
        "plan_tokens_same_every_round": bool(tokens.get("plan")) and all(torch.equal(t, tokens["plan"][0]) for t in tokens["plan"]),
        "eager_vs_static_token_agreement": agreement("eager", "static_cache"),
        # each compiled arm's tokens against eager's, every round (gensep's per-process check)
        "same_tokens_as_eager": {a: same(a, "eager") for a in ARMS if a != "eager"} if "eager" in ARMS else {},
        "token_agreement_with_eager": {a: agreement(a, "eager") for a in ARMS if a != "eager"} if "eager" in ARMS else {},
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    }))
""")

#: Two-sided 95% quantiles of Student's t, df 1..30 (beyond: the Cornish-Fisher expansion).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def geomean_interval(ratios: list[float]) -> dict:
    """Geometric mean of per-process ratios and its 95% interval: t over the log ratios."""
    import math

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    if not n:
        return {"n": 0}
    mean = statistics.fmean(logs)
    res: dict = {"n": n, "geomean": math.exp(mean), "ratios": ratios}
    if n >= 2:
        half = t975(n - 1) * statistics.stdev(logs) / math.sqrt(n)
        res["ci95"] = [math.exp(mean - half), math.exp(mean + half)]
    return res


def welch_log_ratio(xs: list[float], ys: list[float]) -> dict:
    """``exp(mean log xs - mean log ys)`` and its 95% Welch t interval (two independent groups of
    ratios: gensep's plan/eager over the plan processes and static/eager over the static ones).

    With ``a = log xs`` (n_a values, sample variance s_a^2) and ``b = log ys`` (n_b, s_b^2):
    ``d = mean(a) - mean(b)``, ``se = sqrt(s_a^2/n_a + s_b^2/n_b)``, the Welch-Satterthwaite degrees
    of freedom ``df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``, and the interval
    ``exp(d -+ t975(df) * se)``. ``df`` is not an integer: it is rounded down (at least 1) before
    ``t975``, which widens the interval a little (conservative). When both groups have no spread
    (se = 0) the interval is the point and ``df = n_a + n_b - 2``. Source: B. L. Welch, "The
    generalization of 'Student's' problem when several different population variances are
    involved", Biometrika 34 (1947) 28-35; F. E. Satterthwaite, Biometrics Bulletin 2 (1946)
    110-114; the NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.5.3 (two-sample t-test,
    unequal variances). Needs at least 2 values in each group for the interval."""
    import math

    a, b = [math.log(x) for x in xs], [math.log(y) for y in ys]
    res: dict = {"n_a": len(a), "n_b": len(b)}
    if not a or not b:
        return res
    d = statistics.fmean(a) - statistics.fmean(b)
    res.update(ratio=math.exp(d), log_diff=d)
    if len(a) < 2 or len(b) < 2:
        return res
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    half = t975(max(1, math.floor(df))) * se
    res.update(se=se, df=df, ci95=[math.exp(d - half), math.exp(d + half)])
    return res


def ratio_verdict(stat: dict, margin: float, unsettled: str = "fewer than 2 processes") -> str:
    """Plain words for a paired ratio plan/static against the target <= 1.0x."""
    if "ci95" not in stat:
        return f"not settled: {unsettled}"
    lo, hi = stat["ci95"]
    if hi <= 1.0:
        return f"shown: <= 1.0x (95% interval {lo:.4f}-{hi:.4f})"
    if lo > 1.0:
        return f"not met: the plan is slower (95% interval {lo:.4f}-{hi:.4f})"
    within = f"within the {margin:.0%} margin" if hi <= 1.0 + margin else f"not within the {margin:.0%} margin"
    return (f"equal within the measurement: the 95% interval {lo:.4f}-{hi:.4f} holds 1.0; at most "
            f"{(hi - 1) * 100:.2f}% slower at 95% ({within})")


def paired_processes(part: str, smoke: bool, plan_file: Path, procs: int, rounds: int, repeats: int, budget: float,
                     warm_max: int, schedule) -> tuple[dict, list[dict]]:
    """genpaired's and gensep's common run: the trees (``gen_trees``), then up to ``procs`` TIME_PAIRED
    processes sharing one Inductor cache, none started past ``budget``. ``schedule(i)`` gives process
    ``i``'s ``(shift, arms, tags)``: TIME_PAIRED's shift and comma-separated arm list, and fields added
    to its result. Returns the result's common fields (``error`` if the rewrite failed) and the
    processes' results."""
    started = time.perf_counter()
    device, config, new, work, src, applied, rc, se = gen_trees(smoke, plan_file, part)
    # one Inductor cache for every process: the first compiles cold, the rest read what it wrote
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(work / "inductor-cache")
    out: dict = {"part": part, "model": "Llama", "config": config, "device": device, "new_tokens": new,
                 "prompt": "1x128", "plan": Path(plan_file).read_text(), "rewrite_rc": rc, "rewrite_stderr": se[-800:],
                 "procs_asked": procs, "rounds": rounds, "repeats": repeats, "budget_s": budget, "warm_max": warm_max,
                 "inductor_cache": {"dir": cache, "shared_across_processes": True,
                                    "fresh": "TORCHINDUCTOR_CACHE_DIR" not in os.environ}}
    if rc != 0:
        out["error"] = "stackpart rewrite failed: " + (se.strip().splitlines() or [f"rc {rc}"])[-1]
        shutil.rmtree(work, ignore_errors=True)
        return out, []
    out["rewrite_diff_files"] = sorted(str(p.relative_to(applied)) for p in applied.rglob("*.py")
                                       if not (src / p.relative_to(applied)).exists()
                                       or (src / p.relative_to(applied)).read_text() != p.read_text())
    # every process's timed rounds on one core, the fastest at a pure-Python loop: the search's own
    # pinning (engine/cores.py; H200 run 25: per-core speed was the largest process-to-process spread)
    pin_env: dict[str, str] = {}
    if device == "cuda" and hasattr(os, "sched_getaffinity"):
        from rewriter.engine.cores import core_speeds, pin_plan

        cores = sorted(os.sched_getaffinity(0))
        core = pin_plan(["timed"], cores, "shared", core_speeds(cores)).get("timed")
        if core is not None:
            pin_env["STACKPART_BENCH_PIN"] = str(core)
    out["pinned_core"] = int(pin_env["STACKPART_BENCH_PIN"]) if pin_env else None
    processes: list[dict] = []
    walls: list[float] = []
    for i in range(procs):
        elapsed = time.perf_counter() - started
        estimate = statistics.median(walls[1:]) if len(walls) > 1 else (walls[0] if walls else 0.0)
        if i and elapsed + estimate > budget:  # the first always runs; later ones only if they fit the budget
            out["stopped_by_budget"] = f"{i} of {procs} processes ran: {elapsed:.0f} s + ~{estimate:.0f} s > --budget {budget:.0f}"
            break
        shift, arms, tags = schedule(i)
        s = time.perf_counter()
        rc, so, se = run([sys.executable, "-c", TIME_PAIRED, str(src), str(applied), device, str(rounds), str(repeats), str(shift),
                          str(warm_max), arms], max(60.0, min(300.0, budget + 150 - elapsed)),
                          extra_env={"TORCHINDUCTOR_CACHE_DIR": cache, **pin_env})
        walls.append(time.perf_counter() - s)
        try:
            res = last_json(so) if rc == 0 else {"error": f"rc {rc}", "stderr_tail": se.strip().splitlines()[-6:]}
        except ValueError as exc:
            res = {"error": str(exc), "stderr_tail": se.strip().splitlines()[-6:]}
        res["process"] = i
        res.update(tags)
        res["wall_s"] = walls[-1]
        processes.append(res)
    out["processes"] = processes
    out["procs_ran"] = len(processes)
    shutil.rmtree(work, ignore_errors=True)
    return out, processes


def part_genpaired(smoke: bool, plan_file: Path, procs: int, rounds: int, repeats: int, budget: float,
                   warm_max: int, margin: float) -> dict:
    """The plan, the static-cache path and eager in each of ``procs`` processes (one set of weights
    per process, paired): process-to-process variance cancels in each process's ratio plan/static."""
    out, processes = paired_processes("genpaired", smoke, plan_file, procs, rounds, repeats, budget, warm_max,
                                      lambda i: (i, "plan,static_cache,eager", {}))
    if "error" in out:
        return out
    ok = [p for p in processes if {"plan", "static_cache"} <= set(p.get("ms_per_token", {}))]
    ab = [p["ms_per_token"]["plan"] / p["ms_per_token"]["static_cache"] for p in ok]
    ac = [p["ms_per_token"]["plan"] / p["ms_per_token"]["eager"] for p in ok if "eager" in p["ms_per_token"]]
    out["plan_over_static"] = geomean_interval(ab)
    out["plan_over_eager"] = geomean_interval(ac)
    # secondary: each process's median over rounds of the within-round ratio (robust to a slow stretch inside a process)
    out["plan_over_static_round_paired"] = geomean_interval([p["round_ratio_plan_static"] for p in ok
                                                             if p.get("round_ratio_plan_static")])
    out["plan_over_static_by_first_built"] = {
        first: geomean_interval([r for p, r in zip(ok, ab) if p["order"][0] == first]).get("geomean")
        for first in ("plan", "static_cache", "eager") if any(p["order"][0] == first for p in ok)}
    out["ms_per_token"] = {arm: statistics.median([p["ms_per_token"][arm] for p in ok if arm in p["ms_per_token"]])
                           for arm in ("plan", "static_cache", "eager") if any(arm in p["ms_per_token"] for p in ok)}
    out["verdict_plan_vs_static"] = ratio_verdict(out["plan_over_static"], margin)
    if "ci95" in out["plan_over_eager"]:
        lo, hi = out["plan_over_eager"]["ci95"]
        out["verdict_plan_vs_eager"] = ("faster than eager (95% interval below 1.0)" if hi < 1.0 else
                                        "slower than eager (95% interval above 1.0)" if lo > 1.0 else
                                        "not told apart from eager (95% interval holds 1.0)")
    out["margin"] = margin
    out["static_arms_same_tokens"] = bool(ok) and all(p.get("static_arms_same_tokens") for p in ok)
    out["weights_identical"] = bool(ok) and all(all(p.get("weights_identical", {}).values()) for p in ok)
    out["plan_sets_static_cache"] = bool(ok) and all(p.get("cache_implementation", {}).get("plan") == "static" for p in ok)
    out["recompiled_in_timed_rounds"] = [p["process"] for p in processes if p.get("recompiled_in_timed_rounds")]
    out["not_steady_after_warmup"] = {p["process"]: [a for a, w in p.get("warm", {}).items() if not w.get("steady")]
                                      for p in processes if any(not w.get("steady") for w in p.get("warm", {}).values())}
    out["process_errors"] = {p["process"]: p.get("error") or p.get("errors") for p in processes if p.get("error") or p.get("errors")}
    return out


#: gensep's two compiled arms: process i holds ``GENSEP_ARMS[i % 2]`` (and eager).
GENSEP_ARMS = ("plan", "static_cache")


def gensep_schedule(i: int) -> tuple[str, int]:
    """Process ``i``'s compiled arm and its TIME_PAIRED shift: the arm alternates plan / static
    every process, and which of (arm, eager) is built and warmed first alternates every two, so
    each arm leads in half its processes (0: plan first, 1: static first, 2: eager then plan,
    3: eager then static, ...)."""
    return GENSEP_ARMS[i % 2], (i // 2) % 2


def part_gensep(smoke: bool, plan_file: Path, procs: int, rounds: int, repeats: int, budget: float,
                warm_max: int, margin: float) -> dict:
    """One compiled arm per process (the plan or transformers' static cache, alternating) plus eager
    as the in-process yardstick: two compiled instances in one process (genpaired) interfere and
    re-record CUDA graphs; eager compiles nothing. Each process gives arm/eager; plan/static is the
    ratio of the two groups' geometric means with a Welch interval (``welch_log_ratio``)."""
    def schedule(i: int) -> tuple[int, str, dict]:
        arm, shift = gensep_schedule(i)
        return shift, f"{arm},eager", {"arm": arm}

    out, processes = paired_processes("gensep", smoke, plan_file, procs, rounds, repeats, budget, warm_max, schedule)
    if "error" in out:
        return out
    for res in processes:
        arm = res["arm"]
        ms = res.get("ms_per_token", {})
        if arm in ms and "eager" in ms:
            res["arm_over_eager"] = ms[arm] / ms["eager"]
        counters = res.get("timed_counters", {}).get(arm, {})
        # None where nothing was counted: the process failed, or its torch has no cudagraph_trees to watch
        res["timed_recordings"] = (counters.get("cudagraph_trees", {}).get("recordings", 0)
                                   if res.get("counts_cudagraph_recordings") and arm not in res.get("errors", {}) else None)
    ok = {arm: [p for p in processes if p["arm"] == arm and "arm_over_eager" in p] for arm in GENSEP_ARMS}
    over_eager = {arm: [p["arm_over_eager"] for p in ok[arm]] for arm in GENSEP_ARMS}
    out["plan_over_eager"] = geomean_interval(over_eager["plan"])
    out["static_over_eager"] = geomean_interval(over_eager["static_cache"])
    out["plan_over_static"] = welch_log_ratio(over_eager["plan"], over_eager["static_cache"])
    med = {arm: statistics.median([p["ms_per_token"][arm] for p in ok[arm]]) for arm in GENSEP_ARMS if ok[arm]}
    med_eager = [p["ms_per_token"]["eager"] for arm in GENSEP_ARMS for p in ok[arm]]
    if med_eager:
        med["eager"] = statistics.median(med_eager)
    out["ms_per_token"] = med  # medians over processes: eager over all of them
    if "plan" in med and "static_cache" in med:  # across processes: the variance gensep's eager yardstick divides out stays in
        out["raw_plan_over_static_ms"] = med["plan"] / med["static_cache"]
    out["verdict_plan_vs_static"] = ratio_verdict(out["plan_over_static"], margin,
                                                  "fewer than 2 processes of each arm (plan and static)")
    out["margin"] = margin
    out["timed_recordings"] = {arm: {p["process"]: p["timed_recordings"] for p in processes if p["arm"] == arm}
                               for arm in GENSEP_ARMS}
    out["timed_counters"] = {arm: {p["process"]: p.get("timed_counters", {}).get(arm, {}) for p in processes if p["arm"] == arm}
                             for arm in GENSEP_ARMS}
    out["recompiled_in_timed_rounds"] = [p["process"] for p in processes if p.get("recompiled_in_timed_rounds")]
    out["no_recordings_in_timed_rounds"] = bool(processes) and all(p["timed_recordings"] == 0 for p in processes)
    out["compiled_tokens_same_as_eager"] = {p["process"]: p.get("same_tokens_as_eager", {}).get(p["arm"]) for p in processes}
    out["weights_identical"] = bool(processes) and all(all(p.get("weights_identical", {}).values()) for p in processes
                                                       if "error" not in p)
    out["arms_set_static_cache"] = {arm: bool(ok[arm]) and all(p.get("cache_implementation", {}).get(arm) == "static"
                                                              for p in ok[arm]) for arm in GENSEP_ARMS}
    out["not_steady_after_warmup"] = {p["process"]: [a for a, w in p.get("warm", {}).items() if not w.get("steady")]
                                      for p in processes if any(not w.get("steady") for w in p.get("warm", {}).values())}
    out["process_errors"] = {p["process"]: p.get("error") or p.get("errors") for p in processes if p.get("error") or p.get("errors")}
    return out


def gensep_table(res: dict) -> list[str]:
    """The per-process table and the summary lines of a ``gensep`` result."""
    lines = ["| process | compiled arm | built/warmed first | warm-up s (arm/eager) | arm ms/token | eager ms/token | arm/eager "
             "| tokens = eager's | CUDA-graph recordings in timed rounds | counters changed in timed rounds |", "|" + "---|" * 10]
    for p in res.get("processes", []):
        arm, ms, warm = p.get("arm"), p.get("ms_per_token", {}), p.get("warm", {})
        warm_s = "/".join(f"{warm[a]['wall_s']:.1f}" if a in warm else "–" for a in (arm, "eager"))
        cells = [f"{ms[a]:.3f}" if a in ms else "–" for a in (arm, "eager")]
        ratio = f"{p['arm_over_eager']:.4f}" if "arm_over_eager" in p else "–"
        changed = json.dumps(p.get("timed_counters", {})) if p.get("recompiled_in_timed_rounds") else "none"
        first = (p.get("order") or [p.get("error", "–")])[0]
        lines.append(" | ".join(["", str(p.get("process")), str(arm), first, warm_s, *cells, ratio,
                                 str(p.get("same_tokens_as_eager", {}).get(arm, "–")), str(p.get("timed_recordings")),
                                 changed, ""]).strip())

    def fmt(st: dict) -> str:
        if not st.get("n"):
            return "–"
        return f"{st['geomean']:.4f}" + (f" (95% interval {st['ci95'][0]:.4f}-{st['ci95'][1]:.4f})" if "ci95" in st else "")

    ps = res.get("plan_over_static", {})
    welch = ("–" if "ratio" not in ps else f"{ps['ratio']:.4f}" + (
        f" (95% Welch interval {ps['ci95'][0]:.4f}-{ps['ci95'][1]:.4f}, df {ps['df']:.1f})" if "ci95" in ps else ""))
    raw = res.get("raw_plan_over_static_ms")
    cache = res.get("inductor_cache", {})
    ran = f"{res.get('procs_ran')} of {res.get('procs_asked')}"
    pins = sorted({str(p.get("pinned_core")) for p in res.get("processes", [])})
    lines += ["", f"- processes: {ran}" + (f" ({res['stopped_by_budget']})" if res.get("stopped_by_budget") else ""),
              f"- timed rounds pinned to CPU core {res.get('pinned_core')} (the fastest at a pure-Python loop); "
              f"pinned in the processes: {', '.join(pins) or '–'}",
              f"- plan/static = geomean(plan/eager) / geomean(static/eager) over {ps.get('n_a', 0)} plan and "
              f"{ps.get('n_b', 0)} static processes: {welch}: {res.get('verdict_plan_vs_static')}",
              f"- plan/eager: {fmt(res.get('plan_over_eager', {}))}; static/eager: {fmt(res.get('static_over_eager', {}))}",
              f"- raw ms/token, median plan / median static (across processes, for reference): "
              + (f"{raw:.4f}" if raw else "–"),
              f"- CUDA-graph recordings in timed rounds, per arm and process: {res.get('timed_recordings')} "
              f"(none anywhere: {res.get('no_recordings_in_timed_rounds')}); processes with counters changed in timed "
              f"rounds: {res.get('recompiled_in_timed_rounds')}",
              f"- the compiled arm's tokens equal eager's, per process: {res.get('compiled_tokens_same_as_eager')}",
              f"- Inductor cache shared across the processes: {cache.get('dir')} (fresh: {cache.get('fresh')}); "
              f"arms not steady after warm-up: {res.get('not_steady_after_warmup')}"]
    return lines


def genpaired_table(res: dict) -> list[str]:
    """The per-process table and the summary lines of a ``genpaired`` result."""
    arms = ("plan", "static_cache", "eager")
    lines = ["| process | built/warmed first | warm-up s (plan/static/eager) | plan ms/token | static ms/token | eager ms/token "
             "| plan/static | plan/eager | static arms same tokens | counters changed in timed rounds |", "|" + "---|" * 10]
    for p in res.get("processes", []):
        ms, warm = p.get("ms_per_token", {}), p.get("warm", {})
        warm_s = "/".join(f"{warm[a]['wall_s']:.1f}" if a in warm else "–" for a in arms)
        cells = [f"{ms[a]:.3f}" if a in ms else "–" for a in arms]
        ratios = [f"{ms['plan'] / ms[b]:.4f}" if "plan" in ms and b in ms else "–" for b in ("static_cache", "eager")]
        changed = json.dumps(p.get("timed_counters", {})) if p.get("recompiled_in_timed_rounds") else "none"
        first = (p.get("order") or [p.get("error", "–")])[0]
        lines.append(" | ".join(["", str(p.get("process")), first, warm_s, *cells, *ratios,
                                 str(p.get("static_arms_same_tokens", "–")), changed, ""]).strip())

    def fmt(st: dict) -> str:
        if not st.get("n"):
            return "–"
        return f"{st['geomean']:.4f}" + (f" (95% interval {st['ci95'][0]:.4f}-{st['ci95'][1]:.4f})" if "ci95" in st else "")

    cache = res.get("inductor_cache", {})
    ran = f"{res.get('procs_ran')} of {res.get('procs_asked')}"
    lines += ["", f"- processes: {ran}" + (f" ({res['stopped_by_budget']})" if res.get("stopped_by_budget") else ""),
              f"- plan/static, geometric mean over processes: {fmt(res.get('plan_over_static', {}))}: "
              f"{res.get('verdict_plan_vs_static')}",
              f"- the same, each process's ratio taken within rounds (median over rounds): "
              f"{fmt(res.get('plan_over_static_round_paired', {}))}",
              f"- plan/eager: {fmt(res.get('plan_over_eager', {}))}: {res.get('verdict_plan_vs_eager')}",
              f"- the two static arms generate the same tokens in every process: {res.get('static_arms_same_tokens')}",
              f"- Inductor cache shared across the processes: {cache.get('dir')} (fresh: {cache.get('fresh')})",
              f"- recompiles or CUDA-graph recordings in timed rounds (processes): {res.get('recompiled_in_timed_rounds')}; "
              f"arms not steady after warm-up: {res.get('not_steady_after_warmup')}"]
    return lines


def markdown(res: dict) -> str:
    lines = [f"# library_models: {res['part']}", ""]
    if res.get("part") == "genpaired" and "processes" in res:
        lines += genpaired_table(res) + [""]
    if res.get("part") == "gensep" and "processes" in res:
        lines += gensep_table(res) + [""]
    lines += ["```json", json.dumps({k: v for k, v in res.items() if k not in ("plan",)}, indent=1, default=str)[:20000], "```"]
    if res.get("plan"):
        lines += ["", "plan:", "```yaml", res["plan"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("copy", "gen", "gentime", "genpaired", "gensep"), required=True)
    ap.add_argument("--plan-file", type=Path, default=ROOT / "benchmarks" / "results" / "h200-run21" / "gen_plan.yaml",
                    help="gentime, genpaired, gensep: the plan a gen run wrote")
    ap.add_argument("--repeats", type=int, default=None,
                    help="gentime: generate calls per process (10); genpaired, gensep: per arm per round (5, smoke 2)")
    ap.add_argument("--plan-first", action="store_true", help="gentime: time the plan before the static-cache path in each round")
    ap.add_argument("--smoke", action="store_true", help="tiny configs on CPU")
    ap.add_argument("--budget", type=float, default=None,
                    help="gen: diagnose --budget (120); genpaired, gensep: seconds after which no new process starts (400)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="copy, gentime: A B rounds (2); genpaired: rounds per process, rotating A B C / B C A / C A B (6, smoke 3); "
                         "gensep: rounds per process, alternating arm eager / eager arm (6, smoke 3)")
    ap.add_argument("--procs", type=int, default=None, help="genpaired, gensep: processes (8, smoke 2)")
    ap.add_argument("--warm-max", type=int, default=None, help="genpaired, gensep: most warm-up calls per arm (12, smoke 4)")
    ap.add_argument("--margin", type=float, default=0.02,
                    help="genpaired, gensep: the slowdown the verdict names when the interval holds 1.0 (0.02 = 2%%)")
    args = ap.parse_args(argv)
    pick = lambda value, full, smoke: value if value is not None else (smoke if args.smoke else full)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        if args.part == "copy":
            res = part_copy(args.smoke, pick(args.rounds, 2, 2))
        elif args.part == "gen":
            res = part_gen(args.smoke, pick(args.budget, 120.0, 120.0))
        elif args.part == "gentime":
            res = part_gentime(args.smoke, args.plan_file, pick(args.rounds, 2, 2), pick(args.repeats, 10, 10), args.plan_first)
        elif args.part == "gensep":
            res = part_gensep(args.smoke, args.plan_file, pick(args.procs, 8, 2), pick(args.rounds, 6, 3),
                              pick(args.repeats, 5, 2), pick(args.budget, 400.0, 400.0), pick(args.warm_max, 12, 4), args.margin)
        else:
            res = part_genpaired(args.smoke, args.plan_file, pick(args.procs, 8, 2), pick(args.rounds, 6, 3),
                                 pick(args.repeats, 5, 2), pick(args.budget, 400.0, 400.0), pick(args.warm_max, 12, 4), args.margin)
    except Exception as exc:  # recorded, not lost: the device returns only what is under $OUT
        import traceback

        res = {"part": args.part, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    res["wall_s"] = time.time() - started
    (OUT / f"library_models_{args.part}.json").write_text(json.dumps(res, indent=1, default=str))
    (OUT / f"library_models_{args.part}.md").write_text(markdown(res))
    keys = ("part", "site_ms", "copy_ms", "site_over_copy", "ms_per_token", "plan_over_static", "plan_over_eager",
            "static_over_eager", "verdict_plan_vs_static", "verdict_plan_vs_eager", "static_arms_same_tokens", "raw_plan_over_static_ms",
            "timed_recordings", "compiled_tokens_same_as_eager", "procs_ran", "error", "wall_s")
    print(json.dumps({k: res[k] for k in keys if k in res}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
