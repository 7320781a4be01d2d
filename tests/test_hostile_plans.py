"""Hostile and out-of-range plan.yaml files: each is refused with exit 2
and one line naming the plan's file:line, within seconds, and nothing in SRC is written."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewriter.errors import StackpartError
from rewriter.plan import KNOWN_BACKENDS, MAX_YAML_DEPTH, parse_plan

MODEL = "import torch\n\n\ndef f(x):\n    return x + 1\n"


def _bomb(levels: int) -> str:
    """The "billion laughs" document: each level repeats the previous one nine times (the
    346-byte plan of this kind took 45 s and 3.1 GB to load without the alias gate)."""
    lines = ['version: 1', 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{','.join([prev] * 9)}]")
    lines.append("actions: []")
    return "\n".join(lines) + "\n"


HOSTILE = {
    # name: (plan text, expected line, words the one line must hold)
    "alias bomb": (_bomb(7), 3, "alias"),
    "nested 600 deep": ("version: 1\nactions: " + "[" * 600 + "]" * 600 + "\n", 2, "nested more than"),
    "nested mappings 2000 deep": ("version: 1\nx: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n", 2, "nested more than"),
    "NUL byte": ("version: 1\nactions: []\x00\n", 2, "#x0000"),
    "unknown backend": (
        "version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    options: {backend: inductr}\n",
        5, "did you mean 'inductor'",
    ),
    "negative dim": (
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: x\n    dim: -1\n", 6, "dim",
    ),
    "huge dim": (
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: x\n    dim: "
        + str(10**30) + "\n", 6, "dim",
    ),
    "huge bucket": (
        "version: 1\nactions:\n  - action: bucket\n    target: m.py::f\n    arg: x\n    dim: 1\n"
        f"    buckets: [8, {10**30}]\n", 7, "buckets",
    ),
    "allocator settings not key:value": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: expandable_segments True\n",
        5, "PYTORCH_CUDA_ALLOC_CONF",
    ),
    "allocator key misspelt": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: expandabel_segments:True\n",
        5, "did you mean 'expandable_segments'",
    ),
    "allocator bool misspelt": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: expandable_segments:Ture\n",
        5, "expandable_segments: expected True or False, got 'Ture' (did you mean 'True'?)",
    ),
    "allocator size not a number": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: max_split_size_mb:abc\n",
        5, "max_split_size_mb: expected an integer size in MB",
    ),
    "allocator threshold out of range": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n"
        "    settings: expandable_segments:True,garbage_collection_threshold:1.5\n",
        5, "garbage_collection_threshold: expected a number strictly between 0 and 1",
    ),
    "allocator divisions zero outside a list": (
        "version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: roundup_power2_divisions:0\n",
        5, "roundup_power2_divisions",
    ),
    "negative shape": ("version: 1\nharness: {file: h.py, shapes: [{batch: -2}]}\nactions: []\n", 2, "batch"),
    "shape name not an identifier": ("version: 1\nharness: {file: h.py, shapes: [{'a-b': 2}]}\nactions: []\n", 2, "identifier"),
}


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_plan_is_one_line_at_its_line_exit_2_and_writes_nothing(tmp_path, name):
    text, line, words = HOSTILE[name]
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(MODEL)
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(text.encode())
    before = _tree_digest(tmp_path)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {plan}:{line}:"), lines[0]
    assert words in lines[0]
    assert "Traceback" not in proc.stderr
    assert elapsed < 30, f"{name} took {elapsed:.1f} s"
    assert _tree_digest(tmp_path) == before


def test_the_alias_gate_stops_the_bomb_before_it_expands():
    # 9**12 leaves: expanding it would never finish; the gate answers in well under a second.
    start = time.monotonic()
    with pytest.raises(StackpartError, match="alias"):
        parse_plan(_bomb(12))
    assert time.monotonic() - start < 1.0


def test_a_plan_at_the_depth_cap_still_loads_and_one_past_it_does_not():
    # Depth counts every mapping and sequence: the top mapping is one level, so `x` may hold
    # cap-1 levels of lists.
    inner = MAX_YAML_DEPTH - 1
    ok = "version: 1\nactions: []\nx: " + "[" * inner + "]" * inner + "\n"
    with pytest.raises(StackpartError, match="unknown field 'x'"):
        parse_plan(ok)  # past the gate: the schema is what refuses it
    deep = "version: 1\nactions: []\nx: " + "[" * (inner + 1) + "]" * (inner + 1) + "\n"
    with pytest.raises(StackpartError, match="nested more than"):
        parse_plan(deep)


def test_a_custom_backend_needs_its_explicit_escape_and_is_written_as_named(tmp_path):
    from rewriter.rewrite.transform import plan_rewrite

    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(MODEL)
    plan = "version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    options: {backend: my_backend%s}\n"
    with pytest.raises(StackpartError, match="custom_backend: true"):
        parse_plan(plan % "")
    loaded = parse_plan(plan % ", custom_backend: true")
    diff = plan_rewrite(loaded, src).diff()
    assert '+@torch.compile(backend="my_backend")' in diff
    assert "custom_backend" not in diff


def test_a_custom_backend_must_be_a_registered_name():
    with pytest.raises(StackpartError, match="identifier"):
        parse_plan("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n"
                   "    options: {backend: 'a b', custom_backend: true}\n")


def test_known_backends_hold_every_backend_the_installed_torch_registers():
    torch = pytest.importorskip("torch")
    registered = set(torch._dynamo.list_backends(exclude_tags=()))
    missing = {b for b in registered if not b.endswith("_TESTING_ONLY")} - KNOWN_BACKENDS
    assert not missing, f"add to KNOWN_BACKENDS: {sorted(missing)}"


def test_a_fifo_as_the_plan_is_refused_without_blocking(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    src = tmp_path / "src"
    src.mkdir()
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(fifo), str(src)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {fifo}: cannot read plan: not a regular file (a FIFO)"


MARK = "version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: x\n"

LONG_NUMBERS = {
    # name: (plan text, line, col, the field named)
    "5,000-digit runs": ("version: 1\namortization:\n  runs: " + "7" * 5000 + "\nactions: []\n", 3, 9, "amortization.runs"),
    "5,000-digit dim": (MARK + "    dim: " + "9" * 5000 + "\n", 6, 10, "actions[0].dim"),
    "400 KB base-60 dim": (MARK + "    dim: " + ":".join(["1"] * 200_000) + "\n", 6, 10, "actions[0].dim"),
    "quoted !!int": (MARK + '    dim: !!int "' + "7" * 5000 + '"\n', 6, 10, "actions[0].dim"),
    "5,000-digit float": ("version: 1\nactions:\n  - action: bucket\n    target: m.py::f\n    arg: x\n    dim: 1\n"
                          "    buckets: [8]\n    pad_value: 1." + "5" * 5000 + "e+50\n", 8, 16, "actions[0].pad_value"),
    "5,000-digit shape": ("version: 1\nharness: {file: h.py, shapes: [{batch: " + "3" * 5000 + "}]}\nactions: []\n",
                          2, 40, "harness.shapes[0].batch"),
}


@pytest.mark.parametrize("name", sorted(LONG_NUMBERS))
def test_a_number_of_any_length_is_one_short_line_at_its_place_within_a_second(name):
    """A 5,000-digit integer gave a 64-line ValueError traceback (Python's 4,300-digit limit on
    int(str)); a 400 KB base-60 value cost PyYAML 28-39 s of CPU before any error."""
    text, line, col, field = LONG_NUMBERS[name]
    start = time.process_time()  # CPU seconds: the figure the issue measured, and not the machine's load
    with pytest.raises(StackpartError) as info:
        parse_plan(text, "plan.yaml")
    assert time.process_time() - start < 1.0
    message = str(info.value)
    assert message.startswith(f"plan.yaml:{line}:{col}: {field}: "), message
    assert "characters long" in message and "\n" not in message and len(message) < 300, message


def test_a_number_just_under_the_length_cap_reaches_the_field_range_check():
    with pytest.raises(StackpartError) as info:
        parse_plan(MARK + "    dim: " + "9" * 100 + "\n", "plan.yaml")
    assert str(info.value).startswith("plan.yaml:6:5: actions[0].dim: expected a value <= 63, got 999")
    assert len(str(info.value)) < 300


def test_a_long_number_as_a_string_is_quoted_short():
    # 1.5...e5000 is a string to PyYAML (YAML 1.1 wants a signed exponent): the hint quoted all of it
    with pytest.raises(StackpartError) as info:
        parse_plan(MARK + "    dim: 1." + "5" * 5000 + "e5000\n", "plan.yaml")
    assert str(info.value).startswith("plan.yaml:6:") and len(str(info.value)) < 400, str(info.value)[:500]


def test_a_5000_digit_runs_through_the_cli_is_exit_2_one_line(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    plan = tmp_path / "plan.yaml"
    plan.write_text(LONG_NUMBERS["5,000-digit runs"][0])
    proc = subprocess.run([sys.executable, "-m", "rewriter.cli", "rewrite", "--plan", str(plan), str(src)],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {plan}:3:9: amortization.runs: an integer 5,000 characters long")


@pytest.mark.parametrize("settings", [
    "expandable_segments:True", "max_split_size_mb:128,garbage_collection_threshold:0.6",
    "roundup_power2_divisions:[256:4,>:1]", "roundup_power2_divisions:4", "roundup_power2_divisions:[>:0]", "backend:cudaMallocAsync",
    "pinned_use_cuda_host_register:True,pinned_num_register_threads:8", "per_process_memory_fraction:1",
])
def test_allocator_settings_torch_documents_are_kept(settings):
    plan = parse_plan(f"version: 1\nactions:\n  - action: allocator\n    target: m.py::f\n    settings: '{settings}'\n")
    assert plan.plan.actions[0].settings == settings
