"""The search's budget: candidates are measured in the proposal's (expected-value) order, and a
cold phase that is not expected to end before the budget (less the timing's seconds) is skipped
with the reason, in the candidates table and search.log, while the ones after it are still
considered. CPU, ``backend="eager"``, fake children or a tiny model."""

from __future__ import annotations

import re
import shutil
import time as real_time
from pathlib import Path

import pytest

from rewriter.diagnose.candidate import Candidate
from rewriter.engine.budget import RAN_OUT, SPENT, too_late
from rewriter.engine.options import Options, Variant
from rewriter.plan import load_plan, parse_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"
HARNESS = "version: 1\nharness: {file: harness.py, shapes: [{batch: 2}], device: cpu}\n"


def _candidate(name: str, actions: str, rule: bool = False) -> Candidate:
    return Candidate(name, parse_plan(HARNESS + "actions:\n" + actions).plan, rule=rule)


WHOLE = "  - {action: compile, target: model.py::Net, strategy: whole}\n"
BLOCK = "  - {action: compile, target: model.py::Block}\n"
KNOB = "  - {action: dynamo_config, target: model.py::Net.__init__, settings: {capture_scalar_outputs: true}}\n"
DISABLE = "  - {action: disable, target: model.py::Block.route}\n"


def test_a_twin_is_keyed_as_its_base_and_another_compile_unit_is_not():
    """A twin that adds a config knob (or a disable) compiles what its base compiles: one key, so
    the base's measured cold phase predicts the twin's; another compile unit has its own key, and a
    plan that compiles nothing has none."""
    from rewriter.diagnose.search_budget import cost_key

    twin, whole = _candidate("whole+capture_scalar_outputs", WHOLE + KNOB), _candidate("whole", WHOLE)
    rule = _candidate("per-block+disable", BLOCK + DISABLE, rule=True)
    block = _candidate("per-block", BLOCK)
    assert cost_key(twin) == cost_key(whole) != cost_key(block) == cost_key(rule)
    assert cost_key(_candidate("alloc", "  - {action: allocator, target: model.py::main}\n")) is None


def test_a_cold_phase_runs_unless_its_expected_length_does_not_fit_what_is_left():
    variants = {n: Variant(n, Path("."), compiles=n != "eager", cost_key=k)
                for n, k in (("eager", None), ("whole", "W"), ("whole+knob", "W"), ("per-block", "B"))}
    # nothing measured yet: it runs while any budget is left; a spent budget says so
    assert too_late(variants["whole"], 1.0, {}, variants) is None
    assert too_late(variants["whole"], -0.5, {}, variants) == SPENT
    # its kin took 50 s: not with 20 s left, and the reason says what was expected and from where
    why = too_late(variants["whole+knob"], 20.0, {"whole": 50.0}, variants)
    assert why == ("not measured: its cold phase would end after the search budget (about 50 s expected, "
                   "as 'whole' took; 20 s left)"), why
    assert too_late(variants["whole+knob"], 60.0, {"whole": 50.0}, variants) is None
    # no kin measured: the cheapest compile measured so far is the least it can take
    assert too_late(variants["per-block"], 20.0, {"whole": 50.0}, variants) == (
        "not measured: its cold phase would end after the search budget (about 50 s expected, as the shortest compile "
        "so far ('whole') took; 20 s left)")
    assert too_late(variants["per-block"], 20.0, {"whole": 50.0, "whole+knob": 12.0}, variants) is None
    # a nested plan compiles the blocks and the whole model: it takes at least what the whole compile
    # took (the longest of its kin), not the shortest compile so far (the blocks alone)
    nested = Variant("nested+whole", Path("."), compiles=True, cost_key="B|W")
    assert too_late(nested, 40.0, {"whole": 50.0, "per-block": 8.0}, {**variants, "nested+whole": nested}) == (
        "not measured: its cold phase would end after the search budget (about 50 s expected, as 'whole' took; 40 s left)")
    assert too_late(variants["whole"], 20.0, {"nested+whole": 60.0, "per-block": 8.0},
                    {**variants, "nested+whole": nested}) is None  # kin goes one way: whole compiles less than nested
    # the whole-model anchor runs whatever is left: a plan is always compared with the one-line compile
    anchor = Variant("whole", Path("."), compiles=True, cost_key="W", anchor=True)
    assert too_late(anchor, -30.0, {}, {**variants, "whole": anchor}) is None
    assert too_late(anchor, 5.0, {"whole+knob": 50.0}, {**variants, "whole": anchor}) is None


