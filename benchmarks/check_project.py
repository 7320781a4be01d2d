"""Speed of `stackpart check` with project-level reachability on a 50-file commit of transformers.

The project is a copy of the installed ``transformers`` package (nothing installed is touched)
under a temporary folder with a ``pyproject.toml``, so the copy is the project root
(rewriter/check/project_reading.py: the nearest folder with pyproject.toml or .git). A commit is 50 of
its ``.py`` files given on the command line, as pre-commit passes them; two commits:

* ``random``: 50 files drawn with a fixed seed from the whole tree;
* ``modeling``: 50 ``models/*/modeling_*.py`` files (seeded), the files a model change touches;
* ``compile``: the first 50 files (sorted) that mention ``torch`` and call ``compile`` (the files
  that start a reach, check_speed's worst case).

Each is timed as a user's shell runs it (subprocess wall time, interpreter start and imports
included):

* cold: project on, no cache (``.stackpart_cache/`` removed): every project file is read once
  for the compile prefilter and the files that can start a reach are parsed;
* warm: project on, the cache of the run before (median of ``--repeat`` runs), the goal is
  under 2 s;
* off: ``--no-project`` (each file alone; median of ``--repeat`` runs), what the check costs
  without the project.

Usage::

    python benchmarks/check_project.py [--repeat 3] [--out DIR]

Writes ``check_project.json`` and ``check_project.md`` under ``--out`` (default ``$OUT`` or
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_project(dest: Path) -> list[str]:
    """Copy installed transformers under ``dest/transformers``, add ``dest/pyproject.toml``;
    return the ``.py`` files relative to ``dest``, sorted."""
    import transformers

    src = Path(transformers.__file__).parent
    shutil.copytree(src, dest / "transformers", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "pyproject.toml").write_text("[project]\nname = 'transformers-copy'\n")
    return sorted(p.relative_to(dest).as_posix() for p in (dest / "transformers").rglob("*.py"))


def run(files: list[str], cwd: Path, extra: list[str]) -> tuple[float, int, str]:
    cmd = [sys.executable, "-m", "rewriter.cli", "check", "--format", "json", *extra, *files]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return wall, proc.returncode, summary


def findings(files: list[str], cwd: Path, extra: list[str]) -> list[dict]:
    out = cwd / ".findings.json"
    cmd = [sys.executable, "-m", "rewriter.cli", "check", "--format", "json", "-o", str(out), *extra, *files]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    data = json.loads(out.read_text())
    out.unlink()
    return data["findings"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import transformers

    meta = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
            "nproc": os.cpu_count(), "uname": " ".join(platform.uname()[:3] + (platform.machine(),)),
            "load_avg_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="check_project_") as tmp:
        proj = Path(tmp)
        rels = build_project(proj)
        meta["project_files"] = len(rels)
        rng = random.Random(0)
        modeling = [r for r in rels if "/models/" in r and Path(r).name.startswith("modeling_")]
        needle = re.compile(rb"\bcompile[ \t]*(?:\(|$|#)", re.M)
        seeds = [r for r in rels if b"torch" in (data := (proj / r).read_bytes()) and needle.search(data)]
        commits = {"random": rng.sample(rels, 50), "modeling": rng.sample(modeling, 50), "compile": seeds[:50]}
        for name, files in commits.items():
            shutil.rmtree(proj / ".stackpart_cache", ignore_errors=True)
            cold, rc, summary = run(files, proj, [])
            rows.append({"commit": name, "run": "cold (no cache)", "wall_s": round(cold, 2), "rc": rc, "summary": summary})
            warm = [run(files, proj, []) for _ in range(args.repeat)]
            rows.append({"commit": name, "run": f"warm (median of {args.repeat})",
                         "wall_s": round(statistics.median(w for w, _, _ in warm), 2),
                         "min_s": round(min(w for w, _, _ in warm), 2), "rc": warm[-1][1], "summary": warm[-1][2]})
            off = [run(files, proj, ["--no-project"]) for _ in range(args.repeat)]
            rows.append({"commit": name, "run": f"--no-project (median of {args.repeat})",
                         "wall_s": round(statistics.median(w for w, _, _ in off), 2),
                         "min_s": round(min(w for w, _, _ in off), 2), "rc": off[-1][1], "summary": off[-1][2]})
            on_f, off_f = findings(files, proj, []), findings(files, proj, ["--no-project"])
            rows[-1]["findings_on"], rows[-1]["findings_off"] = len(on_f), len(off_f)
            rows[-1]["new_with_project"] = sorted({f"{f['path']}:{f['line']} {f['code']}" for f in on_f}
                                                  - {f"{f['path']}:{f['line']} {f['code']}" for f in off_f})
            cache = proj / ".stackpart_cache" / "project-v1.json"
            meta["cache_bytes"] = cache.stat().st_size if cache.exists() else None
            save(out, rows, meta)
    print(save(out, rows, meta))
    print(json.dumps(meta))
    return 0


def save(out: Path, rows: list[dict], meta: dict) -> str:
    (out / "check_project.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = ["| commit | run | wall s | result |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['commit']} | {r['run']} | {r['wall_s']} | {r['summary']} |")
    table = "\n".join(lines) + "\n"
    (out / "check_project.md").write_text(table)
    return table


if __name__ == "__main__":
    sys.exit(main())
