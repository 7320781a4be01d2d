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


def test_a_count_knob_set_by_the_environment_is_read_with_its_variable(monkeypatch):
    """``TORCHDYNAMO_SUPPRESS_ERRORS=1`` makes ``suppress_errors`` True as torch's default at import,
    so the knob reading (``read``) cannot see it; a fresh interpreter with the variable set (torch
    imported under it, as diagnose's process is) reads the knob, its value and the variable, and
    the terminal summary's line names all three."""
    import json
    import os
    import subprocess
    import sys

    monkeypatch.setenv("TORCHDYNAMO_SUPPRESS_ERRORS", "1")
    code = ("import json; from rewriter.diagnose.dynamo_settings import counts_line, environment_settings, read; "
            "env = [s.to_json() for s in environment_settings()]; "
            "print(json.dumps([[s.name for s in read()], env, counts_line([], env)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    own, env, line = json.loads(done.stdout.strip().splitlines()[-1])
    assert "suppress_errors" not in own  # torch's default now: the knob reading alone says nothing
    assert [(s["name"], s["value"], s["default"], s["variable"]) for s in env] == [
        ("suppress_errors", True, False, "TORCHDYNAMO_SUPPRESS_ERRORS=1")], env
    assert line == ("the program's torch._dynamo.config: suppress_errors = True (set by TORCHDYNAMO_SUPPRESS_ERRORS=1 "
                    "in the environment; torch's default: False): the ladder's graph breaks and recompiles are counted "
                    "under this setting (report.md's \"The program's torch._dynamo.config\" says what each changes)")


def test_a_knob_the_program_set_itself_is_said_once_as_the_program_set_it():
    """The environment's value is the default the program's own setting departs from: the line
    says the program's setting, once."""
    import torch._dynamo.config as config

    from rewriter.diagnose.dynamo_settings import counts_line, environment_settings

    with config.patch(capture_scalar_outputs=True):
        env = [s.to_json() for s in environment_settings({"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1", "PATH": "/bin"})]
    assert [(s["name"], s["variable"]) for s in env] == [("capture_scalar_outputs", "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1")]
    own = [{"name": "capture_scalar_outputs", "value": False, "default": True}]
    line = counts_line(own, env)
    assert line is not None and "capture_scalar_outputs = False (torch's default: True)" in line and "environment" not in line
    assert environment_settings({"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "0"}) == []  # torch's default: nothing set
    assert environment({"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES": "0"}) == {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES": "0"}


def test_the_terminal_summary_prints_the_knob_the_environment_set():
    """diagnose's summary (report.terminal) prints the line for ``meta.dynamo_config_environment``
    where the program set no knob itself."""
    import io

    from rich.console import Console

    from rewriter.diagnose.report import terminal

    text = io.StringIO()
    env = [{"name": "suppress_errors", "value": True, "default": False, "variable": "TORCHDYNAMO_SUPPRESS_ERRORS=1"}]
    terminal(Console(file=text, width=400), [], [], None, {}, dynamo_config=[], environment_config=env)
    notes = [ln for ln in text.getvalue().splitlines() if ln.startswith("note:")]
    assert notes == ["note: the program's torch._dynamo.config: suppress_errors = True (set by "
                     "TORCHDYNAMO_SUPPRESS_ERRORS=1 in the environment; torch's default: False): the ladder's graph "
                     "breaks and recompiles are counted under this setting (report.md's \"The program's "
                     "torch._dynamo.config\" says what each changes)"], text.getvalue()
