"""The rich consoles every command prints through (messages to stderr, results to stdout)."""

from __future__ import annotations

from functools import lru_cache

from rich.console import Console


@lru_cache(maxsize=1)
def stderr() -> Console:
    """Messages, warnings and progress: stderr, so stdout stays a clean diff or report."""
    return Console(stderr=True, soft_wrap=True)
