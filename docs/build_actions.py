"""Build docs/actions.md from fixtures/: the docs page and the fixture tests are the same text.

Each case under ``fixtures/<group>/<case>/`` is a ``plan.yaml`` (its leading ``#`` comment is the
case's description), a ``before/`` tree, and either an ``after/`` tree (the rewrite succeeds) or an
``expected_error.txt`` (a substring of the one-line error; the rewrite refuses and writes nothing).
Optional: ``args.txt`` (extra ``stackpart rewrite`` flags, e.g. ``--unsafe``) and
``expected_stderr.txt`` (a substring of stderr for a successful run, e.g. a warning).

``tests/test_fixtures.py`` runs every case and checks this page is
current (``test_docs_page_is_current``). Regenerate with ``python docs/build_actions.py``.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PAGE = ROOT / "docs" / "actions.md"

#: Groups in page order; any other group directory is appended alphabetically.
ORDER = ["compile", "disable", "mark_dynamic", "bucket", "kernel", "branchless", "allocator", "compile_cache", "dynamo_config",
         "targets", "plan", "source"]

GROUP_TITLES = {
    "targets": "Target resolution and paths",
    "plan": "Plan file errors",
    "source": "Source file errors",
}


@dataclass
class Case:
    """One fixture case.

    Attributes:
        group: the directory under fixtures/ (an action name, or targets/plan/source).
        name: the case directory's name.
        path: the case directory.
        description: the plan's leading comment, joined into one paragraph.
        args: extra CLI flags from ``args.txt``.
        expected_error: the expected error substring (a refusal case), or None.
        expected_stderr: a substring expected on stderr of a successful run, or None.
    """

    group: str
    name: str
    path: Path
    description: str
    args: list[str]
    expected_error: str | None
    expected_stderr: str | None

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def before(self) -> Path:
        return self.path / "before"

    @property
    def after(self) -> Path:
        return self.path / "after"


def _read_opt(path: Path) -> str | None:
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def _description(plan: Path) -> str:
    lines = []
    for line in plan.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(x for x in lines if x)


#: Fixture groups of other stages, with their own layout and tests (fixtures/validate/: plan.yaml +
#: src/ per case, run by tests/test_validate*.py).
OTHER_STAGES = frozenset({"validate"})


def collect(root: Path = FIXTURES) -> list[Case]:
    """Every case under ``root``, in page order.

    Raises:
        ValueError: a case directory that is neither a success case nor a refusal case.
    """
    groups = sorted((d for d in root.iterdir() if d.is_dir()),
                    key=lambda d: (ORDER.index(d.name) if d.name in ORDER else len(ORDER), d.name))
    out = []
    for group in groups:
        if group.name in OTHER_STAGES:
            continue
        for case in sorted(d for d in group.iterdir() if d.is_dir()):
            plan = case / "plan.yaml"
            error = _read_opt(case / "expected_error.txt")
            if not any((case / n).exists() for n in ("before", "after", "expected_error.txt")):
                continue  # not a rewrite case (other stages keep their own fixtures here)
            if not plan.is_file() or not (case / "before").is_dir():
                raise ValueError(f"{case}: a case needs plan.yaml and before/")
            if (error is None) == (not (case / "after").is_dir()):
                raise ValueError(f"{case}: a case has either after/ or expected_error.txt, not both")
            args = (_read_opt(case / "args.txt") or "").split()
            out.append(Case(group.name, case.name, case, _description(plan), args, error,
                            _read_opt(case / "expected_stderr.txt")))
    return out


def tree_files(root: Path) -> dict[str, bytes]:
    """``{relative POSIX path: bytes}`` of the regular files under ``root`` (symlinks by target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[path.relative_to(root).as_posix()] = b"-> " + str(path.readlink()).encode()
        elif path.is_file():
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def _diff(case: Case) -> str:
    before, after = tree_files(case.before), tree_files(case.after)
    chunks = []
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        if old is None and "_stackpart/" in rel:
            lines = new.count(b"\n")
            chunks.append(f"+++ b/{rel}  (new vendored file, {lines} lines, rendered from templates/)\n")
            continue
        # Shown as text: CRLF line endings print as LF here (the test compares bytes).
        a = [] if old is None else old.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(True)
        b = [] if new is None else new.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(True)
        chunks.extend(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}"))
    return "".join(x if x.endswith("\n") else x + "\n" for x in chunks)


def _fence(text: str, lang: str) -> str:
    return f"```{lang}\n{text.rstrip()}\n```\n"


def render(root: Path = FIXTURES) -> str:
    """The Markdown page for all cases under ``root``."""
    out = [
        "# Plan actions by example\n",
        "\nGenerated from `fixtures/` by `docs/build_actions.py`; every example below is also a "
        "test (`tests/test_fixtures.py`). Do not edit by hand.\n",
    ]
    group = None
    for case in collect(root):
        if case.group != group:
            group = case.group
            out.append(f"\n## {GROUP_TITLES.get(group, '`' + group + '`')}\n")
        out.append(f"\n### {case.name.replace('_', ' ')}\n")
        if case.description:
            out.append(f"\n{case.description}\n")
        plan = (case.path / "plan.yaml").read_text(encoding="utf-8")
        plan = "\n".join(x for x in plan.splitlines() if not x.startswith("#"))
        cmd = " ".join(["stackpart rewrite --plan plan.yaml src", *case.args])
        out.append("\n" + _fence(plan, "yaml") + "\n" + _fence(cmd, "sh"))
        if case.expected_error is not None:
            out.append("\nRefused (exit 2, nothing written):\n\n" + _fence(case.expected_error, "text"))
        else:
            diff = _diff(case)
            out.append("\n" + (_fence(diff, "diff") if diff else "No change (empty diff).\n"))
            if case.expected_stderr:
                out.append("\nstderr:\n\n" + _fence(case.expected_stderr, "text"))
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write docs/actions.md; with ``--check``, exit 1 when it is stale instead."""
    text = render()
    if argv and "--check" in argv:
        return 0 if PAGE.is_file() and PAGE.read_text(encoding="utf-8") == text else 1
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
