"""Every case under fixtures/ (TorchFix style): plan.yaml + before/ → after/ or a refusal.

For a success case the rewrite's printed diff, applied by ``git apply``, and ``--apply`` both turn
before/ into after/ byte for byte; ``--check`` exits 1 before and 0 after; the same plan on the
rewritten tree gives an empty diff (idempotence). For a refusal case every mode exits 2 with a
one-line ``path:line`` error containing expected_error.txt, and the tree is left untouched.
Adding a case is adding files; see docs/build_actions.py for the layout.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rewriter.cli import main

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_actions", ROOT / "docs" / "build_actions.py")
build_actions = importlib.util.module_from_spec(_spec)
sys.modules["build_actions"] = build_actions
_spec.loader.exec_module(build_actions)  # type: ignore[union-attr]

CASES = build_actions.collect()


def _run(capsys, *argv: str) -> tuple[int, bytes, str]:
    """``stackpart rewrite`` in the case's tmp dir (``--apply`` goes with ``--no-validate``: the
    fixtures test the rewrite itself; the validation gate has its own tests)."""
    capsys.readouterr()
    # --no-validate: these cases test the rewrite itself, not the validation gate (tests/test_validate_gate.py).
    code = main(["rewrite", "--plan", "plan.yaml", "src", *argv, *(["--no-validate"] if "--apply" in argv else [])])
    out, err = capsys.readouterr()  # capsysbinary: the diff is bytes (PEP 263 files keep theirs)
    return code, out, err.decode("utf-8", "replace")


@pytest.fixture
def workdir(tmp_path, monkeypatch, request):
    case = request.param
    shutil.copytree(case.before, tmp_path / "src", symlinks=True)
    shutil.copy(case.path / "plan.yaml", tmp_path / "plan.yaml")
    monkeypatch.chdir(tmp_path)
    return case, tmp_path / "src"


def test_cases_exist_for_every_action():
    from rewriter.rewrite.transform import COMMANDS

    groups = {c.group for c in CASES}
    assert set(COMMANDS) <= groups, f"actions without fixtures: {set(COMMANDS) - groups}"
    for group in groups & set(COMMANDS):
        kinds = {c.expected_error is None for c in CASES if c.group == group}
        assert True in kinds, f"{group} has no success case"


@pytest.mark.parametrize("workdir", CASES, ids=[c.id for c in CASES], indirect=True)
def test_fixture(workdir, capsysbinary, tmp_path):
    capsys = capsysbinary
    case, src = workdir
    before = build_actions.tree_files(src)

    if case.expected_error is not None:
        for mode in ([], ["--check"], ["--apply", "--no-validate"]):
            code, out, err = _run(capsys, *case.args, *mode)
            assert code == 2, (mode, out, err)
            assert out == b""
            first = err.splitlines()[0]
            assert case.expected_error in first, err
            # One line naming the file at fault and its line: `error: path:LINE[:COL]: ...`.
            where = first.removeprefix("error: ").split(": ", 1)[0].split(":")
            assert len(where) >= 2 and where[1].isdigit(), first
            assert build_actions.tree_files(src) == before, "a refused rewrite wrote something"
        return

    expected = build_actions.tree_files(case.after)
    changes = expected != before

    code, patch, err = _run(capsys, *case.args)
    assert code == 0, err
    assert build_actions.tree_files(src) == before, "printing the diff wrote something"
    assert bool(patch) == changes
    if case.expected_stderr:
        assert case.expected_stderr in err

    # The printed diff is what --apply writes: git apply takes it from SRC.
    if patch:
        via = tmp_path / "via_git_apply"
        shutil.copytree(case.before, via, symlinks=True)
        subprocess.run(["git", "apply", "-"], input=patch,
                       cwd=via, check=True, capture_output=True)
        assert build_actions.tree_files(via) == expected

    code, _, err = _run(capsys, *case.args, "--check")
    assert code == (1 if changes else 0), err

    code, out, err = _run(capsys, *case.args, "--apply", "--no-validate")
    assert code == 0, err
    assert out == b""
    assert build_actions.tree_files(src) == expected

    # Idempotence: the same plan on the rewritten tree asks for nothing.
    code, out, err = _run(capsys, *case.args, "--check")
    assert (code, out) == (0, b""), err


def test_docs_page_is_current():
    """docs/actions.md is generated from the same fixtures; regenerate when a case changes."""
    page = ROOT / "docs" / "actions.md"
    assert page.read_text(encoding="utf-8") == build_actions.render(), (
        "docs/actions.md is stale: run `python docs/build_actions.py`"
    )
