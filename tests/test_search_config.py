"""The ``dynamo_config`` action: ``torch._dynamo.config`` knobs torch
recommends for a graph break the compiled code needs, as a plan action (schema, rewrite, check's
drift) and as the search's candidates, measured like any other (the engine's children count the
graph breaks with the config set in the candidate's tree). CPU, ``backend="eager"``, tiny models.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from programs import last_json, run_programs  # tests/programs.py: a program as `python SCRIPT` runs it

from rewriter.cli import main
from rewriter.diagnose.evidence import Evidence
from rewriter.diagnose.kinds.config import judge, knob_for
from rewriter.errors import StackpartError
from rewriter.plan import load_plan, parse_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ENTRY = "import torch\n\n\ndef main():\n    \"\"\"Run.\"\"\"\n    x = torch.ones(2)   # spacing kept\n    return x\n"


def _plan(settings: str) -> str:
    return f"version: 1\nactions:\n  - action: dynamo_config\n    target: run.py::main\n    settings:\n{settings}"


@pytest.mark.parametrize("settings, where, message", [
    ("      capture_scalar_output: true\n", "plan.yaml:6:7", "unknown setting 'capture_scalar_output'; expected one of capture_scalar_outputs"),
    ("      capture_scalar_outputs: 1\n", "plan.yaml:6:7", "actions[0].settings.capture_scalar_outputs: expected true or false, got 1"),
    ("      capture_scalar_outputs: \"true\"\n", "plan.yaml:6:7", "capture_scalar_outputs: expected true or false, got 'true'"),
    ("      {}\n", "plan.yaml:5:5", "expected at least one setting of capture_scalar_outputs"),
    ("      suppress_errors: true\n", "plan.yaml:6:7", "unknown setting 'suppress_errors'"),  # a real knob, not whitelisted
])
def test_a_bad_setting_is_an_error_at_its_line(settings, where, message):
    with pytest.raises(StackpartError) as exc:
        parse_plan(_plan(settings))
    assert str(exc.value).startswith(where) and message in str(exc.value), str(exc.value)


def test_a_key_the_torch_in_use_lacks_is_refused_with_exit_2_and_nothing_written(tmp_path, monkeypatch, capsys):
    """Checked against the torch that would be imported (its config source, read without importing
    torch); here a torch that has only capture_scalar_outputs is planted."""
    import rewriter.plan.loader as plan_mod

    monkeypatch.setattr(plan_mod, "dynamo_config_names", lambda: ("2.5.1", frozenset({"capture_scalar_outputs", "capture_dynamic_output_shape"})))
    (tmp_path / "run.py").write_text(ENTRY)
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan("      capture_scalar_outputs: true\n      capture_dynamic_output_shape_ops: true\n"))
    assert main(["rewrite", "--plan", str(plan), str(tmp_path), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err
    assert f"{plan}:7:7: actions[0].settings.capture_dynamic_output_shape_ops: expected a key of torch._dynamo.config; " \
           "the torch in use (2.5.1) has no 'capture_dynamic_output_shape_ops'" in err, err
    assert "capture_dynamic_output_shape" in err.split("has no", 1)[1]  # the near name
    assert (tmp_path / "run.py").read_text() == ENTRY


def test_the_installed_torch_has_both_knobs():
    from rewriter.plan import DYNAMO_CONFIG_KEYS, dynamo_config_names

    import torch._dynamo.config

    version, names = dynamo_config_names()
    assert version == torch.__version__
    for key in DYNAMO_CONFIG_KEYS:
        kind = int if key == "recompile_limit" else bool
        assert key in names and isinstance(getattr(torch._dynamo.config, key), kind), key


def test_config_names_are_the_assignments_not_names_in_strings_or_comments(tmp_path):
    """A torch's config names are read by parsing its config.py: a name written at the start of a
    line inside a docstring or a string, or in a comment, is no knob."""
    from rewriter.plan.loader import _config_names

    (tmp_path / "_dynamo").mkdir()
    (tmp_path / "_dynamo" / "config.py").write_text(
        '"""The knobs.\n\ncapture_in_docstring = True\n"""\n'
        "import os\n"
        "capture_scalar_outputs = os.environ.get('X') == '1'\n"
        "capture_annotated: bool = False\n"
        "if os.name:\n    capture_in_if = True\n"
        'NOTE = """\ncapture_in_string = True\n"""\n'
        "# capture_in_comment = True\n"
        "def helper():\n    capture_in_function = True\n"
    )
    (tmp_path / "version.py").write_text("__version__ = '9.9.9'\n")
    version, names = _config_names(tmp_path)
    assert version == "9.9.9"
    assert names == {"capture_scalar_outputs", "capture_annotated", "capture_in_if", "NOTE"}, names


def test_the_knobs_the_program_sets_are_its_assignments_not_lines_in_strings():
    """kinds.config._source_set reads the program's assignments from its syntax tree: a line
    inside a docstring or string, or a value set only under a condition, is not the program setting
    the knob; a chained or semicolon-separated assignment is."""
    import libcst as cst

    from rewriter.diagnose.kinds.config import _already_set, _source_set

    code = (
        '"""Usage:\n    torch._dynamo.config.capture_scalar_outputs = True\n"""\n'
        "import torch\n"
        'HELP = """\ntorch._dynamo.config.capture_dynamic_output_shape_ops = True\n"""\n'
        "torch._dynamo.config.capture_scalar_outputs = True if FAST else False\n"
        "# torch._dynamo.config.capture_scalar_outputs = True\n"
        "x = 1; torch._dynamo.config.capture_dynamic_output_shape_ops = True\n"
        "def setup():\n    a = torch._dynamo.config.capture_scalar_outputs = True\n"
    )
    facts = type("Facts", (), {"module": cst.parse_module(code)})()
    ctx = type("Ctx", (), {"evidence": Evidence(own_parsed=[("m.py", facts, None)])})()
    assert _source_set(ctx) == {"capture_dynamic_output_shape_ops": "m.py:10", "capture_scalar_outputs": "m.py:12"}
    # without a reading of the run, the knobs the program sets are the source's
    assert _already_set(ctx) == {"capture_dynamic_output_shape_ops": "set at m.py:10", "capture_scalar_outputs": "set at m.py:12"}


def test_the_knobs_the_program_runs_with_are_read_from_its_run_where_one_was_read():
    """The run's reading (dynamo_settings.read after setup) decides: a knob on as it ran is named by
    the line that sets it where SRC has one, else as computed; a line the run did not execute is none."""
    import libcst as cst

    from rewriter.diagnose.dynamo_settings import Setting
    from rewriter.diagnose.kinds.config import _already_set

    code = "import torch\n\ndef main():\n    torch._dynamo.config.capture_dynamic_output_shape_ops = True\n"
    facts = type("Facts", (), {"module": cst.parse_module(code)})()
    ran = [Setting("capture_scalar_outputs", True, False), Setting("suppress_errors", True, False)]
    ctx = type("Ctx", (), {"evidence": Evidence(own_parsed=[("m.py", facts, None)], dynamo_config=ran)})()
    assert _already_set(ctx) == {"capture_scalar_outputs": "set as it ran, by a value it computes"}
    ran.append(Setting("capture_dynamic_output_shape_ops", True, False))
    assert _already_set(ctx) == {"capture_scalar_outputs": "set as it ran, by a value it computes",
                                 "capture_dynamic_output_shape_ops": "set at m.py:4"}


def test_the_definitions_reader_has_a_public_name():
    from rewriter import library_targets

    assert library_targets.definitions.__doc__ and not hasattr(library_targets, "_definitions")


def test_rewrite_writes_one_line_is_idempotent_and_check_reports_drift(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "run.py").write_text(ENTRY)
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan("      capture_scalar_outputs: true\n"))
    (tmp_path / "pyproject.toml").write_text('[tool.stackpart]\nplan = "plan.yaml"\nsrc = "src"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["check", "src/run.py"]) == 1  # drift: the plan's line is missing
        assert "src/run.py:6:1: plan drift" in capsys.readouterr().out  # where the setting goes
        assert main(["rewrite", "--plan", "plan.yaml", "src"]) == 0
        diff = capsys.readouterr().out
        added = [ln for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        assert added == ["+    torch._dynamo.config.capture_scalar_outputs = True"], diff
        assert not [ln for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
        assert main(["rewrite", "--plan", "plan.yaml", "src", "--apply", "--no-validate"]) == 0
        text = (src / "run.py").read_text()
        assert text == ENTRY.replace('    """Run."""\n', '    """Run."""\n    torch._dynamo.config.capture_scalar_outputs = True\n')
        capsys.readouterr()
        assert main(["rewrite", "--plan", "plan.yaml", "src", "--check"]) == 0  # idempotent: nothing pending
        assert main(["check", "src/run.py"]) == 0
        (src / "run.py").write_text(ENTRY)  # the line removed by hand: drift again
        assert main(["check", "src/run.py"]) == 1
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("reason, knob", [
    ("Unsupported Tensor.item() call with capture_scalar_outputs=False Explanation: ...", "capture_scalar_outputs"),
    ("call_method TensorVariable() item () {}", "capture_scalar_outputs"),
    ("Data dependent operator Explanation: Operator `aten._local_scalar_dense.default` has a non-Tensor output", "capture_scalar_outputs"),
    ("Dynamic shape operator Explanation: Operator `aten.nonzero.default`'s output shape depends on input Tensor data.", "capture_dynamic_output_shape_ops"),
    ("aten._unique2.default", "capture_dynamic_output_shape_ops"),
    ("generic_jump TensorVariable()", None),  # a branch on a tensor's value: the config does not capture it
    ("Logger not supported for non-export cases", None),
])
def test_which_break_reasons_a_knob_captures(reason, knob):
    assert knob_for(reason) == knob


class _Ctx:
    def __init__(self, twins):  # noqa: ANN001
        self.evidence = Evidence(config_twins=twins)


def _row(graphs, breaks, sites=(), **kw):  # noqa: ANN001, ANN202
    return {"problems": [], "compile": {"unique_graphs": graphs, "graph_breaks": breaks, "graph_break_sites": list(sites)}, **kw}


def test_a_twin_is_pruned_unless_it_saw_fewer_graph_breaks():
    rows = {"a+capture_scalar_outputs": _row(1, 0), "a": _row(2, 1, ["m.py:3: item"]),
            # the jump on the captured value is logged, not counted (torch 2.13): not fewer breaks
            "b+capture_scalar_outputs": _row(2, 0, ["m.py:4: attempted to jump with SymNodeVariable()"]), "b": _row(3, 1, ["m.py:3: item"]),
            "c+capture_scalar_outputs": _row(1, 0), "c": {"problems": ["the rewritten model raised"], "error": "raised"}}
    lines = judge(_Ctx({"a+capture_scalar_outputs": "a", "b+capture_scalar_outputs": "b", "c+capture_scalar_outputs": "c"}), rows)
    assert "skipped" not in rows["a+capture_scalar_outputs"] and "skipped" not in rows["c+capture_scalar_outputs"]
    assert rows["b+capture_scalar_outputs"]["skipped"].startswith("pruned after measurement: the config kept no graph break")
    # the count said with both sources, so the status does not contradict the table's graph-breaks column (0)
    assert ("(1 graph break(s) seen: Dynamo's counter 0, its graph-break log 1 site(s), 2 graph(s), vs 1 and 3 for 'b' "
            "without it)") in rows["b+capture_scalar_outputs"]["skipped"]
    from rewriter.diagnose.report import short_status

    # on the terminal: what the twin was pruned for, not "same as as-is" (it changes SRC)
    assert short_status(rows["b+capture_scalar_outputs"]["skipped"]) == "config: no fewer breaks"
    assert lines == [f"b+capture_scalar_outputs: {rows['b+capture_scalar_outputs']['skipped']}"]


@pytest.fixture
def one_thread(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _search(tmp_path: Path, branch: bool = False):  # noqa: ANN202
    from rewriter.diagnose.runner import diagnose

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "search" / "scalar_read", src, ignore=shutil.ignore_patterns("plan.yaml", "__pycache__"))
    if branch:
        (src / "model.py").write_text((src / "model.py").read_text().replace("BRANCH = False", "BRANCH = True"))
    spec = load_plan(FIXTURES / "search" / "scalar_read" / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"graph_breaks", "granularity", "search"})
    return outcome.search, src, {r["candidate"]: r for r in outcome.search.table()}


def test_the_search_measures_capture_scalar_outputs_and_the_rewritten_program_runs_with_it(tmp_path, one_thread, capsys):
    found, src, rows = _search(tmp_path)
    names = [c.name for c in found.candidates]
    assert names.index("per-block+capture_scalar_outputs") == names.index("per-block") - 1, names
    # the engine's child ran the candidate's tree with the config set in it: Dynamo's counters there
    assert rows["per-block"]["graph_breaks"] >= 1 and rows["per-block+capture_scalar_outputs"]["graph_breaks"] == 0, rows
    assert rows["per-block+capture_scalar_outputs"]["graphs"] < rows["per-block"]["graphs"]
    assert rows["per-block+capture_scalar_outputs"]["numerics"] == "ok"
    assert found.choice.chosen == "per-block+capture_scalar_outputs", found.choice.status
    plan = load_plan(tmp_path / "plan.yaml").plan
    assert [(a.action, a.target) for a in plan.actions] == [("dynamo_config", "model.py::Net.__init__"), ("compile", "model.py::Block")]
    assert plan.actions[0].settings.capture_scalar_outputs is True and "Tensor.item()" in plan.actions[0].why
    # the chosen candidate's measurement is its validation report: apply goes through, and the
    # user's own program (not the harness) runs with the config and one graph per block
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(tmp_path / "plan.yaml"), str(src), "--apply"]) == 0, capsys.readouterr().err
    # as `python run.py` runs it (tests/programs.py), its block's compile on the eager backend: Dynamo's
    # counters are what it prints, without Inductor's C++ builds on the CPU
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    [result] = run_programs([{"script": src / "run.py", "args": [], "force_backend": "eager"}], env=env, timeout=120)
    ran = last_json(result, "run.py after the rewrite")
    assert ran["capture_scalar_outputs"] is True and ran["graph_breaks"] == 0 and ran["unique_graphs"] >= 1, ran


def test_a_config_that_keeps_no_break_in_the_graph_is_pruned_and_not_chosen(tmp_path, one_thread):
    """BRANCH: the block branches on the scalar it reads; with the config Dynamo breaks at the jump
    instead (logged, not counted), so the twin is no better than the plain per-block candidate."""
    found, _, rows = _search(tmp_path, branch=True)
    assert rows["per-block+capture_scalar_outputs"]["status"].startswith("pruned after measurement"), rows
    assert any(p.startswith("per-block+capture_scalar_outputs: pruned after measurement") for p in found.pruned), found.pruned
    assert found.choice.chosen == "per-block", found.choice.status
    assert not [a for a in load_plan(tmp_path / "plan.yaml").plan.actions if a.action == "dynamo_config"]


def test_on_a_program_that_compiles_itself_the_config_composes_with_its_compile(tmp_path, one_thread):
    """The model carries its own ``@torch.compile`` (the harness runs it) and a helper reads a scalar
    with ``.item()``: the twin of 'as-is+disable' sets the config instead of the disable, on top of
    the program's own compile (no second compile), and its child sees no graph break."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "diagnose" / "own_decorated", src, ignore=shutil.ignore_patterns("__pycache__"))
    model = (src / "model.py").read_text()
    (src / "model.py").write_text(model.replace("    if x.mean() > 0:\n        return x * 2\n    return x - 1\n",
                                                "    return x * x.mean().item()\n"))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"graph_breaks", "granularity", "search"})
    rows = {r["candidate"]: r for r in outcome.search.table()}
    assert rows["as-is+disable"]["graph_breaks"] >= 1 and rows["as-is+capture_scalar_outputs"]["graph_breaks"] == 0, rows
    assert outcome.search.choice.chosen == "as-is+capture_scalar_outputs", outcome.search.choice.status
    [action] = load_plan(tmp_path / "plan.yaml").plan.actions
    assert (action.action, action.target) == ("dynamo_config", "model.py::Net.__init__")


