"""The search's branchless candidates: a data-dependent ``if`` in compiled code rewritten as
``torch.where`` (the ``branchless`` action), for a graph break no config knob fixes.

Evidence: the graph-break rung's findings (:mod:`..graph_breaks`) whose reason is Dynamo's for a
Python branch on a tensor's value: ``Data-dependent branching`` with the hint "Use `torch.cond` to
express dynamic control flow" from ``explain`` (torch 2.13; ``generic_jump`` in the message), and
``attempted to jump with TensorVariable()`` in the graph-break log of a program that compiles
itself. ``capture_scalar_outputs`` does not remove it (it still breaks at the jump on the unbacked
value, :mod:`.config`' docstring), so the fix is the restructure the hint names. Of
``torch.cond`` and ``torch.where``, the branchless form is the one a rewrite can write for any
``if`` whose branches only assign plain names (:mod:`rewriter.actions.branchless`: it says which
are refused and why); the finding's line under SRC must hold such an ``if``.

For every candidate that compiles the code the break is in (:func:`.config.covers`:
the program's own compile the harness runs, a whole-model or block compile reaching it), a twin
``<candidate>+branchless`` is proposed just before it, with the candidate's actions plus one
``branchless`` action per accepted ``if``; it adds no compile, so it composes with the program's
own. After measurement :func:`judge` prunes a twin that saw neither fewer graph breaks nor fewer
graphs than the candidate it came from (the ``if`` was not what broke the graph there): an unsafe
change that removes nothing is not planned. The action is unsafe (both sides are evaluated; a NaN/inf the side not taken computes can
reach gradients): the search measures it with the numerics check like any candidate, and the
rewrite writes it only after that validation passes (or with ``--unsafe``).
"""

from __future__ import annotations

import re
from typing import Any

from ...plan import BranchlessAction
from ..candidate import Candidate, CandidateKind, is_as_is, measured_pairs, place_twin

#: Break reasons of a Python ``if``/``while`` on a tensor's value (torch 2.6-2.13 wordings: explain's
#: "Data-dependent branching" with ``generic_jump``, the graph-break log's "attempted to jump with
#: TensorVariable()").
BRANCH_RE = re.compile(r"[Dd]ata[- ]dependent branching|generic_jump|jump with TensorVariable")


def branch_breaks(ctx: Any) -> list[Any]:
    """The graph-break rung's findings under SRC whose reason is a data-dependent branch
    (:data:`BRANCH_RE`), one per ``file:line``."""
    r = ctx.results.get("graph_breaks")
    if r is None or not r.ok:
        return []
    seen: dict[str, Any] = {}
    for f in r.findings:
        if f.kind == "graph_break" and f.file and f.line and f.library is None and BRANCH_RE.search(f.message):
            seen.setdefault(f.where, f)
    return list(seen.values())


