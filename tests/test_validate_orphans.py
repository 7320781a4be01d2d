"""validate's children die with validate, even when it is killed with SIGKILL (no handler runs):
a child holding GPU memory must not outlive the parent (rewriter.engine.runner.die_with_parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_child_is_killed_when_the_parent_is_sigkilled(tmp_path):
    pidfile = tmp_path / "child.pid"
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from rewriter.engine.runner import die_with_parent
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True, preexec_fn=die_with_parent)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent])
    deadline = time.time() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.time() < deadline, "parent never started its child"
        time.sleep(0.05)
    child = int(pidfile.read_text())
    assert _alive(child)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the child outlived its SIGKILLed parent"
