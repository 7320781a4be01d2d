"""Real code: the findings recorded (with verdicts) in fixtures/check/real_sample.json from a run
over the installed torch and transformers sources must still be reported, at the same source
line, and the files must check without errors.

Lines are matched by their text (the recorded ``source_line``) so a patch release that shifts
lines does not fail the test; a file or line that no longer exists is skipped, not passed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewriter.check.command import run_check

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "real_sample.json"
DATA = json.loads(FIXTURE.read_text())


def _site_packages() -> Path:
    import torch

    return Path(torch.__file__).resolve().parents[1]


def test_every_recorded_finding_has_a_true_positive_verdict():
    assert DATA["errors"] == [] and DATA["sample"]
    assert len(DATA["sample"]) == min(30, DATA["findings_total"])
    assert all(s["verdict"] == "true positive" and s["why"] for s in DATA["sample"])


@pytest.mark.parametrize("entry", DATA["sample"], ids=lambda e: f"{e['code']}-{e['path']}:{e['line']}")
def test_recorded_finding_still_appears(entry, monkeypatch):
    root = _site_packages()
    path = root / entry["path"]
    if not path.exists():
        pytest.skip(f"{entry['path']} is not in the installed version")
    lines = [i + 1 for i, text in enumerate(path.read_text().splitlines()) if text.strip() == entry["source_line"]]
    if not lines:
        pytest.skip(f"the recorded line is gone from {entry['path']} in the installed version")
    monkeypatch.chdir(root)
    outcome, _ = run_check([entry["path"]], use_config=False, jobs=1)
    assert outcome.errors == []
    hits = [f for f in outcome.findings if f.code == entry["code"] and f.line in lines]
    assert hits, f"{entry['code']} no longer reported at {entry['path']}:{lines}"


@pytest.mark.slow
def test_whole_installed_torch_and_transformers_check_without_errors(monkeypatch):
    """The whole installed torch + transformers trees (about 5,200 files, ~45 s of CPU):
    no file errors, and on the recorded versions every finding is one of the reviewed ones."""
    import torch
    import transformers

    root = _site_packages()
    monkeypatch.chdir(root)
    outcome, _ = run_check(["torch", "transformers"], use_config=False, jobs=2)
    assert outcome.errors == []
    assert outcome.checked > 4000
    found = {(f.path, f.code, f.line) for f in outcome.findings}
    if (torch.__version__, transformers.__version__) == (DATA["torch"], DATA["transformers"]):
        reviewed = {(s["path"], s["code"], s["line"]) for s in DATA["sample"]}
        assert found == reviewed, "a finding without a verdict: review it and add it to the fixture"
