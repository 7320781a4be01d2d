"""One arm of the allocator candidate's measurement (:func:`.memory.measure_allocator`), in its own
process: load the harness, run :func:`.memory.sweep`, write the JSON result to the job's ``out``.

The allocator settings are whatever this process's environment holds (the parent sets them);
``alloc_conf`` records what the process saw, so a report can show which arm ran with what.
Usage: ``python -m rewriter.diagnose.memory_child job.json``. Exit 0 with a result, also when the
harness failed (the result then holds ``error``, and ``oom`` for an out-of-memory error).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Run the job file named in ``argv[0]``; return the exit code (0 once a result is written)."""
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())
    from .rungs.memory import ALLOC_CONF_VARS, _mib, sweep

    result: dict[str, Any] = {"alloc_conf": {v: os.environ[v] for v in ALLOC_CONF_VARS if v in os.environ}}
    t0 = time.perf_counter()
    try:
        import torch

        from ..errors import StackpartError
        from ..harness import load_harness
        from ..plan import Harness
        from .session import HarnessFailure, Session

        spec = Harness.model_validate(job["harness"])
        result.update(device=spec.device, torch=torch.__version__)
        cuda = str(spec.device).startswith("cuda")
        try:
            session = Session(load_harness(spec, Path(job["src"])), timeout_s=job["timeout_s"], rung="memory (allocator candidate)")
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            result["steps"] = sweep(session, warm_passes=job["warm_passes"], passes=job["passes"], min_steps=job["min_steps"])
            if cuda:
                result["peak_reserved_mib"] = _mib(torch.cuda.max_memory_reserved())
                result["peak_allocated_mib"] = _mib(torch.cuda.max_memory_allocated())
        except HarnessFailure as exc:
            result["error"] = exc.describe()
            result["oom"] = exc.oom
        except StackpartError as exc:
            result["error"] = str(exc)
    except Exception as exc:  # anything else: recorded, the parent reports it as this arm's error
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    result["wall_s"] = round(time.perf_counter() - t0, 2)
    Path(job["out"]).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
