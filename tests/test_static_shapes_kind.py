"""The whole-model compile with static shapes (``whole+static``: ``torch.compile(model, dynamic=False)``):
proposed where only an image's or latent's resolution varies, measured whatever the budget like the
anchor, and the deadline ends whichever of the two is still compiling once the other has measured
every shape (:mod:`rewriter.diagnose.kinds.static_shapes`). On the H200 the SD-1.5-sized UNet's
automatic-dynamic recompile at a second resolution took 266 s after a 73 s first compile
(BENCHMARKS.md, Model zoo part 11)."""

from __future__ import annotations

import time as real_time
from pathlib import Path

from test_diagnose_planner import context, llama, result
from test_search_budget import _measure_on_the_fake_clock, _piped_child, _Timed

from rewriter.diagnose.candidates import propose
from rewriter.diagnose.kinds.static_shapes import WHOLE_STATIC
from rewriter.diagnose.search_budget import cost_key
from rewriter.engine.budget import RAN_OUT, SPENT
from rewriter.engine.options import Options, Variant


def _resolutions(tmp_path, monkeypatch, dims=((0, 2), (0, 3)), shapes=2):
    ctx = context(tmp_path, "resolutions", True, monkeypatch)
    ctx.results["batch_scaling"] = result("batch_scaling", fixed_share=0.5)
    ctx.results["op_mix"] = result("op_mix", gemm_share=0.4, fusible_share=0.4, compile_gain_bound=1.5, basis="self-device")
    var = [{"tensor": t, "dim": d, "sizes": [16, 8]} for t, d in dims]
    ctx.results["recompiles"] = result("recompiles", recompiles=1, shapes=shapes, varying_input_dims=var)
    return ctx


def test_a_varying_resolution_proposes_whole_static_first_with_dynamic_false(tmp_path, monkeypatch):
    ctx = _resolutions(tmp_path, monkeypatch)
    cands, pruned = propose(ctx)
    by_name = {c.name: c for c in cands}
    assert cands[0].name == WHOLE_STATIC, [c.name for c in cands]  # measured whatever the budget: it starts first
    [static] = [a for a in by_name[WHOLE_STATIC].plan.actions if a.action == "compile"]
    [whole] = [a for a in by_name["whole"].plan.actions if a.action == "compile"]
    assert (static.target, static.strategy, static.options.dynamic) == ("model.py::TinyDenoiser", "whole", False)
    assert whole.options.dynamic is None
    assert "input 0 dim 2: [8, 16]; input 0 dim 3: [8, 16]" in static.why and "recompile_limit" in static.why
    # another compile unit than the anchor's: the budget does not hold it to the anchor's seconds
    assert cost_key(by_name[WHOLE_STATIC]) != cost_key(by_name["whole"])
    assert not any(p.startswith(WHOLE_STATIC) for p in pruned), pruned
    # the rewrite writes the argument
    from rewriter.diagnose.report import plan_yaml
    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    loaded = parse_plan(plan_yaml(by_name[WHOLE_STATIC].plan))
    [change] = plan_rewrite(loaded, ctx.session.src, unsafe=True).changes
    assert b"    @torch.compile(dynamic=False)\n    def forward(self, sample):" in change.new, change.new.decode()


def test_a_varying_length_or_batch_is_not_a_resolution(tmp_path, monkeypatch):
    cands, pruned = propose(llama(tmp_path, monkeypatch))  # input_ids dim 1 (a sequence length)
    assert WHOLE_STATIC not in {c.name for c in cands}
    assert any(p.startswith(f"{WHOLE_STATIC}: input 0 of shape (") and "varies in dim 1, not an image's" in p for p in pruned), pruned


def test_a_varying_batch_is_not_a_resolution(tmp_path, monkeypatch):
    cands, pruned = propose(_resolutions(tmp_path, monkeypatch, dims=((0, 0),)))  # the batch of a 4-D input
    assert WHOLE_STATIC not in {c.name for c in cands}
    assert any("varies in dim 0" in p for p in pruned), pruned


