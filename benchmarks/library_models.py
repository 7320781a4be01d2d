"""Models from an installed library (issue 13), on one GPU: the plan applied from the user's site.

Two parts, each writing ``$OUT/library_models_<part>.{json,md}``:

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

Run on the H200 with the shared wheels (benchmarks/README.md):
``OUT=$OUT python3 benchmarks/library_models.py --part copy`` (about 2 min) and
``OUT=$OUT python3 benchmarks/library_models.py --part gen`` (about 6-8 min). CPU smoke (tiny
configs): ``OUT=/tmp/o python benchmarks/library_models.py --part copy --smoke``.
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


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "8"))


def run(cmd: list[str], timeout: float, cwd: Path = ROOT) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
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


def part_gentime(smoke: bool, plan_file: Path, rounds: int, repeats: int, plan_first: bool = False) -> dict:
    """The static-cache path and a written plan (``plan_file``, from a ``gen`` run), each timed in
    its own process, interleaved ``rounds`` times with ``repeats`` calls each: the same comparison
    as ``gen`` with the noise of one 5-call median averaged out."""
    device = "cpu" if smoke else "cuda"
    config = TINY if smoke else LLAMA8
    new = 8 if smoke else NEW_TOKENS
    work = Path(tempfile.mkdtemp(prefix="library-gentime-"))
    src = work / "src"
    src.mkdir()
    (src / "harness.py").write_text(GEN_HARNESS.format(config=config, new=new))
    applied = work / "applied"
    shutil.copytree(src, applied)
    rc, _, se = run([sys.executable, "-c", CLI, "rewrite", "--plan", str(plan_file), str(applied), "--apply", "--no-validate"], 120)
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


def markdown(res: dict) -> str:
    lines = [f"# library_models: {res['part']}", "", "```json", json.dumps({k: v for k, v in res.items() if k not in ("plan",)}, indent=1, default=str)[:20000], "```"]
    if res.get("plan"):
        lines += ["", "plan:", "```yaml", res["plan"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("copy", "gen", "gentime"), required=True)
    ap.add_argument("--plan-file", type=Path, default=ROOT / "benchmarks" / "results" / "h200-run21" / "gen_plan.yaml",
                    help="gentime: the plan a gen run wrote")
    ap.add_argument("--repeats", type=int, default=10, help="gentime: generate calls per process")
    ap.add_argument("--plan-first", action="store_true", help="gentime: time the plan before the static-cache path in each round")
    ap.add_argument("--smoke", action="store_true", help="tiny configs on CPU")
    ap.add_argument("--budget", type=float, default=120.0, help="diagnose --budget (gen)")
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds (copy)")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        if args.part == "copy":
            res = part_copy(args.smoke, args.rounds)
        elif args.part == "gen":
            res = part_gen(args.smoke, args.budget)
        else:
            res = part_gentime(args.smoke, args.plan_file, args.rounds, args.repeats, args.plan_first)
    except Exception as exc:  # recorded, not lost: the device returns only what is under $OUT
        import traceback

        res = {"part": args.part, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    res["wall_s"] = time.time() - started
    (OUT / f"library_models_{args.part}.json").write_text(json.dumps(res, indent=1, default=str))
    (OUT / f"library_models_{args.part}.md").write_text(markdown(res))
    print(json.dumps({k: res.get(k) for k in ("part", "site_ms", "copy_ms", "site_over_copy", "ms_per_token", "plan_over_static", "plan_over_eager", "error", "wall_s")}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
