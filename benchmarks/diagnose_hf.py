"""``stackpart diagnose`` end to end on HF transformers Llama, GPT-2 and Mixtral, then ``rewrite``.

Run from the repository root on a machine with one CUDA GPU (H200 reference):

    python benchmarks/diagnose_hf.py           # $OUT/diagnose_hf.{json,md,tgz} + one diff per model
    python benchmarks/diagnose_hf.py --smoke   # CPU dry run on tiny configs (~1-2 minutes)
    python benchmarks/diagnose_hf.py --only llama --timeout 200

Each model is built from a config with random weights (no download), ``attn_implementation=
"sdpa"``, ``use_cache=False``, bf16, inference, shapes batch 8 x seq 512 (reference) and 8 x 384,
``Amortization(runs=1_000_000, restarts=30)``, Inductor for the measured compiles from cold
caches (``--backend eager`` in ``--smoke``):

* Llama: hidden 2048, 16 layers, 16/8 heads, SwiGLU 5632, vocab 32000 (~1.1B parameters);
* GPT-2: n_embd 1024, 16 layers, 16 heads, vocab 50257, dropout 0 (~0.25B);
* Mixtral: hidden 1024, 16 layers, 16/8 heads, 8 experts top-2, expert FFN 1792, vocab 32000
  (~0.8B); the experts implementation is transformers' default for the device (recorded).

SRC is the point: the decoder layer must lie under SRC for the plan to target it (with the
installed transformers it lies outside SRC and the plan targets nothing, tests/test_diagnose_hf.py).
:func:`build_src` makes SRC a temporary tree holding ``harness.py`` and a ``transformers/``
package that is a *symlink farm* over the installed one: real directories ``transformers/`` and
``transformers/models/``, a real copy of the one model directory (``models/llama/``), every other
entry a symlink. The harness refuses to run unless ``transformers`` and the model's modeling file
were imported from SRC, so the plan can name ``transformers/models/llama/modeling_llama.py::
LlamaDecoderLayer`` and ``stackpart rewrite`` diffs transformers' own (copied) file.

Each model runs ``stackpart diagnose`` in its own process (a fresh interpreter: the copied
transformers wins over the installed one; its own session, killed as a group on timeout), then
``stackpart rewrite --plan`` on the plan. A model gets ``--timeout`` seconds (default 170) and no
model starts after ``--deadline`` seconds from the script's start (default 540, so the run ends
inside a 600 s wall limit); a model not started is listed as ``not run: deadline``. JSON and
Markdown are rewritten after every model, and the per-model directories (harness, plan, report
with charts and trace, diff, stderr) are tarred into ``$OUT/diagnose_hf.tgz``; the diffs are also
``$OUT/diagnose_hf_<model>.diff``. Expected wall time on the H200: ~5-8 minutes (HF models
compile slower than the plain-torch Llama whose whole ladder took 48 s there); ``--smoke`` about
1-2 minutes on 2 CPU cores.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "out"))
TGZ_LIMIT = 15 * 2**20  # the device returns files of at most 16 MiB: traces are dropped above this
TRACE_GZ_LIMIT = 4 * 2**20  # one model's gzipped Chrome trace kept in the .tgz up to this size

COMMON = {"attn_implementation": "sdpa", "use_cache": False}
# name: (config class, model class, model dir under transformers/models, block class, GPU kwargs, smoke kwargs)
MODELS: dict[str, tuple[str, str, str, str, dict, dict]] = {
    "llama": (
        "LlamaConfig", "LlamaForCausalLM", "llama", "LlamaDecoderLayer",
        {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
         "num_attention_heads": 16, "num_key_value_heads": 8, "max_position_embeddings": 2048},
        {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128},
    ),
    "gpt2": (
        "GPT2Config", "GPT2LMHeadModel", "gpt2", "GPT2Block",
        {"vocab_size": 50257, "n_embd": 1024, "n_layer": 16, "n_head": 16, "n_positions": 1024,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
        {"vocab_size": 256, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128,
         "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": 0, "eos_token_id": 0},
    ),
    "mixtral": (
        "MixtralConfig", "MixtralForCausalLM", "mixtral", "MixtralDecoderLayer",
        {"vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 1792, "num_hidden_layers": 16,
         "num_attention_heads": 16, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
         "max_position_embeddings": 2048},
        {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
         "max_position_embeddings": 128},
    ),
}
GPU_SHAPES = ["batch=8,seq=512", "batch=8,seq=384"]
#: ``--workload``: throughput (the two batch-8 shapes) or latency (one 1x128 shape, repeated: stable).
WORKLOADS = {"throughput": GPU_SHAPES, "latency": ["batch=1,seq=128"]}
SMOKE_SHAPES = ["batch=2,seq=16", "batch=2,seq=12"]


def installed_transformers() -> Path:
    """The installed ``transformers`` package directory, found without importing it.

    Raises:
        SystemExit: transformers is not installed.
    """
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.origin:
        raise SystemExit("transformers is not installed")
    return Path(spec.origin).parent


def build_src(dest: Path, name: str, *, smoke: bool, device: str) -> Path:
    """Make ``dest`` a SRC tree for ``MODELS[name]``: ``harness.py`` plus a symlink-farm copy of
    the installed transformers in which only ``models/<dir>/`` is a real copy.

    ``transformers/`` and ``transformers/models/`` are real directories whose entries are
    symlinks to the installed package (``__pycache__`` left out: bytecode is written under SRC),
    except ``models/<dir>/``, copied (without ``__pycache__``). About 0.1 s and a few hundred
    kB instead of a ~130 MB copy.

    Returns:
        ``dest``. Raises FileExistsError if ``dest/transformers`` exists.
    """
    pkg = installed_transformers()
    model_dir = MODELS[name][2]
    top = Path(dest) / "transformers"
    top.mkdir(parents=True)
    for entry in pkg.iterdir():
        if entry.name not in ("models", "__pycache__"):
            (top / entry.name).symlink_to(entry)
    (top / "models").mkdir()
    for entry in (pkg / "models").iterdir():
        if entry.name == model_dir:
            shutil.copytree(entry, top / "models" / model_dir, ignore=shutil.ignore_patterns("__pycache__"))
        elif entry.name != "__pycache__":
            (top / "models" / entry.name).symlink_to(entry)
    (Path(dest) / "harness.py").write_text(harness_source(name, smoke=smoke, device=device), encoding="utf-8")
    return Path(dest)


def harness_source(name: str, *, smoke: bool, device: str) -> str:
    """The text of ``harness.py`` for ``MODELS[name]`` (``build_model``, ``make_inputs(batch, seq)``).

    It refuses to run (ImportError) unless ``transformers`` and the modeling module were imported
    from the harness's own tree, and prints one ``harness-info: {json}`` line to stderr (class,
    parameters, attention and experts implementation, modeling file) when the model is built.
    """
    config, cls, model_dir, _, gpu, tiny = MODELS[name]
    kwargs = {**(tiny if smoke else gpu), **COMMON}
    vocab = kwargs["vocab_size"]
    modeling = f"transformers.models.{model_dir}.modeling_{model_dir}"
    return f'''"""Harness for stackpart diagnose (benchmarks/diagnose_hf.py): HF transformers {cls} from a
