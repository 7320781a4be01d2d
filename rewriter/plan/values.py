"""How a plan error quotes a value, and what it suggests for a number PyYAML misread.

Shared by the schema's validators (:mod:`rewriter.plan.schema`) and the loader's messages
(:mod:`rewriter.plan.messages`), so a value reads the same in every ``field: expected X, got Y``.
"""

from __future__ import annotations

import datetime
import re

import yaml


def quoted(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters (a 100,000-character
    ``site:`` made a 100 KB error line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: object) -> str:
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
        cut = value if len(value) <= 40 else value[:37] + "..."  # one short line for a 5,000-digit one
        said = f"PyYAML reads {cut} as a string, not a number"
    elif integer and isinstance(value, float) and value.is_integer():
        number, said = value, None
    else:
        return None
    if integer:
        if not number.is_integer():
            return said
        return (said + "; " if said else "") + f"write {int(number)}"
    return f"{said}; write {yaml.safe_dump(number).splitlines()[0]}"

