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


def _engine_amortization(steps: dict[str, float], compile_s: dict[str, float]):
    """A fake engine whose rows carry each variant's compile and the break-even the engine computes
    against its ``eager`` variant (compilation off in validate), as ``_Run.step_figures`` does."""
    from rewriter.engine.amortize import amortize
    from rewriter.engine.measure import Measurement

    def measure(spec, variants, opts, workdir, **kw):
        m = Measurement()
        runs, restarts = kw["amortization"]["runs"], kw["amortization"]["restarts"]  # the plan's: 1,000,000 x 1
        for v in variants:
            c = compile_s.get(v.name, 0.0)
            m.results[v.name] = {"step_ms": steps[v.name], "numerics": "ok" if v.name != "eager" else "reference",
                                 "problems": [], "compile": {"unique_graphs": 1 if c else 0}, "cold_first_call_s": 1.0 + c,
                                 "compile_s_per_start": c, "shape_buckets": 1 if c else 0}
            if v.name != "eager":
                m.results[v.name]["amortization"] = amortize(steps["eager"] / 1e3, steps[v.name] / 1e3, c, 1 if c else 0,
                                                             1 if c else 0, runs, restarts)
        m.timing = [{"shape": {"batch": 2, "seq": 16}, "timing": {
            v.name: {"n": 3, "median_ms": steps[v.name], "p10_ms": steps[v.name], "p90_ms": steps[v.name]}
            for v in variants}}]
        return m

    return measure


def test_the_amortization_gate_counts_the_programs_own_compile(compiled_case, tmp_path, monkeypatch, capsys):
    """A plan faster than the program as it runs that compiles for less than it is not refused as
    "not amortized: never pays back: not faster than eager": its break-even is against the program's
    own step and compile (the search's net), not against compilation off."""
    import rewriter.engine.measure as engine

    monkeypatch.setattr(engine, "measure", _engine_amortization({"eager": 10.0, "as-is": 20.0, "plan": 15.0},
                                                                {"as-is": 60.0, "plan": 10.0}))
    code, report = _validate(compiled_case, tmp_path / "out")
    assert code == 0, (report["verdict"], capsys.readouterr().err)
    amort = report["variants"]["plan"]["amortization"]
    assert amort["amortized"] is True and amort["reference_compile_s_per_start"] == 60.0, amort
    md = (tmp_path / "out" / "validation.md").read_text()
    assert "amortization against the program as it runs: 10.00 s compile per start vs its own 60.00 s" in md, md


def test_the_programs_compile_turned_off_is_amortized_by_the_compile_it_saves(compiled_case, tmp_path, monkeypatch):
    """The as-is+no-compile plan (a step within the band of the compiled program's, no compile) pays
    back the program's own compile at once, where it is no faster than compilation off."""
    import rewriter.engine.measure as engine

    monkeypatch.setattr(engine, "measure", _engine_amortization({"eager": 10.0, "as-is": 9.9, "plan": 10.05},
                                                                {"as-is": 200.0}))
    code, report = _validate(compiled_case, tmp_path / "out")
    assert code == 0, report["verdict"]
    assert report["variants"]["plan"]["amortization"]["amortized"] is True


def test_a_plan_that_compiles_more_than_the_program_saves_still_pays_it_back(compiled_case, tmp_path, monkeypatch):
    """Against the program's own compile, the extra compile is what the step must pay back."""
    import rewriter.engine.measure as engine

    monkeypatch.setattr(engine, "measure", _engine_amortization({"eager": 20.0, "as-is": 10.0, "plan": 9.9},
                                                                {"as-is": 10.0, "plan": 200.0}))
    code, report = _validate(compiled_case, tmp_path / "out")
    assert code == 1
    assert report["verdict"]["failures"] == [
        "not amortized: pays back the 190.0 s it compiles per start beyond the program as it is after 1,900,000 runs; "
        "declared 1,000,000 runs over 1 restart(s): net -90.0 s, NOT amortized"], report["verdict"]


