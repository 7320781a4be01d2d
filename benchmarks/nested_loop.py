"""Hierarchical compilation of a repeated callee: a whole-model compile of a model whose forward
calls one method (or submodule) many times in a Python loop, with and without
``@torch.compiler.nested_compile_region`` on the callee.

Dynamo unrolls the loop: without the region every step's ops are captured again (the graph grows
with the step count, and so does the compile); with it the callee is traced once and each later
step is an ``invoke_subgraph`` call of the same subgraph (torch docs,
``torch.compiler.nested_compile_region``; torch >= 2.8). Each configuration runs in a fresh
process (empty caches): compile seconds of the first call, the captured graph's node count
(``call_function``/``call_method``/``call_module`` nodes of every graph Dynamo hands the backend,
subgraphs included), and the largest difference of the output from eager.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/nested_loop.py [--steps 50 100 300] [--backends eager aot_eager]

Prints one JSON line per configuration (docs: BENCHMARKS.md, "Hierarchical compilation of a
repeated callee").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r'''
import json, sys, time
import torch, torch.nn as nn
steps, backend, where = int(sys.argv[1]), sys.argv[2], sys.argv[3]
region = getattr(torch.compiler, "nested_compile_region", None)
if where != "none" and region is None:
    print(json.dumps({"error": "no torch.compiler.nested_compile_region"})); sys.exit(0)
class MLP(nn.Module):
    def __init__(self):
        super().__init__(); self.a = nn.Linear(32, 64); self.b = nn.Linear(64, 32)
    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))
class Integrator(nn.Module):
    def __init__(self):
        super().__init__(); self.f = MLP()
    def step(self, x, dt):
        return x + dt * self.f(x)
    def forward(self, x):
        for _ in range(STEPS):
            x = self.step(x, 0.01)
        return x
'''

BODY = r'''
torch.manual_seed(0)
model = Integrator().eval()
x = torch.randn(8, 32)
with torch.no_grad():
    ref = model(x)
nodes = []
def count(gm, example_inputs):
    def walk(g):
        n = 0
        for node in g.graph.nodes:
            if node.op in ("call_function", "call_method", "call_module"):
                n += 1
        for sub in g.children():
            if isinstance(sub, torch.fx.GraphModule):
                n += walk(sub)
        return n
    subs = [m for m in gm.children() if isinstance(m, torch.fx.GraphModule)]
    nodes.append({"top": walk(gm) - sum(walk(m) for m in subs), "subgraphs": [walk(m) for m in subs]})
    return torch._dynamo.lookup_backend(backend)(gm, example_inputs)
compiled = torch.compile(model, backend=count)
t0 = time.perf_counter()
with torch.no_grad():
    out = compiled(x)
compile_s = time.perf_counter() - t0
t0 = time.perf_counter()
with torch.no_grad():
    for _ in range(5):
        compiled(x)
step_ms = (time.perf_counter() - t0) / 5 * 1e3
from torch._dynamo.utils import counters
print(json.dumps({"steps": steps, "backend": backend, "region": where, "compile_s": round(compile_s, 3),
                  "graphs": len(nodes), "graph_nodes": nodes, "step_ms": round(step_ms, 3),
                  "max_abs_diff": float((out - ref).abs().max()), "torch": torch.__version__}))
'''


def child_source(steps: int) -> str:
    """The child's program for ``steps`` loop steps (decorators chosen by its argv)."""
    head = CHILD.replace("STEPS", str(steps))
    # the decorator is applied after the class bodies, so each configuration is the same source
    tail = ("if where == 'step': Integrator.step = region(Integrator.step)\n"
            "if where == 'forward': MLP.forward = region(MLP.forward)\n")
    return head + tail + BODY


def run(steps: int, backend: str, where: str) -> dict:
    """One configuration in a fresh interpreter; its JSON line as a dict."""
    out = subprocess.run([sys.executable, "-c", child_source(steps), str(steps), backend, where],
                         capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"steps": steps, "backend": backend, "region": where, "error": out.stderr[-800:]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[50, 100, 300])
    ap.add_argument("--backends", nargs="+", default=["eager", "aot_eager"])
    ap.add_argument("--regions", nargs="+", default=["none", "step", "forward"],
                    help="none: no region; step: Integrator.step; forward: MLP.forward")
    args = ap.parse_args()
    for steps in args.steps:
        for backend in args.backends:
            for where in args.regions:
                print(json.dumps(run(steps, backend, where)), flush=True)


if __name__ == "__main__":
    main()
