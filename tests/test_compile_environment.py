"""diagnose's report lists the environment variables torch's compile stack reads at import
(``TORCHDYNAMO_SUPPRESS_ERRORS=1`` makes ``suppress_errors`` True *as its default*, so the knob
reading cannot tell it from torch's own default): the report names the variable instead."""

from __future__ import annotations

from rewriter.diagnose.dynamo_settings import environment
from rewriter.diagnose.report import dynamo_config_markdown


def test_only_the_compile_stacks_variables_are_read_in_name_order():
    env = {"TORCHINDUCTOR_CACHE_DIR": "/c", "PATH": "/bin", "TORCHDYNAMO_SUPPRESS_ERRORS": "1",
           "TORCH_COMPILE_DEBUG": "1", "TORCH_LOGS": "+dynamo", "OMP_NUM_THREADS": "1"}
    assert list(environment(env).items()) == [("TORCHDYNAMO_SUPPRESS_ERRORS", "1"), ("TORCHINDUCTOR_CACHE_DIR", "/c"),
                                              ("TORCH_COMPILE_DEBUG", "1")]


def test_the_process_environment_is_read_where_none_is_given(monkeypatch):
    monkeypatch.setenv("TORCHDYNAMO_SUPPRESS_ERRORS", "1")
    assert environment()["TORCHDYNAMO_SUPPRESS_ERRORS"] == "1"


def test_the_report_section_lists_the_variables_beside_the_knobs():
    knob = {"text": "torch._dynamo.config.recompile_limit = 64 (torch's default: 8)"}
    md = "\n".join(dynamo_config_markdown([knob], {"TORCHDYNAMO_SUPPRESS_ERRORS": "1"}))
    assert md.startswith("## The program's torch._dynamo.config")
    assert "- torch._dynamo.config.recompile_limit = 64 (torch's default: 8)" in md
    assert "- `TORCHDYNAMO_SUPPRESS_ERRORS=1`" in md and "not listed as set away from its default" in md
    only_env = dynamo_config_markdown([], {"TORCHDYNAMO_SUPPRESS_ERRORS": "1"})
    assert only_env[0] == "## The program's torch._dynamo.config" and "ran under them" not in "\n".join(only_env)
    assert dynamo_config_markdown([], {}) == [] and dynamo_config_markdown(None) == []
