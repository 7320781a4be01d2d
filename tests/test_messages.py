"""Every message says what was measured, the device an unset harness runs
on and the CPU threads are recorded, progress is plain lines without a terminal, and everything a
user can get wrong on the command line is one line, exit 2, with a near name.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL

PLAN = """\
version: 1
harness:
  file: harness.py
  shapes:
    - {batch: 2}
actions:
  - action: compile
    target: model.py::Block
    options: {backend: eager}
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """``tmp/plan.yaml`` (no device named) and ``tmp/src`` with a two-block model; cwd is tmp."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(NET_MODEL)
    (src / "harness.py").write_text(NET_HARNESS)
    (tmp_path / "plan.yaml").write_text(PLAN)
    monkeypatch.chdir(tmp_path)
    return tmp_path, src


def one_line(capsys, argv: list[str]) -> str:
    """Run the CLI; assert exit 2, nothing on stdout, exactly one line on stderr; return it."""
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["diagnose", "validate", "rewrite"])
def test_a_src_that_is_a_file_is_one_line_naming_its_folder(tree, capsys, command):
    flag = "--harness" if command == "diagnose" else "--plan"
    line = one_line(capsys, [command, flag, "plan.yaml", "src/model.py"])
    assert line == "error: src/model.py: SRC is a file; expected the folder of the model's source (pass its folder, 'src')"


@pytest.mark.parametrize("command", ["diagnose", "validate", "rewrite"])
def test_a_src_that_does_not_exist_is_one_line_with_the_near_folder(tree, capsys, command):
    flag = "--harness" if command == "diagnose" else "--plan"
    line = one_line(capsys, [command, flag, "plan.yaml", "srcc"])
    assert line == "error: srcc: SRC does not exist; expected the folder of the model's source (did you mean 'src'?)"


@pytest.mark.parametrize("src, line", [
    ("srcc", "error: srcc: SRC does not exist; expected the folder of the model's source (did you mean 'src'?)"),
    ("src/model.py", "error: src/model.py: SRC is a file; expected the folder of the model's source (pass its folder, 'src')"),
])
@pytest.mark.parametrize("plan", [True, False])
def test_check_src_is_refused_in_the_same_line_as_the_other_commands_src(tree, capsys, src, line, plan):
    """``check --src`` took click's path type: a file was "Invalid value for '--src': Directory
    'src/model.py' is a file." and a missing folder passed unless a plan read it."""
    argv = ["check", "--src", src, "src/model.py"]
    assert one_line(capsys, argv[:1] + (["--plan", "plan.yaml"] if plan else []) + argv[1:]) == line


@pytest.mark.parametrize(
    "flag, value, near",
    [("--mode", "train", "training"), ("--dtype", "bf16", "bfloat16")],
)
def test_a_mistyped_choice_is_one_line_with_the_near_choice(tree, capsys, flag, value, near):
    line = one_line(capsys, ["diagnose", "--harness", "harness.py", "src", flag, value])
    assert line.startswith(f"error: Invalid value for '{flag}': '{value}' is not one of ")
    assert line.endswith(f"(did you mean '{near}'?)")
    assert not Path("plan.yaml.bak").exists() and not Path("stackpart-diagnose").exists()


def test_another_usage_error_is_one_line_pointing_at_help(tree, capsys):
    line = one_line(capsys, ["rewrite", "--plan", "plan.yaml", "src", "--apply", "--check"])
    assert line == "error: --apply and --check exclude each other (see 'stackpart rewrite --help')"


def test_a_mistyped_harness_path_gets_the_near_name(tree, capsys):
    line = one_line(capsys, ["diagnose", "--harness", "harnes.py", "src", "--device", "cpu", "-o", "out/plan.yaml"])
    assert line == "error: harnes.py: harness file not found under SRC (did you mean 'harness.py'?)"


@pytest.mark.parametrize("argv", [["diagnose", "--harness", "plna.yaml", "src", "-o", "out/plan.yaml"], ["rewrite", "--plan", "plna.yaml", "src"],
                                  ["validate", "--plan", "plna.yaml", "src"]])
def test_a_mistyped_plan_path_gets_the_near_name(tree, capsys, argv):
    line = one_line(capsys, argv)
    assert line == "error: plna.yaml: cannot read plan: no such file (did you mean 'plan.yaml'?)"