class _Timed:
    """A stand-in for runner.ServedChild whose cold phase takes ``seconds[variant]`` on a fake clock."""

    seconds: dict = {}
    clock: list = [0.0]
    went: list = []
    fail: set = set()

    def __init__(self, job, workdir, name, cache_root, timeout_s):
        self.variant, self.alive, self.started, self.name = job["variants"][0], True, 0.0, name

    def wait_built(self):
        return True

    def wait_weights_saved(self):
        return None

    def go(self):
        _Timed.went.append(self.variant)

    def wait_cold(self, until=None):
        from rewriter.engine.runner import ChildResult

        ends = _Timed.clock[0] + _Timed.seconds.get(self.variant, 0.0)
        if until is not None and ends > until:  # ServedChild.wait_cold ends it at the deadline
            waited, _Timed.clock[0], self.alive = max(0.0, until - _Timed.clock[0]), max(_Timed.clock[0], until), False
            return ChildResult(-1, {"error": {"kind": "budget", "message": "ran out"}}, waited, "")
        _Timed.clock[0] = ends
        if self.variant in _Timed.fail:
            self.alive = False
            return ChildResult(4, {"error": {"kind": "raised", "message": "RuntimeError: boom"}}, 0.0, "")
        shape = {"shape": {"batch": 1}, "first_call_s": 1.0, "steady_s": 0.01, "compile_s": 0.9, "new_graphs": 1,
                 "new_recompiles": 0}
        # the reference of a program that does not compile itself compiles no graph
        graphs = 0 if self.variant == "eager" else 1
        return ChildResult(0, {"info": {}, "compile": {"unique_graphs": graphs}, "shapes": [shape]}, 0.0, "")

    def time(self, shape, warmup, n, **kw):
        return {"samples": [0.01] * n, "calls": 1}

    def terminate(self):
        self.alive = False

    def close(self):
        self.alive = False


def _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, deadline, fail=(), anchor=""):
    from rewriter.engine import measure as measure_mod
    from rewriter.engine.measure import Measurement, measure

    fake = type("Clock", (), {"perf_counter": staticmethod(lambda: _Timed.clock[0])})
    monkeypatch.setattr(measure_mod, "time", fake)
    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Timed)
    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    _Timed.seconds, _Timed.clock, _Timed.went, _Timed.fail = seconds, [0.0], [], set(fail)
    variants = [Variant(n, tmp_path, judged=n != "eager", compiles=n != "eager", cost_key=k,
                        anchor=n in anchor if isinstance(anchor, tuple) else n == anchor)
                for n, k in keys.items()]
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    skipped: list = []
    m = measure(spec, variants, Options(replicates=1, overlap=False, warmup=0, reps=3), tmp_path, deadline=deadline,
                on_event=lambda name, event, detail: skipped.append((name, detail)) if event == "skipped" else None,
                partial=Measurement())
    return m, skipped


def test_a_cold_phase_that_raised_sets_no_expected_length(monkeypatch, tmp_path):
    """Whole raised 50 s in (a failure, not a compile's length): its twin still runs with 25 s left."""
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, {"whole": 50.0, "whole+knob": 5.0},
                                            {"eager": None, "whole": "W", "whole+knob": "W"}, 75.0, fail={"whole"})
    assert _Timed.went == ["eager", "whole", "whole+knob"] and skipped == [], (_Timed.went, skipped)
    assert m.results["whole"]["problems"] and m.ok("whole+knob")


