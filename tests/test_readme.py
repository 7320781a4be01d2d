"""The README's quick start stays true: CI runs the README's test command, and the README stays a
five-minute read with the rest under docs/ (the pages it links exist)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    return [ln for block in re.findall(r"```sh\n(.*?)```", README, re.S) for ln in block.splitlines() if ln.startswith("./.ci/setup")]


def test_ci_runs_the_readmes_test_command():
    tests = [c for c in _commands() if "pytest" in c]
    assert len(tests) == 1, tests
    assert tests[0] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_quick_start_runs_the_bundled_example():
    main = [c for c in _commands() if "stackpart rewrite" in c]
    assert main == ["./.ci/setup && .venv/bin/stackpart rewrite --plan examples/gpt/plan.yaml examples/gpt/src --unsafe"]
    # tests/test_rewrite_io.py::test_readme_example_command runs this rewrite and checks its diff


def test_readme_is_short_and_its_links_resolve():
    assert len(README.split()) <= 1400
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    for page in ROOT.glob("docs/*.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_readmes_exit_codes_are_the_commands(capsys):
    """The README's exit-code line covers ``rewrite``: printing a pending diff exits 0 (as
    ``black --diff`` does) and only ``--check`` exits 1 for it. The line said 1 meant "changes
    pending" for every command."""
    from rewriter.cli import main

    line = " ".join(README.split("Each command follows", 1)[1].split("\n\n", 1)[0].split())
    assert "0 clean or done (`rewrite` printing a pending diff included" in line, line
    assert "1 findings or changes pending where the command checks for them (`check`, `rewrite --check`)" in line, line
    plan, src = str(ROOT / "examples/gpt/plan.yaml"), str(ROOT / "examples/gpt/src")
    assert main(["rewrite", "--plan", plan, src]) == 0
    assert "diff --git" in capsys.readouterr().out  # changes were pending
    assert main(["rewrite", "--plan", plan, src, "--check"]) == 1
