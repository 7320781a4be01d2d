"""Benchmark the Triton kernel catalog (kernels/) on one GPU: bandwidth against copy, eager, compile.

Run from the repository root on a machine with one CUDA GPU::

    OUT=/tmp/out python benchmarks/kernels.py            # about 3 minutes on an H200

For each op the script times (``triton.testing.do_bench``, median of its repetitions, caches
flushed between runs): the catalog kernel through its launch helper, torch eager, and
``torch.compile``'s own kernel for the same function (Inductor, ``fullgraph=True``). Bandwidth is
the bytes the op must move (read x, write y, read the weights; top-k: read the row) over the
median time, compared with the copy bandwidth (``y.copy_(x)`` on 1 GiB) measured in the same run.
Goals (issue #5): softmax, RMSNorm and LayerNorm forward at >= 80% of copy bandwidth on large
rows and no slower than torch.compile; top-k faster than torch.topk at B=64, V=131072, k=50.

It also renders the four custom ops into a scratch tree with ``stackpart rewrite --unsafe``
(``torch.library.triton_op`` + ``wrap_triton`` on this torch), checks them against the original
ops on the GPU, and compiles a function calling all of them with ``fullgraph=True`` (a graph
break raises) on two batch sizes with ``dynamic=True``, counting recompiles.

Writes ``$OUT/kernels.json`` and ``$OUT/kernels.md``. Every case is independent: a failure is
recorded in both files and the rest still run. ``--quick`` shrinks sizes for a smoke run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def load_kernel(name: str):
    """Import kernels/<name>.py (not a package: kernels/ is data the rewriter vendors)."""
    spec = importlib.util.spec_from_file_location(f"catalog_{name}", ROOT / "kernels" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def bench(fn) -> float:
    """Median milliseconds of ``fn()`` (triton.testing.do_bench: CUDA events, L2 flushed)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def bench_graph(fn) -> float | None:
    """Median ms of ``fn()`` replayed from a CUDA graph (no CPU launch cost), or None if capture fails."""
    from triton.testing import do_bench_cudagraph

    try:
        return float(do_bench_cudagraph(fn, rep=100, return_mode="median"))
    except Exception as exc:  # capture refused: report the eager-launch time only
        print(f"cuda graph capture failed: {exc}", file=sys.stderr)
        return None


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """GB/s of ``dst.copy_(src)`` on ``nbytes`` (read + write counted)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return gbps(2 * nbytes, ms)


def compiled(fn):
    """``torch.compile(fn, fullgraph=True)`` with static shapes: Inductor's kernel for the op."""
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, dynamic=False)


def row(op, shape, dtype, nbytes, times, copy_gbs, error, note=""):
    """One result row; times is {variant: ms}."""
    out = {
        "op": op,
        "shape": list(shape),
        "dtype": str(dtype).replace("torch.", ""),
        "bytes": nbytes,
        "ms": times,
        "GBps": {k: gbps(nbytes, v) for k, v in times.items()},
        "copy_GBps": copy_gbs,
        "max_abs_error": error,
        "note": note,
    }
    out["kernel_pct_of_copy"] = 100.0 * out["GBps"]["kernel"] / copy_gbs
    if "compile" in times:
        out["kernel_vs_compile"] = times["compile"] / times["kernel"]
    out["kernel_vs_eager"] = times["eager"] / times["kernel"]
    return out


def case_softmax(shape, dtype, copy_gbs):
    k = load_kernel("softmax")
    x = torch.randn(shape, device="cuda", dtype=dtype)
    ref = torch.softmax(x, dim=-1)
    err = (k.launch(x).float() - ref.float()).abs().max().item()
    fc = compiled(lambda t: torch.softmax(t, dim=-1))
    fc(x)
    times = {
        "kernel": bench(lambda: k.launch(x)),
        "eager": bench(lambda: torch.softmax(x, dim=-1)),
        "compile": bench(lambda: fc(x)),
    }
    nbytes = 2 * x.numel() * x.element_size()
    one_tile = k.next_power_of_2(shape[-1]) <= k.MAX_TILE
    return row("softmax fwd", shape, dtype, nbytes, times, copy_gbs, err,
               "row in registers" if one_tile else "online loop (row > MAX_TILE)")


