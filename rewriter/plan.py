"""plan.yaml, version 1: the pydantic schema and loading with ``file:line`` errors.

The schema is one :class:`Plan` whose ``actions`` are a discriminated union on ``action``
(``compile``, ``disable``, ``mark_dynamic``, ``bucket``, ``kernel``, ``allocator``,
``compile_cache``, ``dynamo_config``, the advisory ``distributed``, which ``rewrite`` reports
but never writes, and transformers' own levers ``generation`` and ``attention``, on library
targets only). ``stackpart plan schema`` prints :func:`json_schema`. Every model forbids
unknown fields so a typo is an error naming the nearest field, not a silently ignored key; a value
of the wrong kind is ``field: expected X, got Y`` with the near choices (``mode: inferance``).
Cross-action rules that need the source (a disable inside a ``fullgraph`` region, ...) live in
:mod:`rewriter.consistency`.
"""

from __future__ import annotations

import datetime
import functools
import json
import keyword
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, ValidationInfo, field_validator, model_serializer, model_validator

from .errors import StackpartError, near_names, near_path

#: ``path/to/file.py::Qual.name`` — pytest-style node ids, relative to SRC.
TARGET_RE = re.compile(r"^(?P<file>[^:]+\.py)::(?P<qual>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
#: ``package.module:Qual.name`` — a class or function of an installed package, by import path (the
#: ``module:attr`` form of entry points, PEP 621 / setuptools). Never edited: the plan's ``site``
#: applies it at run time (DESIGN.md, "Library models").
LIBRARY_TARGET_RE = re.compile(
    r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<qual>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$"
)
#: Actions a plan may point at an installed library (applied from the ``site``); the others
#: write code into a file, which a library target has none of under SRC.
LIBRARY_ACTIONS = frozenset({"compile", "disable", "mark_dynamic", "generation", "attention"})
_IDENT_RE = re.compile(r"[A-Za-z_]\w*\Z")  # \Z, not $: "$" also matches before a trailing newline

#: Actions that change what runs (numerics or kernels); written only with ``--unsafe`` or after a
#: passing validation (DESIGN.md, "What each action writes").
UNSAFE_ACTIONS = frozenset({"bucket", "kernel", "branchless"})
#: Actions that write nothing: launcher or wrapper settings a person applies where the model is
#: wrapped. ``rewrite`` lists them as not written, with the reason.
ADVISORY_ACTIONS = frozenset({"distributed"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_target(value: str) -> str:
    if not TARGET_RE.match(value) and not LIBRARY_TARGET_RE.match(value):
        raise ValueError(
            "expected a target like 'model.py::Block', 'model.py::Block.forward', "
            "'pkg/model.py::route', or an installed library's class by import path like "
            f"'transformers.models.llama.modeling_llama:LlamaDecoderLayer', got {_quoted(value)}"
        )
    return value


def _check_site(value: str | None) -> str | None:
    if value is not None and not TARGET_RE.match(value):
        raise ValueError(
            "expected the function under SRC that returns the model, like 'train.py::build' or "
            f"'harness.py::build_model', got {_quoted(value)}"
        )
    return value


def _is_identifier(value: str) -> bool:
    """Whether ``value`` can name a parameter or local: Python's own rule (``str.isidentifier``,
    non-ASCII letters included, PEP 3131), not a keyword."""
    return value.isidentifier() and not keyword.iskeyword(value)


def _check_ident(value: str) -> str:
    if not _is_identifier(value):
        raise ValueError(f"expected a Python identifier, got {_quoted(value)}")
    return value


class Harness(_Strict):
    """How diagnose and validate build and feed the model (``rewrite`` ignores it).

    ``file`` is relative to SRC and defines ``model() -> nn.Module`` and
    ``inputs(**shape) -> tuple | dict`` of tensors. ``shapes`` is the realistic input variety;
    the first entry is the reference shape.
    """

    file: str
    model: str = "build_model"
    inputs: str = "make_inputs"
    shapes: list[dict[str, int]] = Field(default_factory=lambda: [{}])
    mode: Literal["inference", "training"] = "inference"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str | None = Field(
        default=None,
        description="cpu, cuda or cuda:N; unset: cuda when torch sees a CUDA device, else cpu "
        "(rewriter.harness.resolve_device, at run time; the reports record which was used)",
    )

    _ident = field_validator("model", "inputs")(_check_ident)

    @field_validator("file")
    @classmethod
    def _file(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if not value.endswith(".py") or value.startswith("/") or re.match(r"^[A-Za-z]:", value) or ".." in parts:
            raise ValueError(f"expected a .py file relative to SRC (no '..', not absolute), got {_quoted(value)}")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(cpu|cuda(:\d+)?)$", value):
            raise ValueError(f"expected 'cpu', 'cuda' or 'cuda:N', got {_quoted(value)}")
        return value

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, value: list[dict[str, int]]) -> list[dict[str, int]]:
        if not value:
            raise ValueError("expected at least one shape (the reference shape)")
        for shape in value:
            for key, size in shape.items():
                if not _is_identifier(key):
                    raise ValueError(f"expected shape names that are Python identifiers (they are "
                                     f"keyword arguments of the inputs function), got {_quoted(key)}")
                if not 0 <= size <= MAX_SIZE:
                    raise ValueError(f"{key}: expected a size from 0 to 2**63-1, got {size}")
        return value


class Amortization(_Strict):
    """The deployment the compile cost must pay back over (the amortization rule).

    ``(t_eager - t_compiled) * runs > t_compile * N_compiles`` with
    ``N_compiles = shape buckets * restarts * recompiles`` (partitioning-the-stack, "How do you
    decide whether the compile time is worth it?").
    """

    runs: int = Field(ge=1, description="expected calls over the deployment's life (N_runs)")
    restarts: int = Field(
        default=1, ge=1, description="process starts without persisted compile caches"
    )


#: Backends ``torch.compile`` knows by name: ``torch._dynamo.list_backends(exclude_tags=())`` on
#: torch 2.13 without its ``*_TESTING_ONLY`` entries, plus names that torch 2.6-2.12 or common
#: packages register (``onnxrt``; ``tensorrt``/``torch_tensorrt`` from Torch-TensorRT, ``ipex``
#: from Intel's extension). tests/test_plan_values.py checks the list against the installed torch.
KNOWN_BACKENDS = frozenset({
    "aot_eager", "aot_eager_decomp_partition", "aot_eager_decomp_partition_crossref",
    "aot_eager_decomp_partition_with_mode", "aot_eager_default_partitioner", "aot_ts", "cudagraphs",
    "dynamo_accuracy_minifier_backend", "dynamo_minifier_backend", "eager", "eager_debug",
    "eager_noexcept", "inductor", "invoke_subgraph", "openxla", "openxla_eval", "pre_dispatch_eager",
    "ts", "tvm", "onnxrt", "tensorrt", "torch_tensorrt", "ipex",
})
#: The largest dimension index a plan may name: a sanity bound that turns a typo (``dim:
#: 10**30``) into an error at its line. torch itself sets no rank limit here; ATen's CUDA kernels
#: handle at most 25 dims (``MAX_TENSORINFO_DIMS``), so no real input comes near 63.
MAX_DIM = 63
#: Sizes are int64 in torch; a larger literal overflows when the written code runs.
MAX_SIZE = 2**63 - 1


class CompileOptions(_Strict):
    """Arguments of ``torch.compile``; only values that differ from torch's defaults are written.

    ``backend`` must be one of :data:`KNOWN_BACKENDS` (a typo would write code that fails at its
    first call with ``InvalidBackend``) unless ``custom_backend: true`` says it is registered by
    the user's own code (``torch._dynamo.register_backend``).
    """

    fullgraph: bool = False
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = (
        "default"
    )
    dynamic: bool | None = None
    backend: str = "inductor"
    custom_backend: bool = Field(
        default=False, description="backend is registered by the user's code, not known to torch"
    )

    @model_validator(mode="after")
    def _backend_known(self) -> "CompileOptions":
        backend, value = self.backend, self.custom_backend
        if not value and backend not in KNOWN_BACKENDS:
            hint = near_names(backend, sorted(KNOWN_BACKENDS))
            raise ValueError(
                f"unknown backend {backend!r}; expected one torch.compile knows (e.g. 'inductor', "
                "'cudagraphs', 'eager', 'aot_eager')" + (f" ({hint})" if hint else "")
                + ", or set custom_backend: true for one your code registers"
            )
        if value and not _IDENT_RE.match(backend):
            raise ValueError(f"custom backend must be a registered name (an identifier), got {_quoted(backend)}")
        return self

    def non_default(self) -> dict[str, Any]:
        """The options to write, in a stable order (fullgraph, dynamic, mode, backend)."""
        out: dict[str, Any] = {}
        if self.fullgraph:
            out["fullgraph"] = True
        if self.dynamic is not None:
            out["dynamic"] = self.dynamic
        if self.mode != "default":
            out["mode"] = self.mode
        if self.backend != "inductor":
            out["backend"] = self.backend
        return out


class _Action(_Strict):
    target: str
    why: str | None = Field(default=None, description="the evidence that chose this action")

    _target = field_validator("target")(_check_target)

    @model_validator(mode="after")
    def _library_allowed(self) -> "_Action":
        if self.library and self.action not in LIBRARY_ACTIONS:  # type: ignore[attr-defined]
            raise ValueError(
                f"target: {self.action} writes code into a file under SRC; an installed library's "  # type: ignore[attr-defined]
                f"{self.target!r} has none (only {', '.join(sorted(LIBRARY_ACTIONS))} may name a "
                "library target, applied from the plan's site)"
            )
        return self

    @property
    def library(self) -> bool:
        """Whether the target is an installed package's class or function (``module:Qual``)."""
        return LIBRARY_TARGET_RE.match(self.target) is not None

    @property
    def file(self) -> str:
        """The target's file relative to SRC (a SRC target only; see :attr:`library`)."""
        return TARGET_RE.match(self.target).group("file")  # type: ignore[union-attr]

    @property
    def module(self) -> str:
        """The target's module import path (a library target only)."""
        return LIBRARY_TARGET_RE.match(self.target).group("module")  # type: ignore[union-attr]

    @property
    def qualname(self) -> str:
        match = TARGET_RE.match(self.target) or LIBRARY_TARGET_RE.match(self.target)
        return match.group("qual")  # type: ignore[union-attr]

    @property
    def safe(self) -> bool:
        return self.action not in UNSAFE_ACTIONS  # type: ignore[attr-defined]


#: The keyword arguments an ``own_call`` edit may set on the program's own ``torch.compile``, in the
#: order new ones are written; a value equal to torch's default removes the keyword instead.
OWN_CALL_KEYS = ("fullgraph", "dynamic", "mode", "backend")
OWN_CALL_DEFAULTS: dict[str, Any] = {"fullgraph": False, "dynamic": None, "mode": "default", "backend": "inductor"}
OWN_CALL_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class OwnCall(_Strict):
    """The ``own_call:`` of a ``compile`` action: the keyword arguments of the program's own
    ``torch.compile`` to set, limited to :data:`OWN_CALL_KEYS`; only the keys given change (a value
    equal to torch's default removes the keyword, so ``dynamic: null`` removes ``dynamic=``). At
    least one must be given; ``fullgraph``, ``mode`` and ``backend`` take no null.
    """

    fullgraph: StrictBool | None = Field(default=None, description="true or false")
    dynamic: StrictBool | None = Field(default=None, description="true, false, or null (torch's default)")
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = None
    backend: str | None = Field(default=None, description="a backend torch.compile knows by name")
    #: Regional compilation at the call site: the whole-model call becomes one compile per repeated
    #: block, ``for block in <module>.<regional>: block.compile(<the call's keyword arguments>)``;
    #: ``compile_repeated_blocks`` calls the library's own method (diffusers' ``ModelMixin``) instead.
    regional: str | None = Field(default=None, description="the attribute path of the repeated blocks' container "
                                 "(layers, model.layers), or compile_repeated_blocks: turn the whole-model call regional")

    @field_validator("fullgraph", "mode", "backend", mode="before")
    @classmethod
    def _not_null(cls, value: object, info: ValidationInfo) -> object:
        if value is None:  # null is torch's default for dynamic only
            raise ValueError(f"expected {_OWN_CALL_EXPECTED[info.field_name]}, got null")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if not _IDENT_RE.match(value):
            raise ValueError(f"expected a backend name (an identifier), got {_quoted(value)}")
        if value not in KNOWN_BACKENDS:  # as CompileOptions: a typo fails at the first call
            hint = near_names(value, sorted(KNOWN_BACKENDS))
            raise ValueError(f"unknown backend {value!r}; expected one torch.compile knows (e.g. 'inductor', "
                             "'eager', 'aot_eager')" + (f" ({hint})" if hint else "")
                             + "; a backend your code registers: edit the call by hand")
        return value

    @field_validator("regional")
    @classmethod
    def _regional(cls, value: str | None) -> str | None:
        if value is not None and not all(_IDENT_RE.match(part) for part in value.split(".")):
            raise ValueError(f"expected an attribute path (layers, model.layers) or compile_repeated_blocks, got {_quoted(value)}")
        return value

    @model_validator(mode="after")
    def _one(self) -> "OwnCall":
        if not self.model_fields_set:
            raise ValueError("expected at least one of " + ", ".join(OWN_CALL_KEYS) + ", regional to set")
        return self

    def edits(self) -> dict[str, Any]:
        """The keyword arguments given, in :data:`OWN_CALL_KEYS` order (the order new ones are written)."""
        return {k: getattr(self, k) for k in OWN_CALL_KEYS if k in self.model_fields_set}

    @model_serializer
    def _dump(self) -> dict[str, Any]:
        # the keys given only: ``dynamic: null`` is an edit (remove ``dynamic=``), not a default to drop
        return self.edits() | ({"regional": self.regional} if self.regional is not None else {})


#: What each :class:`OwnCall` key takes, for the refusal of a null.
_OWN_CALL_EXPECTED = {"fullgraph": "true or false", "mode": "one of " + ", ".join(OWN_CALL_MODES),
                      "backend": "a backend name"}


class CompileAction(_Action):
    """Decorate the target (a function, or a class's ``forward``) with ``torch.compile``.

    ``strategy``: ``region`` (the block is its own compiled unit), ``nested``
    (``@torch.compiler.nested_compile_region`` on the block plus one ``whole`` compile of the
    model; torch >= 2.8), ``whole`` (the model's entry; the unit for CUDA graphs).

    ``own_call: {mode: reduce-overhead}``: the target already carries the program's own compile
    (``@torch.compile(...)``, or one ``torch.compile(...)``/``module.compile(...)`` call in its
    body): that call's keyword arguments are edited instead of a second compile being added
    (:mod:`rewriter.actions.own_call`; docs/design.md, "The search"). ``strategy`` then says what the program's call
    compiles (``whole`` for the model's entry), for the plan's rules.
    """

    action: Literal["compile"]
    strategy: Literal["region", "nested", "whole"] = "region"
    options: CompileOptions = Field(default_factory=CompileOptions)
    own_call: OwnCall | None = Field(
        default=None,
        description="edit the program's own torch.compile of the target (its @torch.compile, or the one "
        "torch.compile(...)/module.compile(...) call in its body) to these keyword arguments, instead of "
        "adding a second compile; only the keys named change (fullgraph, mode, dynamic, backend)",
    )

    @field_validator("own_call", mode="before")
    @classmethod
    def _own_call(cls, value: object) -> object:
        if value is None:  # given as null (`own_call:` left empty): not read as "add a compile"
            raise ValueError("expected a mapping of " + ", ".join(OWN_CALL_KEYS) + " to set, got null; "
                             "leave own_call out to add a compile instead")
        if not isinstance(value, (dict, OwnCall)):
            raise ValueError("expected a mapping of " + ", ".join(OWN_CALL_KEYS) + f" to set, got {_quoted(value)}")
        return value

    @model_validator(mode="after")
    def _own_call_alone(self) -> "CompileAction":
        if self.own_call is None:
            return self
        if self.options != CompileOptions():
            raise ValueError("own_call edits the program's own call: options (which a new decorator would take) "
                             "must be left out; put the keyword arguments to set under own_call")
        if self.strategy == "nested":
            raise ValueError("own_call edits a torch.compile call; strategy 'nested' writes nested_compile_region instead")
        if self.own_call.regional is not None and self.strategy != "region":
            raise ValueError("own_call.regional turns the program's call into regional compilation: expected strategy region")
        if self.library:
            raise ValueError("own_call edits the program's own call under SRC; an installed library's target has none")
        return self


class DisableAction(_Action):
    """Keep the target eager with ``@torch.compiler.disable`` (``recursive=False`` when asked)."""

    action: Literal["disable"]
    recursive: bool = True


class MarkDynamicAction(_Action):
    """``torch._dynamo.mark_dynamic(arg, dim, min=, max=)`` right after ``arg`` is bound.

    ``strict: false`` writes ``torch._dynamo.maybe_mark_dynamic(arg, dim)`` instead: a hint that
    Dynamo may drop when the code specialises the dim (it then recompiles per size) rather than
    raising ConstraintViolationError on the first call, as ``mark_dynamic`` does (torch
    "Dynamic shapes" docs; docs/decisions.md, "Strict and soft marks": a model whose code
    bounds the dim raises under a strict mark wider than that bound). It takes no ``min``/``max``.

    ``unbacked: true`` writes ``torch._dynamo.decorators.mark_unbacked(arg, dim)``: the dim is
    never specialised to 0 or 1, so sizes 0/1 and >= 2 share the dynamic graph where
    ``mark_dynamic`` raises at size 1 and ``maybe_mark_dynamic`` compiles a graph of its own for
    it (torch 2.13, measured with backend="eager": sizes 1, 5, 7 under one graph; Dynamo's own
    0/1-specialisation guard message names ``mark_unbacked``). It takes no ``min``/``max``
    (``mark_unbacked(t, index)`` is what torch 2.6 has; 2.13 added bounds, and a size outside them
    fails as "Guard failed on the same frame it was created", measured) and no ``strict: false``
    (that is the other call). Code that broadcasts the dim against a fixed size fails at size 1
    under it (measured: ``torch.ones(3, 5) + x``), which validation catches.
    """

    action: Literal["mark_dynamic"]
    arg: str
    dim: int = Field(ge=0, le=MAX_DIM, description="the dim index, >= 0: Dynamo ignores a negative one")
    min: int | None = Field(default=None, ge=0, le=MAX_SIZE)
    max: int | None = Field(default=None, ge=1, le=MAX_SIZE)
    strict: bool = True
    unbacked: bool = Field(
        default=False,
        description="write torch._dynamo.decorators.mark_unbacked(arg, dim): sizes 0 and 1 stay in the dynamic graph",
    )

    _arg = field_validator("arg")(_check_ident)

    @field_validator("dim", mode="before")
    @classmethod
    def _dim(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            # torch 2.13: mark_dynamic(x, -1) records index -1, which no dim ever matches, so the
            # mark is silently ignored (measured: 2 graphs for 3 sizes, automatic dynamic's).
            raise ValueError(f"expected a dim index >= 0 (Dynamo silently ignores a negative one), got {value}")
        return value

    @field_validator("max")
    @classmethod
    def _max(cls, value: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("min")
        if value is not None and low is not None and value < low:
            raise ValueError(f"expected max >= min ({low}), got {value}")
        return value

    @field_validator("strict")
    @classmethod
    def _strict(cls, value: bool, info: ValidationInfo) -> bool:
        bounds = [k for k in ("min", "max") if info.data.get(k) is not None]
        if not value and bounds:
            raise ValueError(
                f"strict: false (maybe_mark_dynamic) takes no range; remove {' and '.join(bounds)}, "
                "or keep strict: true"
            )
        return value

    @field_validator("unbacked")
    @classmethod
    def _unbacked(cls, value: bool, info: ValidationInfo) -> bool:
        if not value:
            return value
        bounds = [k for k in ("min", "max") if info.data.get(k) is not None]
        if bounds:
            raise ValueError(
                f"unbacked: true (mark_unbacked) takes no range; remove {' and '.join(bounds)} (torch 2.6's "
                "mark_unbacked(t, index) has none, and sizes 0/1 staying dynamic is what unbacked is for)"
            )
        if info.data.get("strict") is False:
            raise ValueError(
                "unbacked: true writes mark_unbacked and strict: false writes maybe_mark_dynamic; keep one of them"
            )
        target = info.data.get("target") or ""
        if "::" not in target and ":" in target:
            # an installed library's class (``module:Qual``) is marked at run time by a generated
            # pre-hook that writes mark_dynamic/maybe_mark_dynamic only: refused, not mistranslated
            raise ValueError("unbacked: true is written for a target under SRC only, not an installed library's")
        return value


class BucketAction(_Action):
    """Pad ``arg``'s ``dim`` up to the next bucket and trim tensor outputs back (unsafe)."""

    action: Literal["bucket"]
    arg: str
    dim: int = Field(ge=-MAX_DIM - 1, le=MAX_DIM, description="negative counts from the end (the helper takes dim % ndim)")
    buckets: list[Annotated[int, Field(le=MAX_SIZE)]] = Field(min_length=1)
    pad_value: int | float = 0

    _arg = field_validator("arg")(_check_ident)

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, value: list[int]) -> list[int]:
        if any(b < 1 for b in value) or sorted(set(value)) != value:
            raise ValueError(f"expected strictly increasing positive sizes, got {value}")
        return value


class KernelAction(_Action):
    """Replace calls of ``call`` inside the target with a generated Triton custom op (unsafe)."""

    action: Literal["kernel"]
    call: str
    kernel: str

    @field_validator("call")
    @classmethod
    def _call(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", value):
            raise ValueError(f"expected a dotted name like 'torch.topk', got {_quoted(value)}")
        return value


class BranchlessAction(_Action):
    """Rewrite the data-dependent ``if`` at ``line`` of the target (a file's line number, the
    ``if`` keyword's) into ``name = torch.where(cond, value, other)`` per assigned name, the form
    torch's graph-break hint for data-dependent branching recommends (:mod:`rewriter.actions.branchless`).

    Unsafe: both branches are evaluated, so a NaN/inf the dropped branch computes can reach
    gradients; written only with ``--unsafe`` or after a passing validation.
    """

    action: Literal["branchless"]
    line: int = Field(ge=1, description="the line of the `if` statement in the target's file")


class AllocatorAction(_Action):
    """Set ``PYTORCH_CUDA_ALLOC_CONF`` (default ``expandable_segments:True``) at the entry."""

    action: Literal["allocator"]
    settings: str = "expandable_segments:True"

    @field_validator("settings")
    @classmethod
    def _settings(cls, value: str) -> str:
        # PYTORCH_CUDA_ALLOC_CONF's grammar (c10/core/AllocatorConfig.h): comma-separated
        # key:value options, a value possibly a bracketed list ("roundup_power2_divisions:[256:4]").
        # The keys are checked by torch at CUDA init (they vary by version); the shape is checked here.
        option = r"[A-Za-z_]\w*:(?:\[[^\[\]]*\]|[^,\[\]\s]+)"
        if not re.fullmatch(rf"{option}(?:,{option})*", value):
            raise ValueError(
                f"expected PYTORCH_CUDA_ALLOC_CONF options like 'expandable_segments:True' or "
                f"'max_split_size_mb:128,garbage_collection_threshold:0.6', got {_quoted(value)}"
            )
        return value


class CompileCacheAction(_Action):
    """Persist Inductor's compile cache under ``dir`` (``TORCHINDUCTOR_CACHE_DIR``) at the entry."""

    action: Literal["compile_cache"]
    dir: str = ".cache/torchinductor"


#: The ``torch._dynamo.config`` keys a plan may set, each a boolean: the knobs torch's own graph-break
#: messages recommend for a break the compiled code needs, and nothing else (a whitelist: any other
#: knob changes what Dynamo guards or traces in ways the search does not measure). Verified in
#: torch/_dynamo/config.py (torch 2.13, also 2.6): "When this flag is set to False, we introduce a
#: graph break instead of capturing", for calls returning a scalar (``.item()``, ``.tolist()``)
#: and for operators with a data-dependent output shape (``nonzero``, ``unique``, boolean masks).
#: ``recompile_limit`` (torch >= 2.7; ``cache_size_limit`` before): graphs one code object may hold
#: before Dynamo runs its later calls eager without an error (8 by default).
#: ``allow_unspec_int_on_nn_module`` is the knob torch's recompile hint names for an int attribute of
#: an nn.Module that changes between calls (torch >= 2.7; torch 2.6's config.py has no such name).
DYNAMO_CONFIG_KEYS = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops", "allow_unspec_int_on_nn_module",
                      "recompile_limit")
#: The first torch whose torch/_dynamo/config.py has each key (read from the 2.6 and 2.7 wheels).
DYNAMO_CONFIG_SINCE = {"capture_scalar_outputs": "2.6", "capture_dynamic_output_shape_ops": "2.6",
                       "allow_unspec_int_on_nn_module": "2.7", "recompile_limit": "2.7"}


class DynamoSettings(_Strict):
    """The ``settings:`` of a ``dynamo_config`` action: a mapping limited to
    :data:`DYNAMO_CONFIG_KEYS`, each ``true`` or ``false`` (YAML booleans only; ``1`` or ``"yes"``
    is an error, not a silent True). At least one must be given.

    * ``capture_scalar_outputs``: ``Tensor.item()``/``.tolist()`` (``aten._local_scalar_dense``)
      become unbacked symbols in the graph instead of a graph break (torch's hint on that break:
      "Set `torch._dynamo.config.capture_scalar_outputs = True`"). Code that then branches on the
      value still breaks there (a data-dependent jump), which the search measures.
    * ``capture_dynamic_output_shape_ops``: ``nonzero``, ``unique``, ``x[mask]`` are traced with an
      unbacked output size instead of a graph break (torch's "Dynamic shape operator" hint);
      torch/_dynamo/config.py: "you probably also want capture_scalar_outputs".
    * ``allow_unspec_int_on_nn_module``: an int attribute of an nn.Module (a step counter, a cache's
      fill level) becomes a symbolic int after one recompile instead of a guard on its value and a
      recompile at every new value (torch's hint on that recompile; torch >= 2.7).
    """

    capture_scalar_outputs: StrictBool | None = Field(
        default=None, description="Tensor.item()/.tolist() stay in the graph (torch._dynamo.config.capture_scalar_outputs)")
    capture_dynamic_output_shape_ops: StrictBool | None = Field(
        default=None, description="nonzero/unique/boolean masks stay in the graph (torch._dynamo.config.capture_dynamic_output_shape_ops)")
    allow_unspec_int_on_nn_module: StrictBool | None = Field(
        default=None, description="int attributes of nn.Modules are not guarded on their value (torch._dynamo.config.allow_unspec_int_on_nn_module)")
    recompile_limit: StrictInt | None = Field(
        default=None, ge=1, le=4096,
        description="graphs one compiled code object may hold before its later calls run eager (torch._dynamo.config.recompile_limit; "
        "a repeated block with per-instance guards needs instances x shapes)")

    @model_validator(mode="after")
    def _one(self) -> "DynamoSettings":
        if not self.items():
            raise ValueError(f"expected at least one setting of {', '.join(DYNAMO_CONFIG_KEYS)} (true or false; recompile_limit an integer)")
        return self

    def items(self) -> list[tuple[str, bool | int]]:
        """``(key, value)`` of the settings given, in :data:`DYNAMO_CONFIG_KEYS` order (the
        order the lines are written in)."""
        return [(k, getattr(self, k)) for k in DYNAMO_CONFIG_KEYS if getattr(self, k) is not None]


class DynamoConfigAction(_Action):
    """Set ``torch._dynamo.config.<key> = <value>`` for each of ``settings``, one line each at the
    top of the target function (after its docstring), the way ``allocator``/``compile_cache`` set
    their variables at the entry: the target must run before the compiled code is first traced
    (Dynamo reads these flags while tracing, so a decorator applied earlier at import still sees
    them; measured, torch 2.13). The config is process-wide: it applies to every compile in the
    program, the user's own included.

    ``settings`` keys are limited to :data:`DYNAMO_CONFIG_KEYS` (:class:`DynamoSettings`); where
    torch can be found, each key must also exist in the torch in use (read from its
    ``torch/_dynamo/config.py`` without importing torch, :func:`dynamo_config_names`), else
    :func:`parse_plan` refuses the plan at the key's line. torch >= 2.6 is supported.
    """

    action: Literal["dynamo_config"]
    settings: DynamoSettings


def dynamo_config_names() -> tuple[str | None, frozenset[str]] | None:
    """``(torch version, names assigned at the top level of torch/_dynamo/config.py)`` of the torch
    this Python would import, read from its source without importing torch (``check`` and
    ``rewrite`` never import it); None where torch cannot be found or its config file cannot be
    read (the whitelist alone then decides).

    Source: torch/_dynamo/config.py defines each knob as a module-level assignment
    (``capture_scalar_outputs = os.environ.get(...)``), which ``install_config_module`` turns into
    the attributes of ``torch._dynamo.config``.
    """
    return _dynamo_config_names()


@functools.lru_cache(maxsize=1)
def _dynamo_config_names() -> tuple[str | None, frozenset[str]] | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return _config_names(Path(spec.origin).parent)


def _config_names(root: Path) -> tuple[str | None, frozenset[str]] | None:
    """``(version, config names)`` of the torch package at ``root``: the names its
    ``_dynamo/config.py`` assigns at module scope, as parsed by the definitions reader of
    :mod:`rewriter.library_targets` (so a name in a comment, docstring or string is none); None
    where that file cannot be read or parsed."""
    from .library_targets import definitions

    try:
        defs, _ = definitions(root / "_dynamo" / "config.py")
    except (OSError, SyntaxError, ValueError):
        return None
    names = frozenset(name for name, kind in defs.items() if kind == "value")
    try:
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", (root / "version.py").read_text(encoding="utf-8"), flags=re.M)
    except OSError:
        found = None
    return (found.group(1) if found else None), names


#: transformers' ``GenerationConfig.cache_implementation`` values (transformers 5.x,
#: generation/configuration_utils.py: STATIC_CACHE_IMPLEMENTATIONS + DYNAMIC_CACHE_IMPLEMENTATIONS).
CACHE_IMPLEMENTATIONS = ("static", "offloaded_static", "dynamic", "offloaded", "quantized")


class GenerationAction(_Action):
    """A transformers model's own generation lever, set on its ``generation_config`` from the
    plan's site (a library target only): ``cache_implementation: static`` preallocates the KV
    cache at its maximum length, and ``generate`` then compiles the decode step itself on CUDA
    (transformers' auto-compile: a compileable cache on a cuda/xpu device; docs/library-models.md
    and docs/decisions.md, "The static cache for generation").
    ``disable_compile: true`` keeps the static cache without that compile.
    """

    action: Literal["generation"]
    cache_implementation: Literal["static", "offloaded_static", "dynamic", "offloaded", "quantized"] = "static"
    disable_compile: bool = False

    @model_validator(mode="after")
    def _library_only(self) -> "GenerationAction":
        if not self.library:
            raise ValueError(
                "target: generation sets a transformers model's generation_config from the plan's site; "
                f"name the model class by import path (e.g. 'transformers:LlamaForCausalLM'), got {self.target!r}"
            )
        return self


#: The ``attn_implementation`` names an ``attention`` action may set: transformers' own ``"eager"``
#: and the keys of its ``ALL_ATTENTION_FUNCTIONS`` that need no package beyond torch (transformers
#: 5.x, modeling_utils.py ``get_correct_attn_implementation``: ``"eager"`` +
#: ``ALL_ATTENTION_FUNCTIONS.valid_keys()``; 5.24 also lists ``flash_attention_2/3/4`` and
#: ``paged|eager``, which need the flash-attn package or a Hub kernel and are not measured levers).
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention")


class AttentionAction(_Action):
    """A transformers model's own attention lever, set from the plan's site (a library target
    only): ``model.set_attn_implementation(implementation)`` on every outermost instance of the
    target class (a ``PreTrainedModel``: transformers' public setter since its PR #38974, which
    asks for it instead of assigning the private ``config._attn_implementation``; it checks the
    class supports the implementation and sets it on the submodels too). ``sdpa`` runs
    ``torch.nn.functional.scaled_dot_product_attention`` where ``eager`` materialises the attention
    matrix; ``flex_attention`` runs torch's FlexAttention (the class's ``_supports_flex_attn``).
    The outputs differ from eager attention within float tolerance: the search measures it like
    any candidate, numerics included, and validation judges it by the same rule.
    """

    action: Literal["attention"]
    implementation: Literal["sdpa", "eager", "flex_attention"] = "sdpa"

    @field_validator("implementation", mode="before")
    @classmethod
    def _implementation(cls, value: object) -> object:
        if value not in ATTN_IMPLEMENTATIONS:
            names = ", ".join(repr(n) for n in ATTN_IMPLEMENTATIONS)
            if isinstance(value, str) and (value.startswith(("flash_attention", "paged|")) or "/" in value):
                hint = ("it needs the flash-attn package or a Hub kernel, which stackpart neither installs nor "
                        "measures; set it in the program's own from_pretrained call")
            else:
                hint = near_names(str(value), ATTN_IMPLEMENTATIONS) if isinstance(value, str) else None
            raise ValueError(
                f"expected one of {names} (transformers' attn_implementation names stackpart measures), got {_shown(value)}"
                + (f" ({hint})" if hint else "")
            )
        return value

    @model_validator(mode="after")
    def _library_only(self) -> "AttentionAction":
        if not self.library:
            raise ValueError(
                "target: attention sets a transformers model's attn_implementation from the plan's site; "
                f"name the model class by import path (e.g. 'transformers:LlamaForCausalLM'), got {self.target!r}"
            )
        return self


#: ``distributed`` settings per wrapper -> what each value must be (for validation and messages).
DISTRIBUTED_SETTINGS: dict[str, dict[str, str]] = {
    "ddp": {
        "bucket_cap_mb": "a size in MB > 0",
        "gradient_accumulation": "an integer >= 2",
        "parallelism": "one of 'fsdp2', 'hsdp'",
    },
    "fsdp2": {
        "reshard_after_forward": "true or false",
        "forward_prefetch": "an integer >= 1 (blocks ahead)",
        "backward_prefetch": "an integer >= 1 (blocks ahead)",
        "gradient_accumulation": "an integer >= 2",
        "parallelism": "one of 'ddp', 'hsdp'",
    },
}


def _setting_ok(wrapper: str, key: str, value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key == "bucket_cap_mb":
        return number and value > 0
    if key == "gradient_accumulation":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 2
    if key in ("forward_prefetch", "backward_prefetch"):
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if key == "reshard_after_forward":
        return isinstance(value, bool)
    if key == "parallelism":
        return value in {"ddp", "fsdp2", "hsdp"} - {wrapper}
    return False


class DistributedAction(_Action):
    """Advisory: a data-parallel wrapper setting for a collective-bound step (DDP bucket size,
    FSDP2 reshard/prefetch, gradient accumulation, or a different parallelism).

    Not a source edit: ``rewrite`` reports it and writes nothing. ``target`` names the function
    that builds or wraps the model (the place a person applies the setting); ``wrapper`` is the
    wrapper in use; ``settings`` holds keys from :data:`DISTRIBUTED_SETTINGS` for that wrapper.
    """

    action: Literal["distributed"]
    wrapper: Literal["ddp", "fsdp2"]
    settings: dict[str, Union[bool, int, float, str]] = Field(min_length=1)

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, value: object, info: ValidationInfo) -> object:
        # before the union's type check, so that a value of the wrong kind is told what its key
        # takes ("bucket_cap_mb: expected a size in MB > 0, got [1]"), not "true or false, a number
        # or a string"
        wrapper = info.data.get("wrapper")
        if wrapper is None or not isinstance(value, dict):  # the wrapper's or the mapping's own error is the one to read
            return value
        allowed = DISTRIBUTED_SETTINGS.get(wrapper or "", {})
        for key, item in value.items():
            if key not in allowed:
                hint = near_names(key, allowed)
                raise ValueError(
                    f"unknown setting {key!r} for {wrapper}; expected one of {', '.join(allowed)}"
                    + (f" ({hint})" if hint else "")
                )
            if not _setting_ok(wrapper, key, item):
                hint = number_hint(item, integer=key != "bucket_cap_mb") if key != "parallelism" else None
                raise ValueError(f"{key}: expected {allowed[key]}, got {_shown(item)}" + (f" ({hint})" if hint else ""))
        return value


Action = Annotated[
    Union[
        CompileAction,
        DisableAction,
        MarkDynamicAction,
        BucketAction,
        KernelAction,
        BranchlessAction,
        AllocatorAction,
        CompileCacheAction,
        DynamoConfigAction,
        DistributedAction,
        GenerationAction,
        AttentionAction,
    ],
    Field(discriminator="action"),
]

ACTION_MODELS: dict[str, type[_Action]] = {
    "compile": CompileAction,
    "disable": DisableAction,
    "mark_dynamic": MarkDynamicAction,
    "bucket": BucketAction,
    "kernel": KernelAction,
    "allocator": AllocatorAction,
    "compile_cache": CompileCacheAction,
    "dynamo_config": DynamoConfigAction,
    "distributed": DistributedAction,
    "generation": GenerationAction,
    "attention": AttentionAction,
    "branchless": BranchlessAction,
}


class Plan(_Strict):
    """A whole plan.yaml (version 1). See DESIGN.md, "plan.yaml (version 1)"."""

    version: Literal[1]
    harness: Harness | None = None
    amortization: Amortization | None = None
    site: str | None = Field(
        default=None,
        description="the function under SRC that returns the model ('train.py::build'): where "
        "actions on an installed library's classes are applied at run time",
    )
    actions: list[Action] = Field(default_factory=list)

    _site = field_validator("site")(_check_site)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: object) -> object:
        # Literal[1] takes true and 1.0 (both == 1), even in strict mode; an integer field does not
        if isinstance(value, (bool, float)):
            raise ValueError(f"expected 1, got {_shown(value)}")
        return value


def json_schema() -> str:
    """The plan's JSON Schema (draft 2020-12, as pydantic writes it), pretty-printed."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True)


@dataclass
class LoadedPlan:
    """A validated plan plus where each action was written (for errors that need the source).

    Attributes:
        plan: the validated plan.
        path: the plan file as given on the command line.
        action_lines: 1-based line of each action's mapping in the YAML, parallel to
            ``plan.actions``.
        site_line: the line of ``site:``, when the plan has one.
        marks: every YAML path (``("harness", "shapes", 0, "batch")``) -> its 1-based (line,
            col), for errors about a field found after loading (validate's harness check).
    """

    plan: Plan
    path: str
    action_lines: list[int] = field(default_factory=list)
    #: 1-based line of ``site:`` (None without one).
    site_line: int | None = None
    marks: dict[tuple, tuple[int, int]] = field(default_factory=dict)

    def mark_of(self, *keys: object) -> tuple[int | None, int | None]:
        """The (line, col) of the deepest of ``keys``' prefixes the plan spells out
        (``harness.model`` when written, else ``harness:``), or (None, None)."""
        for n in range(len(keys), 0, -1):
            if keys[:n] in self.marks:
                return self.marks[keys[:n]]
        return None, None

    def where(self, index: int) -> StackpartError:
        """An error template pointing at action ``index`` (fill in ``message``)."""
        line = self.action_lines[index] if index < len(self.action_lines) else None
        return StackpartError("", path=self.path, line=line)

    def error(self, index: int, message: str, hint: str | None = None) -> StackpartError:
        """A :class:`StackpartError` at action ``index``: ``plan.yaml:LINE: actions[i] (...)``."""
        err = self.where(index)
        action = self.plan.actions[index]
        err.message = f"actions[{index}] ({action.action} {action.target}): {message}"
        err.hint = hint
        return err


def _no_duplicate_keys(node: yaml.Node, path: str) -> None:
    """Refuse a mapping that repeats a key: YAML loaders keep the last one silently, so a
    second ``options:`` would drop the first without a word.

    Raises:
        StackpartError: at the repeated key's line and column.
    """
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise StackpartError(
                    f"duplicate key {key!r} (first on line {seen[key]}); YAML would keep only the last",
                    path=path, line=key_node.start_mark.line + 1, col=key_node.start_mark.column + 1,
                )
            seen[key] = key_node.start_mark.line + 1
            _no_duplicate_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicate_keys(item, path)


#: YAML 1.2's core schema (YAML 1.2.2, 10.3.2): what a plain scalar resolves to there. PyYAML
#: resolves by YAML 1.1, which also reads base 60 (``1:30``), a leading-zero octal (``010``),
#: binary (``0b11``), ``_`` digit separators (``1_000``), signed hex and ``yes/no/on/off``.
_CORE_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_CORE_INT = re.compile(r"[-+]?[0-9]+\Z")
_CORE_OCT = re.compile(r"0o[0-7]+\Z")
_CORE_HEX = re.compile(r"0x[0-9a-fA-F]+\Z")
_CORE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
_CORE_SPECIAL = {".inf": "inf", ".Inf": "inf", ".INF": "inf", "+.inf": "inf", "+.Inf": "inf", "+.INF": "inf",
                 "-.inf": "-inf", "-.Inf": "-inf", "-.INF": "-inf", ".nan": "nan", ".NaN": "nan", ".NAN": "nan"}
_YAML11_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}


def yaml12_value(text: str) -> object:
    """The value YAML 1.2's core schema gives the plain scalar ``text`` (a str where it is no
    boolean or number; null is not asked about: YAML 1.1 and 1.2 spell it alike)."""
    if text in _CORE_BOOL:
        return _CORE_BOOL[text]
    if _CORE_INT.match(text):
        return int(text)
    if _CORE_OCT.match(text):
        return int(text[2:], 8)
    if _CORE_HEX.match(text):
        return int(text[2:], 16)
    if text in _CORE_SPECIAL:
        return float(_CORE_SPECIAL[text])
    if _CORE_FLOAT.match(text):
        return float(text)
    return text


def _same_value(a: object, b: object) -> bool:
    """``a`` and ``b`` are one value of one type (two NaNs are)."""
    if type(a) is not type(b):
        return False
    return a == b or (isinstance(a, float) and a != a and b != b)


def _yaml11_form(text: str) -> str:
    """Which YAML 1.1 form a plain number is written in, as the error names it."""
    body = text.lstrip("+-")
    if ":" in body:
        return " (base 60)"
    if body.startswith("0b"):
        return " (binary)"
    if body.startswith("0x"):
        return " (hex)"
    if "_" in body:
        return " ('_' dropped)"
    if len(body) > 1 and body.startswith("0") and body.isdigit():
        return " (octal)"
    return ""


def _yaml11_misread(node: yaml.ScalarNode) -> str | None:
    """What is wrong with a plain scalar that YAML 1.1 (PyYAML) reads as a boolean or a number and
    YAML 1.2 as something else (``1:30``: 90 against the string ``'1:30'``; ``010``: 8 against
    10), or None: the plan would mean one thing to stackpart and another to a YAML 1.2 tool, and a
    value like ``1:30`` is rarely the number it becomes."""
    if node.style is not None or node.tag not in _YAML11_TAGS:
        return None
    text = node.value  # an explicit !!int 010 too: YAML 1.2 reads it as 10
    old = yaml.constructor.SafeConstructor().construct_object(node)
    new = yaml12_value(text)
    if _same_value(old, new):
        return None
    fix = _shown(old) if isinstance(old, bool) or not isinstance(new, (int, float)) else f"{_shown(old)} or {_shown(new)}"
    wanted = "the boolean" if isinstance(old, bool) else "the number"
    said = f"the string {text!r}" if isinstance(new, str) else _shown(new)
    return (f"{text!r} is read by YAML 1.1 (PyYAML) as {_shown(old)}{_yaml11_form(text) if not isinstance(old, bool) else ''} "
            f"but by YAML 1.2 as {said}; write {fix} for {wanted}, or quote it for the string")


def _no_yaml11_literals(node: yaml.Node, path: str, loc: tuple = ()) -> None:
    """Refuse every plain scalar that YAML 1.1 and YAML 1.2 read differently (:func:`_yaml11_misread`),
    keys included, before the plan is validated: ``dim: 1:30`` would otherwise be a valid 90.

    Raises:
        StackpartError: at the scalar's line and column, naming the field.
    """
    if isinstance(node, yaml.ScalarNode):
        said = _yaml11_misread(node)
        if said is not None:
            raise StackpartError(f"{field_path(loc)}: {said}", path=path,
                                 line=node.start_mark.line + 1, col=node.start_mark.column + 1)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            said = _yaml11_misread(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if said is not None:
                where = f"{field_path(loc)} key" if loc else "key"
                raise StackpartError(f"{where}: {said}", path=path,
                                     line=key_node.start_mark.line + 1, col=key_node.start_mark.column + 1)
            _no_yaml11_literals(value_node, path, loc + (key_node.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _no_yaml11_literals(item, path, loc + (i,))


def _marks(node: yaml.Node, loc: tuple = ()) -> dict[tuple, tuple[int, int]]:
    """Map every path in the YAML tree to the 1-based (line, col) of its node (keys for mappings)."""
    out = {loc: (node.start_mark.line + 1, node.start_mark.column + 1)}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out.update(_marks(value_node, loc + (key,)))
            out[loc + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_marks(item, loc + (i,)))
    return out


def _locate(loc: tuple, marks: dict[tuple, tuple[int, int]]) -> tuple[tuple, tuple[int, int]]:
    """Walk a pydantic error ``loc`` through the YAML paths, skipping union tags it inserts."""
    found: tuple = ()
    for part in loc:
        if found + (part,) in marks:
            found = found + (part,)
    return found, marks.get(found, (1, 1))


def _strip_tags(loc: tuple) -> tuple:
    """Drop the union tag pydantic inserts after an action index (``actions.0.compile.x``)."""
    return tuple(
        p for i, p in enumerate(loc) if not (i > 0 and isinstance(loc[i - 1], int) and p in ACTION_MODELS)
    )


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model of the mapping a pydantic ``loc`` points into (None where it is no model's)."""
    model: type[BaseModel] = Plan
    parts = list(loc[:-1])
    if len(parts) >= 3 and parts[0] == "actions" and parts[2] in ACTION_MODELS:
        model, parts = ACTION_MODELS[parts[2]], parts[3:]
    for part in parts:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        ann = info.annotation if info is not None else None
        nested = [c for c in (ann, *getattr(ann, "__args__", ())) if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _fields_for(loc: tuple) -> list[str]:
    """Field names allowed at the mapping a pydantic ``loc`` points into (for near-name hints)."""
    model = _model_at(loc)
    return list(model.model_fields) if model is not None else []


def field_path(loc: tuple) -> str:
    """A plan field as the errors name it: ``actions[0].strategy``, ``harness.shapes[1]`` (the
    same ``actions[i]`` form the target errors use)."""
    if len(loc) >= 2 and loc[-1] == "[key]":  # pydantic's loc of a mapping's key: (..., key, '[key]')
        return f"{field_path(loc[:-2])} key"
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<plan>"


#: Models that are a mapping of named keys (``settings:``, ``own_call:``): an unknown key is named
#: with the keys expected -> (what a key is called, the keys, what each takes).
_KEYED: dict[type[BaseModel], tuple[str, tuple[str, ...], str]] = {
    DynamoSettings: ("setting", DYNAMO_CONFIG_KEYS, " (true or false; recompile_limit an integer)"),
    OwnCall: ("key", (*OWN_CALL_KEYS, "regional"), ""),
}


def _misspelt_not_missing(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``errors`` without a "missing required field" whose field an unknown key of the same
    mapping misspells (``targte:`` for ``target:``): the one line says the key is unknown and
    names the field meant, rather than a second line saying that field is missing."""
    import difflib

    unknown = [tuple(e["loc"]) for e in errors if e["type"] == "extra_forbidden"]

    def misspelt(e: dict[str, Any]) -> bool:
        loc = tuple(e["loc"])
        return e["type"] == "missing" and any(
            u[:-1] == loc[:-1] and difflib.get_close_matches(str(u[-1]), [str(loc[-1])], n=1, cutoff=0.6) for u in unknown)

    kept = [e for e in errors if not misspelt(e)]
    return kept or errors


#: What a plan value was expected to be, per pydantic error type (the plan is validated in strict
#: mode, so a value must be YAML's own type: ``1`` is no boolean, ``'8'`` no integer).
_EXPECTED = {
    "bool_type": "true or false", "bool_parsing": "true or false",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
#: The tags pydantic adds to a ``loc`` for each member of a union of plain types
#: (``pad_value.int``, ``pad_value.float``); no plan field has one of these names.
_MEMBER_TAGS = frozenset({"bool", "int", "float", "str"})
#: The boolean fields where null is a value of its own (torch's default, ``dynamic=None``), so a
#: wrong value there is told it may be null; elsewhere null is refused or means "not given".
_NULL_MEANS_DEFAULT = frozenset({(CompileOptions, "dynamic"), (OwnCall, "dynamic")})
#: Range errors -> the comparison each states (``ge=1``: ``>= 1``).
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
           "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def _merge_members(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``errors`` with the per-member errors of one union value (``pad_value.int`` and
    ``pad_value.float`` for ``pad_value: x``) folded into one error at the value itself, whose
    ``expected`` lists what each member takes."""
    out: list[dict[str, Any]] = []
    for error in errors:
        loc = tuple(error["loc"])
        if not (loc and loc[-1] in _MEMBER_TAGS and error["type"] in _EXPECTED):
            out.append(error)
            continue
        prev = out[-1] if out else None
        if prev is not None and prev["type"] == "wrong_type" and tuple(prev["loc"]) == loc[:-1]:
            prev["expected"].append(_EXPECTED[error["type"]])
        else:
            out.append({"type": "wrong_type", "loc": loc[:-1], "input": error["input"],
                        "expected": [_EXPECTED[error["type"]]]})
    return out


def _quoted(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters (a 100,000-character
    ``site:`` made a 100 KB error line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(value: object) -> str:
    """A plan value as the errors quote it: YAML's spelling for true/false/null, ``a list`` and
    ``a mapping`` for containers, else its repr (cut at 80 characters)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, datetime.date):  # an unquoted 2024-01-01: as written
        return value.isoformat()
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _annotation_at(loc: tuple) -> Any:
    """The type annotation of the field a pydantic ``loc`` ends at (None where it is no
    model's field)."""
    model = _model_at(loc)
    info = model.model_fields.get(loc[-1]) if model is not None and loc and isinstance(loc[-1], str) else None
    return info.annotation if info is not None else None


def _literal_values(ann: Any) -> list[Any]:
    """The values of the ``Literal[...]`` in ``ann`` (through ``Optional``/``Union``), in order."""
    import typing

    if typing.get_origin(ann) is Literal:
        return list(typing.get_args(ann))
    return [v for arg in typing.get_args(ann) for v in _literal_values(arg)]


def _expected_of(error: dict[str, Any]) -> str:
    """What the value at ``error`` should have been: ``one of 'a', 'b'``, ``true or false`` (and
    ``or null`` where the field takes null), ``an integer or a number`` for a union."""
    kind = error["type"]
    if kind == "wrong_type":
        wanted = list(dict.fromkeys(error["expected"]))
        if "a number" in wanted and "an integer" in wanted:  # int | float: any number
            wanted.remove("an integer")
        return " or ".join(wanted) if len(wanted) < 3 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
    if kind == "literal_error":
        values = _literal_values(_annotation_at(tuple(error["loc"])))
        if not values:  # not a field's own annotation: pydantic's own list
            return error.get("ctx", {}).get("expected", "?")
        return repr(values[0]) if len(values) == 1 else "one of " + ", ".join(repr(v) for v in values)
    expected = _EXPECTED[kind]
    loc = tuple(error["loc"])
    if expected == "true or false" and loc and (_model_at(loc), loc[-1]) in _NULL_MEANS_DEFAULT:
        return "true, false or null"
    return expected


#: A number as a person writes one that PyYAML (YAML 1.1) reads as a string: an exponent
#: without a dot or a sign (``1e8``, ``1.0e8``, ``1e-3``), which YAML 1.2 and JSON read as numbers.
#: Also a signed number with no digit before its dot (``-.5``, ``+.25e-3``): PyYAML's float
#: pattern takes a sign only before a leading digit.
_NUMBER_AS_STRING_RE = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+|[-+]\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?)$")


def number_hint(value: object, integer: bool) -> str | None:
    """What to write instead of ``value`` where a number (an integer where ``integer``) was
    expected: ``1e8`` or ``1.0e8``, which PyYAML reads as a string, and (for an integer) a float
    with no fraction (``1.0e+8``, ``8.0``), which the strict plan refuses; None for anything else."""
    number = None
    if isinstance(value, str) and _NUMBER_AS_STRING_RE.match(value):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            return None
        shown = value if len(value) <= 40 else value[:37] + "..."  # one short line for a 5,000-digit one
        said = f"PyYAML reads {shown} as a string, not a number"
    elif integer and isinstance(value, float) and value.is_integer():
        number, said = value, None
    else:
        return None
    if integer:
        if not number.is_integer():
            return said
        return (said + "; " if said else "") + f"write {int(number)}"
    return f"{said}; write {yaml.safe_dump(number).splitlines()[0]}"


def _value_hint(error: dict[str, Any]) -> str | None:
    """A hint for a value of the wrong kind: the near names of a misspelt choice, that YAML
    read an unquoted word as a boolean where a string was expected, or a number written in a
    form PyYAML reads as a string (:func:`number_hint`)."""
    value = error.get("input")
    if error["type"] in ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "wrong_type"):
        integer = error["type"].startswith("int") or (error["type"] == "wrong_type" and "a number" not in error["expected"])
        hint = number_hint(value, integer)
        if hint is not None:
            return hint
    if error["type"] == "literal_error" and isinstance(value, str):
        values = _literal_values(_annotation_at(tuple(error["loc"])))
        return near_names(value, [v for v in values if isinstance(v, str)])
    if error["type"] == "string_type" and isinstance(value, bool):
        return "YAML reads an unquoted true/false, yes/no or on/off as a boolean; quote it to give a string"
    if error["type"] == "string_type" and isinstance(value, datetime.date):
        return "YAML reads an unquoted date as a date; quote it to give a string"
    return None


def _bound(error: dict[str, Any]) -> str:
    """The range a value missed, from a pydantic range error: ``>= 1``."""
    sign, key = _BOUNDS[error["type"]]
    return f"{sign} {error.get('ctx', {}).get(key, '?')}"


def _describe_value(error: dict[str, Any], name: str) -> tuple[str, str | None] | None:
    """``name: expected X, got Y`` for a value of the wrong kind, a choice not among the
    field's, or one out of range, with its hint; None for any other error."""
    kind, got = error["type"], _shown(error.get("input"))
    if kind in _EXPECTED or kind in ("literal_error", "wrong_type"):
        return f"{name}: expected {_expected_of(error)}, got {got}", _value_hint(error)
    if kind in _BOUNDS:
        return f"{name}: expected a value {_bound(error)}, got {got}", None
    if kind == "too_short":
        least = error.get("ctx", {}).get("min_length", 1)
        return f"{name}: expected at least {least} item{'s' if least != 1 else ''}, got none", None
    return None


def _describe(error: dict[str, Any]) -> tuple[str, str | None]:
    kind = error["type"]
    loc = _strip_tags(tuple(error["loc"]))
    name = field_path(loc)
    keyed = _KEYED.get(_model_at(tuple(error["loc"]))) if kind in ("extra_forbidden", "invalid_key") else None  # type: ignore[arg-type]
    if keyed is not None:  # a mapping of named keys: the key as YAML read it (1, None), with the keys expected
        word, keys, takes = keyed
        key = error["input"] if kind == "invalid_key" else loc[-1]
        return (f"{field_path(loc[:-1])}: unknown {word} {key!r}; expected one of {', '.join(keys)}{takes}",
                near_names(str(key), keys))
    if kind == "extra_forbidden":
        return f"unknown field {name!r}", near_names(str(loc[-1]), _fields_for(tuple(error["loc"])))
    if kind == "invalid_key":  # a key YAML read as no string (1, null, an unquoted on): pydantic's loc holds it as an index
        where = field_path(loc[:-1]) + ": " if loc[:-1] else ""
        key = error.get("input")
        hint = ("YAML reads an unquoted true/false, yes/no or on/off as a boolean; quote it to give a string"
                if isinstance(key, bool) else None)
        return f"{where}unknown field {_shown(key)} (a field name is a string)", hint
    if kind == "missing":
        return f"missing required field {name!r}", None
    if kind == "union_tag_invalid":
        tag = error.get("ctx", {}).get("tag", "?")
        given = error["input"].get("action") if isinstance(error.get("input"), dict) else tag
        if not isinstance(given, str):  # pydantic's tag is str() of it: "['compile']", "3"
            return f"{field_path(loc + ('action',))}: expected one of {', '.join(ACTION_MODELS)}, got {_shown(given)}", None
        return (
            f"unknown action {tag!r}; expected one of {', '.join(ACTION_MODELS)}",
            near_names(str(tag), ACTION_MODELS),
        )
    if kind == "union_tag_not_found":
        return f"{name}: missing 'action:' (one of {', '.join(ACTION_MODELS)})", None
    value = _describe_value(error, name)
    if value is not None:
        return value
    msg = error["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"{name}: {msg}", None


#: The deepest YAML nesting a plan may have. A valid plan nests 4 deep (``actions[i].options.
#: fullgraph``); the cap stops a hostile file before PyYAML's recursive composer (which raises
#: RecursionError near 1,000 levels) and its scanner (quadratic in flow depth: 2.5 s at 3,000).
MAX_YAML_DEPTH = 16
#: The largest plan file read, in bytes (a 10,000-action plan is about 1.5 MB).
MAX_PLAN_BYTES = 16 * 1024 * 1024


def _gate_yaml(text: str, path: str) -> None:
    """Refuse what a plan never needs and a hostile file uses: aliases (``*name``: a 346-byte
    "billion laughs" document expands to gigabytes) and nesting deeper than
    :data:`MAX_YAML_DEPTH`. Reads PyYAML's event stream, which is linear in the text and stops at
    the first offence, before anything is composed.

    Raises:
        StackpartError: at the alias's or the too-deep node's line and column.
    """
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise StackpartError(
                f"YAML alias '*{event.anchor}' in a plan; stackpart refuses aliases (an alias can "
                "expand a few bytes into gigabytes)",
                path=path, line=mark.line + 1, col=mark.column + 1, hint="write the value out in full",
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise StackpartError(
                    f"YAML nested more than {MAX_YAML_DEPTH} deep; a plan nests at most 4 "
                    "(actions[i].options.fullgraph)",
                    path=path, line=mark.line + 1, col=mark.column + 1,
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


#: The longest number a plan may spell, in characters. The largest integer any field takes is
#: :data:`MAX_SIZE` (19 digits) and a float needs at most 17 significant digits; a longer one
#: is refused before PyYAML builds it: a 5,000-digit integer passes Python's 4,300-digit limit
#: on ``int(str)`` (``ValueError``), and a base-60 ``1:1:...`` of 400 KB costs PyYAML quadratic
#: time (28 s measured) to build.
MAX_NUMBER_CHARS = 100
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


def _no_long_numbers(node: yaml.Node | None, path: str, loc: tuple = ()) -> None:
    """Refuse every scalar, key or value, that YAML reads as a number (plain, or tagged
    ``!!int``/``!!float``) and is longer than :data:`MAX_NUMBER_CHARS`: no plan field takes one.
    Linear in the composed tree; nothing is constructed.

    Raises:
        StackpartError: at the scalar's line and column, naming the field.
    """
    stack: list[tuple[yaml.Node, tuple, bool]] = [(node, loc, False)] if node is not None else []
    while stack:
        item, at, is_key = stack.pop()
        if isinstance(item, yaml.ScalarNode):
            if item.tag in _NUMBER_TAGS and len(item.value) > MAX_NUMBER_CHARS:
                kind = "an integer" if item.tag.endswith(":int") else "a number"
                where = (f"{field_path(at)} key" if at else "key") if is_key else field_path(at)
                raise StackpartError(
                    f"{where}: {kind} {len(item.value):,} characters long ({item.value[:20]}...); no plan field "
                    f"takes a number over {MAX_NUMBER_CHARS} characters (integers are at most 2**63-1, 19 digits)",
                    path=path, line=item.start_mark.line + 1, col=item.start_mark.column + 1,
                )
        elif isinstance(item, yaml.MappingNode):
            for key_node, value_node in reversed(item.value):
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                stack.append((value_node, at + (key,), False))
                stack.append((key_node, at, True))
        elif isinstance(item, yaml.SequenceNode):
            for i in reversed(range(len(item.value))):
                stack.append((item.value[i], at + (i,), False))


def parse_plan(text: str, path: str = "plan.yaml") -> LoadedPlan:
    """Parse and validate plan text.

    Args:
        text: the YAML document.
        path: the plan's name as the user wrote it, used in error messages.

    Values are checked in pydantic's strict mode, against the types YAML itself gives: a boolean
    field takes ``true``/``false``, not ``1`` or ``'yes'``; an integer field takes no ``'8'``,
    ``8.0`` or ``true``. Before that, a plain scalar that PyYAML (YAML 1.1) reads as a boolean or
    a number and YAML 1.2 otherwise is refused (:func:`_no_yaml11_literals`: ``1:30``, ``010``,
    ``0b11``, ``1_000``, ``yes``/``no``/``on``/``off``), so the plan means the same to every tool.

    Raises:
        StackpartError: malformed YAML, an unknown action or field (with near names), a wrong
            type or a choice not among a field's (``field: expected X, got Y``, with the near
            choices), a missing field, a YAML 1.1-only literal — at the file, line and column of
            the offending key or value.
    """
    try:
        _gate_yaml(text, path)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _no_long_numbers(root, path)  # before the constructor turns them into ints
        # the values built from the tree just composed (yaml.safe_load would parse the text a
        # third time: a third of the load of a large plan)
        data = yaml.SafeLoader("").construct_document(root) if root is not None else None
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids (NUL, most C0 controls): the reader knows only its offset.
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise StackpartError(
            f"character #x{exc.character:04x} is not allowed in YAML (PyYAML accepts printable characters only)",
            path=path, line=line, col=col, hint="remove it; a plan is plain UTF-8 text",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise StackpartError(
            f"malformed YAML: {problem}",
            path=path,
            line=mark.line + 1 if mark else None,
            col=mark.column + 1 if mark else None,
        ) from None
    if root is None or not isinstance(data, dict):
        raise StackpartError(
            "expected a mapping with 'version: 1' and 'actions:'", path=path, line=1
        )
    _no_duplicate_keys(root, path)
    _no_yaml11_literals(root, path)
    marks = _marks(root)
    try:
        plan = Plan.model_validate(data, strict=True)  # YAML's own types: no 1 for true, no '8' for 8
    except ValidationError as exc:
        errors = []
        for error in _merge_members(_misspelt_not_missing(exc.errors())):
            at = tuple(error["loc"]) + (("action",) if error["type"] == "union_tag_invalid" else ())  # at its action: key
            _, (line, col) = _locate(at, marks)
            message, hint = _describe(error)
            errors.append(StackpartError(message, path=path, line=line, col=col, hint=hint))
        first = errors[0]
        first.also = [str(e) for e in errors[1:]]
        raise first from None
    lines = [marks.get(("actions", i), (1, 1))[0] for i in range(len(plan.actions))]
    for i, action in enumerate(plan.actions):
        if action.library and plan.site is None:
            raise StackpartError(
                f"actions[{i}] ({action.action} {action.target}) targets an installed library, and "
                "the plan has no 'site:'",
                path=path, line=lines[i],
                hint="add 'site: file.py::func', the function under SRC that returns the model "
                "(stackpart applies the library actions to what it returns)",
            )
    _check_dynamo_config(plan, path, marks, lines)
    site_line = marks[("site",)][0] if ("site",) in marks else None
    return LoadedPlan(plan=plan, path=path, action_lines=lines, site_line=site_line, marks=marks)


def _check_dynamo_config(plan: Plan, path: str, marks: dict[tuple, tuple[int, int]], lines: list[int]) -> None:
    """Refuse a ``dynamo_config`` key the torch in use does not have (:func:`dynamo_config_names`;
    nothing is checked where torch cannot be found).

    Raises:
        StackpartError: at the key's line: ``actions[i].settings.<key>``, the torch version, and
            the near names among that torch's config keys.
    """
    wanted = [(i, a) for i, a in enumerate(plan.actions) if isinstance(a, DynamoConfigAction)]
    if not wanted:
        return
    found = dynamo_config_names()
    if found is None:
        return
    version, names = found
    for i, action in wanted:
        for key, _ in action.settings.items():
            if key in names:
                continue
            line, col = marks.get(("actions", i, "settings", key), (lines[i], None))
            raise StackpartError(
                f"actions[{i}].settings.{key}: expected a key of torch._dynamo.config; the torch in use "
                f"({version or 'unknown version'}) has no {key!r}",
                path=path, line=line, col=col,
                # the key is one the plan allows (DYNAMO_CONFIG_KEYS), so a near torch name would be one it refuses
                hint=f"torch >= {DYNAMO_CONFIG_SINCE.get(key, '2.6')} has it: upgrade torch, or drop the setting",
            )


def _read_plan_bytes(path: Path) -> bytes:
    """A plan file's bytes through the guarded read of :func:`rewriter.source.read_bytes`: a
    regular file only (a FIFO or device would block or never end), at most :data:`MAX_PLAN_BYTES`.

    Raises:
        StackpartError: missing, unreadable, not a regular file, or too large.
    """
    from .source import read_bytes

    try:
        return read_bytes(path, str(path), limit=MAX_PLAN_BYTES)[0]
    except StackpartError as exc:  # "skipped:" is check's word for a file it passes over
        why = exc.message.removeprefix("skipped: ").removeprefix("cannot read: ")
        missing = not os.path.lexists(path)
        raise StackpartError(f"cannot read plan: {why}", path=str(path), hint=near_path(path) if missing else None) from None


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan file (see :func:`parse_plan`).

    Raises:
        StackpartError: the file cannot be read or decoded, or :func:`parse_plan` fails.
    """
    name = str(path)
    try:
        data = _read_plan_bytes(Path(path))
        text = data.decode("utf-8-sig")
    except OSError as exc:
        raise StackpartError(f"cannot read plan: {exc.strerror}", path=name) from None
    except UnicodeDecodeError as exc:
        # exc.start counts from after a BOM, which utf-8-sig strips first.
        start = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        col = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise StackpartError(
            f"plan is not UTF-8 (byte {start}: {data[start:start + 1]!r})", path=name, line=line, col=col,
            hint="save it as UTF-8",
        ) from None
    return parse_plan(text, name)


def report_dir_for(plan_path: str | Path, base: str) -> Path:
    """``<plan dir>/<base>`` for ``plan.yaml``, ``<plan dir>/<base>-<stem>`` for any other plan
    name, so two plans in one folder never overwrite each other's report (diagnose's and
    validate's default report folders)."""
    path = Path(plan_path)
    return path.parent / (base if path.name == "plan.yaml" else f"{base}-{path.stem}")
