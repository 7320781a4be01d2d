"""The candidates table's "(the rule's proposal)" label: on the row that is the ladder rules'
proposal as the rules made it, and on no other. Where the program's own compile strikes the
proposal's compile (gpt-fast's compiled free functions, diffusers' ``pipe.unet =
torch.compile(pipe.unet)``), what is left of it may be the program as it is: that row names the
action the rules proposed and the search dropped, not the proposal."""

from __future__ import annotations

from types import SimpleNamespace

from rewriter.diagnose.candidates import OwnScope, _Proposals
from rewriter.diagnose.planner import Decision
from rewriter.diagnose.report import candidates_markdown
from rewriter.diagnose.rung import RungResult
from rewriter.diagnose.search import SearchOutcome
from rewriter.plan import CompileAction, parse_plan

EMPTY = parse_plan("version: 1\nactions: []\n").plan


def _plan(*actions):
    return Decision(EMPTY.model_copy(update={"actions": list(actions)}), [])


def _table_md(p: _Proposals) -> tuple[list[dict], str]:
    out = SearchOutcome(p.out)
    rows = out.table()
    search = RungResult("search", "search")
    search.measurement = {"candidates": rows, "backend": "eager"}
    return rows, "\n".join(candidates_markdown(search))


def _block() -> CompileAction:
    return CompileAction(action="compile", target="model.py::Block", strategy="region", why="w")


def test_the_as_is_row_is_not_labelled_the_rules_proposal_where_its_compile_was_dropped():
    own = SimpleNamespace(text='generate.py:21: torch.compile(decode_one_token, fullgraph=True)', fullgraph=True)
    p = _Proposals(ctx=None, scope=OwnScope(whole=[own]))
    p.add("as-is", _plan())
    p.add("rule", _plan(_block()), rule=True)
    assert [c.name for c in p.out] == ["as-is"]
    rows, md = _table_md(p)
    [asis] = rows
    assert asis["rule"] is False and asis["rule_dropped"] == ["compile model.py::Block (region)"], asis
    line = next(x for x in md.splitlines() if x.startswith("- **as-is**"))
    assert "(the rule's proposal)" not in line, line
    assert "(the rule proposed `compile model.py::Block (region)`, pruned: see below; this row is what is left of it)" in line, line


def test_the_rules_proposal_as_made_keeps_its_label():
    p = _Proposals(ctx=None, scope=OwnScope())
    p.add("as-is", _plan())
    p.add("rule", _plan(_block()), rule=True)
    rows, md = _table_md(p)
    assert [(r["candidate"], r["rule"], r["rule_dropped"]) for r in rows] == [("as-is", False, []), ("rule", True, [])]
    assert "- **rule** (the rule's proposal): `compile model.py::Block (region)`" in md, md
    assert "- **as-is**: " in md, md


def test_a_whole_model_proposal_over_the_programs_own_compile_is_not_labelled_on_as_is():
    """The rules' whole-model compile over a program that compiles itself is the second compile
    the search prunes before composing (``candidates._rule``): the as-is row it merges into says
    the whole-model compile was dropped, and is not labelled the proposal."""
    from rewriter.diagnose.candidates import _rule

    p = _Proposals(ctx=None, scope=OwnScope())
    p.add("as-is", _plan())
    whole = CompileAction(action="compile", target="model.py::Net", strategy="whole", why="w")
    _rule(p, _plan(whole), ["train.py:13: torch.compile(model)"])
    rows, md = _table_md(p)
    assert [(r["candidate"], r["rule"], r["rule_dropped"]) for r in rows] == [("as-is", False, ["compile model.py::Net (whole)"])]
    assert "(the rule's proposal)" not in md, md
