"""What `stackpart diagnose` prints: a summary by default, a line per event with -v (always in
diagnose.log), third-party stderr kept out of the terminal, the shape used when --shape is left
out, and --help in sections, common options first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rewriter.cli import main

ROOT = Path(__file__).resolve().parent.parent

HARNESS = """\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def build_model():
    return Net()


def make_inputs(batch: int = 3, width: int = 8):
    return (torch.randn(batch, width),)
"""


@pytest.fixture
def src(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "harness.py").write_text(HARNESS)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "src"


def _diagnose(capsys, *extra: str) -> tuple[int, list[str]]:
    code = main(["diagnose", "--harness", "harness.py", "src", "-o", "out/plan.yaml", "--device", "cpu",
                 "--no-search", *extra])
    return code, capsys.readouterr().err.splitlines()


def test_default_run_prints_a_summary_and_says_the_shape_it_used(src, capsys):
    code, lines = _diagnose(capsys)
    assert code == 0, lines
    # the shape diagnose ran, read from make_inputs's defaults, said once
    said = [ln for ln in lines if ln.startswith("diagnose: no --shape given:")]
    assert said == ["diagnose: no --shape given: make_inputs()'s own defaults, batch=3,width=8 (one shape; pass "
                    "--shape name=int,... (repeatable) for the shapes your program runs)"], lines
    # no per-event line by default, the verdicts and where the files went are there
    assert not any(ln.startswith("diagnose: rung ") for ln in lines), lines
    assert any(ln.split()[:2] == ["granularity", "ok"] for ln in lines), lines
    assert any(ln.startswith("wrote plan: ") for ln in lines), lines
    # no line said twice (blank and table-rule lines aside)
    text = [ln.strip() for ln in lines if ln.strip(" ─━-")]
    assert len(text) == len(set(text)), [ln for ln in text if text.count(ln) > 1]
    assert len(lines) <= 40, "\n".join(lines)
    # the event lines are in diagnose.log, in the report folder
    log = (src.parent / "out" / "stackpart-diagnose" / "diagnose.log").read_text()
    assert "diagnose: rung granularity: ok in " in log


def test_the_defaults_said_are_the_harness_shape_in_the_rungs_plan_and_report(src, capsys):
    """Without --shape, diagnose said it ran make_inputs()'s own defaults, batch=3,width=8, then
    skipped batch scaling for "no batch key in harness.shapes[0]", wrote ``shapes: - {}`` in the
    plan and ``reference shape {}`` in the report: the defaults it said are the shape throughout."""
    import yaml

    code, lines = _diagnose(capsys)
    assert code == 0, lines
    out = src.parent / "out"
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["reference_shape"] == {"batch": 3, "width": 8}, report["reference_shape"]
    scaling = next(r for r in report["rungs"] if r["name"] == "batch_scaling")
    assert scaling["status"] == "ok", scaling
    assert yaml.safe_load((out / "plan.yaml").read_text())["harness"]["shapes"] == [{"batch": 3, "width": 8}]
    assert "reference shape `{'batch': 3, 'width': 8}`" in (out / "stackpart-diagnose" / "report.md").read_text()


def test_own_default_shape_reads_the_int_defaults_of_the_signature():
    from rewriter.shapes import own_default_shape

    def make_inputs(batch=4, *, seq: int = 128, flag=True, name="x", shift=-1, dim=None):
        pass

    assert own_default_shape(make_inputs) == {"batch": 4, "seq": 128}
    assert own_default_shape(lambda **kw: None) == {}


def test_verbose_prints_each_event_once(src, capsys):
    code, lines = _diagnose(capsys, "-v")
    assert code == 0, lines
    assert "diagnose: rung batch_scaling (1/11) ..." in lines
    assert sum(ln.startswith("diagnose: rung granularity: ok in ") for ln in lines) == 1


def test_a_given_shape_is_not_announced(src, capsys):
    code, lines = _diagnose(capsys, "--shape", "batch=2,width=8")
    assert code == 0, lines
    assert not any("no --shape given" in ln for ln in lines)
    report = json.loads((src.parent / "out" / "stackpart-diagnose" / "report.json").read_text())
    assert report["reference_shape"] == {"batch": 2, "width": 8}


def test_with_own_default_shape_states_the_defaults_only_where_no_shape_was_given():
    from rewriter.plan import Harness
    from rewriter.shapes import with_own_default_shape

    def make_inputs(batch=4, *, seq: int = 128, flag=True, name="x"):
        pass

    bare = Harness(file="h.py", model="build_model", inputs="make_inputs")
    spec, note = with_own_default_shape(bare, make_inputs)
    assert spec.shapes == [{"batch": 4, "seq": 128}]
    assert note is not None and note.startswith("make_inputs()'s own defaults, batch=4,seq=128 (")
    spec, note = with_own_default_shape(bare, lambda **kw: None)
    assert spec is bare and note is not None and note.startswith("make_inputs() with no arguments (")
    given = bare.model_copy(update={"shapes": [{"batch": 2}]})
    assert with_own_default_shape(given, make_inputs) == (given, None)


def test_third_party_stderr_goes_to_the_log_and_the_console_to_the_terminal(tmp_path):
    """As a program (stderr is file descriptor 2): what C++ or a library writes to fd 2 and
    sys.stderr lands in the log; the console's lines and the event lines with -v reach stderr."""
    log = tmp_path / "d.log"
    script = f"""
import os, sys, warnings
from rewriter.terminal import Feed, stderr
with Feed(stderr(), verbose=True) as feed:
    feed.log = {str(log)!r}
    os.write(2, b"USDT: profiler_start\\n")
    print("library chatter", file=sys.stderr)
    warnings.warn("a library warning")
    feed.event("diagnose: rung profile: ok in 0.1 s")
    feed.console.print("summary line")
print("after", file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["diagnose: rung profile: ok in 0.1 s", "summary line", "after"], done.stderr
    kept = log.read_text()
    assert "USDT: profiler_start" in kept and "library chatter" in kept and "a library warning" in kept
    assert "diagnose: rung profile: ok in 0.1 s" in kept


def test_a_killed_run_leaves_its_log_up_to_the_kill(tmp_path):
    """diagnose.log streams once its folder exists: a SIGKILL (a device or CI time limit, the OOM
    killer) leaves the lines kept before the log was set and every line after it."""
    log = tmp_path / "d.log"
    script = f"""
