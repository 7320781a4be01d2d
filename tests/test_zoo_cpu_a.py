"""Every zoo family at tiny size diagnoses, rewrites, applies and runs with the same outputs (part 1 of 3).

The families are benchmarks/zoo.py's, at its ``--smoke`` size (float32 on the CPU, the search's
compiles on the ``eager`` backend); the procedure and the comparison are tests/zoo_cpu.py's. timm's
families (resnet50, convnext) are skipped: timm is not installed here, so they cannot load. The
other families are in test_zoo_cpu_b.py and test_zoo_cpu_c.py (about 3 minutes of CPU each, so
xdist's workers share them).
"""

from __future__ import annotations

import pytest
from zoo_cpu import assert_family, part

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", part(0))
def test_family_plan_applies_and_keeps_outputs(name, tmp_path, monkeypatch):
    """diagnose, rewrite --apply, then the rewritten model gives the original's outputs at every smoke
    shape (an empty plan: the tree byte for byte as it was, and the model runs)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the CLI's processes on one core each
    assert_family(name, tmp_path)