config with random weights, imported from the copy of transformers in this tree."""

import importlib
import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = {device!r}
CONFIG = {kwargs!r}


def _mine(path):
    return os.path.abspath(path).startswith(HERE + os.sep)


if not _mine(transformers.__file__):
    raise ImportError(f"transformers was imported from {{transformers.__file__}}, not from the copy under {{HERE}}")


def build_model():
    modeling = importlib.import_module({modeling!r})
    if not _mine(modeling.__file__) or os.path.islink(modeling.__file__):
        raise ImportError(f"{{modeling.__name__}} is {{modeling.__file__}}, not the real copy under {{HERE}}")
    torch.manual_seed(0)
    config = transformers.{config}(**CONFIG)
    with torch.device(DEVICE):
        model = modeling.{cls}(config)
    info = {{
        "class": {cls!r},
        "params": sum(p.numel() for p in model.parameters()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation", None) if hasattr(config, "num_local_experts") else None,
        "modeling_file": os.path.relpath(modeling.__file__, HERE),
        "transformers": transformers.__version__,
    }}
    print("harness-info: " + json.dumps(info), file=sys.stderr, flush=True)
    return model.eval()


def make_inputs(batch: int = 8, seq: int = 512):
    g = torch.Generator().manual_seed(1000003 * batch + seq)
    return {{"input_ids": torch.randint(0, {vocab}, (batch, seq), generator=g)}}
'''


CLI = "import sys; from rewriter.cli import main; sys.exit(main(sys.argv[1:]))"


def child_env(smoke: bool, work: Path) -> dict[str, str]:
    """The environment of a ``stackpart`` child: this checkout importable, cold compile caches."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), PYTHONUNBUFFERED="1")
    if not smoke:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cold")
        env["TRITON_CACHE_DIR"] = str(work / "triton-cold")
    return env