def test_more_harness_shapes_than_the_recompile_limit_are_not_proposed(tmp_path, monkeypatch):
    import torch

    ctx = _resolutions(tmp_path, monkeypatch)
    limit_name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch(**{limit_name: 1}):  # (monkeypatch's undo deletes a Dynamo config entry)
        cands, pruned = propose(ctx)
    assert WHOLE_STATIC not in {c.name for c in cands}
    assert f"{WHOLE_STATIC}: 2 harness shapes, past Dynamo's recompile limit (1): dynamic=False would run the model eager past it" in pruned


def test_nothing_varies_no_twin_and_no_line(tmp_path, monkeypatch):
    ctx = _resolutions(tmp_path, monkeypatch, dims=())
    cands, pruned = propose(ctx)
    assert WHOLE_STATIC not in {c.name for c in cands} and not any(WHOLE_STATIC in p for p in pruned)


def test_past_the_deadline_the_anchor_is_skipped_once_its_static_twin_measured_every_shape(monkeypatch, tmp_path):
    """One cold phase at a time, deadline 75 s: whole+static (an anchor) compiles for 100 s and is
    measured; the anchor after it is not started (its twin covers it), nor per-block."""
    seconds = {WHOLE_STATIC: 100.0, "whole": 300.0, "per-block": 8.0}
    keys = {"eager": None, WHOLE_STATIC: "W:dynamic=False", "whole": "W", "per-block": "B"}
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, 75.0, anchor=(WHOLE_STATIC, "whole"))
    assert _Timed.went == ["eager", WHOLE_STATIC], _Timed.went
    assert m.ok(WHOLE_STATIC) and _Timed.clock[0] == 100.0
    assert skipped == [("whole", f"{SPENT} ('{WHOLE_STATIC}', the other whole-model compile, had measured every shape)"),
                       ("per-block", SPENT)], skipped


def test_a_running_anchor_is_bounded_once_the_other_anchor_passed(tmp_path):
    """Two anchors compiling past the deadline: neither is ended while neither has measured; once
    one is recorded with no problem the other is bounded by the deadline (and ended there, its
    row naming the twin); a twin with a problem (wrong numbers, a fallback) covers nothing."""
    import os

    from rewriter.engine.measure import Measurement, _Run

    variants = [Variant("whole", tmp_path, compiles=True, cost_key="W", anchor=True),
                Variant(WHOLE_STATIC, tmp_path, compiles=True, cost_key="W:dynamic=False", anchor=True),
                Variant("per-block", tmp_path, compiles=True, cost_key="B")]
    run = _Run(Measurement(), None, variants, Options(), tmp_path, real_time.perf_counter() - 1.0, None)
    assert not run.bounded("whole") and not run.bounded(WHOLE_STATIC) and run.bounded("per-block")
    run.cold[WHOLE_STATIC] = {}
    run.m.results[WHOLE_STATIC] = {"problems": ["numerics: output 0 differs"]}
    assert not run.bounded("whole")
    run.m.results[WHOLE_STATIC] = {"problems": []}
    assert run.bounded("whole") and not run.bounded(WHOLE_STATIC)
    run.deadline = None
    assert not run.bounded("whole")
    # recorded at the deadline: ended, and the row says which compile covered it
    run.deadline = real_time.perf_counter() - 1.0
    whole, w = _piped_child(tmp_path, "whole")
    from rewriter.engine import runner

    def ended(until=None, **kw):
        assert until is not None  # bounded: waited for until the deadline only
        return runner.ChildResult(-1, {"error": {"kind": "budget", "message": "ran out"}}, 12.0, "")

    whole.wait_cold = ended
    run.replicas = type("R", (), {"end": lambda self, name: None})()
    run.running = [("whole", whole, whole.go_at)]
    assert run._record_running(0)
    assert run.m.results["whole"]["skipped"] == (f"{RAN_OUT} (12 s after its start; ended: '{WHOLE_STATIC}', "
                                                "the other whole-model compile, had measured every shape)")
    # a twin whose child is gone (it cannot be timed) covers nothing: the anchor is waited for
    run.children = {WHOLE_STATIC: type("Gone", (), {"alive": False})()}
    assert not run.bounded("whole")
    waited: list = []
    whole.wait_cold = lambda until=None, **kw: waited.append(until) or runner.ChildResult(
        -1, {"error": {"kind": "timeout", "message": "planted"}}, 1.0, "")
    run.running = [("whole", whole, whole.go_at)]
    run._record_running(0)
    assert waited == [None]
    os.close(w)


