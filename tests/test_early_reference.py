"""The search's reference started before the ladder's compile rungs (rewriter/diagnose/early_reference.py):
the engine takes over a child already started and sent ``go`` without starting or sending it
again; diagnose starts it only on a GPU host with room; the search run with it measures the
program as it is and says it was started early. CPU, ``backend="eager"``."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from rewriter.diagnose.evidence import Evidence
from rewriter.engine.options import Options, Variant
from rewriter.plan import load_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt"


def _diagnose_example(tmp_path: Path) -> tuple:
    """diagnose on examples/gpt (backend eager, the graph-breaks rung and the search): the outcome
    and the feed holding its event lines."""
    from rich.console import Console

    from rewriter.diagnose.runner import diagnose
    from rewriter.terminal import Feed

    src = tmp_path / "src"
    shutil.copytree(EXAMPLE / "src", src)
    spec = load_plan(EXAMPLE / "plan.yaml").plan.harness
    feed = Feed(Console(file=io.StringIO()))
    outcome = diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"graph_breaks", "search"},
                       budget_s=600.0, report_dir=tmp_path / "report", console=feed)
    return outcome, feed


def _diagnose_stopped_after_the_ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """diagnose on examples/gpt (backend eager, the graph-breaks rung and the search) made to raise
    right after the ladder, as a harness failure stops it; asserts that it raised."""
    from rewriter.diagnose import runner
    from rewriter.errors import StackpartError

    def stopped(run):  # noqa: ANN001, ANN202
        raise StackpartError("harness.py:1: the harness failed")

    monkeypatch.setattr(runner, "_after_ladder", stopped)
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE / "src", src)
    spec = load_plan(EXAMPLE / "plan.yaml").plan.harness
    with pytest.raises(StackpartError):
        runner.diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only={"graph_breaks", "search"},
                        report_dir=tmp_path / "report")


class _Fake:
    """A stand-in for runner.ServedChild: counts constructions and ``go`` lines."""

    made: list = []

    def __init__(self, job, workdir, name, cache_root, timeout_s):
        self.variant, self.alive, self.started = job["variants"][0], True, 0.0
        self.job = dict(job, out=str(Path(workdir) / f"{name}.result.json"))  # as ServedChild names it
        self.goes = 0
        _Fake.made.append(self.variant)

    def wait_built(self):
        return True

    def wait_weights_saved(self):
        return None

    def go(self):
        self.goes += 1

    def wait_cold(self, until=None):
        from rewriter.engine.runner import ChildResult

        graphs = int(self.variant != "eager")
        shape = {"shape": {"batch": 1}, "first_call_s": 1.0, "steady_s": 0.01, "compile_s": 0.9 * graphs,
                 "new_graphs": graphs, "new_recompiles": 0}
        return ChildResult(0, {"info": {}, "compile": {"unique_graphs": graphs}, "shapes": [shape]}, 0.0, "")

    def time(self, shape, warmup, n, **kw):
        return {"samples": [0.01] * n, "calls": 1}

    def terminate(self):
        self.alive = False

    def close(self):
        self.alive = False


def test_the_engine_takes_over_a_started_reference_and_spawns_only_the_others(monkeypatch, tmp_path):
    from rewriter.engine.measure import measure

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Fake)
    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    _Fake.made = []
    early = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    _Fake.made = []
    variants = [Variant("eager", tmp_path, judged=False), Variant("whole", tmp_path, compiles=True)]
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    m = measure(spec, variants, Options(replicates=1, overlap=False, warmup=0, reps=3), tmp_path, started={"eager": early})
    assert _Fake.made == ["whole"], _Fake.made  # the reference was not spawned again
    assert early.goes == 1 and not early.alive  # told to go by the engine (a real child ignores a second go), ended after
    assert m.ok("eager") and m.ok("whole"), m.results


def test_a_served_child_is_sent_go_once():
    """A second ``go`` would reach the child as its first timing request."""
    from rewriter.engine.runner import ServedChild

    child = object.__new__(ServedChild)
    child._cmd, child.go_at = io.StringIO(), None
    child.go()
    first = child.go_at
    child.go()
    assert [json.loads(line) for line in child._cmd.getvalue().splitlines()] == [{"op": "go"}]
    assert child.go_at == first


def test_it_starts_early_only_on_a_gpu_host(tmp_path):
    from rewriter.diagnose.context import Context
    from rewriter.diagnose.early_reference import why_not

    session = type("S", (), {"cuda": False})()
    assert why_not(Context(session=session, out_dir=tmp_path, backend="eager")).startswith("not on a GPU")


@pytest.mark.usefixtures("one_thread")
def test_the_search_measures_with_a_reference_started_before_the_compile_rungs(tmp_path, monkeypatch):
    """The real ladder and search on a tiny model with the early start allowed on this CPU: the
    reference is started before the first compile rung, the search takes it over (one reference
    child, its folder removed), measures the program as it is beside the candidates and says so."""
    from rewriter.diagnose import early_reference
    from rewriter.engine import measure as measure_mod

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def early_dirs() -> list[Path]:
        return list((tmp_path / "tmp").glob("stackpart-search-*"))

    spawned: list[str] = []
    start_cold = measure_mod.start_cold

    def counted(job, v, workdir, opts):  # noqa: ANN001, ANN202
        spawned.append(v.name)
        return start_cold(job, v, workdir, opts)

    monkeypatch.setattr(measure_mod, "start_cold", counted)
    outcome, feed = _diagnose_example(tmp_path)
    found = outcome.search
    assert spawned.count("eager") == 1 and spawned.count("whole") == 1 and len(spawned) > 2, spawned
    assert spawned[:2] == ["eager", "whole"]  # the anchor started with the reference, before the rest
    assert found.rows["as-is"].get("step_ms") is not None, found.rows["as-is"]
    [as_is] = [r for r in found.table() if r["candidate"] == "as-is"]
    assert {"first_calls", "block_share", "reference_extras"} <= set(as_is["phases_s"]), as_is["phases_s"]
    assert any("was started" in n and "before the search" in n and "so was the whole-model anchor" in n
               for n in found.notes), found.notes
    assert found.rows["whole"].get("step_ms") is not None and not found.rows["whole"].get("problems"), found.rows["whole"]
    assert found.clock["reference_started_before_search_s"] > 0
    events = "\n".join(feed.events)
    assert events.index("started before the compile rungs, and the whole-model anchor with it") < events.index(
        "rung graph_breaks ("), events
    assert not early_dirs(), early_dirs()  # the search removed the folder it took over
    assert found.chosen is not None and found.choice.chosen in {c.name for c in found.candidates}


def test_a_reference_the_search_did_not_take_is_ended_and_its_folder_removed(tmp_path):
    from rewriter.diagnose.early_reference import EarlyReference

    child = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    (tmp_path / "w").mkdir()
    EarlyReference(tmp_path / "w", tmp_path / "w" / "original", None, child, 0.0).close()
    assert not child.alive and not (tmp_path / "w").exists()
    kept = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    (tmp_path / "k").mkdir()
    EarlyReference(tmp_path / "k", tmp_path / "k" / "original", None, kept, 0.0, taken=True).close()
    assert kept.alive and (tmp_path / "k").exists()  # the search ends what it took over


@pytest.mark.usefixtures("one_thread")
def test_a_diagnose_that_stops_after_the_early_start_ends_the_reference(tmp_path, monkeypatch):
    """The ladder stopped (a harness failure) after the reference started: diagnose raises, and
    the reference's child and folder are gone."""
    from rewriter.diagnose import early_reference

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    started: list = []
    start = early_reference.start
    monkeypatch.setattr(early_reference, "start", lambda ctx, t: started.append(start(ctx, t)) or started[-1])

    _diagnose_stopped_after_the_ladder(tmp_path, monkeypatch)
    assert len(started) == 1 and not started[0].child.alive
    assert started[0].child.proc.poll() is not None  # reaped
    assert not list((tmp_path / "tmp").glob("stackpart-search-*"))


