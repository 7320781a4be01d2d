"""Plan drift: the files given must already be as the configured plan rewrites them.

The plan is run exactly as ``stackpart rewrite --check`` runs it (:func:`rewriter.rewrite.plan_rewrite`,
safe actions only), and only the changes to files on the command line count: pre-commit passes
the staged files, and a plan's target that is not being committed is not this commit's drift.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..diff import unified_diff
from ..rewrite import FileChange, plan_rewrite


def plan_drift(plan_path: str, src: str, files: Sequence[str]) -> tuple[list[tuple[str, FileChange]], str]:
    """The plan's pending changes to ``files``: ``([(file as given, change)], git-style diff)``.

    Raises:
        StackpartError: a bad plan or target (the same errors ``rewrite`` raises).
    """
    from ..plan import load_plan

    loaded = load_plan(plan_path)
    result = plan_rewrite(loaded, Path(src), unsafe=False)
    root = Path(src).resolve()
    given = {os.path.realpath(f): f for f in files}
    drifted = []
    for change in result.changes:
        real = os.path.realpath(root / change.relpath)
        if real in given:
            drifted.append((given[real], change))
    return drifted, unified_diff([c for _, c in drifted])