def case_softmax_backward(shape, dtype, copy_gbs):
    """Backward softmax from the saved output: kernel vs eager autograd vs compiled autograd."""
    k = load_kernel("softmax")
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    xr = x.clone().requires_grad_()
    y = torch.softmax(xr, dim=-1)
    (gx,) = torch.autograd.grad(y, xr, dy, retain_graph=True)
    yk = k.launch(x)
    err = (k.launch_backward(dy, yk).float() - gx.float()).abs().max().item()
    fc = compiled(lambda t: torch.softmax(t, dim=-1))
    yc = fc(xr)
    times = {
        "kernel": bench(lambda: k.launch_backward(dy, yk)),
        "eager": bench(lambda: torch.autograd.grad(y, xr, dy, retain_graph=True)),
        "compile": bench(lambda: torch.autograd.grad(yc, xr, dy, retain_graph=True)),
    }
    nbytes = 3 * x.numel() * x.element_size()
    return row("softmax bwd", shape, dtype, nbytes, times, copy_gbs, err)


def case_rms_norm(shape, dtype, copy_gbs):
    k = load_kernel("rms_norm")
    N = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(N, device="cuda", dtype=dtype)
    F = torch.nn.functional
    ref = F.rms_norm(x, (N,), w, 1e-6)
    err = (k.launch(x, w, 1e-6)[0].float() - ref.float()).abs().max().item()
    fc = compiled(lambda t, ww: F.rms_norm(t, (N,), ww, 1e-6))
    fc(x, w)
    times = {
        "kernel": bench(lambda: k.launch(x, w, 1e-6)),
        "eager": bench(lambda: F.rms_norm(x, (N,), w, 1e-6)),
        "compile": bench(lambda: fc(x, w)),
    }
    nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
    return row("rms_norm fwd", shape, dtype, nbytes, times, copy_gbs, err)


def case_layer_norm(shape, dtype, copy_gbs):
    k = load_kernel("layer_norm")
    N = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(N, device="cuda", dtype=dtype)
    b = torch.randn(N, device="cuda", dtype=dtype)
    F = torch.nn.functional
    ref = F.layer_norm(x, (N,), w, b, 1e-5)
    err = (k.launch(x, w, b, 1e-5)[0].float() - ref.float()).abs().max().item()
    fc = compiled(lambda t, ww, bb: F.layer_norm(t, (N,), ww, bb, 1e-5))
    fc(x, w, b)
    times = {
        "kernel": bench(lambda: k.launch(x, w, b, 1e-5)),
        "eager": bench(lambda: F.layer_norm(x, (N,), w, b, 1e-5)),
        "compile": bench(lambda: fc(x, w, b)),
    }
    nbytes = 2 * x.numel() * x.element_size() + 2 * N * w.element_size()
    return row("layer_norm fwd", shape, dtype, nbytes, times, copy_gbs, err)


