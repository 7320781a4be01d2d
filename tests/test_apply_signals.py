"""`rewrite --apply` interrupted anywhere (docs/guide.md, "`stackpart rewrite --plan plan.yaml
SRC`"): every file is entirely its old or entirely its new bytes, no `.NAME.XXXX.stackpart` temp
file is left, directories made for new files go on rollback, a second signal waits for the rollback,
and the exit code says what happened (0 and "applied" when every file was written, even if a signal
came after the last rename; 130 for SIGINT and 143 for SIGTERM when the apply was stopped and the
tree restored).

Three layers: faults injected at the k-th call of each system call `apply_changes` makes, for every
k (an exception raised before or after the call, or a real signal raised inside it); the same
through the CLI in-process (exit codes and messages); and real processes of
`python -m rewriter.cli rewrite --apply` sent SIGTERM / SIGINT (and a second one) at varied delays.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from rewriter.rewrite.apply import apply_changes
from rewriter.signals import deferred_signals
from rewriter.cli import _terminated, main
from rewriter.errors import StackpartError
from rewriter.rewrite.transform import FileChange

REPO = Path(__file__).resolve().parents[1]


# -- helpers -------------------------------------------------------------------------------------


def snapshot(root: Path) -> tuple[dict[str, tuple[bytes, int]], list[str]]:
    """Every file under ``root`` (bytes, mode bits) and every directory."""
    files, dirs = {}, []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            dirs.append(rel)
        else:
            files[rel] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return files, dirs


def temps(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name.endswith(".stackpart"))


def mixed(root: Path, old: dict, new: dict) -> list[str]:
    """Files whose bytes are neither the old nor the new ones (a torn write)."""
    now = snapshot(root)[0]
    return sorted(k for k in set(now) | set(old) | set(new) if now.get(k) not in (old.get(k), new.get(k)))


#: The signals that end a process politely, each handled under the CLI by raising
#: SystemExit(128 + n) (SIGHUP: a terminal closed, SIGQUIT: Ctrl-\).
TERMINATING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@pytest.fixture
def sigterm_raises():
    """SIGTERM, SIGHUP and SIGQUIT raise SystemExit(128 + n) as under the CLI (the default would
    end pytest itself)."""
    previous = {signum: signal.signal(signum, _terminated) for signum in TERMINATING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Faults:
    """Wrap ``os.open``, ``os.write``, ``os.chmod``, ``os.replace``, ``os.mkdir``, ``os.unlink`` and
    ``os.rmdir`` as called on paths under ``root`` (``os.write``: on the files opened there), count
    the calls per function, and run ``hook(name, k, when)`` before (``when="before"``) and after
    (``"after"``) the k-th real call."""

    NAMES = ("open", "write", "chmod", "replace", "mkdir", "unlink", "rmdir")

    def __init__(self, monkeypatch, root: Path, hook=None):
        self.root = str(root.resolve())
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, str]] = []
        self.hook = hook or (lambda name, k, when: None)
        self.fds: set[int] = set()
        for name in self.NAMES:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))

    def _ours(self, name, args) -> bool:
        if name == "write":
            return args[0] in self.fds
        if name == "open" and len(args) > 1 and not args[1] & os.O_CREAT:
            return False  # a read (the guarded source read uses os.open too), not the apply's
        return str(args[0]).startswith(self.root)

    def _wrap(self, name, real):
        def wrapper(*args, **kwargs):
            if not self._ours(name, args):
                return real(*args, **kwargs)
            self.calls[name] += 1
            k = self.calls[name]
            self.log.append((name, str(args[-1] if name == "replace" else args[0])))
            self.hook(name, k, "before")
            out = real(*args, **kwargs)
            if name == "open":
                self.fds.add(out)
            self.hook(name, k, "after")
            return out

        return wrapper


def _unit_tree(tmp_path: Path) -> tuple[Path, list[FileChange], tuple, tuple]:
    """4 files changed (one 0o755), 3 new files in 3 new directories; the changes and the tree's
    snapshot before and after."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    old = {"a.py": b"A = 1\n", "pkg/b.py": b"B = 2\n" * 50, "pkg/c.py": b"C = 3\r\n", "run.py": b"def main(): pass\n"}
    for rel, data in old.items():
        (src / rel).write_bytes(data)
    (src / "pkg" / "b.py").chmod(0o755)
    modes = {rel: stat.S_IMODE((src / rel).stat().st_mode) for rel in old}
    changes = [FileChange(rel, data, data + b"# stackpart\n" * (i + 1), modes[rel]) for i, (rel, data) in enumerate(old.items())]
    changes += [
        FileChange("other/y.py", None, b"Y = 1\n"),
        FileChange("pkg/_stackpart/__init__.py", None, b""),
        FileChange("pkg/_stackpart/deep/x.py", None, b"X = 1\n" * 1000),
    ]
    changes.sort(key=lambda c: c.relpath)
    before = snapshot(src)
    files = dict(before[0])
    files.update({c.relpath: (c.new, c.mode) for c in changes})
    after = (files, sorted(before[1] + ["other", "pkg/_stackpart", "pkg/_stackpart/deep"]))
    return src, changes, before, after