@pytest.fixture
def no_child(monkeypatch):
    """Fail the test if validate starts any measurement child."""
    from rewriter.engine import runner

    def refuse(*args, **kwargs):
        raise AssertionError("a child was started before the harness was checked")

    monkeypatch.setattr(runner.ServedChild, "__init__", refuse)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("  shapes:\n    - {batch: 2}\n", "  shapes:\n    - {btch: 2}\n"),
         "error: plan.yaml:5:8: harness.shapes[0]: make_inputs() has no parameter 'btch' (did you mean 'batch'?)"),
        (("  file: harness.py\n", "  file: harness.py\n  model: build_modle\n"),
         "error: plan.yaml:4:3: harness.model: harness.py defines no callable 'build_modle' (did you mean 'build_model'?)"),
        (("  file: harness.py\n", "  file: harnes.py\n"),
         "error: plan.yaml:3:3: harness.file: harnes.py not found under SRC (src) (did you mean 'harness.py'?)"),
    ],
    ids=["shape-key", "model-callable", "harness-file"],
)
def test_validate_checks_the_harness_at_the_plan_line_before_any_child(tree, capsys, no_child, edit, expected):
    base, _ = tree
    plan = base / "plan.yaml"
    plan.write_text(plan.read_text().replace(*edit))
    line = one_line(capsys, ["validate", "--plan", "plan.yaml", "src", "--out", "report"])
    assert line == expected
    assert not (base / "report").exists()


def test_the_static_harness_check_accepts_what_only_running_can_judge(tmp_path):
    """An imported factory, ``**kwargs`` and a name bound under ``if`` pass the static check (the
    child judges them); a name bound nowhere does not."""
    from rewriter.errors import StackpartError
    from rewriter.harness import check_harness
    from rewriter.plan import parse_plan

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(textwrap.dedent("""\
        from model import build_model
        import sys
        if sys.version_info >= (3, 8):
            def make_inputs(**shape):
                return ()
    """))
    text = "version: 1\nharness:\n  file: harness.py\n  shapes:\n    - {anything: 1}\n"
    check_harness(parse_plan(text), src)
    with pytest.raises(StackpartError, match=r"defines no callable 'make_input'"):
        check_harness(parse_plan(text.replace("harness.py\n", "harness.py\n  inputs: make_input\n")), src)


# --- the device --------------------------------------------------------------------------------


def test_an_unset_device_resolves_at_run_time_and_says_how():
    import torch

    from rewriter.harness import device_record, resolve_device
    from rewriter.plan import parse_plan

    unset = parse_plan("version: 1\nharness: {file: harness.py}\n").plan.harness
    assert unset.device is None
    used = resolve_device(unset).device
    assert used == ("cuda" if torch.cuda.is_available() else "cpu")
    rec = device_record(None, used)
    assert rec["requested_device"] == "unset" and rec["device"] == used
    assert rec["device_rule"] == ("harness.device unset: cuda when torch sees a CUDA device, else cpu ("
                                  + ("torch sees one)" if torch.cuda.is_available() else "torch sees none)"))
    assert device_record("cuda", "cpu")["device_rule"] == "harness.device is cuda, but torch sees no CUDA device: ran on cpu"
    assert device_record("cpu", "cpu")["device_rule"] == "harness.device is cpu"


@pytest.mark.skipif("__import__('torch').cuda.is_available()", reason="the CPU fallback of an unset device")
def test_validate_with_no_device_runs_on_cpu_and_records_it(tree, capsys):
    base, _ = tree
    code = main(["validate", "--plan", "plan.yaml", "src", "--out", "report", "--backend", "eager", "--reps", "2",
                 "--warmup", "1", "--baselines", "", "--timeout", "120"])
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((base / "report" / "validation.json").read_text())
    env = report["environment"]
    assert env["timed_on"] == "cpu" and env["requested_device"] == "unset"
    assert env["device_rule"] == "harness.device unset: cuda when torch sees a CUDA device, else cpu (torch sees none)"
    assert env["cpu_threads"]["count"] >= 1
    assert "although the harness asks for" not in err + json.dumps(report)
    md = (base / "report" / "validation.md").read_text()
    assert "(harness.device unset: cuda when torch sees a CUDA device, else cpu (torch sees none))" in md
    assert env["cpu_threads"]["text"] in md
    # progress came as plain lines while it ran (stderr is not a terminal here)
    assert "validate: eager: cold phase done" in err and "validate: plan: cold phase done" in err