def test_the_engine_skips_only_the_cold_phases_that_would_end_after_the_deadline(monkeypatch, tmp_path):
    """Per-block 8 s, whole 50 s, deadline 75 s: per-block's twin (expected 8 s, 17 s left) runs,
    whole's twin (expected 50 s, 9 s left) is skipped with the reason, and the cheaper candidate
    after it (expected 8 s) still runs."""
    seconds = {"per-block": 8.0, "whole": 50.0, "per-block+mark": 8.0, "whole+knob": 50.0, "late-block": 8.0}
    keys = {"eager": None, "per-block": "B", "whole": "W", "per-block+mark": "B", "whole+knob": "W", "late-block": "B"}
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, 75.0)
    assert _Timed.went == ["eager", "per-block", "whole", "per-block+mark", "late-block"], _Timed.went
    why = ("not measured: its cold phase would end after the search budget (about 50 s expected, as 'whole' took; "
           "9 s left)")
    assert m.results["whole+knob"] == {"skipped": why, "problems": []}
    assert skipped == [("whole+knob", why)], skipped
    assert all(m.ok(n) for n in ("per-block", "whole", "per-block+mark", "late-block"))


def test_the_whole_model_anchor_is_measured_after_the_deadline_and_the_others_are_not(monkeypatch, tmp_path):
    """Per-block 80 s with a 75 s deadline: the budget is spent, yet the anchor (whole) runs; the
    per-block twin after it does not."""
    seconds = {"per-block": 80.0, "whole": 50.0, "per-block+mark": 8.0}
    keys = {"eager": None, "per-block": "B", "whole": "W", "per-block+mark": "B"}
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, seconds, keys, 75.0, anchor="whole")
    assert _Timed.went == ["eager", "per-block", "whole"], _Timed.went
    ran_out = f"{RAN_OUT} (75 s after its start; ended)"
    assert m.ok("whole") and skipped == [("per-block", ran_out), ("per-block+mark", SPENT)], skipped
    # per-block was ended at the deadline, not waited for to its 80th second; the anchor then ran its 50 s
    assert m.results["per-block"]["skipped"] == ran_out and _Timed.clock[0] == 125.0, _Timed.clock


def test_a_cold_phase_under_way_at_the_deadline_is_ended_there_and_the_timing_follows(monkeypatch, tmp_path):
    """No anchor: the first compiled candidate starts with nothing to go by and compiles for 300 s
    against a 75 s deadline. It is ended at the deadline (its row says so) and the measurement goes
    on at once with what was measured, not 225 s past the budget; one that ends in time is kept."""
    seconds = {"whole": 300.0, "per-block": 8.0}
    m, skipped = _measure_on_the_fake_clock(monkeypatch, tmp_path, {"per-block": 8.0, "whole": 300.0},
                                            {"eager": None, "per-block": "B", "whole": "W"}, 75.0)
    assert _Timed.clock[0] == 75.0 and m.ok("per-block"), (_Timed.clock, m.results)
    assert m.results["whole"]["skipped"] == f"{RAN_OUT} (67 s after its start; ended)", m.results["whole"]
    assert skipped == [("whole", m.results["whole"]["skipped"])] and "whole" not in m.timing, m.timing
    del seconds


