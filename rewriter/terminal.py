"""The rich consoles every command prints through (messages to stderr, results to stdout), and
the form of a progress line."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@lru_cache(maxsize=1)
def stderr() -> Console:
    """Messages, warnings and progress: stderr, so stdout stays a clean diff or report.

    rich is imported on first use: a rewrite that prints only its diff never pays for it.
    """
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


#: The longest progress line printed whole (a child's failure can carry a whole traceback).
PROGRESS_LIMIT = 300
#: What stands for the middle of a longer one.
ELIDED = " … "


def progress_line(text: str, limit: int = PROGRESS_LIMIT) -> str:
    """``text`` as one progress line: whole up to ``limit`` characters; a longer one keeps its
    start (what happened) and its end (the figures: compile seconds, graphs, recompiles) with
    :data:`ELIDED` in place of the middle (the console soft-wraps: the line itself is never cut)."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELIDED), 2)
    head = keep // 2
    return text[:head] + ELIDED + text[len(text) - (keep - head):]
