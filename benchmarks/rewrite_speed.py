"""Rewrite speed: a plan touching 5 files in a tree of >= 3,000 Python files.

Issue 2's target: only the 5 files are parsed, and ``stackpart rewrite`` end to end (process
start to exit) takes within 1.5x of the floor: interpreter start-up plus importing
``rewriter.cli`` and libcst plus parsing those 5 files with libcst, in one process.

The tree is a copy of installed packages' ``.py`` files (torch and transformers: together
> 3,000 files). Both commands run as subprocesses, alternated, ``--reps`` times; medians are
reported. A separate in-process run counts the files the rewrite reads and parses.

    python benchmarks/rewrite_speed.py [--reps 7] [--out DIR]

Writes ``rewrite_speed.json`` and ``rewrite_speed.md`` under ``--out`` (default ``$OUT`` or
``benchmarks/out``); exit 1 when the ratio is above ``--goal`` (1.5). CPU only; no GPU used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install`

#: Packages copied, in order, until the tree holds >= 3,000 files (torch alone has ~2,300).
PACKAGES = ["torch", "transformers", "sympy", "numpy", "pip", "setuptools"]

#: (file relative to the tree, qualname, action) — real model files of the copied packages.
HF_TARGETS = [
    ("transformers/models/llama/modeling_llama.py", "LlamaDecoderLayer", "compile"),
    ("transformers/models/gpt2/modeling_gpt2.py", "GPT2Block", "compile"),
    ("transformers/models/bert/modeling_bert.py", "BertLayer", "compile"),
    ("torch/nn/modules/linear.py", "Linear", "compile"),
    ("torch/nn/modules/activation.py", "MultiheadAttention", "disable"),
]
#: Used where transformers is not installed (the GPU box).
TORCH_TARGETS = [
    ("torch/nn/modules/transformer.py", "TransformerEncoderLayer", "compile"),
    ("torch/nn/modules/normalization.py", "LayerNorm", "compile"),
    ("torch/nn/modules/container.py", "Sequential", "compile"),
    ("torch/nn/modules/linear.py", "Linear", "compile"),
    ("torch/nn/modules/activation.py", "MultiheadAttention", "disable"),
]
TARGETS = HF_TARGETS


def copy_tree(dest: Path) -> int:
    """Copy the ``.py`` files of :data:`PACKAGES` under ``dest``; return how many were copied."""
    import importlib.util

    count = 0
    for name in PACKAGES:
        if count >= 3000 and name not in ("torch", "transformers"):
            break
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            out = dest / name / path.relative_to(root)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
            count += 1
    return count


def write_plan(path: Path) -> None:
    lines = ["version: 1", "actions:"]
    for rel, qual, action in TARGETS:
        lines += [f"  - action: {action}", f"    target: {rel}::{qual}"]
        if action == "compile":
            lines.append("    options: {backend: eager}")
    path.write_text("\n".join(lines) + "\n")


CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], cwd: Path, key: str | None = None) -> float:
    """Wall seconds of one run; its CPU seconds (user + sys, from getrusage of children) are
    appended to ``CPU[key]``: CPU time is far less sensitive to a loaded machine than wall."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    if key:
        CPU.setdefault(key, []).append(
            after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        )
    return elapsed