def _clean_counts(tmp_path: Path, monkeypatch) -> Counter[str]:
    """How many times an uninterrupted apply calls each wrapped function."""
    src, changes, _, after = _unit_tree(tmp_path / "count")
    faults = Faults(monkeypatch, src)
    apply_changes(src, changes)
    assert snapshot(src) == after
    monkeypatch.undo()
    return faults.calls


# -- faults at every call of apply_changes -------------------------------------------------------


INTERRUPTS = {
    "KeyboardInterrupt": (lambda: KeyboardInterrupt(), KeyboardInterrupt),
    "SystemExit(143)": (lambda: SystemExit(143), SystemExit),
}


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("interrupt", sorted(INTERRUPTS))
def test_an_interrupt_at_any_call_leaves_the_tree_as_it_was(tmp_path, monkeypatch, interrupt, when):
    """An exception out of the k-th open / write / chmod / replace / mkdir, raised before the call
    or after it returned (an interrupt landing on either side of a system call), for every k."""
    counts = _clean_counts(tmp_path, monkeypatch)
    assert counts["open"] == counts["replace"] == 7 and counts["mkdir"] == 3
    make, kind = INTERRUPTS[interrupt]
    runs = 0
    for name in ("open", "write", "chmod", "replace", "mkdir"):
        for k in range(1, counts[name] + 1):
            src, changes, before, after = _unit_tree(tmp_path / f"{name}{k}")

            def hook(n, i, w, name=name, k=k):
                if (n, i, w) == (name, k, when):
                    raise make()

            Faults(monkeypatch, src, hook)
            with pytest.raises(kind):
                apply_changes(src, changes)
            monkeypatch.undo()
            assert snapshot(src) == before, (name, k, when)
            assert temps(src) == [], (name, k, when)
            runs += 1
    assert runs == sum(counts[n] for n in ("open", "write", "chmod", "replace", "mkdir"))


def test_an_os_error_at_any_call_restores_the_tree_and_says_so(tmp_path, monkeypatch):
    counts = _clean_counts(tmp_path, monkeypatch)
    for name in ("open", "write", "chmod", "replace", "mkdir"):
        for k in range(1, counts[name] + 1):
            src, changes, before, _ = _unit_tree(tmp_path / f"{name}{k}")

            def hook(n, i, w, name=name, k=k):
                if (n, i, w) == (name, k, "before"):
                    raise OSError(errno.ENOSPC, "No space left on device", "somewhere")

            Faults(monkeypatch, src, hook)
            with pytest.raises(StackpartError) as info:
                apply_changes(src, changes)
            monkeypatch.undo()
            assert "No space left on device" in info.value.message and "nothing was changed" in info.value.message
            assert ("restored" in info.value.message) == (name == "replace" and k > 1)
            assert snapshot(src) == before and temps(src) == [], (name, k)


