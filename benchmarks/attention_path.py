"""Which attention path each compile of a zoo family traces: a fused SDPA kernel, or SDPA's math
decomposition (two batched GEMMs around ``_safe_softmax``, which upcasts a bf16 step to fp32).

BENCHMARKS.md, "Model zoo, part 16" and "part 17": ViT's whole compile ran 215 kernels per step
with fp32 SIMT GEMMs and Triton ``_safe_softmax`` kernels where eager and per-block ran cuDNN's
fused attention, at its first (static) shape only (6.25 ms against eager's 4.37 on the H200; 3.73
against 4.26 at the second shape, the dynamic graph); T5's whole compile showed the same kernels.
This probe records, for each family and each way of compiling it, the aten ops of the forward
graph AOTAutograd traces (``torch._functorch.aot_autograd.aot_module_simplified`` with a recording
forward compiler, no Inductor): the ops whose name holds ``scaled_dot_product``, ``_safe_softmax``,
``softmax`` or ``bmm``, and how many of each. The SDPA backend is chosen while tracing, on the
device's FakeTensors, so the recorded op is the path the compiled step runs.

Ways of compiling, each in a fresh ``torch._dynamo.reset()``: ``whole-static`` (``dynamic=False``,
the first shape), ``whole-dynamic`` (``dynamic=True``), ``whole-default`` (the first shape, then the
second: automatic dynamic shapes recompile with symbolic sizes, as the zoo's whole variant runs),
``block`` (the repeated block, ``blocks`` of :data:`zoo.BLOCKS`, each instance compiled, the first shape).

On the GPU machine (transformers installed there; no stackpart wheel needed):
``OUT=$OUT python3 benchmarks/attention_path.py --only vit,t5,bert`` (about a minute a family:
AOT traces only); writes ``$OUT/attention_path.json``. CPU smoke on the zoo's tiny configs:
``OUT=/tmp/o python benchmarks/attention_path.py --smoke --only vit``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
# run as a script, this folder is sys.path[0]: its kernels.py would hide the ``kernels`` package
# transformers imports; zoo.py is loaded from its file instead (:func:`_load_zoo`)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def _load_zoo() -> types.ModuleType:
    """benchmarks/zoo.py (the families, their harnesses and shapes), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo", HERE / "zoo.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


zoo = _load_zoo()

#: The forward graph's ops recorded: the attention path's names.
WATCHED = ("scaled_dot_product", "_safe_softmax", "softmax", "bmm")
MODES = ("whole-static", "whole-dynamic", "whole-default", "block")


def recording_backend(graphs: list[dict]):
    """A ``torch.compile`` backend that traces each Dynamo graph with AOTAutograd and records, per
    forward graph, the count of each watched aten op (:data:`WATCHED`); it runs the traced graph
    as it is (no Inductor)."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    def backend(gm, example_inputs):
        def fw(graph, inputs):
            calls = [n for n in graph.graph.nodes if n.op == "call_function"]
            ops = collections.Counter(str(n.target) for n in calls if any(w in str(n.target) for w in WATCHED))
            masks = sorted({_mask(n) for n in calls if "scaled_dot_product" in str(n.target)})
            graphs.append({"ops": dict(sorted(ops.items())), "sdpa_masks": masks})
            return make_boxed_func(graph.forward)
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw)
    return backend


def _mask(node) -> str:
    """The attention mask an SDPA node of an aten graph gets: ``none``, or its shape, dtype and
    strides from the FakeTensor the trace recorded (a mask built in the graph rules out the
    flash kernel, which takes none)."""
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    val = getattr(mask, "meta", {}).get("val") if mask is not None else None
    if val is None:
        return "none" if mask is None else repr(mask)[:80]
    return f"{tuple(val.shape)} {val.dtype} strides {tuple(val.stride())}"


def harness(name: str, smoke: bool) -> types.ModuleType:
    """The family's zoo harness (:func:`zoo.harness_text`) as a module."""
    mod = types.ModuleType(f"harness_{name}")
    exec(compile(zoo.harness_text(name, smoke), f"harness_{name}.py", "exec"), mod.__dict__)
    return mod


def probe(name: str, smoke: bool, device: str) -> dict:
    """Every way of compiling family ``name`` (:data:`MODES`): the watched ops of each forward graph
    traced, in order, or the error that stopped it."""
    import torch

    dtype = torch.float32 if smoke else torch.bfloat16
    h = harness(name, smoke)
    shapes = zoo.shapes_of(name, smoke)
    feeds = [{k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
              for k, v in h.make_inputs(**s).items()} for s in shapes]
    out: dict = {"shapes": shapes, "sdp_enabled": {
        k: bool(getattr(torch.backends.cuda, f"{k}_sdp_enabled", lambda: None)())
        for k in ("flash", "mem_efficient", "cudnn", "math")}}
    for mode in MODES:
        torch._dynamo.reset()
        graphs: list[dict] = []
        backend = recording_backend(graphs)
        t = time.perf_counter()
        try:
            model = h.build_model().to(device=device, dtype=dtype)
            with torch.no_grad():
                if mode == "block":
                    scope = {"torch": torch}
                    exec(zoo.BLOCKS, scope)  # the zoo's per-block variant's choice of block
                    for b in scope["blocks"](model):
                        b.compile(backend=backend)
                    model(**feeds[0])
                else:
                    dyn = {"whole-static": False, "whole-dynamic": True, "whole-default": None}[mode]
                    compiled = torch.compile(model, backend=backend, dynamic=dyn)
                    for inputs in feeds if mode == "whole-default" else feeds[:1]:
                        compiled(**inputs)
            out[mode] = {"graphs": graphs, "s": round(time.perf_counter() - t, 1)}
        except Exception as exc:  # a probe: record what stopped it, go on with the next mode
            out[mode] = {"graphs": graphs, "error": f"{type(exc).__name__}: {exc}"[:400]}
    return out


def probe_main(probe_one, argv: list[str] | None, filename: str, default_only: str, description: str) -> int:
    """The command line of a zoo probe: ``--only`` families, ``--smoke``; ``probe_one(name, smoke,
    device)`` per family, each written to ``$OUT/filename`` as it ends (one family's error is
    recorded, the next goes on)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--only", default=default_only, help="comma-separated zoo families")
    ap.add_argument("--smoke", action="store_true", help="the zoo's tiny configs on the CPU, float32")
    args = ap.parse_args(argv)
    import torch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "families": {}}
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        try:
            result["families"][name] = probe_one(name, args.smoke, device)
        except Exception as exc:  # a probe: one family's failure does not stop the next
            result["families"][name] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
        (out / filename).write_text(json.dumps(result, indent=1))
        print(name, json.dumps(result["families"][name])[:3000], flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return probe_main(probe, argv, "attention_path.json", "vit,t5,bert", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    sys.exit(main())
