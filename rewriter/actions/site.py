"""The plan's ``site``: where the actions on an installed library are applied, in the user's code.

stackpart never edits site-packages. A plan whose actions name library classes by import path
(``transformers.models.llama.modeling_llama:LlamaDecoderLayer``) has a ``site``, the function
under SRC that returns the model (``train.py::build``). The rewrite decorates it with
``@apply_plan`` from one generated module, ``_stackpart/library.py``, which applies the library
actions to the model the function returns — all of it in the reviewed diff:

* ``compile`` ``region``: ``module.compile(...)`` on every module whose class is the class itself
  (``type(m) is cls``: a subclass's instances are not matched, as diffusers'
  ``compile_repeated_blocks`` matches ``_repeated_blocks`` by exact class name; in place:
  state_dict keys and hooks unchanged, torch.compile docs "Compiling modules"); ``whole``: the
  same on the outermost instances (the model itself, for its own class); ``nested``:
  ``torch.compiler.nested_compile_region`` on the class's ``forward``, as the decorator would;
* ``disable``: ``torch.compiler.disable`` set on the function's class or module;
* ``mark_dynamic``: a forward pre-hook on every module of exactly the class (the modules a
  ``region`` compile compiles), marking the named input's dim at the block boundary;
* ``generation``: the model's own ``generation_config`` lever (transformers' static KV cache, and
  the decode-step compile ``generate`` then does itself on CUDA);
* ``attention``: the model's own attention lever, ``set_attn_implementation(...)`` on the
  outermost instances of the model class, checked to have taken effect.

Every action that finds modules (``compile``, ``mark_dynamic``, ``generation``, ``attention``)
matches the class exactly. ``nested`` and ``disable`` replace a function on its class or module,
as a decorator in the source would, so a subclass that inherits the function runs the replaced one.

One decorator means the same whether the model comes from SRC or a library: the search measures
the rewritten tree the same way in both cases (:mod:`rewriter.diagnose.search`).
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ..errors import StackpartError
from ..library_targets import LibraryTarget
from ..plan import AttentionAction, CompileAction, DisableAction, GenerationAction, LoadedPlan, MarkDynamicAction
from .base import TargetedCommand, call_args, py_literal
from .dynamic import OPEN_MAX

#: The generated module (under the vendored package) and the decorator it exports.
LIBRARY_MODULE = "library"
DECORATOR = "apply_plan"


@dataclass
class SiteSpec:
    """What the site command writes: the decorator on ``target`` and the generated module.

    Attributes:
        target: the site, ``file.py::func`` (the plan's ``site``).
        plan_name: the plan file's name, for the generated text.
        steps: one dict per library action, for ``templates/library.py.j2``.
        imports: the generated module's import lines for the library names it uses.
    """

    target: str
    plan_name: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    action: str = "site"


class _Names:
    """Import lines and unique local names for the library objects the generated module uses."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._bound: dict[tuple[str, str], str] = {}
        self._taken = {"functools", "inspect", "torch", "APPLIED", "apply", "apply_plan", "model", "module"}

    def _local(self, want: str) -> str:
        name, n = want, 1
        while name in self._taken or keyword.iskeyword(name):
            n += 1
            name = f"{want}_{n}"
        self._taken.add(name)
        return name

    def attr(self, module: str, name: str) -> str:
        """The local name for ``from module import name``."""
        key = (module, name)
        if key not in self._bound:
            local = self._local(name)
            self._bound[key] = local
            self.lines.append(f"from {module} import {name}" + (f" as {local}" if local != name else ""))
        return self._bound[key]

    def module(self, module: str) -> str:
        """The local name for ``import module``."""
        key = (module, "")
        if key not in self._bound:
            local = self._local(module.rpartition(".")[2])
            self._bound[key] = local
            self.lines.append(f"import {module} as {local}")
        return self._bound[key]


def _summary(action: Any) -> str:
    if isinstance(action, CompileAction):
        opts = call_args(action.options.non_default())
        how = {"region": "module.compile() on every instance of exactly the class", "whole": "module.compile() on the outermost instance",
               "nested": "nested_compile_region on its forward"}[action.strategy]
        return f"compile {action.target} ({action.strategy}: {how}{', ' + opts if opts else ''})"
    if isinstance(action, DisableAction):
        return f"disable {action.target}" + ("" if action.recursive else " (recursive=False)")
    if isinstance(action, GenerationAction):
        return (f"generation_config.cache_implementation = {action.cache_implementation!r} on {action.target}"
                + (" (disable_compile)" if action.disable_compile else ""))
    if isinstance(action, AttentionAction):
        return f"set_attn_implementation({action.implementation!r}) on {action.target}"
    assert isinstance(action, MarkDynamicAction)
    how = "mark_dynamic" if action.strict else "maybe_mark_dynamic"
    return f"{how} {action.arg} dim {action.dim} entering each {action.target}"


def site_spec(loaded: LoadedPlan, targets: dict[int, LibraryTarget]) -> SiteSpec:
    """The site command's input for the plan's library actions (``targets``: action index → its
    resolved target), in plan order."""
    assert loaded.plan.site is not None
    names = _Names()
    steps: list[dict[str, Any]] = []
    for index, target in sorted(targets.items()):
        action = loaded.plan.actions[index]
        head, _, rest = target.qualname.partition(".")
        step: dict[str, Any] = {"index": index, "summary": _summary(action)}
        if isinstance(action, DisableAction):
            if rest:
                owner_path, _, attr = target.qualname.rpartition(".")
                owner = names.attr(target.module, head) + owner_path[len(head):]
            else:
                owner, attr = names.module(target.module), head
            step.update(kind="disable", owner=owner, name=py_literal(attr), recursive=action.recursive)
        else:
            cls = names.attr(target.module, head) + (f".{rest}" if rest else "")
            if isinstance(action, GenerationAction):
                step.update(kind="generation", cls=cls, cache=py_literal(action.cache_implementation),
                            disable_compile=action.disable_compile)
            elif isinstance(action, AttentionAction):
                step.update(kind="attention", cls=cls, implementation=py_literal(action.implementation))
            elif isinstance(action, CompileAction) and action.strategy == "nested":
                step.update(kind="nested", cls=cls)
            elif isinstance(action, CompileAction):
                step.update(kind="compile", cls=cls, outermost=action.strategy == "whole",
                            options=call_args(action.options.non_default()))
            else:
                assert isinstance(action, MarkDynamicAction)
                # the same bounds the decorator form writes (rewriter.actions.dynamic.mark_dynamic_call)
                low = None if action.min is None else max(action.min, 2)
                high = action.max
                if (low is None) != (high is None):
                    low, high = (2 if low is None else low), (OPEN_MAX if high is None else high)
                bounds = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
                step.update(kind="mark", cls=cls, arg=py_literal(action.arg), dim=action.dim, strict=action.strict,
                            bounds="{" + ", ".join(f"{py_literal(k)}: {v}" for k, v in bounds.items()) + "}")
        steps.append(step)
    return SiteSpec(target=loaded.plan.site, plan_name=loaded.path.rsplit("/", 1)[-1], steps=steps, imports=names.lines)


class SiteCommand(TargetedCommand):
    """Decorate the site function with ``@apply_plan`` and generate ``_stackpart/library.py``."""

    VISIT_TARGET_BODY = False

    DESCRIPTION = "apply library-side actions where the model is built: @apply_plan on the site"
    action: SiteSpec  # type: ignore[assignment]

    def needs_torch(self) -> bool:
        return False

    def rewrite(self, func: cst.FunctionDef) -> cst.FunctionDef:
        if func.asynchronous is not None:
            raise StackpartError(
                f"site {self.action.target} is an async function; the site must return the model itself",
                hint="name the synchronous function that builds the model",
            )
        spec = self.action
        self.generate(LIBRARY_MODULE, "library.py.j2", plan_name=spec.plan_name, site=spec.target,
                      steps=spec.steps, imports=spec.imports)
        self.add_vendored_import(LIBRARY_MODULE, DECORATOR)
        if any(_decorator_is(d, DECORATOR) for d in func.decorators):
            return func
        return self.add_decorator(func, DECORATOR)


def _decorator_is(dec: cst.Decorator, name: str) -> bool:
    expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
    return isinstance(expr, cst.Name) and expr.value == name