@pytest.mark.parametrize("sig", [signal.SIGINT, *TERMINATING])
def test_a_real_signal_at_any_call_is_acted_on_between_steps(tmp_path, monkeypatch, sigterm_raises, sig):
    """The signal itself (not an exception) arrives inside the k-th call: the step finishes, the
    next step boundary stops the apply and rolls back; during the last rename every file is
    written, so the signal is re-raised only when apply_changes returns, the tree all new."""
    counts = _clean_counts(tmp_path, monkeypatch)
    kind = KeyboardInterrupt if sig == signal.SIGINT else SystemExit
    outcomes = Counter()
    for name in ("open", "write", "chmod", "replace", "mkdir"):
        for k in range(1, counts[name] + 1):
            src, changes, before, after = _unit_tree(tmp_path / f"{name}{k}")

            def hook(n, i, w, name=name, k=k):
                if (n, i, w) == (name, k, "before"):
                    signal.raise_signal(sig)

            Faults(monkeypatch, src, hook)
            with pytest.raises(kind):
                apply_changes(src, changes)
            monkeypatch.undo()
            last = name == "replace" and k == counts["replace"]
            assert snapshot(src) == (after if last else before), (name, k)
            assert temps(src) == [], (name, k)
            outcomes["applied" if last else "restored"] += 1
    assert outcomes == {"applied": 1, "restored": sum(counts[n] for n in ("open", "write", "chmod", "replace", "mkdir")) - 1}


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_rollback_waits_for_it(tmp_path, monkeypatch, sigterm_raises, first, second):
    """A real signal inside the k-th open or rename starts the rollback; another real signal is
    raised inside every call the rollback makes (restoring renames, removing temp files and
    directories). The rollback still finishes, and the first signal is the one that surfaces."""
    counts = _clean_counts(tmp_path, monkeypatch)
    kind = KeyboardInterrupt if first == signal.SIGINT else SystemExit
    for name in ("open", "replace"):
        for k in range(1, counts[name] + (name == "open")):  # not the last rename: that one applies
            src, changes, before, _ = _unit_tree(tmp_path / f"{name}{k}")
            state = {"fired": False, "seconds": 0}

            def hook(n, i, w, name=name, k=k, state=state):
                if w != "before":
                    return
                if state["fired"] and n in ("open", "replace", "unlink", "rmdir", "write", "chmod"):
                    state["seconds"] += 1
                    signal.raise_signal(second)
                elif (n, i) == (name, k):
                    state["fired"] = True
                    signal.raise_signal(first)

            faults = Faults(monkeypatch, src, hook)
            with pytest.raises(kind) as info:
                apply_changes(src, changes)
            monkeypatch.undo()
            assert kind is KeyboardInterrupt or info.value.code == 143  # the first signal's, not the second's
            assert snapshot(src) == before, (name, k)
            assert temps(src) == [], (name, k)
            assert state["seconds"] >= 1, (name, k, faults.log)  # the rollback made calls, each interrupted


def test_an_error_inside_the_rollback_is_reported_and_every_file_stays_whole(tmp_path, monkeypatch):
    """Ctrl-C after 4 renames, then the rollback cannot put one file back (its restoring rename
    fails): exit 2's error names that file, the others are restored, no temp file is left."""
    src, changes, before, after = _unit_tree(tmp_path)
    state = {"interrupted": False}

    def hook(n, i, w):
        if (n, i, w) == ("replace", 5, "before"):
            state["interrupted"] = True
            raise KeyboardInterrupt
        if state["interrupted"] and n == "replace" and w == "before" and i == 6:
            raise OSError(errno.EIO, "Input/output error", "x")

    Faults(monkeypatch, src, hook)
    with pytest.raises(StackpartError) as info:
        apply_changes(src, changes)
    monkeypatch.undo()
    assert "could not undo 1 change" in info.value.message and len(info.value.also) == 1
    assert "not restored, it has the new bytes" in info.value.also[0]
    assert isinstance(info.value.__cause__, KeyboardInterrupt)
    assert mixed(src, before[0], after[0]) == []
    assert temps(src) == []
    now = snapshot(src)[0]
    assert sum(now.get(k) == after[0][k] != before[0].get(k) for k in after[0]) == 1


