"""plan.yaml, version 1: the pydantic schema.

The schema is one :class:`Plan` whose ``actions`` are a discriminated union on ``action``
(``compile``, ``disable``, ``mark_dynamic``, ``bucket``, ``kernel``, ``allocator``,
``compile_cache``, ``dynamo_config``, the advisory ``distributed``, which ``rewrite`` reports
but never writes, and transformers' own levers ``generation`` and ``attention``, on library
targets only). ``stackpart plan schema`` prints :func:`json_schema`. Every model forbids
unknown fields so a typo is an error naming the nearest field, not a silently ignored key; a value
of the wrong kind is ``field: expected X, got Y`` with the near choices (``mode: inferance``).
Reading a plan file, with its ``file:line`` errors, is :mod:`rewriter.plan.loader`'s job.
Cross-action rules that need the source (a disable inside a ``fullgraph`` region, ...) live in
:mod:`rewriter.consistency`.
"""

from __future__ import annotations

import difflib
import json
import keyword
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, field_validator, model_serializer, model_validator

from ..errors import near_names
from .values import number_hint, quoted, shown

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
    one_colon = re.fullmatch(r"(?P<file>[^:]+\.py):(?P<qual>[A-Za-z_][\w.]*)", value)
    if one_colon:  # a file under SRC with one colon, not a module path ending in ".py"
        raise ValueError(
            f"expected a file target 'file.py::Qual' (two colons) or an installed library's import path "
            f"'package.module:Qual', got {quoted(value)} (did you mean "
            f"{one_colon.group('file') + '::' + one_colon.group('qual')!r}?)"
        )
    if not TARGET_RE.match(value) and not LIBRARY_TARGET_RE.match(value):
        raise ValueError(
            "expected a target like 'model.py::Block', 'model.py::Block.forward', "
            "'pkg/model.py::route', or an installed library's class by import path like "
            f"'transformers.models.llama.modeling_llama:LlamaDecoderLayer', got {quoted(value)}"
        )
    return value


def _check_site(value: str | None) -> str | None:
    if value is not None and not TARGET_RE.match(value):
        raise ValueError(
            "expected the function under SRC that returns the model, like 'train.py::build' or "
            f"'harness.py::build_model', got {quoted(value)}"
        )
    return value


def _is_identifier(value: str) -> bool:
    """Whether ``value`` can name a parameter or local: Python's own rule (``str.isidentifier``,
    non-ASCII letters included, PEP 3131), not a keyword."""
    return value.isidentifier() and not keyword.iskeyword(value)


def _check_ident(value: str) -> str:
    if not _is_identifier(value):
        raise ValueError(f"expected a Python identifier, got {quoted(value)}")
    return value


class Harness(_Strict):
    """How diagnose and validate build and feed the model (``rewrite`` ignores it).

    ``file`` is relative to SRC and defines ``model() -> nn.Module`` and
    ``inputs(**shape) -> tuple | dict`` of tensors. ``shapes`` is the realistic input variety;
    the first entry is the reference shape. ``call`` names the model's method every step calls
    (``model.inverse(*inputs)``, ``model.generate(**inputs)``); unset, the module itself is
    called (``model(*inputs)``: its ``forward`` through ``nn.Module.__call__``).
    """

    file: str
    model: str = "build_model"
    inputs: str = "make_inputs"
    call: str | None = Field(
        default=None,
        description="the model's method each step calls (inverse, generate, encode, ...); unset: the module itself "
        "(model(*inputs), its forward); checked against the built model when the harness loads "
        "(rewriter.harness.model_entry)",
    )
    shapes: list[dict[str, int]] = Field(default_factory=lambda: [{}])
    mode: Literal["inference", "training"] = "inference"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str | None = Field(
        default=None,
        description="cpu, cuda or cuda:N; unset: cuda when torch sees a CUDA device, else cpu "
        "(rewriter.harness.resolve_device, at run time; the reports record which was used)",
    )

    _ident = field_validator("model", "inputs")(_check_ident)

    @field_validator("call")
    @classmethod
    def _call(cls, value: str | None) -> str | None:
        return None if value is None else _check_ident(value)

    @field_validator("file")
    @classmethod
    def _file(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if not value.endswith(".py") or value.startswith("/") or re.match(r"^[A-Za-z]:", value) or ".." in parts:
            raise ValueError(f"expected a .py file relative to SRC (no '..', not absolute), got {quoted(value)}")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(cpu|cuda(:\d+)?)$", value):
            raise ValueError(f"expected 'cpu', 'cuda' or 'cuda:N', got {quoted(value)}")
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
                                     f"keyword arguments of the inputs function), got {quoted(key)}")
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
#: from Intel's extension). tests/test_hostile_plans.py checks the list against the installed torch.
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
            raise ValueError(f"custom backend must be a registered name (an identifier), got {quoted(backend)}")
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

    def _from_the_site_only(self, setting: str) -> None:
        """Refuse a target under SRC for an action that sets a transformers model's ``setting``
        (``generation_config``) from the plan's site, which only a library target has.

        Raises:
            ValueError: the target is not ``module:Qual``, naming the action, the setting and the target.
        """
        if not self.library:
            raise ValueError(
                f"target: {self.action} sets a transformers model's {setting} from the plan's site; "  # type: ignore[attr-defined]
                f"name the model class by import path (e.g. 'transformers:LlamaForCausalLM'), got {self.target!r}"
            )

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
OWN_CALL_KEYS = ("fullgraph", "dynamic", "mode", "backend", "disable")
OWN_CALL_DEFAULTS: dict[str, Any] = {"fullgraph": False, "dynamic": None, "mode": "default", "backend": "inductor",
                                     "disable": False}
