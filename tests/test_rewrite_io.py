"""`stackpart rewrite` as a user's tree and git see it: the diff applies, --apply is byte-faithful
and atomic, --check's exit codes, and bad input exits 2 with nothing written."""

from __future__ import annotations

import codecs
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from rewriter.rewrite import apply as apply_mod
from rewriter.rewrite import transform
from rewriter.cli import main

MODEL = '''\
"""A small model. Ünïcödé in a docstring: λ → μ."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)  # café

    def forward(self, x):
        return x + self.fc(x)


def route(x):
    return x.nonzero()


class GPT(nn.Module):
    def forward(self, idx):
        return idx
'''

PLAN = """\
version: 1
actions:
  - action: compile
    target: pkg/model.py::Block
  - action: disable
    target: pkg/model.py::route
  - action: bucket
    target: pkg/model.py::GPT.forward
    arg: idx
    dim: 1
    buckets: [8, 16]
  - action: allocator
    target: run.py::main
"""

RUN = "def main():\n    print('hi')\n"


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` with its bytes and permission bits."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def git(*args: str, cwd: Path, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=False)


@pytest.fixture
def tree(tmp_path):
    """A tree with a package (pkg/), a loose script (run.py) and a plan at tmp/plan.yaml."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "model.py").write_text(MODEL, encoding="utf-8")
    (src / "run.py").write_text(RUN)
    (tmp_path / "plan.yaml").write_text(PLAN)
    return tmp_path, src


def run(capsysbinary, *argv: str) -> tuple[int, bytes, str]:
    capsysbinary.readouterr()
    code = main(list(argv))
    out, err = capsysbinary.readouterr()
    return code, out, err.decode("utf-8", "replace")


def rewrite(capsysbinary, base: Path, *flags: str, plan: str = "plan.yaml", src: str = "src"):
    """``stackpart rewrite --unsafe`` on the tree; ``--apply`` without the validation gate (it has
    its own tests; these are about the bytes written)."""
    if "--apply" in flags:
        flags = (*flags, "--no-validate")
    # --no-validate: these tests are about the rewrite's I/O, not the validation gate (tests/test_validate_gate.py).
    gate = ["--no-validate"] if "--apply" in flags else []
    return run(capsysbinary, "rewrite", "--plan", str(base / plan), str(base / src), "--unsafe", *flags, *gate)


def test_diff_is_accepted_by_git_apply_from_src(tree, capsysbinary):
    base, src = tree
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        assert git(*args, cwd=src).returncode == 0
    code, patch, err = rewrite(capsysbinary, base)
    assert code == 0, err
    assert patch.startswith(b"diff --git a/")
    check = git("apply", "--check", "-", cwd=src, input=patch)
    assert check.returncode == 0, check.stderr
    assert git("apply", "-", cwd=src, input=patch).returncode == 0
    via_git = snapshot(src)
    # Reset and apply with stackpart itself: the same bytes.
    assert git("checkout", "-q", ".", cwd=src).returncode == 0
    assert git("clean", "-qfd", cwd=src).returncode == 0
    assert rewrite(capsysbinary, base, "--apply")[0] == 0
    assert {k: v[0] for k, v in snapshot(src).items()} == {k: v[0] for k, v in via_git.items()}
    # git sees exactly the files the diff named.
    status = git("status", "--porcelain", "--untracked-files=all", cwd=src).stdout.decode()
    assert sorted(line[3:] for line in status.splitlines()) == [
        "pkg/_stackpart/__init__.py", "pkg/_stackpart/bucketing.py", "pkg/model.py", "run.py"
    ]


def test_apply_keeps_mode_bom_crlf_and_non_ascii_and_only_adds_lines(tree, capsysbinary):
    base, src = tree
    model = src / "pkg" / "model.py"
    original = codecs.BOM_UTF8 + MODEL.replace("\n", "\r\n").encode("utf-8")
    model.write_bytes(original)
    model.chmod(0o755)
    code, _, err = rewrite(capsysbinary, base, "--apply")
    assert code == 0, err
    new = model.read_bytes()
    assert stat.S_IMODE(model.stat().st_mode) == 0o755
    assert new.startswith(codecs.BOM_UTF8) and not new[3:].startswith(codecs.BOM_UTF8)
    lines = new[3:].split(b"\r\n")
    assert all(b"\n" not in line for line in lines), "a bare LF crept into a CRLF file"
    # Every original line is still there, byte for byte and in order; only lines were added.
    old_lines = original[3:].split(b"\r\n")
    it = iter(lines)
    assert all(any(line == old for line in it) for old in old_lines)
    added = [line.strip() for line in lines if line not in old_lines]
    assert added == [
        b"from ._stackpart.bucketing import pad_to_bucket",
        b"@torch.compile",
        b"@torch.compiler.disable",
        b'@pad_to_bucket("idx", dim=1, buckets=(8, 16), pad_value=0)',
    ]
    assert "λ → μ".encode() in new and "café".encode() in new
    generated = src / "pkg" / "_stackpart" / "bucketing.py"
    assert stat.S_IMODE(generated.stat().st_mode) == 0o644


def test_check_exit_codes_and_idempotence(tree, capsysbinary):
    base, src = tree
    before = snapshot(src)
    code, out, err = rewrite(capsysbinary, base, "--check")
    assert code == 1 and out and "differ from what" in err
    assert "`stackpart validate --plan" in err  # --apply alone is refused without a report
    assert snapshot(src) == before, "--check wrote something"
    assert rewrite(capsysbinary, base, "--apply")[0] == 0
    assert rewrite(capsysbinary, base, "--check")[:2] == (0, b"")
    assert rewrite(capsysbinary, base)[:2] == (0, b"")


