"""Why a zoo family's whole-model compile traces SDPA's math path where its blocks keep a fused
kernel: the arguments each ``scaled_dot_product_attention`` call gets in the Dynamo graph, and
what PyTorch's own eligibility checks say of each fused backend for those arguments.

``benchmarks/attention_path.py`` records which attention op AOTAutograd traces per way of
compiling; this probe records the reason. For each family and way of compiling (``whole``:
``torch.compile(model)``; ``block``: each repeated block compiled, :data:`zoo.BLOCKS`), a
recording backend walks the Dynamo graph before AOTAutograd and, for every SDPA node, keeps its
inputs' shape, strides, dtype, ``requires_grad`` and the call's keyword arguments; then it builds
real tensors of those layouts and asks ``torch.backends.cuda.can_use_flash_attention``,
``can_use_efficient_attention`` and ``can_use_cudnn_attention`` with ``debug=True`` (their
warnings name the failed check; see ``torch/backends/cuda/__init__.py``). Last, the whole compile
runs once more under ``torch.nn.attention.sdpa_kernel`` without the math backend: the error, or
its step time per shape beside the plain whole compile's and eager's (20 steps, CUDA events), says whether fused
attention is reachable from the whole graph and what it is worth.

On the GPU machine: ``OUT=$OUT python3 benchmarks/sdpa_choice.py --only bert,vit,t5``; writes
``$OUT/sdpa_choice.json``. CPU smoke: ``OUT=/tmp/o python benchmarks/sdpa_choice.py --smoke --only vit``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE))
from attention_path import harness, probe_main, zoo  # noqa: E402  (benchmarks/attention_path.py, loaded from its folder)

sys.path.pop(0)


def _layout(v) -> dict:
    """Shape, strides, dtype and grad flag of a FakeTensor (or the repr of a non-tensor argument)."""
    import torch

    if not isinstance(v, torch.Tensor):
        return {"value": repr(v)[:60]}
    return {"shape": list(v.shape), "stride": list(v.stride()), "dtype": str(v.dtype),
            "requires_grad": bool(v.requires_grad), "offset": int(v.storage_offset())}


def _real(layout: dict, device: str):
    """A real tensor with the recorded layout (zeros; eligibility reads layout only)."""
    import torch

    if "shape" not in layout:
        return None
    dtype = getattr(torch, layout["dtype"].split(".")[-1])
    size = 1 + sum((s - 1) * st for s, st in zip(layout["shape"], layout["stride"])) + layout["offset"]
    base = torch.zeros(size, dtype=dtype, device=device)
    return base.as_strided(layout["shape"], layout["stride"], layout["offset"]).requires_grad_(layout["requires_grad"])


def eligibility(call: dict, device: str) -> dict:
    """PyTorch's verdict per fused backend for one recorded SDPA call, with the warnings that name
    each failed check."""
    import torch
    from torch.backends import cuda

    q, k, v = (_real(call["args"][i], device) for i in range(3))
    mask = _real(call.get("attn_mask", {}), device) if call.get("attn_mask") else None
    kw = call.get("kwargs", {})
    out = {}
    for name in ("flash", "efficient", "cudnn"):
        fn = getattr(cuda, f"can_use_{name}_attention", None)
        if fn is None:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                params = cuda.SDPAParams(q, k, v, mask, float(kw.get("dropout_p", 0.0)),
                                         bool(kw.get("is_causal", False)), bool(kw.get("enable_gqa", False)))
                ok = bool(fn(params, True))
            except Exception as exc:  # a probe: record it
                ok = f"{type(exc).__name__}: {exc}"[:200]
        out[name] = {"ok": ok, "why": [str(w.message)[:300] for w in caught]}
    return out


def recording_backend(calls: list[dict]):
    """A backend that records every SDPA node of the Dynamo graph (:func:`_layout` of each input
    and the keyword arguments), then runs the graph as it is."""

    def backend(gm, example_inputs):
        for n in gm.graph.nodes:
            if n.op == "call_function" and "scaled_dot_product" in str(n.target):
                meta = lambda a: _layout(a.meta.get("example_value")) if hasattr(a, "meta") else _layout(a)  # noqa: E731
                kwargs = {k: (meta(a) if hasattr(a, "meta") else a) for k, a in n.kwargs.items() if k != "attn_mask"}
                mask = n.kwargs.get("attn_mask", n.args[3] if len(n.args) > 3 else None)
                calls.append({"args": [meta(a) for a in n.args[:3]], "kwargs": {
                    k: v for k, v in kwargs.items() if isinstance(v, (int, float, bool, str, type(None)))},
                    "attn_mask": meta(mask) if mask is not None else None})
        return gm.forward
    return backend


def _step_ms(fn, inputs: dict, steps: int = 20) -> float:
    """Median of ``steps`` CUDA-event timed calls, after 3 warm calls (milliseconds)."""
    import statistics

    import torch

    for _ in range(3):
        fn(**inputs)
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(**inputs)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return round(statistics.median(times), 3)


@contextlib.contextmanager
def _attention_eager(on: bool):
    """transformers' registered ``sdpa`` attention function behind ``torch.compiler.disable``
    while on: the whole compile breaks its graph around each attention call, which runs eager."""
    if not on:
        yield
        return
    import torch
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    original = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = torch.compiler.disable(original)
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = original


def probe(name: str, smoke: bool, device: str) -> dict:
    """One family: the SDPA calls per way of compiling, their eligibility, and the whole compile
    with the math backend off."""
    import torch

    dtype = torch.float32 if smoke else torch.bfloat16
    h = harness(name, smoke)
    shapes = zoo.shapes_of(name, smoke)
    feeds = [{k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
              for k, v in h.make_inputs(**s).items()} for s in shapes]
    inputs = feeds[0]
    out: dict = {"shapes": shapes}
    for mode in ("whole", "block"):
        torch._dynamo.reset()
        calls: list[dict] = []
        model = h.build_model().to(device=device, dtype=dtype).eval()
        with torch.no_grad():
            if mode == "block":
                scope = {"torch": torch}
                exec(zoo.BLOCKS, scope)
                for b in scope["blocks"](model):
                    b.compile(backend=recording_backend(calls))
                model(**inputs)
            else:
                torch.compile(model, backend=recording_backend(calls))(**inputs)
        distinct = {json.dumps(c, sort_keys=True): c for c in calls}
        out[mode] = [{**c, "eligible": eligibility(c, device) if device == "cuda" else None}
                     for c in distinct.values()]
    if device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        fused = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
        timing: dict = {}
        for label, backends in (("whole", None), ("whole-no-math", fused), ("whole-attention-eager", None)):
            torch._dynamo.reset()
            model = h.build_model().to(device=device, dtype=dtype).eval()
            compiled = torch.compile(model)
            t = time.perf_counter()
            try:
                with torch.no_grad(), _attention_eager(label.endswith("attention-eager")):
                    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
                        # the first shape compiles static; the second recompiles with dynamic sizes
                        timing[label] = {"ms": [_step_ms(compiled, f) for f in feeds]}
                timing[label]["compile_s"] = round(time.perf_counter() - t, 1)
            except Exception as exc:  # a probe: record why the fused path was not reachable
                timing[label] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
        torch._dynamo.reset()
        model = h.build_model().to(device=device, dtype=dtype).eval()
        with torch.no_grad():
            timing["eager"] = {"ms": [_step_ms(model, f) for f in feeds]}
        out["timing"] = timing
    return out


def main(argv: list[str] | None = None) -> int:
    return probe_main(probe, argv, "sdpa_choice.json", "bert,vit,t5", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
