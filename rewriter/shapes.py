"""``--shape batch=8,seq=512``: one input shape as the command line spells it.

Read without torch (the CLI checks it while parsing arguments, before ``diagnose`` needs torch);
``name`` is a keyword argument of the harness's inputs function and ``int`` a size as plan.yaml's
``harness.shapes`` takes it (0 to 2**63-1, ASCII digits only).
"""

from __future__ import annotations

import re
from typing import Any

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


#: What the note on a run without ``--shape`` advises.
_DEFAULTS_ADVICE = "one shape; pass --shape name=int,... (repeatable) for the shapes your program runs"


def own_default_shape(inputs: object) -> dict[str, int]:
    """The shape ``inputs()`` runs with no arguments: each keyword its signature gives an int
    default (a size plan.yaml's ``harness.shapes`` takes, 0 to 2**63-1; no bool), e.g.
    ``{"batch": 2, "seq": 16}`` for ``make_inputs(batch: int = 2, seq: int = 16)``. Calling it
    with that shape is calling it with no arguments, so a run without ``--shape`` states it as
    its harness shape (batch scaling finds its batch key, the plan and report name it); ``{}``
    where no default is such an int or the signature cannot be read."""
    import inspect

    try:
        params = inspect.signature(inputs).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p.default for p in params if p.kind in keyword and type(p.default) is int and 0 <= p.default <= MAX_SIZE}


def own_defaults_text(inputs: str, shape: dict[str, int]) -> str:
    """The note on a run without ``--shape``: ``make_inputs()'s own defaults, batch=2,seq=16
    (one shape; ...)``, or ``make_inputs() with no arguments (...)`` where ``shape`` is empty."""
    if shape:
        return f"{inputs}()'s own defaults, {','.join(f'{k}={v}' for k, v in shape.items())} ({_DEFAULTS_ADVICE})"
    return f"{inputs}() with no arguments ({_DEFAULTS_ADVICE})"


def with_own_default_shape(spec: Any, inputs: object) -> tuple[Any, str | None]:
    """A harness section (``harness:``, :class:`rewriter.plan.Harness`) where neither ``--shape``
    nor ``harness.shapes`` gave a shape (``spec.shapes == [{}]``), with the inputs function's own
    int defaults as its one shape (:func:`own_default_shape`), so the run, the plan and the report
    name the shape that runs; and the note that says which one (:func:`own_defaults_text`). A
    section with shapes, or an inputs function with no such default, comes back as it is (the
    note then says ``make_inputs() with no arguments``; None where shapes were given)."""
    if spec.shapes != [{}]:
        return spec, None
    own = own_default_shape(inputs)
    return (spec.model_copy(update={"shapes": [own]}) if own else spec), own_defaults_text(spec.inputs, own)
