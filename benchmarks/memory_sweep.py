"""The memory rung over a shape sweep, and the allocator candidate, on a CUDA GPU (issue 14 item 2).

Run from the repository root on the GPU machine (no network needed; torch only):

    python benchmarks/memory_sweep.py                 # writes $OUT/ (else benchmarks/results/memory_sweep/)
    python benchmarks/memory_sweep.py /tmp/ms         # or into the directory given
    python benchmarks/memory_sweep.py --dry-run /tmp/ms   # CPU smoke: a tiny model, the same code path

It writes ``memory_sweep.json`` (every figure, every step) and ``memory_sweep.md`` (the tables for
BENCHMARKS.md). Three workloads, each in its own process (a memory cap set in one cannot leak into
the next; a failing part is recorded and the others still run), all the same decoder-only LM
(hidden 2048, 8 layers, 16 heads, vocab 32000, ~470 M parameters) trained by the harness's step
(forward, cross-entropy, backward, SGD) in bfloat16, batch 8:

* ``variable``: sequence lengths change every step, cycling 384..2048 (8 lengths, in a fixed order);
* ``variable_capped``: the same under ``torch.cuda.set_per_process_memory_fraction`` at
  :data:`CAP_FACTOR` x the largest step peak allocated that ``variable`` measured (a job near
  the GPU's capacity, where the cache cannot simply keep one block per size);
* ``fixed``: one sequence length (1024), the same model: it must get no fragmentation verdict.

Per workload: ``stackpart diagnose``'s memory rung (``diagnose(..., only={"memory"})``: the
sweep, its per-step figures, the verdict), then, where the verdict holds or the workload is a
variable one, the allocator candidate as the search measures it
(:func:`rewriter.diagnose.rungs.memory.measure_allocator`: the sweep in two fresh processes, without
and with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; mean step time over the steady
passes and the process's peak reserved). Budget: about 2-3 minutes on an H200; a part still
running after :data:`PART_TIMEOUT_S` is killed and recorded, and parts that would start after
:data:`DEADLINE_S` are skipped and say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The capped workload's limit, as a multiple of the uncapped sweep's largest step peak allocated:
#: room for the live tensors and a little cache, not for one cached block per sequence length.
CAP_FACTOR = 1.2
PART_TIMEOUT_S = 150
DEADLINE_S = 200  # no part starts later than this after the script's start (the 4-minute budget)

GPU = {"vocab": 32000, "hidden": 2048, "layers": 8, "heads": 16, "batch": 8,
       "variable": [384, 1536, 640, 2048, 512, 1024, 896, 1792], "fixed": [1024], "dtype": "bfloat16", "device": "cuda"}
DRY = {"vocab": 256, "hidden": 64, "layers": 2, "heads": 4, "batch": 2,
       "variable": [16, 48, 32], "fixed": [32], "dtype": "float32", "device": "cpu"}

MODEL = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, d, layers, heads):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
'''

HARNESS = '''\
import os

import torch

from model import LM

VOCAB, HIDDEN, LAYERS, HEADS = {vocab}, {hidden}, {layers}, {heads}


def build_model():
    cap = os.environ.get("MEMSWEEP_CAP_MIB")
    if cap and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, float(cap) * 2**20 / total))
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return LM(VOCAB, HIDDEN, LAYERS, HEADS)


def make_inputs(batch=8, seq=1024):
    g = torch.Generator().manual_seed(seq)
    return (torch.randint(0, VOCAB, (batch, seq), generator=g),)
'''


def write_src(root: Path, cfg: dict[str, Any]) -> Path:
    """The workload as a SRC tree (model.py, harness.py) under ``root``."""
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS.format(**cfg))
    return src


def run_part(name: str, cfg: dict[str, Any], seqs: list[int], always_measure: bool, out: Path) -> dict[str, Any]:
    """One workload, in this process: the memory rung through ``diagnose``, then the allocator
    candidate. Every failure is recorded in the result, never raised."""
    import torch

    from rewriter.diagnose.rungs.memory import measure_allocator, sweep, sweep_verdict
    from rewriter.diagnose.runner import diagnose
    from rewriter.plan import Harness

    record: dict[str, Any] = {"part": name, "seqs": seqs, "cap_mib": os.environ.get("MEMSWEEP_CAP_MIB"),
                              "torch": torch.__version__,
                              "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    spec = Harness(file="harness.py", shapes=[{"batch": cfg["batch"], "seq": s} for s in seqs], mode="training",
                   dtype=cfg["dtype"], device=cfg["device"])
    with tempfile.TemporaryDirectory(prefix=f"memsweep-{name}-") as tmp:
        src = write_src(Path(tmp), cfg)
        t0 = time.perf_counter()
        try:
            outcome = diagnose(spec, src, Path(tmp) / "plan.yaml", only={"memory"}, report_dir=Path(tmp) / "report", timeout_s=120)
            rung = next(r for r in outcome.rungs if r.name == "memory")
            record["rung"] = rung.to_json()
            record["notes"] = outcome.notes
            record["stopped"] = outcome.stopped
        except Exception as exc:  # a harness failure (capacity OOM) or ours: recorded
            record["rung_error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
        record["rung_s"] = round(time.perf_counter() - t0, 2)
        import gc

        gc.collect()  # the diagnosed model is no longer needed: its memory goes back before the children start
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if cfg["device"] == "cpu":  # the rung is skipped without CUDA: run its sweep and verdict for the smoke
            from rewriter.diagnose.session import Session
            from rewriter.harness import load_harness

            steps = sweep(Session(load_harness(spec, src)))
            record["cpu_sweep"] = {"steps": len(steps), "verdict": sweep_verdict(steps)["reason"]}
        fragmenting = str((record.get("rung") or {}).get("implies", "")).startswith("allocator")
        if fragmenting or always_measure:
            t1 = time.perf_counter()
            try:
                record["allocator"] = measure_allocator(spec, src, timeout_s=PART_TIMEOUT_S / 2, keep_steps=True)
                record["allocator"]["why_measured"] = ("the fragmentation verdict (as the search does)" if fragmenting
                                                       else "a variable workload: measured although the search would not (no verdict)")
            except Exception as exc:
                record["allocator"] = {"error": f"{type(exc).__name__}: {str(exc)[:800]}"}
            record["allocator_s"] = round(time.perf_counter() - t1, 2)
    (out / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
    return record


def spawn_part(name: str, dry: bool, out: Path, seqs: list[int], always: bool, cap_mib: float | None) -> dict[str, Any]:
    """Run :func:`run_part` in a child process (its own CUDA context and memory cap)."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if cap_mib is not None:
        env["MEMSWEEP_CAP_MIB"] = str(round(cap_mib))
    cmd = [sys.executable, str(Path(__file__).resolve()), str(out), "--part", name, "--seqs", ",".join(map(str, seqs))]
    cmd += ["--dry-run"] if dry else []
    cmd += ["--always-measure"] if always else []
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=PART_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"part": name, "error": f"did not finish within {PART_TIMEOUT_S} s (killed)"}
    path = out / f"{name}.json"
    if not path.exists():
        return {"part": name, "error": f"exited {proc.returncode} without a result: {proc.stderr.strip()[-800:]}"}
    record = json.loads(path.read_text())
    record["part_wall_s"] = round(time.perf_counter() - t0, 2)
    return record


