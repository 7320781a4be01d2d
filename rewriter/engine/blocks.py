"""Repeated blocks: the instances of one module class across every container that holds them.

One finder for the ladder (``diagnose/rungs/granularity.py``: the compile unit and its share of the
step) and for validate's ``regional`` baseline (:mod:`.variants`), so both name the same blocks.

A *block class* is a class of non-leaf modules (modules with submodules) held as children of
``nn.ModuleList``, ``nn.Sequential`` or ``nn.ModuleDict`` containers, with >= 2 instances over
all the containers of the model together. A container need not hold two itself: timm's ResNet
keeps its ``BasicBlock`` s in ``layer1`` .. ``layer4``, transformers' ``ResNetModel`` in each
``ResNetStage.layers``; an encoder and a decoder stack of one class count as one class.

Two rules keep the unit the block, not what wraps it or what it wraps:

* *Stages.* A candidate class each of whose instances has a direct child container holding
  instances of another candidate class with >= :data:`STAGE_SHARE` of its parameters is a stage
  (a wrapper of blocks: transformers' ``ResNetStage``, timm's ConvNeXt stage); its blocks are
  the unit. The inner class must itself be two levels deep (a child that has children: a block
  holds layers): transformers' ``ResNetBasicLayer`` keeps all its parameters in its
  ``layer`` Sequential of ``ResNetConvLayer`` (conv, norm, activation: one level), and is the
  block, not a stage of its convolutions. An MoE decoder layer is not a stage of its experts:
  they sit in a grandchild (``mlp.experts``), not a direct child container.
* *Nesting.* An instance inside an instance of another kept class already runs inside that
  region (an MoE block's experts) and is dropped; a class left with < 2 instances is dropped.

Instances are grouped by their *shape signature*: the names, shapes and dtypes of their
parameters and buffers (widths, channels, an extra shortcut convolution all change it), and
their submodules' settings (``extra_repr``: a conv's stride). When the
class's ``forward`` is compiled once, Dynamo guards on each parameter's size (parameters are
static: ``torch._dynamo.config.force_parameter_static_shapes = True``, torch/_dynamo/config.py),
so each distinct signature costs at least one graph of that one code object, counted against
``torch._dynamo.config.recompile_limit`` (:func:`recompile_limit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .watch import unwrapped

#: A candidate class is a stage of the blocks in its direct child container when they hold at
#: least this share of its parameters (transformers' ResNetStage: all of them; a ConvNeXt stage
#: with its downsampling conv: ~95%).
STAGE_SHARE = 0.5


@dataclass
class ShapeGroup:
    """Instances of one block class with one parameter/buffer signature.

    Attributes:
        signature: :func:`shape_signature` of its instances (tensors, then module settings).
        instances: qualified module names (``named_modules``), in model order.
        params: parameter elements of one instance.
    """

    signature: tuple[tuple[str, tuple[int, ...], str], ...]
    instances: list[str] = field(default_factory=list)
    params: int = 0

    def describe(self, limit: int = 3) -> str:
        """A short human form: the first ``limit`` parameter shapes (``l.weight 64x64, ...``)."""
        tensors = [e for e in self.signature if isinstance(e[1], tuple)]
        parts = [f"{n} {'x'.join(map(str, s)) or 'scalar'}" for n, s, _ in tensors[:limit]]
        more = len(tensors) - limit
        return ", ".join(parts) + (f", +{more} more" if more > 0 else "")


@dataclass
class Container:
    """One container holding instances of a block class: its qualified name (``""`` for the
    root), the module that owns it as ``attr`` (None for the root), the instances' names."""

    name: str
    owner_name: str | None
    attr: str
    instances: list[str] = field(default_factory=list)


@dataclass
class BlockGroup:
    """Every kept instance of one block class.

    Attributes:
        cls: the class.
        instances: qualified names, model order.
        modules: the instances, same order.
        containers: the containers holding them, model order.
        shapes: the shape groups, model order of their first instance.
        params: parameter elements over all instances.
    """

    cls: type
    instances: list[str]
    modules: list[Any]
    containers: list[Container]
    shapes: list[ShapeGroup]
    params: int


