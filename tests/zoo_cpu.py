"""Every zoo family at tiny size, on the CPU: diagnosed, rewritten, applied, and run with the same outputs.

What a family's test checks (:func:`assert_family`): the diagnose report is complete with no rung
failed; a non-empty plan (required of the transformers families in :data:`BLOCKS`) compiles the
library's classes by import path from the harness's model function (the plan's site), the block of
:data:`BLOCKS` or the whole model; its diff touches only SRC (and its ``_stackpart/`` package),
``git apply`` takes it and gives the tree ``rewrite --apply`` wrote, and a second rewrite changes
nothing; an empty plan leaves the tree byte for byte; the rewritten model gives the original's
outputs with the compile live (Dynamo graphs, modules compiled in place). The families run with
the library's defaults (the KV cache on where the library returns one).

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
differ past float32 tolerance, and for each model the graphs Dynamo compiled and the modules compiled in
place (``module.compile()``).

timm's families (resnet50, convnext) are skipped: timm is not installed in this environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
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


def _run(module: Any, inputs: list[dict]) -> tuple[list[dict[str, Any]], int, int]:
    """Build ``module``'s model and run it on each input set: per input, {path: tensor} of its output;
    the graphs Dynamo compiled (``counters["stats"]["unique_graphs"]``); and the model's submodules
    compiled in place (``module.compile()``, which sets ``_compiled_call_impl``)."""
    import torch
    from torch._dynamo.utils import counters

    model = module.build_model()
    outs = []
    with torch.no_grad(), torch.compiler.set_stance("default", force_backend="eager"):
        for kw in inputs:
            out = model(**{k: v.clone() for k, v in kw.items()})
            outs.append({p: t.detach().clone() for p, t in leaves(out)})
    compiled = sum(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())
    return outs, int(counters["stats"].get("unique_graphs", 0)), compiled


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
    ref, orig_graphs, orig_compiled = _run(orig, inputs)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    sys.path.insert(0, str(new_dir))
    got, new_graphs, new_compiled = _run(_load("harness", new_dir / "harness.py"), inputs)
    res: dict[str, Any] = {"orig_graphs": orig_graphs, "new_graphs": new_graphs, "orig_compiled": orig_compiled,
                           "new_compiled": new_compiled, "leaves": 0,
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


#: The repeated block each transformers family's plan compiles (or the whole model, ``strategy: whole``):
#: the decoder/encoder layer class, by import path.
BLOCKS = {
    "llama": "transformers.models.llama.modeling_llama:LlamaDecoderLayer",
    "mixtral": "transformers.models.mixtral.modeling_mixtral:MixtralDecoderLayer",
    "gpt2": "transformers.models.gpt2.modeling_gpt2:GPT2Block",
    "vit": "transformers.models.vit.modeling_vit:ViTLayer",
}

#: A line of the search's pruned list a family's report must hold: Llama's sequence length varies between
#: its smoke shapes, and the rotary ``(cos, sin)`` tuple a decoder layer takes cannot be marked dynamic at
#: the block, which the search says rather than leaving silent.
PRUNED = {"llama": "per-block+mark_dynamic: block input position_embeddings[0] dim 1"}


def assert_report(name: str, report: dict[str, Any]) -> None:
    """The diagnose report of family ``name``: complete, no rung failed with an error, and the search's
    pruned list holds :data:`PRUNED`'s line where the family has one."""
    assert report.get("complete") is True, f"{name}: the report is not complete: {report.get('notes')}"
    failed = {r["name"]: r.get("reason") for r in report.get("rungs") or [] if r.get("status") == "error"}
    assert not failed, f"{name}: rungs failed: {failed}"
    if name in PRUNED:
        search = next(r for r in report["rungs"] if r["name"] == "search")
        pruned = (search.get("measurement") or {}).get("pruned") or []
        assert any(p.startswith(PRUNED[name]) for p in pruned), f"{name}: no pruned {PRUNED[name]!r}: {pruned}"


