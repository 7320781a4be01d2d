"""pydantic's validation errors as the plan's one-line messages, at the plan's ``file:line:col``.

Each error becomes ``field: expected X, got Y`` (or ``unknown field 'x'`` with the near names,
``missing required field 'x'``, ``unknown action 'x'``), located by walking pydantic's ``loc``
through the YAML paths the loader recorded (:func:`rewriter.plan.loader.parse_plan`).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import StackpartError, near_names
from .schema import (ACTION_MODELS, DYNAMO_CONFIG_KEYS, OWN_CALL_KEYS, CompileOptions, DynamoSettings, OwnCall,
                     Plan)
from .values import number_hint, shown


def errors_at(exc: ValidationError, marks: dict[tuple, tuple[int, int]], path: str) -> StackpartError:
    """The plan's error for pydantic's ``exc``: the first problem at its line and column, the others in
    its ``also`` (one line each), a misspelt key said once (:func:`_misspelt_not_missing`) and a union's
    per-member errors folded into one (:func:`_merge_members`).

    Args:
        exc: pydantic's error from validating the plan's data.
        marks: every YAML path -> its 1-based (line, col) (:func:`rewriter.plan.loader.parse_plan`).
        path: the plan's name as the user wrote it.
    """
    errors = []
    for error in _merge_members(_misspelt_not_missing(exc.errors())):
        at = tuple(error["loc"]) + (("action",) if error["type"] == "union_tag_invalid" else ())  # at its action: key
        _, (line, col) = _locate(at, marks)
        message, hint = _describe(error)
        errors.append(StackpartError(message, path=path, line=line, col=col, hint=hint))
    first = errors[0]
    first.also = [str(e) for e in errors[1:]]
    return first


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
    kind, got = error["type"], shown(error.get("input"))
    if kind in _EXPECTED or kind in ("literal_error", "wrong_type"):
        return f"{name}: expected {_expected_of(error)}, got {got}", _value_hint(error)
    if kind in _BOUNDS:
        return f"{name}: expected a value {_bound(error)}, got {got}", None
    if kind == "too_short":
        least = error.get("ctx", {}).get("min_length", 1)
        return f"{name}: expected at least {least} item{'s' if least != 1 else ''}, got none", None
    return None


def _describe(error: dict[str, Any]) -> tuple[str, str | None]:
    """``(message, hint)`` for one pydantic error: an unknown key of a keyed mapping (with the keys
    expected), an unknown field or action (with the near names), a missing field, a value of the
    wrong kind (:func:`_describe_value`), else pydantic's own message after the field's name."""
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
        return f"{where}unknown field {shown(key)} (a field name is a string)", hint
    if kind == "missing":
        return f"missing required field {name!r}", None
    if kind == "union_tag_invalid":
        tag = error.get("ctx", {}).get("tag", "?")
        given = error["input"].get("action") if isinstance(error.get("input"), dict) else tag
        if not isinstance(given, str):  # pydantic's tag is str() of it: "['compile']", "3"
            return f"{field_path(loc + ('action',))}: expected one of {', '.join(ACTION_MODELS)}, got {shown(given)}", None
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
