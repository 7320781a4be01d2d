"""validate's speed gate compares the plan with the program as it runs where the tree compiles itself.

diagnose's search decides against the program as it runs (its own compile included), and its
validation report gates that way; `validate` compared with compilation off only, so a plan that
made a slow compiled program faster, yet not faster than eager, was refused by `rewrite --apply`,
and a plan slower than the program's own compile passed. The engine is faked here: what is under
test is which variants validate asks for and how it judges their figures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rewriter.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"


def _fake_measure(steps: dict[str, float], seen: dict):
    from rewriter.engine.measure import Measurement

    def measure(spec, variants, opts, workdir, **kw):
        seen["variants"] = [(v.name, v.stance, v.prepare) for v in variants]
        m = Measurement()
        for v in variants:
            m.results[v.name] = {"step_ms": steps[v.name], "numerics": "ok" if v.name != "eager" else "reference",
                                 "problems": [], "compile": {}, "cold_first_call_s": 1.0, "compile_s_per_start": 1.0}
        m.timing = [{"shape": {"batch": 2, "seq": 16}, "timing": {
            v.name: {"n": 3, "median_ms": steps[v.name], "p10_ms": steps[v.name], "p90_ms": steps[v.name]}
            for v in variants}}]
        return m

    return measure


@pytest.fixture
def compiled_case(tmp_path):
    """The causal_bucket fixture with the harness's model compiled by the program itself."""
    shutil.copytree(FIXTURES / "causal_bucket", tmp_path / "case")
    harness = tmp_path / "case" / "src" / "harness.py"
    text = harness.read_text()
    assert "def build_model" in text
    harness.write_text(text + "\n\n_build = build_model\n\n\ndef build_model(**kw):\n"
                              "    return torch.compile(_build(**kw), backend=\"eager\")\n")
    if "import torch\n" not in text:
        harness.write_text("import torch\n" + harness.read_text())
    return tmp_path / "case"


def _validate(case: Path, out: Path) -> tuple[int, dict]:
    code = main(["validate", "--plan", str(case / "plan.yaml"), str(case / "src"), "--out", str(out),
                 "--speed-gate", "on", "--baselines", ""])
    return code, json.loads((out / "validation.json").read_text())


def test_a_plan_faster_than_the_program_as_it_runs_passes_though_eager_is_faster(compiled_case, tmp_path, monkeypatch, capsys):
    import rewriter.engine.measure as engine

    seen: dict = {}
    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 10.0, "as-is": 20.0, "plan": 15.0}, seen))
    code, report = _validate(compiled_case, tmp_path / "out")
    assert ("as-is", None, None) in seen["variants"], seen  # the program as it runs: no stance, nothing prepared
    assert seen["variants"][0] == ("eager", "force_eager", None)  # still the numerical reference
    assert code == 0, capsys.readouterr().err
    notes = report["verdict"]["notes"]
    assert any("harness.py:" in n and "'as-is' is the program as it runs" in n for n in notes), notes
    assert ("reported, not gated (the program as it runs is the baseline): slower than the program with compilation "
            "off: 15.000 ms vs 10.000 ms per step") in notes, notes


def test_a_plan_slower_than_the_program_as_it_runs_fails_though_faster_than_eager(compiled_case, tmp_path, monkeypatch):
    import rewriter.engine.measure as engine

    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 20.0, "as-is": 10.0, "plan": 15.0}, {}))
    code, report = _validate(compiled_case, tmp_path / "out")
    assert code == 1
    assert report["verdict"]["failures"] == ["slower than the program as it is: 15.000 ms vs 10.000 ms per step"]


def test_a_tree_that_does_not_compile_itself_is_gated_against_eager_alone(tmp_path, monkeypatch):
    import rewriter.engine.measure as engine

    shutil.copytree(FIXTURES / "causal_bucket", tmp_path / "case")
    seen: dict = {}
    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 10.0, "plan": 15.0}, seen))
    code, report = _validate(tmp_path / "case", tmp_path / "out")
    assert [name for name, _, _ in seen["variants"]] == ["eager", "plan"]  # no second run of the same program
    assert code == 1
    assert report["verdict"]["failures"] == ["slower than eager: 15.000 ms vs 10.000 ms per step"]


def test_a_plan_that_compiles_nothing_has_nothing_to_pay_back():
    """A plan that turns the program's compile off (or changes only the allocator) compiles
    nothing: a step a hair slower than eager is the speed rule's to judge, not "never pays back"."""
    from rewriter.engine.amortize import amortize

    a = amortize(0.0100, 0.0101, 0.0, 0, 0, runs=1000, restarts=1)
    assert a["amortized"] is True and a["verdict"].startswith("nothing compiled: no compile cost to pay back"), a