@pytest.mark.usefixtures("one_thread")
def test_the_search_skips_a_candidate_whose_kin_compiled_too_long_and_says_why(tmp_path, monkeypatch):
    """A tiny model, backend eager, the real search: the first compiled candidate's cold phase is
    made to look 1000 s long (the engine's clock jumps while it is recorded), with a 1100 s budget:
    every later candidate is skipped as not fitting, with the reason in the candidates table and
    search.log, and the plan is chosen from what was measured."""
    from rewriter.diagnose.runner import diagnose
    from rewriter.engine import measure as measure_mod

    offset = [0.0]
    fake = type("Clock", (), {"perf_counter": staticmethod(lambda: real_time.perf_counter() + offset[0])})
    monkeypatch.setattr(measure_mod, "time", fake)
    emit = measure_mod._Run.emit
    first: list[str] = []

    def emit_then_jump(self, name, event, detail):  # noqa: ANN001, ANN202
        if event == "cold" and name != "eager" and not first:
            first.append(name)
            offset[0] += 1000.0  # a fake long cold compile of the first compiled candidate
        emit(self, name, event, detail)

    monkeypatch.setattr(measure_mod._Run, "emit", emit_then_jump)
    # no anchor here (it is measured whatever the budget, and its short compile would let the
    # others fit): this test is about the estimate and the reason of a skip
    monkeypatch.setattr("rewriter.diagnose.search.WHOLE", "no anchor")
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE / "src", src)
    spec = load_plan(EXAMPLE / "plan.yaml").plan.harness
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"search"},
                       budget_s=1100.0, report_dir=tmp_path / "report")
    found = outcome.search
    measured = [c.name for c in found.candidates if c.name != "as-is" and not found.choice.status.get(c.name, "").startswith("not measured")]
    skipped = {c.name: found.choice.status[c.name] for c in found.candidates if "its cold phase would end after" in found.choice.status.get(c.name, "")}
    proposed = [c.name for c in found.candidates if c.name != "as-is"]
    assert first == proposed[:1] and measured == first, (first, proposed, found.choice.status)  # the proposal's order
    assert skipped and all(re.search(r"about 10\d\d s expected, as .*'" + re.escape(first[0]) + "'", why)
                           for why in skipped.values()), skipped
    log = (tmp_path / "report" / "search.log").read_text()
    for name, why in skipped.items():
        assert f"{name}: {why}" in log, log
    table = {r["candidate"]: r["status"] for r in found.table()}
    assert all(table[n] == why for n, why in skipped.items()), table


def test_the_default_budget_on_a_gpu_is_what_the_ladder_left_of_three_minutes():
    """On CUDA the default --budget keeps diagnose within the 3-minute target: 64 s before the search
    leaves 180 - 64 - 20 = 96 s; a fast start is capped at 120 s, a slow one floored at 60 s. On a
    CPU it stays 120 s (no speed is decided there)."""
    from rewriter.diagnose.search import DEFAULT_BUDGET_S, MIN_BUDGET_S, default_budget

    assert default_budget(64.0, cuda=True) == pytest.approx(96.0)
    assert default_budget(10.0, cuda=True) == DEFAULT_BUDGET_S
    assert default_budget(150.0, cuda=True) == MIN_BUDGET_S
    assert default_budget(150.0, cuda=False) == DEFAULT_BUDGET_S


def test_the_default_budget_counts_the_setup_before_the_ladder_not_only_the_rungs(monkeypatch):
    """The budget is what the whole diagnose so far left of the target: building the model before
    the first rung (13 s of GPT-2's 43 s before its search on the H200) counts, where the rungs'
    own seconds alone would leave the search 138 s and the command past 3 minutes."""
    import time
    from types import SimpleNamespace

    import rewriter.diagnose.runner as runner
    from rewriter.diagnose.search import DIAGNOSE_TARGET_S, FINISH_S

    budgets = []
    monkeypatch.setattr(runner, "_search", lambda ctx, results, meta, out_dir, feed, budget_s, timeout_s, early:
                        budgets.append(budget_s))
    monkeypatch.setattr(runner, "_search_notes", lambda found: [])
    monkeypatch.setattr("rewriter.diagnose.search.annotated", lambda found: None)
    fake = SimpleNamespace(ctx=SimpleNamespace(session=SimpleNamespace(cuda=True)), results=[], meta={},
                           out_dir=None, feed=None, started=time.perf_counter() - 50.0, early=None)
    runner._plan_by_search(fake, None, 300.0)
    runner._plan_by_search(fake, 33.0, 300.0)  # --budget given: used as it is
    assert budgets == [pytest.approx(DIAGNOSE_TARGET_S - 50.0 - FINISH_S, abs=1.0), 33.0]