OWN_CALL_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


#: ``own_call.regional``'s one value that is no attribute path: the library's own regional compile
#: (:data:`rewriter.compile_facts.REPEATED_BLOCKS`, spelt again here: that module imports the plan).
REGIONAL_METHOD = "compile_repeated_blocks"
#: How close (difflib's ratio) a ``regional`` value, or its last attribute, must be to
#: :data:`REGIONAL_METHOD` to be read as a misspelling of it: 0.85 takes ``compile_repeated_block``
#: and ``compile_repeat_blocks`` and leaves a container named ``repeated_blocks`` (0.79) or ``blocks``.
REGIONAL_METHOD_CUTOFF = 0.85


class OwnCall(_Strict):
    """The ``own_call:`` of a ``compile`` action: the keyword arguments of the program's own
    ``torch.compile`` to set, limited to :data:`OWN_CALL_KEYS`; only the keys given change (a value
    equal to torch's default removes the keyword, so ``dynamic: null`` removes ``dynamic=``). At
    least one must be given; ``fullgraph``, ``mode``, ``backend`` and ``disable`` take no null.
    ``disable: true`` turns the call into a no-op (``torch.compile``'s ``disable=True``: it returns
    what it was given), the program with that compile off, its options kept for a later edit back.
    """

    fullgraph: StrictBool | None = Field(default=None, description="true or false")
    dynamic: StrictBool | None = Field(default=None, description="true, false, or null (torch's default)")
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = None
    backend: str | None = Field(default=None, description="a backend torch.compile knows by name")
    disable: StrictBool | None = Field(default=None, description="true (the call compiles nothing) or false")
    #: Regional compilation at the call site: the whole-model call becomes one compile per repeated
    #: block, ``for block in <module>.<regional>: block.compile(<the call's keyword arguments>)``;
    #: ``compile_repeated_blocks`` calls the library's own method (diffusers' ``ModelMixin``) instead.
    regional: str | None = Field(default=None, description="the attribute path of the repeated blocks' container "
                                 "(layers, model.layers; self.layers, as the model's class reads it, is read as "
                                 "layers), or compile_repeated_blocks: turn the whole-model call regional")

    @field_validator("fullgraph", "mode", "backend", "disable", mode="before")
    @classmethod
    def _not_null(cls, value: object, info: ValidationInfo) -> object:
        if value is None:  # null is torch's default for dynamic only
            raise ValueError(f"expected {_OWN_CALL_EXPECTED[info.field_name]}, got null")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if not _IDENT_RE.match(value):
            raise ValueError(f"expected a backend name (an identifier), got {quoted(value)}")
        if value not in KNOWN_BACKENDS:  # as CompileOptions: a typo fails at the first call
            hint = near_names(value, sorted(KNOWN_BACKENDS))
            raise ValueError(f"unknown backend {value!r}; expected one torch.compile knows (e.g. 'inductor', "
                             "'eager', 'aot_eager')" + (f" ({hint})" if hint else "")
                             + "; a backend your code registers: edit the call by hand")
        return value

    @field_validator("regional")
    @classmethod
    def _regional(cls, value: str | None) -> str | None:
        if value is None or value == REGIONAL_METHOD:
            return value
        expected = f"expected an attribute path (layers, model.layers) or {REGIONAL_METHOD}, got {quoted(value)}"
        if value == "self":
            raise ValueError(f"{expected} (the model itself; name the attribute that holds its blocks, e.g. layers)")
        # the attribute as the model's class reads it (self.layers): the path is walked on the compiled name
        value = value.removeprefix("self.")
        if value == REGIONAL_METHOD:
            return value
        last = value.rsplit(".", 1)[-1].removesuffix("()")
        if difflib.get_close_matches(last, [REGIONAL_METHOD], n=1, cutoff=REGIONAL_METHOD_CUTOFF):
            # an attribute path here would be written as a container, `for block in model.compile_repeated_block`
            raise ValueError(f"{expected} (did you mean {REGIONAL_METHOD!r}? the library's method, called on the "
                             "compiled module itself)")
        if not all(_IDENT_RE.match(part) for part in value.split(".")):
            raise ValueError(expected)
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
                      "backend": "a backend name", "disable": "true or false"}


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
        "adding a second compile; only the keys named change (fullgraph, mode, dynamic, backend, disable), or "
        "regional turns its whole-model call into one compile per block",
    )

    @field_validator("own_call", mode="before")
    @classmethod
    def _own_call(cls, value: object) -> object:
        if value is None:  # given as null (`own_call:` left empty): not read as "add a compile"
            raise ValueError("expected a mapping of " + ", ".join(OWN_CALL_KEYS) + ", regional to set, got null; "
                             "leave own_call out to add a compile instead")
        if not isinstance(value, (dict, OwnCall)):
            raise ValueError("expected a mapping of " + ", ".join(OWN_CALL_KEYS) + f", regional to set, got {quoted(value)}")
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
        if self.own_call.disable and self.own_call.regional is not None:
            raise ValueError("own_call.disable turns the call off, and own_call.regional compiles each block with it: "
                             "expected one of the two")
        return self

    @property
    def compiles(self) -> bool:
        """Whether the action leaves code compiled: False for ``own_call: {disable: true}``, which
        turns the program's call off."""
        return not (self.own_call is not None and self.own_call.disable)


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
            raise ValueError(f"expected a dotted name like 'torch.topk', got {quoted(value)}")
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


