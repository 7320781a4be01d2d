"""The advisory ``distributed`` plan action: it validates like every action (file:line errors,
near names), ``rewrite`` reports it as not written and writes nothing for it, and several may
point at one function (they are alternatives a person picks from)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewriter.errors import StackpartError
from rewriter.plan import parse_plan
from rewriter.rewrite.transform import plan_rewrite

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt" / "src"

BASE = """version: 1
actions:
  - action: compile
    target: model.py::Block
"""

ADVISORY = """  - action: distributed
    target: harness.py::build_model
    wrapper: ddp
    settings: {bucket_cap_mb: 4}
    why: "all_reduce is 60% of the step, 10% overlapped"
  - action: distributed
    target: harness.py::build_model
    wrapper: ddp
    settings: {gradient_accumulation: 4}
"""


@pytest.fixture
def src(tmp_path: Path) -> Path:
    dest = tmp_path / "src"
    shutil.copytree(EXAMPLE, dest)
    return dest


def test_rewrite_reports_distributed_as_advisory_and_writes_nothing_for_it(src: Path) -> None:
    with_advice = plan_rewrite(parse_plan(BASE + ADVISORY), src)
    without = plan_rewrite(parse_plan(BASE), src)
    assert with_advice.diff() == without.diff() != ""
    assert [i for i, _ in with_advice.skipped] == [1, 2]
    assert all("advisory" in reason and "not a source edit" in reason for _, reason in with_advice.skipped)


def test_distributed_target_must_resolve(src: Path) -> None:
    plan = BASE + ADVISORY.replace("harness.py::build_model", "harness.py::build_modle", 1)
    with pytest.raises(StackpartError) as err:
        plan_rewrite(parse_plan(plan), src)
    assert err.value.line == 5 and "build_model" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("settings", "wrapper", "expected"),
    [
        ("{bucket_cap: 4}", "ddp", "unknown setting 'bucket_cap' for ddp; expected one of bucket_cap_mb"),
        ("{reshard_after_forward: false}", "ddp", "unknown setting 'reshard_after_forward' for ddp"),
        ("{bucket_cap_mb: 0}", "ddp", "bucket_cap_mb: expected a size in MB > 0, got 0"),
        ("{gradient_accumulation: 1}", "fsdp2", "gradient_accumulation: expected an integer >= 2"),
        ("{reshard_after_forward: 2}", "fsdp2", "reshard_after_forward: expected true or false"),
        ("{parallelism: fsdp2}", "fsdp2", "parallelism: expected one of 'ddp', 'hsdp'"),
        ("{}", "ddp", "settings"),
    ],
)
def test_bad_settings_name_the_line_and_what_was_expected(settings: str, wrapper: str, expected: str) -> None:
    text = f"""version: 1
actions:
  - action: distributed
    target: harness.py::build_model
    wrapper: {wrapper}
    settings: {settings}
"""
    with pytest.raises(StackpartError) as err:
        parse_plan(text)
    assert err.value.line == 6
    assert expected in str(err.value)


def test_unknown_wrapper_is_refused() -> None:
    text = "version: 1\nactions:\n  - action: distributed\n    target: h.py::f\n    wrapper: deepspeed\n    settings: {x: 1}\n"
    with pytest.raises(StackpartError) as err:
        parse_plan(text)
    assert err.value.line == 5 and "wrapper" in err.value.message
