"""`stackpart diagnose ... 2>&1 | head -3` exited 1 once head had gone: the next progress line
raised BrokenPipeError and the diagnosis died before its plan. A closed pipe now drops the lines
and the work goes on; a command stopped by one exits as SIGPIPE would, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rewriter.terminal import PipeSafe

ROOT = Path(__file__).resolve().parents[1]


def test_a_stream_whose_reader_went_away_drops_lines_without_raising():
    r, w = os.pipe()
    os.close(r)
    stream = PipeSafe(os.fdopen(w, "w", buffering=1))
    assert stream.write("a progress line\n") == len("a progress line\n")
    stream.write("another\n")
    stream.flush()
    stream.close()


_FEED = """
import sys
from rewriter.terminal import Feed, stderr

with Feed(stderr()):
    for i in range(3000):
        stderr().print("a progress line " + "x" * 80)
open(sys.argv[1], "w").write("the work went on")
"""


def test_a_long_commands_progress_into_a_reader_that_stops_does_not_stop_the_work(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "feed.py").write_text(_FEED)
    done_marker = tmp_path / "done"
    cmd = f"{sys.executable} {tmp_path / 'feed.py'} {done_marker} 2>&1 | head -c 10 >/dev/null; echo rc=${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "rc=0", (done.stdout, done.stderr)
    assert done_marker.read_text() == "the work went on"


def test_a_broken_pipe_of_another_stream_is_not_taken_for_a_closed_stdout(monkeypatch):
    """Only a reader of stdout or stderr gone is a quiet exit; another pipe's EPIPE is a bug."""
    import pytest

    from rewriter import cli

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli.cli, "main", broken)
    monkeypatch.setattr(cli, "_reader_gone", lambda: False)
    with pytest.raises(BrokenPipeError):
        cli._main(["check", "."])
    monkeypatch.setattr(cli, "_reader_gone", lambda: True)
    monkeypatch.setattr(cli, "_quiet_pipes", lambda: None)
    assert cli._main(["check", "."]) == 141
