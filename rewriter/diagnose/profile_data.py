"""What one profiled run measured (:class:`ProfileData`, with its :class:`OpEvent` and
:class:`KernelEvent` rows): the profile rung (:mod:`.rungs.profile`) fills it and later rungs read
it from :class:`~.evidence.Evidence`. Times in µs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OpEvent:
    """A CPU operator (``aten::...`` or a runtime call like ``cudaLaunchKernel``), in µs."""

    name: str
    self_cpu_us: float
    start_us: float
    end_us: float
    id: int
    function: str | None = None  # innermost user function (file.py::Qual) from the Python stack


@dataclass
class KernelEvent:
    """A device activity (kernel, memcpy, memset) in µs, with the aten op that launched it."""

    name: str
    start_us: float
    dur_us: float
    stream: int
    kind: str  # kernel | memcpy | memset
    parent_op: str | None = None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class ProfileData:
    """What one profiled run measured (per-step averages unless named ``_total``).

    Attributes:
        device: ``cuda`` or ``cpu``.
        steps: profiled steps.
        windows: (start_us, end_us) of each step range.
        ops: CPU operators inside the step windows.
        kernels: device activities inside the step windows (CUDA only).
        blocks: ``{block name: {"cpu_us": total, "device_us": total}}`` summed over steps.
        blocks_unranged: blocks with no range although the program compiled graphs: they ran
            inside its compiled frames.
        trace: the Chrome trace path.
        profiled_step_ms: mean wall time of a profiled step (includes profiler overhead).
    """

    device: str
    steps: int
    windows: list[tuple[float, float]]
    ops: list[OpEvent] = field(default_factory=list)
    kernels: list[KernelEvent] = field(default_factory=list)
    blocks: dict[str, dict[str, float]] = field(default_factory=dict)
    trace: str | None = None
    profiled_step_ms: float = 0.0
    #: blocks given a range that recorded none: they ran inside a compiled frame of the program's
    #: own (the hooks add nothing there), so their time is not split out of the step.
    blocks_unranged: list[str] = field(default_factory=list)

    @property
    def step_us(self) -> float:
        """Mean step window (host wall, device synchronised at the end), µs."""
        return sum(e - s for s, e in self.windows) / max(1, len(self.windows))

    @property
    def self_cpu_us(self) -> float:
        """Summed self-CPU time of operators per step, µs."""
        return sum(o.self_cpu_us for o in self.ops) / max(1, self.steps)

    @property
    def self_device_us(self) -> float:
        """Summed self-device time per step, µs (0 on CPU)."""
        return sum(k.dur_us for k in self.kernels) / max(1, self.steps)
