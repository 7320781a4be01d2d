"""A tree whose compile a plan turned off (``disable=True``, ``as-is+no-compile`` applied) is measured
again as the program it is: diagnose lists each call turned off, proposes turning it back on
(``as-is+compile-on``: ``own_call: {disable: false}``), and proposes no compile of its own over the
code that call compiles once on (docs/design.md, "The search")."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
import sys
from types import SimpleNamespace

import pytest

from rewriter.diagnose.candidates import OwnScope
from rewriter.diagnose.evidence import Evidence
from rewriter.diagnose.own_candidates import COMPILE_ON, NO_COMPILE, compile_on
from rewriter.diagnose.own_compile import OFF_SAID, compile_setup, off_compiles, own_compiles
from rewriter.plan import CompileAction, parse_plan

ROOT = Path(__file__).resolve().parents[1]
DECORATED = ROOT / "fixtures" / "diagnose" / "own_whole_decorated"
OFF_HARNESS = "    return torch.compile(model, disable=True)\n"

FORMS = '''\
import torch
from model import Net


def build():
    model = torch.compile(Net(), disable=True)
    return model(1)


@torch.compile(backend="eager", disable=True)
def step(x):
    return x + 1


def h(x):
    return x


h = torch.compile(h, disable=True)


def run(m):
    m.compile(disable=True)
    return build() + step(1) + h(m)


def regional(m):
    m.compile_repeated_blocks(fullgraph=True, disable=True)
    return run(m)


regional(None)
'''


def test_each_form_of_a_call_turned_off_is_listed_off_and_read_by_nothing_else(tmp_path):
    """Decorator, call, ``module.compile``, rebinding and ``compile_repeated_blocks``, each with
    ``disable=True``: :func:`off_compiles` reads each with its site, what it would cover and that
    ``disable`` can be edited; :func:`own_compiles` and :func:`compile_setup` (every reader of the
    program's compiles as compiling) see none of them."""
    (tmp_path / "train.py").write_text(FORMS)
    off = off_compiles(tmp_path)
    assert [(o.where, o.site, o.covers[0]) for o in off] == [
        ("train.py:6", "train.py::build", "class"),
        ("train.py:10", "train.py::step", "function"),
        ("train.py:19", "train.py::h", "function"),
        ("train.py:23", "train.py::run", "unknown"),
        ("train.py:28", "train.py::regional", "declared"),
    ], off
    assert all(o.off and o.value("disable") is True and o.can("disable") is None and o.idle is None for o in off), off
    assert off[1].code == '@torch.compile(backend="eager", disable=True)'
    assert off[0].setup_line == f"train.py:6: torch.compile(Net(), disable=True) ({OFF_SAID})"
    assert own_compiles(tmp_path) == [] and compile_setup(tmp_path) == []


def _llama(tmp_path, monkeypatch):
    """The llama workload whose harness's ``build_model`` returns ``torch.compile(model, disable=True)``
    (written after the reference model is built: ``disable=True`` returns the model it was given)."""
    from test_diagnose_planner import llama

    ctx = llama(tmp_path, monkeypatch)
    harness = ctx.session.src / "harness.py"
    text = harness.read_text()
    assert "    return model\n" in text
    harness.write_text(text.replace("    return model\n", OFF_HARNESS))
    return ctx


def _line(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text.rstrip("\n")) + 1


def test_the_search_proposes_turning_the_call_back_on_and_no_whole_compile_over_it(tmp_path, monkeypatch):
    from rewriter.diagnose.candidates import propose

    ctx = _llama(tmp_path, monkeypatch)
    line = _line(ctx.session.src / "harness.py", OFF_HARNESS)
    cands, pruned = propose(ctx)
    by_name = {c.name: c for c in cands}
    assert COMPILE_ON in by_name, list(by_name)
    [action] = by_name[COMPILE_ON].plan.actions
    assert (action.target, action.strategy, action.own_call.edits()) == ("harness.py::build_model", "whole", {"disable": False})
    assert f"harness.py:{line}: torch.compile(model, disable=True)" in action.why
    assert by_name[COMPILE_ON].compiles  # it pays its compile, as every compiling candidate does
    # no compile of the whole model beside the call turned off; per-block compiles other code
    assert not {"whole", "nested+whole"} & set(by_name), list(by_name)
    for c in cands:
        assert not any(a.action == "compile" and a.own_call is None and a.strategy == "whole" for a in c.plan.actions), c
    assert "per-block" in by_name
    [why] = [p for p in pruned if p.startswith("nested+whole, whole")]
    assert f"harness.py:{line}: torch.compile(model, disable=True)) is turned off (disable=True)" in why
    assert "own_call: {disable: false}" in why and COMPILE_ON in why


def test_turned_back_on_the_plan_changes_one_line_and_the_round_trip_gives_the_bytes_back(tmp_path, monkeypatch):
    """Applied, ``as-is+compile-on`` removes ``disable=True`` and nothing else; the program turned
    off (``as-is+no-compile``) and back on is the program byte for byte, and the rewritten tree
    passes the plan's consistency rules both ways."""
    from rewriter.cli import main
    from rewriter.diagnose.candidates import propose
    from rewriter.diagnose.report import plan_yaml
    from rewriter.rewrite.transform import plan_rewrite

    ctx = _llama(tmp_path, monkeypatch)
    src = ctx.session.src
    off_text = (src / "harness.py").read_text()
    on = {c.name: c for c in propose(ctx)[0]}[COMPILE_ON]
    result = plan_rewrite(parse_plan(plan_yaml(on.plan)), src)
    [change] = result.changes
    diff = result.diff().splitlines()
    removed = [x for x in diff if x.startswith("-") and not x.startswith("---")]
    added = [x for x in diff if x.startswith("+") and not x.startswith("+++")]
    assert removed == ["-" + OFF_HARNESS.rstrip("\n")] and added == ["+    return torch.compile(model)"], diff
    plan = tmp_path / "on.yaml"
    plan.write_text(plan_yaml(on.plan))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    on_text = (src / "harness.py").read_text()
    assert on_text == off_text.replace(OFF_HARNESS, "    return torch.compile(model)\n")
    # off again, then on again: the bytes of each state come back
    off = tmp_path / "off.yaml"
    off.write_text(plan.read_text().replace("disable: false", "disable: true"))
    assert "disable: true" in off.read_text()
    assert main(["rewrite", "--plan", str(off), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "harness.py").read_text() == off_text
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "harness.py").read_text() == on_text


def test_a_decorator_turned_off_and_back_on_is_the_users_decorator_again(tmp_path, capsys):
    """The user's ``@torch.compile`` on the model's ``forward``, turned off and back on: the same
    decorator, with the one line every whole-model compile a plan leaves carries above it (SP101's
    suppression: the measured choice must not fail ``stackpart check``, which flags the user's own
    decorator too); applying the plan again changes nothing, and check passes the tree."""
    from rewriter.cli import main

    src = tmp_path / "src"
    shutil.copytree(DECORATED, src)
    before = (src / "model.py").read_text()
    head = "version: 1\nactions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n"
    for name, disable in (("off", "true"), ("on", "false")):
        (tmp_path / f"{name}.yaml").write_text(head + f"    own_call: {{disable: {disable}}}\n")
    assert main(["rewrite", "--plan", str(tmp_path / "off.yaml"), str(src), "--apply", "--no-validate"]) == 0
    [off] = off_compiles(src)
    assert (off.site, off.covers, off.can("disable")) == ("model.py::Net.forward", ("function", "model.py::Net.forward"), None)
    assert main(["rewrite", "--plan", str(tmp_path / "on.yaml"), str(src), "--apply", "--no-validate"]) == 0
    decorator = '    @torch.compile(backend="eager")\n'
    after = (src / "model.py").read_text()
    assert after == before.replace(decorator, "    # stackpart: ignore[SP101]: strategy whole, as planned\n" + decorator)
    line = int(off.where.rsplit(":", 1)[1]) + 1  # below the suppression line
    assert off_compiles(src) == [] and [o.where for o in own_compiles(src)] == [f"model.py:{line}"]
    assert main(["rewrite", "--plan", str(tmp_path / "on.yaml"), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "model.py").read_text() == after  # idempotent
    capsys.readouterr()
    assert main(["check", "--plan", str(tmp_path / "on.yaml"), "--src", str(src), str(src / "model.py")]) == 0, capsys.readouterr().out


def _action(target: str, strategy: str = "region") -> CompileAction:
    return CompileAction(action="compile", target=target, strategy=strategy, why="w")


def test_a_compile_of_what_a_call_turned_off_compiles_is_refused_and_says_which_call(tmp_path):
    """The same function (a decorator turned off: consistency refuses it too), the whole model, the
    repeated block: each a second compile once the call is on. An idle call turned off, one that no
    edit can turn back on (``**opts``) and a compile of other code refuse nothing."""
    (tmp_path / "model.py").write_text(
        "import torch\n\n\nclass Block(torch.nn.Module):\n"
        "    @torch.compile(disable=True)\n    def forward(self, x):\n        return x\n\n\n"
        "def build(model, opts):\n    model = torch.compile(model, disable=True, **opts)\n    return model\n\n\n"
        "def make(model):\n    model = torch.compile(model, disable=True)\n    return model\n")
    block, opts, make = off_compiles(tmp_path, entries=frozenset({"model.py::build", "model.py::make"}))
    assert block.covers == ("function", "model.py::Block.forward") and opts.can("disable") and make.can("disable") is None
    scope = OwnScope(off=[(block, "block"), (opts, "whole")], block_cls="Block", block_target="model.py::Block")
    why = scope.off_conflict(_action("model.py::Block"))
    assert why and why.startswith("the program's own compile of model.py::Block.forward (model.py:5: @torch.compile(disable=True)) "
                                  "is turned off (disable=True)"), why
    assert scope.off_conflict(_action("model.py::Net", "whole")) is None  # **opts: no edit turns it back on
    scope = OwnScope(off=[(make, "whole")], block_cls="Block", block_target="model.py::Block")
    assert "of the whole model (model.py:16: torch.compile(model, disable=True))" in scope.off_conflict(_action("model.py::Net", "whole"))
    assert scope.off_conflict(_action("model.py::Block")) is None  # the blocks are other code than the whole model's entry
    idle = OwnScope(off=[(replace(make, idle="never called"), "whole")])
    assert idle.off_conflict(_action("model.py::Net", "whole")) is None


def _ctx(tmp_path: Path, model_fn: str = "build_model"):
    import torch

    spec = parse_plan("version: 1\nharness: {file: harness.py, model: %s}\nactions: []\n" % model_fn).plan.harness
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    return SimpleNamespace(backend="eager", session=SimpleNamespace(spec=spec, src=tmp_path), amortization_assumed=True,
                           evidence=Evidence(), reference=lambda: (model, None, None))


def test_turning_on_is_proposed_only_for_a_call_the_harness_runs_and_the_rewrite_can_edit(tmp_path):
    (tmp_path / "harness.py").write_text("import torch\n\n\ndef build_model():\n    return torch.compile(torch.nn.Linear(2, 2), "
                                         "disable=True)\n\n\ndef build_opts(opts):\n"
                                         "    return torch.compile(torch.nn.Linear(2, 2), disable=True, **opts)\n")
    (tmp_path / "train.py").write_text("import torch\nfrom harness import build_model\n\n\ndef main():\n"
                                       "    model = torch.compile(build_model(), disable=True)\n    model(1)\n")
    entries = frozenset({"harness.py::build_model", "harness.py::build_opts"})
    ran, opts, unrun = off_compiles(tmp_path, entries=entries)
    assert [o.where for o in (ran, opts, unrun)] == ["harness.py:5", "harness.py:9", "train.py:6"]
    pruned: list[str] = []
    [(name, decision)] = compile_on(_ctx(tmp_path), OwnScope(off=[(ran, "whole"), (unrun, "whole")]), pruned)
    assert name == COMPILE_ON and name != NO_COMPILE
    assert [(a.target, a.strategy, a.own_call.edits()) for a in decision.plan.actions] == [
        ("harness.py::build_model", "whole", {"disable": False})]
    [why] = pruned
    assert why.startswith(f"{COMPILE_ON}: the harness does not run the program's call train.py:6: "), why
    pruned = []
    assert compile_on(_ctx(tmp_path, "build_opts"), OwnScope(off=[(opts, "whole")]), pruned) == []
    [why] = pruned
    assert why.startswith(f"{COMPILE_ON}: harness.py:9: ") and "**opts" in why, why


def test_the_report_lists_the_call_turned_off_in_the_programs_setup():
    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.search import SearchOutcome

    as_is = Candidate("as-is", parse_plan("version: 1\nactions: []\n").plan)
    line = f"harness.py:22: torch.compile(model, disable=True) ({OFF_SAID})"
    [row] = SearchOutcome([as_is], own_off_setup=[line]).table()
    assert row["actions"] == [f"the program's own: {line}"]


@pytest.mark.parametrize("disable, compiles", [(False, True), (True, False)])
def test_turning_on_compiles_and_its_compile_units_are_keyed(disable, compiles):
    """On, the edit compiles (the decision counts its compile per start, the budget keys its kin);
    off, it compiles nothing."""
    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.search_budget import cost_key

    plan = parse_plan("version: 1\nactions:\n  - action: compile\n    target: harness.py::build_model\n    strategy: whole\n"
                      f"    own_call: {{disable: {str(disable).lower()}}}\n").plan
    c = Candidate(COMPILE_ON, plan)
    assert c.compiles is compiles and (cost_key(c) is not None) is compiles


@pytest.mark.slow
def test_diagnose_measures_a_tree_whose_decorator_was_turned_off(tmp_path, monkeypatch):
    """End to end on CPU (eager backend): the user's decorator with ``disable=True`` is listed as
    turned off, ``as-is+compile-on`` is measured (it compiles: a cold compile and graphs), and the
    whole-model compile over it is pruned with the reason."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    shutil.copytree(DECORATED, src, ignore=shutil.ignore_patterns("__pycache__"))
    model = src / "model.py"
    model.write_text(model.read_text().replace('@torch.compile(backend="eager")', '@torch.compile(backend="eager", disable=True)'))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}, {"batch": 6}], mode=None,
                                 dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", backend="eager")
    search = outcome.search
    assert search.own_off_setup == [f"model.py:23: @torch.compile(backend=\"eager\", disable=True) ({OFF_SAID})"]
    table = {r["candidate"]: r for r in search.table()}
    row = table[COMPILE_ON]
    assert not row["status"].startswith("failed") and row["numerics"] == "ok" and row["graphs"] >= 1, row
    assert row["cold_compile_s"], row
    assert "whole" not in table and any("is turned off (disable=True)" in p for p in search.pruned), search.pruned


def test_a_call_in_the_model_function_the_harness_imports_from_another_file_is_run(tmp_path, monkeypatch):
    """``from train import build_model`` in the harness: the harness's model function is
    train.py's, so its call turned off is one the harness runs, and turning it back on is proposed."""
    (tmp_path / "harness.py").write_text("import torch\nfrom train import build_model\n\n\ndef make_inputs(batch=2):\n"
                                         "    return (torch.randn(batch, 2),)\n")
    (tmp_path / "train.py").write_text("import torch\n\n\ndef build_model():\n"
                                       "    model = torch.compile(torch.nn.Linear(2, 2), disable=True)\n    return model\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("train", None)
    import train  # noqa: PLC0415 - the tree's own module

    [own] = off_compiles(tmp_path, entries=frozenset({"harness.py::build_model"}))
    ctx = _ctx(tmp_path)
    ctx.session.harness = SimpleNamespace(build_model=train.build_model, src=tmp_path)
    pruned: list[str] = []
    [(name, decision)] = compile_on(ctx, OwnScope(off=[(own, "whole")]), pruned)
    assert [(a.target, a.own_call.edits()) for a in decision.plan.actions] == [("train.py::build_model", {"disable": False})]
    assert pruned == []
    sys.modules.pop("train", None)


def test_the_as_is_row_says_when_the_programs_compile_did_not_run_in_the_harness():
    """The source compiles in a script's ``main`` the harness never runs: as-is compiled 0 graphs,
    so its row lists the call as the source's, not as what ran. A compile the harness ran that
    raised compiled 0 graphs too, and its row says that it raised, not that it never ran."""
    from rewriter.diagnose.candidate import Candidate
    from rewriter.diagnose.search import SearchOutcome

    as_is = Candidate("as-is", parse_plan("version: 1\nactions: []\n").plan)
    line = "train.py:12: torch.compile(model)"
    rows = {"as-is": {"compile": {"unique_graphs": 0}}}
    [row] = SearchOutcome([as_is], own_setup=[line], rows=rows).table()
    assert row["actions"] == [f"the program's own (in the source, not run by the harness): {line}"]
    # the harness ran it and it raised: the row is the program with compilation off, not a call never run
    [row] = SearchOutcome([as_is], own_setup=[line], rows=rows, as_is_raises=True).table()
    assert row["actions"] == [f"the program's own (it raised as the harness ran it: this row has compilation off): {line}"]
    rows["as-is"]["compile"]["unique_graphs"] = 2
    [row] = SearchOutcome([as_is], own_setup=[line], rows=rows).table()
    assert row["actions"] == [f"the program's own: {line}"]
