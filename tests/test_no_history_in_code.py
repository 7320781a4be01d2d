"""No module under rewriter/ retells measurement history: run numbers, the H200, BENCHMARKS.md, or
session and issue numbers. A docstring says what and why with a pointer; the evidence lives in
docs/decisions.md.

Tests are held to the narrower rule: no issue or session numbers. A test says what behaviour it
pins; one that pins a measured value may say where it was measured (a BENCHMARKS.md section, a GPU
run), so run numbers, the H200 and BENCHMARKS.md stay allowed there."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rewriter"
TESTS = ROOT / "tests"

#: Run numbers (lettered ones too: "run 33a"), the H200, BENCHMARKS.md, session and issue numbers.
#: Deliberately broad: "runs 10 ms" matches too, so such prose is worded another way.
HISTORY = re.compile(r"\b[Rr]uns? [0-9]{1,2}[a-z]?\b|H200|BENCHMARKS\.md|[Ss]ession [0-9]+|[Ii]ssue [0-9]+")

#: What tests/ may not cite: session and issue numbers only.
TEST_HISTORY = re.compile(r"[Ss]ession [0-9]+|[Ii]ssue [0-9]+")

#: Files whose citations are still to be moved, each with why it is allowed for now (none today).
#: Remove an entry once its file is clean (the test below fails on an entry that no longer needs it).
ALLOWED: dict[str, str] = {}


def _scan(paths, pattern: re.Pattern, found: dict[str, list[str]]) -> None:
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.setdefault(rel, []).append(f"{rel}:{number}: {line.strip()}")


def _citations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    _scan(sorted(PACKAGE.rglob("*.py")), HISTORY, found)
    _scan(sorted(TESTS.rglob("*.py")), TEST_HISTORY, found)
    return found


def test_no_module_cites_runs_sessions_or_issues():
    new = [hit for rel, hits in _citations().items() if rel.startswith("rewriter/") and rel not in ALLOWED
           for hit in hits]
    assert new == [], (
        "history in code (move the evidence to docs/decisions.md and point to its section):\n" + "\n".join(new)
    )


def test_no_test_cites_issues_or_sessions():
    new = [hit for rel, hits in _citations().items() if rel.startswith("tests/") and rel not in ALLOWED
           for hit in hits]
    assert new == [], (
        "issue or session numbers in tests (say what behaviour the test pins; point to a docs/ section or "
        "the BENCHMARKS.md section where the evidence matters):\n" + "\n".join(new)
    )


def test_allow_list_holds_only_files_that_still_cite():
    stale = sorted(set(ALLOWED) - set(_citations()))
    assert stale == [], f"these files no longer cite history; remove them from ALLOWED: {stale}"


# The examples below put their numbers in f-string fields, so that this file's own source holds no
# issue or session number for the scan above to find.
@pytest.mark.parametrize(
    "line",
    [
        "(BENCHMARKS.md, run 25)",
        "on the H200 slice",
        "H200 runs 13-36 saw",
        f"(issue {17}, item 5)",
        f"Issue {17} (\"What to build\" 2): where the program",
        f"a newcomer's MoE, session {3}",
        "per-block ran slower in run 9",
        "H200 run 33a: a host stall",
    ],
)
def test_pattern_catches_each_kind_of_citation(line):
    assert HISTORY.search(line)


@pytest.mark.parametrize(
    "line",
    [
        f"(issue {17}, item 5)",
        f"Issue {17} (\"What to build\" 2): where the program",
        f"a newcomer's MoE, session {3}",
        f"Session {12}: the search",
    ],
)
def test_test_pattern_catches_issue_and_session_numbers(line):
    assert TEST_HISTORY.search(line)


@pytest.mark.parametrize(
    "line",
    [
        'docs/decisions.md, "Minimax over host conditions"',
        "a re-run of the search picks the same plan",
        "warm-up runs and 30 reps",
        "from rewriter.diagnose.session import Session",
    ],
)
def test_pattern_leaves_ordinary_prose_alone(line):
    assert not HISTORY.search(line)
    assert not TEST_HISTORY.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "(BENCHMARKS.md, run 25)",
        'BENCHMARKS.md, "Model zoo, part 15"',
        "measured on the H200, run 21",
        "per-block ran slower in run 9",
    ],
)
def test_test_pattern_allows_where_a_measurement_was_made(line):
    assert not TEST_HISTORY.search(line)
