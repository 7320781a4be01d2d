"""The search's "pruned by evidence" lines: one line per candidate, each line once, in report.md
and wherever the search's pruned list is read."""

from __future__ import annotations

from rewriter.diagnose.pruned import merge
from rewriter.diagnose.report import markdown
from rewriter.diagnose.rung import RungResult

OWN = 'serve.py:6: torch.compile(model, mode="reduce-overhead")'
STANDIN = (f"as-is+regional: the program's own compile ({OWN}) is not run by the harness and cannot be turned "
           "regional: serve.py: the compile runs at module level, which no plan target names; change its options by hand")
UNRUN = (f"as-is+regional, as-is+dynamic: the harness's model does not run the program's own compile ({OWN}), so a "
         "variant of it would not be measured")
WHOLE = f"nested+whole, whole, whole+cudagraphs: the program compiles code itself ({OWN})"
RULE = "per-block, the rule's proposal: the program compiles the whole model itself"


def test_a_candidate_pruned_for_two_reasons_is_one_line_that_says_both():
    """as-is+regional was listed twice, once by the stand-in step and once by the variants of the
    program's call, each with its own reason (and a line could be listed twice verbatim)."""
    out = merge([STANDIN, WHOLE, UNRUN, RULE, WHOLE])
    assert out == [f"{STANDIN}; also {UNRUN}", WHOLE, RULE], out
    assert merge(["a+x: one", "a+x: two"]) == ["a+x: one; also: two"]
    assert merge(out) == out  # merged lines stay as they are


def test_report_md_lists_each_pruned_candidate_once():
    search = RungResult(name="search", title="search", status="ok", measurement={
        "candidates": [{"candidate": "as-is", "chosen": True, "actions": [], "rule": False}],
        "pruned": [STANDIN, WHOLE, UNRUN, WHOLE], "backend": "eager"})
    notes = ["search: the program as it is", *(f"search: pruned {p}" for p in merge(search.measurement["pruned"]))]
    text = markdown({"harness": {"file": "harness.py"}}, [search], None, notes, [], None, None)
    pruned = text.split("Pruned by evidence:", 1)[1].split("##", 1)[0]
    assert [ln for ln in pruned.splitlines() if ln.startswith("- ")] == [f"- {STANDIN}; also {UNRUN}", f"- {WHOLE}"]
    assert text.count("cannot be turned regional") == 1, text  # the planner notes do not repeat the list
    assert "- search: the program as it is" in text
