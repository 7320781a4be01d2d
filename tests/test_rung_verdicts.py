"""The planner and the search read a rung's verdict from the rung (its own threshold), never a retyped one."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.diagnose.context import Context
from rewriter.diagnose.rung import RungResult
from rewriter.diagnose.rungs import batch_scaling, op_mix


def _ctx(name: str, status: str = "ok", **measurement: float) -> Context:
    ctx = Context(session=None, out_dir=Path("."))  # type: ignore[arg-type]
    ctx.results[name] = RungResult(name, name, status=status, measurement=dict(measurement))
    return ctx


@pytest.mark.parametrize(("share", "bound"), [(batch_scaling.HIGH, True), (0.149, False), (0.6, True)])
def test_launch_bound_is_the_batch_scaling_rungs_high_band(share, bound):
    assert batch_scaling.launch_bound(_ctx("batch_scaling", fixed_share=share)) is bound


@pytest.mark.parametrize(("share", "dominated"), [(op_mix.GEMM_DOMINATED, True), (0.799, False), (0.95, True)])
def test_gemm_dominated_is_the_op_mix_rungs_threshold(share, dominated):
    assert op_mix.gemm_dominated(_ctx("op_mix", gemm_share=share)) is dominated


def test_a_rung_that_did_not_run_ok_gives_no_verdict():
    assert not batch_scaling.launch_bound(_ctx("batch_scaling", "error", fixed_share=0.9))
    assert not op_mix.gemm_dominated(_ctx("op_mix", "skipped", gemm_share=0.9))
    assert not batch_scaling.launch_bound(Context(session=None, out_dir=Path(".")))  # type: ignore[arg-type]
