"""`stackpart rewrite --summary-md PATH`: the Markdown a pull-request comment shows."""

from __future__ import annotations

import shutil
from pathlib import Path

from rewriter.rewrite import summary_md
from rewriter.cli import main
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite

ROOT = Path(__file__).resolve().parents[1]


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples" / "gpt", tmp_path / "gpt")
    return tmp_path / "gpt"


def test_summary_lists_every_action_the_digest_and_the_diff(tmp_path, capsys):
    gpt = _copy(tmp_path)
    out = tmp_path / "comment.md"
    assert main(["rewrite", "--plan", str(gpt / "plan.yaml"), str(gpt / "src"), "--summary-md", str(out)]) == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    loaded = load_plan(gpt / "plan.yaml")
    result = plan_rewrite(loaded, gpt / "src")
    assert f"`{result.digest()[:16]}`" in text
    for i, action in enumerate(loaded.plan.actions):
        assert f"| {i} | `{action.action}` | `{action.target}` |" in text
    assert "not written: bucket is an unsafe action" in text  # skipped without --unsafe
    assert printed.strip() in text  # the same diff the command printed, inside <details>
    assert text.count("<details>") == 1 and "```diff" in text


def test_summary_says_applied_and_no_changes(tmp_path, capsys):
    gpt = _copy(tmp_path)
    out = tmp_path / "comment.md"
    args = ["rewrite", "--plan", str(gpt / "plan.yaml"), str(gpt / "src"), "--summary-md", str(out)]
    assert main([*args, "--apply", "--no-validate"]) == 0
    assert "file(s) applied" in out.read_text()
    assert main(args) == 0
    text = out.read_text()
    assert "**No changes**" in text and "<details>" not in text


def test_long_diff_is_cut_for_the_comment_limit(tmp_path, monkeypatch, capsys):
    gpt = _copy(tmp_path)
    monkeypatch.setattr(summary_md, "MAX_DIFF_CHARS", 80)
    out = tmp_path / "comment.md"
    assert main(["rewrite", "--plan", str(gpt / "plan.yaml"), str(gpt / "src"), "--summary-md", str(out)]) == 0
    assert "_diff cut at 80 of" in out.read_text()


def test_digest_named_is_the_one_the_apply_gate_checks(tmp_path, capsys):
    # The example plan holds back an unsafe bucket action: the printed diff is the safe part,
    # but `validate` and the `--apply` gate bind to the full plan's diff.
    gpt = _copy(tmp_path)
    out = tmp_path / "comment.md"
    assert main(["rewrite", "--plan", str(gpt / "plan.yaml"), str(gpt / "src"), "--summary-md", str(out)]) == 0
    text = out.read_text()
    loaded = load_plan(gpt / "plan.yaml")
    safe, full = plan_rewrite(loaded, gpt / "src"), plan_rewrite(loaded, gpt / "src", unsafe=True)
    assert safe.digest() != full.digest()
    assert f"bound to the full plan's diff `{full.digest()[:16]}`" in text
    assert f"`{safe.digest()[:16]}` (validation reports are bound to it)" not in text
    assert main(["rewrite", "--plan", str(gpt / "plan.yaml"), str(gpt / "src"), "--unsafe", "--summary-md", str(out)]) == 0
    assert f"`{full.digest()[:16]}` (validation reports are bound to it)." in out.read_text()


def test_a_latin1_source_file_keeps_its_bytes_in_the_summary(tmp_path, capsysbinary):
    """A file with a latin-1 coding cookie: the summary is written (exit 0, no traceback) and its
    diff holds the file's own bytes, as ``git diff`` shows them."""
    case = ROOT / "fixtures" / "source" / "latin1_with_cookie"
    src = tmp_path / "src"
    shutil.copytree(case / "before", src)
    out = tmp_path / "comment.md"
    assert main(["rewrite", "--plan", str(case / "plan.yaml"), str(src), "--summary-md", str(out)]) == 0
    original = b"".join((src / p.name).read_bytes() for p in sorted(src.glob("*.py")))
    latin1 = [bytes([b]) for b in original if b >= 0x80]
    assert latin1, "the fixture should hold a non-ASCII latin-1 byte"
    assert latin1[0] in out.read_bytes()