def run_group(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run ``cmd`` in its own session; on timeout SIGTERM then SIGKILL its process group (Inductor
    compile workers too). Returns (rc, stdout, stderr); rc 124 on timeout."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                out, err = "", ""
        return 124, out or "", (err or "") + f"\ntimeout after {timeout:.0f} s: killed"


def pack_trace(report_dir: Path) -> str | None:
    """Gzip ``trace.json`` once (a GPU trace of a 16-layer model is tens of MB of JSON); drop it
    when the .gz is over :data:`TRACE_GZ_LIMIT`. Returns what happened, for the report."""
    trace = report_dir / "trace.json"
    if not trace.is_file():
        return None
    raw = trace.stat().st_size
    packed = trace.with_name("trace.json.gz")
    with trace.open("rb") as f, gzip.open(packed, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g, 2**20)
    trace.unlink()
    size = packed.stat().st_size
    if size > TRACE_GZ_LIMIT:
        packed.unlink()
        return f"dropped: {raw / 2**20:.1f} MiB JSON, {size / 2**20:.1f} MiB gzipped (over {TRACE_GZ_LIMIT // 2**20} MiB)"
    return f"report/trace.json.gz ({raw / 2**20:.1f} MiB JSON)"


def last_error(stderr: str) -> str | None:
    """The last ``error:`` line of a child's stderr (stackpart's one-line errors), else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if ln.lower().startswith("error")), lines[-1] if lines else None)


def diff_files(diff: str) -> list[str]:
    """Paths (relative to SRC) a git-style diff touches (its ``+++ b/`` lines)."""
    return sorted({line[6:].strip() for line in diff.splitlines() if line.startswith("+++ b/")})


def search_summary(rung: dict) -> dict:
    """The search's figures from report.json's ``search`` entry: the candidates table (with both
    processes' medians per shape and the host-core-contended step; run 38's digest left that out,
    its report.json in the .tgz has it), the chosen candidate, the decision, the noise band, the notes,
    its seconds."""
    m = rung.get("measurement") or {}
    return {"chosen": m.get("chosen"), "decision": m.get("decision"), "seconds": rung.get("seconds"), "pruned": m.get("pruned"),
            "noise": m.get("noise"), "notes": m.get("notes"), "clock": m.get("clock"),
            "candidates": [{k: c.get(k) for k in ("candidate", "step_ms", "step_ms_per_shape", "process_ms_per_shape",
                                                    "contended_step_ms", "contended_ms_per_shape", "cold_compile_s", "new_shape_compile_s",
                                                    "compile_s_per_start", "graphs", "graph_breaks", "recompiles", "fallbacks", "numerics",
                                                    "net_s", "status", "chosen")} for c in m.get("candidates", [])]}


def one_model(name: str, work: Path, *, smoke: bool, timeout: float, steps: int, shapes: list[str] | None = None,
              runs: int = 1_000_000, restarts: int = 30, extra: list[str] | None = None) -> dict:
    """Diagnose one model in a child process, rewrite its plan; the row for the report."""
    _, cls, model_dir, block, _, _ = MODELS[name]
    modeling = f"transformers/models/{model_dir}/modeling_{model_dir}.py"
    src, out = work / "src", work / name
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    build_src(src, name, smoke=smoke, device="cpu" if smoke else "cuda")
    shutil.copy(src / "harness.py", out / "harness.py")
    setup_s = time.perf_counter() - t0
    env = child_env(smoke, work)
    cmd = [sys.executable, "-c", CLI, "diagnose", "--harness", "harness.py", str(src), "-o", str(out / "plan.yaml"),
           "--report-dir", str(out / "report"), "--runs", str(runs), "--restarts", str(restarts), "--steps", str(steps),
           "--timeout", str(max(10, int(timeout) - 20))]
    cmd += ["--device", "cpu", "--dtype", "float32", "--backend", "eager"] if smoke else ["--device", "cuda", "--dtype", "bfloat16", "--backend", "inductor"]
    for s in SMOKE_SHAPES if smoke else (shapes or GPU_SHAPES):
        cmd += ["--shape", s]
    cmd += extra or []  # diagnose's own flags passed through (--cold-parallel, --pin)
    t0 = time.perf_counter()
    rc, _, err = run_group(cmd, env, timeout)
    wall = time.perf_counter() - t0
    (out / "stderr.txt").write_text(err, encoding="utf-8")
    # the harness's own stderr goes to diagnose.log (the terminal keeps stackpart's summary)
    log = out / "report" / "diagnose.log"
    printed = err + (log.read_text(encoding="utf-8", errors="replace") if log.is_file() else "")
    info = next((json.loads(line.split("harness-info: ", 1)[1]) for line in printed.splitlines() if line.startswith("harness-info: ")), {})
    report_path = out / "report" / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    rungs = {r["name"]: r for r in report.get("rungs", [])}
    m = lambda n: rungs.get(n, {}).get("measurement") or {}  # noqa: E731
    row: dict = {
        "model": name,
        "class": cls,
        "block": f"{modeling}::{block}",
        "rc": rc,
        "wall_s": round(wall, 1),
        "ladder_s": report.get("seconds"),
        "src_setup_s": round(setup_s, 2),
        "harness": info,
        "complete": report.get("complete"),
        "error": report.get("error") or (last_error(err) if rc else None),
        "profiler_overhead": m("device_time").get("profiler_overhead"),
        "profiled_step_ms": m("device_time").get("profiled_step_ms"),
        "eager_step_ms": m("device_time").get("eager_step_ms"),
        "op_mix": {"basis": m("op_mix").get("basis"), "share": dict(sorted((m("op_mix").get("share") or {}).items(), key=lambda kv: -kv[1])[:4]),
                   "gemm_share": m("op_mix").get("gemm_share"), "fusible_share": m("op_mix").get("fusible_share")},
        "top_op": (m("top_ops").get("top") or [None])[0],
        "granularity_target": m("granularity").get("target"),
        "rungs": [{"name": r["name"], "status": r.get("status"), "seconds": r.get("seconds"), "verdict": r.get("verdict") or r.get("reason"), "implies": r.get("implies")} for r in report.get("rungs", [])],
        "actions": [],
        "notes": report.get("notes", []),
        "search": search_summary(rungs.get("search", {})),
        "validation_report": (out / ".stackpart" / "validation" / "validation.json").is_file(),
    }
    row["trace"] = pack_trace(out / "report")
    plan = out / "plan.yaml"
    if rc == 0 and plan.is_file():
        import yaml

        row["actions"] = [{k: v for k, v in a.items() if k in ("action", "target", "strategy", "options", "arg", "dim", "call", "kernel", "why")} for a in (yaml.safe_load(plan.read_text()) or {}).get("actions") or []]
        t0 = time.perf_counter()
        rrc, diff, rerr = run_group([sys.executable, "-c", CLI, "rewrite", "--plan", str(plan), str(src)], env, 30)
        (out / "plan.diff").write_text(diff, encoding="utf-8")
        row["rewrite"] = {"rc": rrc, "seconds": round(time.perf_counter() - t0, 1), "diff_lines": len(diff.splitlines()),
                          "files": diff_files(diff), "only_modeling_file": [f for f in diff_files(diff) if not f.startswith("transformers/_stackpart/")] in ([], [modeling]), "stderr": rerr.strip()[-500:] or None}
    else:
        row["rewrite"] = {"rc": None, "error": "no plan: diagnose failed"}
    return row


def not_run(name: str, why: str) -> dict:
    return {"model": name, "class": MODELS[name][1], "rc": None, "error": why, "rungs": [], "actions": [], "notes": [], "rewrite": {"rc": None}}


def ok(row: dict) -> bool:
    """Diagnose finished with no rung in error and its plan rewrote cleanly, touching at most the
    copied modeling file."""
    rw = row.get("rewrite") or {}
    clean = not any(g["status"] == "error" for g in row.get("rungs", []))
    return row.get("rc") == 0 and bool(row.get("complete")) and clean and rw.get("rc") == 0 and bool(rw.get("only_modeling_file"))


def tag(d: Path, dirs: list[Path]) -> str:
    """The name of one model run's directory in the .tgz and its diff: the model (``llama``), or
    the model and its run index (``llama-0``, ``llama-1``) when ``--repeat`` ran it more than once,
    so a repeat does not overwrite the run before it."""
    return d.parent.name if sum(1 for e in dirs if e.name == d.name) > 1 else d.name


def write(payload: dict, dirs: list[Path]) -> None:
    """$OUT/diagnose_hf.{json,md}, the diffs, and the per-model directories as one .tgz."""
    OUT.mkdir(parents=True, exist_ok=True)
    payload.pop("tgz_note", None)
    for d in dirs:
        if (d / "plan.diff").is_file():
            shutil.copy(d / "plan.diff", OUT / f"diagnose_hf_{tag(d, dirs)}.diff")
    tgz = OUT / "diagnose_hf.tgz"
    with tarfile.open(tgz, "w:gz", compresslevel=6) as tar:
        for d in dirs:
            tar.add(d, arcname=f"diagnose_hf/{tag(d, dirs)}")
    if tgz.stat().st_size > TGZ_LIMIT:  # the device would not return it: again without traces
        with tarfile.open(tgz, "w:gz", compresslevel=6) as tar:
            for d in dirs:
                tar.add(d, arcname=f"diagnose_hf/{tag(d, dirs)}", filter=lambda ti: None if ti.name.endswith("trace.json.gz") else ti)
        payload["tgz_note"] = f"traces left out of diagnose_hf.tgz (over {TGZ_LIMIT // 2**20} MiB with them)"
    (OUT / "diagnose_hf.json").write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    (OUT / "diagnose_hf.md").write_text(markdown(payload, dirs), encoding="utf-8")


def fmt_params(n: int | None) -> str:
    return "?" if not n else f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"


def markdown(payload: dict, dirs: list[Path]) -> str:
    md = [f"# stackpart diagnose on HF transformers models ({payload['device']}, torch {payload['torch']}, transformers {payload.get('transformers')})", "",
          f"Shapes {', '.join(payload['shapes'])} ({payload['dtype']}, inference); Amortization(runs={payload.get('runs', 1000000)}, restarts={payload.get('restarts', 30)}); backend {payload['backend']}. "
          "SRC = harness.py + a symlink farm of transformers with the model's directory copied (the decoder layer lies under SRC).", "",
          "| model | ok | params | ladder s | wall s | profiler overhead | plan actions | rewrite rc | diff lines |", "|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        acts = "<br>".join(f"{a['action']} {a['target']}" for a in r["actions"]) or "(none)"
        params = (r.get("harness") or {}).get("params")
        md.append(f"| {r['model']} | {'yes' if ok(r) else 'NO'} | {fmt_params(params)} | {r.get('ladder_s')} | {r.get('wall_s')} | "
                  f"{r.get('profiler_overhead')} | {acts} | {r['rewrite'].get('rc')} | {r['rewrite'].get('diff_lines')} |")
    for r in payload["rows"]:
        md += ["", f"## {r['model']} ({r['class']})", ""]
        if r.get("error"):
            md.append(f"- error: {r['error']}")
        errors = [f"{g['name']}: {g['verdict']}" for g in r["rungs"] if g["status"] == "error"]
        if errors:
            md.append("- rung errors: " + "; ".join(errors))
        if not r["rungs"]:
            continue
        h = r.get("harness") or {}
        md += [f"- harness: {h.get('params')} params, attention {h.get('attn_implementation')}" + (f", experts {h['experts_implementation']}" if h.get("experts_implementation") else "")
               + f", modeling file {h.get('modeling_file')} (under SRC), transformers {h.get('transformers')}",
               f"- ladder {r.get('ladder_s')} s (process {r.get('wall_s')} s); profiler overhead {r.get('profiler_overhead')} (profiled step {r.get('profiled_step_ms')} ms vs eager {r.get('eager_step_ms')} ms)",
               f"- op mix ({r['op_mix']['basis']}): " + ", ".join(f"{k} {v:.0%}" for k, v in r["op_mix"]["share"].items()) + f"; GEMM+attention {r['op_mix']['gemm_share']}, fusible {r['op_mix']['fusible_share']}"]
        top = r.get("top_op") or {}
        md.append(f"- top op: {top.get('op')} ({top.get('category')}, {top.get('share')} of the step, kernels {', '.join(top.get('kernels') or []) or '-'})")
        md.append(f"- granularity target: {r.get('granularity_target')}; trace: {r.get('trace')}")
        md += ["", "| rung | status | s | verdict | implies |", "|---|---|---|---|---|"]
        md += [f"| {g['name']} | {g['status']} | {g['seconds']} | {str(g['verdict']).replace('|', '/')[:300]} | {str(g['implies'] or '').replace('|', '/')} |" for g in r["rungs"]]
        sr = r.get("search") or {}
        if sr.get("candidates"):
            md += ["", f"Search ({sr.get('seconds')} s): {sr.get('decision')}", "",
                   "| candidate | step ms | per shape | cold compile s | new-shape compile s | recompiles | fallbacks | numerics | net s | status |",
                   "|---|---|---|---|---|---|---|---|---|---|"]
            for c in sr["candidates"]:
                md.append(f"| {'**' + c['candidate'] + '**' if c.get('chosen') else c['candidate']} | {c.get('step_ms')} | {c.get('step_ms_per_shape')} | "
                          f"{c.get('cold_compile_s')} | {c.get('new_shape_compile_s')} | {c.get('recompiles')} | {c.get('fallbacks')} | "
                          f"{c.get('numerics')} | {c.get('net_s')} | {str(c.get('status')).replace('|', '/')[:160]} |")
            md += [f"- pruned: {p}" for p in sr.get("pruned") or []]
        md += ["", "Plan actions:", ""] + [f"- `{a['action']} {a['target']}`" + (f" ({a.get('strategy') or 'region'}, {a.get('options') or 'default options'})" if a["action"] == "compile" else "") + f": {a.get('why')}" for a in r["actions"]]
        md += [f"- note: {n}" for n in r["notes"]]
        rw = r["rewrite"]
        md += ["", f"`stackpart rewrite --plan`: exit {rw.get('rc')}, {rw.get('diff_lines')} diff lines, files {rw.get('files')}" + (f"; stderr: {rw['stderr']}" if rw.get("stderr") else "")]
        diff_path = next((d / "plan.diff" for d in dirs if d.parent.name == f"{r['model']}-{r.get('run')}"), None)
        if diff_path is not None and diff_path.is_file() and diff_path.read_text().strip():
            md += ["", "```diff", diff_path.read_text().rstrip()[:6000], "```"]
    md += ["", f"Total {payload.get('total_s')} s. Per-model harness, plan, report (report.md/json, charts, gzipped Chrome trace), diff and stderr in diagnose_hf.tgz."
           + (f" {payload['tgz_note']}." if payload.get("tgz_note") else "")]
    return "\n".join(md) + "\n"


def main(argv: list[str]) -> int:
    """``--smoke``: CPU, tiny configs, eager backend; ``--only a,b``; ``--timeout S`` per model;
    ``--deadline S``: no diagnose runs past S seconds from the start (a model starts only with
    ``--min-start`` seconds left; its timeout is cut to what is left). Exit 0 when every model ran,
    its plan rewrote with exit 0 and the diff touched only the copied modeling file."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--timeout", type=float, default=420.0, help="seconds per model (diagnose)")
    ap.add_argument("--deadline", type=float, default=540.0, help="no diagnose runs past this many seconds from the start")
    ap.add_argument("--min-start", type=float, default=None, help="start a model only with this many seconds left before the deadline (default 120; 20 with --smoke)")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="throughput", help="GPU shapes: throughput (8x512, 8x384) or latency (1x128)")
    ap.add_argument("--runs", type=int, default=1_000_000, help="the deployment's steps (Amortization.runs)")
    ap.add_argument("--restarts", type=int, default=30, help="process starts without persisted caches (Amortization.restarts)")
    ap.add_argument("--repeat", type=int, default=1, help="diagnose each model this many times (the search's choice must not flip)")
    ap.add_argument("--cold-parallel", type=int, default=None, help="diagnose --cold-parallel (default: diagnose's own)")
    ap.add_argument("--pin", default=None, help="diagnose --pin (default: diagnose's own)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    extra = (["--cold-parallel", str(args.cold_parallel)] if args.cold_parallel else []) + (["--pin", args.pin] if args.pin else [])
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = set(names) - set(MODELS)
    names = [n for n in names for _ in range(max(1, args.repeat))]
    if unknown:
        print(f"unknown model(s) {sorted(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke for a CPU dry run)", file=sys.stderr)
        return 2
    tversion = None
    try:
        from importlib.metadata import version

        tversion = version("transformers")
    except Exception:
        pass
    payload = {"device": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": tversion,
               "shapes": SMOKE_SHAPES if args.smoke else WORKLOADS[args.workload], "workload": args.workload, "dtype": "float32" if args.smoke else "bfloat16",
               "backend": "eager" if args.smoke else "inductor", "timeout_s": args.timeout, "deadline_s": args.deadline,
               "runs": args.runs, "restarts": args.restarts, "diagnose_flags": extra, "rows": []}
    min_start = args.min_start if args.min_start is not None else (20.0 if args.smoke else 120.0)
    base = Path(tempfile.mkdtemp(prefix="diagnose-hf-"))
    dirs: list[Path] = []
    try:
        for k, name in enumerate(names):
            left = args.deadline - (time.perf_counter() - started)
            if left < min_start:
                payload["rows"].append(not_run(name, f"not run: deadline ({args.deadline:g} s from the start; {max(0.0, left):.0f} s left < {min_start:g} s)"))
                print(f"{name:8s} not run: deadline", flush=True)
                continue
            work = base / f"{name}-{k}"
            row = one_model(name, work, smoke=args.smoke, timeout=min(args.timeout, left), steps=args.steps,
                            shapes=None if args.smoke else WORKLOADS[args.workload], runs=args.runs, restarts=args.restarts,
                            extra=extra)
            row["run"] = k
            dirs.append(work / name)
            payload["rows"].append(row)
            acts = "; ".join(f"{a['action']} {a['target']}" for a in row["actions"]) or "(no actions)"
            print(f"{name:8s} rc={row['rc']} {'ok' if ok(row) else 'FAIL'} ladder {row.get('ladder_s')} s, wall {row['wall_s']} s; "
                  f"search chose {row['search'].get('chosen')} ({row['search'].get('seconds')} s); {acts}; "
                  f"rewrite rc={row['rewrite'].get('rc')} diff {row['rewrite'].get('diff_lines')} lines" + (f"; error: {row['error']}" if row.get("error") else ""), flush=True)
            payload["total_s"] = round(time.perf_counter() - started, 1)
            write(payload, dirs)
        payload["total_s"] = round(time.perf_counter() - started, 1)
        write(payload, dirs)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print((OUT / "diagnose_hf.md").read_text())
    return 0 if payload["rows"] and all(ok(r) for r in payload["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
