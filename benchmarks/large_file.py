"""Cost on one large file (issue 16, item 9): ``rewrite`` with K actions on a 10,000-function file,
and ``check`` on that 50,000-line file against CPython's ``ast.parse`` of it.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/large_file.py [--actions 2000,10000] [--reps 3]

The file: ``import torch``, 10,000 functions ``f{i}(x)`` of three lines each, and one
``torch.compile(f0)`` at the end (50,004 lines). The plan: K actions, alternating ``compile`` and
``mark_dynamic`` on ``f0 .. f{K-1}``. Times are in-process (``plan_rewrite`` plus the diff; the
check's ``check_files`` with all rules, one process), best of ``--reps``; the interpreter's own
start is left out of both sides. ``--table N`` adds ``check`` on a generated data table: N
lines ``v{i} = {i}`` below one compiled class whose ``forward`` calls ``.item()`` (the one finding
expected). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
import time
from pathlib import Path


def make_tree(root: Path, functions: int, actions: int) -> tuple[Path, Path]:
    """Write ``root/src/big.py`` and ``root/plan.yaml``; return (src, plan)."""
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    lines = ["import torch\n\n\n"]
    lines += [f"def f{i}(x):\n    y = x + {i}\n    return y\n\n\n" for i in range(functions)]
    lines.append("g = torch.compile(f0)\n")
    (src / "big.py").write_text("".join(lines))
    plan = ["version: 1\nactions:\n"]
    for i in range(actions):
        if i % 2 == 0:
            plan.append(f"  - action: compile\n    target: big.py::f{i}\n    options: {{backend: eager}}\n")
        else:
            plan.append(f"  - action: mark_dynamic\n    target: big.py::f{i}\n    arg: x\n    dim: 0\n")
    (root / "plan.yaml").write_text("".join(plan))
    return src, root / "plan.yaml"


def best(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--functions", type=int, default=10_000)
    ap.add_argument("--actions", default="2000,10000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--table", type=int, default=400_000, help="lines of the data-table file (0: skip it)")
    args = ap.parse_args(argv)

    import libcst
    import torch

    from rewriter.check.rules import ALL_RULES
    from rewriter.check.runner import check_files
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite

    out: dict[str, object] = {"python": sys.version.split()[0], "torch": torch.__version__,
                              "libcst": getattr(libcst, "__version__", None) or _version("libcst"),
                              "functions": args.functions, "rewrite": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in [int(x) for x in args.actions.split(",") if x]:
            src, plan = make_tree(root / f"k{k}", args.functions, k)
            loaded = load_plan(plan)
            result: dict[str, object] = {}

            def run() -> None:
                result["diff"] = plan_rewrite(loaded, src).diff()

            seconds = best(run, max(1, args.reps if k <= 2000 else 1))
            diff = str(result["diff"])
            added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
            removed = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
            out["rewrite"].append({"actions": k, "seconds": round(seconds, 2), "ms_per_action": round(1e3 * seconds / k, 2),
                                   "lines_added": added, "lines_removed": removed})
        src, _ = make_tree(root / "check", args.functions, 0)
        big = src / "big.py"
        text = big.read_text()
        out["lines"] = text.count("\n")
        t_ast = best(lambda: ast.parse(text), args.reps)
        t_check = best(lambda: check_files([str(big)], ALL_RULES, jobs=1), args.reps)
        out["check"] = {"ast_parse_s": round(t_ast, 3), "check_s": round(t_check, 3), "ratio": round(t_check / t_ast, 2)}
        if args.table:
            table = root / "table.py"
            table.write_text("import torch\n\n\nclass M(torch.nn.Module):\n    @torch.compile\n    def forward(self, x):\n"
                             "        return x.item()\n\n\n" + "".join(f"v{i} = {i}\n" for i in range(args.table)))
            found: list = []
            t_ast = best(lambda: ast.parse(table.read_text()), 1)
            t_check = best(lambda: found.append(check_files([str(table)], ALL_RULES, jobs=1)), 1)
            findings = [f.code for r in found[-1] for f in r.findings]
            out["table"] = {"lines": args.table + 9, "bytes": table.stat().st_size, "ast_parse_s": round(t_ast, 3),
                            "check_s": round(t_check, 3), "findings": findings}
    print(json.dumps(out, indent=2))
    return 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
