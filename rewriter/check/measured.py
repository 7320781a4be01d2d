"""What ``stackpart diagnose`` measured about the program's own compile, read for SP101.

SP101 reports a whole-model ``torch.compile`` of a model that repeats a block: regional
compilation is the usual better plan. diagnose's search measures it instead: it times the program
as it is (candidate ``as-is``, the program's own compile; ``as-is+...`` adds only what composes
with it) against candidates that change the compile (a regional compile of the repeated block...)
and writes the winner as plan.yaml, with the table in ``stackpart-diagnose/report.json`` next to it
(:func:`rewriter.diagnose.report.default_report_dir`). Where that search chose a plan that keeps
the program's own compile over at least one other candidate it timed, the compile line is kept by
measurement: the finding stays in the report, with what was measured, and does not fail the check
(:attr:`rewriter.check.rule.Finding.severity` ``"note"``). A plan whose ``compile`` action edits
the program's own call with ``strategy: whole`` (``own_call``) keeps it too, unless its
validation report (``.stackpart/validation/validation.json``) failed.

Which plans are read: the configured one (``--plan``, ``[tool.stackpart] plan``) and every
``plan.yaml`` in the folder of the file holding the compile and in the folders above it, up to the
project root (a ``pyproject.toml`` or ``.git``). A compile is matched to the report's
``own_compile_setup`` entry (``train.py:12: torch.compile(model)``, relative to the report's SRC)
by file and call text; the line may have moved. A search that timed no other candidate (``the
only candidate left``) is no evidence: the finding fails as before.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .project_reading import ROOT_MARKERS


@dataclass(frozen=True)
class Kept:
    """A compile of the program that diagnose's search measured and kept.

    Attributes:
        file: the file as the report names it, relative to its SRC (``train.py``), or for an
            ``own_call`` action the target's file.
        line: its line when measured (0 for an ``own_call`` action's function).
        code: the call's text, whitespace collapsed (empty for an ``own_call`` action).
        function: for an ``own_call`` action, the qualified name of the function whose compile it
            edits (``main``, ``Trainer.setup``); else None.
        text: what was measured, one sentence (the chosen candidate and the best other one timed).
        report: the report.json it was read from.
        roots: folders the file may be relative to (the report's SRC as recorded, resolved).
    """

    file: str
    line: int
    code: str
    function: str | None
    text: str
    report: str
    roots: tuple[str, ...]
    #: False where the search timed no other candidate, or timed them with a backend that does not
    #: optimise (its choice then follows the recompile and graph-break counts or the ladder's order): the report
    #: names the compile, and ``text`` says that it is no evidence (the finding keeps failing, with
    #: that said)
    measured: bool = True


def _norm(code: str) -> str:
    return " ".join(code.split())


def search_of(report: dict) -> dict | None:
    """The search rung's measurement in a diagnose report, or None."""
    for rung in report.get("rungs") or ():
        if isinstance(rung, dict) and rung.get("name") == "search" and isinstance(rung.get("measurement"), dict):
            return rung["measurement"]
    return None


def _ms(value: object) -> str:
    return f"{value:.3f} ms/step" if isinstance(value, (int, float)) else "not timed"


def _measured_text(search: dict, chosen: dict, others: list[dict]) -> str:
    """``search chose 'as-is' (2.100 ms/step) over 'per-block' (2.400 ms/step)...``."""
    regional = [o for o in others if str(o.get("candidate", "")).startswith("per-block")
                or any(" region" in str(a) or "nested" in str(a) for a in o.get("actions") or ())]
    best = min(regional or others, key=lambda o: o["step_ms"])
    text = (f"diagnose's search chose {chosen['candidate']!r} ({_ms(chosen.get('step_ms'))}, the program's own compile kept) "
            f"over {best['candidate']!r} ({_ms(best.get('step_ms'))}; {best.get('status') or 'not chosen'})")
    if len(others) > 1:
        text += f" and {len(others) - 1} more timed candidate(s)"
    if search.get("gain_measured") is False:
        text += f" (backend {search.get('backend', '?')}: the speed of compiled code was not measured, only its cost)"
    return text


def report_roots(report: dict, path: str) -> tuple[str, ...]:
    """The folders the files ``report`` (read from ``path``, ``stackpart-diagnose/report.json``)
    names may be relative to: its SRC as recorded, absolute, or relative to the plan's folder or
    to the working directory."""
    src = str(report.get("src") or ".")
    folder = os.path.dirname(os.path.dirname(os.path.abspath(path)))  # the plan's folder
    return tuple(dict.fromkeys([os.path.abspath(src)] if os.path.isabs(src) else
                               [os.path.abspath(os.path.join(folder, src)), os.path.abspath(src)]))


def names_file(full: str, file: str, roots: tuple[str, ...]) -> bool:
    """Whether ``file`` (relative to one of ``roots``, as a report names it) is the file at the
    absolute path ``full``."""
    return any(full == os.path.abspath(os.path.join(r, file)) for r in roots) \
        or full.endswith(os.sep + file.replace("/", os.sep))


def reports_for(path: str, configured: str | None = None) -> list[tuple[Path, Path, int]]:
    """``(plan, report.json, its mtime_ns)`` for each plan of :func:`plans_for` that has a
    diagnose report beside it."""
    from ..plan import report_dir_for

    out = []
    for plan in plans_for(path, configured):
        report = report_dir_for(plan, "stackpart-diagnose") / "report.json"
        try:
            out.append((plan, report, report.stat().st_mtime_ns))
        except OSError:
            continue
    return out


@lru_cache(maxsize=64)
def _read_report(path: str, mtime_ns: int) -> tuple[Kept, ...]:
    """The compiles kept by the search recorded in report.json at ``path`` (``mtime_ns`` keys the
    cache: a report written again is read again). Nothing is raised for a report that cannot be
    read or is not diagnose's: it keeps nothing."""
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return ()
    search = search_of(report) if isinstance(report, dict) else None
    if search is None or not isinstance(search.get("candidates"), list):
        return ()
    rows = [r for r in search["candidates"] if isinstance(r, dict) and isinstance(r.get("candidate"), str)]
    chosen = next((r for r in rows if r.get("chosen") or r["candidate"] == search.get("chosen")), None)
    if chosen is None:
        return ()
    others = [r for r in rows if r is not chosen and isinstance(r.get("step_ms"), (int, float))]
    if others:
        text = _measured_text(search, chosen, others)
    else:  # nothing else was timed: no measurement says the kept compile is better
        text = (f"diagnose's search timed no candidate besides {chosen['candidate']!r}"
                + (f" ({'; '.join(str(p) for p in search.get('pruned') or [])[:300]})" if search.get("pruned") else "")
                + ", so it measured no alternative to this compile")
    # a search whose backend does not optimise (eager, on CPU) chose by recompiles or the ladder's
    # order, not by speed: it is no evidence that the whole-model compile beats its regional form
    evidence = bool(others) and search.get("gain_measured") is not False
    roots = report_roots(report, path)
    out: list[Kept] = []
    name = chosen["candidate"]
    plan = report.get("plan") if isinstance(report.get("plan"), dict) else {}
    # an edit that turns the program's compile regional or off (`as-is+regional`) keeps no
    # whole-model compile: the search agreed with SP101 there, so the call in that file is not kept
    turned = {str(a.get("target", "")).partition("::")[0] for a in plan.get("actions") or ()
              if isinstance(a, dict) and a.get("action") == "compile" and isinstance(a.get("own_call"), dict)
              and (a["own_call"].get("regional") or a["own_call"].get("disable") is True)}
    if name == "as-is" or name.startswith("as-is+"):
        for entry in search.get("own_compile_setup") or ():
            where, _, code = str(entry).partition(": ")
            file, _, line = where.rpartition(":")
            if file and line.isdigit() and "compile" in code and file not in turned:
                out.append(Kept(file, int(line), _norm(code), None, text, path, roots, evidence))
    for action in plan.get("actions") or ():
        if (isinstance(action, dict) and action.get("action") == "compile" and action.get("own_call")
                and action.get("strategy") == "whole" and "::" in str(action.get("target", ""))
                and not (isinstance(action["own_call"], dict) and action["own_call"].get("disable") is True)):
            file, _, qual = str(action["target"]).partition("::")
            out.append(Kept(file, 0, "", qual, text, path, roots, evidence))
    return tuple(out)


def _validation_failed(plan: Path) -> bool:
    """Whether the plan's validation report records a failed verdict (no report: False)."""
    from ..validate.report import JSON_NAME, default_report_dir

    try:
        with open(default_report_dir(plan) / JSON_NAME, encoding="utf-8") as fh:
            verdict = json.load(fh).get("verdict") or {}
    except (OSError, ValueError, RecursionError, AttributeError):
        return False
    return verdict.get("passed") is False


def plans_for(path: str, configured: str | None = None) -> list[Path]:
    """The plans whose measurements speak for ``path``: ``configured``, then ``plan.yaml`` in the
    file's folder and each folder above it, up to the project root."""
    out = [Path(configured).resolve()] if configured else []
    folder = Path(os.path.abspath(path)).parent
    while True:
        candidate = folder / "plan.yaml"
        if candidate.is_file() and candidate.resolve() not in out:
            out.append(candidate.resolve())
        if any((folder / m).exists() for m in ROOT_MARKERS) or folder.parent == folder:
            return out
        folder = folder.parent


def kept_for(path: str, line: int, code_of: Callable[[], str], configured: str | None = None) -> Kept | None:
    """What diagnose measured of the compile at ``path``:``line``, or None where no report names
    it: a :class:`Kept` whose ``measured`` says whether it keeps the compile (False: the search
    timed nothing else). ``code_of`` gives the call's text; it is called (the file read again)
    only when a report names the file."""
    full = os.path.abspath(path)
    code: str | None = None
    unmeasured: Kept | None = None
    for plan, report, mtime in reports_for(path, configured):
        for kept in _read_report(str(report), mtime):
            if not names_file(full, kept.file, kept.roots):
                continue
            if kept.function is not None:
                hit = function_at(full, line) == kept.function and not _validation_failed(plan)
            else:
                code = _norm(code_of()) if code is None else code
                hit = bool(kept.code) and (code == kept.code or (len(kept.code) >= 120 and code.startswith(kept.code[:120])))
            if hit and kept.measured:
                return kept
            if hit and unmeasured is None:
                unmeasured = kept  # said only when no plan's measurement keeps it
    return unmeasured


def function_at(path: str, line: int) -> str | None:
    """The qualified name (``Cls.method``, ``f``) of the innermost function holding ``line``."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: str | None = None
    work: list[tuple[ast.AST, str]] = [(tree, "")]
    while work:
        node, prefix = work.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if child.lineno <= line <= (child.end_lineno or child.lineno):
                    if not isinstance(child, ast.ClassDef):
                        found = qual
                    work.append((child, qual + "."))
            elif isinstance(child, ast.stmt):
                work.append((child, prefix))
    return found
