"""What ``stackpart diagnose`` measured of a ``torch._dynamo.config`` knob at a graph break, read
for SP103.

SP103's advice for ``.item()`` in compiled code is ``capture_scalar_outputs``. diagnose measures
that advice: for a graph break the knob would keep in the graph (:func:`rewriter.dynamo_messages.knob_for`
on the reason the graph_breaks rung recorded), its search times a twin of each candidate that
compiles the break with the knob set (``+capture_scalar_outputs``) and prunes the twin after
measurement where it saw no fewer graph breaks (a branch on the value read still breaks, at the
jump): "the config kept no graph break in the graph".

Where such a report names a graph break at the finding's file and line (and function) with that
knob, and every candidate that set the knob was pruned so after measurement, the advice was
measured and rejected at that site: the finding becomes a note that says so and does not fail the
check. A knob twin that failed, was skipped, was chosen or was not measured is no such evidence,
nor is a report without a break at that line (the line moved: diagnose runs again). The reports
read are :func:`.measured.reports_for`'s (beside the configured plan, or a ``plan.yaml`` in the
file's folder or one above it, up to the project root).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from ..dynamo_messages import knob_for
from .measured import function_at, names_file, report_roots, reports_for, search_of

#: The status diagnose's judge gives a config twin that changed nothing (:func:`rewriter.diagnose.kinds.config.judge`).
PRUNED = "pruned after measurement"


@dataclass(frozen=True)
class Rejected:
    """A knob diagnose measured at a graph break and pruned.

    Attributes:
        file: the break's file, relative to the report's SRC (``model.py``).
        line: the break's line when measured.
        function: the function Dynamo broke in (``Net.forward``), or None where not recorded.
        knob: the ``torch._dynamo.config`` key (``capture_scalar_outputs``).
        text: what was measured, one sentence.
        report: the report.json it was read from.
        roots: folders ``file`` may be relative to (:func:`.measured.report_roots`).
    """

    file: str
    line: int
    function: str | None
    knob: str
    text: str
    report: str
    roots: tuple[str, ...]


def _sets(row: dict, knob: str) -> bool:
    """Whether the candidate ``row`` of the report's table sets ``knob`` (its ``dynamo_config``
    action reads ``... (torch._dynamo.config.<knob> = True)``)."""
    said = re.compile(rf"\b{re.escape(knob)} = True\b")
    return any(str(a).startswith("dynamo_config") and said.search(str(a)) for a in row.get("actions") or ())


@lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int) -> tuple[Rejected, ...]:
    """The knobs pruned after measurement at the graph breaks the report at ``path`` records
    (``mtime_ns`` keys the cache). A report that cannot be read, or is not diagnose's, rejects nothing."""
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return ()
    if not isinstance(report, dict):
        return ()
    search = search_of(report)
    rows = [r for r in (search or {}).get("candidates") or () if isinstance(r, dict) and isinstance(r.get("candidate"), str)]
    breaks = next((r.get("findings") for r in report.get("rungs") or ()
                   if isinstance(r, dict) and r.get("name") == "graph_breaks" and r.get("status") == "ok"), None) or ()
    out: list[Rejected] = []
    roots = report_roots(report, path)
    for f in breaks:
        if not (isinstance(f, dict) and f.get("kind") == "graph_break" and f.get("file") and isinstance(f.get("line"), int)):
            continue
        knob = knob_for(str(f.get("message") or ""))
        twins = [r for r in rows if knob and _sets(r, knob)]
        if not twins or not all(str(r.get("status") or "").startswith(PRUNED) for r in twins):
            continue
        twin = twins[0]
        text = (f"diagnose measured {knob} for the graph break at {f['file']}:{f['line']} and pruned it "
                f"({twin['candidate']!r}: {twin['status'].removeprefix(PRUNED + ': ')})"
                + (f"; {len(twins) - 1} more candidate(s) with it pruned so" if len(twins) > 1 else ""))
        out.append(Rejected(str(f["file"]), f["line"], f.get("function") or None, knob, text, path, roots))
    return tuple(out)


#: The advice a finding gives to set a knob: ``torch._dynamo.config.<knob> = True``.
_ADVICE = re.compile(r"torch\._dynamo\.config\.(\w+) = True")


def advised_knob(message: str) -> str | None:
    """The ``torch._dynamo.config`` knob a finding's message advises setting
    (``capture_scalar_outputs`` for SP103's ``.item()``), or None."""
    m = _ADVICE.search(message)
    return m.group(1) if m else None


def rejected_for(path: str, line: int, knob: str, configured: str | None = None) -> Rejected | None:
    """What diagnose measured of ``knob`` at the graph break at ``path``:``line`` and rejected
    (module docstring), or None where no report says so."""
    full = os.path.abspath(path)
    for _, report, mtime in reports_for(path, configured):
        for r in _read(str(report), mtime):
            if r.knob != knob or r.line != line or not names_file(full, r.file, r.roots):
                continue
            if r.function is None or function_at(full, line) == r.function:
                return r
    return None
