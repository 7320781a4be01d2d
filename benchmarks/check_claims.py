"""Measure the torch behaviour stackpart check's rules cite (CPU, ``backend="eager"``: Dynamo only).

* SP107: call cost through a wrapper built once vs ``torch.compile(f)(x)`` on every call; graphs
  compiled when a lambda closing over a loop variable is compiled in a loop (recompile limit).
* SP106: ``mark_dynamic(min=1)`` and ``min=2`` behave the same for sizes 1, 5, 7.
* SP103: ``.item()``/``.tolist()``/``print`` with and without ``fullgraph=True``.

Results on torch 2.13 CPU are quoted in the rules' EXPLANATION texts (docs/rules/).

Usage: ``python benchmarks/check_claims.py`` (about 30 s). Prints one JSON object.
"""

from __future__ import annotations

import json
import logging
import time

import torch
from torch._dynamo.utils import counters


def per_call(reps: int = 200) -> dict[str, float]:
    def f(x):
        return x.sin() + 1

    x = torch.randn(4)
    g = torch.compile(f, backend="eager")
    g(x)
    start = time.perf_counter()
    for _ in range(reps):
        g(x)
    once = (time.perf_counter() - start) / reps
    start = time.perf_counter()
    for _ in range(reps):
        torch.compile(f, backend="eager")(x)
    every = (time.perf_counter() - start) / reps
    return {"wrapper_built_once_us": round(once * 1e6, 1), "compile_every_call_us": round(every * 1e6, 1)}


GLOBAL = 0


def closure_in_loop(iterations: int = 12) -> dict[str, int]:
    """Graphs compiled by a lambda compiled in a loop: over a closure int, and over a module-level int."""
    global GLOBAL
    x = torch.randn(4)
    torch._dynamo.reset()
    counters.clear()
    for s in range(iterations):
        torch.compile(lambda t: t * s, backend="eager")(x)
    closure = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    counters.clear()
    for GLOBAL in range(iterations):
        torch.compile(lambda t: t * GLOBAL, backend="eager")(x)
    return {"iterations": iterations, "graphs_closure_int": closure,
            "graphs_global_int": counters["stats"]["unique_graphs"]}


def mark_dynamic_min() -> dict[str, str]:
    out = {}
    for low in (1, 2):
        torch._dynamo.reset()
        f = torch.compile(lambda t: t * 2, backend="eager")
        for n in (1, 5, 7):
            y = torch.randn(n)
            try:
                torch._dynamo.mark_dynamic(y, 0, min=low, max=64)
                f(y)
                out[f"min={low},size={n}"] = "ok"
            except Exception as exc:  # noqa: BLE001 - the exception type is the measurement
                out[f"min={low},size={n}"] = type(exc).__name__
    return out


def graph_break_calls() -> dict[str, str]:
    def item(x):
        return x / x.sum().item()

    def tolist(x):
        return x.argmax(-1).tolist()

    def prints(x):
        print(x.shape)
        return x.relu()

    out = {}
    for fn in (item, tolist, prints):
        torch._dynamo.reset()
        breaks = torch._dynamo.explain(fn)(torch.ones(4)).break_reasons
        out[f"{fn.__name__}: graph break without fullgraph"] = str(any(r.graph_break for r in breaks))
        torch._dynamo.reset()
        try:
            torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(4))
            out[f"{fn.__name__}: fullgraph=True"] = "ok (captured)"
        except Exception as exc:  # noqa: BLE001
            out[f"{fn.__name__}: fullgraph=True"] = type(exc).__name__
    return out


if __name__ == "__main__":
    logging.disable(logging.WARNING)  # Dynamo's recompile-limit warnings are the expected outcome
    print(json.dumps({"torch": torch.__version__, "SP107_per_call": per_call(), "SP107_closure": closure_in_loop(),
                      "SP106": mark_dynamic_min(), "SP103": graph_break_calls()}, indent=2))
