"""The rich consoles every command prints through (messages to stderr, results to stdout)."""

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
