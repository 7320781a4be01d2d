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