@pytest.mark.skipif("__import__('torch').cuda.is_available()", reason="the CPU fallback of an unset device")
def test_diagnose_with_no_device_records_it_threads_and_prints_plain_progress(tree, capsys, monkeypatch):
    base, _ = tree
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    import torch

    before = torch.get_num_threads()
    try:
        code = main(["diagnose", "--harness", "plan.yaml", "src", "-o", "out/plan.yaml", "--no-search", "-v"])
    finally:
        after = torch.get_num_threads()
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((base / "out" / "stackpart-diagnose" / "report.json").read_text())
    assert report["device"] == "cpu" and report["requested_device"] == "unset"
    from rewriter.threads import available_cpus

    expected = max(1, available_cpus() // 2)
    assert report["cpu_threads"] == {"count": expected, "source": "rule", "cpus": available_cpus(), "text":
                                     f"{expected} CPU thread(s) (OMP_NUM_THREADS unset: half of the {available_cpus()} CPU(s) available, at least 1)"}
    assert after == expected
    md = (base / "out" / "stackpart-diagnose" / "report.md").read_text()
    assert report["cpu_threads"]["text"] in md and report["device_rule"] in md
    lines = err.splitlines()  # -v: a line per rung (also in diagnose.log without it)
    assert "diagnose: setup: building the model" in lines
    assert "diagnose: rung batch_scaling (1/11) ..." in lines
    assert any(line.startswith("diagnose: rung granularity: ok in ") for line in lines)


# --- CPU threads -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "environ, cpus, count, source",
    [({}, 2, 1, "rule"), ({}, 1, 1, "rule"), ({}, 16, 8, "rule"), ({"OMP_NUM_THREADS": "3"}, 16, 3, "OMP_NUM_THREADS"),
     ({"OMP_NUM_THREADS": "x"}, 4, 2, "rule"), ({"OMP_NUM_THREADS": "0"}, 4, 2, "rule")],
)
def test_the_thread_rule(environ, cpus, count, source):
    from rewriter.threads import cpu_threads

    rec = cpu_threads(environ, cpus)
    assert (rec["count"], rec["source"], rec["cpus"]) == (count, source, cpus)


