"""What a timed process's host and interpreter look like while it is timed: a probe for a step that
times differently in two processes of one computation (docs/measuring-on-a-gpu.md, "When two
processes time one computation apart").

Set ``STACKPART_HOST_STATE`` to a folder and every served measurement child (:func:`.child.serve`)
writes ``<variant>-<pid>.json`` there when it stops: :func:`snapshot` at its first timed request
and at its end, and :func:`delta` between them. benchmarks/zoo.py's variant processes write the same
files, so the search's processes and the zoo's can be read side by side. Nothing is written without
the variable: the probe reads ``/proc`` and torch's global switches, cheap but not free.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: The environment variable naming the folder the probe writes to.
ENV = "STACKPART_HOST_STATE"


def _proc_threads() -> dict[str, dict[str, Any]]:
    """Each thread of this process: name, state, CPU seconds (user + system) and last CPU, from
    ``/proc/self/task/*/stat`` (fields 14, 15 and 39 of proc(5)); ``{}`` off Linux."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, dict[str, Any]] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            text = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1: text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()  # rest[0] is field 3 (state)
        out[tid] = {"name": name, "state": rest[0], "cpu_s": (int(rest[11]) + int(rest[12])) / tick,
                    "last_cpu": int(rest[36])}
    return out


def _core_times(core: int | None) -> tuple[float, float] | None:
    """``(busy, steal)`` seconds of ``core`` since boot, from ``/proc/stat`` (proc(5)): busy is every
    column but idle and iowait, steal the time the hypervisor ran another guest on this virtual
    CPU (counted in busy too); None when unknown."""
    if core is None:
        return None
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{core} "):
                v = [int(x) for x in line.split()[1:]]
                tick = os.sysconf("SC_CLK_TCK")
                return (sum(v) - v[3] - (v[4] if len(v) > 4 else 0)) / tick, (v[7] if len(v) > 7 else 0) / tick
    except (OSError, ValueError):
        return None
    return None


def _torch_switches() -> dict[str, Any]:
    """torch's process-wide switches that change an eager step's speed: grad and inference mode,
    modes on the torch-function and dispatch stacks, anomaly detection, deterministic algorithms,
    matmul precision, the SDPA backends enabled, autocast, CPU threads."""
    import torch

    out: dict[str, Any] = {"torch": torch.__version__}
    probes = {
        "grad_enabled": torch.is_grad_enabled,
        "inference_mode": torch.is_inference_mode_enabled,
        "torch_function_modes": lambda: torch._C._len_torch_function_stack(),
        "dispatch_modes": lambda: torch._C._len_torch_dispatch_stack(),
        "anomaly": torch.is_anomaly_enabled,
        "deterministic": torch.are_deterministic_algorithms_enabled,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "bf16_reduced_precision_reduction": lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "sdp_flash": torch.backends.cuda.flash_sdp_enabled,
        "sdp_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
        "sdp_math": torch.backends.cuda.math_sdp_enabled,
        "sdp_cudnn": lambda: torch.backends.cuda.cudnn_sdp_enabled(),
        "autocast_cuda": lambda: torch.is_autocast_enabled("cuda"),
        "cpu_threads": torch.get_num_threads,
        "cuda_initialized": torch.cuda.is_initialized,
    }
    for name, read in probes.items():
        try:
            out[name] = read()
        except Exception as exc:  # noqa: BLE001 - a switch this torch lacks is said, not fatal
            out[name] = f"unreadable: {type(exc).__name__}"
    return out


def snapshot(model: Any = None) -> dict[str, Any]:
    """This process now: affinity, nice value, scheduling policy, threads (``/proc``), Python's
    trace and profile hooks, the garbage collector (tracked objects, thresholds, collections so
    far), torch's switches (:func:`_torch_switches`), the model's first parameter's dtype and
    device and its attention implementation (transformers' ``config._attn_implementation``), and
    the CUDA/PyTorch environment variables. Wall-clock seconds in ``time``."""
    out: dict[str, Any] = {"time": time.time(), "pid": os.getpid()}
    try:
        out["affinity"] = sorted(os.sched_getaffinity(0))
        out["nice"] = os.nice(0)
        out["policy"] = os.sched_getscheduler(0)
    except (AttributeError, OSError):
        pass
    out["threads"] = _proc_threads()
    out["python_threads"] = [t.name for t in threading.enumerate()]
    out["trace_hook"] = repr(sys.gettrace()) if sys.gettrace() else None
    out["profile_hook"] = repr(sys.getprofile()) if sys.getprofile() else None
    out["gc"] = {"enabled": gc.isenabled(), "tracked": len(gc.get_objects()), "thresholds": gc.get_threshold(),
                 "collections": [s["collections"] for s in gc.get_stats()]}
    out["torch"] = _torch_switches()
    if model is not None:
        try:
            p = next(model.parameters())
            out["param"] = {"dtype": str(p.dtype), "device": str(p.device)}
        except (StopIteration, AttributeError, TypeError):
            pass
        config = getattr(model, "config", None) or getattr(getattr(model, "_orig_mod", None), "config", None)
        if config is not None:
            out["attn_implementation"] = getattr(config, "_attn_implementation", None)
    out["env"] = {k: v for k, v in os.environ.items()
                  if k.startswith(("CUDA_", "PYTORCH_", "TORCH", "OMP_", "MKL_", "NCCL_")) and "TOKEN" not in k}
    return out


def delta(first: dict[str, Any], last: dict[str, Any], core: int | None, at_first: tuple[float, float] | None,
          at_last: tuple[float, float] | None) -> dict[str, Any]:
    """Between two :func:`snapshot` s: wall seconds, each thread's CPU seconds (the main thread's
    and the others', by name), garbage collections per generation, and the pinned ``core``'s busy
    and steal seconds (``at_first``, ``at_last``: :func:`_core_times` at each end) beside this
    process's own CPU seconds: a core busier than this process was shared with another."""
    wall = last["time"] - first["time"]
    threads = {}
    for tid, t in last["threads"].items():
        before = first["threads"].get(tid, {}).get("cpu_s", 0.0)
        if t["cpu_s"] - before > 0:
            threads[f"{t['name']}[{tid}]"] = round(t["cpu_s"] - before, 3)
    out: dict[str, Any] = {"wall_s": round(wall, 3), "thread_cpu_s": threads,
                           "gc_collections": [b - a for a, b in zip(first["gc"]["collections"], last["gc"]["collections"])]}
    if core is not None and at_first is not None and at_last is not None:
        out["pinned_core"] = core
        out["core_busy_s"] = round(at_last[0] - at_first[0], 3)
        out["core_steal_s"] = round(at_last[1] - at_first[1], 3)
        out["own_cpu_s"] = round(sum(threads.values()), 3)
    return out


def profiled_step(step: Any, top: int = 12) -> dict[str, Any]:
    """One call of ``step`` under ``torch.profiler`` (CPU and, where available, CUDA activity):
    the number of device kernels and their total self-device time (ms), the ``top`` kernels by
    self-device time, and the number of CPU-side operator events: two processes that launch other
    kernels for one computation (another attention backend, another GEMM) show it here."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    try:
        with profile(activities=activities) as prof:
            step()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a probe, never the measurement's failure
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    kernels: dict[str, list[float]] = {}
    cpu_ops = 0
    for e in prof.events():
        device_type = str(getattr(e, "device_type", "")).rsplit(".", 1)[-1]
        if device_type == "CUDA":
            kernels.setdefault(e.name, []).append(getattr(e, "self_device_time_total", 0.0) / 1e3)
        else:
            cpu_ops += 1
    ranked = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {"kernels": sum(len(v) for v in kernels.values()), "device_ms": round(sum(sum(v) for v in kernels.values()), 4),
            "cpu_events": cpu_ops, "top": [[name[:120], len(v), round(sum(v), 4)] for name, v in ranked]}


class Probe:
    """The probe of one timed process: :meth:`start` at its first timed request (after pinning),
    :meth:`stop` when it stops timing, which writes the file. Inert when :data:`ENV` is unset."""

    def __init__(self, name: str, on_sigterm: bool = False) -> None:
        self.folder = os.environ.get(ENV)
        self.name = name
        self.on_sigterm = on_sigterm
        self.first: dict[str, Any] | None = None
        self.core: int | None = None
        self.busy: tuple[float, float] | None = None
        self.requests: list[dict[str, Any]] = []
        self._at: tuple[float, float, float, tuple[float, float] | None] | None = None

    def before(self) -> None:
        """Before one timed request: its wall clock, this process's and this thread's CPU clocks
        and the pinned core's busy and steal seconds."""
        if self.folder and self.first is not None:
            self._at = (time.perf_counter(), time.process_time(), time.thread_time(), _core_times(self.core))

    def after(self, request: dict[str, Any], samples: list[float]) -> None:
        """After that request: the same clocks' differences, with the request's shape, call
        counts and median sample (ms): a request whose core was busier than this process ran beside
        another process on that core; one with steal seconds ran on a virtual CPU the hypervisor
        gave to another guest part of the time."""
        if self._at is None:
            return
        wall, cpu, main, busy = self._at
        now_busy = _core_times(self.core)
        row = {"shape": request.get("shape"), "warmup": request.get("warmup"), "n": request.get("n"),
               "wall_s": round(time.perf_counter() - wall, 4), "process_cpu_s": round(time.process_time() - cpu, 4),
               "thread_cpu_s": round(time.thread_time() - main, 4)}
        if busy is not None and now_busy is not None:
            row["core_busy_s"] = round(now_busy[0] - busy[0], 4)
            row["core_steal_s"] = round(now_busy[1] - busy[1], 4)
        if samples:
            row["median_ms"] = round(sorted(samples)[len(samples) // 2] * 1e3, 4)
        self.requests.append(row)
        self._at = None

    def start(self, model: Any = None, core: int | None = None, step: Any = None) -> None:
        """The first snapshot, with one ``step`` (a no-argument call) profiled (:func:`profiled_step`)
        where given; and with ``on_sigterm`` (the engine ends its served children with SIGTERM,
        :meth:`.runner.ServedChild.terminate`) a SIGTERM handler that writes the file, then exits."""
        if not self.folder or self.first is not None:
            return
        self.core = core
        self.first = snapshot(model)
        if step is not None:
            self.first["profiled_step"] = profiled_step(step)
        self.busy = _core_times(core)
        if self.on_sigterm and threading.current_thread() is threading.main_thread():
            import signal

            def _stop_and_exit(*_: object) -> None:
                self.stop(model)
                os._exit(0)

            signal.signal(signal.SIGTERM, _stop_and_exit)

    def stop(self, model: Any = None) -> None:
        if not self.folder or self.first is None:
            return
        last = snapshot(model)
        out = {"name": self.name, "first": self.first, "last": last,
               "delta": delta(self.first, last, self.core, self.busy, _core_times(self.core)),
               "requests": self.requests}
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_+." else "_" for c in self.name)
        (folder / f"{safe}-{os.getpid()}.json").write_text(json.dumps(out, indent=1, default=str))
        self.first = None
