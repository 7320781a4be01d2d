"""Library targets: ``package.module:Qual.name`` → the installed class or function it names.

stackpart never edits an installed package; a plan action on one is applied at run time from the
plan's ``site`` (:mod:`rewriter.actions.site`). Before anything is written the target is checked
twice:

* statically, without running the package's code: the module's file is found on ``sys.path`` the
  way the import system would (:class:`importlib.machinery.PathFinder`, parents' ``__path__``
  followed, nothing executed) and the name is looked up in it with :mod:`ast` — at module and class
  scope, through ``if``/``try`` blocks, and through ``from x import Name`` re-exports (a package's
  ``__init__``); a miss gets the nearest names the file defines;
* by import, when torch can be imported here (``rewrite``'s environment usually has the model's
  packages; the pre-commit hook's has none, and the static check is what it gets): the class must
  be an ``nn.Module`` subclass for ``compile`` and ``mark_dynamic``, the target callable for
  ``disable``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from importlib.machinery import PathFinder
from pathlib import Path

from .errors import StackpartError, near_names

#: How many ``from x import Name`` re-exports are followed before giving up (``transformers``
#: re-exports its models from ``__init__`` files two levels up).
MAX_REEXPORTS = 4


@dataclass(frozen=True)
class LibraryTarget:
    """An installed class or function a plan action names.

    Attributes:
        module: the import path as the plan wrote it (``transformers.models.gpt2.modeling_gpt2``).
        qualname: the dotted name inside it (``GPT2Block``, ``DynamicLayer.update``).
        file: the file that defines it (after following re-exports), or None when the module has no
            Python source (an extension module: checked by import only).
        kind: ``"class"`` or ``"function"`` (a method is a function), from the source.
    """

    module: str
    qualname: str
    file: Path | None
    kind: str

    @property
    def path(self) -> str:
        return f"{self.module}:{self.qualname}"


def module_file(module: str) -> tuple[Path | None, bool]:
    """The source file of ``module`` and whether the module exists, found as the import system
    would on this interpreter's ``sys.path`` but without executing any package code (a package's
    ``__init__`` is not run: its ``__path__`` is the spec's ``submodule_search_locations``).

    Returns:
        ``(file, True)`` for a Python source module or package (``__init__.py``); ``(None, True)`` for
        one without source (an extension or namespace package); ``(None, False)`` when there is none.
    """
    parts = module.split(".")
    spec = PathFinder.find_spec(parts[0])
    if spec is None:
        try:  # a module the interpreter has already (builtins, a frozen or a meta-path module)
            spec = importlib.util.find_spec(parts[0]) if len(parts) == 1 else None
        except (ImportError, ValueError):
            spec = None
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None, False
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    if spec is None:
        return None, False
    origin = spec.origin
    if origin and origin.endswith(".py"):
        return Path(origin), True
    return None, True


def _siblings(module: str) -> list[str]:
    """Module names beside the last part of ``module`` (for a "did you mean")."""
    parent, _, _ = module.rpartition(".")
    if not parent:
        return []
    file, found = module_file(parent)
    if not found or file is None or file.name != "__init__.py":
        return []
    return sorted(
        f"{parent}.{p.stem if p.suffix == '.py' else p.name}"
        for p in file.parent.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )


@lru_cache(maxsize=256)
def definitions(file: Path) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
    """``({qualname: kind}, {name: (module it is imported from, relative level)})`` of one file,
    module and class scope (through ``if``/``try``/``with`` blocks, not into function bodies)."""
    tree = ast.parse(file.read_text(encoding="utf-8", errors="replace"))
    defs: dict[str, str] = {}
    imports: dict[str, tuple[str, int]] = {}

    blocks = (ast.If, ast.Try, ast.With) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                defs[prefix + stmt.name] = "class"
                walk(stmt.body, prefix + stmt.name + ".")
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[prefix + stmt.name] = "function"
            elif isinstance(stmt, ast.ImportFrom) and not prefix and stmt.module is not None:
                for alias in stmt.names:
                    imports[alias.asname or alias.name] = (stmt.module, stmt.level)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and not prefix:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        defs.setdefault(t.id, "value")
            elif isinstance(stmt, blocks):
                for name in ("body", "orelse", "finalbody"):
                    walk(getattr(stmt, name, []), prefix)
                for handler in getattr(stmt, "handlers", []):
                    walk(handler.body, prefix)

    walk(tree.body, "")
    return defs, imports


def _absolute(module: str, file: Path, name: str, level: int) -> str:
    """The absolute module of ``from <level dots><name> import ...`` written in ``module``'s file."""
    if level == 0:
        return name
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{name}" if name else package


