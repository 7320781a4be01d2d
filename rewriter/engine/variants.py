"""The four variants a validation runs side by side.

- ``eager``: the original tree as written (the numerical reference).
- ``plan``: the rewritten tree (its decorators do the compiling).
- ``whole``: the original tree, ``model.compile(...)`` on the root module (torch's in-place
  whole-model compile; state_dict keys unchanged).
- ``regional``: the original tree, naive regional compile: every child of every repeated
  ``nn.ModuleList``/``nn.Sequential`` (>= 2 children of one class) compiled in place, as
  accelerate's ``compile_regions`` does. The block's ``forward`` is compiled (``blk.forward =
  torch.compile(blk.forward)``), so its Dynamo cache lives on the block's own code object and all
  instances share it and its recompile limit — exactly the exposure of compile_regions — without
  sharing ``nn.Module._call_impl``'s cache with the whole-model variant in the timing process.
"""

from __future__ import annotations

from typing import Any

VARIANTS = ("eager", "plan", "whole", "regional")
#: Which tree each variant is built from.
TREE = {"eager": "original", "plan": "rewritten", "whole": "original", "regional": "original"}


def repeated_blocks(model: Any) -> list[tuple[str, list[Any]]]:
    """``(qualified name, children)`` for every ModuleList/Sequential of >= 2 children of one class
    that lies in no other such list: the outermost repeated blocks. A list inside a repeated block
    (an MoE block's experts) runs inside the block's compiled region already; counting it too
    put the blocks' share of the step above 100% (a newcomer's MoE, session 3)."""
    import torch

    out: list[tuple[str, list[Any]]] = []
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            children = list(module.children())
            if len(children) >= 2 and len({type(c) for c in children}) == 1:
                if any(name.startswith(f"{outer}.") for outer, _ in out if outer != "<root>") or (out and out[0][0] == "<root>"):
                    continue
                out.append((name or "<root>", children))
    return out


def prepare(variant: str, model: Any, backend: str) -> dict[str, Any]:
    """Apply ``variant``'s compile to ``model`` in place; return what was done (for the report).

    ``variant`` is ``whole`` or ``regional`` (compiled here), else the tree's own code compiles
    (``eager``: nothing; a plan or search candidate: its decorators).
    """
    import torch

    if variant not in ("whole", "regional"):
        return {"compiled": "nothing" if variant == "eager" else "by the plan's decorators"}
    if variant == "whole":
        model.compile(backend=backend)
        return {"compiled": f"model.compile(backend={backend!r})"}
    if variant == "regional":
        regions = repeated_blocks(model)
        count = 0
        for _, children in regions:
            for child in children:
                child.forward = torch.compile(child.forward, backend=backend)
                count += 1
        names = ", ".join(f"{n} ({len(c)} x {type(c[0]).__name__})" for n, c in regions)
        return {
            "compiled": f"{count} blocks compiled in place (backend={backend!r})"
            + (f": {names}" if names else ": no repeated ModuleList found"),
            "blocks": count,
        }
