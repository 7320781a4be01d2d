"""The program's own regional compile of its model's declared blocks, read from SRC, so that a plan
never compiles those blocks a second time.

diffusers' ``ModelMixin.compile_repeated_blocks(*args, **kwargs)`` compiles, in place, every
submodule whose class name is in the model's ``_repeated_blocks`` list
(:data:`rewriter.compile_facts.REPEATED_BLOCKS`). A plan's ``compile`` of one of those classes (a
decorator under SRC, or a library target applied from the site), or of the model that declares
them, adds a second compile of code the program compiles already: nested compiles whose options
disagree, or the program's options silently replaced. :mod:`rewriter.consistency` refuses such a
plan with the ``file:line`` of the program's call; an edit of that call (``own_call``) is the way
to change it.

Read here: every ``x.compile_repeated_blocks(...)`` call under SRC (:class:`RepeatedCall`, with the
function that holds it, the ``own_call`` target that edits it) and every ``_repeated_blocks``
list a class of SRC declares; for a library target, the lists its own source file declares
(:func:`library_declared`, read with :mod:`ast`, never imported). SRC is walked only where the
plan adds a compile, and only files whose bytes mention ``_repeated_blocks`` are parsed.
Symlinks, hidden folders, ``__pycache__`` and the vendored ``_stackpart/`` are not read; a file
that cannot be read or parsed is left out (the rewrite reads the files it changes itself).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .compile_facts import REPEATED_BLOCKS_ATTR, declared_blocks, is_repeated_blocks_call, turned_off
from .errors import StackpartError
from .source import mentions, parse_module, python_files, read_file

#: The bytes a file must contain to be parsed: a call of the method, or a declaration it reads.
NEEDLE = REPEATED_BLOCKS_ATTR.encode()
#: At most this many ``.py`` files are looked at under SRC.
MAX_FILES = 5000


@dataclass(frozen=True)
class RepeatedCall:
    """One ``x.compile_repeated_blocks(...)`` call of the program's.

    Attributes:
        where: ``file.py:line`` under SRC.
        code: the call's source text, on one line, shortened to 120 characters.
        site: the ``own_call`` target that edits it (``file.py::Qual`` of the function that holds
            it), or None at module level.
        off: whether it passes ``disable=True`` (:func:`rewriter.compile_facts.turned_off`): each
            block's ``compile`` then returns the block as it was, so the call compiles nothing.
    """

    where: str
    code: str
    site: str | None
    off: bool = False


@dataclass
class OwnRegional:
    """What SRC says about the program's own regional compile of its declared blocks.

    Attributes:
        calls: every ``compile_repeated_blocks`` call, file order.
        declared: ``{model class: [block class names]}`` for each class of SRC that declares a
            literal ``_repeated_blocks`` list.
    """

    calls: list[RepeatedCall] = field(default_factory=list)
    declared: dict[str, list[str]] = field(default_factory=dict)


class _Calls(cst.CSTVisitor):
    """``compile_repeated_blocks`` calls with the qualified name of the function holding each."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, rel: str, module: cst.Module) -> None:
        self.rel, self.module = rel, module
        self.scopes: list[tuple[str, bool]] = []  # (name, is a function)
        self.found: list[tuple[int, RepeatedCall]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append((node.name.value, False))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append((node.name.value, True))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not is_repeated_blocks_call(node):
            return
        line = self.get_metadata(PositionProvider, node).start.line
        funcs = [i for i, (_, is_func) in enumerate(self.scopes) if is_func]
        # a plan target names a top-level function or a method; a nested def has none
        site = None
        if len(funcs) == 1:
            site = f"{self.rel}::{'.'.join(n for n, _ in self.scopes[:funcs[0] + 1])}"
        code = " ".join(self.module.code_for_node(node).split())[:120]
        self.found.append((line, RepeatedCall(f"{self.rel}:{line}", code, site, turned_off(node))))


def read(src: Path) -> OwnRegional:
    """The program's ``compile_repeated_blocks`` calls and ``_repeated_blocks`` declarations under
    ``src`` (see the module docstring). Raises nothing: a file that cannot be read is left out."""
    out = OwnRegional()
    seen = 0
    for path in python_files(src):
        seen += 1
        if seen > MAX_FILES:
            return out
        rel = path.relative_to(src).as_posix()
        try:
            if not mentions(path, NEEDLE, rel):
                continue
            module = parse_module(read_file(path, rel).text, rel)
        except (OSError, StackpartError):
            continue
        out.declared.update(declared_blocks(module))
        visitor = _Calls(rel, module)
        MetadataWrapper(module, unsafe_skip_copy=True).visit(visitor)
        out.calls.extend(call for _, call in sorted(visitor.found, key=lambda t: t[0]))
    return out


def library_declared(file: Path | None) -> dict[str, list[str]]:
    """``{class: [block class names]}`` for each class of an installed module's source ``file``
    whose body assigns ``_repeated_blocks`` a literal list or tuple of strings (diffusers'
    ``FluxTransformer2DModel``); empty where the file cannot be read or parsed."""
    if file is None:
        return {}
    try:
        text = Path(file).read_text(encoding="utf-8", errors="surrogateescape")
        if REPEATED_BLOCKS_ATTR not in text:
            return {}
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            value = None
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == REPEATED_BLOCKS_ATTR
                                                    for t in stmt.targets):
                value = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == REPEATED_BLOCKS_ATTR:
                value = stmt.value
            try:
                names = ast.literal_eval(value) if value is not None else None
            except ValueError:
                continue
            if isinstance(names, (list, tuple)) and names and all(isinstance(n, str) for n in names):
                out[node.name] = list(names)
    return out