# -- the signal deferral itself ------------------------------------------------------------------


def test_deferred_signals_record_nest_settle_and_restore(sigterm_raises):
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with deferred_signals() as outer:
        signal.raise_signal(signal.SIGINT)  # recorded, not raised
        with deferred_signals() as inner:
            assert inner is outer  # nested: one record
            signal.raise_signal(signal.SIGTERM)
        assert outer.pending == [signal.SIGINT, signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            outer.interrupt_point()  # the first one's handler runs here
        assert outer.pending == [signal.SIGTERM]
        outer.settle()
        signal.raise_signal(signal.SIGINT)
        assert outer.late == [signal.SIGTERM, signal.SIGINT] and outer.pending == []
        outer.interrupt_point()  # settled: nothing happens
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    # Left normally with a signal pending: re-raised on the way out, handlers back first.
    with pytest.raises(SystemExit) as info:
        with deferred_signals():
            signal.raise_signal(signal.SIGTERM)
    assert info.value.code == 143
    # Left by an interrupt: the pending ones are dropped (already stopping).
    with pytest.raises(KeyboardInterrupt):
        with deferred_signals():
            signal.raise_signal(signal.SIGTERM)
            raise KeyboardInterrupt
    # settle(ignore_after=True): ignored after the block, until the owner of the process restores.
    with deferred_signals() as held:
        held.settle(ignore_after=True)
    assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])


def test_sigterm_with_the_default_disposition_ends_the_process_after_the_rollback(tmp_path):
    """Outside the CLI SIGTERM's default action still ends the process, but only once the tree
    is restored (the library case: apply_changes called without rewriter.cli's handler)."""
    src, changes, before, _ = _unit_tree(tmp_path)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rewriter.rewrite.apply import apply_changes
        from rewriter.rewrite.transform import FileChange
        real, calls = os.replace, []
        def replace(a, b):
            calls.append(b)
            if len(calls) == 4:
                signal.raise_signal(signal.SIGTERM)
            return real(a, b)
        os.replace = replace
        changes = [FileChange(*c) for c in {[(c.relpath, c.old, c.new, c.mode) for c in changes]!r}]
        apply_changes(Path({str(src)!r}), changes)
        print("returned")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "returned" not in proc.stdout
    assert snapshot(src) == before and temps(src) == []


# -- through the CLI, in-process -----------------------------------------------------------------


CLI_PLAN = """\
version: 1
actions:
  - action: compile
    target: pkg/a.py::f
  - action: compile
    target: pkg/b.py::f
  - action: disable
    target: pkg/c.py::f
  - action: bucket
    target: pkg/model.py::GPT.forward
    arg: idx
    dim: 1
    buckets: [8, 16]
  - action: allocator
    target: run.py::main
"""


def _cli_tree(root: Path) -> tuple[Path, Path]:
    src = root / "src"
    (src / "pkg").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (src / "pkg" / f"{name}.py").write_text("import torch\n\n\ndef f(x):\n    return x\n")
    (src / "pkg" / "b.py").chmod(0o755)
    (src / "pkg" / "model.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass GPT(nn.Module):\n    def forward(self, idx):\n        return idx\n"
    )
    (src / "run.py").write_text("def main():\n    print('hi')\n")
    (root / "plan.yaml").write_text(CLI_PLAN)
    return src, root / "plan.yaml"