#: The options ``PYTORCH_CUDA_ALLOC_CONF`` takes, each with the kind of value torch's parser accepts
#: (PyTorch docs, "CUDA semantics: Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"; the keys of
#: c10/core/AllocatorConfig.h and c10/cuda/CUDAAllocatorConfig.h, torch 2.13, with the ROCm
#: spellings torch also accepts). torch refuses any other key, and a bool other than ``True`` or
#: ``False``, only at CUDA's first allocation, long after the rewrite: the plan is checked here,
#: against the union over versions (a key newer than the torch in use is still torch's to refuse).
ALLOC_CONF_OPTIONS: dict[str, str] = {
    "backend": "backend",
    "max_split_size_mb": "mb>=20",
    "max_non_split_rounding_mb": "mb>=20",
    "large_segment_size_mb": "mb>0",
    "roundup_power2_divisions": "divisions",
    "garbage_collection_threshold": "fraction",
    "expandable_segments": "bool",
    "release_lock_on_cudamalloc": "bool",
    "release_lock_on_hipmalloc": "bool",
    "pinned_use_cuda_host_register": "bool",
    "pinned_use_hip_host_register": "bool",
    "pinned_num_register_threads": "power2",
    "pinned_use_background_threads": "bool",
    "pinned_max_round_threshold_mb": "mb>=0",
    "pinned_max_cached_size_mb": "mb>=0",
    "pinned_reserve_segment_size_mb": "mb>=0",
    "pinned_free_catch_all": "bool",
    "graph_capture_record_stream_reuse": "bool",
    "per_process_memory_fraction": "fraction]",
    "throw_on_cudamalloc_oom": "bool",
}
_ALLOC_CONF_EXPECTED = {
    "backend": "'native' or 'cudaMallocAsync'",
    "mb>=20": "an integer size in MB >= 20",
    "mb>0": "an integer size in MB > 0",
    "mb>=0": "an integer size in MB",
    "divisions": "a power of 2, or a list like [256:4,>:1] of power-of-2 sizes (or '>') to power-of-2 divisions (or 0)",
    "fraction": "a number strictly between 0 and 1",
    "fraction]": "a number in (0, 1]",
    "bool": "True or False",
    "power2": "a power of 2",
}


