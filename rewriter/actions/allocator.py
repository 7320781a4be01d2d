"""``allocator``: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` at the entry point.

Expandable segments let the caching allocator grow a segment instead of splitting blocks, which
removes the fragmentation seen as large ``reserved - allocated`` with varying allocation sizes
(PyTorch docs, "CUDA semantics: Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"). The
variable is read when CUDA's allocator initialises, so it must be set before the first CUDA
allocation: the top of the entry function.
"""

from __future__ import annotations

from ..plan import AllocatorAction
from .entry import EnvDefaultCommand


class AllocatorCommand(EnvDefaultCommand):
    """Set the CUDA caching allocator's settings at the top of the entry function."""

    DESCRIPTION = "allocator settings at the entry point"
    action: AllocatorAction

    def env(self) -> tuple[str, str]:
        return "PYTORCH_CUDA_ALLOC_CONF", self.action.settings
