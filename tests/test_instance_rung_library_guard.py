"""The per-instance recompiles rung where the guard is in an installed library's code (transformers'
DynamicCache: ``kwargs['cache'].layers[0].is_initialized == False`` in
``transformers.cache_utils:DynamicLayer.update``), with no line under SRC: the finding names the
library function, and the verdict says what the user can do there (the whole-model compile, the
per-block candidates the search measures despite the guard, a library-target ``disable`` written by
hand) instead of "disable the per-instance code", which has nothing under SRC to act on. The
planner's note and candidates agree: no ``disable`` of the library function is proposed."""

from __future__ import annotations

import inspect
import json.decoder
from types import SimpleNamespace

from rewriter.diagnose.rung import Finding, RungResult
from rewriter.diagnose.rungs import instance_recompiles
from rewriter.diagnose.rungs.instance_recompiles import _guard_findings, _Recompiles, _Sweep, _verdict, per_instance_implies

LIB = "transformers.cache_utils:DynamicLayer.update"
GUARD = "guard failure: kwargs['cache'].layers[0].is_initialized == False"


def _rung(findings: list[Finding], limit_hit: bool = False) -> tuple[RungResult, _Sweep, _Recompiles]:
    """A fake instance-rung result of 2 recompiles across 4 instances of ``DecoderLayer``, with
    ``findings``, and the sweep and sorted recompiles :func:`_verdict` reads."""
    r = RungResult("instance_recompiles", "Recompiles across instances of the repeated block")
    r.findings = findings
    r.measurement = {"instances": 4, "class": "DecoderLayer", "distinct_shapes": 1, "recompile_limit": 8,
                     "limit_hits": [], "limit_hit": limit_hit, "graphs": 4, "graphs_per_shape": [4]}
    sweep = _Sweep(log=None, per_shape=[{"shape": {"seq": 16}}], counts={}, at_reference=[], frames=[])
    rc = _Recompiles(mine=[object(), object()], structural=0, sized=0, property=0, properties=[], by_frame={})
    return r, sweep, rc


def test_a_guard_in_library_code_names_the_function_and_what_the_user_can_do():
    r, sweep, rc = _rung([Finding("guard", GUARD, library=LIB)])
    verdict, implies = _verdict(SimpleNamespace(), r, sweep, rc, "forward", "recompile_limit")
    assert verdict == ("2 recompile(s) across 4 instances of DecoderLayer (guard at "
                       f"{LIB}, no line under SRC)"), verdict
    assert implies.startswith(f"the guard is in {LIB}, an installed library's code with no line under SRC to disable: "
                              "keep the whole-model compile"), implies
    assert "a disable action on that library target, applied at the harness's site (docs/library-models.md)" in implies
    assert "the search does not propose it" in implies
    assert "disable the per-instance code" not in implies and "do not compile the block as is" not in implies


def test_a_guard_under_src_or_with_no_line_keeps_the_per_instance_advice():
    under_src = Finding("guard", "guard failure: self.layer_idx == 0", "model.py", 30, "DecoderLayer.forward")
    plain = "disable the per-instance code (keep it eager) or restructure; do not compile the block as is"
    for findings in ([under_src], [Finding("guard", GUARD)], [under_src, Finding("guard", GUARD, library=LIB)]):
        r, sweep, rc = _rung(findings)
        assert _verdict(SimpleNamespace(), r, sweep, rc, "forward", "recompile_limit")[1] == plain, findings
    assert per_instance_implies([]) == plain


def test_the_guard_finding_names_the_library_function_its_user_stack_ends_in(tmp_path):
    """The guard's user stack (as Dynamo prints it) ends in an installed module's function, and no
    frame or ``# file:line`` comment is under SRC: ``library`` is that function as a plan target,
    the file and line stay unset. (``json.decoder`` stands for an installed package here: it is
    imported and found on ``sys.path`` by its name, as transformers' modules are.)"""
    lines, first = inspect.getsourcelines(json.decoder.JSONDecoder.decode)
    line = first + len(lines) - 1
    text = ("Recompiling function forward in /lib/site-packages/pkg/layers.py:89\n"
            "    triggered by the following guard failure(s):\n"
            "    - 0/0: args[1].layers[0].is_initialized == False  # if not self.is_initialized:  # pkg/cache.py:133 in update\n"
            "    - User stack trace:\n"
            f'    -   File "{json.decoder.__file__}", line {line}, in decode\n')
    log = SimpleNamespace(guard_site=lambda src, t: None)
    rc = SimpleNamespace(text=text, guards=["args[1].layers[0].is_initialized == False"])
    ctx = SimpleNamespace(session=SimpleNamespace(src=tmp_path))
    [finding] = _guard_findings(ctx, log, [rc, rc])
    assert finding.library == "json.decoder:JSONDecoder.decode", finding
    assert (finding.file, finding.line, finding.where) == (None, None, Finding.UNLOCATED)
    assert instance_recompiles._guard_where(finding) == "json.decoder:JSONDecoder.decode, no line under SRC"


def test_the_planner_says_the_same_and_proposes_no_disable_of_the_library_function(tmp_path, monkeypatch):
    from rewriter.diagnose.candidates import propose
    from rewriter.diagnose.planner import plan
    from test_diagnose_planner import llama, result

    ctx = llama(tmp_path, monkeypatch)
    ctx.results["instance_recompiles"] = result("instance_recompiles", recompiles=2, instances=4, limit_hit=False)
    ctx.results["instance_recompiles"].findings.append(Finding("guard", GUARD, library=LIB))
    decision = plan(ctx)
    assert not [a for a in decision.plan.actions if a.action == "compile"], decision.plan.actions
    [note] = [n for n in decision.notes if "no compile planned for the block" in n]
    assert f"from a guard in {LIB} (an installed library's code, no line under SRC)" in note, note
    assert "restructure" not in note, note
    cands, _ = propose(ctx)
    names = {c.name for c in cands}
    assert "per-block" in names and "whole" in names, names  # measured despite the guard, and the whole model
    assert not [a for c in cands for a in c.plan.actions if a.action == "disable" and LIB.split(":")[1] in a.target]