@pytest.mark.parametrize("plan", ["version: 1\n", "version: 1\nactions: []\n",
                                  "version: 1\nharness: {file: h.py}\namortization: {runs: 10}\n"])
def test_plan_without_actions_changes_nothing(tree, capsysbinary, plan):
    base, src = tree
    (base / "empty.yaml").write_text(plan)
    before = snapshot(src)
    for flags in ([], ["--check"], ["--apply"]):
        code, out, err = rewrite(capsysbinary, base, *flags, plan="empty.yaml")
        assert (code, out) == (0, b""), err
    assert snapshot(src) == before


def _leftovers(src: Path) -> list[str]:
    return [p.name for p in src.rglob("*") if p.name.endswith(".stackpart")]


def test_failed_write_leaves_nothing_half_written(tree, capsysbinary):
    """The vendored package's place is taken by a file: the directory cannot be made, so the
    already staged pkg/model.py... run.py writes must not land either."""
    base, src = tree
    (src / "pkg" / "_stackpart").write_text("not a directory\n")
    before = snapshot(src)
    code, out, err = rewrite(capsysbinary, base, "--apply")
    assert code == 2
    assert "cannot write" in err and "nothing was changed" in err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(src) == before
    assert _leftovers(src) == []


def test_failed_rename_restores_what_was_written(tree, capsysbinary, monkeypatch):
    """A rename that fails midway (disk full, a file locked) rolls back the renames before it."""
    base, src = tree
    before = snapshot(src)
    real_replace = os.replace
    calls = []

    def flaky(a, b):
        calls.append(b)
        if len(calls) == 3:
            raise OSError(28, "No space left on device", str(b))
        return real_replace(a, b)

    monkeypatch.setattr(apply_mod.os, "replace", flaky)
    code, _, err = rewrite(capsysbinary, base, "--apply")
    assert code == 2 and "restored" in err
    assert len(calls) == 3
    assert snapshot(src) == before
    assert _leftovers(src) == []
    assert not (src / "pkg" / "_stackpart").exists()


@pytest.mark.parametrize("when", [1, 3])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_interrupt_during_apply_leaves_the_tree_as_it_was(tree, capsysbinary, monkeypatch, when, interrupt):
    """Ctrl-C (KeyboardInterrupt) or SIGTERM (SystemExit(143)) mid-apply: the renames done are
    rolled back, no temp file stays, and the interrupt still propagates."""
    base, src = tree
    before = snapshot(src)
    real_replace = os.replace
    calls = []

    def interrupted(a, b):
        calls.append(b)
        if len(calls) == when:
            raise interrupt()
        return real_replace(a, b)

    monkeypatch.setattr(apply_mod.os, "replace", interrupted)
    with pytest.raises(interrupt):
        apply_mod.apply_changes(src, _changes(base, src))
    assert snapshot(src) == before
    assert _leftovers(src) == []


