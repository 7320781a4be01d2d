"""``stackpart rewrite --apply`` of a small tree written from strings, for the tests of what the
rewrite refuses: the exit code asserted, and on a refusal (exit 2) that no byte under SRC changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewriter.cli import main


def tree_bytes(src: Path) -> dict[str, bytes]:
    """Every file under ``src``, by its path relative to ``src``, with its bytes."""
    return {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted(src.rglob("*")) if p.is_file()}


def rewrite_files(tmp_path: Path, capsys: Any, files: dict[str, str], actions: str, code: int,
                  head: str = "") -> str:
    """Write ``files`` under ``tmp_path/src`` and a plan.yaml with ``head`` (its sections before
    ``actions:``, e.g. ``harness:``) and ``actions`` (its ``actions:`` lines), run ``rewrite --apply
    --no-validate``; assert the exit code ``code``, and on 2 that no byte of SRC changed; return
    stderr on one line."""
    src = tmp_path / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    before = tree_bytes(src)
    (tmp_path / "plan.yaml").write_text("version: 1\n" + head + "actions:\n" + actions)
    capsys.readouterr()
    got = main(["rewrite", "--plan", str(tmp_path / "plan.yaml"), str(src), "--apply", "--no-validate"])
    err = " ".join(capsys.readouterr().err.split())
    assert got == code, err
    if code == 2:
        assert tree_bytes(src) == before
    return err