def resolve_static(module: str, qualname: str) -> LibraryTarget:
    """Find ``module:qualname`` without running the package (see the module docstring).

    Raises:
        StackpartError: no such module on this interpreter's path (with near module names), or no
            such name in it (with the nearest names it defines).
    """
    file, found = module_file(module)
    if not found:
        parent = module.rpartition(".")[0]
        hint = near_names(module, _siblings(module)) if parent else None
        raise StackpartError(
            f"{module!r} does not import: no such module on this Python's path",
            hint=hint or "install the package the model comes from in the environment that runs stackpart",
        )
    if file is None:
        return LibraryTarget(module, qualname, None, "unknown")
    head, _, rest = qualname.partition(".")
    current_module, current_file = module, file
    for _ in range(MAX_REEXPORTS + 1):
        defs, imports = definitions(current_file)
        if head in defs and defs[head] != "value":
            kind = defs.get(qualname)
            if kind is None:
                raise StackpartError(
                    f"no {qualname!r} in {current_module} ({current_file})",
                    hint=near_names(qualname, [d for d in defs if d.startswith(head + ".")] or list(defs)),
                )
            return LibraryTarget(module, qualname, current_file, kind)
        if head not in imports:
            raise StackpartError(
                f"no class or function {head!r} in {current_module} ({current_file})",
                hint=near_names(head, [d for d in defs if "." not in d]),
            )
        source, level = imports[head]
        base = _absolute(current_module, current_file, source, level)
        nxt, ok = module_file(base)
        if not ok or nxt is None:  # `from .sub import name` where name is itself a submodule, or no source
            return LibraryTarget(module, qualname, None, "unknown")
        current_module, current_file = base, nxt
    return LibraryTarget(module, qualname, None, "unknown")


def resolve(module: str, qualname: str, action: str, by_import: bool, implementation: str | None = None) -> LibraryTarget:
    """:func:`resolve_static`, then (``by_import`` and torch importable) :func:`resolve_import`. A
    name the source does not show (a lazy re-export: ``transformers``' top-level ``__init__`` builds
    its names at run time) is accepted when the import finds it.

    Raises:
        StackpartError: as :func:`resolve_static` and :func:`resolve_import`.
    """
    by_import = by_import and torch_importable()
    try:
        found = resolve_static(module, qualname)
    except StackpartError as static_error:
        if not by_import or not module_file(module)[1]:  # no such module: the import would fail too
            raise
        try:
            resolve_import(LibraryTarget(module, qualname, None, "unknown"), action, implementation)
        except StackpartError:
            raise static_error from None
        return LibraryTarget(module, qualname, None, "unknown")
    if by_import:
        resolve_import(found, action, implementation)
    return found


def resolve_source_only(module: str, qualname: str) -> LibraryTarget:
    """The reading of ``check`` (the pre-commit hook, whose environment has neither torch nor the
    model's packages): :func:`resolve_static` where the package is installed here, so a mistyped
    name is an error with its near names; the target as written where it is not installed, or where
    the name would be a package ``__init__``'s (lazy re-exports are found by import only). Nothing
    is imported.

    Raises:
        StackpartError: the module's source is here and defines no such name.
    """
    file, found = module_file(module)
    if not found:
        return LibraryTarget(module, qualname, None, "unknown")
    try:
        return resolve_static(module, qualname)
    except StackpartError:
        if file is not None and file.name == "__init__.py":
            return LibraryTarget(module, qualname, None, "unknown")
        raise


