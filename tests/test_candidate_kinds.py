"""Candidate kinds are discovered, not listed: a module of ``rewriter.diagnose.kinds`` that declares
``KIND`` is used by the search's proposal, in its ``order`` among the others, with no registration
line (docs/design.md, "Where each kind of change goes")."""

from __future__ import annotations

import sys

from test_diagnose_planner import llama

from rewriter.diagnose import kinds
from rewriter.diagnose.candidate import Candidate
from rewriter.diagnose.candidates import propose

#: A kind as a new module would declare it: one twin of the first candidate, named after the kind,
#: recording the candidate names it was given.
PROBE = '''
from rewriter.diagnose.candidate import Candidate, CandidateKind

SEEN = []


def make(ctx, cands):
    SEEN.append([c.name for c in cands])
    return cands + [Candidate("{name}", cands[0].plan, ["{name}"])], ["{name}: probed"]


KIND = CandidateKind("{name}", {order}, make, when_compiles_pruned={always})
'''


def _drop(monkeypatch, tmp_path, *probes: tuple[str, int, bool], alone: bool = False) -> dict:
    """Write each probe as a module of a folder on the kinds package's path; returns the modules'
    ``SEEN`` lists by name, read after the run."""
    folder = tmp_path / "dropped"
    folder.mkdir()
    for name, order, always in probes:
        (folder / f"{name}.py").write_text(PROBE.format(name=name, order=order, always=always))
    monkeypatch.setattr(kinds, "__path__", [str(folder)] if alone else [*kinds.__path__, str(folder)])
    for name, _, _ in probes:
        monkeypatch.delitem(sys.modules, f"{kinds.__name__}.{name}", raising=False)
    return {name: f"{kinds.__name__}.{name}" for name, _, _ in probes}


def test_a_kind_dropped_into_the_package_is_used_by_propose_in_its_order(tmp_path, monkeypatch):
    modules = _drop(monkeypatch, tmp_path, ("probe_last", 1000, True), ("probe_first", 1, True))
    names = [k.name for k in kinds.registered()]
    assert names[0] == "probe_first" and names[-1] == "probe_last", names
    assert {"capture_config", "value_guard_knob", "attention", "recompile_limit", "branchless"} <= set(names[1:-1]), names

    cands, pruned = propose(llama(tmp_path, monkeypatch))
    by_name = [c.name for c in cands]
    assert by_name.index("probe_first") < by_name.index("probe_last"), by_name
    assert pruned.index("probe_first: probed") < pruned.index("probe_last: probed"), pruned
    [first_saw] = sys.modules[modules["probe_first"]].SEEN
    [last_saw] = sys.modules[modules["probe_last"]].SEEN
    # the first kind sees the base candidates only; the last sees every kind's candidates before it
    assert "probe_first" not in first_saw and "as-is" in first_saw, first_saw
    assert last_saw == by_name[:-1], (last_saw, by_name)


def test_a_kind_that_twins_only_compiles_is_skipped_when_every_compile_was_pruned(tmp_path, monkeypatch):
    modules = _drop(monkeypatch, tmp_path, ("any_plan", 1, True), ("compiles_only", 2, False), alone=True)
    base = [Candidate("as-is", None)]  # the probes read names only
    cands, pruned = kinds.extend(None, base, compiles_pruned=True)
    assert [c.name for c in cands] == ["as-is", "any_plan"] and pruned == ["any_plan: probed"]
    assert sys.modules[modules["compiles_only"]].SEEN == []
    cands, _ = kinds.extend(None, base)
    assert [c.name for c in cands] == ["as-is", "any_plan", "compiles_only"]