@pytest.mark.usefixtures("one_thread")
def test_an_early_anchor_that_is_not_the_proposals_rewrite_is_ended_and_started_again(tmp_path, monkeypatch):
    """The rungs after the early start changed the anchor (here: a planted ``dynamic=True``): the
    started child is ended, the proposal's anchor starts with the others and is the one measured."""
    from rewriter.diagnose import candidates, early_reference
    from rewriter.engine import measure as measure_mod

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    proposed = candidates.anchor_plan

    def planted(ctx):  # noqa: ANN001, ANN202
        plan = proposed(ctx)
        acts = [a.model_copy(update={"options": a.options.model_copy(update={"dynamic": True})}) if a.action == "compile" else a
                for a in plan.actions]
        return plan.model_copy(update={"actions": acts})

    monkeypatch.setattr(candidates, "anchor_plan", planted)
    children: list = []
    start_cold = measure_mod.start_cold
    monkeypatch.setattr(measure_mod, "start_cold",
                        lambda job, v, workdir, opts: children.append((v.name, start_cold(job, v, workdir, opts))) or children[-1][1])
    outcome, feed = _diagnose_example(tmp_path)
    wholes = [child for name, child in children if name == "whole"]
    assert len(wholes) == 2, [n for n, _ in children]
    assert wholes[0].proc.poll() is not None  # the early one was ended (and reaped)
    found = outcome.search
    assert found.rows["whole"].get("step_ms") is not None, found.rows["whole"]
    assert not any("so was the whole-model anchor" in n for n in found.notes), found.notes
    assert any("not the proposal's rewrite" in e for e in feed.events), feed.events


