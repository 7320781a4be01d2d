"""State shared by the rungs of one diagnosis: the session, options, and results so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..plan import Amortization
from .evidence import Evidence
from .result import RungResult
from .session import Session


@dataclass
class Context:
    """What a rung may read.

    Attributes:
        session: the harness session (model, inputs, timing, guards).
        out_dir: where the report, charts and trace go.
        backend: the ``torch.compile`` backend for measured compiles (``inductor`` on CUDA;
            ``eager``/``aot_eager`` on CPU to keep tests fast: those cannot speed up, so the
            search forces them on every candidate and measures failures, not gains).
        amortization: the deployment (runs, restarts) the compile cost must pay back over.
        results: rung results so far, by rung name.
        evidence: values measured once and shared (:class:`.evidence.Evidence`: profile, eager time,
            blocks, the program's own compiles...).
        entry: ``file.py::func`` the user named with ``--entry`` (the program's entry point,
            where process-level actions such as ``allocator`` go); None when not given.
        site: ``file.py::func`` the user named with ``--site``: the function under SRC that
            returns the model, where actions on library classes are applied; None: the harness's
            model function.
        overlap: ``--no-overlap`` unset: the search's eager reference may overlap the first
            candidate's cold phase (:attr:`rewriter.engine.options.Options.overlap`).
        pin: ``--pin``, where the search's timed processes run (:attr:`rewriter.engine.options.Options.pin`).
        cold_parallel: ``--cold-parallel``, the candidates' cold phases at a time; None: 2 on a
            GPU host with >= 8 CPUs, else 1 (:attr:`rewriter.engine.options.Options.parallel_cold`).
        steps: profiled steps (``--steps``, :mod:`.rungs.profile`).
        contended: ``--host both`` (the default): on CUDA the search also times each candidate with
            its host core contended and decides on both conditions
            (:attr:`rewriter.engine.options.Options.contended`); ``--host quiet``: False.
    """

    session: Session
    out_dir: Path
    backend: str = "inductor"
    amortization: Amortization = field(default_factory=lambda: Amortization(runs=1_000_000, restarts=1))
    amortization_assumed: bool = True
    entry: str | None = None
    site: str | None = None
    overlap: bool = True
    pin: str = "shared"
    cold_parallel: int | None = None
    contended: bool = True
    steps: int = 3
    results: dict[str, RungResult] = field(default_factory=dict)
    evidence: Evidence = field(default_factory=Evidence)

    def measured(self, name: str) -> dict[str, Any]:
        """The measurement of rung ``name`` if it ran ok, else ``{}``."""
        r = self.results.get(name)
        return r.measurement if r is not None and r.ok else {}

    def reference(self) -> tuple[Any, Any, Any]:
        """(model, inputs, step) at the reference shape, built once."""
        if self.evidence.reference is None:
            model, inputs = self.session.build()
            self.evidence.reference = (model, inputs, self.session.step_fn(model, inputs))
        return self.evidence.reference

    def eager_time(self) -> dict[str, float]:
        """Median eager step time at the reference shape (ms), measured once."""
        if self.evidence.eager_time is None:
            _, _, step = self.reference()
            self.evidence.eager_time = self.session.time(step)
        return self.evidence.eager_time