def _cli(capsys, src: Path, plan: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"])
    return code, capsys.readouterr().err


def test_cli_exit_code_says_applied_or_restored_for_a_signal_at_every_call(tmp_path, monkeypatch, capsys):
    """A real SIGINT, SIGTERM, SIGHUP or SIGQUIT inside every open / write / chmod / rename / mkdir
    of the apply (half of them followed by a second signal at the next call): 130 / 143 / 129 /
    131 and "nothing was changed" with the tree as it was, or, for a signal during the last
    rename, 0 and "applied" with every file new. The caller's handlers are back after each call."""
    every = (signal.SIGINT, *TERMINATING)
    handlers = [signal.getsignal(s) for s in every]
    src, plan = _cli_tree(tmp_path / "clean")
    before = snapshot(src)
    faults = Faults(monkeypatch, src)
    code, err = _cli(capsys, src, plan)
    monkeypatch.undo()
    assert code == 0 and "applied: 7 file(s)" in err, err
    counts, after = faults.calls, snapshot(src)
    assert after[1] == sorted(before[1] + ["pkg/_stackpart"])
    outcomes = Counter()
    n = 0
    for name in ("open", "write", "chmod", "replace", "mkdir"):
        for k in range(1, counts[name] + 1):
            n += 1
            sig = every[n % 4]
            second = (n // 4) % 2 == 1
            src, plan = _cli_tree(tmp_path / f"{name}{k}")
            state = {"fired": False, "seconds": 0}

            def hook(nm, i, w, name=name, k=k, sig=sig, second=second, state=state):
                if w != "before":
                    return
                if (nm, i) == (name, k):
                    state["fired"] = True
                    signal.raise_signal(sig)
                elif state["fired"] and second and state["seconds"] == 0:
                    state["seconds"] += 1
                    signal.raise_signal(signal.SIGINT if sig == signal.SIGTERM else signal.SIGTERM)

            Faults(monkeypatch, src, hook)
            code, err = _cli(capsys, src, plan)
            monkeypatch.undo()
            assert temps(src) == [], (name, k)
            assert [signal.getsignal(s) for s in every] == handlers
            if name == "replace" and k == counts["replace"]:
                assert code == 0 and "applied: 7 file(s)" in err, (name, k, err)
                assert "received after the last file was written" in err
                assert snapshot(src) == after
                outcomes["applied"] += 1
            else:
                assert code == 128 + sig, (name, k, code, err)
                assert f"aborted ({signal.Signals(sig).name}): nothing was changed" in err, err
                assert snapshot(src) == before, (name, k)
                outcomes["restored"] += 1
    assert outcomes["applied"] == 1 and outcomes["restored"] == n - 1


# -- real processes, real signals ----------------------------------------------------------------


FILES = 100


def _big_tree(root: Path) -> tuple[Path, Path]:
    """100 modules in 5 packages, a plan that compiles each (and buckets one: 2 new files in a new
    directory): 102 files written per apply."""
    src = root / "src"
    lines = ["version: 1", "actions:"]
    for i in range(FILES):
        d = src / f"pkg{i % 5}"
        d.mkdir(parents=True, exist_ok=True)
        body = "import torch\nfrom torch import nn\n\n\ndef f(x):\n    return x + 1\n"
        body += "\n\nclass GPT(nn.Module):\n    def forward(self, idx):\n        return idx\n"
        body += "\n\nDATA = '" + "x" * (20_000 + 97 * i) + "'\n"
        (d / f"m{i}.py").write_text(body)
        lines += ["  - action: compile", f"    target: pkg{i % 5}/m{i}.py::f"]
    lines += ["  - action: bucket", "    target: pkg4/m99.py::GPT.forward", "    arg: idx", "    dim: 1",
              "    buckets: [8, 16]"]
    (root / "plan.yaml").write_text("\n".join(lines) + "\n")
    return src, root / "plan.yaml"


def _start(src: Path, plan: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(plan), str(src), "--apply",
         "--no-validate", "--unsafe"],
        cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _wait_for_temp(proc: subprocess.Popen, watch: Path, limit: float = 60.0) -> float | None:
    """Poll until the apply's first temp file appears (the apply started); seconds it took, or
    None when the process ended first."""
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < limit:
        try:
            if any(name.endswith(".stackpart") for name in os.listdir(watch)):
                return time.monotonic() - t0
        except FileNotFoundError:
            pass
        time.sleep(0.0002)
    return None


def _send(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _one_run(pristine: Path, plan: Path, src: Path, trigger: str, delay: float, sig: int, second: int | None,
             gap: float) -> tuple[int, str, tuple, list[str]]:
    """Copy the tree, start `rewrite --apply`, signal it, wait: (exit code, stderr, snapshot, temps)."""
    shutil.copytree(pristine, src)
    proc = _start(src, plan)
    if trigger == "apply":
        _wait_for_temp(proc, src / "pkg0")
    time.sleep(delay)
    _send(proc, sig)
    if second is not None:
        time.sleep(gap)
        _send(proc, second)
    try:
        err = proc.communicate(timeout=120)[1].decode()
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -999, "hung", snapshot(src), temps(src)
    out = (proc.returncode, err, snapshot(src), temps(src))
    shutil.rmtree(src)
    return out


#: Runs of the real-process test, and the seconds they may take together (2 at a time; the
#: machine's other work shares its cores, so the budget, not the count, bounds a slow machine).
RUNS, BUDGET_S = 30, 36.0


def test_real_processes_interrupted_at_varied_points(tmp_path):
    """SIGTERM or SIGINT (and in half the runs a second signal 0-5 ms later) at random delays
    after the apply's first temp file appears, and some at random delays from the start. After
    each run: no temp file, every file entirely old or entirely new, and exit 0 and "applied" with
    every file new, or 130 / 143 with every file old ("nothing was changed" when the apply had
    begun), or death by the signal before the CLI installed its handler, every file old."""
    from concurrent.futures import ThreadPoolExecutor

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # a background job: the children would inherit it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    pristine, plan = _big_tree(tmp_path / "pristine")
    old = snapshot(pristine)
    # An uninterrupted run: the new tree, how long the apply takes from its first temp file to
    # the last rename (no temp file left), and how long the whole run takes.
    work = tmp_path / "calibrate"
    shutil.copytree(pristine, work)
    t0 = time.monotonic()
    proc = _start(work, plan)
    seen = _wait_for_temp(proc, work / "pkg0")
    while proc.poll() is None and temps(work):
        time.sleep(0.0002)
    written = time.monotonic() - t0
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
    total = time.monotonic() - t0
    apply_s = max(written - seen, 0.01) if seen is not None else 0.05
    new = snapshot(work)
    assert len([k for k in new[0] if new[0][k] != old[0].get(k)]) == FILES + 2
    assert new[1] == sorted(old[1] + ["pkg4/_stackpart"])

    rng = random.Random(16)
    plans = []
    for i in range(RUNS):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        second = (signal.SIGINT, signal.SIGTERM)[i % 2] if i % 4 >= 2 else None
        trigger = "start" if i % 6 == 5 else "apply"
        # 2/3 of the delays land inside the apply, the rest after its last rename
        delay = rng.uniform(0, 1.5 * apply_s) if trigger == "apply" else rng.uniform(0, total)
        plans.append((trigger, delay, sig, second, rng.uniform(0, 0.005)))
    deadline = time.monotonic() + BUDGET_S

    def run(n: int):
        if time.monotonic() > deadline:
            return None
        return _one_run(pristine, plan, tmp_path / f"run{n}", *plans[n])

    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, range(RUNS)))
    elapsed = time.monotonic() - started
    outcomes: Counter[str] = Counter()
    rows = []
    for n, res in enumerate(results):
        if res is None:
            continue
        rc, err, now, left = res
        trigger, delay, sig, second, gap = plans[n]
        row = (n, trigger, f"{delay * 1000:.1f} ms", signal.Signals(sig).name,
               second and f"+{signal.Signals(second).name} {gap * 1000:.1f} ms", rc, err.strip().splitlines()[-1:])
        rows.append(row)
        assert left == [], row
        assert [k for k in set(now[0]) | set(old[0]) | set(new[0]) if now[0].get(k) not in (old[0].get(k), new[0].get(k))] == [], row
        if rc == 0:
            assert now == new and "applied: 102 file(s)" in err and "Traceback" not in err, (row, err)
            outcomes["0: applied" + (", a signal noted after the last rename" if "received after" in err else "")] += 1
        elif rc in (130, 143) and "nothing was changed, every file" in err:
            assert now == old and "Traceback" not in err, (row, err)
            outcomes[f"{rc}: apply stopped, tree restored"] += 1
        elif rc in (130, 143):
            # Stopped before the apply began (reading and planning): nothing was written. A second
            # signal while that first one unwinds may print "Exception ignored" (not the apply's).
            assert now == old and "applied" not in err, (row, err)
            outcomes[f"{rc}: stopped before the apply"] += 1
        elif rc in (-signal.SIGTERM, -signal.SIGINT):
            assert now == old and "applied" not in err, (row, err)  # before main() installed its handler
            outcomes[f"{rc}: killed before the CLI's handler"] += 1
        else:
            pytest.fail(f"unexpected exit {rc}: {row}\n{err}")
    print(f"\n{len(rows)} signalled runs in {elapsed:.1f}s (the apply: ~{apply_s * 1000:.0f} ms of a "
          f"{total:.2f}s run): {dict(outcomes)}")
    for row in rows:
        print("  ", row)
    assert len(rows) >= 8, f"only {len(rows)} runs fit in {BUDGET_S}s"
    # The runs must have hit the apply itself, not only its edges.
    assert sum(v for k, v in outcomes.items() if "apply stopped" in k) >= 2, (outcomes, rows)


def test_real_processes_sent_sighup_or_sigquit_mid_apply_restore_the_tree(tmp_path):
    """SIGHUP (the terminal closed) and SIGQUIT (Ctrl-\\) during the apply: before they were
    deferred, their default action ended the process mid-rename (up to 399 temp files left, once
    a tree half old and half new). Now each run ends as SIGINT/SIGTERM do: 129 / 131 and "nothing
    was changed" with every file old, or 0 and "applied" when the signal came after the last
    rename; never a temp file or a torn tree."""
    from concurrent.futures import ThreadPoolExecutor

    pristine, plan = _big_tree(tmp_path / "pristine")
    old = snapshot(pristine)
    rng = random.Random(32)
    plans = [("apply", rng.uniform(0, 0.03), (signal.SIGHUP, signal.SIGQUIT)[i % 2], None, 0.0) for i in range(8)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda n: _one_run(pristine, plan, tmp_path / f"run{n}", *plans[n]), range(len(plans))))
    outcomes: Counter[str] = Counter()
    for n, (rc, err, now, left) in enumerate(results):
        sig = plans[n][2]
        assert left == [], (n, rc, err)
        assert "Traceback" not in err, err
        if rc == 0:
            assert "applied: 102 file(s)" in err, err
            assert all(b"@torch.compile" in now[0][k][0] for k in old[0]), (n, err)  # every file new
            outcomes["applied"] += 1
        else:
            assert rc == 128 + sig, (n, rc, err)
            assert now == old, (n, err)
            if "nothing was changed, every file" in err:
                assert f"aborted ({signal.Signals(sig).name})" in err, err
                outcomes["restored"] += 1
            else:
                outcomes["stopped before the apply"] += 1
    print(dict(outcomes))
    assert outcomes["restored"] >= 1, outcomes


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root may give a file to another owner")
def test_an_applied_file_keeps_its_owner_and_group(tmp_path):
    """Root applying over a user's checkout (a container) left the user's files owned by root."""
    f = tmp_path / "model.py"
    f.write_bytes(b"x = 1\n")
    os.chown(f, 65534, 65534)
    apply_changes(tmp_path, [FileChange("model.py", b"x = 1\n", b"x = 2\n", 0o644)])
    st = f.stat()
    assert f.read_bytes() == b"x = 2\n" and (st.st_uid, st.st_gid) == (65534, 65534)


def test_an_applied_file_is_flushed_before_its_rename(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    (tmp_path / "model.py").write_bytes(b"x = 1\n")
    apply_changes(tmp_path, [FileChange("model.py", b"x = 1\n", b"x = 2\n", 0o644)])
    assert synced