def test_an_early_anchor_past_the_deadline_is_read_not_skipped_once_its_twin_is_recorded(monkeypatch, tmp_path):
    """The anchor started before the compile rungs may have ended its cold phase by its turn: with
    the twin recorded and the deadline passed it is read (here: it had ended, and is measured), not
    skipped as though it never ran."""
    seconds = {WHOLE_STATIC: 100.0, "whole": 0.0}
    keys = {"eager": None, WHOLE_STATIC: "W:dynamic=False", "whole": "W"}
    from rewriter.engine import measure as measure_mod

    real = measure_mod.measure

    class Ended(_Timed):
        """Its cold phase ended before it is read: the reply is there whatever the deadline."""

        def wait_cold(self, until=None):
            return _Timed.wait_cold(self, until=None)

    def with_started(spec, variants, opts, workdir, **kw):  # noqa: ANN001, ANN003, ANN202
        child = Ended({"variants": ["whole"]}, workdir, "cold-whole", workdir, 1.0)
        return real(spec, variants, opts, workdir, started={"whole": child}, **kw)

    monkeypatch.setattr(measure_mod, "measure", with_started)
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, 75.0, anchor=(WHOLE_STATIC, "whole"))
    assert m.ok("whole") and m.ok(WHOLE_STATIC) and skipped == [], (m.results, skipped)


def test_a_failed_recompiles_rung_proves_nothing_and_make_inputs_is_read(tmp_path, monkeypatch):
    from rewriter.diagnose.kinds.static_shapes import varying_dims
    from rewriter.diagnose.rung import RungResult

    ctx = _resolutions(tmp_path, monkeypatch)
    ctx.results["recompiles"] = RungResult("recompiles", "recompiles", status="error", reason="planted")
    monkeypatch.setattr(type(ctx.session), "cuda", property(lambda self: False))
    assert [(v["tensor"], v["dim"], v["sizes"]) for v in varying_dims(ctx)] == [(0, 2, [16, 8]), (0, 3, [16, 8])]
    assert WHOLE_STATIC in {c.name for c in propose(ctx)[0]}


def test_without_a_measured_gain_the_ladder_order_skips_the_static_twin_measured_first():
    """whole+static runs first for the budget's sake, not as the expected best: with the eager
    backend (no gain measured) the rule's proposal after it is chosen, and whole+static only where
    nothing else passed."""
    from test_search import _row

    from rewriter.diagnose.decide import decide

    from rewriter.diagnose.decide import expected_order

    assert expected_order([WHOLE_STATIC, "per-block", "whole", "nested+whole", "as-is"]) == [
        "per-block", "whole", WHOLE_STATIC, "nested+whole", "as-is"]
    rows = {WHOLE_STATIC: _row(5.0, 1.0), "per-block": _row(5.0, 1.0), "as-is": _row(6.0, 0.0)}
    c = decide(rows, [WHOLE_STATIC, "per-block", "as-is"], [], runs=1000, restarts=1, gain_measured=False)
    assert c.chosen == "per-block", c.status
    # measured gains that tie: the tie-break of last resort is the expected order, not the budget's
    c = decide(rows, [WHOLE_STATIC, "per-block", "as-is"], [], runs=1_000_000, restarts=1, gain_measured=True)
    assert c.chosen == "per-block", c.status
    rows["per-block"] = {"problems": ["the rewritten model raised: Unsupported"], "error": "raised: Unsupported"}
    c = decide(rows, [WHOLE_STATIC, "per-block", "as-is"], [], runs=1000, restarts=1, gain_measured=False)
    assert c.chosen == WHOLE_STATIC, c.status