def shape_signature(module: Any) -> tuple[tuple[Any, ...], ...]:
    """``((name, shape, dtype), ...)`` of ``module``'s parameters then buffers (names relative to
    it), then ``(name, class, extra_repr)`` of each submodule that has a configuration (a conv's
    stride: transformers' ResNet's first block of a stage differs from the next by its stride as
    well, and Dynamo guards on it, as on every attribute the forward reads). Equal for instances
    Dynamo can serve with one graph, as far as their tensors and module settings go."""
    params = tuple((n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), str(b.dtype)) for n, b in module.named_buffers())
    configs = tuple((n, type(m).__name__, m.extra_repr()) for n, m in module.named_modules() if m.extra_repr())
    return params + buffers + configs


def _inside(name: str, outer: str) -> bool:
    return outer == "" and name != "" or name.startswith(outer + ".")


def find_block_groups(model: Any) -> list[BlockGroup]:
    """The repeated block classes of ``model`` (rules in the module docstring), largest (by
    parameter elements over all instances) first. Pure structure: no forward runs. A model
    wrapped by ``torch.compile`` is read through its wrapper (:func:`.watch.unwrapped`): the names are
    the model's own.

    Returns:
        one :class:`BlockGroup` per class; empty when no class has >= 2 kept instances.
    """
    import torch.nn as nn

    containers = (nn.ModuleList, nn.Sequential, nn.ModuleDict)
    modules = dict(unwrapped(model).named_modules(remove_duplicate=True))
    # class -> [(instance name, container name)]
    held: dict[type, list[tuple[str, str]]] = {}
    for cname, cont in modules.items():
        if not isinstance(cont, containers):
            continue
        for key, child in cont.named_children():
            if isinstance(child, containers) or not any(True for _ in child.children()):
                continue  # a nested container is walked itself; a leaf (Linear) is no block
            qual = f"{cname}.{key}" if cname else key
            if qual in modules:
                held.setdefault(type(child), []).append((qual, cname))
    candidates = {cls: inst for cls, inst in held.items() if len(inst) >= 2}

    sizes: dict[int, int] = {}

    def numel(mod: Any) -> int:  # memoized: the stage test asks for the same modules per class pair
        if id(mod) not in sizes:
            sizes[id(mod)] = sum(p.numel() for p in mod.parameters())
        return sizes[id(mod)]

    def deep(mod: Any) -> bool:  # holds a module that holds modules: a block, not a layer
        return any(any(True for _ in c.children()) for c in mod.children())

    stages: set[type] = set()
    for outer, outer_inst in candidates.items():
        for inner, inner_inst in candidates.items():
            if inner is outer or not all(deep(modules[i]) for i, _ in inner_inst):
                continue
            ok = True
            for oname, _ in outer_inst:
                direct = [i for i, c in inner_inst if c.rpartition(".")[0] == oname]  # in oname.<attr>
                total = numel(modules[oname])
                if not direct or total == 0 or sum(numel(modules[i]) for i in direct) < STAGE_SHARE * total:
                    ok = False
                    break
            if ok:
                stages.add(outer)
                break
    kept = {cls: inst for cls, inst in candidates.items() if cls not in stages}
    outers = [name for inst in kept.values() for name, _ in inst]
    groups: list[BlockGroup] = []
    for cls, inst in kept.items():
        mine = [(n, c) for n, c in inst if not any(_inside(n, o) for o in outers if o != n)]
        if len(mine) < 2:
            continue
        conts: dict[str, Container] = {}
        shapes: dict[tuple, ShapeGroup] = {}
        for name, cname in mine:
            if cname not in conts:
                owner, _, attr = cname.rpartition(".")
                conts[cname] = Container(cname, owner if cname else None, attr)
            conts[cname].instances.append(name)
            sig = shape_signature(modules[name])
            group = shapes.setdefault(sig, ShapeGroup(sig, params=numel(modules[name])))
            group.instances.append(name)
        groups.append(BlockGroup(
            cls=cls,
            instances=[n for n, _ in mine],
            modules=[modules[n] for n, _ in mine],
            containers=list(conts.values()),
            shapes=list(shapes.values()),
            params=sum(numel(modules[n]) for n, _ in mine),
        ))
    groups.sort(key=lambda g: -g.params)
    return groups


def recompile_limit() -> tuple[str, int | None]:
    """``(config name, value)`` of Dynamo's per-code-object recompile limit in this torch:
    ``torch._dynamo.config.recompile_limit`` (torch >= 2.7; 8 by default, torch/_dynamo/config.py),
    else ``cache_size_limit`` (older torch); ``(name, None)`` when neither exists."""
    import torch._dynamo.config as config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            return name, int(getattr(config, name))
    return "recompile_limit", None
