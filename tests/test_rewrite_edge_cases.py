"""Values and bytes that once produced broken output (found in review, 2026-11-29)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rewriter.cli import main
from rewriter.vendor import is_generated


def _tree(tmp_path: Path, source: bytes, plan: str) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_bytes(source)
    (tmp_path / "plan.yaml").write_text(plan)
    return tmp_path / "plan.yaml", src


def test_form_feed_in_source_gives_a_diff_git_applies(tmp_path, capsysbinary):
    plan, src = _tree(
        tmp_path,
        b"import torch\n\x0c\n\nclass Block:\n    def forward(self, x):\n        return x\n",
        "version: 1\nactions:\n  - action: compile\n    target: model.py::Block\n",
    )
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    patch = capsysbinary.readouterr().out
    assert b"No newline" not in patch
    subprocess.run(["git", "apply", "--check", "-"], cwd=src, input=patch, check=True)


def test_newline_in_a_string_field_is_escaped(tmp_path, capsys):
    plan, src = _tree(
        tmp_path,
        b"def main():\n    pass\n",
        'version: 1\nactions:\n  - action: compile_cache\n    target: model.py::main\n    dir: "a\\nb"\n',
    )
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    text = (src / "model.py").read_text()
    ast.parse(text)
    assert 'os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "a\\nb")' in text


def test_infinite_pad_value_is_written_as_a_float_call(tmp_path):
    plan, src = _tree(
        tmp_path,
        b"def f(x):\n    return x\n",
        "version: 1\nactions:\n  - action: bucket\n    target: model.py::f\n    arg: x\n    dim: 0\n"
        "    buckets: [4, 8]\n    pad_value: -.inf\n",
    )
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 0
    assert 'pad_value=float("-inf")' in (src / "model.py").read_text()
    code = "import torch, model; print(model.f(torch.zeros(3)).shape[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"  # padded to 4 inside, trimmed back to 3


def test_two_buckets_in_a_package_import_the_helper_once(tmp_path, capsys):
    """LibCST's AddImportsVisitor does not see an existing relative import: two bucket actions
    in one package file (or a re-run) once wrote `from ._stackpart.bucketing import ...` twice."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "m.py").write_text("def f(x):\n    return x\n\n\ndef g(x):\n    return x\n")
    plan = tmp_path / "plan.yaml"
    one = "  - action: bucket\n    target: pkg/m.py::{}\n    arg: x\n    dim: 0\n    buckets: [4]\n"
    plan.write_text("version: 1\nactions:\n" + one.format("f"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 0
    plan.write_text("version: 1\nactions:\n" + one.format("f") + one.format("g"))
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 0
    text = (src / "pkg" / "m.py").read_text()
    assert text.count("from ._stackpart.bucketing import pad_to_bucket") == 1, text
    assert text.count("@pad_to_bucket(") == 2


def test_a_broken_unsafe_action_is_skipped_in_the_preview_whether_or_not_a_report_exists(tmp_path, capsys):
    """The plain preview's exit code once depended on whether .stackpart/validation/ existed."""
    plan, src = _tree(
        tmp_path,
        b"import torch\n\n\ndef f(x):\n    return torch.topk(x, 2)\n",
        "version: 1\nactions:\n  - action: kernel\n    target: model.py::f\n    call: torch.topk\n    kernel: topkk\n",
    )
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    (tmp_path / ".stackpart" / "validation").mkdir(parents=True)
    (tmp_path / ".stackpart" / "validation" / "validation.json").write_text('{"diff_sha256": "0", "verdict": {"passed": true}}')
    assert main(["rewrite", "--plan", str(plan), str(src)]) == 0
    assert "not written" in capsys.readouterr().err


_BUCKET = ("version: 1\nactions:\n  - action: bucket\n    target: model.py::f\n    arg: x\n    dim: 0\n"
           "    buckets: [4, 8]\n")
_KERNEL = "version: 1\nactions:\n  - action: kernel\n    target: model.py::f\n    call: torch.topk\n    kernel: topk\n"


@pytest.mark.parametrize("plan_text, mine", [
    (_BUCKET, "_stackpart/bucketing.py"),
    (_BUCKET, "_stackpart/__init__.py"),
    (_KERNEL, "_stackpart/triton_topk.py"),
    (_KERNEL, "_stackpart/test_kernel_topk.py"),
])
def test_a_users_own_file_where_generated_code_goes_is_refused_not_overwritten(tmp_path, capsys, plan_text, mine):
    plan, src = _tree(tmp_path, b"import torch\n\n\ndef f(x):\n    return torch.topk(x, 2).values\n", plan_text)
    (src / mine).parent.mkdir()
    (src / mine).write_text("# my own code\n")
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 2
    err = capsys.readouterr().err
    assert "plan.yaml:3: actions[0]" in err and f"{mine} exists and was not generated by stackpart" in err
    assert (src / mine).read_text() == "# my own code\n"
    assert sorted(p.name for p in (src / "_stackpart").iterdir()) == [Path(mine).name]
    assert "topk" in (src / "model.py").read_text() and "pad_to_bucket" not in (src / "model.py").read_text()


def test_generated_code_of_an_earlier_stackpart_is_replaced(tmp_path, capsys):
    plan, src = _tree(tmp_path, b"def f(x):\n    return x\n", _BUCKET)
    (src / "_stackpart").mkdir()
    (src / "_stackpart" / "bucketing.py").write_text('"""Shape bucketing, generated by stackpart 0.0.1."""\n')
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate", "--unsafe"]) == 0
    assert "def pad_to_bucket" in (src / "_stackpart" / "bucketing.py").read_text()


def test_every_generated_file_in_the_fixtures_carries_the_marker():
    files = sorted((Path(__file__).parent.parent / "fixtures").glob("*/*/after/**/_stackpart/*.py"))
    assert len(files) >= 10
    assert [f for f in files if not is_generated(f.read_bytes())] == []


def test_a_docstring_that_shares_its_line_stays_the_docstring(tmp_path):
    plan, src = _tree(
        tmp_path,
        b'import os\n\nimport torch\n\n\ndef f(x):\n    """Doc."""; return x\n\n\ndef main():\n    """Entry."""  ;  return 0  # done\n',
        "version: 1\nactions:\n  - action: mark_dynamic\n    target: model.py::f\n    arg: x\n    dim: 0\n"
        "  - action: compile_cache\n    target: model.py::main\n",
    )
    assert main(["rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate"]) == 0
    text = (src / "model.py").read_text()
    assert '    """Doc."""\n    torch._dynamo.mark_dynamic(x, 0)\n    return x\n' in text
    assert '    """Entry."""\n    os.environ.setdefault(' in text and "\n    return 0  # done\n" in text
    code = "import model; print(model.f.__doc__, model.main.__doc__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True)
    assert out.stdout.strip() == "Doc. Entry.", out.stderr
    assert main(["rewrite", "--plan", str(plan), str(src), "--check"]) == 0
