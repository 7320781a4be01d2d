"""The per-rank entry torchrun starts: build the harness, wrap it in DDP or FSDP2, run warm-up,
timed and profiled steps, and write this rank's Chrome trace and step times.

Run as ``python -m torch.distributed.run --standalone --nproc-per-node N -m
rewriter.distributed.worker --config run.json`` (see :func:`rewriter.distributed.launch.run_distributed`,
which writes ``run.json``). torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; the
process group is ``nccl`` for a CUDA harness and ``gloo`` for a CPU one.

Files written under the config's ``out_dir``:

* ``rank{R}.trace.json``: the Chrome trace of the profiled steps (``ProfilerStep#N`` ranges);
* ``rank{R}.steps.json``: step times in seconds (timed steps without the profiler, and the
  profiled ones), the wrapper and its settings, gradient bytes;
* ``rank{R}.error.json`` instead, when the harness or the wrapper fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import StackpartError

WRAPPERS = ("ddp", "fsdp2", "none")


def fully_shard_fn() -> Any:
    """``fully_shard`` (FSDP2): public in ``torch.distributed.fsdp`` from torch 2.6, under
    ``torch.distributed._composable.fsdp`` in 2.4-2.5.

    Raises:
        StackpartError: this torch has no FSDP2.
    """
    try:
        from torch.distributed.fsdp import fully_shard  # type: ignore[attr-defined]

        return fully_shard
    except ImportError:
        pass
    try:
        from torch.distributed._composable.fsdp import fully_shard  # type: ignore[no-redef]

        return fully_shard
    except ImportError:
        import torch

        raise StackpartError(
            f"FSDP2 (fully_shard) is not available in torch {torch.__version__}",
            hint="use --wrap ddp, or torch >= 2.6",
        ) from None


def shard_units(model: Any) -> list[Any]:
    """The modules FSDP2 shards on their own: every element of every ``nn.ModuleList`` (the
    repeated blocks, as in the FSDP2 tutorial's ``for layer in model.layers: fully_shard(layer)``),
    outermost lists only. The root is sharded last by the caller."""
    import torch.nn as nn

    units: list[Any] = []
    seen: set[int] = set()
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and id(module) not in seen:
            for child in module:
                units.append(child)
                seen.update(id(m) for m in child.modules())
    return units


def wrap_model(model: Any, wrap: str, settings: dict[str, Any], device_ids: list[int] | None) -> Any:
    """Wrap ``model`` for data parallelism.

    ``ddp``: ``DistributedDataParallel(model, bucket_cap_mb=...)`` (torch's default 25 MB when
    unset). ``fsdp2``: ``fully_shard`` on each :func:`shard_units` block then the root, with
    ``reshard_after_forward`` (default True); ``forward_prefetch: K`` sets
    ``set_modules_to_forward_prefetch`` to the next K blocks (torch >= 2.6). ``none``: as is.
    """
    if wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        kwargs: dict[str, Any] = {}
        if settings.get("bucket_cap_mb") is not None:
            kwargs["bucket_cap_mb"] = float(settings["bucket_cap_mb"])
        return DDP(model, device_ids=device_ids, **kwargs)
    if wrap == "fsdp2":
        fully_shard = fully_shard_fn()
        reshard = settings.get("reshard_after_forward", True)
        units = shard_units(model)
        for unit in units:
            fully_shard(unit, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        prefetch = int(settings.get("forward_prefetch") or 0)
        if prefetch and all(hasattr(u, "set_modules_to_forward_prefetch") for u in units):
            for i, unit in enumerate(units):
                unit.set_modules_to_forward_prefetch(units[i + 1 : i + 1 + prefetch])
        return model
    return model


def _first_tensor(value: Any) -> Any:
    import torch
    from torch.utils import _pytree as pytree

    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return leaf
    raise StackpartError("training step: the model returned no floating-point tensor to take a loss of")


def run_rank(cfg: dict[str, Any], rank: int, local_rank: int, world: int) -> dict[str, Any]:
    """Build, wrap and step the harness on this rank; write its trace and step times.

    Returns:
        the ``rank{R}.steps.json`` record.

    Raises:
        StackpartError: the harness cannot be loaded or built, or the wrapper is unavailable.
    """
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from ..harness import build, call_model, load_harness
    from ..plan import Harness

    spec = Harness.model_validate(cfg["harness"])
    out = Path(cfg["out_dir"])
    cuda = spec.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local_rank)
        spec = spec.model_copy(update={"device": f"cuda:{local_rank}"})
    else:
        torch.set_num_threads(int(cfg.get("threads", 1)))
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend=backend)
    try:
        torch.manual_seed(int(cfg.get("seed", 0)))
        h = load_harness(spec, Path(cfg["src"]))
        model, inputs = build(h)
        if cfg.get("library_modules"):
            from ..engine.build import site_ran

            site_ran(Path(cfg["src"]), spec, cfg["library_modules"], cfg.get("site"))
        sizes = [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]
        wrap = cfg["wrap"]
        settings = cfg.get("settings", {})
        model = wrap_model(model, wrap, settings, [local_rank] if cuda else None)
        training = spec.mode == "training"
        opt = torch.optim.SGD(model.parameters(), lr=1e-4) if training else None

        def step() -> None:
            if training:
                loss = _first_tensor(call_model(model, inputs, spec.call)).float().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                with torch.no_grad():
                    call_model(model, inputs, spec.call)
            if cuda:
                torch.cuda.synchronize()

        def timed(n: int) -> list[float]:
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            return times

        warmup_s = timed(int(cfg.get("warmup", 2)))
        dist.barrier()
        step_s = timed(int(cfg.get("steps", 3)))
        dist.barrier()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        trace_path = out / f"rank{rank}.trace.json"
        active = int(cfg.get("steps", 3))
        profiled_s: list[float] = []
        with profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
            with_stack=bool(cfg.get("with_stack", True)),
            on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
        ) as prof:
            for i in range(1 + active):
                t0 = time.perf_counter()
                step()
                if i >= 1:
                    profiled_s.append(time.perf_counter() - t0)
                prof.step()
        record = {
            "rank": rank,
            "world_size": world,
            "backend": backend,
            "device": spec.device,
            "mode": spec.mode,
            "wrap": wrap,
            "settings": settings,
            "torch": torch.__version__,
            "grad_bytes": int(sum(sizes)) if training else 0,
            "largest_grad_bytes": int(max(sizes, default=0)) if training else 0,
            "warmup_step_s": warmup_s,
            "step_s": step_s,
            "profiled_step_s": profiled_s,
            "trace": trace_path.name,
        }
        (out / f"rank{rank}.steps.json").write_text(json.dumps(record, indent=2) + "\n")
        return record
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry for one torchrun process. Returns 0, 2 (bad harness: ``rank{R}.error.json`` holds
    the :class:`StackpartError`) or 1 (anything else, with its traceback in the same file)."""
    parser = argparse.ArgumentParser(prog="rewriter.distributed.worker")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    error = Path(cfg["out_dir"]) / f"rank{rank}.error.json"
    try:
        run_rank(cfg, rank, local_rank, world)
    except StackpartError as exc:
        error.write_text(json.dumps({"rank": rank, "stackpart": asdict(exc)}) + "\n")
        return 2
    except Exception as exc:  # report any failure of the user's model to the launcher
        error.write_text(
            json.dumps({"rank": rank, "exception": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()}) + "\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
