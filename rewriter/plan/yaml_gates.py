"""What a plan's YAML may hold, checked before it is validated: no alias, no nesting deeper than
:data:`MAX_YAML_DEPTH`, no number longer than :data:`MAX_NUMBER_CHARS`, no repeated key, and no merge
key or plain scalar that YAML 1.1 (PyYAML) and YAML 1.2 read differently. Each refusal is one
:class:`~rewriter.errors.StackpartError` at the offending node's line and column.
"""

from __future__ import annotations

import re

import yaml

from ..errors import StackpartError
from .messages import field_path
from .values import shown


#: The deepest YAML nesting a plan may have. A valid plan nests 4 deep (``actions[i].options.
#: fullgraph``); the cap stops a hostile file before PyYAML's recursive composer (which raises
#: RecursionError near 1,000 levels) and its scanner (quadratic in flow depth: 2.5 s at 3,000).
MAX_YAML_DEPTH = 16


def gate_yaml(text: str, path: str) -> None:
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
#: :data:`rewriter.plan.schema.MAX_SIZE` (19 digits) and a float needs at most 17 significant
#: digits; a longer one is refused before PyYAML builds it: a 5,000-digit integer passes Python's
#: 4,300-digit limit on ``int(str)`` (``ValueError``), and a base-60 ``1:1:...`` of 400 KB costs
#: PyYAML quadratic time (28 s measured) to build.
MAX_NUMBER_CHARS = 100
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


def no_long_numbers(node: yaml.Node | None, path: str, loc: tuple = ()) -> None:
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



#: The tag PyYAML resolves a plain ``<<`` key to: YAML 1.1's merge key (yaml.org/type/merge.html),
#: which YAML 1.2 does not have.
_MERGE_TAG = "tag:yaml.org,2002:merge"


def no_merge_keys(node: yaml.Node | None, path: str) -> None:
    """Refuse YAML 1.1's merge key ``<<``: PyYAML merges the fields it names into the mapping,
    YAML 1.2 reads a field named ``<<``. Runs on the composed tree, before the constructor (which
    merges in place, leaving no trace of the key).

    Raises:
        StackpartError: at the key's line and column.
    """
    stack = [node] if node is not None else []
    while stack:
        item = stack.pop()
        if isinstance(item, yaml.MappingNode):
            for key_node, value_node in item.value:
                if key_node.tag == _MERGE_TAG:
                    mark = key_node.start_mark
                    raise StackpartError(
                        "'<<' is YAML 1.1's merge key: PyYAML merges the fields it names into this mapping, "
                        "YAML 1.2 reads a field named '<<'; stackpart refuses what the two read differently",
                        path=path, line=mark.line + 1, col=mark.column + 1, hint="write the fields out in full",
                    )
                stack.append(value_node)
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)


def no_duplicate_keys(node: yaml.Node, path: str) -> None:
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
            no_duplicate_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            no_duplicate_keys(item, path)


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
    fix = shown(old) if isinstance(old, bool) or not isinstance(new, (int, float)) else f"{shown(old)} or {shown(new)}"
    wanted = "the boolean" if isinstance(old, bool) else "the number"
    said = f"the string {text!r}" if isinstance(new, str) else shown(new)
    return (f"{text!r} is read by YAML 1.1 (PyYAML) as {shown(old)}{_yaml11_form(text) if not isinstance(old, bool) else ''} "
            f"but by YAML 1.2 as {said}; write {fix} for {wanted}, or quote it for the string")


def no_yaml11_literals(node: yaml.Node, path: str, loc: tuple = ()) -> None:
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
            no_yaml11_literals(value_node, path, loc + (key_node.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            no_yaml11_literals(item, path, loc + (i,))