def _power_of_two(text: str, zero: bool = False) -> bool:
    return text.isdigit() and (int(text) & (int(text) - 1) == 0) and (zero or int(text) > 0)


def _alloc_value_ok(kind: str, value: str) -> bool:
    """Whether ``value`` is a value torch's allocator parser accepts for an option of ``kind``."""
    if kind == "bool":
        return value in ("True", "False")
    if kind == "backend":
        return value in ("native", "cudaMallocAsync", "hipMallocAsync")
    if kind.startswith("mb"):
        least = {"mb>=20": 20, "mb>0": 1, "mb>=0": 0}[kind]
        return value.isdigit() and int(value) >= least
    if kind == "power2":
        return _power_of_two(value)
    if kind.startswith("fraction"):
        try:
            number = float(value)
        except ValueError:
            return False
        return 0 < number < 1 or (kind == "fraction]" and number == 1)
    if kind == "divisions":
        if not value.startswith("["):
            return _power_of_two(value)  # torch's parser: 0 only inside the bracketed list
        for pair in value[1:-1].split(","):
            size, _, divisions = pair.partition(":")
            if not (size == ">" or _power_of_two(size)) or not _power_of_two(divisions, zero=True):
                return False
        return True
    return False


class AllocatorAction(_Action):
    """Set ``PYTORCH_CUDA_ALLOC_CONF`` (default ``expandable_segments:True``) at the entry."""

    action: Literal["allocator"]
    settings: str = "expandable_segments:True"

    @field_validator("settings")
    @classmethod
    def _settings(cls, value: str) -> str:
        # PYTORCH_CUDA_ALLOC_CONF's grammar (c10/core/AllocatorConfig.h): comma-separated
        # key:value options, a value possibly a bracketed list ("roundup_power2_divisions:[256:4]").
        # The shape first, then each key against ALLOC_CONF_OPTIONS and its value against its kind.
        option = r"[A-Za-z_]\w*:(?:\[[^\[\]]*\]|[^,\[\]\s]+)"
        if not re.fullmatch(rf"{option}(?:,{option})*", value):
            raise ValueError(
                f"expected PYTORCH_CUDA_ALLOC_CONF options like 'expandable_segments:True' or "
                f"'max_split_size_mb:128,garbage_collection_threshold:0.6', got {quoted(value)}"
            )
        seen: set[str] = set()
        for match in re.finditer(option, value):
            key, _, item = match.group(0).partition(":")
            kind = ALLOC_CONF_OPTIONS.get(key)
            if kind is None:
                hint = near_names(key, ALLOC_CONF_OPTIONS)
                raise ValueError(
                    f"unknown PYTORCH_CUDA_ALLOC_CONF option {key!r}"
                    + (f" ({hint})" if hint else f"; expected one of {', '.join(ALLOC_CONF_OPTIONS)}")
                )
            if key in seen:
                raise ValueError(f"PYTORCH_CUDA_ALLOC_CONF option {key!r} is given twice in {quoted(value)}")
            seen.add(key)
            if not _alloc_value_ok(kind, item):
                hint = near_names(item, ("True", "False")) if kind == "bool" else None
                raise ValueError(
                    f"{key}: expected {_ALLOC_CONF_EXPECTED[kind]}, got {quoted(item)}" + (f" ({hint})" if hint else "")
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
        self._from_the_site_only("generation_config")
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
                f"expected one of {names} (transformers' attn_implementation names stackpart measures), got {shown(value)}"
                + (f" ({hint})" if hint else "")
            )
        return value

    @model_validator(mode="after")
    def _library_only(self) -> "AttentionAction":
        self._from_the_site_only("attn_implementation")
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
                raise ValueError(f"{key}: expected {allowed[key]}, got {shown(item)}" + (f" ({hint})" if hint else ""))
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
            raise ValueError(f"expected 1, got {shown(value)}")
        return value


def json_schema() -> str:
    """The plan's JSON Schema (draft 2020-12, as pydantic writes it), pretty-printed."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True)