def torch_importable() -> bool:
    """Whether torch can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def resolve_import(target: LibraryTarget, action: str, implementation: str | None = None) -> None:
    """Import ``target`` and check it is what ``action`` can act on: an ``nn.Module`` subclass for
    ``compile`` and ``mark_dynamic``, a function or method for ``disable``, a class with
    ``generate`` for ``generation``, and for ``attention`` a transformers ``PreTrainedModel``
    class that supports ``implementation`` (:func:`attention_support`).

    Raises:
        StackpartError: the import raised (its first line), the name is missing after import, or
            the object is of the wrong kind.
    """
    try:
        obj: object = importlib.import_module(target.module)
    except Exception as exc:  # the package's own import error, whatever it is
        first = (str(exc).strip().splitlines() or [""])[0]
        raise StackpartError(f"{target.module!r} does not import: {type(exc).__name__}: {first}") from None
    for part in target.qualname.split("."):
        if not hasattr(obj, part):
            raise StackpartError(
                f"no {target.qualname!r} in {target.module}",
                hint=near_names(part, [n for n in dir(obj) if not n.startswith("_")]),
            )
        obj = getattr(obj, part)
    if action in ("compile", "mark_dynamic"):
        import torch

        if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
            what = type(obj).__name__ if not isinstance(obj, type) else f"class {obj.__name__} (bases: {', '.join(b.__name__ for b in obj.__mro__[1:4])})"
            raise StackpartError(
                f"{target.path} is not an nn.Module subclass ({what}): {action} on a library target acts on "
                "the model's instances of a module class",
                hint="name the block's class (its forward runs as the compiled region)",
            )
    elif action == "generation":
        if not (isinstance(obj, type) and callable(getattr(obj, "generate", None))):
            raise StackpartError(
                f"{target.path} does not generate (no generate method): the generation action sets a "
                "transformers model's generation_config",
                hint="name the model class whose generate the program calls (e.g. LlamaForCausalLM)",
            )
    elif action == "attention":
        if not (isinstance(obj, type) and callable(getattr(obj, "set_attn_implementation", None))):
            raise StackpartError(
                f"{target.path} is not a transformers model class (no set_attn_implementation): the attention action "
                "sets a PreTrainedModel's attn_implementation",
                hint="name the model class the site returns (e.g. LlamaForCausalLM)",
            )
        why = attention_support(obj, implementation or "sdpa")
        if why is not None:
            raise StackpartError(why, hint="use an implementation the class supports, or drop the action")
    elif not callable(obj):
        raise StackpartError(f"{target.path} is not callable ({type(obj).__name__}): disable needs a function or method")


#: The class flag transformers reads for each implementation an ``attention`` action may set
#: (``PreTrainedModel._sdpa_can_dispatch`` / ``_flex_attn_can_dispatch``); eager needs none.
ATTENTION_FLAGS = {"sdpa": "_supports_sdpa", "flex_attention": "_supports_flex_attn"}


def flex_attention_available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``, torch >= 2.5)."""
    try:
        return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None
    except (ImportError, ValueError):
        return False


def attention_support(cls: type, implementation: str) -> str | None:
    """Why transformers' model class ``cls`` cannot run ``implementation``, or None: its
    ``_supports_sdpa``/``_supports_flex_attn`` flag is False, flex_attention is missing from torch,
    or its module does not route attention through ``ALL_ATTENTION_FUNCTIONS`` (transformers'
    ``_can_set_attn_implementation``: ``set_attn_implementation`` then only logs a warning)."""
    flag = ATTENTION_FLAGS.get(implementation)
    if flag is not None and not getattr(cls, flag, False):
        return f"{cls.__name__} does not support attn_implementation={implementation!r} (transformers' {cls.__name__}.{flag} is False)"
    if implementation == "flex_attention" and not flex_attention_available():
        return "this torch has no torch.nn.attention.flex_attention (torch >= 2.5)"
    can_set = getattr(cls, "_can_set_attn_implementation", None)
    if callable(can_set):
        try:
            ok = bool(can_set())
        except Exception:  # transformers' own heuristic reads the module's source: unreadable is "cannot tell"
            ok = True
        if not ok:
            return (f"{cls.__name__} cannot change its attention implementation after construction (transformers' "
                    "_can_set_attn_implementation: its attention does not go through ALL_ATTENTION_FUNCTIONS)")
    return None