import os, signal, sys
from rewriter.terminal import Feed, stderr
with Feed(stderr()) as feed:
    feed.event("diagnose: setup: before the log's folder was known")
    feed.log = {str(log)!r}
    os.write(2, b"USDT: profiler_start\\n")
    print("library chatter", file=sys.stderr, flush=True)
    feed.event("search: whole: cold phase started")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == -9, done.stderr
    kept = log.read_text().splitlines()
    assert [ln.split(" ", 1)[1] for ln in kept if "diagnose:" in ln or "search:" in ln] == [
        "diagnose: setup: before the log's folder was known", "search: whole: cold phase started"]
    assert "USDT: profiler_start" in kept and "library chatter" in kept
    assert done.stderr == ""  # third-party stderr went to the log, not the terminal


def test_help_lists_common_options_first_in_sections(capsys):
    assert main(["diagnose", "--help"]) == 0
    out = capsys.readouterr().out
    sections = [ln for ln in out.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert sections[0] == "Common options:" and "Other options:" not in sections, sections
    common = out.split("Common options:")[1].split("\n\n")[0]
    assert "--harness" in common and "--shape" in common and "--verbose" in common and "--pin" not in common
    assert main(["validate", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.index("Common options:") < out.index("--plan") < out.index("Timing on CUDA") < out.index("--pin")


def test_shared_timing_options_are_declared_once():
    """--pin, --host, --no-overlap and --nproc: one declaration (timing_options) for diagnose and validate."""
    from rewriter.cli import cli

    for name in ("no_overlap", "pin", "host", "nproc"):
        d = next(p for p in cli.commands["diagnose"].params if p.name == name)
        v = next(p for p in cli.commands["validate"].params if p.name == name)
        assert d.opts == v.opts and d.default == v.default and type(d.type) is type(v.type)
    src = (ROOT / "rewriter" / "cli.py").read_text()
    assert src.count('"--pin"') == 1 and src.count('"--host"') == 1 and src.count('"--no-overlap"') == 1


def test_the_log_is_set_once_and_an_unwritable_one_does_not_raise(tmp_path):
    import io

    from rich.console import Console

    from rewriter.terminal import Feed

    with Feed(Console(file=io.StringIO())) as feed:
        feed.event("one")
        feed.log = tmp_path / "a.log"
        feed.log = tmp_path / "a.log"  # the same path again: nothing changes
        with pytest.raises(ValueError, match="set once"):
            feed.log = tmp_path / "b.log"
        feed.event("two")
    assert [ln.split(" ", 1)[1] for ln in (tmp_path / "a.log").read_text().splitlines()] == ["one", "two"]
    assert not (tmp_path / "b.log").exists()
    (tmp_path / "dir.log").mkdir()  # cannot be opened as a file: kept to the exit, which does not raise either
    with Feed(Console(file=io.StringIO())) as feed:
        feed.log = tmp_path / "dir.log"
        feed.event("kept")