def case_norm_backward(name, shape, dtype, copy_gbs):
    """Backward of RMSNorm or LayerNorm: kernel vs eager autograd vs compiled autograd."""
    k = load_kernel(name)
    N = shape[-1]
    F = torch.nn.functional
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(N, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    if name == "rms_norm":
        def fwd(t, ww):
            return F.rms_norm(t, (N,), ww, 1e-6)
        _, rstd = k.launch(x, w, 1e-6)
        kern = lambda: k.launch_backward(dy, x, w, rstd)  # noqa: E731
    else:
        def fwd(t, ww):
            return F.layer_norm(t, (N,), ww, None, 1e-5)
        _, mean, rstd = k.launch(x, w, None, 1e-5)
        kern = lambda: k.launch_backward(dy, x, w, None, mean, rstd)  # noqa: E731
    y = fwd(xr, wr)
    gx, gw = torch.autograd.grad(y, (xr, wr), dy, retain_graph=True)
    out = kern()
    err = max((out[0].float() - gx.float()).abs().max().item(),
              (out[1].float() - gw.float()).abs().max().item() / max(1.0, shape[0] ** 0.5))
    fc = compiled(fwd)
    yc = fc(xr, wr)
    times = {
        "kernel": bench(kern),
        "eager": bench(lambda: torch.autograd.grad(y, (xr, wr), dy, retain_graph=True)),
        "compile": bench(lambda: torch.autograd.grad(yc, (xr, wr), dy, retain_graph=True)),
    }
    nbytes = 3 * x.numel() * x.element_size() + 2 * N * w.element_size()
    return row(f"{name} bwd", shape, dtype, nbytes, times, copy_gbs, err,
               "dw error scaled by 1/sqrt(rows)")


def case_topk(B, V, kk, dtype, copy_gbs, chunks=(2048, 4096, 8192, 16384)):
    k = load_kernel("topk")
    x = torch.randn(B, V, device="cuda", dtype=dtype)
    ref_v, _ = torch.topk(x, kk)
    v, i = k.launch(x, kk)
    err = (v.float() - ref_v.float()).abs().max().item()
    assert torch.equal(x.gather(-1, i), v), "indices do not point at the values"
    fc = compiled(lambda t: torch.topk(t, kk))
    fc(x)
    times = {
        "kernel": bench(lambda: k.launch(x, kk)),
        "eager": bench(lambda: torch.topk(x, kk)),
        "compile": bench(lambda: fc(x)),
    }
    sweep = {}
    for c in chunks:
        if c < V:
            sweep[str(c)] = bench(lambda c=c: k.launch(x, kk, chunk=c))
    nbytes = x.numel() * x.element_size()
    out = row(f"topk k={kk}", (B, V), dtype, nbytes, times, copy_gbs, err,
              f"default chunk {k.CHUNK}")
    out["chunk_sweep_ms"] = sweep
    # GPU time alone: at ~20-50 us per call the Python launch helper (2 launches + allocations)
    # can bound the eager-launch number above; a CUDA-graph replay removes the CPU side.
    out["ms_cuda_graph"] = {
        "kernel": bench_graph(lambda: k.launch(x, kk)),
        "eager": bench_graph(lambda: torch.topk(x, kk)),
    }
    return out


MODEL = '''
import torch
import torch.nn.functional as F


def step(x, w, b, logits, k: int):
    h = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    h = F.rms_norm(h, (h.shape[-1],), w, 1e-6)
    p = F.softmax(h, dim=-1)
    values, indices = torch.topk(logits, k)
    return p, values, indices
'''

PLAN = '''
version: 1
actions:
  - {action: kernel, target: model.py::step, call: torch.topk, kernel: topk}
  - {action: kernel, target: model.py::step, call: F.softmax, kernel: softmax}
  - {action: kernel, target: model.py::step, call: F.rms_norm, kernel: rms_norm}
  - {action: kernel, target: model.py::step, call: F.layer_norm, kernel: layer_norm}
'''


def case_generated_ops(device="cuda"):
    """Render the four custom ops with the rewriter, check them on ``device`` and under compile."""
    sys.path.insert(0, str(ROOT))
    from rewriter.plan import load_plan
    from rewriter.rewrite.apply import apply_changes
    from rewriter.rewrite.transform import plan_rewrite

    work = Path(tempfile.mkdtemp(prefix="stackpart_kernels_"))
    src = work / "gentree"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "model.py").write_text(textwrap.dedent(MODEL))
    (work / "plan.yaml").write_text(textwrap.dedent(PLAN))
    result = plan_rewrite(load_plan(str(work / "plan.yaml")), src, unsafe=True)
    apply_changes(src, result.changes)
    sys.path.insert(0, str(work))
    import gentree.model as rewritten  # noqa: E402
    from gentree._stackpart import kernel_topk  # noqa: E402

    original_src = textwrap.dedent(MODEL)
    original = {}
    exec(compile(original_src, "original_model.py", "exec"), original)

    out = {"triton_op": bool(kernel_topk._TRITON_OP), "notes": result.warnings}
    torch.manual_seed(0)
    results = []
    for rows in (96, 200):
        x = torch.randn(rows, 4096, device=device, dtype=torch.bfloat16)
        w = torch.randn(4096, device=device, dtype=torch.bfloat16)
        b = torch.randn(4096, device=device, dtype=torch.bfloat16)
        logits = torch.randn(rows, 131072, device=device, dtype=torch.float32)
        with torch.no_grad():
            got = rewritten.step(x, w, b, logits, 50)
            want = original["step"](x, w, b, logits, 50)
        results.append({
            "rows": rows,
            "softmax_max_abs_error": (got[0].float() - want[0].float()).abs().max().item(),
            "topk_values_equal": bool(torch.equal(got[1], want[1])),
        })
    out["eager"] = results
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fc = torch.compile(rewritten.step, fullgraph=True, dynamic=True)
    compiled_ok = []
    with torch.no_grad():
        for rows in (96, 200):
            x = torch.randn(rows, 4096, device=device, dtype=torch.bfloat16)
            w = torch.ones(4096, device=device, dtype=torch.bfloat16)
            logits = torch.randn(rows, 131072, device=device, dtype=torch.float32)
            got = fc(x, w, w, logits, 50)
            want = original["step"](x, w, w, logits, 50)
            compiled_ok.append(bool(torch.equal(got[1], want[1])))
    out["compiled_fullgraph_topk_equal"] = compiled_ok
    out["graph_breaks"] = sum(counters["graph_break"].values())
    out["frames_compiled"] = counters["stats"]["unique_graphs"]
    if device == "cuda":
        # What a user's call costs: the custom op (dispatch + launch helper + 2 kernels) in eager
        # and inside a compiled region, against torch.topk, at B=64, V=131072, k=50.
        logits = torch.randn(64, 131072, device=device)
        torch._dynamo.reset()
        op_compiled = torch.compile(lambda t: kernel_topk.triton_topk(t, 50), fullgraph=True)
        ref_compiled = torch.compile(lambda t: torch.topk(t, 50), fullgraph=True)
        with torch.no_grad():
            op_compiled(logits)
            ref_compiled(logits)
            out["topk_op_ms"] = {
                "custom_op_eager": bench(lambda: kernel_topk.triton_topk(logits, 50)),
                "torch_topk_eager": bench(lambda: torch.topk(logits, 50)),
                "custom_op_compiled": bench(lambda: op_compiled(logits)),
                "torch_topk_compiled": bench(lambda: ref_compiled(logits)),
            }
    shutil.rmtree(work, ignore_errors=True)
    return out


