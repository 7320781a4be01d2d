"""`check` and `rewrite` run where torch cannot be imported (the pre-commit hook's environment);
`diagnose` and `validate` say in one line, exit 2, that they need it and how to install it.

Each command runs in a subprocess whose ``sitecustomize`` (first on PYTHONPATH, so check's
worker processes get it too) makes ``torch``, ``triton``, ``numpy`` and ``matplotlib``
unimportable: none of them is in the hook's environment. A code path that reaches
``import torch`` fails with a traceback, never silently.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_programs import ITEM_STEP, MIN1

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("torch", "triton", "numpy", "matplotlib")
BLOCKER = f'''
import sys


class _NoTorch:
    """Refuse the packages the hook's environment does not have."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''


@pytest.fixture
def env(tmp_path):
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(block), str(ROOT)]), OMP_NUM_THREADS="1")


def stackpart(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewriter.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def no_traceback(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "ModuleNotFoundError" not in out, out[-3000:]
    return out


def test_the_blocker_blocks(env, tmp_path):
    for name in BLOCKED:
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True)
        assert proc.returncode == 1 and f"No module named '{name}'" in proc.stderr


def test_check_and_fix_without_torch(env, tmp_path):
    (tmp_path / "train.py").write_text(ITEM_STEP)
    (tmp_path / "shapes.py").write_text(MIN1)
    proc = stackpart(env, tmp_path, "check", "train.py", "shapes.py", "--format", "sarif")
    assert proc.returncode == 1 and '"ruleId": "SP103"' in no_traceback(proc)
    proc = stackpart(env, tmp_path, "check", "--fix", "train.py", "shapes.py")
    assert proc.returncode == 1 and "train.py:5:16: SP103" in no_traceback(proc)
    assert "maybe_mark_dynamic(x, 1)" in (tmp_path / "shapes.py").read_text()


def test_check_in_worker_processes_without_torch(env, tmp_path):
    (tmp_path / "src").mkdir()
    for i in range(30):  # above check's PARALLEL_MIN: the files go to a process pool
        (tmp_path / "src" / f"m{i}.py").write_text(ITEM_STEP)
    proc = stackpart(env, tmp_path, "check", "-j", "2", "src")
    assert proc.returncode == 1 and "30 finding(s); 30 file(s) checked, 30 parsed" in no_traceback(proc)


def test_plan_drift_and_its_fix_without_torch(env, tmp_path):
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    args = ("check", "--plan", "gpt/plan.yaml", "--src", "gpt/src", "gpt/src/model.py")
    drift = stackpart(env, tmp_path, *args)
    assert drift.returncode == 1 and "plan drift" in no_traceback(drift)
    refused = stackpart(env, tmp_path, *args, "--fix")  # the validation gate reads the report dir
    assert refused.returncode == 1 and "no validation report for this diff" in no_traceback(refused)
    fixed = stackpart(env, tmp_path, *args, "--fix", "--no-validate")
    assert fixed.returncode == 0, no_traceback(fixed)
    assert "@torch.compile\n    def forward" in (tmp_path / "gpt" / "src" / "model.py").read_text()


def test_fix_and_apply_with_a_passing_report_without_torch(env, tmp_path):
    """The gate's passing branch: check --fix and rewrite --apply write the validated diff."""
    from rewriter.engine.materialize import file_sha256, tree_hashes
    from rewriter.plan import load_plan
    from rewriter.rewrite.transform import plan_rewrite
    from rewriter.validate.report import default_report_dir

    for name in ("fix", "apply"):
        shutil.copytree(ROOT / "examples" / "gpt", tmp_path / name)
        plan, src = tmp_path / name / "plan.yaml", tmp_path / name / "src"
        out = default_report_dir(plan)  # hand-made, as in test_validate_gate: this is about the gate
        out.mkdir(parents=True)
        (out / "validation.json").write_text(json.dumps({
            "report_version": 1, "diff_sha256": plan_rewrite(load_plan(plan), src, unsafe=True).digest(),
            "plan": str(plan.resolve()), "plan_sha256": file_sha256(plan), "src": str(src.resolve()),
            "tree_sha256": tree_hashes(src), "environment": {"timed_on": "cpu"},
            "verdict": {"passed": True, "failures": [], "errors": []},
        }))
    fixed = stackpart(env, tmp_path, "check", "--fix", "--plan", "fix/plan.yaml", "--src", "fix/src", "fix/src/model.py")
    assert fixed.returncode == 0 and "fixed 1 file(s)" in no_traceback(fixed)
    applied = stackpart(env, tmp_path, "rewrite", "--plan", "apply/plan.yaml", "apply/src", "--apply")
    assert applied.returncode == 0 and "applied" in no_traceback(applied)
    for name in ("fix", "apply"):
        assert "@torch.compile\n    def forward" in (tmp_path / name / "src" / "model.py").read_text()


def test_rewrite_diff_apply_and_kernels_without_torch(env, tmp_path):
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    diff = stackpart(env, tmp_path, "rewrite", "--plan", "gpt/plan.yaml", "gpt/src", "--unsafe",
                     "--summary-md", "summary.md")
    assert diff.returncode == 0 and "def pad_to_bucket" in no_traceback(diff)  # a rendered template
    assert (tmp_path / "summary.md").is_file()
    for case in ("topk_sampling", "stub_fallback", "softmax_package_alias"):  # catalog kernels and a stub
        fixture = ROOT / "fixtures" / "kernel" / case
        proc = stackpart(env, tmp_path, "rewrite", "--plan", str(fixture / "plan.yaml"), str(fixture / "before"), "--unsafe")
        assert proc.returncode == 0 and "_stackpart/kernel_" in no_traceback(proc), case
    applied = stackpart(env, tmp_path, "rewrite", "--plan", "gpt/plan.yaml", "gpt/src", "--apply", "--no-validate")
    assert applied.returncode == 0 and "applied" in no_traceback(applied)
    again = stackpart(env, tmp_path, "rewrite", "--plan", "gpt/plan.yaml", "gpt/src", "--check")
    assert again.returncode == 0, no_traceback(again)


@pytest.mark.parametrize("args", [
    ("diagnose", "--harness", "harness.py", "src"),
    ("diagnose", "--harness", "harness.py", "src", "--nproc", "2"),
    ("validate", "--plan", "plan.yaml", "src"),
    ("validate", "--plan", "plan.yaml", "src", "--nproc", "2"),
])
def test_the_torch_commands_say_what_to_install(env, tmp_path, args):
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path, dirs_exist_ok=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    plan = (tmp_path / "plan.yaml").read_bytes()
    proc = stackpart(env, tmp_path, *args)
    assert proc.returncode == 2
    lines = no_traceback(proc).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: stackpart {args[0]} needs torch") and "pip install 'stackpart[torch]'" in lines[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert (tmp_path / "plan.yaml").read_bytes() == plan