def test_an_interrupt_while_starting_leaves_no_child_and_no_folder(tmp_path, monkeypatch):
    """Ctrl-C between the child's spawn and its hand-over: the child is ended and the folder removed."""
    from types import SimpleNamespace

    from rewriter.diagnose import early_reference
    from rewriter.engine import measure as measure_mod

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    made: list = []

    class Interrupted(_Fake):
        def go(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(measure_mod, "start_cold",
                        lambda job, v, workdir, opts: made.append(Interrupted({"variants": [v.name]}, workdir, "", workdir, 1.0)) or made[-1])
    monkeypatch.setattr(measure_mod, "child_job", lambda spec, opts, workdir: {})
    monkeypatch.setattr("rewriter.diagnose.search.engine_options", lambda ctx, timeout_s: None)
    (tmp_path / "src").mkdir()
    with pytest.raises(KeyboardInterrupt):
        early_reference.start(SimpleNamespace(session=SimpleNamespace(src=tmp_path / "src", spec=None),
                                             evidence=Evidence()), 60.0)
    assert len(made) == 1 and not made[0].alive
    assert not list((tmp_path / "tmp").glob("stackpart-search-*"))


@pytest.mark.usefixtures("one_thread")
def test_an_early_anchor_the_proposal_does_not_measure_is_ended_before_the_measurement(tmp_path, monkeypatch):
    """The proposal's anchor does not rewrite (or is no longer proposed): the anchor started early
    must not compile beside the candidates the search times; it is ended before the measurement."""
    from rewriter.diagnose import early_reference, search
    from rewriter.engine import measure as measure_mod
    from rewriter.errors import StackpartError

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    rewrites: list[str] = []
    candidate_rewrite = search.candidate_rewrite

    def whole_fails_in_the_search(c, src, *reading):  # noqa: ANN001, ANN002, ANN202
        rewrites.append(c.name)
        if c.name == "whole" and rewrites.count("whole") > 1:  # the first is the early anchor's
            raise StackpartError("planted: the proposal's anchor does not rewrite")
        return candidate_rewrite(c, src, *reading)

    monkeypatch.setattr(search, "candidate_rewrite", whole_fails_in_the_search)
    children: list = []
    start_cold = measure_mod.start_cold
    monkeypatch.setattr(measure_mod, "start_cold",
                        lambda job, v, workdir, opts: children.append((v.name, start_cold(job, v, workdir, opts))) or children[-1][1])
    alive_at_measure: list = []
    measure = measure_mod.measure

    def seen(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        alive_at_measure.extend(n for n, ch in children if n == "whole" and ch.proc.poll() is None)
        return measure(*args, **kwargs)

    monkeypatch.setattr(measure_mod, "measure", seen)
    outcome, _ = _diagnose_example(tmp_path)
    assert [n for n, _ in children].count("whole") == 1
    assert not alive_at_measure, "the early anchor was still running when the search measured"
    assert "does not rewrite" in str(outcome.search.rows["whole"]), outcome.search.rows["whole"]


def test_an_early_anchors_cold_seconds_for_the_budget_are_its_own_compile_not_the_rungs_it_overlapped(monkeypatch, tmp_path):
    """The anchor went before the compile rungs and waited there for the reference's weights; the
    budget's estimate for its kin (``whole+disable``) is the seconds its cold phase took in its
    child, not the time since its ``go``: the kin is measured when it fits the budget."""
    import time

    from rewriter.engine.measure import measure

    class _Anchor(_Fake):
        def wait_cold(self, until=None):  # noqa: ANN202
            res = super().wait_cold()
            res.payload["phases_s"] = {"import_torch": 1.0, "run": 140.0, "build": 5.0, "waited_for_weights": 30.0,
                                       "load_weights_and_prepare": 1.0, "first_calls": 2.0, "fail_on_recompile": 0.5}
            return res

    monkeypatch.setattr("rewriter.engine.runner.ServedChild", _Fake)
    monkeypatch.setattr("rewriter.engine.verdict.numerics_failures", lambda payload: [])
    early = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    anchor = _Anchor({"variants": ["whole"]}, tmp_path, "cold-whole", tmp_path, 1.0)
    early.go_at = anchor.go_at = time.perf_counter() - 100.0  # sent go before the ladder's compile rungs
    variants = [Variant("eager", tmp_path, judged=False),
                Variant("whole", tmp_path, compiles=True, cost_key="whole", anchor=True),
                Variant("whole+disable", tmp_path, compiles=True, cost_key="whole")]
    spec = type("Spec", (), {"device": "cpu", "shapes": [{"batch": 1}], "model_dump": lambda self: {"device": "cpu"}})()
    m = measure(spec, variants, Options(replicates=1, overlap=False, warmup=0, reps=3, parallel_cold=1), tmp_path,
                started={"eager": early, "whole": anchor}, deadline=time.perf_counter() + 50.0)
    assert "skipped" not in m.results["whole+disable"], m.results["whole+disable"]
    assert m.ok("whole+disable"), m.results


def test_an_anchor_started_again_compiles_from_empty_caches(tmp_path):
    """A dropped early anchor (not the proposal's rewrite) may have filled its Inductor and Triton
    caches (``workdir/caches/whole``), the folder the anchor started again with the others is
    given: they are removed with it, so that anchor's cold phase is a cold compile."""
    from rewriter.diagnose.early_reference import Anchor, EarlyReference

    reference = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    child = _Fake({"variants": ["whole"]}, tmp_path, "cold-whole", tmp_path, 1.0)
    workdir = tmp_path / "w"
    cached = workdir / "caches" / "whole" / "inductor" / "fxgraph"
    cached.mkdir(parents=True)
    (cached / "entry").write_text("a compiled graph")
    early = EarlyReference(workdir, workdir / "original", None, reference, 0.0,
                           anchor=Anchor(Variant("whole", workdir / "anchor", compiles=True, anchor=True), child, []))
    early.drop_anchor()
    assert not child.alive and early.anchor is None
    assert not (workdir / "caches" / "whole").exists()
    assert reference.alive  # the reference's run goes on


def test_an_anchor_started_again_that_crashes_reports_its_crash_not_the_dropped_ones_result(tmp_path):
    """The dropped early anchor may have finished and written ``workdir/cold-whole.result.json``,
    the file the anchor started again with the others writes and is read from: it is removed with
    it, so a restarted anchor that dies without a result reads as a crash."""
    from rewriter.diagnose.early_reference import Anchor, EarlyReference

    reference = _Fake({"variants": ["eager"]}, tmp_path, "cold-eager", tmp_path, 1.0)
    workdir = tmp_path / "w"
    workdir.mkdir()
    child = _Fake({"variants": ["whole"]}, workdir, "cold-whole", workdir / "caches" / "whole", 1.0)
    (workdir / "cold-whole.result.json").write_text('{"info": {}, "shapes": []}')
    early = EarlyReference(workdir, workdir / "original", None, reference, 0.0,
                           anchor=Anchor(Variant("whole", workdir / "anchor", compiles=True, anchor=True), child, []))
    early.drop_anchor()
    assert not (workdir / "cold-whole.result.json").exists()


@pytest.mark.usefixtures("one_thread")
def test_the_reference_starts_after_the_last_quiet_rung_before_the_profile_readers(tmp_path, monkeypatch):
    """The early children start once the rungs that time or read the device's memory are done
    (batch scaling, the profiled run, memory) and before the rungs that only read the recorded
    profile: those run beside the children's build, which is on the search's critical path."""
    from rewriter.diagnose import early_reference

    monkeypatch.setattr(early_reference, "why_not", lambda ctx: None)
    seen: list = []

    def start(ctx, timeout_s):  # noqa: ANN001, ANN202
        seen.append(list(ctx.results))
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(early_reference, "start", start)
    _diagnose_stopped_after_the_ladder(tmp_path, monkeypatch)
    assert seen == [["batch_scaling", "memory"]], seen


def test_no_server_is_started_ahead_where_the_reference_does_not_start_early(monkeypatch):
    """The children's server is started before the setup only where the reference may start early
    (a GPU host with room to overlap): on a CPU the ladder would share the cores with its imports."""
    from types import SimpleNamespace

    from rewriter.diagnose import early_reference
    from rewriter.engine import runner

    started: list = []
    monkeypatch.setattr(runner, "prestart_server", lambda device, trees: started.append((device, trees)) or True)
    cpu = SimpleNamespace(session=SimpleNamespace(cuda=False, spec=SimpleNamespace(device="cpu"), src="src"), overlap=True)
    assert early_reference.prestart(cpu) is False and started == []
    gpu = SimpleNamespace(session=SimpleNamespace(cuda=True, spec=SimpleNamespace(device="cuda"), src="src"), overlap=True)
    monkeypatch.setattr("rewriter.engine.cost.may_overlap", lambda overlap, device: overlap)
    assert early_reference.prestart(gpu) is True and started == [("cuda", ["src"])]
    assert early_reference.prestart(SimpleNamespace(session=gpu.session, overlap=False)) is False  # --no-overlap
