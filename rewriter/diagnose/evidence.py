"""What one diagnosis measured or read once and shares between its rungs, the search and the planner.

Each value has one typed field here (``ctx.evidence.profile``...), set by the step that measures it
and read by the others. A field whose value may itself be None after it was read (the module that
calls ``generate``, the device the harness asked for) starts as :data:`UNREAD`, so "not read yet"
and "read: none" stay apart.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from .declared import Declared
    from .dynamo_settings import Setting
    from .own_compile import OwnCompile
    from .repeated_calls import RepeatedCall
    from .profile_data import ProfileData


class _Unread(enum.Enum):
    UNREAD = "unread"


#: The value of a field not read yet, where None is a value it may be read as.
UNREAD = _Unread.UNREAD


@dataclass
class Evidence:
    """The values a diagnosis measures once.

    Attributes:
        reference: ``(model, inputs, step)`` at the harness's reference shape
            (:meth:`.context.Context.reference`); None until built.
        eager_time: the median eager step at the reference shape, ``{"median_ms", "min_ms", "iters"}``
            in ms (:meth:`.context.Context.eager_time`); None until timed.
        profile: the profiled steps (:func:`.rungs.profile.profile_steps`), set by the ``profile``
            rung; None when it did not run or failed.
        declared: the model's own ``_repeated_blocks`` declarations (:func:`.declared.read`); None
            until read.
        blocks: the repeated blocks found in the model (:func:`.rungs.granularity.find_blocks`),
            largest first, each a dict (``cls``, ``name``, ``target``, ``modules``, ``containers``...);
            empty until read or when the model has none.
        own_parsed: the files under SRC that mention the compile setup, parsed once
            (:func:`.own_compile.parsed_setup`); None until the search reads them.
        own_regions: the compiles the program does itself (:func:`.own_compile.own_compiles`);
            None until read.
        own_off: the program's compile calls that pass ``disable=True``
            (:func:`.own_compile.off_compiles`); None until read.
        own_standin: the program's one whole-model compile the harness does not run, measured
            through stand-ins (:func:`.own_candidates.standin`); None when there is none.
        own_standin_path: ``(path, why)``: the regional form of that stand-in's call
            (:func:`.own_candidates.regional_path`), or ``(None, why not)`` where that call is
            measured as a whole-model compile only; None when not set.
        model_calls: the functions of SRC the harness's model function calls, each with the chain
            of calls from it (:func:`.own_candidates.model_function_calls`); None until read.
        own_compiled_modules: the reference model's modules that carry a compile
            (:func:`rewriter.engine.watch.compiled_modules`); None until read.
        own_raised: where the program's own compile raised and the ladder set it aside
            (:func:`.own_raised.set_aside`): ``{"message", "path", "line", "hint"}``;
            None where it did not.
        compiles_itself: whether one eager step of the model compiled a graph by itself
            (:func:`.as_run.compiles_itself`); None until measured.
        config_twins: ``twin candidate -> base candidate`` for the ``dynamo_config`` twins
            (:func:`.kinds.config.with_config`), judged after measurement.
        value_guard_twins: ``twin -> base`` for the ``allow_unspec_int_on_nn_module`` twins
            (:mod:`.value_guards`).
        branch_twins: ``twin -> base`` for the ``+branchless`` twins (:mod:`.kinds.branchless`).
        generates: the outermost module whose ``generate`` the reference step called, None when
            none did (:func:`.generation.generating_module`); :data:`UNREAD` until measured.
        repeated_calls: the functions of SRC Dynamo inlined many times into one traced frame at the
            reference shape's first call, as the recompiles rung compiles the model
            (:func:`.repeated_calls.read`); None until that rung ran.
        stopped_at: the rung the ladder stopped at on a fragmentation OOM; None when every rung ran.
        requested_device: the harness's own ``device`` before it was resolved (None: unset), for
            the validation report's environment; :data:`UNREAD` when no diagnose run set it.
        dynamo_config: the knobs of ``torch._dynamo.config`` the program's run set away from torch's
            defaults, read after setup (:func:`.dynamo_settings.read`); None until read.
        traced_sdpa_masks: the mask each SDPA call got in the graph-break rung's trace of the model
            (:func:`.sdpa_masks.traced_masks`: a layout, or None for no mask), in graph order; for a
            program that compiles itself, of the model under its wrapper traced whole
            (:func:`.rungs.graph_breaks._whole_trace_masks`, only where its modules call a
            transformers mask builder); None where no such trace ran or it failed.
        eager_sdpa_masks: the mask each SDPA call got in one eager forward at the reference shape
            (:func:`.sdpa_masks.eager_masks`), read once where a trace passed one; None until read.
        program_compiles: SRC's whole-model compile calls of a class instance, walked once for every
            plan diagnose rewrites (:class:`rewriter.rewrite.program_compiles.ProgramCompiles`,
            :func:`.search.src_reading`); None until read.
    """

    reference: tuple[Any, Any, Any] | None = None
    eager_time: dict[str, float] | None = None
    profile: ProfileData | None = None
    declared: Declared | None = None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    own_parsed: list[tuple[str, Any, Any]] | None = None
    own_regions: list[OwnCompile] | None = None
    own_off: list[OwnCompile] | None = None
    own_standin: OwnCompile | None = None
    own_standin_path: tuple[str | None, str] | None = None
    own_compiled_modules: list[dict[str, Any]] | None = None
    model_calls: dict[str, tuple[str, ...]] | None = None
    own_raised: dict[str, Any] | None = None
    compiles_itself: bool | None = None
    config_twins: dict[str, str] = field(default_factory=dict)
    value_guard_twins: dict[str, str] = field(default_factory=dict)
    branch_twins: dict[str, str] = field(default_factory=dict)
    generates: Union[Any, None, _Unread] = UNREAD
    repeated_calls: list[RepeatedCall] | None = None
    stopped_at: str | None = None
    requested_device: Union[str, None, _Unread] = UNREAD
    program_compiles: Any = None
    dynamo_config: list[Setting] | None = None
    traced_sdpa_masks: list[dict[str, Any] | None] | None = None
    eager_sdpa_masks: list[dict[str, Any] | None] | None = None


def where_raised(raised: dict[str, Any]) -> str:
    """`` at path:line`` of the own-compile evidence (:attr:`Evidence.own_raised`), or
    empty where it has no line."""
    return f" at {raised['path']}:{raised['line']}" if raised.get("path") and raised.get("line") else ""