def count_parsed(plan: Path, src: Path) -> dict[str, int]:
    """Files read and modules parsed by one in-process rewrite (libcst.parse_module counted)."""
    import libcst

    from rewriter import source
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite

    parsed, read = [], []
    real_parse, real_read = libcst.parse_module, source.read_source

    def parse(text, *a, **k):
        parsed.append(len(text))
        return real_parse(text, *a, **k)

    def read_source(root, rel):
        read.append(rel)
        return real_read(root, rel)

    libcst.parse_module, source.read_source = parse, read_source
    import rewriter.rewrite.transform as rw

    rw_read = rw.read_source
    rw.read_source = read_source
    try:
        result = plan_rewrite(load_plan(plan), src)
    finally:
        libcst.parse_module, source.read_source, rw.read_source = real_parse, real_read, rw_read
    return {"files_read": len(set(read)), "parse_calls": len(parsed), "files_changed": len(result.changes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--goal", type=float, default=1.5)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "out"))
    ap.add_argument("--torch-only", action="store_true",
                    help="target torch files only (the default where transformers is missing)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    global TARGETS
    import importlib.util

    if args.torch_only or importlib.util.find_spec("transformers") is None:
        TARGETS = TORCH_TARGETS
        PACKAGES.remove("transformers")
    with tempfile.TemporaryDirectory(prefix="stackpart-speed-") as tmp:
        tmp = Path(tmp)
        src = tmp / "site"
        n_files = copy_tree(src)
        if n_files < 3000:
            raise SystemExit(f"only {n_files} .py files copied; the benchmark needs >= 3000")
        plan = tmp / "plan.yaml"
        write_plan(plan)
        files = [str(src / rel) for rel, _, _ in TARGETS]
        floor_code = (
            "import rewriter.cli, libcst, sys\n"
            "for f in sys.argv[1:]:\n"
            "    libcst.parse_module(open(f, 'rb').read().decode('utf-8'))\n"
        )
        stackpart = [sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(plan), str(src)]
        floor = [sys.executable, "-c", floor_code, *files]
        startup = [sys.executable, "-c", "import rewriter.cli"]
        # What the rewrite imports beyond the floor's libcst: LibCST's codemod framework (its
        # matchers module is most of it) and the pydantic plan schema.
        imports = [sys.executable, "-c", "import rewriter.cli, libcst, libcst.codemod, rewriter.plan, rewriter.rewrite.command"]
        timed(stackpart, tmp), timed(floor, tmp)  # warm the page cache
        t_rewrite, t_floor, t_start, t_imports = [], [], [], []
        for _ in range(args.reps):
            t_rewrite.append(timed(stackpart, tmp, "rewrite"))
            t_floor.append(timed(floor, tmp, "floor"))
            t_start.append(timed(startup, tmp, "startup"))
            t_imports.append(timed(imports, tmp, "imports"))
        counts = count_parsed(plan, src)

    import libcst
    import torch

    med = {k: statistics.median(v) for k, v in
           (("rewrite_s", t_rewrite), ("floor_s", t_floor), ("startup_s", t_start),
            ("imports_s", t_imports))}
    ratio = med["rewrite_s"] / med["floor_s"]
    cpu = {k: statistics.median(v) for k, v in CPU.items()}
    cpu_ratio = cpu["rewrite"] / cpu["floor"]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}",
        "torch": torch.__version__,
        "libcst": getattr(libcst, "LIBCST_VERSION", None) or __import__("importlib.metadata").metadata.version("libcst"),
        "tree_py_files": n_files,
        "targets": [f"{r}::{q} ({a})" for r, q, a in TARGETS],
        "reps": args.reps,
        **{k: round(v, 4) for k, v in med.items()},
        "libcst_import_and_parse5_s": round(med["floor_s"] - med["startup_s"], 4),
        "ratio": round(ratio, 3),
        "cpu_s": {k: round(v, 4) for k, v in cpu.items()},
        "cpu_ratio": round(cpu_ratio, 3),
        "load_avg_1m": os.getloadavg()[0],
        "goal": args.goal,
        "raw": {"rewrite_s": t_rewrite, "floor_s": t_floor, "startup_s": t_start, "imports_s": t_imports},
        **counts,
    }
    ok = ratio <= args.goal and counts["files_read"] == len(TARGETS) and counts["parse_calls"] == len(TARGETS)
    result["pass"] = ok
    (out / "rewrite_speed.json").write_text(json.dumps(result, indent=2))
    table = (
        "| time | `stackpart rewrite` | floor: start-up + import libcst + parse 5 | start-up alone | start-up + all rewrite imports | ratio | goal |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| wall | {med['rewrite_s']:.3f} s | {med['floor_s']:.3f} s | {med['startup_s']:.3f} s | "
        f"{med['imports_s']:.3f} s | {ratio:.2f}x | <= {args.goal}x |\n"
        f"| CPU (user+sys) | {cpu['rewrite']:.3f} s | {cpu['floor']:.3f} s | {cpu['startup']:.3f} s | "
        f"{cpu['imports']:.3f} s | {cpu_ratio:.2f}x | <= {args.goal}x |\n"
        f"\nTree: {n_files} .py files; files read / parsed by the rewrite: {counts['files_read']} / "
        f"{counts['parse_calls']}. Medians of {args.reps} alternated runs; 1-minute load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. Targets: " + "; ".join(result["targets"]) + "\n"
    )
    (out / "rewrite_speed.md").write_text(table)
    print(table)
    print("PASS" if ok else "FAIL", f"ratio {ratio:.2f}x (goal {args.goal}x); files parsed {counts['parse_calls']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