def test_the_static_twin_starts_before_the_compile_rungs_with_the_anchor_and_is_taken_over(tmp_path, monkeypatch):
    """Where the early start happens (a GPU host; here forced on the CPU, backend eager) the
    static twin is started with the anchor, from make_inputs' shapes (the recompiles rung has not
    run then), and the search measures that child instead of starting another."""
    import io
    import shutil

    from rich.console import Console

    from rewriter.diagnose import early_reference
    from rewriter.diagnose.runner import diagnose
    from rewriter.engine import measure as measure_mod
    from rewriter.plan import load_plan
    from rewriter.terminal import Feed

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    children: list = []
    start_cold = measure_mod.start_cold
    monkeypatch.setattr(measure_mod, "start_cold",
                        lambda job, v, workdir, opts: children.append((v.name, start_cold(job, v, workdir, opts))) or children[-1][1])
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "resolutions"
    src = tmp_path / "src"
    shutil.copytree(fixture, src)
    spec = load_plan(fixture / "plan.yaml").plan.harness
    feed = Feed(Console(file=io.StringIO()))
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"recompiles", "search"},
                       budget_s=600.0, report_dir=tmp_path / "report", console=feed)
    names = [n for n, _ in children]
    assert names[:3] == ["eager", "whole", WHOLE_STATIC] and names.count(WHOLE_STATIC) == 1, names
    found = outcome.search
    assert found.rows.get(WHOLE_STATIC, {}).get("step_ms") is not None and found.rows["whole"].get("step_ms") is not None, (found.rows, found.pruned)
    assert any(f"so were the whole-model anchor ('whole') and its static-shape twin ('{WHOLE_STATIC}')" in n
               for n in found.notes), found.notes


def test_a_program_that_compiles_itself_gets_dynamic_false_on_its_own_call(tmp_path, monkeypatch):
    """The program's own ``@torch.compile`` on a model whose resolution varies: ``as-is+static``
    edits that decorator (no second compile), and is measured like any other candidate."""
    import shutil

    from rewriter.diagnose.runner import diagnose
    from rewriter.diagnose.search import candidate_rewrite
    from rewriter.plan import load_plan

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "resolutions"
    src = tmp_path / "src"
    shutil.copytree(fixture, src)
    model = (src / "model.py").read_text()
    (src / "model.py").write_text(model.replace("    def forward(self, sample):",
                                                '    @torch.compile(backend="eager")\n    def forward(self, sample):'))
    spec = load_plan(fixture / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"recompiles", "search"},
                       budget_s=600.0, report_dir=tmp_path / "report")
    found = outcome.search
    by_name = {c.name: c for c in found.candidates}
    assert "as-is+static" in by_name and WHOLE_STATIC not in by_name, (list(by_name), found.pruned)
    [action] = by_name["as-is+static"].plan.actions
    assert action.own_call.model_dump(exclude_none=True) == {"dynamic": False}, action.own_call
    assert found.rows["as-is+static"].get("step_ms") is not None, found.rows["as-is+static"]
    [change] = candidate_rewrite(by_name["as-is+static"], src).changes
    assert b'    @torch.compile(backend="eager", dynamic=False)\n    def forward(self, sample):' in change.new


def test_a_static_twin_chosen_as_the_stand_in_of_a_compile_the_harness_does_not_run_is_written_on_that_call():
    """``model = torch.compile(model)`` in a script the harness does not run is measured through its
    stand-ins; where 'whole+static' wins, the edit of the program's call carries dynamic=False
    (not "kept as it is", which would drop the change that was measured)."""
    from types import SimpleNamespace

    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.own_candidates import translate
    from rewriter.plan import CompileAction, CompileOptions, Plan

    static = CompileAction(action="compile", target="model.py::Net", strategy="whole", options=CompileOptions(dynamic=False),
                           why="dynamic=False: one static graph per input resolution")
    chosen = Candidate(WHOLE_STATIC, Plan(version=1, actions=[static]))
    rows = {WHOLE_STATIC: {"step_ms": 5.0, "compile_s_per_start": 40.0}, "whole": {"step_ms": 5.5, "compile_s_per_start": 90.0}}
    out = SimpleNamespace(chosen=chosen, rows=rows)
    own = SimpleNamespace(where="train.py:12", text="torch.compile(model)", site="train.py::main", can=lambda key: None)
    note = translate(SimpleNamespace(evidence=SimpleNamespace(own_standin_path=None), measured=lambda rung: {}), out, own)
    [edit] = chosen.plan.actions
    assert (edit.target, edit.strategy, edit.own_call.model_dump(exclude_none=True)) == ("train.py::main", "whole", {"dynamic": False})
    assert "writes dynamic=False on that call" in note and "'whole+static'" in note, note


