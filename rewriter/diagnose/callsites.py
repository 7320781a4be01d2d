"""Exact source lines of selected calls, captured while one step runs.

torch.profiler's Python stack names a function by its ``def`` line; the call line of a host sync
or of the dominant op needs the live stack. One step runs under a ``TorchDispatchMode`` that, for
the aten operators asked for, records the innermost frame under SRC (``traceback``). Host syncs
are the scalar reads every ``.item()``, ``.tolist()``, ``bool(tensor)`` and ``int(tensor)`` end
in (``aten::_local_scalar_dense``) and ``aten::nonzero`` (an output size the host must wait for).

A dispatch mode cannot run inside compiled code (Dynamo refuses a frame while a non-infra mode is
active: a ``fullgraph=True`` program raises), so the step runs with compilation off,
``torch.compiler.set_stance("force_eager")`` (torch >= 2.6): the program's own ``torch.compile``
calls run their code eager for this one step and never see the mode. The sites are those of the
eager step (:data:`MEASURED_HOW`); the program's compiled run reads the same values at the same
lines, where its graph breaks (a scalar read is one unless Dynamo captures scalar outputs).
"""

from __future__ import annotations

import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from .locate import function_at, relpath

#: aten ops whose result the host must wait for on CUDA (a device -> host read).
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "_assert_async", "equal", "is_nonzero"})
#: Tensor methods that read data back to the host without one of the aten ops above.
SYNC_METHODS = frozenset({"tolist", "numpy", "cpu"})
#: How :func:`capture` ran the step, for the rung's text.
MEASURED_HOW = ("one step with compilation off (torch.compiler.set_stance('force_eager')): "
                "a dispatch mode never enters compiled code")


def capture(session: Any, step: Any, names: set[str]) -> dict[str, Counter]:
    """Run ``step`` once, compilation off (module docstring); for aten op names in ``names`` (no
    ``aten::``) count user call sites.

    Returns:
        ``{op name: Counter({(file relative to SRC, line, qualname): calls})}``.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    import torch
    from torch.overrides import TorchFunctionMode

    src = Path(session.src)
    found: dict[str, Counter] = {}

    def record(name: str) -> None:
        for frame in reversed(traceback.extract_stack()[:-2]):
            rel = relpath(src, frame.filename)
            if rel is not None:
                site = (rel, frame.lineno, function_at(frame.filename, frame.lineno) or frame.name)
                found.setdefault(name, Counter())[site] += 1
                return

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func._schema.name.split("::", 1)[-1]
            if name in names:
                record(name)
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = getattr(func, "__name__", "")
            if name in names and name in methods:
                if name != "cpu" or (args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu"):
                    record(name)
            return func(*args, **(kwargs or {}))

    methods = names & SYNC_METHODS
    with torch.compiler.set_stance("force_eager"), Dispatch(), Function():
        session.run(step)
    return found
