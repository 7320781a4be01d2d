"""Every zoo family at tiny size, on the CPU: diagnosed, rewritten, applied, and run with the same outputs.

The families, their tiny configs and shapes are benchmarks/zoo.py's ``--smoke`` ones, imported,
not copied. ``stackpart diagnose`` (the family's smoke shapes) and ``stackpart rewrite --apply`` run
through zoo.py's ``run_plan`` with the cheap knobs of :data:`KNOBS`, each command through
``rewriter.cli.main`` in the test's own process (:func:`cli_in_process`: torch and the family's
library are imported once, not by two more interpreters a family); the search's measurement
children and the comparison worker are processes of their own, as for a user. On the CPU the
search forces the ``eager`` backend on every compile.

Shared by test_zoo_cpu_a.py, _b.py and _c.py: one family costs about 45 s of CPU time (the three of
test_zoo_cpu_b.py took 134 s, user + system, alone on a shared 2-core machine), most of it the search's
measurement children and the comparison worker, so the families are split between :data:`PARTS`
files of about 2-3 minutes each on one core, which pytest-xdist's workers share (``--dist loadfile``).

Run as a script, this file is the comparison worker (one process, so that a plan's patches of
library classes cannot reach the pytest process): ``python zoo_cpu.py ORIG NEW SHAPES`` imports
the original harness from ORIG, builds its model and runs every shape, then imports the rewritten
harness from NEW (its ``_stackpart`` package next to it), builds that model and runs the same
inputs with every ``torch.compile`` forced to the ``eager`` backend
(``torch.compiler.set_stance(force_backend="eager")``: what the plan compiles is traced by Dynamo
and run as its FX graph, no Inductor compile), and prints one JSON line: the floating leaves
compared (the KV cache's tensors included), the largest absolute difference, the leaves that
differ past float32 tolerance, and the graphs Dynamo compiled for each model.

timm's families (resnet50, convnext) are skipped: timm is not installed in this environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: ``stackpart diagnose`` options that keep one tiny family's ladder + search to about 30 s of CPU time:
#: one profiled step, no overlapped eager run. The budget only bounds when a candidate's cold phase may
#: start (wall clock): one shorter than the search's child processes take to come up on a loaded
#: 2-core host (5 s was) leaves every candidate unmeasured and the plan empty, which tests no rewrite;
#: at this size an eager-backend candidate costs a few seconds of CPU, so 60 s lets all of them run.
KNOBS = ("--steps", "1", "--budget", "60", "--no-overlap")


def zoo():  # type: ignore[no-untyped-def]
    """benchmarks/zoo.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location("zoo_bench", ROOT / "benchmarks" / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The test files the families are split between (test_zoo_cpu_a.py, _b.py, _c.py).
PARTS = 3


def part(index: int, parts: int = PARTS) -> list[str]:
    """The families of test file ``index`` of ``parts``: every family in exactly one file (round robin
    over benchmarks/zoo.py's ``FAMILIES`` order), so a family added to the zoo is tested here too."""
    return list(zoo().FAMILIES)[index::parts]


def missing_package(name: str) -> str | None:
    """The package family ``name`` is built from when it cannot be imported here (the skip reason), else None."""
    lib = zoo().FAMILIES[name]["build"].split("=", 1)[1].strip().split(".", 1)[0]
    return None if importlib.util.find_spec(lib) is not None else lib


def leaves(x: Any, path: str = "out", depth: int = 0, seen: set[int] | None = None) -> list[tuple[str, Any]]:
    """(path, tensor) for every tensor in an output: mappings (a transformers ``ModelOutput``), sequences,
    and the attributes of other objects (a ``DynamicCache``'s layers' keys and values); modules,
    classes and callables are not entered."""
    import torch

    seen = set() if seen is None else seen
    if id(x) in seen or depth > 8:
        return []
    seen.add(id(x))
    if isinstance(x, torch.Tensor):
        return [(path, x)]
    if isinstance(x, dict):
        items = list(x.items())
    elif isinstance(x, (list, tuple)):
        items = list(enumerate(x))
    elif hasattr(x, "__dict__") and not isinstance(x, (torch.nn.Module, type)) and not callable(x):
        items = sorted(vars(x).items())
    else:
        return []
    return [leaf for k, v in items for leaf in leaves(v, f"{path}.{k}", depth + 1, seen)]


def _run(module: Any, inputs: list[dict]) -> tuple[list[dict[str, Any]], int]:
    """Build ``module``'s model and run it on each input set: per input, {path: tensor} of its output;
    and the graphs Dynamo compiled (``counters["stats"]["unique_graphs"]``)."""
    import torch
    from torch._dynamo.utils import counters

    model = module.build_model()
    outs = []
    with torch.no_grad(), torch.compiler.set_stance("default", force_backend="eager"):
        for kw in inputs:
            out = model(**{k: v.clone() for k, v in kw.items()})
            outs.append({p: t.detach().clone() for p, t in leaves(out)})
    return outs, int(counters["stats"].get("unique_graphs", 0))


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare(orig_dir: Path, new_dir: Path, shapes: list[dict]) -> dict[str, Any]:
    """The worker's result (module docstring); the original runs first, before the rewritten tree is imported."""
    import torch

    orig = _load("zoo_orig_harness", orig_dir / "harness.py")
    inputs = [orig.make_inputs(**s) for s in shapes]
    ref, orig_graphs = _run(orig, inputs)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    sys.path.insert(0, str(new_dir))
    got, new_graphs = _run(_load("harness", new_dir / "harness.py"), inputs)
    res: dict[str, Any] = {"orig_graphs": orig_graphs, "new_graphs": new_graphs, "leaves": 0,
                           "float_leaves": 0, "max_abs": 0.0, "differ": []}
    for i, (r, g) in enumerate(zip(ref, got)):
        if sorted(r) != sorted(g):
            res["differ"].append(f"shape {i}: leaves {sorted(set(r) ^ set(g))[:6]} in one output only")
        for p in sorted(set(r) & set(g)):
            a, b = r[p], g[p]
            res["leaves"] += 1
            if a.shape != b.shape or a.dtype != b.dtype:
                res["differ"].append(f"shape {i}: {p}: {tuple(b.shape)} {b.dtype} vs {tuple(a.shape)} {a.dtype}")
                continue
            if not a.is_floating_point():
                if not torch.equal(a, b):
                    res["differ"].append(f"shape {i}: {p}: integer values differ")
                continue
            res["float_leaves"] += 1
            if a.numel():
                res["max_abs"] = max(res["max_abs"], float((a - b).abs().max()))
            # float32's assert_close defaults (rtol 1.3e-6, atol 1e-5): the eager backend runs the same ops
            if not torch.allclose(b, a, rtol=1.3e-6, atol=1e-5, equal_nan=True):
                res["differ"].append(f"shape {i}: {p}: max abs difference {float((a - b).abs().max()):.3g}")
    return res


def cli_in_process(argv: list[str], env: dict, cwd: Path, timeout: float) -> tuple[int, str]:
    """``stackpart ARGV`` through ``rewriter.cli.main`` in this process, with zoo.py's signature for
    a command (its ``run_cli``): the exit code and what it printed. ``env`` (zoo.py's: the compile
    caches of this run) is this process's environment for the call, so the measurement children
    it starts inherit it as they would from a fresh process; ``cwd`` the working directory.
    ``timeout`` is left to the command's own ``--timeout`` per child (and pytest's)."""
    import contextlib
    import io

    from rewriter.cli import main

    import torch

    saved_env, saved_cwd, threads, printed = dict(os.environ), os.getcwd(), torch.get_num_threads(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    if env.get("OMP_NUM_THREADS", "").isdigit():  # what a fresh process takes from it
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = main(argv)
    finally:
        torch.set_num_threads(threads)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return code, printed.getvalue()


def tree(src: Path) -> dict[str, bytes]:
    """Every file under ``src``: relative path -> bytes."""
    return {str(p.relative_to(src)): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}


def check_family(name: str, work: Path) -> dict[str, Any]:
    """Diagnose family ``name`` at its ``--smoke`` size, apply the plan, and compare the rewritten model's
    outputs with the original's at every smoke shape; AssertionError with the CLI's output on a failure.
    Returns the plan's actions, the seconds of each phase and the worker's comparison."""
    z = zoo()
    (work / "src").mkdir(parents=True)
    (work / "src" / "harness.py").write_text(z.harness_text(name, True))
    shapes = z.shapes_of(name, True)
    before = tree(work / "src")
    t0 = time.perf_counter()
    plan = z.run_plan(work, name, "cpu", shapes, True, 300.0, knobs=KNOBS, cli=cli_in_process)
    t1 = time.perf_counter()
    assert plan["diagnose_exit"] == 0, f"{name}: diagnose exit {plan['diagnose_exit']}\n{plan.get('diagnose_tail')}"
    assert plan.get("apply_exit") == 0, f"{name}: rewrite --apply exit {plan.get('apply_exit')}\n{plan.get('apply_tail')}"
    rungs = json.loads((work / "report" / "report.json").read_text()).get("rungs") or []
    search = next((r.get("verdict") or r.get("reason") for r in rungs if r.get("name") == "search"), None)
    after = tree(work / "plan_src")
    if not plan["actions"]:
        assert after == before, f"{name}: an empty plan changed the tree: {sorted(set(after) ^ set(before))}"
    else:
        assert after != before, f"{name}: {len(plan['actions'])} action(s) applied and no file changed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, str(work / "src"), str(work / "plan_src"), json.dumps(shapes)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=work)
    assert proc.returncode == 0, f"{name}: the models did not run (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"actions": plan["actions"], "search": search, "diagnose_rewrite_s": t1 - t0, "compare_s": time.perf_counter() - t1, **res}


def assert_family(name: str, work: Path) -> None:
    """The test of one family (test_zoo_cpu_a/b/c.py): :func:`check_family`, then the rewritten model gives
    the original's outputs, every floating leaf (the KV cache's too) within float32 tolerance, at every
    smoke shape; a compile action did compile (Dynamo graphs > 0). Skipped, with the reason, where the
    family's package is not installed (timm here)."""
    import pytest

    lib = missing_package(name)
    if lib:
        pytest.skip(f"{name}: {lib} is not installed here, so the family cannot load")
    res = check_family(name, work)
    print(json.dumps({"family": name, **res}))  # the per-family figures, with pytest -s
    assert res["leaves"] > 0 and res["float_leaves"] > 0, f"{name}: no tensor in the outputs: {res}"
    assert res["differ"] == [], f"{name}: the rewritten model's outputs differ: {res['differ']}"
    assert res["orig_graphs"] == 0, f"{name}: the original model compiled {res['orig_graphs']} graph(s)"
    if any(a.get("action") == "compile" for a in res["actions"]):
        assert res["new_graphs"] > 0, f"{name}: the plan compiles {res['actions']} and Dynamo compiled no graph"


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]))))