COMPUTED_MODEL = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return torch.relu(h) / (1.0 + sum(range((h > 0).sum().item())))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
'''

COMPUTED_HARNESS = '''import torch

from model import Net

CFG = {"scalars": True}


def build_model():
    torch._dynamo.config.capture_scalar_outputs = CFG["scalars"]
    return Net()


def make_inputs(batch: int = 2):
    return (torch.randn(batch, 8),)
'''


def test_a_knob_the_program_computes_is_not_proposed_again(tmp_path, one_thread):
    """The harness sets ``capture_scalar_outputs = CFG["scalars"]`` (no literal True for a reading of
    the source); under it ``range(t.item())`` still breaks, with a reason that quotes the ``.item()``
    line. No twin sets the knob again: the search's ``pruned`` says the program runs with it."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(COMPUTED_MODEL)
    (src / "harness.py").write_text(COMPUTED_HARNESS)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2}], mode=None, dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"graph_breaks", "granularity", "search"})
    gb = next(r for r in outcome.rungs if r.name == "graph_breaks")
    assert [knob_for(f.message) for f in gb.findings if f.kind == "graph_break"] == ["capture_scalar_outputs"], gb.findings
    names = [c.name for c in outcome.search.candidates]
    assert "per-block" in names and not [n for n in names if "capture_scalar_outputs" in n], names
    said = ("+capture_scalar_outputs: the program runs with torch._dynamo.config.capture_scalar_outputs = True already "
            "(set as it ran, by a value it computes; read after setup): the graph break(s) at model.py:12")
    assert any(p.startswith(said) for p in outcome.search.pruned), outcome.search.pruned
    assert not [a for a in load_plan(tmp_path / "plan.yaml").plan.actions if a.action == "dynamo_config"]


@pytest.mark.parametrize("line, after", [
    # the other value: only the value changes; the comment and the spacing stay
    ("    torch._dynamo.config.capture_scalar_outputs = False  # was off\n",
     "    torch._dynamo.config.capture_scalar_outputs = True  # was off\n"),
    ("    torch._dynamo.config.capture_scalar_outputs=False\n", "    torch._dynamo.config.capture_scalar_outputs=True\n"),
    # already so, spelled otherwise: left alone
    ("    torch._dynamo.config.capture_scalar_outputs = (True)  # on\n", None),
])
def test_a_line_the_program_already_has_is_edited_in_place(tmp_path, capsys, line, after):
    src = tmp_path / "src"
    src.mkdir()
    before = ENTRY.replace('    """Run."""\n', '    """Run."""\n' + line)
    (src / "run.py").write_text(before)
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan("      capture_scalar_outputs: true\n"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "run.py").read_text() == (before if after is None else before.replace(line, after))
    assert main(["rewrite", "--plan", str(plan), str(src), "--check"]) == 0


def test_the_programs_line_spelled_through_its_imports_is_edited_not_contradicted(tmp_path, capsys):
    """``from torch._dynamo import config`` then ``config.capture_scalar_outputs = False``: the same
    setting; a second line at the top would be overridden by the program's own a line later."""
    src = tmp_path / "src"
    src.mkdir()
    before = ENTRY.replace("import torch\n", "import torch\nfrom torch._dynamo import config\n").replace(
        '    """Run."""\n', '    """Run."""\n    config.capture_scalar_outputs = False\n')
    (src / "run.py").write_text(before)
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan("      capture_scalar_outputs: true\n"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "run.py").read_text() == before.replace("config.capture_scalar_outputs = False", "config.capture_scalar_outputs = True")


def test_a_value_the_program_computes_is_refused_at_its_line(tmp_path, capsys):
    """``= args.capture``: the program decides at run time; the plan does not silently override it."""
    src = tmp_path / "src"
    src.mkdir()
    before = ENTRY.replace('    """Run."""\n', '    """Run."""\n    torch._dynamo.config.capture_scalar_outputs = CAPTURE\n')
    (src / "run.py").write_text(before)
    plan = tmp_path / "plan.yaml"
    plan.write_text(_plan("      capture_scalar_outputs: true\n"))
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{plan}:3: actions[0] (dynamo_config run.py::main): run.py:6: capture_scalar_outputs = CAPTURE is not a literal" in err, err
    assert (src / "run.py").read_text() == before
