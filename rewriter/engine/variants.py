"""The four variants a validation runs side by side.

- ``eager``: the original tree as written (the numerical reference).
- ``plan``: the rewritten tree (its decorators do the compiling).
- ``whole``: the original tree, ``model.compile(...)`` on the root module (torch's in-place
  whole-model compile; state_dict keys unchanged).
- ``regional``: the original tree, naive regional compile: every instance of every repeated
  block (:func:`repeated_blocks`: the ladder's own finder, across all the containers of one
  class, plus lists of leaf modules) compiled in place, as accelerate's ``compile_regions``
  does. The block's ``forward`` is compiled (``blk.forward =
  torch.compile(blk.forward)``), so its Dynamo cache lives on the block's own code object and all
  instances share it and its recompile limit — exactly the exposure of compile_regions — without
  sharing ``nn.Module._call_impl``'s cache with the whole-model variant in the timing process.

Both baselines are plain compiles of the model: where the program compiles it itself (a
``torch.compile`` wrapper, ``module.compile()``, a compiled ``forward``, a decorated method), that
compile is taken off first (:func:`plain_model`); on top of it, a whole-model compile of an already
compiled model would be the program's compile again, and a block's compile inside the program's
whole-model compile never gets a graph of its own.
"""

from __future__ import annotations

from typing import Any

VARIANTS = ("eager", "plan", "whole", "regional")
#: Which tree each variant is built from.
TREE = {"eager": "original", "plan": "rewritten", "whole": "original", "regional": "original"}


def repeated_blocks(model: Any) -> list[tuple[str, list[Any]]]:
    """``(container's qualified name, its instances)`` for every container that holds a repeated
    block, model order; the root container is named ``"<root>"``.

    The blocks are :func:`.blocks.find_block_groups`' (the ladder's granularity rung uses the
    same finder, so the regional baseline compiles the blocks the diagnosis names): every
    instance of a class held in containers with >= 2 instances over all of them, across stages
    (ResNet's four), stacks (an encoder and a decoder) and ``ModuleDict`` s, a stage's blocks
    rather than the stage, the outermost only. A list inside a repeated block (an MoE block's
    experts) runs inside the block's compiled region already; counting it too put the blocks'
    share of the step above 100% (seen on an MoE model). As accelerate's
    ``compile_regions`` does, a ModuleList/Sequential of >= 2 leaf modules of one class (a list
    of heads) outside every block is a region too.
    """
    import torch

    from .blocks import find_block_groups
    from .watch import unwrapped

    model = unwrapped(model)  # the names are the model's own, not its torch.compile wrapper's
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    out: list[tuple[str, list[Any]]] = []
    inside: list[str] = []
    for group in find_block_groups(model):
        by_name = dict(zip(group.instances, group.modules))
        for cont in group.containers:
            out.append((cont.name, [by_name[n] for n in cont.instances]))
        inside += group.instances
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        children = list(module.children())
        if len(children) < 2 or len({type(c) for c in children}) != 1 or any(True for _ in children[0].children()):
            continue  # not a list of one leaf class (a list of blocks is the finder's)
        if name == "" or any(name.startswith(f"{o}.") for o in inside) or any(o == "" or name.startswith(f"{o}.") for o, _ in out):
            continue
        out.append((name, children))
    out.sort(key=lambda nc: order.get(nc[0], -1))
    return [(name or "<root>", children) for name, children in out]


def plain_model(model: Any) -> tuple[Any, list[str]]:
    """``model`` with the compiles it carries taken off (:func:`.watch.carried_compiles`, modules'
    and decorated methods' alike) and a root ``torch.compile`` wrapper unwrapped, for a baseline
    that compiles the model itself; and where each compile was (``<model>``, ``blocks.0``,
    ``Block.forward``), empty where the program compiles nothing."""
    from .watch import carried_compiles, take_off, unwrapped

    carried = carried_compiles(model)
    take_off(carried)
    return unwrapped(model), [c.path for c in carried]


def prepare(variant: str, model: Any, backend: str, call: str | None = None) -> dict[str, Any]:
    """Apply ``variant``'s compile to ``model`` in place; return what was done (for the report).

    ``variant`` is ``whole`` or ``regional`` (compiled here), else the tree's own code compiles
    (``eager``: nothing; a plan or search candidate: its decorators). ``call``: the model's method
    each step calls (``harness.call``); ``whole`` then compiles that method too, since
    ``model.compile()`` compiles ``__call__`` (``forward``) only.
    """
    import torch

    if variant not in ("whole", "regional"):
        return {"compiled": "nothing" if variant == "eager" else "by the tree's own code"}
    if variant == "whole":
        model.compile(backend=backend)
        if call is None:
            return {"compiled": f"model.compile(backend={backend!r})"}
        # on the instance, past a torch.compile wrapper's __setattr__ (which forwards to the module it wraps)
        object.__setattr__(model, call, torch.compile(getattr(model, call), backend=backend))
        return {"compiled": f"model.compile(backend={backend!r}) and model.{call} = torch.compile(model.{call})"}
    if variant == "regional":
        regions = repeated_blocks(model)
        count = own = 0
        for _, children in regions:
            for child in children:
                # a forward the program compiles itself (``@torch.compile`` on the block's method):
                # torch.compile of it again raises ("compile_wrapper already has a
                # get_compiler_config attribute"); the program's own compile is the regional one
                if hasattr(child.forward, "_torchdynamo_orig_callable"):
                    own += 1
                    continue
                child.forward = torch.compile(child.forward, backend=backend)
                count += 1
        names = ", ".join(f"{n} ({len(c)} x {type(c[0]).__name__})" for n, c in regions)
        return {
            "compiled": f"{count} blocks given torch.compile in place (backend={backend!r})"
            + (f": {names}" if names else ": no repeated ModuleList found")
            + (f"; {own} block(s) left to the program's own compile of their forward" if own else ""),
            "blocks": count + own,
        }
