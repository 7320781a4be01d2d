"""SIGTERM (`timeout`, a CI or batch-job kill) must not orphan validate's child processes: they run
in their own sessions, so only validate's own cleanup can end them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HARNESS = """\
import time
import torch


def build_model():
    return torch.nn.Linear(4, 4)


def make_inputs(batch: int = 2):
    time.sleep(600)  # a hung harness: validate is killed while its children wait here
    return (torch.randn(batch, 4),)
"""

PLAN = "version: 1\nharness:\n  file: harness.py\n  device: cpu\n  shapes: [{batch: 2}]\nactions: []\n"


def _children(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "rewriter.engine.child" in cmd and marker in cmd:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the children")
def test_sigterm_kills_validate_children_and_removes_the_temp_dir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(HARNESS)
    (tmp_path / "plan.yaml").write_text(PLAN)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewriter.cli", "validate", "--plan", str(tmp_path / "plan.yaml"), str(src),
         "--baselines", "", "--timeout", "300"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not _children(str(temp)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _children(str(temp)), "validate's children never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 15
        while _children(str(temp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _children(str(temp)) == []
        assert list(temp.glob("stackpart-validate-*")) == []
    finally:
        for pid in _children(str(temp)):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