def test_the_whole_model_anchor_is_measured_right_after_the_rules_proposal(tmp_path, monkeypatch):
    """Under a budget the cold phases run in proposal order and the later ones may be skipped: the
    whole-model compile (the one-line anchor a plan is held against) comes right after the rule's
    proposal and its twins, before the other per-block variants and nested+whole, so a short budget
    never leaves the search choosing among per-block plans without having measured ``whole``."""
    from test_diagnose_planner import llama

    from rewriter.diagnose.candidates import propose

    cands = propose(llama(tmp_path, monkeypatch))[0]
    names = [c.name for c in cands]
    rule = next(c.name for c in cands if c.rule)
    assert rule.startswith("per-block") and "whole" in names and "nested+whole" in names, names
    first_other = min(i for i, n in enumerate(names) if n != rule and not n.startswith(rule + "+") and n != "whole")
    assert names.index("whole") < first_other and names.index("whole") < names.index("nested+whole"), names
    assert names[-1] == "as-is", names


def test_a_served_child_whose_cold_phase_is_under_way_at_the_deadline_is_ended_there(tmp_path, monkeypatch):
    """The real child: its harness hangs in the build (a compile that would run for minutes); with
    a 120 s timeout and a deadline 1 s away, ``wait_cold(until=...)`` returns within seconds with
    an error of kind ``budget`` (not ``timeout``), and the child's process is gone."""
    from rewriter.engine.runner import ServedChild
    from rewriter.harness import Harness

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src, work = tmp_path / "src", tmp_path / "work"
    src.mkdir()
    (work / "ref").mkdir(parents=True)
    (src / "harness.py").write_text("import time\n\ndef build_model():\n    time.sleep(600)\n\n"
                                    "def make_inputs(batch=2):\n    return {}\n")
    job = {"harness": Harness(file="harness.py", device="cpu", shapes=[{"batch": 2}]).model_dump(),
           "backend": "eager", "force_backend": None, "seed": 0, "ref": str(work / "ref"), "warmup": 1, "reps": 1,
           "budget_s": None, "construct_on_device": False, "phase": "cold", "variants": ["eager"], "tree": str(src),
           "prepare": "eager", "reference": True, "library_modules": [], "site": None, "stance": None}
    child = ServedChild(job, work, "cold-eager", work / "caches", 120.0)
    t0 = real_time.perf_counter()
    try:
        result = child.wait_cold(until=t0 + 1.0)
    finally:
        child.close()
    assert result.code == -1 and result.error["kind"] == "budget", result.payload
    assert "had not ended" in result.error["message"] and "search budget ran out" in result.error["message"]
    assert real_time.perf_counter() - t0 < 30.0  # the deadline, not the 120 s timeout (SIGKILL 5 s after SIGTERM)
    assert child.proc.poll() is not None


def test_the_contended_window_is_left_out_when_the_anchor_ran_past_the_deadline():
    """The cold phases' deadline keeps the timing's reserve, contended window included. Where the
    whole-model anchor's cold phase (waited for past the deadline) ended 12 s after it, the timing
    runs its quiet windows only and the notes say so; before the deadline nothing changes."""
    from types import SimpleNamespace

    from rewriter.engine.measure import Measurement, _Run

    run = SimpleNamespace(opts=Options(contended=True, windows=2), deadline=75.0, m=Measurement())
    assert _Run.timing_options(run, 70.0) is run.opts and run.m.notes == []
    late = _Run.timing_options(run, 87.0)
    assert late.contended is False and late.windows == 2 and run.opts.contended is True
    assert run.m.notes == ["not timed with a contended host core: the cold phases ended 12 s after the search budget's "
                           "deadline (the whole-model anchor's is waited for); the quiet windows alone were timed"]
    assert _Run.timing_options(SimpleNamespace(opts=run.opts, deadline=None, m=Measurement()), 1e9) is run.opts


