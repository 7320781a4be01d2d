"""Fixtures shared by the test files."""

from __future__ import annotations

import sys
from typing import Any

import pytest

#: The config modules of torch a program under test may set knobs in (``torch._dynamo.config``,
#: ``torch._inductor.config``), each a ``torch.utils._config_module`` module.
TORCH_CONFIGS = ("torch._dynamo.config", "torch._inductor.config")


def _fresh_values(config: Any) -> dict[str, Any]:
    """``knob -> value`` as a fresh import of ``config`` has it: the environment's value where a
    ``TORCHDYNAMO_*``/``TORCHINDUCTOR_*`` variable sets one, else torch's default (each entry's
    ``env_value_force``, ``env_value_default`` and ``default``; aliases left out, as
    ``get_config_copy()`` leaves them)."""
    from torch.utils import _config_module

    unset = getattr(_config_module, "_UNSET_SENTINEL", object())
    out = {}
    for name, entry in config._config.items():
        if getattr(entry, "alias", None) is None:
            values = (getattr(entry, "env_value_force", unset), getattr(entry, "env_value_default", unset), entry.default)
            out[name] = next(v for v in values if v is not unset)
    return out


@pytest.fixture(autouse=True)
def torch_config_restored():
    """Every test leaves the torch config modules' knobs as it found them: a program under test
    sets ``torch._dynamo.config.suppress_errors = True`` at import, and the worker's later tests
    (``--dist loadfile`` runs many files in one process) would compile, count and report under it
    (report.md's "The program's torch._dynamo.config"). Saved with the module's own
    ``get_config_copy()`` where the module is already imported (a test that imports nothing of
    torch imports nothing here either); a module first imported during the test goes back to a
    fresh import's values (:func:`_fresh_values`). Only the knobs that changed are loaded back
    (``load_config``), so a deprecated knob nobody set raises no warning."""
    saved = {name: sys.modules[name].get_config_copy() for name in TORCH_CONFIGS if name in sys.modules}
    yield
    for name in TORCH_CONFIGS:
        config = sys.modules.get(name)
        if config is None:
            continue
        before = saved[name] if name in saved else _fresh_values(config)
        now = config.get_config_copy()
        changed = {k: v for k, v in before.items() if k in now and now[k] != v}
        if changed:
            config.load_config(changed)


@pytest.fixture
def one_thread():
    """Single-threaded torch in this process: oversubscribed OpenMP barriers on a shared machine
    look like a fixed per-op cost and would turn every model launch-bound. A file uses it for
    all its tests with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def benchmark_script():
    """``load(name)``: the module of ``benchmarks/<name>.py``, imported from its file (the
    scripts are not a package), for tests of what a benchmark computes from stored results."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def load(name: str):  # type: ignore[no-untyped-def]
        spec = importlib.util.spec_from_file_location(f"{name}_bench", root / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


class FakeBusyLoop:
    """Stands in for :func:`rewriter.engine.cores.contend`'s process: ``on`` while one runs,
    ``started`` the cores asked for, ``alive`` the loops not yet killed."""

    def __init__(self) -> None:
        self.on, self.started, self.alive = False, [], []

    def __call__(self, core: int) -> "FakeBusyLoop._Loop":
        return FakeBusyLoop._Loop(self, core)

    class _Loop:
        def __init__(self, owner: "FakeBusyLoop", core: int) -> None:
            self.owner = owner
            owner.on = True
            owner.started.append(core)
            owner.alive.append(self)

        def kill(self) -> None:
            self.owner.on = False
            self.owner.alive.remove(self)

        def wait(self) -> None:
            pass


@pytest.fixture
def busy_loop(monkeypatch):
    """The contended window's busy loop faked (:class:`FakeBusyLoop`), on a host that reports 16
    cores, so :func:`rewriter.engine.windows.interleave` pins every process to one shared core."""
    import os

    import rewriter.engine.cores as cores

    fake = FakeBusyLoop()
    monkeypatch.setattr(cores, "contend", fake)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    return fake


# -- the order test files are handed to the two xdist workers ----------------------------------

#: Seconds (rounded) the slowest test files take on the CI machine (two workers on two shared CPU
#: cores; docs/guide.md, "Running the tests"): their tests' ``pytest --durations`` summed, or for a
#: file timed alone its CPU time (user + system, its child processes included) times 0.8, the
#: ratio of the two where a file was measured both ways.
#: Under ``--dist loadfile`` each file goes whole to the next idle worker; handing them out
#: longest first (longest-processing-time-first scheduling) leaves only short files for the end,
#: so neither worker finishes minutes after the other. A file not listed comes after these, in
#: collection order; a stale figure changes only the order, never what runs.
FILE_SECONDS: dict[str, float] = {
    "test_diagnose_hf.py": 105, "test_zoo_cpu_a.py": 215, "test_zoo_cpu_b.py": 210,
    "test_zoo_cpu_c.py": 140, "test_own_compile_patterns.py": 130, "test_check_real.py": 60,
    "test_judge.py": 90, "test_diagnose_own_programs.py": 100, "test_value_guards.py": 90,
    "test_apply_signals.py": 80, "test_kernels.py": 70, "test_guard_limit.py": 65,
    "test_diagnose_workloads.py": 60, "test_library_targets.py": 45, "test_validate.py": 85,
    "test_hostile_files.py": 45, "test_transformers_real.py": 360, "test_mask_eager.py": 45,
    "test_library_models_gensep.py": 40, "test_diffusers_real.py": 35, "test_search_config.py": 30,
    "test_diagnose_hf_src.py": 35, "test_measure_compiled_programs.py": 30,
    "test_zoo_gate.py": 95, "test_shape_warmers.py": 40,
    "test_diagnose_overwrite.py": 10, "test_diagnose.py": 30, "test_search_names.py": 30,
    "test_own_call.py": 30, "test_declared_blocks.py": 25, "test_search.py": 25, "test_fewest_recompiles.py": 20,
    "test_library_models_genpaired.py": 25, "test_attention_action.py": 30,
    "test_library_breaks.py": 20, "test_distributed_cli.py": 25, "test_blocks.py": 20,
    "test_messages.py": 15, "test_memory_sweep.py": 15, "test_inserted_names_bound.py": 10,
    "test_hostile_plans.py": 10, "test_check_rules.py": 10, "test_check_project.py": 10,
    "test_distributed_run.py": 20, "test_diagnose_own_compile.py": 15,
}


def pytest_configure(config):
    """xdist's own order (files with the most tests first) put the end-to-end files, which have
    few tests each and take the longest, last: :func:`pytest_collection_modifyitems` orders the
    files instead (``--no-loadscope-reorder``, set here so the README's command stays as it is)."""
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Items of the files in :data:`FILE_SECONDS` first, longest file first; within a file, and
    among the files not listed, the collection order (a stable sort)."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0.0))
