"""``--shape batch=8,seq=512``: one input shape as the command line spells it.

Read without torch (the CLI checks it while parsing arguments, before ``diagnose`` needs torch);
``name`` is a keyword argument of the harness's inputs function and ``int`` a size as plan.yaml's
``harness.shapes`` takes it (0 to 2**63-1, ASCII digits only).
"""

from __future__ import annotations

import re

from .plan import MAX_SIZE

#: What one ``--shape`` value looks like, as the errors say it.
SHAPE_SYNTAX = "name=int,... (e.g. batch=8,seq=512)"
_NAME_RE = re.compile(r"[A-Za-z_]\w*\Z", re.ASCII)
_SIZE_RE = re.compile(r"[-+]?[0-9]+\Z")


def parse_shape(text: str) -> dict[str, int]:
    """``batch=8,seq=512`` -> ``{"batch": 8, "seq": 512}``.

    Raises:
        ValueError: what is wrong with which item (no ``=``, a name that is not an identifier,
            a size that is not a decimal integer in range, a name given twice, an empty item).
    """
    if not text.strip():
        raise ValueError("no name=int pair")
    out: dict[str, int] = {}
    for item in text.split(","):
        name, size = _parse_item(item)
        if name in out:
            raise ValueError(f"{name!r} is given twice ({out[name]}, then {size}); each name once per shape")
        out[name] = size
    return out


def _parse_item(item: str) -> tuple[str, int]:
    """One ``name=int`` item of a shape.

    Raises:
        ValueError: the item is empty, has no ``=``, or its name or size is not valid.
    """
    if not item.strip():
        raise ValueError("an empty item between commas")
    name, sep, size = (part.strip() for part in item.partition("="))
    if not sep:
        raise ValueError(f"{item.strip()!r} has no '=size'")
    if not name:
        raise ValueError(f"{item.strip()!r} has no name before '='")
    if not _NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a Python identifier (a keyword argument of the inputs function)")
    if not _SIZE_RE.match(size):
        raise ValueError(f"{name}: {size!r} is not a decimal integer")
    value = int(size)
    if not 0 <= value <= MAX_SIZE:
        raise ValueError(f"{name}: {value} is not a size from 0 to 2**63-1")
    return name, value


def default_shape_text(harness: object, inputs: str) -> str:
    """What a run without ``--shape`` (and without ``harness.shapes``) feeds the model, read from
    the harness file without running it: ``make_inputs()``'s own defaults, e.g. ``make_inputs's
    defaults, batch=4,seq=128 (one shape; pass --shape name=int,... for the shapes your program
    runs)``. A default that is not an int literal, or a file that does not parse, is said as
    ``make_inputs() with no arguments``."""
    import ast
    from pathlib import Path

    advice = "one shape; pass --shape name=int,... (repeatable) for the shapes your program runs"
    try:
        tree = ast.parse(Path(str(harness)).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        tree = None
    func = next((n for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef) and n.name == inputs), None)
    if func is not None:
        args = func.args.posonlyargs + func.args.args
        pairs = list(zip([a.arg for a in args[len(args) - len(func.args.defaults):]], func.args.defaults))
        pairs += [(a.arg, d) for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults) if d is not None]
        sizes = [f"{name}={d.value}" for name, d in pairs
                 if isinstance(d, ast.Constant) and isinstance(d.value, int) and not isinstance(d.value, bool)]
        if sizes:
            return f"{inputs}()'s own defaults, {','.join(sizes)} ({advice})"
    return f"{inputs}() with no arguments ({advice})"