def largest_peak_allocated(record: dict[str, Any]) -> float | None:
    """The largest per-step peak allocated (MiB) of a part's memory rung, or None."""
    steps = ((record.get("rung") or {}).get("measurement") or {}).get("steps") or []
    peaks = [s["peak_allocated_mib"] for s in steps if s.get("peak_allocated_mib")]
    return max(peaks) if peaks else None


def _md_steps(steps: list[dict[str, Any]]) -> list[str]:
    lines = ["| pass | seq | ms | reserved MiB | allocated MiB | reserved - allocated | peak reserved | device allocs | device frees | inactive split MiB | retries |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {s['pass'] or 'warm'} | {s['shape'].get('seq')} | {s['step_ms']:.1f} | {s['reserved_mib']:.0f} | {s['allocated_mib']:.0f} | "
                     f"{s['unallocated_mib']:.0f} | {s['peak_reserved_mib']:.0f} | {s['device_allocs']} | {s['device_frees']} | "
                     f"{s['inactive_split_mib']:.0f} | {s['alloc_retries']} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    """The report: per workload the rung's verdict, its per-pass and per-step figures, and the
    allocator candidate's two arms."""
    lines = ["# Memory rung over the shape sweep (benchmarks/memory_sweep.py)", "",
             f"torch {result.get('torch')}, {result.get('device_name')}, {result.get('wall_s')} s in all"
             + (" (dry run on CPU: no CUDA allocator, figures are zeros)" if result.get("dry_run") else ""), ""]
    for rec in result["parts"]:
        name = rec.get("part")
        lines += [f"## {name}" + (f" (cap {rec['cap_mib']} MiB)" if rec.get("cap_mib") else ""), ""]
        if rec.get("error"):
            lines += [f"**error:** {rec['error']}", ""]
            continue
        lines.append(f"sequence lengths {rec.get('seqs')}")
        if rec.get("rung_error"):
            lines += ["", f"**memory rung failed:** {rec['rung_error']}", ""]
        rung = rec.get("rung") or {}
        if rung:
            lines += ["", f"**verdict** ({rung.get('status')}, {rec.get('rung_s')} s): {rung.get('verdict')}", "",
                      f"implies: {rung.get('implies')}", ""]
            m = rung.get("measurement") or {}
            if m.get("passes"):
                lines += ["| pass | steps | device allocs | device frees | retries | reserved at end MiB | reserved - allocated at end | peak reserved MiB | mean ms | median ms |",
                          "|---|---|---|---|---|---|---|---|---|---|"]
                for p in m["passes"]:
                    lines.append(f"| {p['pass']} | {p['steps']} | {p['device_allocs']} | {p['device_frees']} | {p['alloc_retries']} | {p['end_reserved_mib']:.0f} | "
                                 f"{p['end_unallocated_mib']:.0f} | {p['peak_reserved_mib']:.0f} | {p['step_ms_mean']:.1f} | {p['step_ms_median']:.1f} |")
                lines += ["", f"device counter: `{m.get('device_counter')}`", "", "<details><summary>every step</summary>", ""]
                lines += _md_steps(m.get("steps") or []) + ["", "</details>", ""]
        if rec.get("cpu_sweep"):
            lines += [f"CPU sweep ({rec['cpu_sweep']['steps']} steps): {rec['cpu_sweep']['verdict']}", ""]
        alloc = rec.get("allocator")
        if alloc:
            lines += [f"**allocator candidate** ({rec.get('allocator_s')} s; measured because of {alloc.get('why_measured', 'an error before it said why')}): "
                      + (alloc.get("skipped") or alloc.get("error") or alloc["effect"]["text"]), ""]
            if "without" in alloc:
                lines += [f"protocol: {alloc.get('protocol')}", "",
                          "| arm | mean ms/step (passes 2..N) | median ms | peak reserved MiB | peak allocated MiB | device allocs (steady) | retries | error |",
                          "|---|---|---|---|---|---|---|---|"]
                for arm in ("without", "with"):
                    a = alloc[arm]
                    lines.append(f"| {arm} expandable_segments | {a.get('step_ms_mean', '-')} | {a.get('step_ms_median', '-')} | {a.get('peak_reserved_mib', '-')} | "
                                 f"{a.get('peak_allocated_mib', '-')} | {a.get('steady_device_allocs', '-')} | {a.get('alloc_retries', '-')} | {a.get('error') or ''} |")
                lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results" / "memory_sweep"))
    ap.add_argument("--dry-run", action="store_true", help="CPU smoke: a tiny model, no CUDA needed")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--seqs", help=argparse.SUPPRESS)
    ap.add_argument("--always-measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = DRY if args.dry_run else GPU
    if args.part:  # the child: one workload
        run_part(args.part, cfg, [int(s) for s in args.seqs.split(",")], args.always_measure, out)
        return 0
    if args.dry_run:  # a CPU smoke on a small shared machine
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    parts: list[dict[str, Any]] = []

    def part(name: str, seqs: list[int], always: bool, cap: float | None = None) -> dict[str, Any]:
        if time.perf_counter() - started > DEADLINE_S:
            rec = {"part": name, "error": f"skipped: {DEADLINE_S} s budget spent before it started"}
        else:
            print(f"memory_sweep: {name} ...", flush=True)
            rec = spawn_part(name, args.dry_run, out, seqs, always, cap)
            print(f"memory_sweep: {name}: " + (rec.get("error") or (rec.get("rung") or {}).get("verdict") or rec.get("rung_error", "")), flush=True)
        parts.append(rec)
        return rec

    variable = part("variable", cfg["variable"], True)
    peak = largest_peak_allocated(variable)
    if peak is None and not args.dry_run:
        parts.append({"part": "variable_capped", "error": "skipped: the uncapped run measured no step peak to set the cap from"})
    else:
        part("variable_capped", cfg["variable"], True, None if peak is None else peak * CAP_FACTOR)
    part("fixed", cfg["fixed"], False)
    import torch

    result = {"dry_run": args.dry_run, "config": cfg, "cap_factor": CAP_FACTOR, "torch": torch.__version__,
              "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "wall_s": round(time.perf_counter() - started, 1), "parts": parts}
    (out / "memory_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "memory_sweep.md").write_text(markdown(result))
    print(f"memory_sweep: wrote {out / 'memory_sweep.json'} and {out / 'memory_sweep.md'} in {result['wall_s']} s")
    return 0 if all(not p.get("error") and not p.get("rung_error") for p in parts) else 1


if __name__ == "__main__":
    sys.exit(main())
