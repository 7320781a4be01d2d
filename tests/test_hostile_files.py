"""Hostile source files (docs/guide.md, "Which files are read"): every file is read through one
guarded path and parsed behind CPython's parser, so each case of fixtures/hostile/make_corpus.py
gives its documented exit code and one line naming the file and why, within a time limit, with the
tree unchanged; in a directory the other files' findings are still reported; and files CPython
parses (a 1,000-term sum, 500 nested lambdas, the stdlib's pydoc_data/topics.py) are checked, not
skipped.

The CLI runs as a subprocess with ``timeout=``: before the fix these cases segfaulted (139),
printed RecursionError tracebacks (1), or blocked forever (a FIFO, /dev/zero).
"""

from __future__ import annotations

import faulthandler
import hashlib
import importlib.util
import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewriter import source
from rewriter.check import runner
from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES
from rewriter.errors import StackpartError
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite
from rewriter.source import MAX_SOURCE_BYTES, Skipped, read_bytes, read_file, run_deep

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "fixtures" / "hostile" / "make_corpus.py")
corpus = importlib.util.module_from_spec(_spec)
sys.modules["make_corpus"] = corpus
_spec.loader.exec_module(corpus)  # type: ignore[union-attr]

#: Seconds one CLI run may take (a normal run takes about one; before the fix a FIFO never ended).
LIMIT_S = 60
#: What ``check`` prints last on stderr: not the line about the file.
SUMMARY = "file(s) checked"

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs and symlinks")