def assert_plan_rewrites(name: str, work: Path, applied: dict[str, bytes]) -> None:
    """The plan at ``work/plan.yaml`` (non-empty) targets the library's classes by import path, applied
    from the harness's model function (the plan's site); :func:`rewriter.rewrite.transform.plan_rewrite`
    of the original tree ``work/src`` changes only files under SRC (its ``_stackpart/`` package
    included), its diff is taken by ``git apply`` on a repository of that tree and gives the tree
    ``rewrite --apply`` wrote (``applied``), and a second rewrite of the applied tree changes nothing."""
    from rewriter.plan import LIBRARY_TARGET_RE, load_plan
    from rewriter.rewrite.transform import plan_rewrite

    loaded = load_plan(work / "plan.yaml")
    actions = loaded.plan.actions
    assert loaded.plan.site == "harness.py::build_model", f"{name}: site {loaded.plan.site!r}"
    compiles = [a for a in actions if a.action == "compile"]
    assert all(LIBRARY_TARGET_RE.match(a.target) for a in compiles), f"{name}: a compile target not by import path: {compiles}"
    if name in BLOCKS:
        assert any(a.target == BLOCKS[name] or a.strategy == "whole" for a in compiles), f"{name}: {compiles}"
    src = work / "src"
    result = plan_rewrite(loaded, src)
    changed = sorted(c.relpath for c in result.changes)
    assert "harness.py" in changed, f"{name}: the site's file is not rewritten: {changed}"
    outside = [c for c in changed if not ((src / c).resolve().is_relative_to(src.resolve()) or c.startswith("_stackpart/"))]
    assert not outside, f"{name}: the rewrite changes files outside SRC: {outside}"
    repo = work / "git_src"
    shutil.copytree(src, repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    patch = work / "plan.diff"
    patch.write_text(result.diff())
    subprocess.run(["git", "-C", str(repo), "apply", "--check", str(patch)], check=True)
    subprocess.run(["git", "-C", str(repo), "apply", str(patch)], check=True)
    shutil.rmtree(repo / ".git")
    assert tree(repo) == applied, f"{name}: git apply of the diff and rewrite --apply wrote different trees"
    assert plan_rewrite(loaded, work / "plan_src").changes == [], f"{name}: a second rewrite of the applied tree changes it"


def check_family(name: str, work: Path) -> dict[str, Any]:
    """Diagnose family ``name`` at its ``--smoke`` size (:func:`assert_report` on its report), apply the
    plan (:func:`assert_plan_rewrites` where it has actions), and compare the rewritten model's outputs
    with the original's at every smoke shape; AssertionError with the CLI's output on a failure.
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
    report = json.loads((work / "report" / "report.json").read_text())
    assert_report(name, report)
    secs = plan["where_the_seconds_went"]  # what the zoo records of where diagnose's seconds went
    assert {"graph_breaks", "recompiles", "search"} <= set(secs["rungs_s"]), secs
    assert {"build", "first_calls", "reference_extras"} <= set(secs["as_is_phases_s"] or {}), secs
    search = next((r.get("verdict") or r.get("reason") for r in report.get("rungs") or [] if r.get("name") == "search"), None)
    after = tree(work / "plan_src")
    # a plan, not `actions: []`, for these transformers families at smoke size on the CPU; except where the
    # ladder pruned every compile as GEMM-dominated and not launch-bound: both shares are CPU timings
    # (the profile's op mix, batch scaling's fixed share), which a loaded CI host moves across that line
    timed_out_of_it = any("pruned every compile: GEMM-dominated" in n for n in report.get("notes") or [])
    if name in BLOCKS and not timed_out_of_it:
        assert plan["actions"], f"{name}: an empty plan; the search said {search!r}; notes {report.get('notes')}"
    if not plan["actions"]:
        assert after == before, f"{name}: an empty plan changed the tree: {sorted(set(after) ^ set(before))}"
    else:
        assert after != before, f"{name}: {len(plan['actions'])} action(s) applied and no file changed"
        assert_plan_rewrites(name, work, after)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, str(work / "src"), str(work / "plan_src"), json.dumps(shapes)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=work)
    assert proc.returncode == 0, f"{name}: the models did not run (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"actions": plan["actions"], "search": search, "diagnose_rewrite_s": t1 - t0, "compare_s": time.perf_counter() - t1, **res}


def assert_family(name: str, work: Path) -> None:
    """The test of one family (test_zoo_cpu_a/b/c.py): :func:`check_family`, then the rewritten model gives
    the original's outputs, every floating leaf (the KV cache's too) within float32 tolerance, at every
    smoke shape; a compile action did compile (Dynamo graphs > 0, a module compiled in place). Skipped,
    with the reason, where the family's package is not installed (timm here)."""
    import pytest

    lib = missing_package(name)
    if lib:
        pytest.skip(f"{name}: {lib} is not installed here, so the family cannot load")
    res = check_family(name, work)
    print(json.dumps({"family": name, **res}))  # the per-family figures, with pytest -s
    assert res["leaves"] > 0 and res["float_leaves"] > 0, f"{name}: no tensor in the outputs: {res}"
    assert res["differ"] == [], f"{name}: the rewritten model's outputs differ: {res['differ']}"
    assert res["orig_graphs"] == 0 and res["orig_compiled"] == 0, f"{name}: the original model compiled: {res}"
    if any(a.get("action") == "compile" for a in res["actions"]):
        assert res["new_graphs"] > 0, f"{name}: the plan compiles {res['actions']} and Dynamo compiled no graph"
        assert res["new_compiled"] > 0, f"{name}: the plan compiles {res['actions']} and no module was compiled"


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]))))