def branch_action(src: Any, file: str, line: int, why: str) -> BranchlessAction | str:
    """The ``branchless`` action for the ``if`` at ``file:line`` under ``src``, or the one-line reason
    the rewrite would refuse it (no ``if`` there, or one of the forms
    :mod:`rewriter.actions.branchless` refuses)."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ...actions.branchless import Refused, branchless_statements

    try:
        module = cst.parse_module((src / file).read_bytes())
    except (OSError, cst.ParserSyntaxError) as exc:
        return f"{file}: cannot read it ({' '.join(str(exc).split())[:120]})"
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    found: list[tuple[list[str], cst.FunctionDef, cst.If]] = []

    class _Find(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[tuple[str, cst.CSTNode]] = []

        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            self.stack.append((node.name.value, node))

        def leave_ClassDef(self, node: cst.ClassDef) -> None:
            self.stack.pop()

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.stack.append((node.name.value, node))

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.stack.pop()

        def visit_If(self, node: cst.If) -> None:
            funcs = [n for _, n in self.stack if isinstance(n, cst.FunctionDef)]
            if funcs and positions[node].start.line == line and not found:
                found.append(([name for name, _ in self.stack], funcs[-1], node))  # type: ignore[arg-type]

    module.visit(_Find())
    if not found:
        return f"{file}:{line}: no `if` statement inside a function starts on that line"
    names, func, node = found[0]
    try:
        branchless_statements(func, node, "torch", module.code_for_node(node.test))
    except Refused as exc:
        return f"{file}:{line}: {exc}"
    return BranchlessAction(action="branchless", target=f"{file}::{'.'.join(names)}", line=line, why=why)


def with_branchless(ctx: Any, cands: list[Any]) -> tuple[list[Any], list[str]]:
    """``cands`` with a ``+branchless`` twin before each candidate that compiles an accepted
    data-dependent ``if`` (see the module docstring), and the lines for the report's ``pruned``
    (why an ``if`` was left alone, or why no twin was made)."""
    from .config import covers

    ctx.evidence.branch_twins = {}
    breaks = branch_breaks(ctx)
    if not breaks:
        return cands, []
    notes: list[str] = []
    accepted: list[tuple[Any, BranchlessAction]] = []
    for f in breaks:
        why = (f"graph break: data-dependent branch at {f.where} ({' '.join(f.message.split())[:90]}); no config knob keeps it "
               "in the graph; torch's hint: express it without Python control flow (torch.where); unsafe: both sides are "
               "evaluated, so a NaN/inf in the side not taken can reach gradients (validation decides)")
        got = branch_action(ctx.session.src, f.file, f.line, why)
        if isinstance(got, str):
            notes.append(f"+branchless: {got}")
        else:
            accepted.append((f, got))
    if not accepted:
        return cands, notes
    gb = ctx.results["graph_breaks"]
    own_measured = "program's own" in str(gb.measurement.get("source", ""))
    keys = {c.key() for c in cands}
    out: list[Any] = []
    made = 0
    for c in cands:
        mine = own_measured and (is_as_is(c.name))
        covered = [a for f, a in accepted if covers(c, f, ctx, mine)
                   and not any(b.action == "branchless" and b.target == a.target and b.line == a.line for b in c.plan.actions)]
        if not covered:
            out.append(c)
            continue
        twin = Candidate(f"{c.name}+branchless", c.plan.model_copy(update={"actions": [*c.plan.actions, *covered]}),
                         [*c.notes, "branchless is unsafe (both sides of the branch are evaluated): the numerics check decides"])
        made += place_twin(out, keys, ctx.evidence.branch_twins, twin, c)
    if not made:
        where = ", ".join(a.target + f" line {a.line}" for _, a in accepted)
        notes.append(f"+branchless: no measured candidate compiles the branch at {where} (the program's own compile of it "
                     "is not run by the harness, or every compile of it was pruned)")
    return out, notes


def judge(ctx: Any, rows: dict[str, dict[str, Any]]) -> list[str]:
    """After measurement: a ``+branchless`` twin (:func:`with_branchless`) that saw neither fewer graph
    breaks (:func:`.config._breaks_seen`: Dynamo's counters or its graph-break log) nor
    fewer graphs than the candidate it came from is marked ``skipped`` in ``rows``; returns one line
    per twin pruned so. Rows not both measured without a problem are left to the decision."""
    from .config import _breaks_seen, _graphs

    lines: list[str] = []
    for name, row, base, ref in measured_pairs(rows, ctx.evidence.branch_twins):
        seen, seen0, graphs, graphs0 = _breaks_seen(row), _breaks_seen(ref), _graphs(row), _graphs(ref)
        if None in (seen, seen0, graphs, graphs0) or seen < seen0 or graphs < graphs0:
            continue
        row["skipped"] = (f"pruned after measurement: torch.where removed no graph break ({seen} break(s), {graphs} graph(s) "
                          f"seen vs {seen0} and {graphs0} for {base!r}); an unsafe change that removes nothing is not planned")
        lines.append(f"{name}: {row['skipped']}")
    return lines


KIND = CandidateKind("branchless", 50, with_branchless, judge)
