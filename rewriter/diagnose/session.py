"""The model under diagnosis: build it from the harness, run one step, time steps, guard time.

A *step* is one call of the model on the inputs (``inference``: under ``torch.no_grad``) or one
forward + backward + SGD step (``training``; the loss is :func:`rewriter.harness.scalar_loss`, as
validate's: a scalar output itself, else the sum of ``mean(x**2)`` over the floating outputs).
Every call into the user's code goes through :meth:`Session.guard`, which turns an exception,
a non-tensor result, an out-of-memory error or a timeout into a :class:`HarnessFailure` that
names the rung and the harness callable; bad configuration (:class:`rewriter.errors.ConfigError`)
is no harness failure and stays itself.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StackpartError
from ..harness import LoadedHarness, call_model, on_sys_path, scalar_loss
from ..signals import Terminated
from ..tracebacks import headline, user_site


#: What to try where the program's own compile raised, by phrases of Dynamo's message or its
#: exception's type name (its own hints: torch.compiler docs, "Dealing with recompilations" and
#: "Working with graph breaks"), first match first.
OWN_COMPILE_HINTS = (
    (("data-dependent",), "a Python branch on a value Dynamo cannot know while tracing: fullgraph=False on that "
                          "compile lets Dynamo break the graph there; torch.cond, or the branch moved out of the "
                          "compiled code, keeps one graph; where the value is a size, dynamic=False compiles one "
                          "graph per shape"),
    (("fullgraph", "Unsupported"), "fullgraph=False on that compile lets Dynamo break the graph there instead of raising"),
)


def _from_compile(exc: "HarnessFailure") -> bool:
    """Whether the step's exception came from Dynamo or its backend (``torch._dynamo`` and
    ``torch._inductor`` exception types), where stance switching exists (torch >= 2.6)."""
    import torch

    cause = exc.__cause__
    return (cause is not None and type(cause).__module__.startswith(("torch._dynamo", "torch._inductor"))
            and hasattr(torch.compiler, "set_stance"))


def off_failure(retry: Callable[[], Any], src: Path) -> str | None:
    """None where ``retry`` (a step) runs under ``torch.compiler.set_stance("force_eager")``; else
    what it raised there, ``Type: message (file.py:line)``."""
    import torch

    try:
        with torch.compiler.set_stance("force_eager"):
            retry()
    except Exception as exc:  # noqa: BLE001 - the model's own failure, said beside the compile's
        exc.__context__ = None  # raised while the compile's failure was handled: its line is not this one
        path, line, _ = user_site(exc, src)
        return headline(exc) + (f" ({path}:{line})" if path and line else "")
    return None


@dataclass(frozen=True)
class OffRun:
    """A failed step run again under ``torch.compiler.set_stance("force_eager")`` (:func:`off_failure`).

    Attributes:
        failure: None where it ran; else what it raised there, ``Type: message (file.py:line)``.
    """

    failure: str | None


def own_compile_raised(exc: "HarnessFailure", retry: Callable[[], Any], src: Path | None = None,
                       off: OffRun | None = None) -> str | None:
    """Why a failed step is the program's own compile's doing, or None: the exception came from
    Dynamo or its backend (:func:`_from_compile`) and ``retry``, the same step under
    ``torch.compiler.set_stance("force_eager")``, runs. ``off`` is that run where it was made
    already (:attr:`HarnessFailure.off`), so the step is not run again. The sentence says what that
    shows and what to try (:data:`OWN_COMPILE_HINTS`), since stackpart measures the program as it
    runs and so cannot measure one that raises."""
    if not _from_compile(exc):
        return None
    failure = off.failure if off is not None else off_failure(retry, src or Path.cwd())
    if failure is not None:  # the model itself raises too: the original failure stands
        return None
    return _compile_raised(exc.__cause__)


def compile_hint(cause: BaseException) -> str | None:
    """What to try where the program's own compile raised ``cause`` (:data:`OWN_COMPILE_HINTS`), or None."""
    text = str(cause)
    return next((h for keys, h in OWN_COMPILE_HINTS if any(k in text or k == type(cause).__name__ for k in keys)), None)