def test_a_compile_in_the_harness_build_model_is_the_programs_own(tmp_path, monkeypatch, capsys):
    """The harness's ``build_model`` is called by stackpart, never by name in SRC: a
    ``return torch.compile(Net())`` there is the program's compile (diagnose's search reads it so),
    so validate measures ``as-is`` and gates against it, not against compilation off alone."""
    import rewriter.engine.measure as engine

    shutil.copytree(FIXTURES / "causal_bucket", tmp_path / "case")
    harness = tmp_path / "case" / "src" / "harness.py"
    harness.write_text(harness.read_text().replace("    return TinyLM()", "    return torch.compile(TinyLM(), backend=\"eager\")"))
    assert "torch.compile(TinyLM()" in harness.read_text()
    # the plan's compile of Block is refused beside a whole compile of TinyLM (it would never be
    # used, docs/guide.md): the plan keeps its bucket action
    plan = tmp_path / "case" / "plan.yaml"
    compile_block = "  - action: compile\n    target: model.py::Block\n    options: {backend: eager}\n"
    assert compile_block in plan.read_text()
    plan.write_text(plan.read_text().replace(compile_block, ""))
    seen: dict = {}
    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 10.0, "as-is": 20.0, "plan": 15.0}, seen))
    code, report = _validate(tmp_path / "case", tmp_path / "out")
    assert ("as-is", None, None) in seen["variants"], seen
    assert code == 0, (report["verdict"], capsys.readouterr().err)


def test_where_as_is_fails_the_notes_say_the_gate_compares_with_eager(compiled_case, tmp_path, monkeypatch):
    """The program's own compile raises in validate's ``as-is`` child: the gate falls back to
    compilation off, and the notes say so instead of naming ``as-is`` as the gate's reference."""
    import rewriter.engine.measure as engine

    fake = _fake_measure({"eager": 10.0, "as-is": 20.0, "plan": 15.0}, {})

    def measure(*a, **kw):
        m = fake(*a, **kw)
        m.results["as-is"] = {"error": "raised: Unsupported: Data-dependent branching", "problems": ["raised"],
                              "compile": {}}
        for row in m.timing:
            row["timing"]["as-is"] = {"n": 0}
        return m

    monkeypatch.setattr(engine, "measure", measure)
    code, report = _validate(compiled_case, tmp_path / "out")
    notes = report["verdict"]["notes"]
    assert code == 1 and report["verdict"]["failures"] == ["slower than eager: 15.000 ms vs 10.000 ms per step"]
    assert not any("the speed gate compares the plan with it" in n for n in notes), notes
    assert any("'as-is' did not run" in n and "compares the plan with 'eager'" in n for n in notes), notes


def test_the_report_names_the_baselines_that_ran(tmp_path, monkeypatch):
    """``--baselines none``: the Markdown report said "baselines compiled with backend inductor"
    though no baseline ran."""
    import rewriter.engine.measure as engine

    shutil.copytree(FIXTURES / "causal_bucket", tmp_path / "case")
    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 10.0, "plan": 9.0}, {}))
    _validate(tmp_path / "case", tmp_path / "out")
    md = (tmp_path / "out" / "validation.md").read_text()
    assert "- no in-place baseline (whole, regional) was run" in md and "compiled with backend" not in md, md


def test_a_plan_that_changes_nothing_is_not_timed_against_itself(compiled_case, tmp_path, monkeypatch):
    """A tree the plan was already applied to (or an empty plan): the plan's variant is the original
    tree, so an as-is run would time the same program twice and gate it against its own noise."""
    import rewriter.engine.measure as engine

    plan = compiled_case / "plan.yaml"
    plan.write_text(plan.read_text().split("actions:")[0] + "actions: []\n")
    seen: dict = {}
    monkeypatch.setattr(engine, "measure", _fake_measure({"eager": 10.0, "plan": 10.0}, seen))
    _validate(compiled_case, tmp_path / "out")
    assert [name for name, _, _ in seen["variants"]] == ["eager", "plan"], seen


def test_an_own_compile_the_harness_never_runs_is_not_called_included(compiled_case, tmp_path, monkeypatch):
    """The source compiles (a script's ``main``) but the harness's model ran none of it: 'as-is'
    compiled 0 graphs, so the notes say it is the model without that compile, not "its own compile
    included"."""
    import rewriter.engine.measure as engine

    fake = _fake_measure({"eager": 10.0, "as-is": 10.0, "plan": 8.0}, {})

    def measure(*a, **kw):
        m = fake(*a, **kw)
        m.results["as-is"]["compile"] = {"unique_graphs": 0}
        return m

    monkeypatch.setattr(engine, "measure", measure)
    _, report = _validate(compiled_case, tmp_path / "out")
    notes = report["verdict"]["notes"]
    assert not any("its own compile included" in n for n in notes), notes
    assert any("the harness's model ran none of it ('as-is' compiled 0 graphs)" in n for n in notes), notes
