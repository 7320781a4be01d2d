"""The binding of a validation report to a diff, and the apply gate: ``stackpart rewrite --apply``
writes a diff only when a passing validation report is bound to its exact sha256 and to the tree
and plan it was measured on (``--no-validate`` skips the gate).

Validation covers the whole plan, unsafe actions included, so a passing report also allows the
unsafe actions (``bucket``, ``kernel``) to be written without ``--unsafe`` (docs/design.md: "written
only with --unsafe or after a passing validation").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engine.materialize import file_sha256, tree_hashes
from ..errors import StackpartError
from ..plan import LoadedPlan
from ..validate.report import JSON_NAME, default_report_dir, read_report
from .transform import RewriteResult, plan_rewrite


@dataclass
class Decision:
    """``result`` to apply, or ``refused`` with the reason (one paragraph); ``notes`` to print."""

    result: RewriteResult | None
    refused: str | None = None
    notes: tuple[str, ...] = ()


def _stale_reason(report: dict, loaded: LoadedPlan, src: Path, now: dict, plan_sha: str | None) -> str:
    """Why a validation report no longer covers this diff, one clause each: it was written for
    another SRC or plan path, the plan's bytes differ from those it validated (whatever its path),
    files of SRC changed, were added or removed since."""
    reasons = []
    other = []
    if report.get("src") and Path(report["src"]) != src.resolve():
        other.append(f"SRC {report['src']}")
    plan_path = Path(loaded.path)
    moved = bool(report.get("plan")) and Path(report["plan"]) != plan_path.resolve()
    if moved:
        other.append(f"plan {report['plan']}")
    if other:
        reasons.append("it was written for " + " and ".join(other))
    if plan_sha is not None and report.get("plan_sha256") and report["plan_sha256"] != plan_sha:
        reasons.append(f"{loaded.path} differs from the plan it validated" if moved else f"{loaded.path} changed since")
    old = report.get("tree_sha256", {})
    changed = sorted(k for k in old.keys() & now.keys() if old[k] != now[k])
    added = sorted(now.keys() - old.keys())
    removed = sorted(old.keys() - now.keys())
    for label, names in (("changed", changed), ("added", added), ("removed", removed)):
        if names:
            shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
            reasons.append(f"files {label} under SRC since: {shown}")
    return "; ".join(reasons) or "the diff differs from the one validated"


def check_apply(
    loaded: LoadedPlan, src: Path, result: RewriteResult, unsafe: bool, report_path: str | Path | None
) -> Decision:
    """Decide whether ``result`` (the rewrite ``--apply`` is about to write) may be written.

    Returns:
        a :class:`Decision`: the result to apply (the full plan's when a passing report covers
        it), or a refusal naming the report and why: none found, it failed (its reasons), or it
        is stale (which files or plan changed since).
    """
    src = Path(src)
    full = result if unsafe or all(a.safe for a in loaded.plan.actions) else plan_rewrite(loaded, src, unsafe=True)
    if not full.changes:
        return Decision(result)
    where = Path(report_path) if report_path else default_report_dir(loaded.path)
    report = read_report(where)
    shown = report_file(loaded, report_path)
    digest = full.digest()
    plan_file = Path(loaded.path)
    plan_sha = file_sha256(plan_file) if plan_file.is_file() else None
    how = f"run `stackpart validate --plan {loaded.path} {src}` first, or pass --no-validate to apply unvalidated"
    if report is None:
        scope = "" if full is result else ", the full plan's diff with its unsafe actions"
        return Decision(None, f"no validation report for this diff (sha256 {digest[:12]}{scope}) at {shown}; {how}")
    now = tree_hashes(src)  # once: the stale check and its reason both need it
    if report.get("diff_sha256") != digest:
        return Decision(
            None,
            f"stale validation report {shown}: it validated diff {str(report.get('diff_sha256'))[:12]}, "
            f"the plan now gives {digest[:12]} ({_stale_reason(report, loaded, src, now, plan_sha)}); {how}",
        )
    # Same diff, but the code around it (or the plan's harness/shapes) may have changed since:
    # what was validated is the whole tree, not only the hunks.
    if report.get("tree_sha256") != now or (plan_sha is not None and report.get("plan_sha256") != plan_sha):
        return Decision(
            None,
            f"stale validation report {shown}: same diff {digest[:12]}, but "
            f"{_stale_reason(report, loaded, src, now, plan_sha)}; {how}",
        )
    verdict = report.get("verdict", {})
    if not verdict.get("passed"):
        why = "; ".join(verdict.get("errors", []) + verdict.get("failures", [])) or "it did not pass"
        return Decision(None, f"the validation report {shown} for this diff did not pass: {why}")
    notes = []
    if report.get("environment", {}).get("timed_on") != "cuda":
        notes.append(f"note: {shown} was validated on CPU (numerics only; speed not proven on GPU)")
    if full is not result:
        notes.append("unsafe actions written: the validation report for the full plan passed")
    return Decision(full, None, tuple(notes))


def report_file(loaded: LoadedPlan, report: str | Path | None) -> Path:
    """The validation report file ``rewrite --apply`` reads for ``loaded``: ``report`` (``--report``,
    a folder or the JSON file), else the one beside the plan (:func:`default_report_dir`)."""
    where = Path(report) if report else default_report_dir(loaded.path)
    return where / JSON_NAME if where.is_dir() or not where.suffix else where


def report_covers(loaded: LoadedPlan, src: Path, result: RewriteResult, unsafe: bool, report: str | None) -> bool:
    """Whether ``rewrite --apply`` would write ``result`` by its validation report (a passing
    one for this exact diff and tree): ``--check``'s next step is then ``--apply`` alone, not a
    second validation. Looked up only where a report exists (else no tree is hashed)."""
    where = Path(report) if report else default_report_dir(loaded.path)
    if read_report(where) is None:
        return False
    try:
        return check_apply(loaded, src, result, unsafe, report).result is not None
    except StackpartError:
        return False
