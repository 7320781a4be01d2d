"""No module under rewriter/ retells measurement history: run numbers, the H200, BENCHMARKS.md, or
session and issue numbers. A docstring says what and why with a pointer; the evidence lives in
docs/decisions.md."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rewriter"

#: Run numbers (lettered ones too: "run 33a"), the H200, BENCHMARKS.md, session and issue numbers.
#: Deliberately broad: "runs 10 ms" matches too, so such prose is worded another way.
HISTORY = re.compile(r"\b[Rr]uns? [0-9]{1,2}[a-z]?\b|H200|BENCHMARKS\.md|[Ss]ession [0-9]+|[Ii]ssue [0-9]+")

#: Files whose citations are still to be moved, each with why it is allowed for now (none today).
#: Remove an entry once its file is clean (the test below fails on an entry that no longer needs it).
ALLOWED: dict[str, str] = {}


def _citations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()}")
    return found


def test_no_module_cites_runs_sessions_or_issues():
    new = [hit for rel, hits in _citations().items() if rel not in ALLOWED for hit in hits]
    assert new == [], (
        "history in code (move the evidence to docs/decisions.md and point to its section):\n" + "\n".join(new)
    )


def test_allow_list_holds_only_files_that_still_cite():
    stale = sorted(set(ALLOWED) - set(_citations()))
    assert stale == [], f"these files no longer cite history; remove them from ALLOWED: {stale}"


@pytest.mark.parametrize(
    "line",
    [
        "(BENCHMARKS.md, run 25)",
        "on the H200 slice",
        "H200 runs 13-36 saw",
        "(issue 17, item 5)",
        "Issue 17 (\"What to build\" 2): where the program",
        "a newcomer's MoE, session 3",
        "per-block ran slower in run 9",
        "H200 run 33a: a host stall",
    ],
)
def test_pattern_catches_each_kind_of_citation(line):
    assert HISTORY.search(line)


@pytest.mark.parametrize(
    "line",
    [
        'docs/decisions.md, "Minimax over host conditions"',
        "a re-run of the search picks the same plan",
        "warm-up runs and 30 reps",
    ],
)
def test_pattern_leaves_ordinary_prose_alone(line):
    assert not HISTORY.search(line)
