"""Two applies on one tree, and what a killed apply leaves: each apply either writes all of its
plan or changes nothing and says so (exit 2, one line), never "applied" for edits another apply
then overwrote; a temp file a SIGKILLed apply left is named and removed by the next apply."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rewriter.rewrite import apply as apply_mod
from rewriter.rewrite.apply import TEMP_RE, _lock_dirs
from rewriter.cli import main

REPO = Path(__file__).resolve().parents[1]
MODEL = "import torch\n\n\ndef f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n"


def _tree(root: Path) -> tuple[Path, Path, Path]:
    """One file, two plans that both edit it (one compiles f, the other g)."""
    src = root / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text(MODEL)
    plan_f, plan_g = root / "f.yaml", root / "g.yaml"
    plan_f.write_text("version: 1\nactions:\n  - action: compile\n    target: pkg/m.py::f\n")
    plan_g.write_text("version: 1\nactions:\n  - action: compile\n    target: pkg/m.py::g\n")
    return src, plan_f, plan_g


def _temps(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if TEMP_RE.match(p.name))


def _delayed_apply(src: Path, plan: Path, delay: float) -> subprocess.Popen:
    """`rewrite --apply` in a child whose first rename waits ``delay`` seconds (after its check
    that the file is unchanged, before anything is renamed)."""
    script = textwrap.dedent(f"""
        import os, sys, time
        real = os.replace
        def replace(a, b, _n=[0]):
            _n[0] += 1
            if _n[0] == 1:
                time.sleep({delay!r})
            return real(a, b)
        os.replace = replace
        from rewriter.cli import main
        sys.exit(main(["rewrite", "--plan", {str(plan)!r}, {str(src)!r}, "--apply", "--no-validate"]))
    """)
    return subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), text=True)


def _wait_for_temp(proc: subprocess.Popen, where: Path, limit: float = 60.0) -> bool:
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < limit:
        if any(TEMP_RE.match(n) for n in os.listdir(where)):
            return True
        time.sleep(0.002)
    return False


def test_an_apply_that_reads_before_another_renames_changes_nothing_and_says_so(tmp_path, capsys):
    """A stages its edit of m.py (its check passed) and its rename is delayed 4 s; B reads the old
    m.py meanwhile and plans its own edit. Before the lock B would write, then A's rename would
    overwrite B's edit, and both said "applied". Now B waits for A's lock, re-reads m.py under it,
    finds A's bytes, and exits 2 with one line; A's edit is in the tree."""
    src, plan_f, plan_g = _tree(tmp_path)
    a = _delayed_apply(src, plan_f, delay=4.0)
    try:
        assert _wait_for_temp(a, src / "pkg"), a.communicate()
        capsys.readouterr()
        code = main(["rewrite", "--plan", str(plan_g), str(src), "--apply", "--no-validate"])
        err = capsys.readouterr().err
        a_out, a_err = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            a.kill()
    final = (src / "pkg" / "m.py").read_text()
    assert a.returncode == 0 and "applied: 1 file(s)" in a_err, a_err
    assert "@torch.compile\ndef f" in final  # A's edit, which it reported, is there
    assert code == 2, err
    assert err.count("\n") == 1 and "changed since stackpart read it" in err and "nothing was changed" in err, err
    assert "@torch.compile\ndef g" not in final  # B said it wrote nothing, and it did not
    assert _temps(tmp_path) == []


def test_an_apply_gives_up_on_a_lock_held_too_long_and_writes_nothing(tmp_path, capsys, monkeypatch):
    src, plan_f, _ = _tree(tmp_path)
    before = (src / "pkg" / "m.py").read_bytes()
    monkeypatch.setattr(apply_mod, "LOCK_WAIT_S", 0.3)
    fd = os.open(src / "pkg", os.O_RDONLY)  # another apply, holding the lock of the directory it writes in
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        capsys.readouterr()
        t0 = time.monotonic()
        code = main(["rewrite", "--plan", str(plan_f), str(src), "--apply", "--no-validate"])
        waited = time.monotonic() - t0
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"another stackpart apply is writing under {(src / 'pkg').resolve()}" in err and "nothing was changed" in err
    assert 0.3 <= waited < 10
    assert (src / "pkg" / "m.py").read_bytes() == before and _temps(tmp_path) == []
    # the lock released, the same apply goes through
    assert main(["rewrite", "--plan", str(plan_f), str(src), "--apply", "--no-validate"]) == 0


def test_applies_with_src_at_different_depths_share_a_lock(tmp_path):
    src, _, _ = _tree(tmp_path)
    (src / "pkg" / "sub").mkdir()
    outer = _lock_dirs(src, ["pkg/m.py", "pkg/sub/new/_stackpart/x.py"])
    inner = _lock_dirs(src / "pkg", ["m.py"])
    assert outer == [src.resolve(), (src / "pkg").resolve(), (src / "pkg" / "sub").resolve()]
    assert inner == [(src / "pkg").resolve()]
    assert set(outer) & set(inner)


def test_a_temp_file_a_killed_apply_left_is_named_and_removed_by_the_next(tmp_path, capsys):
    src, plan_f, _ = _tree(tmp_path)
    stale = src / "pkg" / ".m.py.0123abcd.stackpart"
    stale.write_text("half")
    mine = src / "pkg" / ".m.py.notours.stackpart"  # not the apply's pattern: left alone
    mine.write_text("user")
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan_f), str(src), "--apply", "--no-validate"]) == 0
    err = capsys.readouterr().err
    assert "note: removed 1 temp file(s) an earlier apply left when it was killed: pkg/.m.py.0123abcd.stackpart" in err
    assert not stale.exists() and mine.exists()


def test_a_real_sigkill_mid_apply_leaves_temps_the_next_apply_removes(tmp_path, capsys):
    """SIGKILL cannot be caught: the killed apply leaves its temp files (and the tree old); the
    next apply names them, removes them and writes the plan."""
    src = tmp_path / "src"
    lines = ["version: 1", "actions:"]
    for i in range(60):
        (src / "pkg").mkdir(parents=True, exist_ok=True)
        (src / "pkg" / f"m{i}.py").write_text(MODEL + "\nDATA = '" + "x" * 50_000 + "'\n")
        lines += ["  - action: compile", f"    target: pkg/m{i}.py::f"]
    plan = tmp_path / "plan.yaml"
    plan.write_text("\n".join(lines) + "\n")
    left: list[str] = []
    for attempt in range(5):
        proc = _delayed_apply(src, plan, delay=30.0)  # staged, then stuck before its first rename
        try:
            assert _wait_for_temp(proc, src / "pkg"), proc.communicate()
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
        left = _temps(src)
        if left:
            break
    assert left, "the killed apply left no temp file"
    assert all("def f" in (src / "pkg" / f"m{i}.py").read_text() and "@torch" not in (src / "pkg" / f"m{i}.py").read_text()
               for i in range(60))
    capsys.readouterr()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    err = capsys.readouterr().err
    assert f"note: removed {len(left)} temp file(s) an earlier apply left when it was killed: {left[0]}" in err, err
    assert _temps(src) == []
    assert all("@torch.compile\ndef f" in (src / "pkg" / f"m{i}.py").read_text() for i in range(60))
