"""Fixtures shared by the test files."""

from __future__ import annotations

import pytest


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