def _compile_raised(cause: BaseException) -> str:
    """The sentence of :func:`own_compile_raised`, with the hint for ``cause``."""
    hint = compile_hint(cause)
    return ("the program's own torch.compile raised it: the same step runs with compilation off "
            "(torch.compiler.set_stance('force_eager')), so the model is sound and its compile is not; stackpart "
            "measures the program as it runs, its compile included, so fix that compile first"
            + (f" ({hint})" if hint else ""))


class HarnessFailure(Exception):
    """The harness could not be run: the diagnosis stops at this rung (fatal).

    Attributes:
        rung: the rung that was running.
        callable: which harness callable failed (``build_model()``, ``make_inputs(batch=8)``,
            or the model's forward).
        message: what happened, one line.
        path, line: the user's file and line where known.
        oom: for a CUDA out-of-memory error, what its message says (:func:`.oom.classify`:
            request, reserved but unallocated, fragmentation or capacity); else None.
        off: the failed step run again with compilation off (:meth:`Session.run_as_the_program_runs`),
            or None where it was not.
    """

    def __init__(
        self, rung: str, callable: str, message: str, path: str | None = None, line: int | None = None,
        oom: dict[str, Any] | None = None, note: str | None = None, off: OffRun | None = None,
    ):
        super().__init__(f"rung {rung}: {callable}: {message}")
        self.rung, self.callable, self.message, self.path, self.line, self.oom = rung, callable, message, path, line, oom
        self.note, self.off = note, off

    @property
    def where(self) -> str:
        """`` (model.py:12)``, `` (model.py:10, in Net.forward, which Dynamo was compiling)`` or ``""``."""
        if not (self.path and self.line):
            return ""
        return f" ({self.path}:{self.line}{', ' + self.note if self.note else ''})"

    def describe(self) -> str:
        """One line: the rung, the harness callable, what happened and the user's file:line."""
        return f"rung {self.rung}: {self.callable}: {self.message}{self.where}"


class _Timeout(BaseException):
    """Raised inside user code by the alarm (BaseException: user ``except Exception`` won't eat it)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_Timeout` in the main thread after ``seconds`` (SIGALRM; POSIX only).

    A no-op off the main thread or where SIGALRM is missing. It interrupts Python code (a loop,
    a ``sleep``), not one long C call; the CUDA case of a stuck kernel is out of its reach.
    """
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "SIGALRM")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def tensor_leaves(value: Any) -> list[Any]:
    """Every tensor in a (nested) tuple/list/dict/dataclass-like output (HF ModelOutput too)."""
    import torch
    from torch.utils import _pytree as pytree

    if hasattr(value, "to_tuple") and callable(value.to_tuple):
        value = value.to_tuple()
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def _user_line(exc: BaseException, src: Path) -> tuple[str | None, int | None]:
    path, line, _ = user_site(exc, src)
    return path, line


