"""The search's decision: which measured candidate becomes the plan (docs/design.md, "The search").

Among candidates that ran with correct numerics, no silent fallback to eager (no graph captured,
the recompile limit hit), no recompile after warm-up and no error, the largest net saving (in the
worse of two host conditions where both were timed, below) of the amortization rule
(partitioning-the-stack, "How do you decide whether the compile time is worth it?") over the
program as it is:

    net = (t_as_is - t_candidate) x N_runs - (c_candidate - c_as_is) x restarts      (seconds)

``c`` is the compile a cold process pays per start (``compile_s_per_start``: first call minus
steady call, for every shape that compiled), so new-shape compiles and recompiles are counted as
observed; ``c_as_is`` is the program's own compile (0 where it does not compile), so an edit of
that compile that starts faster (regional compilation, PyTorch's "Reducing torch.compile cold
start compilation time with regional compilation") saves what it no longer compiles.
A candidate ties with the best one when its step differs by less than the noise, or when its
net saving is within the band's share of the best candidate's step over the deployment (what that
drift of the step between runs moves the net by); of tied candidates the cheaper compile wins, so
the choice is stable from run to run. The noise is measured where every variant was timed in two
processes (:func:`rewriter.engine.noise.process_noise`: what a re-run moves a figure by, at
least :data:`NOISE`), and then the step ratio against that band decides alone. Where each variant
ran in one process the band is assumed (:data:`NOISE`, :data:`NET_NOISE_SHARE`), and a pair also
ties when the 95% interval of its paired step-time ratio (one process each,
:func:`rewriter.engine.noise.ratio_interval`) contains 1. With a measured band that interval no
longer makes a tie: its width is the rounds' jitter within one process, not what a re-run moves
the ratio by (docs/decisions.md, "Tie bands when the noise is not measured").

Where every candidate was also timed with its host core contended (the engine's
``Options.contended``, diagnose's search on CUDA), the best candidate is the one least behind the
best net in the worse of the two conditions (:func:`contended_standing`), and a pair tied on the
quiet core ties only if the contended steps are within that window's band too. Why: a launch-heavy
plan's step moves with the state of its host core far more than a plan with fewer launches, so
the plan is the one that holds up when the host is busy, and a re-run whose host is quiet in one
run and busy in the next picks the same plan (docs/decisions.md, "Minimax over host conditions").
Nor does a pair tie where the slower one runs below :data:`SPEED_BAR` of the other's speed on the
quiet core and is no faster on the contended one (:func:`below_bar`): both conditions agree the gap
is the plans', and a cheaper compile does not buy a plan under the product's speed bar.

With a backend that cannot speed anything up (``eager`` on CPU) the gain is not measured: the
measurement still excludes every candidate that failed, and what it does measure comes next. One
whose gain is compile time, :data:`.candidate.COMPILE_TIME`, is judged by its compile per start,
which Dynamo's tracing still costs on that backend, against the program's own beyond the noise
band (:func:`_compile_time_judged`). Then the recompiles and graph breaks over the harness's
shapes: where the program as it is recompiles there, the candidates and the program are ranked by
their recompiles plus graph breaks, fewest first; among equal sums the fewer graph breaks, then a
candidate whose compile per start measured less, then the program as it is, then the ladder's order
(:func:`_by_recompiles_and_breaks`). Where it recompiles none, graph breaks or not, the ladder's
order decides and one that recompiles more goes last (docs/decisions.md, "Without a measured gain,
the fewest recompiles and graph breaks decide").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine.noise import ratio_interval
from ..engine.verdict import NOISE, contended_band, speed_failures
from .candidate import AS_IS, COMPILE_TIME, WHOLE
from .evidence import where_raised
from .kinds.static_shapes import WHOLE_STATIC


#: Two nets closer than this share of ``t_best x N_runs`` are a tie, and the cheaper compile
#: wins: the drift of one candidate's step between runs on one machine, assumed where the noise
#: was not measured (docs/decisions.md, "Tie bands when the noise is not measured").
NET_NOISE_SHARE = 0.03

#: A candidate whose quiet step runs below this share of the best candidate's speed, and that is not
#: faster with the host core contended, never wins a tie on compile cost: the product's bar for a
#: plan against the fastest variant (validate's ``--min-speedup``), applied where both host
#: conditions say the gap is real (docs/decisions.md, "A tie never costs more than the speed bar").
SPEED_BAR = 0.95


@dataclass
class Choice:
    """The decision.

    Attributes:
        chosen: the candidate name that becomes the plan.
        text: one sentence saying why, with the figures that decided.
        status: per candidate name, ``chosen`` or why not (failed, not measured, slower, tied and
            dearer to compile, does not pay back).
        net_s: per timed candidate, its net saving (s) over the deployment; None when unmeasured.
        decided_by: where the gain is not measured and the recompiles and graph breaks over the
            harness's shapes decided (:func:`_by_recompiles_and_breaks`), the counts that did, as
            the plan's ``why:`` cites them; empty otherwise.
    """

    chosen: str
    text: str
    status: dict[str, str] = field(default_factory=dict)
    net_s: dict[str, float | None] = field(default_factory=dict)
    decided_by: str = ""


@dataclass(frozen=True)
class Baseline:
    """What the ``as-is`` row is, as the decision's sentences name it.

    Attributes:
        name: the row as a subject ("the program as it is").
        short: the row after a figure ("vs 1.2 as is").
        compiles: whether the row ran the program's own compile, so that its recompile count is a
            yardstick for the candidates' (:func:`_in_ladder_order`).
    """

    name: str
    short: str
    compiles: bool


#: The program as it runs, its own compile included: the search's reference.
AS_RUN = Baseline("the program as it is", "as is", True)
#: The program with compilation off (``torch.compiler.set_stance("force_eager")``): the reference
#: where the program as it is raises (:mod:`.own_raised`, :func:`when_as_is_raises`).
COMPILATION_OFF = Baseline("the program with compilation off", "with compilation off", False)


def compile_cost_s(row: dict[str, Any], restarts: int) -> float:
    """Seconds of compile a candidate costs over the deployment: its cold process's compiles
    (every shape that compiled) times the restarts without persisted caches."""
    return float(row.get("compile_s_per_start") or 0.0) * restarts


def extra_compile_s(rows: dict[str, dict[str, Any]], n: str, restarts: int) -> float:
    """Seconds of compile candidate ``n`` costs over the deployment beyond what the program as it is
    compiles (``as-is``'s own cold compile; negative where ``n`` compiles for less). A candidate that
    compiled but whose cost was not measured (:func:`compile_unmeasured`) is no cheaper than the
    program (0): it saves no compile it may well pay, so an unmeasured 0 s does not net the
    program's whole compile."""
    extra = compile_cost_s(rows[n], restarts) - compile_cost_s(rows.get(AS_IS) or {}, restarts)
    return max(extra, 0.0) if compile_unmeasured(rows[n]) else extra


def compile_unmeasured(row: dict[str, Any]) -> bool:
    """Whether a candidate's cold process compiled but paid no measurable time for it (a
    measurement problem, not a free compile)."""
    compiled = (row.get("compile") or {}).get("unique_graphs") or row.get("shape_buckets")
    return bool(compiled) and compile_cost_s(row, 1) <= 0


def compile_text(row: dict[str, Any], restarts: int = 1) -> str:
    """A candidate's compile cost as the reports word it: seconds with the digits that keep a
    small cost from printing as 0.0, or, when its cold process compiled but paid no measurable
    time for it, that the cost was not measured (a measurement problem, not a free compile)."""
    cost = compile_cost_s(row, restarts)
    if compile_unmeasured(row):
        return "compile cost not measured (it compiled, but its cold first call took no longer than a steady one)"
    digits = 1 if cost >= 10 else 2 if cost >= 0.1 else 3
    return f"{cost:.{digits}f} s compile per start" + (f" x {restarts} restart(s)" if restarts != 1 else "")


def decide(
    rows: dict[str, dict[str, Any]],
    order: list[str],
    samples: list[dict[str, list[float]]],
    runs: int,
    restarts: int,
    gain_measured: bool,
    noise: dict[str, Any] | None = None,
    baseline: Baseline = AS_RUN,
) -> Choice:
    """Pick the plan among measured candidates.

    Args:
        rows: per candidate name, the engine's result row (``step_ms`` once timed, ms;
            ``compile_s_per_start``, s; ``problems``; ``error``; ``skipped``). ``as-is`` is the
            program as it runs (the eager reference's row: no compile cost of ours).
        order: candidate names, the rule's proposal first (the tie-break of last resort; read
            through :func:`expected_order`).
        samples: the engine's raw interleaved samples per shape, keyed by candidate name (for the
            noise interval).
        runs, restarts: the deployment (``amortization``).
        gain_measured: False when the backend cannot speed anything up (see the module doc).
        noise: the measured process-to-process noise (:func:`rewriter.engine.noise.process_noise`,
            ``{"share", ...}``), or None when each variant ran in one process.
        baseline: what the ``as-is`` row is (:data:`AS_RUN`, or :data:`COMPILATION_OFF` where the
            program's own compile raises, :func:`when_as_is_raises`), named so in every sentence.
    """
    order = expected_order(order)
    status, ok = _screened(rows, order)
    if rows[AS_IS].get("step_ms") is None or AS_IS not in ok:
        return _without_baseline(ok, order, status, gain_measured, baseline)
    net = _nets(rows, ok, status, runs, restarts, gain_measured)
    ok = [n for n in ok if n not in status]
    if not [n for n in ok if n != AS_IS]:
        return _only_as_is(ok, status, net, baseline)
    if not gain_measured:
        measured = _compile_time_judged(rows, ok, status, noise, baseline)
        ok = [n for n in ok if n not in status]
        if not [n for n in ok if n != AS_IS]:
            return _only_as_is(ok, status, net, baseline)
        return _in_ladder_order(ok, status, net, rows, baseline, measured)
    refusals = {n: gate_failures(rows, n, noise, baseline) for n in ok if n != AS_IS and (net[n] or 0) > 0}
    gated = [n for n, fails in refusals.items() if fails]  # one that does not pay back is out anyway, and says so
    for n in gated:
        status[n] = GATED + "; ".join(refusals[n])
    ok = [n for n in ok if n not in status]
    if not [n for n in ok if n != AS_IS]:
        return _only_as_is(ok, status, net, baseline)
    contest = _Contest.of(rows, order, samples, runs, restarts, noise, ok, net, baseline)
    chosen = contest.choose()
    status.update({n: contest.status(n, chosen) for n in ok})
    text = _with_refused(contest.text(chosen), chosen, gated, rows, net, ok, baseline)
    return Choice(chosen, text + "; " + noise_text(noise), status, net)


def when_as_is_raises(choice: Choice, rows: dict[str, dict[str, Any]], order: list[str],
                      raised: dict[str, Any] | None = None, noise: dict[str, Any] | None = None) -> Choice:
    """``choice`` (:func:`decide` with :data:`COMPILATION_OFF`) where the program as it is raises
    (:mod:`.own_raised`), whose ``as-is`` row is the program with compilation off: that row is the
    baseline, never the plan (the program as it is does not run). Where :func:`decide` kept it, the
    plan is the candidate that runs with the largest net saving (its step and compile cost against
    compilation off; where the gain is not measured, the fewest recompiles plus graph
    breaks over the shapes, then the first in the ladder's order, as :func:`_by_recompiles_and_breaks`
    ranks), among those
    validate's speed gate passes (:func:`gate_failures` against compilation off, validate's own
    reference) where any does, so that the plan is one ``rewrite --apply`` takes. Where every one
    that runs is slower than compilation off, the plan is still the fastest of them (the program
    must change to run), and its sentence says that validate's gate refuses it and what to do.

    Raises:
        StackpartError: no candidate but ``as-is`` ran and was timed: nothing that changes the
            program's compile runs; the error is at the line that raised (``raised``: the
            evidence :func:`.own_raised.set_aside` kept), says what to change there, and gives
            each candidate's status, cut to a line each.
    """
    from ..errors import StackpartError

    status = dict(choice.status)
    status[AS_IS] = "the baseline: the program with compilation off (as it is, it raises)"
    if choice.chosen != AS_IS:
        return Choice(choice.chosen, choice.text, status, choice.net_s)
    runs = [n for n in _screened(rows, expected_order(order))[1] if n != AS_IS]
    raised = raised or {}
    if not runs:
        why = "; ".join(f"{n}: {_cut(status.get(n, 'not measured'))}" for n in order if n != AS_IS) or "no candidate was proposed"
        hint = raised.get("hint")
        raise StackpartError(f"the program's own torch.compile raises here ({_cut(raised.get('message') or '?', 300)}), and no "
                             f"edit of it that stackpart proposed ran and was timed ({why})"
                             + (f"; what to change in that compile: {hint}" if hint else "")
                             + "; the report's search section has each candidate's row",
                             path=raised.get("path"), line=raised.get("line"))
    nets = {n: choice.net_s.get(n) for n in runs}
    measured = all(v is not None for v in nets.values())
    refused = {n: gate_failures(rows, n, noise, COMPILATION_OFF) for n in runs} if measured and rows[AS_IS].get("step_ms") else {}
    passing = [n for n in runs if not refused.get(n)] or runs
    if measured:
        chosen = max(passing, key=lambda n: nets[n])  # type: ignore[arg-type, return-value]
    else:  # the rule of every search without a measured gain
        chosen = _fewest_symptoms_first(passing, rows)[0]
        for n in passing:
            if n != chosen and sum(_symptoms(rows[n])) > sum(_symptoms(rows[chosen])):
                status[n] = _more_symptoms(rows, n, chosen)
    for n in runs:
        if refused.get(n) and n != chosen:
            status[n] = GATED + "; ".join(refused[n])
    status[chosen] = "chosen"
    t0, t = rows[AS_IS].get("step_ms"), rows[chosen]["step_ms"]
    against = f"against {t0:.3f} with compilation off" if t0 is not None else "(the program with compilation off was not timed)"
    text = (f"the program as it is raises, so the plan changes its compile: {chosen!r} runs, {t:.3f} ms/step {against} "
            f"({choice.text})")
    if refused.get(chosen):
        text += (f"; every edit that runs is slower than the program with compilation off ({'; '.join(refused[chosen])}), "
                 "which validate's speed gate refuses on a GPU: `stackpart validate --speed-gate off` takes this plan as "
                 f"the fix of the raise, or take that compile off{where_raised(raised)}")
    return Choice(chosen, text, status, choice.net_s)


def _cut(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut past ``limit`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _with_refused(text: str, chosen: str, gated: list[str], rows: dict[str, dict[str, Any]],
                  net: dict[str, float | None], ok: list[str], baseline: Baseline) -> str:
    """The decision's sentence ``text`` with the candidates validate's speed gate refused said in
    it: beside the plan, or, where the program as it is stays because of them, as why."""
    if not gated:
        return text
    names = ", ".join(repr(n) for n in gated)
    more = chosen != AS_IS and all((net[n] or 0) > (net[chosen] or 0) for n in gated)
    refused = (f"{names} {f'would net more than {chosen!r}' if more else 'would pay back'} on a quiet host core but "
               f"{'is' if len(gated) == 1 else 'are'} slower than {baseline.name} in a timed condition, "
               "which validate's speed gate refuses (the status says where)")
    if chosen == AS_IS and not any((net[n] or 0) > 0 for n in ok if n != AS_IS):
        return f"{baseline.name} ({rows[AS_IS]['step_ms']:.3f} ms/step): {refused}; no other candidate pays back: the plan changes nothing"
    return f"{text}; {refused}"


#: The status of a candidate that validate's speed gate refuses (:func:`gate_failures`).
GATED = "refused by validate's speed gate: "


def gate_failures(rows: dict[str, dict[str, Any]], n: str, noise: dict[str, Any] | None,
                  baseline: Baseline = AS_RUN) -> list[str]:
    """Why ``rewrite --apply`` would refuse candidate ``n`` for its speed: validate's rule
    (:func:`rewriter.engine.verdict.speed_failures`, the rule diagnose's validation report is
    judged by) on its step against the program as it is, on a quiet host core and, where both were
    timed, with the host core contended (within the measured band of those figures). Empty where
    it passes. The decision only chooses among candidates that pass, so a plan diagnose writes is
    one its own validation report lets through (docs/decisions.md, "The decision respects the
    gate")."""
    plan, eager = rows[n], rows[AS_IS]
    busy = {"plan": plan.get("contended_step_ms"), "eager": eager.get("contended_step_ms")}
    return speed_failures({"plan": plan["step_ms"], "eager": eager["step_ms"]}, 0.0, None,
                          busy if None not in busy.values() else None, contended_band(noise), reference=baseline.name)


def expected_order(order: list[str]) -> list[str]:
    """``order`` (the order the cold phases ran in) as the expected-value order the decision's
    tie-breaks and the ladder's order read: ``whole+static`` runs first for the budget's sake
    (:mod:`.kinds.static_shapes`), not as the expected best, so it goes right after its base
    ``whole`` (before ``as-is`` where there is no ``whole``)."""
    if WHOLE_STATIC not in order:
        return order
    rest = [n for n in order if n != WHOLE_STATIC]
    at = rest.index(WHOLE) + 1 if WHOLE in rest else (rest.index(AS_IS) if AS_IS in rest else len(rest))
    return rest[:at] + [WHOLE_STATIC] + rest[at:]


def _screened(rows: dict[str, dict[str, Any]], order: list[str]) -> tuple[dict[str, str], list[str]]:
    """Per candidate that cannot be the plan, why (skipped, failed, not timed); and the names of
    the rest, in ``order``."""
    status: dict[str, str] = {}
    ok = []
    for name in order:
        r = rows.get(name) or {}
        if r.get("skipped"):
            status[name] = r["skipped"]
        elif r.get("problems") or r.get("error"):
            status[name] = "failed: " + " ".join("; ".join(r.get("problems") or [r.get("error")]).split())[:400]
        elif r.get("step_ms") is None:
            status[name] = "not timed"
        else:
            ok.append(name)
    return status, ok


def _without_baseline(ok: list[str], order: list[str], status: dict[str, str], gain_measured: bool,
                      baseline: Baseline) -> Choice:
    """The decision when the program as it is was not timed: nothing to compare with, so the
    ladder's order decides where the gain is not measured anyway, else the plan changes nothing."""
    ok = [n for n in ok if n != AS_IS]
    chosen = ok[0] if ok and not gain_measured else AS_IS
    for n in order:
        status.setdefault(n, "not chosen")
    status[chosen] = "chosen"
    return Choice(chosen, f"{baseline.name} could not be timed: nothing to compare a candidate with", status, {})


def _nets(rows: dict[str, dict[str, Any]], ok: list[str], status: dict[str, str], runs: int, restarts: int,
          gain_measured: bool) -> dict[str, float | None]:
    """Each timed candidate's net saving (s) over the deployment against the program as it is (0
    for ``as-is``: its own compile is the yardstick, :func:`extra_compile_s`), None where the gain
    is not measured; a candidate whose compile a step of zero would not pay back gets its status."""
    t0 = rows[AS_IS]["step_ms"]
    net: dict[str, float | None] = {}
    for name in ok:
        r = rows[name]
        cost = extra_compile_s(rows, name, restarts)
        if gain_measured:
            net[name] = (t0 - r["step_ms"]) * 1e-3 * runs - cost
        else:
            net[name] = None
            if name != AS_IS and t0 * 1e-3 * runs <= cost:  # even a step of zero would not pay it back
                status[name] = (f"does not pay back: {compile_text(r, restarts)}"
                                + (f" ({cost:.1f} s more than the program's own)" if cost != compile_cost_s(r, restarts) else "")
                                + f" > {runs:,} runs x {t0:.3f} ms even at zero step time")
    return net


def _only_as_is(ok: list[str], status: dict[str, str], net: dict[str, float | None], baseline: Baseline) -> Choice:
    """The decision when no candidate but the program as it is is left, with how many fell out and why."""
    for n in ok:
        status[n] = "chosen"
    failed = sum(1 for s in status.values() if s.startswith("failed"))
    skipped = sum(1 for s in status.values() if s.startswith("not measured"))
    unpaid = sum(1 for s in status.values() if s.startswith("does not pay back"))
    gated = sum(1 for s in status.values() if s.startswith(GATED))
    pruned = sum(1 for s in status.values() if s.startswith("pruned after measurement"))  # a twin that changed nothing
    slow_start = sum(1 for s in status.values() if s.startswith(COMPILE_NOT_LESS))
    parts = [f"{k} {what}" for k, what in ((failed, "failed"), (skipped, "not measured (search budget)"), (unpaid, "cannot pay back"),
                                          (gated, "slower than it in a timed condition, which validate's gate refuses"),
                                          (pruned, "pruned after measurement (it changed nothing)"),
                                          (slow_start, "whose gain is compile time not measured to compile for less")) if k]
    return Choice(AS_IS, f"{baseline.name}, the only candidate left (" + (", ".join(parts) or "no other candidate")
                  + "); the plan changes nothing", status, net)


def _recompiles(row: dict[str, Any]) -> int:
    """The recompiles a candidate's cold process counted over the harness's shapes."""
    return int((row.get("compile") or {}).get("recompiles") or 0)


def _symptoms(row: dict[str, Any]) -> tuple[int, int]:
    """``(recompiles, graph breaks)`` a candidate's cold process counted over the harness's shapes
    (:class:`rewriter.engine.watch.CompileStats`: Dynamo's counters, so a graph break is counted
    once per trace that reached it, again where its frame recompiles)."""
    return _recompiles(row), int((row.get("compile") or {}).get("graph_breaks") or 0)


#: The start of the status of a candidate whose gain is compile time (:data:`.candidate.COMPILE_TIME`)
#: and whose compile per start, on a backend that does not optimise, was not measured smaller than
#: the program's own beyond the noise band (:func:`_compile_time_judged`).
COMPILE_NOT_LESS = "not chosen: its gain is compile time"


def _compile_time_judged(rows: dict[str, dict[str, Any]], ok: list[str], status: dict[str, str],
                         noise: dict[str, Any] | None, baseline: Baseline) -> dict[str, str]:
    """Each candidate of ``ok`` whose gain is compile time (:data:`.candidate.COMPILE_TIME`: the
    program's own compile kept, with a nested compile region that Dynamo traces once), judged where
    the gain is not measured by what the backend does measure of it: its compile per start
    (``compile_s_per_start``, s: the first call minus a steady one, summed over the shapes that
    compiled; on the eager backend, Dynamo's tracing and guards) against the program's own.

    Kept where it is smaller than the program's by more than the noise band (:func:`noise_bands`,
    the step's: each cold phase ran once, so no band of compile seconds is measured); the returned
    ``{name: sentence}`` says what was measured. Every other one gets its status here (starting
    with :data:`COMPILE_NOT_LESS`, with both figures), also where either figure was not measured:
    without it nothing says the hint gains anything."""
    band = noise_bands(noise)[0]
    banded = f"the {band:.1%} noise band" + (" (assumed: each plan timed in one process)" if noise is None else "")
    own = rows[AS_IS]
    c0 = compile_cost_s(own, 1)
    kept: dict[str, str] = {}
    for n in ok:
        if n not in COMPILE_TIME:
            continue
        row = rows[n]
        c = compile_cost_s(row, 1)
        if compile_unmeasured(row) or c <= 0:
            status[n] = f"{COMPILE_NOT_LESS}, and it has no compile per start measured ({compile_text(row)})"
        elif compile_unmeasured(own) or c0 <= 0:
            status[n] = (f"{COMPILE_NOT_LESS}, and {baseline.name} has no compile per start measured to compare it with "
                         f"({compile_text(own)})")
        elif c < c0 * (1 - band):
            kept[n] = (f"{compile_text(row)} vs {compile_text(own)} {baseline.short}, {1 - c / c0:.0%} less, beyond "
                       f"{banded}")
        else:
            status[n] = (f"{COMPILE_NOT_LESS}, and it measured {compile_text(row)} vs {compile_text(own)} {baseline.short}: "
                         f"not less beyond {banded}; its step-time gain is not measured with this backend")
    return kept


def _in_ladder_order(ok: list[str], status: dict[str, str], net: dict[str, float | None],
                     rows: dict[str, dict[str, Any]], baseline: Baseline,
                     compile_less: dict[str, str] | None = None) -> Choice:
    """The decision without a measured gain, by what the backend still measures: the recompiles
    and graph breaks over the harness's shapes (``compile.recompiles``, ``compile.graph_breaks`` of
    each cold process).

    Where the program as it is ran its own compile and recompiled over the shapes, the candidates
    and the program are ranked by their recompiles plus graph breaks
    (:func:`_by_recompiles_and_breaks`): a user who came for either symptom gets the plan that
    measured fewest of both. Where the program as it is raises (``baseline`` is
    :data:`COMPILATION_OFF`, no count of its own), the edits that run are ranked the same way, fewest
    recompiles + graph breaks first, then the ladder's order. Else (no
    recompile as it is, graph breaks or not) the ladder's order decides, a candidate that recompiles
    more than the program as it is last; where every candidate recompiles more and the program's
    own compile ran, the plan is the program as it is (it recompiles least, and no gain is measured
    that would pay for more); where every one recompiles more and it did not, the first in order.
    ``compile_less``: the candidates whose gain is compile time kept by :func:`_compile_time_judged`,
    with what they measured, said where one is chosen or passed over."""
    compile_less = compile_less or {}
    rest = [n for n in ok if n != AS_IS]
    base = _recompiles(rows[AS_IS]) if AS_IS in rows and baseline.compiles else None
    if base:
        return _by_recompiles_and_breaks(ok, status, net, rows, baseline, compile_less)
    fewest = not baseline.compiles and len({sum(_symptoms(rows[n])) for n in rest}) > 1
    if fewest:  # the program raises: no count of its own to compare; among the edits that run, the fewest first
        rest = _fewest_symptoms_first(rest, rows)
    more = [n for n in rest if base is not None and _recompiles(rows[n]) > base]
    # the program's own compile ran as it is (its graphs counted) and recompiles least: its recompiles
    # are measured, a gain that would pay for more of them is not, so nothing changes
    own = base is not None and bool((rows[AS_IS].get("compile") or {}).get("unique_graphs"))
    if own and len(more) == len(rest):
        for n in ok:
            status[n] = "chosen" if n == AS_IS else (
                f"not chosen: {_recompiles(rows[n])} recompile(s) over the shapes against {base} as it is "
                "(the gain is not measured with this backend)")
        return Choice(AS_IS, f"the program as it is: its own compile recompiles {base} time(s) over the shapes and every "
                             f"other candidate more ({len(more)}), with no gain measured to pay for them (the backend does "
                             "not optimise); the plan changes nothing", status, net)
    chosen = next((n for n in rest if n not in more), rest[0])
    for n in ok:
        if n == chosen:
            status[n] = "chosen"
        elif n in more and chosen in more:  # every one recompiles more: the order decides, not the count
            status[n] = (f"not chosen: every candidate recompiles more over the shapes than {baseline.name} ({base}), "
                         f"this one {_recompiles(rows[n])}, the chosen {_recompiles(rows[chosen])}; {chosen!r} comes first "
                         "in the ladder's order (the gain is not measured with this backend)")
        elif n in more:
            status[n] = (f"not chosen: {_recompiles(rows[n])} recompile(s) over the shapes against {base} as it is "
                         "(the gain is not measured with this backend)")
        elif n == AS_IS and chosen in compile_less:
            status[n] = f"not chosen: {chosen!r} measured less compile per start ({compile_less[chosen]})"
        elif fewest and n != AS_IS and sum(_symptoms(rows[n])) > sum(_symptoms(rows[chosen])):
            status[n] = _more_symptoms(rows, n, chosen)
        elif n in compile_less:
            status[n] = (f"not chosen: its compile per start measured less ({compile_less[n]}), but {chosen!r} comes "
                         "first in the ladder's order (the step-time gain is not measured with this backend)")
        else:
            status[n] = f"not chosen: the gain is not measured with this backend; {chosen!r} comes first in the ladder's order"
    text = (f"{_lead(chosen, compile_less)}; every candidate that failed is out ({_failed(status)} failed)"
            + (f", {len(more)} candidate(s) recompile more over the shapes than {baseline.name} ({base} recompile(s))" if more else "")
            + _slow_text(status, baseline)
            + (" and the fewest recompiles + graph breaks over the shapes, then the ladder's order, decide among the rest"
               if fewest else " and the ladder's order decides among the rest"))
    return Choice(chosen, text, status, net)


def _fewest_symptoms_first(names: list[str], rows: dict[str, dict[str, Any]]) -> list[str]:
    """``names`` by recompiles plus graph breaks over the shapes, fewest first, then the fewer graph
    breaks, then their own order (the ladder's): the ranking of the edits that run where the program
    as it is raises (no count of its own), as :func:`_by_recompiles_and_breaks` ranks with one."""
    return sorted(names, key=lambda n: (sum(_symptoms(rows[n])), _symptoms(rows[n])[1]))


def _more_symptoms(rows: dict[str, dict[str, Any]], n: str, chosen: str) -> str:
    """The status of ``n``, passed over for ``chosen`` on recompiles plus graph breaks."""
    return (f"not chosen: {_sum(rows[n])} recompile(s) + graph break(s) over the shapes against "
            f"{_sum(rows[chosen])} of {chosen!r} (fewest first: the gain is not measured with this backend)")


def _sum(row: dict[str, Any]) -> str:
    """A row's recompiles and graph breaks over the shapes as the ranking adds them: ``r + b = total``."""
    r, b = _symptoms(row)
    return f"{r} + {b} = {r + b}"


def _by_recompiles_and_breaks(ok: list[str], status: dict[str, str], net: dict[str, float | None],
                              rows: dict[str, dict[str, Any]], baseline: Baseline, compile_less: dict[str, str]) -> Choice:
    """The decision without a measured gain where the program as it is recompiled over the
    harness's shapes: ``ok`` (the program as it is among them) ranked by recompiles plus graph
    breaks over the shapes, fewest first; among equal sums the fewer graph breaks (a graph break is
    paid on every step, a recompile once per new shape), then a candidate whose compile per start
    measured less (``compile_less``), then the program as it is (an edit that measured no fewer
    recompiles or graph breaks and no less compile has nothing measured to show for it), then the
    ladder's order (``ok``'s). The first is the plan; where that is the program as it is, the plan
    changes nothing. Each status, the sentence and :attr:`Choice.decided_by` (the
    plan's ``why:``) give both counts that decided (docs/decisions.md, "Without a measured gain,
    the fewest recompiles and graph breaks decide")."""
    def rank(n: str) -> tuple[int, int, int, int]:
        r, b = _symptoms(rows[n])
        return r + b, b, 0 if n in compile_less else 1 if n == AS_IS else 2, ok.index(n)

    ranked = sorted(ok, key=rank)
    chosen = ranked[0]
    (rk, bk), (r0, b0) = _symptoms(rows[chosen]), _symptoms(rows[AS_IS])
    for n in ok:
        r, b = _symptoms(rows[n])
        if n == chosen:
            status[n] = "chosen"
        elif r + b > rk + bk:  # the sum decided
            status[n] = (f"not chosen: {r} recompile(s) + {b} graph break(s) = {r + b} over the shapes, against "
                         f"{_sum(rows[chosen])} of {chosen!r}"
                         + (f" and {_sum(rows[AS_IS])} as it is" if AS_IS not in (n, chosen) else "")
                         + " (fewest recompiles + graph breaks first: the gain is not measured with this backend)"
                         + (f"; its compile per start measured less ({compile_less[n]})" if n in compile_less else ""))
        elif b > bk:  # the same sum, more of it graph breaks
            status[n] = (f"not chosen: as many recompiles + graph breaks over the shapes ({r + b}) as {chosen!r}, more of "
                         f"them graph breaks ({r} + {b} against {rk} + {bk}): a graph break is paid on every step, a "
                         "recompile once per new shape (the gain is not measured with this backend)")
        elif n == AS_IS:
            status[n] = (f"not chosen: as many recompiles and graph breaks over the shapes ({r} + {b}) as {chosen!r}, "
                         f"which measured less compile per start ({compile_less[chosen]})")
        elif chosen == AS_IS:
            status[n] = (f"not chosen: as many recompiles and graph breaks over the shapes ({r} + {b}) as the program as "
                         "it is, and no less compile per start: among equals the program stays as it is (the gain is "
                         "not measured with this backend)")
        elif n in compile_less:
            status[n] = (f"not chosen: its compile per start measured less ({compile_less[n]}), but {chosen!r} has as many "
                         f"recompiles and graph breaks over the shapes ({r} + {b}) and comes first in the ladder's order "
                         "(the step-time gain is not measured with this backend)")
        else:
            status[n] = (f"not chosen: as many recompiles and graph breaks over the shapes ({r} + {b}) as {chosen!r}, "
                         "which comes first in the ladder's order (the gain is not measured with this backend)")
    edits = [n for n in ranked if n != AS_IS]
    counts = ", ".join(f"{n!r} {_sum(rows[n])}" for n in edits)
    # said where a tie-break, not the sum, put the plan first
    tied = [n for n in ranked[1:] if sum(_symptoms(rows[n])) == rk + bk]
    ties = (" (among equal sums the fewer graph breaks, then a candidate that measured less compile per start, then "
            "the program as it is, then the ladder's order)") if tied else ""
    measured = (f"recompiles {r0} time(s) and breaks the graph {b0} time(s) over the harness's shapes ({r0 + b0} in all), "
                "so the fewest recompiles + graph breaks decide")
    if chosen == AS_IS:
        text = (f"{baseline.name}: its own compile {measured}, and every candidate has more, or as many with more "
                f"graph breaks or no less compile per start (recompiles + graph breaks: {counts}){ties}, with no gain measured to pay for them (the "
                "backend does not optimise); the plan changes nothing")
        return Choice(AS_IS, text, status, net)
    text = (f"{_lead(chosen, compile_less)}; every candidate that failed is out ({_failed(status)} failed)"
            + _slow_text(status, baseline) + f"; {baseline.name} {measured} (recompiles + graph breaks): {counts}" + ties)
    others = ", ".join(f"{n!r} {_sum(rows[n])}" for n in edits if n != chosen)
    decided = (f"fewest recompiles + graph breaks over the harness's shapes: {_sum(rows[chosen])} vs {_sum(rows[AS_IS])} "
               f"{baseline.short}" + (f", {others}" if others else ""))
    return Choice(chosen, text, status, net, decided)


def _lead(chosen: str, compile_less: dict[str, str]) -> str:
    """The start of the decision's sentence without a measured gain: the plan, and what the
    backend leaves unmeasured (for a candidate whose gain is compile time, what it measured)."""
    if chosen in compile_less:
        return (f"{chosen!r}: its gain is compile time, and its compile per start measured less: {compile_less[chosen]}; "
                "the backend does not optimise, so the step-time gain is not measured")
    return f"{chosen!r}: the backend does not optimise, so the gain is not measured"


def _failed(status: dict[str, str]) -> int:
    """How many candidates failed."""
    return sum(1 for s in status.values() if s.startswith("failed"))


def _slow_text(status: dict[str, str], baseline: Baseline) -> str:
    """The candidates whose gain is compile time and measured no less than the program's own, as
    the sentence says them (empty where none)."""
    slow = sum(1 for s in status.values() if s.startswith(COMPILE_NOT_LESS))
    return f", {slow} whose gain is compile time measured no less compile per start than {baseline.name}" if slow else ""


@dataclass
class _Contest:
    """The timed candidates that pay back measured against each other: the best one, and which
    are tied with it within the noise (the cheaper compile of those wins), each with why."""

    rows: dict[str, dict[str, Any]]
    order: list[str]
    runs: int
    restarts: int
    ok: list[str]
    net: dict[str, Any]
    host: HostStanding | None
    best: str
    baseline: Baseline
    tied: list[str] = field(default_factory=list)
    why_tied: dict[str, str] = field(default_factory=dict)
    #: not tied by the measured band although the rounds' interval contains 1
    wide: dict[str, str] = field(default_factory=dict)
    #: within the quiet noise of the best, but not with the host core contended
    fragile: dict[str, str] = field(default_factory=dict)
    #: within the noise, but below the speed bar in both host conditions (:func:`below_bar`)
    outpaced: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: dict[str, dict[str, Any]], order: list[str], samples: list[dict[str, list[float]]], runs: int,
           restarts: int, noise: dict[str, Any] | None, ok: list[str], net: dict[str, Any], baseline: Baseline) -> "_Contest":
        host = contended_standing(rows, ok, net, runs, restarts, noise)
        # only a candidate that can become the plan (as-is, or one whose quiet net pays back) is the best under contention:
        # one that does not pay back would hand the plan to as-is, which may be behind another candidate in both conditions
        payable = [n for n in ok if n == AS_IS or (net[n] or 0) > 0]
        best = (min(payable, key=lambda n: (host.behind[n], -net[n], order.index(n))) if host
                else max(ok, key=lambda n: (net[n], -order.index(n))))
        contest = cls(rows, order, runs, restarts, ok, net, host, best, baseline, [best])
        ratio_band, net_band = noise_bands(noise)
        for n in ok:
            if n != best:
                contest._judge_tie(n, ratio_interval(samples, n, best), ratio_band, net_band, noise is None)
        return contest

    def _judge_tie(self, n: str, ci: dict[str, float] | None, ratio_band: float, net_band: float, assumed: bool) -> None:
        """Whether ``n`` ties with the best (recorded in :attr:`why_tied`, :attr:`tied`) or why not."""
        rows, net, best, host = self.rows, self.net, self.best, self.host
        ratio = rows[n]["step_ms"] / rows[best]["step_ms"]
        close_net = abs(net[best] - net[n]) <= net_band * rows[best]["step_ms"] * 1e-3 * self.runs  # either side: best may not net most
        ci_contains_1 = ci is not None and ci["low"] <= 1 <= ci["high"]
        if abs(ratio - 1) <= ratio_band:
            self.why_tied[n] = f"the steps {abs(ratio - 1):.1%} apart, within the {ratio_band:.1%} noise band"
        elif ci_contains_1 and assumed:
            self.why_tied[n] = f"the paired 95% interval of the step ratio, {ci['low']:.3f}-{ci['high']:.3f}, contains 1"
        elif ci_contains_1:
            self.wide[n] = (f"the steps {abs(ratio - 1):.1%} apart, outside the {ratio_band:.1%} band measured between processes; "
                            f"the paired 95% interval of one process's rounds, {ci['low']:.3f}-{ci['high']:.3f}, contains 1 "
                            "and is reported, not decided on")
        if n not in self.why_tied and close_net:
            self.why_tied[n] = f"the nets {abs(net[best] - net[n]):,.0f} s apart, within {net_band:.1%} of the best step over the runs"
        if host and n in self.why_tied and host.loaded[n] > host.loaded[best] * (1 + host.band):
            self.fragile[n] = (f"{self.why_tied.pop(n)} on a quiet host core, but {host.loaded[n]:.3f} vs {host.loaded[best]:.3f} "
                               f"ms/step with the host core contended, {host.loaded[n] / host.loaded[best] - 1:.1%} apart, "
                               f"outside the {host.band:.1%} band there")
        if host and n in self.why_tied and (below := below_bar(rows, host, n, best)):
            self.outpaced[n] = f"{self.why_tied.pop(n)}, but {below}"
        if n in self.why_tied and (n == AS_IS or (net[n] or 0) > 0):  # one that does not pay back wins no tie
            self.tied.append(n)

    def choose(self) -> str:
        """The cheapest compile among the tied; the baseline (``as-is``) where that does not pay back."""
        chosen = min(self.tied, key=lambda n: (compile_cost_s(self.rows[n], self.restarts), self.order.index(n)))
        if self.net[chosen] is not None and self.net[chosen] <= 0 and chosen != AS_IS:
            return AS_IS
        return chosen

    def status(self, n: str, chosen: str) -> str:
        """Why ``n`` is or is not the plan, with the figures that decided."""
        rows, net, best, host, runs = self.rows, self.net, self.best, self.host, self.runs
        wide = f" ({self.wide[n]})" if n in self.wide else ""
        if n == chosen:
            return "chosen"
        if (net[n] or 0) <= 0 and n != AS_IS:
            return f"does not pay back: net {net[n]:,.0f} s over {runs:,} runs"
        if host and n in self.fragile:
            return f"not chosen: {self.fragile[n]}"
        if n in self.outpaced:
            return f"not chosen: {self.outpaced[n]}"
        if host and net[n] > net[best] and n not in self.tied:
            return (f"the largest net on a quiet host core ({net[n]:,.0f} s, step {rows[n]['step_ms']:.3f} ms)"
                    if net[n] == max(net[x] for x in self.ok) else f"net {net[n]:,.0f} s on a quiet host core") + (
                f", but {host.loaded[n]:.3f} ms/step with the host core contended, {host.behind_loaded[n]:.1%} behind the best "
                f"there; {best!r} is at most {host.behind[best]:.1%} behind in either condition")
        if n in self.tied and n == best:
            lead = (f"the least behind the best in either host condition ({host.behind[n]:.1%}; net {net[n]:,.0f} s, step "
                    f"{rows[n]['step_ms']:.3f} ms)" if host else f"the largest net ({net[n]:,.0f} s, step {rows[n]['step_ms']:.3f} ms)")
            return f"{lead}, but {chosen!r} is within its noise ({self.why_tied[chosen]}) and compiles for less"
        if n in self.tied:
            return (f"within the noise of {best!r} (step {rows[n]['step_ms']:.3f} vs {rows[best]['step_ms']:.3f} ms, "
                    f"net {net[n]:,.0f} vs {net[best]:,.0f} s: {self.why_tied[n]}); {chosen!r} compiles for less")
        if net[n] is not None and net[chosen] is not None and net[n] >= net[chosen]:
            # above the chosen one's net, which won by its tie with the best (a wide interval)
            return (f"net {net[n]:,.0f} s, not within the noise of {best!r} ({net[best]:,.0f} s), which {chosen!r} "
                    f"(net {net[chosen]:,.0f} s) is and compiles for less") + wide
        return f"net {net[n]:,.0f} s < {net[chosen]:,.0f} s of {chosen!r}" + wide

    def text(self, chosen: str) -> str:
        """The decision's sentence, with the figures that decided (the noise bands said after it)."""
        rows, net, host, runs, restarts, base = self.rows, self.net, self.host, self.runs, self.restarts, self.baseline
        t0 = rows[AS_IS]["step_ms"]
        others = [n for n in self.ok if n != AS_IS]
        if chosen == AS_IS and host and any((net[n] or 0) > 0 for n in others):
            quiet_best = max(others, key=lambda n: (net[n], -self.order.index(n)))
            return (f"{base.name} ({t0:.3f} ms/step, {host.loaded[AS_IS]:.3f} with its host core contended): the least "
                    f"behind the best in either host condition ({host.behind[AS_IS]:.1%}); {quiet_best!r} nets "
                    f"{net[quiet_best]:,.0f} s on a quiet host core but falls {host.behind_loaded[quiet_best]:.1%} behind with it "
                    "contended: the plan changes nothing")
        if chosen == AS_IS:
            return (f"no candidate pays back over {runs:,} runs x {restarts} restart(s) better than {base.name} "
                    f"({t0:.3f} ms/step): the plan changes nothing")
        c = rows[chosen]
        own = rows[AS_IS]
        text = (f"{chosen!r}: {c['step_ms']:.3f} ms/step vs {t0:.3f} {base.short} ({t0 / c['step_ms']:.2f}x), "
                f"{compile_text(c)}" + (f" vs {compile_text(own)} {base.short}" if compile_cost_s(own, 1) > 0 else "")
                + f", net {net[chosen]:,.0f} s over {runs:,} runs x {restarts} restart(s)")
        if len(self.tied) > 1:
            text += f"; tied within the noise with {', '.join(repr(t) for t in self.tied if t != chosen)}: the cheaper compile wins"
        if host:
            text += f"; {host.loaded[chosen]:.3f} ms/step with its host core contended vs {host.loaded[AS_IS]:.3f} {base.short}"
            quiet_best = max(self.ok, key=lambda n: (net[n], -self.order.index(n)))
            if quiet_best not in (chosen, self.best):
                text += (f"; {quiet_best!r} nets more on a quiet host core but falls {host.behind_loaded[quiet_best]:.1%} behind "
                         f"with it contended, where {self.best!r} is at most {host.behind[self.best]:.1%} behind in either condition")
        return text


@dataclass
class HostStanding:
    """Each candidate in the two host conditions the search times (:attr:`rewriter.engine.options.
    Options.contended`): ``loaded``, its step with the host core contended (ms); ``behind_loaded``,
    how far its net there falls behind the best net there, as a share of that best step over the
    runs (~ the step ratio minus 1 over many runs); ``behind``, the worse of that and the same on
    a quiet core; ``band``, the noise band of the contended figures."""

    loaded: dict[str, float]
    behind_loaded: dict[str, float]
    behind: dict[str, float]
    band: float


def contended_standing(rows: dict[str, dict[str, Any]], ok: list[str], net: dict[str, float | None], runs: int,
                       restarts: int, noise: dict[str, Any] | None) -> HostStanding | None:
    """The candidates' standing in both host conditions, or None where any of ``ok`` (as-is
    included) lacks a contended step (CPU, ``--pin own``/``off``, a search without it).

    The plan is then the candidate that falls least behind the best in the worse of the two
    conditions (minimax regret over the host's state), so a plan that wins on a quiet core by a
    few percent and loses by tens of percent when a data-loader worker or a neighbour shares the
    core does not become the plan, and a re-run on the same machine, whose host is quiet in one
    run and contended in the next, picks the same one (docs/decisions.md, "Minimax over host
    conditions")."""
    loaded = {n: rows[n].get("contended_step_ms") for n in ok}
    if len(ok) < 2 or AS_IS not in ok or not all(loaded.values()):
        return None
    t0 = float(loaded[AS_IS])
    net_c = {n: (t0 - float(loaded[n])) * 1e-3 * runs - extra_compile_s(rows, n, restarts) for n in ok}
    q_best, c_best = max(ok, key=lambda n: net[n] or 0.0), max(ok, key=net_c.get)
    q_scale, c_scale = rows[q_best]["step_ms"] * 1e-3 * runs, float(loaded[c_best]) * 1e-3 * runs
    behind_loaded = {n: (net_c[c_best] - net_c[n]) / c_scale for n in ok}
    behind = {n: max(((net[q_best] or 0.0) - (net[n] or 0.0)) / q_scale, behind_loaded[n]) for n in ok}
    band = max(NOISE, float((noise or {}).get("contended_share") or 0.0), noise_bands(noise)[0])
    return HostStanding({n: float(v) for n, v in loaded.items()}, behind_loaded, behind, band)


def below_bar(rows: dict[str, dict[str, Any]], host: HostStanding, n: str, best: str) -> str | None:
    """Why ``n`` may not win a tie with ``best`` on compile cost, or None: its quiet step runs
    below :data:`SPEED_BAR` of ``best``'s speed and its contended step is no faster than
    ``best``'s. Both conditions agreeing on the direction is what says the gap is the plans', not
    the host's (a gap the host makes moves with its state: docs/decisions.md, "Minimax over host
    conditions"), so a measured band wide enough to cover it does not make it a tie."""
    speed = rows[best]["step_ms"] / rows[n]["step_ms"]
    if speed >= SPEED_BAR or host.loaded[n] < host.loaded[best]:
        return None
    return (f"{speed:.2f}x the speed of {best!r} on a quiet host core ({rows[n]['step_ms']:.3f} vs "
            f"{rows[best]['step_ms']:.3f} ms, below the {SPEED_BAR:.2f}x bar) and no faster with the host core contended "
            f"({host.loaded[n]:.3f} vs {host.loaded[best]:.3f} ms): a cheaper compile does not buy that step")


def noise_bands(noise: dict[str, Any] | None) -> tuple[float, float]:
    """``(ratio band, net band)``: the step-ratio distance under which two candidates tie, and the
    share of ``t_best x N_runs`` under which two nets tie. Measured (``noise["share"]``, at least
    :data:`NOISE`) for both when every variant ran in two processes; else :data:`NOISE` and
    :data:`NET_NOISE_SHARE`."""
    if noise is None:
        return NOISE, NET_NOISE_SHARE
    band = max(NOISE, float(noise["share"]))
    return band, band


def noise_text(noise: dict[str, Any] | None) -> str:
    """The noise the decision used, as the report says it."""
    ratio_band, net_band = noise_bands(noise)
    if noise is None:
        return (f"noise bands not measured (each plan was timed in one process): steps within {ratio_band:.1%} "
                f"or nets within {net_band:.1%} of the best step over the runs tie (the assumed run-to-run drift)")
    return (f"noise band {ratio_band:.1%} of the step (measured: two processes per plan, median spread "
            f"{noise['median_abs_log']:.2%} over {noise['pairs']} plan x shape pair(s); at least {NOISE:.0%})")