def test_the_programs_own_compile_covers_its_static_twin_and_a_plain_reference_covers_nothing(tmp_path):
    """``as-is+static`` (dynamic=False on the program's own call) is measured whatever the budget
    like the anchor; the reference of a program that compiles itself (its cold phase compiled
    graphs) is the compile it is the twin of, so past the deadline it covers the twin. The
    reference of a program that compiles nothing covers no anchor."""
    from rewriter.engine.measure import Measurement, _Run

    variants = [Variant("eager", tmp_path, judged=False),
                Variant("as-is+static", tmp_path, compiles=True, cost_key="O:dynamic=False", anchor=True),
                Variant("whole", tmp_path, compiles=True, cost_key="W", anchor=True)]
    run = _Run(Measurement(), None, variants, Options(), tmp_path, real_time.perf_counter() - 1.0, None)
    run.m.results["eager"] = {"problems": []}
    run.cold["eager"] = {"compile": {"unique_graphs": 0}}
    assert not run.bounded("as-is+static") and not run.bounded("whole")
    run.cold["eager"] = {"compile": {"unique_graphs": 3}}
    assert run._covering_anchor("as-is+static") == "eager" and run.bounded("as-is+static")


def test_the_whole_model_compiles_and_the_own_static_twin_are_anchors_in_the_search(tmp_path):
    from types import SimpleNamespace

    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.search import candidate_variant
    from rewriter.plan import Plan

    result = SimpleNamespace(library_modules=[])
    anchors = {n: candidate_variant(Candidate(n, Plan(version=1, actions=[])), tmp_path, result).anchor
               for n in ("whole", WHOLE_STATIC, "as-is+static", "per-block", "as-is+dynamic")}
    assert anchors == {"whole": True, WHOLE_STATIC: True, "as-is+static": True, "per-block": False, "as-is+dynamic": False}


def test_past_the_deadline_the_own_static_twin_is_skipped_once_the_programs_own_compile_measured(monkeypatch, tmp_path):
    """One cold phase at a time: the program's own compile (the reference, 300 s) measured every
    shape past the 75 s deadline; its static twin is then not started, and its row says which
    compile covered it."""
    from rewriter.engine.runner import ChildResult

    plain = _Timed.wait_cold

    def compiling(self, until=None):  # the reference runs the program's own compile
        res = plain(self, until)
        if self.variant == "eager" and res.payload.get("compile"):
            return ChildResult(res.code, {**res.payload, "compile": {"unique_graphs": 2}}, res.wall_s, res.stderr_tail)
        return res

    monkeypatch.setattr(_Timed, "wait_cold", compiling)
    seconds = {"eager": 300.0, "as-is+static": 100.0}
    keys = {"eager": None, "as-is+static": "O:dynamic=False"}
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, 75.0, anchor=("as-is+static",))
    assert skipped == [("as-is+static", f"{SPENT} (the program as it is, its own compile, had measured every shape)")], skipped


def test_a_static_stand_in_whose_dynamic_cannot_be_written_says_so():
    """The same choice where the program's call cannot take ``dynamic=`` (its options come from a
    variable): the call is kept as it is, and the note says the measured change was not written
    rather than calling the program's own compile the best plan."""
    from types import SimpleNamespace

    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.own_candidates import translate
    from rewriter.plan import CompileAction, CompileOptions, Plan

    static = CompileAction(action="compile", target="model.py::Net", strategy="whole", options=CompileOptions(dynamic=False),
                           why="dynamic=False: one static graph per input resolution")
    chosen = Candidate(WHOLE_STATIC, Plan(version=1, actions=[static]))
    out = SimpleNamespace(chosen=chosen, rows={WHOLE_STATIC: {"step_ms": 5.0}, "whole": {"step_ms": 5.5}})
    own = SimpleNamespace(where="train.py:12", text="torch.compile(model, **OPTIONS)", site="train.py::main",
                          can=lambda key: "the call passes **OPTIONS")
    note = translate(SimpleNamespace(evidence=SimpleNamespace(own_standin_path=None), measured=lambda rung: {}), out, own)
    assert chosen.plan.actions == []
    assert "whose dynamic=False cannot be set on that call (the call passes **OPTIONS): it is kept as it is" in note, note
