"""A real pre-commit run in a temporary git repository (no network).

The hooks are taken from the repository's own .pre-commit-hooks.yaml (id, entry, types,
require_serial, pass_filenames) and run as a `repo: local` hook with `language: system` pointing at
this virtualenv's `stackpart`, so each test takes seconds; the `language: python` install itself
(from a local wheel directory, no torch) is tests/test_hook_install.py. Everything else is
pre-commit's own machinery: file selection by type, batching, failing on modified files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tiny_programs import ITEM_STEP, MIN1, MIN1_FIXED

ROOT = Path(__file__).resolve().parents[1]
GOOD = "import torch\n\n@torch.compile\ndef step(x):\n    return x / x.sum()\n"

pytestmark = pytest.mark.slow


def _config(hook_id: str) -> str:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = dict(next(h for h in hooks if h["id"] == hook_id))
    assert hook["language"] == "python" and hook["types_or"] == ["python", "yaml"]
    stackpart = Path(sys.executable).parent / "stackpart"
    hook["entry"] = hook["entry"].replace("stackpart", str(stackpart), 1)
    hook["language"] = "system"
    return yaml.safe_dump({"repos": [{"repo": "local", "hooks": [hook]}]})


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PRE_COMMIT_HOME=str(repo.parent / "pc-home"), GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", *args], cwd=repo, env=env, text=True, capture_output=True, check=check)


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    return repo


def _install(repo: Path, hook_id: str) -> None:
    (repo / ".pre-commit-config.yaml").write_text(_config(hook_id))
    pre_commit = Path(sys.executable).parent / "pre-commit"
    subprocess.run([str(pre_commit), "install"], cwd=repo, check=True, capture_output=True,
                   env=dict(os.environ, PRE_COMMIT_HOME=str(repo.parent / "pc-home")))
    _git(repo, "add", ".pre-commit-config.yaml")
    _git(repo, "commit", "-q", "-m", "config")  # only a YAML file that is not the plan: a clean pass


def test_check_hook_blocks_a_finding_and_passes_a_clean_commit(repo):
    _install(repo, "stackpart-check")
    (repo / "train.py").write_text(ITEM_STEP)
    _git(repo, "add", "train.py")
    blocked = _git(repo, "commit", "-m", "bad", check=False)
    assert blocked.returncode != 0
    assert "train.py:5:16: SP103" in blocked.stdout + blocked.stderr
    assert _git(repo, "log", "--oneline").stdout.count("\n") == 1  # nothing committed

    (repo / "train.py").write_text(GOOD)
    _git(repo, "add", "train.py")
    passed = _git(repo, "commit", "-m", "good", check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "stackpart check" in passed.stdout + passed.stderr and "Passed" in passed.stdout + passed.stderr


def test_fix_hook_produces_a_commit_ready_tree(repo):
    _install(repo, "stackpart-fix")
    (repo / "shapes.py").write_text(MIN1)
    _git(repo, "add", "shapes.py")
    first = _git(repo, "commit", "-m", "fixable", check=False)
    assert first.returncode != 0  # pre-commit fails a hook that modified files
    assert "files were modified by this hook" in first.stdout + first.stderr
    assert (repo / "shapes.py").read_text() == MIN1_FIXED
    _git(repo, "add", "shapes.py")
    second = _git(repo, "commit", "-m", "fixed", check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    assert _git(repo, "show", "HEAD:shapes.py").stdout == MIN1_FIXED


def test_check_hook_blocks_a_commit_that_edits_only_the_plan(repo):
    """With `types: [python]` a commit of plan.yaml alone skipped the hook, and the drift it
    created reached the branch unseen."""
    shutil.copytree(ROOT / "examples" / "gpt", repo / "gpt")
    (repo / "pyproject.toml").write_text('[tool.stackpart]\nplan = "gpt/plan.yaml"\nsrc = "gpt/src"\n')
    plan = (repo / "gpt" / "plan.yaml").read_text()
    (repo / "gpt" / "plan.yaml").write_text("version: 1\nactions: []\n")
    _install(repo, "stackpart-check")
    _git(repo, "add", "gpt", "pyproject.toml")
    first = _git(repo, "commit", "-m", "model and an empty plan", check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    (repo / "gpt" / "plan.yaml").write_text(plan)  # the plan now asks for changes to model.py
    _git(repo, "add", "gpt/plan.yaml")
    blocked = _git(repo, "commit", "-m", "plan only", check=False)
    assert blocked.returncode != 0
    assert "plan drift" in blocked.stdout + blocked.stderr and "gpt/src/model.py" in blocked.stdout + blocked.stderr