def _digest(root: Path) -> str:
    """Every name, type, mode and byte under ``root`` (links hashed by target, never followed;
    FIFOs and devices never opened)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            h.update(f"{os.path.relpath(path, root)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        h.update(block)
    return h.hexdigest()


def _cli(cwd: Path, *args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rewriter.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=LIMIT_S,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def _about(stderr: str, name: str) -> list[str]:
    """The stderr lines about file ``name`` (the summary line left out)."""
    return [line for line in stderr.splitlines() if name in line and SUMMARY not in line]


def _tree(tmp_path: Path, case: str, normal: int = 0) -> Path:
    """tmp/src with the hostile file and ``normal`` ordinary files that have a finding each
    (``outside``'s link target lies in tmp/outside, out of the tree)."""
    src = tmp_path / "src"
    corpus.make(case, src, outside=tmp_path / "outside")
    for i in range(normal):
        (src / f"normal_{i:02d}.py").write_text(corpus.HEADER)
    return src


CASES = [pytest.param(c, id=c.name) for c in corpus.CASES]


@pytest.mark.parametrize("case", CASES)
def test_check_of_the_file_alone(tmp_path, case):
    src = _tree(tmp_path, case.name)
    before = _digest(tmp_path)
    name = f"{case.name}.py"
    code, out, err, took = _cli(src, "check", name)
    assert "Traceback" not in out + err, err
    assert code == case.check_file, err
    assert took < LIMIT_S
    if case.processed:
        assert f"{name}:{corpus.FINDING_LINE}:" in out and "SP103" in out, out
        assert not _about(err, name), err
    else:
        [line] = _about(err, name)
        assert line.startswith(f"warning: {name}" if case.skipped else f"error: {name}"), line
        assert case.says in line, line
        assert out == ""
    assert _digest(tmp_path) == before


#: In a directory walk a symlink leaving the tree is left out (and said so), not followed.
WALK_SAYS = {"dev_zero": "skipped: a symlink to /dev/zero, outside .", "outside": "skipped: a symlink to "}


@pytest.mark.parametrize("case", CASES)
def test_check_of_a_directory_holding_the_file_reports_the_others(tmp_path, case):
    src = _tree(tmp_path, case.name, normal=3)
    before = _digest(tmp_path)
    name = f"{case.name}.py"
    code, out, err, took = _cli(src, "check", ".")
    assert "Traceback" not in out + err, err
    assert code == (2 if case.check_file == 2 else 1), err  # the normal files' findings: 1
    assert took < LIMIT_S
    for i in range(3):
        assert f"./normal_{i:02d}.py:{corpus.FINDING_LINE}:" in out, out
    walked = WALK_SAYS.get(case.name)
    if case.processed and walked is None:
        assert f"./{name}:{corpus.FINDING_LINE}:" in out, out
        assert not _about(err, name), err
    else:
        [line] = _about(err, name)
        assert line.startswith("warning: " if case.skipped or walked else "error: "), line
        assert (walked or case.says) in line, line
        assert f"./{name}" not in out
    assert _digest(tmp_path) == before


@pytest.mark.parametrize("case", CASES)
def test_rewrite_with_the_file_as_target_exits_2_in_one_line(tmp_path, case):
    src = _tree(tmp_path, case.name)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - action: disable\n    target: {case.name}.py::g\n")
    before = _digest(tmp_path)
    code, out, err, took = _cli(tmp_path, "rewrite", "--plan", str(plan), "src", "--apply", "--no-validate")
    assert "Traceback" not in out + err, err
    assert code == case.rewrite, err
    if case.rewrite == 0:  # CPython parses it and the rewrite runs deep: rewritten, not refused
        assert took < LIMIT_S
        assert "@torch.compiler.disable\ndef g(x):" in (src / f"{case.name}.py").read_text()
        return
    assert code == 2, err
    assert took < LIMIT_S
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {plan}:3: actions[0] (disable {case.name}.py::g): "), line
    assert (case.rewrite_says or case.says) in line, line
    assert _digest(tmp_path) == before


def test_every_case_in_one_tree_through_the_worker_pool(tmp_path):
    # PARALLEL_MIN or more files to parse: check DIR goes through the ProcessPoolExecutor, which
    # one 5,000-deep file used to break (BrokenProcessPool, no report at all).
    src = tmp_path / "src"
    corpus.make_all(src)
    normal = runner.PARALLEL_MIN + 6
    for i in range(normal):
        (src / f"normal_{i:02d}.py").write_text(corpus.HEADER)
    before = _digest(tmp_path)
    code, out, err, took = _cli(src, "check", "--jobs", "2", ".")
    assert "Traceback" not in out + err, err
    assert code == 2, err  # nul.py and bad_utf8.py cannot be read as Python: errors
    assert took < 2 * LIMIT_S
    for i in range(normal):
        assert f"./normal_{i:02d}.py:{corpus.FINDING_LINE}:" in out
    for case in corpus.CASES:
        name = f"{case.name}.py"
        walked = WALK_SAYS.get(case.name)
        if case.processed and walked is None:
            assert f"./{name}:{corpus.FINDING_LINE}:" in out, name
        else:
            [line] = _about(err, name)
            assert (walked or case.says) in line, line
    assert _digest(tmp_path) == before


def test_a_worker_that_dies_costs_only_its_own_file(tmp_path, monkeypatch):
    """A crash the gate did not foresee (here: a worker killed by SIGSEGV on one file) breaks the
    pool; the files it had not reported are checked again one process each."""
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the patched worker reaches the pool only through fork")
    files = []
    for i in range(runner.PARALLEL_MIN + 2):
        path = tmp_path / f"m{i:02d}.py"
        path.write_text(corpus.HEADER)
        files.append(str(path))
    doomed = files[5]
    real = runner._check_one

    def crash_on_doomed(args):
        if args[0] == doomed:
            faulthandler.disable()  # pytest's dump of the dying worker is noise here
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(args)

    monkeypatch.setattr(runner, "_check_one", crash_on_doomed)
    results = runner.check_files(files, ALL_RULES, jobs=2)
    by_path = {r.path: r for r in results}
    assert "the process checking it died" in by_path[doomed].skipped
    assert all(by_path[p].findings and by_path[p].skipped is None for p in files if p != doomed)


def test_a_1000_term_sum_and_500_lambdas_are_checked_in_process():
    for case in ("sum_1000", "lambdas_500"):
        body = {"sum_1000": "y = " + " + ".join(["m"] * 1000), "lambdas_500": "y = " + "lambda: " * 500 + "1"}[case]
        result = check_text(corpus.HEADER + body + "\n", f"{case}.py", ALL_RULES)
        assert result.skipped is None and result.error is None, result
        assert [f.line for f in result.findings] == [corpus.FINDING_LINE]


def test_real_files_cpython_parses_are_checked_not_skipped():
    import pydoc_data.topics

    paths = [pydoc_data.topics.__file__]  # strings concatenated ~2,200 deep for LibCST
    try:
        import sympy.polys.numberfields.resolvent_lookup as lookup  # a 569-deep sum

        paths.append(lookup.__file__)
    except ImportError:
        pass
    for path in paths:
        text = read_file(path).text
        result = check_text(text, path, ALL_RULES)
        assert result.skipped is None and result.error is None, (path, result.skipped, result.error)


def test_a_rewrite_runs_deep_and_rewrites_the_1000_term_sum(tmp_path):
    """plan_rewrite runs in run_deep's thread: the 1,000-term sum, which Python's default limit
    could not walk on the calling thread, is rewritten."""
    src = _tree(tmp_path, "sum_1000")
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: disable\n    target: sum_1000.py::g\n")
    diff = plan_rewrite(load_plan(str(plan)), src).diff()
    assert "+@torch.compiler.disable\n def g(x):" in diff


SHAPES = {
    "sum": lambda n: "y = " + " + ".join(["m"] * n),
    "and": lambda n: "y = " + " and ".join(["m"] * n),
    "lambda": lambda n: "y = " + "lambda: " * n + "1",
    "attribute": lambda n: "y = m" + ".a" * n,
    "call chain": lambda n: "y = m" + "()" * n,
    "elif": lambda n: "if m:\n    pass\n" + "elif m:\n    pass\n" * n,
    "strings": lambda n: "y = " + " ".join(['"s"'] * n),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_deep_file_is_rewritten_and_a_deeper_one_refused_in_one_line(tmp_path, shape):
    """The whole rewrite (codemod, metadata, code generation) runs in run_deep's thread: at 1,000
    levels every shape is rewritten without RecursionError (on the calling thread about 270 fit);
    at 40,000, past CPython's parser, LibCST's or the and/or cap, it is refused in one line."""
    src = tmp_path / "src"
    src.mkdir()
    plan = tmp_path / "plan.yaml"
    # kernel resolves LibCST metadata over the whole file: the deepest recursion of the actions
    plan.write_text("version: 1\nactions:\n  - action: disable\n    target: x.py::g\n"
                    "  - action: mark_dynamic\n    target: x.py::g\n    arg: x\n    dim: 0\n"
                    "  - action: kernel\n    target: x.py::g\n    call: torch.topk\n    kernel: topk\n")
    loaded = load_plan(str(plan))
    header = corpus.HEADER.replace("return x + 1", "return torch.topk(x, 2)")
    (src / "x.py").write_text(header + SHAPES[shape](1000) + "\n")
    assert "+@torch.compiler.disable" in plan_rewrite(loaded, src, unsafe=True).diff()
    (src / "x.py").write_text(header + SHAPES[shape](40000) + "\n")
    with pytest.raises(StackpartError) as raised:
        plan_rewrite(loaded, src, unsafe=True)
    assert re.search(r"x\.py(:\d+)*: skipped: ", str(raised.value)), raised.value


def test_the_size_cap_reads_a_file_at_it_and_refuses_one_byte_more(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_SOURCE_BYTES", 1000)
    path = tmp_path / "x.py"
    path.write_bytes(b"#" * 999 + b"\n")
    assert read_bytes(path)[0] == b"#" * 999 + b"\n"
    path.write_bytes(b"#" * 1000 + b"\n")
    with pytest.raises(Skipped, match="1,001 bytes, over the"):
        read_bytes(path)
    assert MAX_SOURCE_BYTES == 10 * 2**20


def test_cpythons_200_bracket_limit_is_the_gate(tmp_path):
    for n, ok in ((200, True), (201, False)):
        text = corpus.HEADER + "y = " + "(" * n + "1" + ")" * n + "\n"
        result = check_text(text, "p.py", ALL_RULES)
        assert (result.skipped is None) == ok, (n, result.skipped)
        assert [f.line for f in result.findings] == ([corpus.FINDING_LINE] if ok else [])


def test_a_directory_named_like_a_file_is_an_error_not_a_skip(tmp_path):
    (tmp_path / "model.py").mkdir()
    with pytest.raises(StackpartError, match="cannot read: Is a directory") as info:
        read_bytes(tmp_path / "model.py", "model.py")
    assert not isinstance(info.value, Skipped)


def test_check_discover_keeps_links_inside_the_tree_and_drops_those_leaving_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "real.py").write_text(corpus.HEADER)
    (tmp_path / "in_tree.py").symlink_to("pkg/real.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    skipped: list[str] = []
    files = runner.discover([str(tmp_path)], skipped)
    # the link leads to a file the walk finds too: that file is checked once, under its own name
    # (it was found twice, and "fixed 2 file(s)" for one file)
    assert sorted(os.path.basename(f) for f in files) == ["real.py"]
    assert sorted(skipped) == sorted([
        f"{tmp_path / 'in_tree.py'}: skipped: a symlink to pkg/real.py, checked as {tmp_path / 'pkg' / 'real.py'}",
        *[line for line in skipped if line.startswith(f"{tmp_path / 'zero.py'}: skipped: a symlink to /dev/zero, outside {tmp_path}")],
    ]) and len(skipped) == 2, skipped
    # a link named alone, whose target is not named, is checked like any file
    files = runner.discover([str(tmp_path / "in_tree.py")])
    assert files == [str(tmp_path / "in_tree.py")]
    results = runner.check_files(files, ALL_RULES, jobs=1)
    assert all(r.findings and r.error is None and r.skipped is None for r in results)
    # both named: once, under the file's own name, whichever comes first
    assert runner.discover([str(tmp_path / "in_tree.py"), str(tmp_path / "pkg" / "real.py")]) == [str(tmp_path / "pkg" / "real.py")]


def test_without_a_large_thread_a_deep_file_is_skipped_not_a_crash(monkeypatch):
    """Where no thread can be started (a low ``ulimit -v``), run_deep runs in place under the
    caller's limit: a file too deep for that is a skipped line, no traceback."""

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(source.threading.Thread, "start", refuse)
    assert run_deep(lambda: source._in_deep_thread()) is False
    result = check_text(corpus.HEADER + "y = " + " + ".join(["m"] * 1000) + "\n", "s.py", ALL_RULES)
    assert result.skipped.startswith("s.py: skipped: nested too deep for the parser"), result.skipped
    shallow = check_text(corpus.HEADER, "ok.py", ALL_RULES)
    assert [f.line for f in shallow.findings] == [corpus.FINDING_LINE]


def test_mentions_reads_in_blocks_finds_a_needle_across_a_block_boundary_and_refuses_a_fifo(tmp_path):
    """check's drift asks only whether a given file names ``_stackpart``: the guarded read of
    :func:`rewriter.source.read_bytes`, in blocks, up to the first mention."""
    path = tmp_path / "m.py"
    path.write_bytes(b"#" * ((1 << 16) - 4) + b"_stackpart\n")  # straddles the first 64 KiB block
    assert source.mentions(path, b"_stackpart")
    assert not source.mentions(path, b"_stackpartx")
    fifo = tmp_path / "f.py"
    os.mkfifo(fifo)
    with pytest.raises(source.Skipped, match="FIFO"):
        source.mentions(fifo, b"_stackpart")
