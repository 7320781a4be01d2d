"""Speed of `stackpart check` (CPU only): a pre-commit-sized batch and a whole tree, against TorchFix.

Builds a tree from the installed torch and transformers Python sources (a copy: nothing installed
is touched), then times, as a user's shell would run them (subprocess wall time, interpreter start
included):

* batch: 50 files given on the command line, as pre-commit passes them. Two batches: a random 50
  (seeded) and the 50 the prefilter likes least (they all mention torch and a compile call, so all
  go to the parser). Target: under 2 s each.
* tree: the whole 3,000-file tree, ``-j 1`` and ``-j <cores>`` (prefilter + worker processes).
* TorchFix (``torchfix TREE -j <cores>``, its own LibCST linter) on the same tree, when a
  ``torchfix`` executable is found (``--torchfix PATH``, else on PATH); otherwise the table says so.

Usage::

    python benchmarks/check_speed.py [--files 3000] [--torchfix /path/to/torchfix] [--out DIR]

Writes ``check_speed.json`` and ``check_speed.md`` under ``--out`` (default ``$OUT`` or
``benchmarks/results``). Runtime on 2 busy cores: about 5 minutes without TorchFix.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_tree(dest: Path, n_files: int) -> list[str]:
    """Copy ``n_files`` .py files of installed torch + transformers (all of transformers' first,
    then torch's, each in sorted order) under ``dest``; return the relative paths."""
    import torch
    import transformers

    site = Path(torch.__file__).resolve().parents[1]
    chosen: list[Path] = []
    for pkg in (Path(transformers.__file__).parent, Path(torch.__file__).parent):
        for path in sorted(pkg.rglob("*.py")):
            if len(chosen) == n_files:
                break
            chosen.append(path)
    rels = []
    for path in chosen:
        rel = path.relative_to(site)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        rels.append(rel.as_posix())
    return rels


def timed(cmd: list[str], cwd: Path, timeout: float | None = None) -> tuple[float, int, str]:
    start = time.perf_counter()
    # own process group: on a timeout the tool's worker processes are stopped with it
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return time.perf_counter() - start, proc.returncode, output


def save(out: Path, rows: list[dict], meta: dict) -> str:
    """Write check_speed.json/.md (after every run, so a killed run keeps what it measured)."""
    (out / "check_speed.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = ["| run | tool | files | wall s | files/s | result |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['tool']} | {r['files']} | {r['wall_s']} | {r['files_per_s']} | {r['summary']} |")
    table = "\n".join(lines) + "\n"
    (out / "check_speed.md").write_text(table)
    return table


def stackpart_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "stackpart"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rewriter.cli"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--torchfix", default=shutil.which("torchfix"))
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--torchfix-timeout", type=float, default=1200.0, help="seconds before TorchFix is stopped")
    parser.add_argument("--no-torchfix-tree", action="store_true", help="time TorchFix on the subset only")
    parser.add_argument("--subset", type=int, default=300,
                        help="also time both tools on the tree's first N files (TorchFix on the whole tree can "
                        "exceed the timeout on a small machine); 0 to skip")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    meta = {"python": sys.version.split()[0], "cores": os.cpu_count(), "jobs": args.jobs,
            "load_avg_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    with tempfile.TemporaryDirectory(prefix="check_speed_") as tmp:
        tree = Path(tmp)
        rels = build_tree(tree, args.files)
        n = len(rels)
        compile_call = re.compile(rb"\bcompile[ \t]*(?:\(|$)", re.M)
        heavy = [r for r in rels if compile_call.search((tree / r).read_bytes()) and b"torch" in (tree / r).read_bytes()]
        random.seed(0)
        batches = {"batch: 50 random files": random.sample(rels, 50), "batch: 50 files that all reach the parser": heavy[:50]}
        sp = stackpart_cmd()
        for name, files in batches.items():
            wall, rc, text = timed([*sp, "check", "--format", "json", *files], tree)
            summary = text.strip().splitlines()[-1]
            rows.append({"run": name, "tool": "stackpart check", "files": len(files), "wall_s": round(wall, 2),
                         "files_per_s": round(len(files) / wall, 1), "rc": rc, "summary": summary,
                         "target": "< 2 s", "met": wall < 2.0})
            save(out, rows, meta)
        for jobs in sorted({1, args.jobs}):
            wall, rc, text = timed([*sp, "check", "-j", str(jobs), "--format", "json", "-o", str(out / "tree.json"), "."], tree)
            report = json.loads((out / "tree.json").read_text())
            rows.append({"run": f"tree: {n} files, -j {jobs}", "tool": "stackpart check", "files": n,
                         "wall_s": round(wall, 2), "files_per_s": round(n / wall, 1), "rc": rc,
                         "summary": text.strip().splitlines()[-1], "errors": len(report["errors"]),
                         "findings": len(report["findings"]), "parsed": report["files"]["parsed"]})
            save(out, rows, meta)
        if args.torchfix and args.subset:
            subset = rels[: args.subset]
            for tool, cmd in (("stackpart check", [*sp, "check", "-j", str(args.jobs), "--format", "json", *subset]),
                              ("torchfix", [args.torchfix, "-j", str(args.jobs), *subset])):
                try:
                    wall, rc, text = timed(cmd, tree, args.torchfix_timeout)
                except subprocess.TimeoutExpired:
                    rows.append({"run": f"subset: first {len(subset)} files", "tool": tool, "files": len(subset),
                                 "wall_s": f"> {args.torchfix_timeout:.0f}", "files_per_s": "-", "summary": "timeout"})
                    continue
                rows.append({"run": f"subset: first {len(subset)} files, -j {args.jobs}", "tool": tool,
                             "files": len(subset), "wall_s": round(wall, 2), "files_per_s": round(len(subset) / wall, 1),
                             "rc": rc, "summary": text.strip().splitlines()[-1][:100] if text.strip() else ""})
                save(out, rows, meta)
        if args.torchfix and args.no_torchfix_tree:
            pass
        elif args.torchfix:
            try:
                wall, rc, text = timed([args.torchfix, "-j", str(args.jobs), "."], tree, args.torchfix_timeout)
            except subprocess.TimeoutExpired:
                rows.append({"run": f"tree: {n} files, -j {args.jobs}", "tool": "torchfix", "files": n,
                             "wall_s": f"> {args.torchfix_timeout:.0f}", "files_per_s": f"< {n / args.torchfix_timeout:.1f}",
                             "summary": "stopped at the timeout"})
                print(save(out, rows, meta))
                return 0
            findings = sum(1 for line in text.splitlines() if re.match(r"^\S+\.py:\d+:\d+: TOR", line))
            rows.append({"run": f"tree: {n} files, -j {args.jobs}", "tool": "torchfix (all files parsed)", "files": n,
                         "wall_s": round(wall, 2), "files_per_s": round(n / wall, 1), "rc": rc,
                         "summary": f"{findings} TorchFix findings (different rules: not comparable counts)"})
        else:
            rows.append({"run": f"tree: {n} files", "tool": "torchfix", "files": n, "wall_s": None,
                         "files_per_s": None, "summary": "TorchFix not installed (pass --torchfix PATH)"})
    table = save(out, rows, meta)
    print(table)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