def markdown(report) -> str:
    lines = [
        "# Triton kernel catalog on " + report["gpu"],
        "",
        f"{report['date']}, torch {report['torch']}, triton {report['triton']}; copy bandwidth "
        f"measured in this run: **{report['copy_GBps']:.0f} GB/s** (read + write of 1 GiB).",
        "Bandwidth = bytes the op must move / median time (triton.testing.do_bench).",
        "",
        "| op | shape | dtype | kernel ms | eager ms | compile ms | kernel GB/s | % of copy | "
        "vs eager | vs compile | max abs err | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["cases"]:
        if "error" in r:
            lines.append(f"| {r['case']} | | | | | | | | | | | FAILED: {r['error']} |")
            continue
        ms = r["ms"]
        lines.append(
            f"| {r['op']} | {'x'.join(map(str, r['shape']))} | {r['dtype']} | {ms['kernel']:.4f} | "
            f"{ms['eager']:.4f} | {ms.get('compile', float('nan')):.4f} | "
            f"{r['GBps']['kernel']:.0f} | {r['kernel_pct_of_copy']:.0f}% | "
            f"{r['kernel_vs_eager']:.2f}x | {r.get('kernel_vs_compile', float('nan')):.2f}x | "
            f"{r['max_abs_error']:.2e} | {r['note']} |"
        )
    sweeps = [r for r in report["cases"] if "chunk_sweep_ms" in r]
    for r in sweeps:
        graph = r.get("ms_cuda_graph", {})
        lines += ["", f"top-k {'x'.join(map(str, r['shape']))} {r['dtype']}: stage-1 chunk sweep "
                  + ", ".join(f"{c}: {t:.4f} ms" for c, t in r["chunk_sweep_ms"].items())
                  + "; CUDA-graph replay (GPU time only): kernel "
                  + (f"{graph['kernel']:.4f}" if graph.get("kernel") else "n/a") + " ms, torch.topk "
                  + (f"{graph['eager']:.4f}" if graph.get("eager") else "n/a") + " ms"]
    g = report.get("generated_ops")
    if g:
        lines += ["", "## Generated custom ops (stackpart rewrite --unsafe)", "",
                  "```", json.dumps(g, indent=2), "```"]
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="only the generated-ops check, on CPU (reference path): no timings")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        print(json.dumps(case_generated_ops("cpu"), indent=2))
        return 0
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    out_dir = Path(os.environ.get("OUT", "bench_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    scale = 8 if args.quick else 1
    copy_gbs = copy_bandwidth((1 << 30) // scale)
    report = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_GBps": copy_gbs,
        "cases": [],
    }
    bf16, f32 = torch.bfloat16, torch.float32
    cases = [
        ("softmax", lambda: case_softmax((8192 // scale, 32768), bf16, copy_gbs)),
        ("softmax", lambda: case_softmax((4096 // scale, 32768), f32, copy_gbs)),
        ("softmax", lambda: case_softmax((1024 // scale, 131072), bf16, copy_gbs)),
        ("softmax", lambda: case_softmax((512 // scale, 262144), f32, copy_gbs)),
        ("rms_norm", lambda: case_rms_norm((32768 // scale, 4096), bf16, copy_gbs)),
        ("rms_norm", lambda: case_rms_norm((16384 // scale, 8192), bf16, copy_gbs)),
        ("rms_norm", lambda: case_rms_norm((16384 // scale, 8192), f32, copy_gbs)),
        ("layer_norm", lambda: case_layer_norm((32768 // scale, 4096), bf16, copy_gbs)),
        ("layer_norm", lambda: case_layer_norm((16384 // scale, 8192), bf16, copy_gbs)),
        ("layer_norm", lambda: case_layer_norm((16384 // scale, 8192), f32, copy_gbs)),
        ("softmax bwd", lambda: case_softmax_backward((8192 // scale, 32768), bf16, copy_gbs)),
        ("rms_norm bwd", lambda: case_norm_backward("rms_norm", (16384 // scale, 4096), bf16, copy_gbs)),
        ("layer_norm bwd", lambda: case_norm_backward("layer_norm", (16384 // scale, 4096), bf16, copy_gbs)),
        ("topk", lambda: case_topk(64, 131072, 50, f32, copy_gbs)),
        ("topk", lambda: case_topk(64, 131072, 50, bf16, copy_gbs)),
        ("topk", lambda: case_topk(8, 131072, 50, f32, copy_gbs)),
        ("topk", lambda: case_topk(64, 32768, 256, f32, copy_gbs)),
    ]
    for name, fn in cases:
        try:
            report["cases"].append(fn())
        except Exception as exc:  # recorded, and the other cases still run
            traceback.print_exc()
            report["cases"].append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(json.dumps(report["cases"][-1])[:400], flush=True)
        torch.cuda.empty_cache()
    try:
        report["generated_ops"] = case_generated_ops()
    except Exception as exc:
        traceback.print_exc()
        report["generated_ops"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    report["wall_s"] = time.time() - started
    (out_dir / "kernels.json").write_text(json.dumps(report, indent=2))
    (out_dir / "kernels.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