@dataclass
class Session:
    """One harness, built once per shape, with the rung currently running.

    Attributes:
        harness: the loaded harness.
        timeout_s: limit for one guarded call into user code (seconds).
        rung: the rung now running (for error messages).
    """

    harness: LoadedHarness
    timeout_s: float = 120.0
    rung: str = "setup"
    _models: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self):  # noqa: ANN201 - the Harness model
        return self.harness.spec

    @property
    def src(self) -> Path:
        return Path(self.harness.src)

    @property
    def cuda(self) -> bool:
        return self.spec.device.startswith("cuda")

    @property
    def training(self) -> bool:
        return self.spec.mode == "training"

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    # -- guarded calls -------------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Run user code: map failures to :class:`HarnessFailure` naming this rung and ``what``;
        a :class:`~rewriter.errors.ConfigError` (the harness configuration names a method the
        built model lacks) passes through as it is."""
        import torch

        try:
            with time_limit(self.timeout_s):
                yield
        except _Timeout:
            raise HarnessFailure(
                self.rung, what, f"did not finish within {self.timeout_s:g} s (timeout; hung?)"
            ) from None
        except (HarnessFailure, ConfigError):  # a ConfigError is bad input, not the user's code failing
            raise
        except StackpartError as exc:
            raise HarnessFailure(self.rung, what, exc.message, exc.path, exc.line) from exc
        except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
            from .oom import classify, describe

            oom = classify(str(exc)) if isinstance(exc, torch.cuda.OutOfMemoryError) else None
            said = describe(oom) if oom else (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            path, line = _user_line(exc, self.src)
            raise HarnessFailure(self.rung, what, f"ran out of memory: {said}", path, line, oom=oom) from exc
        except Terminated:  # the CLI's SIGTERM handler (exit 143): not the user's code
            raise
        except SystemExit as exc:
            # sys.exit() in the user's code (argparse's parse_args on stackpart's own argv, say):
            # a harness failure with its line, not a silent exit with the program's code
            path, line, note = user_site(exc, self.src)
            raise HarnessFailure(self.rung, what, f"called sys.exit({exc.code!r})", path, line, note=note) from None
        except Exception as exc:  # the user's code: any exception is a harness failure
            path, line, note = user_site(exc, self.src)
            raise HarnessFailure(self.rung, what, f"raised {headline(exc)}", path, line, note=note) from exc

    def forward_name(self) -> str:
        """The step's call as errors name it: ``build_model() model forward``, or with
        ``harness.call`` the method (``build_model() model .inverse``)."""
        if self.spec.call is not None:
            return f"{self.spec.model}() model .{self.spec.call}"
        return f"{self.spec.model}() model forward"

    def _build_model(self) -> Any:
        """The harness's model on its device. On a GPU it is constructed there (parameter
        initialisation on the device, not the host: seconds for a 0.2B model,
        :func:`rewriter.harness.build_model`; the measurement children do the same), then the
        caching allocator's blocks left by the construction (the model in float32 before its
        cast) are released and the peak statistics reset, so the memory rung reads the model as
        the program holds it. Its random values differ from a host build's: nothing in this
        process is compared with another process's model, which loads the reference's saved
        weights."""
        from ..harness import build_model

        import torch

        model, _ = build_model(self.harness, construct_on=self.spec.device if self.cuda else None)
        self.sync()
        if self.cuda and torch.cuda.is_initialized():  # never initialises CUDA itself
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return model

    def build(self, shape: dict[str, int] | None = None, *, as_setup: bool = False) -> tuple[Any, Any]:
        """Build (model, inputs) for ``shape``; the model is built once and reused.

        ``as_setup``: the inputs are built as the first call's are (:func:`rewriter.harness.build_inputs`:
        an error says ``harness.inputs: make_inputs(batch=3) raised ...`` at the user's line), for
        :meth:`check_shapes`, whose errors read as setup's.

        Raises:
            HarnessFailure: a callable raised, returned the wrong kind, or inputs hold no tensor.
        """
        from ..harness import build_inputs

        shape = dict(self.spec.shapes[0] if shape is None else shape)
        args = ", ".join(f"{k}={v}" for k, v in shape.items())
        first = "model" not in self._models
        if first:
            with self.guard(f"{self.spec.model}()"):  # the callable that raised, and only it, is named
                self._models["model"] = self._build_model()
        with self.guard(f"{self.spec.inputs}({args})"):
            inputs = build_inputs(self.harness, shape) if first or as_setup else self.inputs(shape)
        if not tensor_leaves(inputs):
            raise HarnessFailure(
                self.rung, f"{self.spec.inputs}({args})", "returned no tensors (expected a tensor, tuple or dict of tensors)"
            )
        return self._models["model"], inputs

    def replace_model(self, model: Any) -> None:
        """Use ``model`` from now on where :meth:`build` returned the harness's (the ladder's model
        with the program's own compile set aside, :func:`.own_raised.set_aside`)."""
        self._models["model"] = model

    def check_shapes(self) -> None:
        """One eager step (see module docstring) at each harness shape after the first, in order,
        so that a harness that raises only at a later shape stops the diagnosis at setup, before
        the ladder's rungs, as one that raises at the first does. (The first shape is built by
        setup and first run by the first rung, whose failure is fatal too.) The later shapes are
        otherwise first run by the compile rungs, whose failures do not stop the ladder, and the
        search would then fail on them.

        Raises:
            HarnessFailure: at the rung now running (``setup``), naming the callable that raised
                with the shape (``make_inputs(batch=3)``, ``... model forward at {'batch': 3}``) and
                the user's file:line.
        """
        for shape in self.spec.shapes[1:]:
            model, inputs = self.build(shape, as_setup=True)
            what = f"{self.forward_name()} at {dict(shape)}"
            self.run_as_the_program_runs(self.step_fn(model, inputs, what), what)

    def inputs(self, shape: dict[str, int]) -> Any:
        from ..harness import _to, torch_dtype

        with on_sys_path(self.src):
            raw = self.harness.make_inputs(**shape)
        if not isinstance(raw, (tuple, list, dict)):
            raw = (raw,)
        return _to(raw, self.spec.device, torch_dtype(self.spec))

    def step_fn(self, model: Any, inputs: Any, name: str | None = None) -> Callable[[], Any]:
        """A zero-argument callable running one step (see module docstring), checking outputs;
        ``name`` is the forward as its errors name it (default :meth:`forward_name`; check_shapes
        adds the shape, ``... model forward at {'batch': 3}``)."""
        import torch

        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-6) if self.training else None
        name = name or self.forward_name()

        def step() -> Any:
            if opt is None:
                with torch.no_grad():
                    out = call_model(model, inputs, self.spec.call)
            else:
                out = call_model(model, inputs, self.spec.call)
            leaves = tensor_leaves(out)
            if not leaves:
                raise HarnessFailure(
                    self.rung, name, f"returned {type(out).__name__} with no tensors (expected tensors)"
                )
            if opt is not None:
                if not any(t.is_floating_point() and t.requires_grad for t in leaves):
                    raise HarnessFailure(self.rung, name, "training mode: no output requires grad")
                scalar_loss(out).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return out

        return step

    def run(self, step: Callable[[], Any], what: str | None = None) -> Any:
        """Run one guarded step and wait for the device."""
        with self.guard(what or self.forward_name()):
            out = step()
            self.sync()
        return out

    def run_as_the_program_runs(self, step: Callable[[], Any], what: str | None = None) -> Any:
        """:meth:`run` for a step where only the program's own compiles are live (setup's, no
        rung's instrumentation).

        Raises:
            HarnessFailure: the step raised; where the exception came from Dynamo or its backend
                and the same step runs with compilation off, the message says that the program's
                own ``torch.compile`` raised it, and what to try (:func:`own_compile_raised`).
        """
        try:
            return self.run(step, what)
        except HarnessFailure as exc:
            if not _from_compile(exc):
                raise
            off = off_failure(lambda: (step(), self.sync()), self.src)
            said = (_compile_raised(exc.__cause__) if off is None else
                    f"with compilation off (torch.compiler.set_stance('force_eager')) the model raises too: {off}; "
                    "that failure is the model's own, and comes first")
            raise HarnessFailure(exc.rung, exc.callable, f"{exc.message}; {said}", exc.path, exc.line, note=exc.note,
                                 off=OffRun(off)) from exc

    def time(self, step: Callable[[], Any], *, warmup: int = 2, min_s: float = 0.3, max_iters: int = 50, min_iters: int = 3) -> dict[str, float]:
        """Step time in ms over enough runs to fill ``min_s`` (at least ``min_iters``).

        Returns:
            ``{"median_ms", "min_ms", "iters"}``. CUDA: synchronised wall time per step (the
            device finishes before the clock stops).
        """
        return self.time_many([step], warmup=warmup, min_s=min_s, max_iters=max_iters, min_iters=min_iters)[0]

    def time_many(self, steps: list[Callable[[], Any]], *, warmup: int = 2, min_s: float = 0.3, max_iters: int = 50, min_iters: int = 3) -> list[dict[str, float]]:
        """Time several steps interleaved (round-robin), so a noisy phase of a shared machine hits
        them all alike. Warm-up runs each step ``warmup`` times and then until ``min_s / 3`` has
        passed (first calls pay lazy initialisation and thread-pool start-up)."""
        with self.guard(self.forward_name()):
            t_warm = time.perf_counter() + min_s / 3
            n = 0
            while n < warmup or (time.perf_counter() < t_warm and n < 10):
                for step in steps:
                    step()
                self.sync()
                n += 1
            times: list[list[float]] = [[] for _ in steps]
            t_end = time.perf_counter() + min_s * len(steps)
            while len(times[0]) < min_iters or (time.perf_counter() < t_end and len(times[0]) < max_iters):
                for i, step in enumerate(steps):
                    t0 = time.perf_counter()
                    step()
                    self.sync()
                    times[i].append((time.perf_counter() - t0) * 1e3)
        return [{"median_ms": statistics.median(t), "min_ms": min(t), "iters": len(t)} for t in times]

    def model(self) -> Any:
        return self.build()[0]
