"""Where the ladder's seconds go: every rung's wall seconds on one zoo family, without the search.

Builds the family's harness (``benchmarks/zoo.py``'s tiny CPU config, any key overridden with
``--config key=value``: deep and narrow keeps Dynamo's tracing, which the compile rungs pay per op,
while the arithmetic stays small), runs ``diagnose`` with ``backend="eager"`` and every rung but the
search (``stackpart diagnose --no-search``), and prints one JSON line: the setup's and each rung's
seconds and the total. Run it from two checkouts to compare a change (results in BENCHMARKS.md).

Usage: ``OMP_NUM_THREADS=1 python benchmarks/ladder_seconds.py --family t5 --config num_layers=12
--config num_decoder_layers=12 --repeat 3``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/kernels.py would shadow the ``kernels`` package transformers imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))


def _harness(family: str, overrides: dict[str, object], work: Path) -> list[dict]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo", ROOT / "benchmarks" / "zoo.py")  # benchmarks/ is no package
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    fam = zoo.FAMILIES[family]
    fam["smoke"] = {**fam["smoke"], **overrides}
    (work / "src").mkdir()
    (work / "src" / "harness.py").write_text(zoo.harness_text(family, smoke=True))
    return zoo.shapes_of(family, smoke=True)


def once(family: str, overrides: dict[str, object]) -> dict[str, float]:
    """One ``diagnose --no-search`` run: ``{<rung>: s, ..., "setup_and_reports": s, "total": s}``
    (wall seconds; the setup builds the model and runs every shape once)."""
    from rich.console import Console

    from rewriter.diagnose.rungs import ladder
    from rewriter.diagnose.runner import diagnose
    from rewriter.plan import Harness
    from rewriter.terminal import Feed

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shapes = _harness(family, overrides, work)
        spec = Harness(file="harness.py", model="build_model", inputs="make_inputs", shapes=shapes, device="cpu",
                       dtype="float32", mode="inference")
        feed = Feed(Console(file=open("/dev/null", "w")))
        t0 = time.perf_counter()
        outcome = diagnose(spec, work / "src", work / "plan.yaml", backend="eager", console=feed,
                           only={r.name for r in ladder()}, report_dir=work / "report")
        total = time.perf_counter() - t0
    seconds = {r.name: r.seconds for r in outcome.rungs}
    seconds["setup_and_reports"] = total - sum(seconds.values())
    seconds["total"] = total
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="t5")
    ap.add_argument("--config", action="append", default=[], help="key=value over the family's tiny config")
    ap.add_argument("--repeat", type=int, default=1, help="runs; the medians are printed")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.config:
        key, _, value = item.partition("=")
        if not re.fullmatch(r"\w+", key):
            ap.error(f"--config {item!r}: expected key=value")
        overrides[key] = ast.literal_eval(value)
    runs = [once(args.family, overrides) for _ in range(args.repeat)]
    keys = [k for k in runs[0] if all(r.get(k) is not None for r in runs)]
    print(json.dumps({"family": args.family, "config": overrides, "runs": len(runs),
                      "median_s": {k: round(statistics.median(r[k] for r in runs), 2) for k in keys},
                      "each_s": [{k: round(r[k], 2) for k in keys} for r in runs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