def test_a_cpu_child_gets_the_rule_unless_the_user_set_the_variable():
    from rewriter.threads import available_cpus, child_env_threads

    env: dict[str, str] = {}
    child_env_threads(env)
    assert env["OMP_NUM_THREADS"] == str(max(1, available_cpus() // 2))
    mine = {"OMP_NUM_THREADS": "5"}
    assert child_env_threads(mine)["source"] == "OMP_NUM_THREADS" and mine == {"OMP_NUM_THREADS": "5"}


# --- messages ----------------------------------------------------------------------------------


def test_a_zero_second_compile_is_a_measurement_problem_not_a_verdict():
    from rewriter.engine.amortize import amortize
    from rewriter.engine.verdict import speed_failures

    a = amortize(0.010, 0.008, 0.0, 2, 1, runs=1000, restarts=1)
    assert a["verdict"] == ("compile cost not measured: 2 compile(s) counted, but the cold first call took no longer "
                            "than a steady call (0 s of compile); break-even unknown, not gated")
    assert a["amortized"] is None and a["break_even_runs"] == "unknown" and a["compile_measured"] is False
    assert speed_failures({"plan": 8.0, "eager": 10.0}, 0.95, a) == []
    nothing = amortize(0.010, 0.008, 0.0, 0, 0, runs=None, restarts=1)
    assert nothing["verdict"] == "nothing compiled: no compile cost to pay back"
    measured = amortize(0.010, 0.008, 2.0, 1, 1, runs=None, restarts=1)
    assert measured["compile_measured"] is True and math.isclose(measured["break_even_runs"], 1000.0)


def test_compile_seconds_keep_their_digits_and_zero_says_not_measured():
    from rewriter.diagnose.decide import compile_text

    assert compile_text({"compile_s_per_start": 0.04}) == "0.040 s compile per start"
    assert compile_text({"compile_s_per_start": 1.234}) == "1.23 s compile per start"
    assert compile_text({"compile_s_per_start": 12.34}, restarts=3) == "37.0 s compile per start x 3 restart(s)"
    assert compile_text({"compile_s_per_start": 0.0, "compile": {"unique_graphs": 2}}).startswith("compile cost not measured")


def test_an_unlocated_finding_reads_no_line_under_src_not_a_question_mark():
    from rewriter.diagnose.report import markdown
    from rewriter.diagnose.rung import Finding, RungResult

    f = Finding("graph_break", "data-dependent branch")
    assert f.where == "no line under SRC"
    r = RungResult("graph_breaks", "t", findings=[f, Finding("graph_break", "x", "model.py", 3)])
    md = markdown({"harness": {"file": "harness.py"}}, [r], None, [], [], None, None)
    assert "- no line under SRC (graph_breaks, graph_break): data-dependent branch" in md
    assert "- `model.py:3` (graph_breaks, graph_break): x" in md
    assert "`?`" not in md


class _Outside:  # a class whose module is not under SRC
    pass


def test_a_whole_model_why_says_what_the_granularity_rung_found():
    from rewriter.diagnose.planner import _unit_evidence

    assert _unit_evidence(None, {}) == "no repeated block found (a ModuleList/Sequential of 2+ modules of one class)"
    block = {"name": "mixers", "cls": _Outside, "modules": [1, 2, 3, 4], "target": "model.py::Mixer"}
    assert _unit_evidence(block, {"block": "mixers", "share": 0.83}) == "repeated block 4 x _Outside in mixers = 83% of the step"
    class Local:  # defined in a function: not importable by path
        pass

    outside = dict(block, cls=Local, target=None)
    assert _unit_evidence(outside, {"block": "mixers", "share": 0.83}) == (
        f"repeated block 4 x Local in mixers = 83% of the step, defined outside SRC ({__name__}) and not importable "
        "by path: no per-block target")
    import json.decoder

    installed = dict(block, cls=json.decoder.JSONDecoder, target=None)  # any importable class stands in for a library's
    assert _unit_evidence(installed, {"block": "mixers", "share": 0.83}) == (
        "repeated block 4 x JSONDecoder in mixers = 83% of the step, in an installed package (json.decoder:JSONDecoder: "
        "the per-block candidate applies it from the plan's site)")


def test_when_the_whole_model_wins_the_why_gives_the_per_block_figure():
    from rewriter.diagnose.candidates import Candidate
    from rewriter.diagnose.decide import Choice
    from rewriter.diagnose.search import SearchOutcome, annotated
    from rewriter.plan import CompileAction, Plan

    whole = Plan(version=1, actions=[CompileAction(action="compile", target="model.py::Net", strategy="whole", why="whole-model compile")])
    block = Plan(version=1, actions=[CompileAction(action="compile", target="model.py::Mixer")])
    out = SearchOutcome([Candidate("as-is", Plan(version=1)), Candidate("whole", whole), Candidate("per-block", block)])
    out.rows = {"as-is": {"step_ms": 10.0}, "whole": {"step_ms": 6.0, "compile_s_per_start": 3.0},
                "per-block": {"step_ms": 7.25, "compile_s_per_start": 1.0}}
    out.choice = Choice("whole", "...", {"whole": "chosen", "per-block": "net 2,749 s < 3,997 s of 'whole'", "as-is": "x"})
    [action] = annotated(out).actions
    assert action.why == ("whole-model compile; search: 'whole' chosen of 3 plans timed: 6.000 ms/step vs 10.000 as is, "
                          "3.00 s compile per start; 'per-block' measured 7.250 ms/step: net 2,749 s < 3,997 s of 'whole'")


def test_an_unmarkable_block_input_names_the_owner_not_none():
    import torch.nn as nn

    from rewriter.diagnose.planner import _mark_dynamic

    class Owner(nn.Module):
        pass

    notes: list[str] = []
    block = {"owner": Owner(), "owner_target": None, "attr": "blocks"}
    rc = {"recompiles": 2, "value_guard_recompiles": 0, "varying_block_dims": [{"arg": 0, "dim": 1, "sizes": [3, 4]}]}
    _mark_dynamic([], notes, block, rc)
    [note] = notes
    assert "None" not in note
    assert "block input 0 dim 1 (not a name bound in " in note and "Owner.forward, which is defined outside SRC)" in note


def test_a_long_progress_line_keeps_its_start_and_its_end():
    from rewriter.terminal import ELIDED, PROGRESS_LIMIT, progress_line

    short = "plan: cold phase done: 1.234 s compile per start, 2 graph(s), 0 recompile(s)"
    assert progress_line(short) == short
    long = "plan: recompiled after warm-up: " + "guard " * 100 + "-> 3 graph(s), 5 recompile(s)"
    line = progress_line(long)
    assert len(line) == PROGRESS_LIMIT and ELIDED in line
    assert line.startswith("plan: recompiled after warm-up: guard") and line.endswith("-> 3 graph(s), 5 recompile(s)")


def test_validate_prints_the_end_of_a_long_problem_line(capsys):
    """validate's progress cut a child's problems at 300 characters: the figures at the end were lost."""
    from rewriter.validate.command import _progress

    problem = "recompiled after warm-up at shape {'batch': 4}: " + "size guard failed; " * 30 + "3 recompile(s) in 12 step(s)"
    _progress("plan", "cold", {"problems": [problem]})
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("validate: plan: recompiled after warm-up") and line.endswith("3 recompile(s) in 12 step(s)"), line


def test_a_redirected_console_is_wide_enough_for_the_summarys_reasons(monkeypatch):
    """rich gives a console that is not a terminal 80 columns, which cut every note's file:line with
    an ellipsis in a CI log; COLUMNS still decides where the user set it."""
    from rewriter import terminal

    terminal.stderr.cache_clear()
    monkeypatch.delenv("COLUMNS", raising=False)
    try:
        assert terminal.stderr().width == terminal.REDIRECTED_WIDTH  # pytest's stderr is not a terminal
        terminal.stderr.cache_clear()
        monkeypatch.setenv("COLUMNS", "100")
        assert terminal.stderr().width == 100
    finally:
        terminal.stderr.cache_clear()
