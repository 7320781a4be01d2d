"""A plan's ``harness:`` field that the harness file does not honour (a callable it does not define,
a shape it repeats once its defaults apply) is one error at the plan's line of that field, in
diagnose (``--harness plan.yaml``) and validate alike, exit 2, nothing written; the same field given
by a flag names the flag and the harness file."""

from __future__ import annotations

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL

PLAN = """\
version: 1
harness:
  file: harness.py
{field}
actions:
  - action: compile
    target: model.py::Block
    options: {{backend: eager}}
"""


def _tree(tmp_path, monkeypatch, field: str):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(NET_MODEL)
    (src / "harness.py").write_text(NET_HARNESS)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(field=field))
    return plan, src


MISSPELT = "  model: build_modle\n  shapes:\n    - {batch: 2}"
REPEATED = "  shapes:\n    - {batch: 2}\n    - {}"


def test_diagnose_names_the_plans_line_of_a_callable_the_harness_lacks(tmp_path, capsys, monkeypatch):
    plan, src = _tree(tmp_path, monkeypatch, MISSPELT)
    out = tmp_path / "out.yaml"
    assert main(["diagnose", "--harness", str(plan), str(src), "-o", str(out), "--no-search"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"error: {plan}:4:3: harness.model: harness.py defines no callable 'build_modle' "
            "(did you mean 'build_model'?)") in err, err
    assert not out.exists()


def test_diagnose_names_the_plans_line_of_a_repeated_shape(tmp_path, capsys, monkeypatch):
    plan, src = _tree(tmp_path, monkeypatch, REPEATED)
    out = tmp_path / "out.yaml"
    assert main(["diagnose", "--harness", str(plan), str(src), "-o", str(out), "--no-search"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: {plan}:6:7: harness.shapes[1] is the same shape as harness.shapes[0]" in err, err
    assert not out.exists()


def test_validate_names_the_plans_line_of_a_repeated_shape_and_writes_no_report(tmp_path, capsys, monkeypatch):
    plan, src = _tree(tmp_path, monkeypatch, REPEATED)
    code = main(["validate", "--plan", str(plan), str(src), "--timeout", "120", "--backend", "eager",
                 "--out", str(tmp_path / "r")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert f"error: {plan}:6:7: harness.shapes[1] is the same shape as harness.shapes[0]" in err, err
    assert not (tmp_path / "r").exists()


def test_a_field_given_by_a_flag_names_the_flag_and_the_harness_file(tmp_path, capsys, monkeypatch):
    plan, src = _tree(tmp_path, monkeypatch, "  shapes:\n    - {batch: 2}")
    out = tmp_path / "out.yaml"
    assert main(["diagnose", "--harness", str(plan), str(src), "-o", str(out), "--no-search",
                 "--model", "build_modle"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: harness.py: --model: harness.py defines no callable 'build_modle'" in err, err


def test_a_field_naming_something_other_than_a_callable_says_what_it_holds(tmp_path, capsys, monkeypatch):
    """``model: net`` where the harness binds ``net = Net()`` is no typo: the error says what the name
    holds and suggests no near name equal to it (a near callable instead)."""
    plan, src = _tree(tmp_path, monkeypatch, "  model: build\n  shapes:\n    - {batch: 2}")
    (src / "harness.py").write_text(NET_HARNESS + "\nbuild = 3\n")
    out = tmp_path / "out.yaml"
    assert main(["diagnose", "--harness", str(plan), str(src), "-o", str(out), "--no-search"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"error: {plan}:4:3: harness.model: harness.py binds 'build' to an object of type int, not a callable "
            "(expected a function that returns the model)") in err, err
    assert "did you mean 'build'?" not in err, err
    assert not out.exists()


def test_diagnose_names_the_plans_line_of_a_harness_file_that_is_not_there(tmp_path, capsys, monkeypatch):
    """``diagnose --harness plan.yaml`` whose ``harness.file`` is misspelt: the plan's ``file:`` line,
    as validate says it, with the near name; nothing written."""
    plan, src = _tree(tmp_path, monkeypatch, "  shapes:\n    - {batch: 2}")
    plan.write_text(plan.read_text().replace("file: harness.py", "file: harnes.py"))
    out = tmp_path / "out.yaml"
    assert main(["diagnose", "--harness", str(plan), str(src), "-o", str(out), "--no-search"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"error: {plan}:3:3: harness.file: harnes.py not found under SRC ({src}) "
            "(did you mean 'harness.py'?)") in err, err
    assert not out.exists() and not any(p.name.startswith("stackpart-diagnose") for p in tmp_path.iterdir())
    assert main(["validate", "--plan", str(plan), str(src)]) == 2
    assert " ".join(capsys.readouterr().err.split()).startswith(f"error: {plan}:3:3: harness.file: harnes.py")
