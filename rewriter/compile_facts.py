"""Facts about compile calls in source that ``stackpart check``'s rules, the plan's consistency
rules and the ``compile`` action all read, kept here so that each reads them the same way and no
action imports a check rule (docs/design.md, "Where each kind of change goes").

- the ``# stackpart: ignore[CODES]`` comment syntax (:data:`SUPPRESS_RE`, :func:`suppressed_codes`);
- the literal ``fullgraph``/``mode`` of a ``torch.compile(...)`` call (:func:`options`);
- the size of a function's body as SP109 reads it (:func:`body_size`, :data:`SMALL_STATEMENTS`);
- the library's own regional compile, ``x.compile_repeated_blocks(...)`` (:data:`REPEATED_BLOCKS`,
  :func:`is_repeated_blocks_call`), and the ``_repeated_blocks`` lists a class declares for it
  (:func:`declared_blocks`): the program's own compile of those blocks, which a plan must not
  compile a second time.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

#: A suppression comment: ``# stackpart: ignore`` (every code) or ``# stackpart: ignore[SP101,SP109]``.
SUPPRESS_RE = re.compile(r"#\s*stackpart:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")

#: The library's own regional compile (diffusers ``ModelMixin.compile_repeated_blocks``): every
#: submodule whose class name is in the model's ``_repeated_blocks`` is compiled in place with
#: ``submodule.compile(*args, **kwargs)``, the call's arguments passed on to ``torch.compile``.
REPEATED_BLOCKS = "compile_repeated_blocks"
#: The class attribute that call reads: the class names of the model's repeated blocks.
REPEATED_BLOCKS_ATTR = "_repeated_blocks"

#: A function of at most this many top-level statements (and no loop) is a small region for SP109.
SMALL_STATEMENTS = 3


def suppressed_codes(match: re.Match[str]) -> set[str] | None:
    """The codes a :data:`SUPPRESS_RE` match names, upper-cased (None: every code)."""
    if match.group(1) is None:
        return None
    return {c.strip().upper() for c in match.group(1).split(",") if c.strip()}


def literal_bool(expr: cst.BaseExpression | None) -> bool | None:
    """``True``/``False`` written as a literal, else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def literal_str(expr: cst.BaseExpression | None) -> str | None:
    """A string written as one literal, else None."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name`` of ``call``, or None."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def options(call: cst.Call | None) -> tuple[bool | None, str | None]:
    """``(fullgraph, mode)`` literals of a ``torch.compile(...)`` call (None when absent)."""
    if call is None:
        return None, None
    fg, mode = keyword(call, "fullgraph"), keyword(call, "mode")
    return literal_bool(fg.value if fg else None), literal_str(mode.value if mode else None)


def body_size(func: cst.FunctionDef) -> int:
    """Top-level statements of ``func`` (docstring excluded); a loop counts as large: a
    whole-model ``forward`` is ``h = embed(x); for block in self.blocks: ...; return h``."""
    if m.findall(func.body, m.For() | m.While()):
        return SMALL_STATEMENTS + 1
    body = list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else [func.body]
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        body = body[1:]
    return len(body)


def is_repeated_blocks_call(call: cst.Call) -> bool:
    """Whether ``call`` is ``<expr>.compile_repeated_blocks(...)``: the program compiling its model's
    declared blocks itself (:data:`REPEATED_BLOCKS`). Read by the method's name alone, as
    ``module.compile(...)`` is: the receiver's class is seldom known statically."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == REPEATED_BLOCKS


def declared_blocks(module: cst.Module) -> dict[str, list[str]]:
    """``{class name: [block class names]}`` for each class of ``module`` (nested classes included)
    whose body assigns ``_repeated_blocks`` a list or tuple of string literals, in source order: what
    ``compile_repeated_blocks`` compiles on an instance of that class. A value that is not such a
    literal (a name, a call) is left out: its names cannot be read from the source."""
    out: dict[str, list[str]] = {}
    for cls in m.findall(module, m.ClassDef()):
        assert isinstance(cls, cst.ClassDef)
        if not isinstance(cls.body, cst.IndentedBlock):
            continue
        for stmt in cls.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    named = any(m.matches(t.target, m.Name(REPEATED_BLOCKS_ATTR)) for t in small.targets)
                elif isinstance(small, cst.AnnAssign):
                    named = m.matches(small.target, m.Name(REPEATED_BLOCKS_ATTR))
                else:
                    continue
                names = _str_list(small.value) if named else None
                if names is not None:
                    out[cls.name.value] = names
    return out


def _str_list(expr: cst.BaseExpression | None) -> list[str] | None:
    """The strings of a list or tuple of string literals, else None."""
    if not isinstance(expr, (cst.List, cst.Tuple)):
        return None
    out = []
    for el in expr.elements:
        value = literal_str(el.value)
        if value is None:
            return None
        out.append(value)
    return out
