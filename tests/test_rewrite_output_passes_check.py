"""What stackpart writes passes its own `check`: no rule fires on a line a rewrite added.

A newcomer pass found `@torch.compile(fullgraph=True)` (the compile action's own output) flagged
as SP107 "torch.compile inside `forward` runs on every call", and `mark_dynamic min: 1` written as
`min=1`, which SP106 then flags: the pre-commit hook would fail on every applied plan. Every
fixture's `after/` tree (docs/actions.md is generated from them) is checked here.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from rewriter.check.rules import ALL_RULES
from rewriter.check.runner import check_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = sorted(p for p in FIXTURES.glob("*/*/after") if p.is_dir())


def _added_lines(before: Path, after: Path) -> set[int]:
    old = before.read_bytes().splitlines() if before.is_file() else []  # bytes: PEP 263 cookies
    new = after.read_bytes().splitlines()
    added: set[int] = set()
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            added.update(range(j1 + 1, j2 + 1))
    return added


@pytest.mark.parametrize("after", CASES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_no_check_rule_fires_on_a_line_the_rewrite_added(after):
    files = sorted(str(p) for p in after.rglob("*.py"))
    results = check_files(files, ALL_RULES, jobs=1)
    flagged = []
    for path, result in zip(files, results):
        rel = Path(path).relative_to(after)
        added = _added_lines(after.parent / "before" / rel, Path(path))
        flagged += [f"{rel}:{f.line}: {f.code} {f.message}" for f in result.findings if f.line in added]
    assert not flagged, flagged


def test_the_cases_cover_every_action():
    actions = {p.parent.parent.name for p in CASES}
    assert {"compile", "disable", "mark_dynamic", "bucket", "allocator", "compile_cache", "kernel"} <= actions


def test_the_whole_model_suppression_survives_a_formatter(tmp_path):
    """Review: the suppression written after a long decorator moved off its line when black
    split it, and SP101 came back; it now sits on its own line above the decorator."""
    import shutil

    import black

    from rewriter.cli import main

    case = FIXTURES / "compile" / "nested_with_whole"
    src = tmp_path / "src"
    shutil.copytree(case / "before", src)
    plan = tmp_path / "plan.yaml"
    plan.write_text(case.joinpath("plan.yaml").read_text().replace(
        "strategy: whole", "strategy: whole\n    options: {fullgraph: true, dynamic: false, mode: max-autotune-no-cudagraphs}"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    model = src / "model.py"
    model.write_text(black.format_str(model.read_text(), mode=black.Mode(line_length=40)))
    [result] = check_files([str(model)], ALL_RULES, jobs=1)
    assert not [f for f in result.findings if f.code == "SP101"], result.findings


_SEQ = '''import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

%s    def forward(self, x):
        return self.body(x)
'''


@pytest.mark.parametrize("decorator, fields", [
    ("", "options: {mode: reduce-overhead}"),
    ("    @torch.compile\n", "own_call: {mode: reduce-overhead}"),
    ('    @torch.compile(backend="eager")  # mine\n', "own_call: {mode: reduce-overhead}"),
    # the program's own suppression of another code right above: SP109 joins it (a second line
    # above would leave SP101 off the decorator)
    ("    # stackpart: ignore[SP101]: whole on purpose\n    @torch.compile\n", "own_call: {mode: reduce-overhead}"),
])
def test_cuda_graphs_on_a_whole_model_pass_check(tmp_path, capsys, decorator, fields):
    """Review: `strategy: whole` with `mode: reduce-overhead` on a model whose forward is one call
    (`return self.body(x)`, the textbook CUDA-graphs capture) was flagged SP109 "small region" by
    `stackpart check`, failing the commit that applies the measured choice."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(_SEQ % decorator)
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nactions:\n  - action: compile\n    target: model.py::Net\n    strategy: whole\n    {fields}\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    capsys.readouterr()
    assert main(["check", str(src), "--no-project"]) == 0, capsys.readouterr().out
    once = (src / "model.py").read_bytes()
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "model.py").read_bytes() == once  # idempotent: no second comment
    if "ignore[SP101]" in decorator:
        assert b"# stackpart: ignore[SP101,SP109]: whole on purpose\n    @torch.compile(mode=" in once, once


_BLOCKS = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    @torch.compile(dynamic=False)  # static shapes, please
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
'''


def test_a_measured_edit_of_the_programs_whole_model_compile_passes_check(tmp_path, capsys):
    """diagnose's `as-is+dynamic` (own_call dynamic on the program's whole-model decorator) failed
    the hook on the commit that applies it: SP101's regional suggestion, which the measurement
    answered, was not suppressed as it is for a whole-model compile the plan adds."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(_BLOCKS)
    assert main(["check", str(src), "--no-project"]) == 1  # SP101 before
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: model.py::Net.forward\n    strategy: whole\n"
                    "    own_call: {dynamic: true}\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    capsys.readouterr()
    assert main(["check", str(src), "--no-project"]) == 0, capsys.readouterr().out
    once = (src / "model.py").read_text()
    assert ("    # stackpart: ignore[SP101]: strategy whole, as planned\n"
            "    @torch.compile(dynamic=True)  # static shapes, please\n") in once, once
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    assert (src / "model.py").read_text() == once


def test_a_long_generated_decorator_is_split_as_black_splits_it(tmp_path):
    """A compile with four options in a nested class was one 140-character line."""
    import black

    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    source = "import torch\n\n\nclass A:\n    class B:\n        def f(self, x):\n            return x\n"
    (tmp_path / "model.py").write_text(source)
    plan = parse_plan("version: 1\nactions:\n  - action: compile\n    target: model.py::A.B.f\n    options: {fullgraph: true, "
                      "dynamic: false, mode: max-autotune-no-cudagraphs, backend: aot_eager}\n", "plan.yaml")
    new = plan_rewrite(plan, tmp_path).changes[0].new.decode()
    assert max(len(line) for line in new.splitlines()) <= 88, new
    assert new == black.format_str(new, mode=black.Mode()), new  # the whole file as black writes it


def test_an_added_import_is_followed_by_two_blank_lines_before_a_def(tmp_path):
    """LibCST's AddImportsVisitor left one blank line (or none) between the `import torch` it added
    and the user's first def."""
    import black

    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    source = "def f(x):\n    return x\n"
    (tmp_path / "model.py").write_text(source)
    plan = parse_plan("version: 1\nactions:\n  - action: compile\n    target: model.py::f\n", "plan.yaml")
    new = plan_rewrite(plan, tmp_path).changes[0].new.decode()
    assert new == "import torch\n\n\n@torch.compile\ndef f(x):\n    return x\n", new
    assert new == black.format_str(new, mode=black.Mode())
