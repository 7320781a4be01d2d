"""A static-shape twin's cold phase with and without shape warmers (``rewriter.engine.warmers``).

Builds a zoo family's harness (``benchmarks/zoo.py``: the tiny CPU config with ``--device cpu``,
the GPU config with ``--device cuda``), writes the ``whole+static`` tree (``torch.compile(model,
dynamic=False)`` in ``build_model``) and measures it beside the program as it is with the engine
(``rewriter.engine.measure.measure``, backend Inductor, one process per variant, empty caches), once
with warmers off and once on, alternating for ``--repeat`` pairs. Prints one JSON line per run and
a summary: the twin's cold-phase wall seconds (``child_wall_s``, from its ``go`` to its last shape's
end), its compile per start (the figure the decision uses), each shape's compile seconds and which
process compiled it.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/shape_warmers.py --family unet --device cpu --repeat 2``;
on the H200: ``python benchmarks/shape_warmers.py --family unet --device cuda``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/kernels.py would shadow the ``kernels`` package transformers imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))


def _zoo():
    spec = importlib.util.spec_from_file_location("zoo", ROOT / "benchmarks" / "zoo.py")  # benchmarks/ is no package
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


def once(family: str, device: str, dtype: str, warm: bool) -> dict:
    """One measurement of the program as it is and its ``whole+static`` twin; the twin's figures."""
    from rewriter.engine.measure import Measurement, measure
    from rewriter.engine.options import Options, Variant
    from rewriter.plan import Harness

    zoo = _zoo()
    smoke = device == "cpu"
    text = zoo.harness_text(family, smoke=smoke)
    head, sep, tail = text.partition("    return model.eval()")
    assert sep, "the zoo harness's build_model ends with return model.eval()"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, body in (("original", text),
                           ("static", head + "    return torch.compile(model.eval(), dynamic=False)" + tail)):
            (work / name).mkdir()
            (work / name / "harness.py").write_text(body)
        (work / "run").mkdir()
        spec = Harness(file="harness.py", model="build_model", inputs="make_inputs", shapes=zoo.shapes_of(family, smoke),
                       device=device, dtype=dtype, mode="inference")
        variants = [Variant("eager", work / "original", judged=False),
                    Variant("whole+static", work / "static", compiles=True, warm_shapes=True)]
        m = Measurement()
        measure(spec, variants, Options(backend="inductor", replicates=1, warmup=1, reps=5, budget_s=2.0,
                                        timeout_s=900.0, warm_shapes=warm), work / "run", partial=m)
    row = m.results.get("whole+static") or {}
    return {
        "warmers": warm,
        "error": row.get("error") or "; ".join(row.get("problems") or []) or None,
        "cold_wall_s": round(row.get("child_wall_s") or 0.0, 2),
        "compile_s_per_start": round(row.get("compile_s_per_start") or 0.0, 2),
        "per_shape": [{"shape": e["shape"], "compile_s": round(e["compile_s"], 2),
                       "compiled_by": e.get("compiled_by", "itself"),
                       **({"compile_s_here": round(e["compile_s_here"], 2)} if "compile_s_here" in e else {}),
                       **({"warmer": e["warmer"]} if "warmer" in e else {})}
                      for e in row.get("per_shape_cold") or []],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="unet")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--repeat", type=int, default=1, help="pairs (off, on), alternating")
    args = ap.parse_args(argv)
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    runs = []
    for _ in range(args.repeat):
        for warm in (False, True):
            runs.append(once(args.family, args.device, dtype, warm))
            print(json.dumps(runs[-1]), flush=True)
    summary = {str(w): {k: statistics.median(r[k] for r in runs if r["warmers"] is w)
                        for k in ("cold_wall_s", "compile_s_per_start")} for w in (False, True)}
    print(json.dumps({"family": args.family, "device": args.device, "median_by_warmers": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