def _piped_child(tmp_path, name: str):
    """A ServedChild on a pipe this test writes its replies into (no process)."""
    import os

    from rewriter.engine import runner

    child = object.__new__(runner.ServedChild)
    r, w = os.pipe()
    child.name, child.timeout_s, child._rep, child._buf, child._early = name, 30.0, r, b"", runner._NOTHING
    child.go_at = child.started = real_time.perf_counter()
    child.job, child.stderr_path, child.alive = {"out": str(tmp_path / f"{name}.json")}, tmp_path / f"{name}.err", True
    child.stderr_path.write_text("")
    child._cmd, child.proc = open(os.devnull, "w"), type("Exited", (), {"poll": lambda self: 0})()
    return child, w


def test_a_cold_phase_has_ended_once_the_child_says_ready_and_the_reply_is_kept_for_wait_cold(tmp_path):
    import json
    import os

    child, w = _piped_child(tmp_path, "whole")
    assert child.cold_ended() is False
    os.write(w, b'{"built": true}\n{"weights_saved": true}\n')  # replies wait_cold skips too
    assert child.cold_ended() is False
    (tmp_path / "whole.json").write_text(json.dumps({"shapes": [], "info": {}}))
    os.write(w, b'{"ready": true}\n')
    assert child.cold_ended() is True and child.cold_ended() is True
    res = child.wait_cold()
    assert res.code == 0 and res.payload == {"shapes": [], "info": {}}, res
    os.close(w)


def test_a_slot_frees_when_any_cold_phase_ends_not_only_the_oldest(tmp_path):
    """The anchor (whole) compiles on while per-block has ended: per-block is recorded first and
    its seconds are in the budget's estimates, the anchor stays running (``settle(1)``). Past the
    deadline with none ended, the first cold phase the budget bounds is taken, never the anchor."""
    import os

    from rewriter.engine.measure import Measurement, _Run

    variants = [Variant("whole", tmp_path, compiles=True, cost_key="W", anchor=True),
                Variant("per-block", tmp_path, compiles=True, cost_key="B"),
                Variant("per-block+mark", tmp_path, compiles=True, cost_key="B")]
    run = _Run(Measurement(), None, variants, Options(), tmp_path, real_time.perf_counter() + 60.0, None)
    (whole, w_whole), (block, w_block), (mark, w_mark) = (_piped_child(tmp_path, v.name) for v in variants)
    run.running = [("whole", whole, whole.go_at), ("per-block", block, block.go_at), ("per-block+mark", mark, mark.go_at)]
    import threading

    threading.Timer(0.3, os.write, (w_block, b'{"ready": true}\n')).start()  # ends while the anchor compiles
    t = real_time.perf_counter()
    assert run._next_to_record() == (1, 0.0) and real_time.perf_counter() - t < 10.0
    run.running.pop(1)
    run.deadline = real_time.perf_counter() - 1.0  # spent, nothing ended: the bounded one, not the anchor
    assert run._next_to_record() == (1, 0.0)
    # no deadline, nothing ends: the child with the shortest timeout is taken once it has passed,
    # and its wait ends at once (one timeout in all, not two)
    run.deadline, whole.timeout_s, mark.timeout_s = None, 2.0, 30.0
    index, waited = run._next_to_record()
    assert index == 0 and waited >= 2.0
    t = real_time.perf_counter()
    res = whole.wait_cold(waited_s=waited)  # a second timeout would wait 2 s more here
    assert res.error["kind"] == "timeout" and real_time.perf_counter() - t < 1.0, (res, real_time.perf_counter() - t)
    for w in (w_whole, w_block, w_mark):
        os.close(w)
