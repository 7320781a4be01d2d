"""``compile_cache``: persist Inductor's caches (FX graph cache, autotuning, Triton kernels
written under it) across process starts with ``TORCHINDUCTOR_CACHE_DIR`` (torch.compiler docs,
"Compile time caching configuration"). Without it every restart pays the cold compile again,
which multiplies ``N_compiles`` in the amortization rule by the number of restarts.
"""

from __future__ import annotations

from ..plan import CompileCacheAction
from .entry import EnvDefaultCommand


class CompileCacheCommand(EnvDefaultCommand):
    """Set ``TORCHINDUCTOR_CACHE_DIR`` at the top of the entry function."""

    DESCRIPTION = "persist compile caches for serving"
    action: CompileCacheAction

    def env(self) -> tuple[str, str]:
        return "TORCHINDUCTOR_CACHE_DIR", self.action.dir