def test_interrupt_while_staging_leaves_no_temp_files(tree, monkeypatch):
    base, src = tree
    before = snapshot(src)
    real_chmod = os.chmod
    calls = []

    def interrupted(path, mode):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt()
        return real_chmod(path, mode)

    monkeypatch.setattr(apply_mod.os, "chmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        apply_mod.apply_changes(src, _changes(base, src))
    assert snapshot(src) == before and _leftovers(src) == []


def _changes(base, src):
    from rewriter.plan import load_plan

    return transform.plan_rewrite(load_plan(base / "plan.yaml"), src, unsafe=True).changes


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_writes_nothing(tree, capsysbinary):
    base, src = tree
    (src / "pkg").chmod(0o555)
    try:
        before = snapshot(src)
        code, _, err = rewrite(capsysbinary, base, "--apply")
        assert code == 2 and "cannot write" in err
        assert snapshot(src) == before and _leftovers(src) == []
    finally:
        (src / "pkg").chmod(0o755)


def test_a_read_only_file_is_refused_and_nothing_is_written(tree, capsysbinary):
    """A file its owner made read-only (``chmod a-w``) is not replaced by a rename either, root's
    run included: exit 2 naming it, every file as it was (the run.py staged beside it too)."""
    base, src = tree
    (src / "pkg" / "model.py").chmod(0o444)
    try:
        before = snapshot(src)
        code, _, err = rewrite(capsysbinary, base, "--apply")
        assert code == 2, err
        assert "model.py" in err and "read-only (mode 0444)" in err and "nothing was changed" in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert snapshot(src) == before and _leftovers(src) == []
    finally:
        (src / "pkg" / "model.py").chmod(0o644)
    assert rewrite(capsysbinary, base, "--apply")[0] == 0  # writable again: applied


def test_a_read_only_file_in_the_copy_validate_rewrites_is_written(tree):
    """validate's and the search's trees are copies of SRC with its modes: a file read-only in SRC
    is rewritten there (only SRC's own files are refused), and SRC is left as it was."""
    from rewriter.engine.materialize import materialize
    from rewriter.plan import load_plan

    base, src = tree
    (src / "pkg" / "model.py").chmod(0o444)
    try:
        before = snapshot(src)
        trees = materialize(load_plan(base / "plan.yaml"), src, base / "work")
        [change] = [c for c in trees.result.changes if c.relpath == "pkg/model.py"]
        assert (trees.rewritten / "pkg" / "model.py").read_bytes() == change.new != change.old
        assert snapshot(src) == before
    finally:
        (src / "pkg" / "model.py").chmod(0o644)


BAD_PLANS = {
    "malformed_yaml": ("version: 1\nactions:\n  - action: compile\n   target: x\n", "plan.yaml:4:"),
    "unknown_action": ("version: 1\nactions:\n  - action: inline\n    target: run.py::main\n", "plan.yaml:3:5: unknown action 'inline'"),
    "unknown_field": ("version: 1\nactons: []\n", "plan.yaml:2:1: unknown field 'actons' (did you mean 'actions'?)"),
    "wrong_type": ("version: 1\nactions:\n  - action: disable\n    target: run.py::main\n    recursive: maybe\n", "plan.yaml:5:5: actions[0].recursive:"),
    "wrong_version": ("version: 2\nactions: []\n", "plan.yaml:1:1: version:"),
    "empty_file": ("", "plan.yaml:1: expected a mapping"),
    "unknown_target": ("version: 1\nactions:\n  - action: allocator\n    target: run.py::mian\n", "plan.yaml:3: actions[0] (allocator run.py::mian): no class or function 'mian' in run.py (did you mean 'main'?)"),
    "unknown_target_no_near_name": ("version: 1\nactions:\n  - action: allocator\n    target: run.py::zzzzzz\n", "no class or function 'zzzzzz' in run.py (run.py defines main)"),
    "non_utf8_plan": (b"version: 1\n# caf\xe9\n", "plan.yaml:2:6: plan is not UTF-8 (byte 16: b'\\xe9')"),
    "misspelt_required_field": ("version: 1\nactions:\n  - action: allocator\n    targte: run.py::main\n",
                                "plan.yaml:4:5: unknown field 'actions[0].targte' (did you mean 'target'?)"),
    "mark_dynamic_typo": (
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: pkg/model.py::GPT.forward\n    arg: idz\n    dim: 1\n",
        "'idz' is neither a parameter of GPT.forward nor bound at its top level (did you mean 'idx'?",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_PLANS))
def test_bad_plan_exits_2_and_writes_nothing(tree, capsysbinary, name, monkeypatch):
    base, src = tree
    text, expected = BAD_PLANS[name]
    (base / "plan.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.chdir(base)
    before = snapshot(src)
    for flags in ([], ["--check"], ["--apply", "--no-validate"], ["--apply"]):
        code, out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src", "--unsafe", *flags)
        assert (code, out) == (2, b""), err
        assert err.startswith("error: ") and expected in err.splitlines()[0], err
    assert snapshot(src) == before


def test_a_misspelt_required_field_is_one_line_not_also_missing(tree, capsysbinary, monkeypatch):
    """A newcomer's ``targte:``: one line naming the field meant, no second line saying 'target'
    is missing."""
    base, _src = tree
    (base / "plan.yaml").write_text(BAD_PLANS["misspelt_required_field"][0])
    monkeypatch.chdir(base)
    code, _out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src", "--unsafe")
    assert code == 2 and err.count("error:") == 1 and "missing required field" not in err, err


def test_a_huge_value_is_quoted_short_in_its_error(tree, capsysbinary, monkeypatch):
    """A 100,000-character ``site:`` made a 100 KB error line: the value is quoted cut to 80
    characters."""
    base, _src = tree
    (base / "plan.yaml").write_text("version: 1\nsite: " + "x" * 100_000 + "\nactions: []\n")
    monkeypatch.chdir(base)
    code, _out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src", "--unsafe")
    assert code == 2 and len(err) < 400 and err.count("error:") == 1, err[:400]
    assert "got 'xxxxxxx" in err and "xxx...\n" in err, err[:400]


#: A plan value of the wrong kind -> the exact line every command prints for it (exit 2, nothing
#: written): what the field takes, what the plan gave, and the near name where one exists.
COMPILE = "version: 1\nactions:\n  - action: compile\n    target: pkg/model.py::Block\n"
BAD_VALUES = {
    "choice_with_near_name": (
        "version: 1\nharness:\n  file: h.py\n  mode: inferance\nactions: []\n",
        "plan.yaml:4:3: harness.mode: expected one of 'inference', 'training', got 'inferance' (did you mean 'inference'?)"),
    "option_choice_with_near_name": (
        COMPILE + "    options: {mode: reduce_overhead}\n",
        "plan.yaml:5:15: actions[0].options.mode: expected one of 'default', 'reduce-overhead', 'max-autotune', "
        "'max-autotune-no-cudagraphs', got 'reduce_overhead' (did you mean 'reduce-overhead'?)"),
    "choice_without_near_name": (
        COMPILE + "    strategy: everywhere\n",
        "plan.yaml:5:5: actions[0].strategy: expected one of 'region', 'nested', 'whole', got 'everywhere'"),
    "bool_given_a_word": (
        COMPILE + "    options:\n      fullgraph: maybe\n",
        "plan.yaml:6:7: actions[0].options.fullgraph: expected true or false, got 'maybe'"),
    "bool_given_a_quoted_yes": (
        COMPILE + "    options:\n      fullgraph: 'yes'\n",
        "plan.yaml:6:7: actions[0].options.fullgraph: expected true or false, got 'yes'"),
    "bool_given_1": (
        COMPILE + "    options:\n      fullgraph: 1\n",
        "plan.yaml:6:7: actions[0].options.fullgraph: expected true or false, got 1"),
    "nullable_bool_given_a_word": (
        COMPILE + "    options:\n      dynamic: sometimes\n",
        "plan.yaml:6:7: actions[0].options.dynamic: expected true, false or null, got 'sometimes'"),
    "list_for_a_mapping": (
        COMPILE + "    options: [fullgraph]\n",
        "plan.yaml:5:5: actions[0].options: expected a mapping, got a list"),
    "mapping_for_a_list": (
        "version: 1\nactions:\n  action: compile\n  target: pkg/model.py::Block\n",
        "plan.yaml:2:1: actions: expected a list, got a mapping"),
    "string_for_an_int": (
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: '1'\n",
        "plan.yaml:6:5: actions[0].dim: expected an integer, got '1'"),
    "bool_for_an_int": (
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: true\n",
        "plan.yaml:6:5: actions[0].dim: expected an integer, got true"),
    "word_for_a_number_union": (
        "version: 1\nactions:\n  - action: bucket\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: 1\n"
        "    buckets: [8]\n    pad_value: zero\n",
        "plan.yaml:8:5: actions[0].pad_value: expected a number, got 'zero'"),
    "out_of_range": (
        "version: 1\namortization: {runs: 0}\nactions: []\n",
        "plan.yaml:2:16: amortization.runs: expected a value >= 1, got 0"),
    "yaml_boolean_for_a_string": (  # off, yes and on are refused before (tests/test_plan_yaml11.py)
        "version: 1\nharness: {file: h.py, device: false}\nactions: []\n",
        "plan.yaml:2:23: harness.device: expected a string, got false (YAML reads an unquoted true/false, yes/no "
        "or on/off as a boolean; quote it to give a string)"),
    "yaml_date_for_a_string": (
        "version: 1\nactions:\n  - action: disable\n    target: run.py::main\n    why: 2024-01-01\n",
        "plan.yaml:5:5: actions[0].why: expected a string, got 2024-01-01 (YAML reads an unquoted date as a date; "
        "quote it to give a string)"),
    "refused_wrapper_alone": (  # not also "unknown setting ... for None" on the next line
        "version: 1\nactions:\n  - action: distributed\n    target: run.py::main\n    wrapper: fsdp\n"
        "    settings: {bucket_cap_mb: 25}\n",
        "plan.yaml:5:5: actions[0].wrapper: expected one of 'ddp', 'fsdp2', got 'fsdp' (did you mean 'fsdp2'?)"),
    # PyYAML (YAML 1.1) reads an exponent without a dot or a sign as a string: lax validation took
    # 1e-3 as a number, strict refuses it, so the line says what to write
    "exponent_yaml_reads_as_a_string_for_a_number": (
        "version: 1\nactions:\n  - action: bucket\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: 1\n"
        "    buckets: [8]\n    pad_value: 1e-3\n",
        "plan.yaml:8:5: actions[0].pad_value: expected a number, got '1e-3' (PyYAML reads 1e-3 as a string, not a "
        "number; write 0.001)"),
    "exponent_yaml_reads_as_a_string_for_an_int": (
        "version: 1\namortization:\n  runs: 1.0e8\nactions: []\n",
        "plan.yaml:3:3: amortization.runs: expected an integer, got '1.0e8' (PyYAML reads 1.0e8 as a string, not a "
        "number; write 100000000)"),
    "whole_float_for_an_int": (
        "version: 1\nharness:\n  file: h.py\n  shapes:\n    - {batch: 8.0}\nactions: []\n",
        "plan.yaml:5:8: harness.shapes[0].batch: expected an integer, got 8.0 (write 8)"),
    "exponent_for_a_distributed_setting": (
        "version: 1\nactions:\n  - action: distributed\n    target: run.py::main\n    wrapper: ddp\n"
        "    settings: {bucket_cap_mb: 2.5e1}\n",
        "plan.yaml:6:5: actions[0].settings: bucket_cap_mb: expected a size in MB > 0, got '2.5e1' (PyYAML reads "
        "2.5e1 as a string, not a number; write 25.0)"),
    "boolean_version": (  # Literal[1] takes true (== 1) even in strict mode
        "version: true\nactions: []\n",
        "plan.yaml:1:1: version: expected 1, got true"),
    "non_string_shape_name": (  # not harness.shapes[0][1].[key], pydantic's loc
        "version: 1\nharness:\n  file: h.py\n  shapes:\n    - {1: 8}\nactions: []\n",
        "plan.yaml:5:7: harness.shapes[0] key: expected a string, got 1"),
    "key_yaml_reads_as_a_boolean": (  # not pydantic's "actions[0][1]: Keys should be strings"
        COMPILE + "    true: true\n",
        "plan.yaml:3:5: actions[0]: unknown field true (a field name is a string) (YAML reads an unquoted true/false, "
        "yes/no or on/off as a boolean; quote it to give a string)"),
    "list_for_a_distributed_setting": (  # what the key takes, not the union's "true or false, a number or a string"
        "version: 1\nactions:\n  - action: distributed\n    target: run.py::main\n    wrapper: fsdp2\n"
        "    settings:\n      forward_prefetch: [1]\n",
        "plan.yaml:6:5: actions[0].settings: forward_prefetch: expected an integer >= 1 (blocks ahead), got a list"),
    "null_for_an_attention_implementation": (
        "version: 1\nsite: run.py::main\nactions:\n  - action: attention\n    target: transformers:LlamaForCausalLM\n"
        "    implementation: ~\n",
        "plan.yaml:6:5: actions[0].implementation: expected one of 'sdpa', 'eager', 'flex_attention' (transformers' "
        "attn_implementation names stackpart measures), got null"),
    "list_for_the_action": (  # not "unknown action \"['compile']\"" (did you mean 'compile'?), at the action's first key
        "version: 1\nactions:\n  - target: pkg/model.py::Block\n    action: [compile]\n",
        "plan.yaml:4:5: actions[0].action: expected one of compile, disable, mark_dynamic, bucket, kernel, allocator, "
        "compile_cache, dynamo_config, distributed, generation, attention, branchless, got a list"),
    "misspelt_action_after_the_target": (
        "version: 1\nactions:\n  - target: pkg/model.py::Block\n    action: complie\n",
        "plan.yaml:4:5: unknown action 'complie'; expected one of compile, disable, mark_dynamic, bucket, kernel, "
        "allocator, compile_cache, dynamo_config, distributed, generation, attention, branchless (did you mean 'compile', 'compile_cache'?)"),
    "integer_key_at_the_top": (
        "version: 1\n1: 2\nactions: []\n",
        "plan.yaml:1:1: unknown field 1 (a field name is a string)"),
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_value_of_the_wrong_kind_is_one_exact_line_exit_2_and_writes_nothing(tree, capsysbinary, name, monkeypatch):
    """Not pydantic's "Input should be ..." but the field, what it takes and what was given, as
    rewrite (every mode) and check --plan print it; nothing under SRC or beside the plan written."""
    base, src = tree
    text, line = BAD_VALUES[name]
    (base / "plan.yaml").write_text(text)
    monkeypatch.chdir(base)
    before = snapshot(base)
    for argv in (["rewrite", "--plan", "plan.yaml", "src", "--unsafe"], ["rewrite", "--plan", "plan.yaml", "src", "--check"],
                 ["rewrite", "--plan", "plan.yaml", "src", "--unsafe", "--apply", "--no-validate"],
                 ["check", "--plan", "plan.yaml", "--fix", "--no-validate", "src/run.py"]):
        code, out, err = run(capsysbinary, *argv)
        assert (code, out, err) == (2, b"", f"error: {line}\n"), argv
    assert snapshot(base) == before


def test_validate_prints_the_same_line_for_a_wrong_value(tree, capsysbinary, monkeypatch):
    """validate reads the plan the same way: exit 2, the one line, no report folder written."""
    base, _src = tree
    text, line = BAD_VALUES["choice_with_near_name"]
    (base / "plan.yaml").write_text(text)
    monkeypatch.chdir(base)
    before = snapshot(base)
    code, out, err = run(capsysbinary, "validate", "--plan", "plan.yaml", "src")
    assert (code, out, err) == (2, b"", f"error: {line}\n")
    assert snapshot(base) == before and sorted(p.name for p in base.iterdir()) == ["plan.yaml", "src"]


def test_an_unquoted_yaml_yes_is_refused_and_true_is_a_boolean(tree, capsysbinary, monkeypatch):
    """PyYAML (YAML 1.1) reads an unquoted yes/on as true, YAML 1.2 as a string: the plan says
    true or false (tests/test_plan_yaml11.py has the other YAML 1.1 literals)."""
    base, _src = tree
    monkeypatch.chdir(base)
    (base / "plan.yaml").write_text(COMPILE + "    options: {fullgraph: true}\n")
    code, out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src")
    assert code == 0 and b"@torch.compile(fullgraph=True)" in out, err
    for word in ("yes", "on"):
        (base / "plan.yaml").write_text(COMPILE + f"    options: {{fullgraph: {word}}}\n")
        code, out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src")
        assert (code, out) == (2, b""), err
        assert err == (f"error: plan.yaml:5:26: actions[0].options.fullgraph: '{word}' is read by YAML 1.1 (PyYAML) "
                       f"as true but by YAML 1.2 as the string '{word}'; write true for the boolean, or quote it for "
                       "the string\n"), err


def test_bad_command_lines_exit_2(tree, capsysbinary):
    base, src = tree
    before = snapshot(src)
    plan = str(base / "plan.yaml")
    cases = [
        (["rewrite", "--plan", plan, str(src), "--apply", "--check"], "exclude each other"),
        (["rewrite", "--plan", str(base / "nope.yaml"), str(src)], "nope.yaml: cannot read plan"),
        (["rewrite", "--plan", plan, str(base / "missing")], "missing: SRC does not exist"),
        (["rewrite", "--plan", plan, str(src / "run.py")], "is a file"),
        (["rewrite", "--plan", plan, str(src), "--frobnicate"], "--frobnicate"),
        (["rewrite", str(src)], "--plan"),
        # an output path that cannot be written: one line naming it, not a traceback
        (["rewrite", "--plan", plan, str(src), "--summary-md", str(src / "run.py" / "sum.md")], f"error: {src / 'run.py'}"),
    ]
    for argv, expected in cases:
        code, out, err = run(capsysbinary, *argv)
        assert code == 2, (argv, err)
        assert expected in err, (argv, err)
        assert "Traceback" not in err, (argv, err)
    assert snapshot(src) == before


def test_plan_schema_prints_the_json_schema(capsysbinary):
    import json

    code, out, _ = run(capsysbinary, "plan", "schema")
    assert code == 0
    schema = json.loads(out)
    # The actions are a discriminated union on `action`, one variant per plan action.
    items = schema["properties"]["actions"]["items"]
    assert items["discriminator"]["propertyName"] == "action"
    from rewriter.plan import ACTION_MODELS

    assert set(items["discriminator"]["mapping"]) == set(ACTION_MODELS) >= {
        "compile", "disable", "mark_dynamic", "bucket", "kernel", "allocator", "compile_cache"
    }
    assert schema["properties"]["version"]["const"] == 1
    assert {"harness", "amortization"} <= set(schema["properties"])
    compile_def = schema["$defs"]["CompileAction"]
    assert compile_def["properties"]["strategy"]["enum"] == ["region", "nested", "whole"]
    assert compile_def["additionalProperties"] is False


def test_readme_example_command(capsysbinary):
    """The README's first command: the bundled example's diff, bucket included with --unsafe."""
    root = Path(__file__).resolve().parent.parent
    code, out, err = run(capsysbinary, "rewrite", "--plan", str(root / "examples/gpt/plan.yaml"),
                         str(root / "examples/gpt/src"), "--unsafe")
    assert code == 0, err
    text = out.decode()
    assert "+    @torch.compile\n" in text and "+@torch.compiler.disable\n" in text
    assert "b/_stackpart/bucketing.py" in text


def test_two_spellings_of_one_file_are_one_file(tree, capsysbinary):
    """A symlink inside SRC and the file it points to are one file: one change, named by the
    real path, with both actions in it."""
    base, src = tree
    (src / "alias.py").symlink_to("pkg/model.py")
    (base / "two.yaml").write_text(
        "version: 1\nactions:\n"
        "  - {action: compile, target: 'alias.py::Block'}\n"
        "  - {action: disable, target: 'pkg/model.py::route'}\n"
    )
    code, patch, err = rewrite(capsysbinary, base, plan="two.yaml")
    assert code == 0, err
    text = patch.decode()
    assert text.count("diff --git") == 1 and "diff --git a/pkg/model.py b/pkg/model.py" in text
    assert "+    @torch.compile\n" in text and "+@torch.compiler.disable\n" in text
    assert rewrite(capsysbinary, base, "--apply", plan="two.yaml")[0] == 0
    assert (src / "alias.py").is_symlink()
    assert rewrite(capsysbinary, base, "--check", plan="two.yaml")[:2] == (0, b"")


def test_src_given_as_dot(tree, capsysbinary, monkeypatch):
    base, src = tree
    monkeypatch.chdir(src)
    code, patch, err = run(capsysbinary, "rewrite", "--plan", "../plan.yaml", ".", "--unsafe")
    assert code == 0, err
    assert b"diff --git a/pkg/model.py b/pkg/model.py" in patch
    assert b"diff --git a/run.py b/run.py" in patch


def test_missing_target_file_names_the_src_it_looked_in(tree, capsysbinary):
    # check --plan defaults SRC to the working directory: the error must say where it looked.
    base, src = tree
    (base / "plan.yaml").write_text("version: 1\nactions:\n  - action: disable\n    target: lib/gone.py::f\n")
    code, out, err = run(capsysbinary, "rewrite", "--plan", str(base / "plan.yaml"), str(src))
    assert (code, out) == (2, b"")
    assert f"lib/gone.py: no such file under SRC (target paths are relative to SRC, here {src.resolve()})" in err


def test_a_plan_that_changes_nothing_says_so(tree, capsysbinary, monkeypatch):
    """A newcomer's empty plan printed nothing at all and exited 0: was it run?"""
    base, src = tree
    monkeypatch.chdir(base)
    (base / "empty.yaml").write_text("version: 1\nactions: []\n")
    code, out, err = run(capsysbinary, "rewrite", "--plan", "empty.yaml", "src")
    assert (code, out) == (0, b"") and "no changes: the plan has no actions" in err
    assert run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src", "--unsafe", "--apply", "--no-validate")[0] == 0
    code, out, err = run(capsysbinary, "rewrite", "--plan", "plan.yaml", "src", "--unsafe")
    assert (code, out) == (0, b"") and "no changes: src already is what the plan asks" in err


def test_no_changes_says_when_actions_were_held_back(tree, capsysbinary, monkeypatch):
    """Review: an unsafe action not written (no --unsafe) and nothing else to do said the tree
    "already is what the plan asks", beside the line saying the action was not written."""
    base, src = tree
    monkeypatch.chdir(base)
    (base / "bucket.yaml").write_text(
        "version: 1\nactions:\n  - action: bucket\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: 1\n    buckets: [64, 128]\n"
    )
    code, out, err = run(capsysbinary, "rewrite", "--plan", "bucket.yaml", "src")
    assert (code, out) == (0, b"") and "not written" in err
    assert "no changes: 1 action(s) not written (above); src already has the rest" in err


def test_apply_over_a_hard_linked_file_says_the_other_names_keep_the_old_bytes(tree, capsysbinary):
    """--apply renames a new file over each name (atomic, all or nothing), so another hard link
    to the same file keeps the old bytes: the apply says so, naming the file and its links."""
    base, src = tree
    os.link(src / "pkg" / "model.py", base / "model_link.py")
    old = (base / "model_link.py").read_bytes()
    code, _, err = rewrite(capsysbinary, base, "--apply")
    assert code == 0, err
    assert (src / "pkg" / "model.py").read_bytes() != old and (base / "model_link.py").read_bytes() == old
    assert ("note: pkg/model.py had 2 hard links: the apply wrote a new file under this name (an atomic rename), "
            "and the other 1 name(s) keep the old bytes") in err, err
    assert "run.py had" not in err  # one link only: nothing to say


def _inodes(root: Path) -> dict[str, int]:
    """Each file's inode under ``root``: an apply renames a new file over each name it writes."""
    return {p.relative_to(root).as_posix(): p.stat().st_ino for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_second_apply_of_the_same_plan_that_finds_its_bytes_written_says_already_applied(
        tree, capsysbinary, monkeypatch):
    """Two `--apply` runs of one plan read SRC before either writes; the one that takes the tree's
    lock second finds every file holding the bytes it would write: it says so, writes nothing and
    exits 0. Played in order: the second run's reading is the one taken before the first wrote."""
    from rewriter.plan import load_plan
    from rewriter.rewrite import command

    base, src = tree
    first_reading = transform.plan_rewrite(load_plan(base / "plan.yaml"), src, unsafe=True)
    assert first_reading.changes
    code, _, err = rewrite(capsysbinary, base, "--apply")
    assert code == 0 and f"applied: {len(first_reading.changes)} file(s) changed" in err, err
    after, inodes = snapshot(src), _inodes(src)
    monkeypatch.setattr(command, "plan_rewrite", lambda *a, **k: first_reading)
    code, out, err = rewrite(capsysbinary, base, "--apply")
    assert (code, out) == (0, b""), err
    assert (f"already applied: {base / 'src'} holds this plan's edits, written after this apply read it "
            "(by another apply?); nothing was written") in err, err
    assert "changed since" not in err and "file(s) changed" not in err, err
    assert snapshot(src) == after and _inodes(src) == inodes and _leftovers(src) == []


def test_a_second_apply_that_finds_other_bytes_is_refused_and_writes_nothing(tree, capsysbinary, monkeypatch):
    """The same race where a file now holds neither what was read nor what the plan writes (an
    edit made meanwhile), or only some files hold the plan's bytes: the refusal, exit 2."""
    from rewriter.plan import load_plan
    from rewriter.rewrite import command

    base, src = tree
    first_reading = transform.plan_rewrite(load_plan(base / "plan.yaml"), src, unsafe=True)
    assert rewrite(capsysbinary, base, "--apply")[0] == 0
    model = src / "pkg" / "model.py"
    model.write_bytes(model.read_bytes() + b"# an edit made meanwhile\n")
    monkeypatch.setattr(command, "plan_rewrite", lambda *a, **k: first_reading)
    before = snapshot(src)
    code, out, err = rewrite(capsysbinary, base, "--apply")
    assert (code, out) == (2, b"") and "nothing was changed (run it again)" in err and "already applied" not in err, err
    assert snapshot(src) == before and _leftovers(src) == []
    # every file but one holds the plan's bytes, that one still what was read: refused alike
    by_path = {c.relpath: c for c in first_reading.changes}
    model.write_bytes(by_path["pkg/model.py"].old)
    before = snapshot(src)
    with pytest.raises(apply_mod.StackpartError, match=r"nothing was changed \(run it again\)"):
        apply_mod.apply_changes(src, first_reading.changes)
    assert snapshot(src) == before and _leftovers(src) == []


def test_an_apply_with_nothing_left_to_write_says_the_edits_are_already_in_src(tree, capsysbinary, monkeypatch):
    """A second `--apply` of an applied plan said `applied: 0 file(s) changed`: it says plainly that
    SRC holds the plan's edits and writes nothing; an empty plan says it has no actions."""
    base, src = tree
    monkeypatch.chdir(base)
    apply = ("rewrite", "--plan", "plan.yaml", "src", "--apply", "--no-validate")
    assert run(capsysbinary, *apply, "--unsafe")[0] == 0
    after, inodes = snapshot(src), _inodes(src)
    code, out, err = run(capsysbinary, *apply, "--unsafe")
    assert (code, out) == (0, b""), err
    assert err == "already applied: src holds this plan's edits; no change to write\n", err
    # without --unsafe the bucket action is not written (said above): SRC holds the other actions'
    code, out, err = run(capsysbinary, *apply)
    assert (code, out) == (0, b""), err
    assert ("already applied: src holds the edits of this plan's other actions (1 action(s) not written, above); "
            "no change to write") in err and "not written: " in err, err
    assert snapshot(src) == after and _inodes(src) == inodes
    (base / "empty.yaml").write_text("version: 1\nactions: []\n")
    code, out, err = run(capsysbinary, "rewrite", "--plan", "empty.yaml", "src", "--apply", "--no-validate")
    assert (code, out, err) == (0, b"", "no changes: the plan has no actions; nothing was written\n")
    (base / "bucket.yaml").write_text(
        "version: 1\nactions:\n  - action: bucket\n    target: pkg/model.py::GPT.forward\n    arg: idx\n    dim: 1\n"
        "    buckets: [64, 128]\n")
    code, out, err = run(capsysbinary, "rewrite", "--plan", "bucket.yaml", "src", "--apply", "--no-validate")
    assert (code, out) == (0, b"") and err.endswith("no changes: 1 action(s) not written (above); nothing was written\n"), err
    assert "already applied" not in err and snapshot(src) == after
