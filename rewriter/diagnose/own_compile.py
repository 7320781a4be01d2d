"""The compile setup already in SRC, found statically: the program as it is is the search's baseline
(DESIGN.md, "The search"; issue 17), and the report names the user's own compile calls.

Every ``.py`` file under SRC that mentions ``compile`` or ``mark_dynamic`` (a text prefilter, as
``stackpart check`` does) is parsed with LibCST and read through check's facts
(:class:`rewriter.check.facts.FileFacts`): ``torch.compile(...)`` calls, ``module.compile(...)``
calls, ``@torch.compile`` decorators, ``torch.compiler.disable``, and ``mark_dynamic``-family calls.
Symlinks are not followed (a tree that links an installed package in is not the user's code), and
a file that does not parse is left out.

:func:`compile_setup` lists the setup for the report; :func:`own_compiles` reads what each compile
covers (:class:`OwnCompile`), which the search's candidates compose with
(:func:`.candidates.compose`: no second compile, no ``disable`` in a ``fullgraph=True`` region, no
``mark_dynamic`` inside compiled code).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PREFILTER = re.compile(r"\bcompile\b|mark_dynamic|mark_unbacked|compiler\.disable|_dynamo\.config")
#: Files larger than this are skipped (generated code, data): the setup lives in scripts and models.
MAX_BYTES = 2_000_000


@dataclass(frozen=True)
class OwnCompile:
    """One compile the program does itself, with what it covers (issue 17: edits compose with it).

    Attributes:
        where: ``file.py:line`` under SRC.
        site, why_not, mode: what an edit of the call's options (``compile`` with ``own_call``)
            would name, or why it cannot be made, and the call's current ``mode``.
        code: the call's source text, shortened to 120 characters.
        fullgraph: the literal ``fullgraph=`` value (False when absent or not a literal).
        covers: what it compiles, read statically: ``("function", "file.py::Qual")`` for a
            decorator or a call on a function of that file; ``("class", "Name")`` for an instance
            of a class (``torch.compile(Encoder())``, ``model = Net(); model.compile()``);
            ``("children", "attr")`` for each module of a container attribute (``for block in
            model.layers: torch.compile(block)``, ``model.layers[i] = torch.compile(...)``,
            torchtitan's ``for i, b in model.layers.named_children()``); ``("unknown", "")``
            when the value cannot be read, which callers must treat as the whole model.
    """

    where: str
    code: str
    fullgraph: bool
    covers: tuple[str, str]
    #: the plan target an ``own_call`` edit of this compile names (``file.py::Qual``: the decorated
    #: function, or the function whose body holds the call), None where no target can name it
    site: str | None = None
    #: why an ``own_call`` edit of its ``mode`` cannot be made safely (the rewrite's own refusal,
    #: :mod:`rewriter.actions.own_call`), or None when it can
    why_not: str | None = None
    #: its ``mode`` literal (``default`` when absent), None when not a literal
    mode: str | None = None

    @property
    def text(self) -> str:
        """``file.py:line: code``, as :func:`compile_setup` lists it."""
        return f"{self.where}: {self.code}"


def _parsed(src: Path):
    """``(relative path, FileFacts, positions)`` for each readable ``.py`` file under ``src`` that
    mentions the compile setup (the text prefilter); unreadable or unparsable files are skipped."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ..check.facts import FileFacts
    from ..errors import StackpartError
    from ..source import parse_module, read_file

    for root, dirs, files in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "_stackpart")
                         and not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = Path(root) / name
            if not name.endswith(".py") or path.is_symlink():
                continue
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
                # the guarded read: a FIFO or device named *.py in SRC is refused, never read
                text = read_file(path).text
            except (OSError, StackpartError):
                continue
            if not _PREFILTER.search(text):
                continue
            try:
                # CPython's parser as the gate, LibCST in the large-stack thread (rewriter.source)
                wrapper = MetadataWrapper(parse_module(text, str(path)))
                facts = FileFacts(wrapper, frozenset({"Call"}))  # every call, in document order
                positions = wrapper.resolve(PositionProvider)
            except Exception:  # noqa: BLE001 - a file LibCST cannot read is not the setup's
                continue
            yield path.relative_to(src).as_posix(), facts, positions


def parsed_setup(src: str | Path) -> list[tuple[str, Any, Any]]:
    """The files under ``src`` that mention the compile setup, read and parsed once, for
    :func:`compile_setup` and :func:`own_compiles` both (``parsed=``): the search needs both, and
    each alone walks and parses SRC."""
    return list(_parsed(Path(src)))


def compile_setup(src: str | Path, limit: int = 50, parsed: list[tuple[str, Any, Any]] | None = None) -> list[str]:
    """``file:line: what`` for each compile-related call or decorator under ``src``, in file order
    (at most ``limit``). ``what`` is the call's source text, shortened to 120 characters.
    ``parsed``: :func:`parsed_setup` of ``src``, when the caller has it.

    Raises nothing: unreadable or unparsable files are skipped.
    """
    import libcst as cst

    from ..check.rules.sp105_mark_dynamic_in_compiled import MARKS

    calls = MARKS | {"torch._dynamo.decorators.mark_unbacked", "torch.compiler.disable"}
    out: list[tuple[str, int, str]] = []
    for rel, facts, positions in parsed if parsed is not None else _parsed(Path(src)):
        module = facts.module
        nodes = list(facts.compile_calls) + list(facts.method_compile_calls) + [site.node for site in facts.compiled.values()]
        nodes += [d for fn in facts.disabled for d in fn.decorators]
        nodes += [n for n in facts.nodes if facts.is_call(n, calls)]
        by_line: dict[int, str] = {}
        for node in nodes:
            pos = positions.get(node)
            if pos is None:
                continue
            code = " ".join(module.code_for_node(node).split())
            if isinstance(node, cst.Decorator) or pos.start.line not in by_line:  # "@torch.compile(...)" over its call
                by_line[pos.start.line] = code if not isinstance(node, cst.Decorator) or code.startswith("@") else "@" + code
        out.extend((rel, line, code[:120]) for line, code in by_line.items())
    out.sort()
    return [f"{f}:{line}: {code}" for f, line, code in out[:limit]]


#: Methods of a container that iterate its modules: ``for b in model.layers.named_children()``.
_ITERATORS = frozenset({"children", "named_children", "values", "items", "modules", "named_modules"})


def _qualname(facts, func) -> str:
    cls = facts.enclosing_class(func)
    return f"{cls.name.value}.{func.name.value}" if cls is not None else func.name.value


def _container_attr(expr) -> str | None:
    """``layers`` for ``model.layers``, ``model.layers.named_children()``, ``enumerate(model.layers)``,
    ``model.layers[: n]``; None for anything else."""
    import libcst as cst

    for _ in range(4):
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _ITERATORS:
                expr = expr.func.value
            elif isinstance(expr.func, cst.Name) and expr.func.value in ("enumerate", "zip", "list", "reversed") and expr.args:
                expr = expr.args[0].value
            else:
                return None
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return expr.attr.value if isinstance(expr, cst.Attribute) else None


def _covers(facts, target, at) -> tuple[str, str]:
    """What the value ``target`` passed to (or calling) ``compile`` at ``at`` is (see :class:`OwnCompile`)."""
    import libcst as cst

    if target is None:
        return ("unknown", "")
    if isinstance(target, cst.Subscript):  # model.layers[i] = torch.compile(model.layers[i])
        attr = _container_attr(target)
        if attr is not None:
            return ("children", attr)
    if isinstance(target, cst.Name):  # the loop variable of ``for block in model.layers``
        for anc in facts.ancestors(at):
            if isinstance(anc, cst.For) and any(n.value == target.value for n in _names(anc.target)):
                attr = _container_attr(anc.iter)
                if attr is not None:
                    return ("children", attr)
    funcs = facts._target_functions(target, at)
    if funcs:  # a local def in each branch of an if: one qualified name for all of them
        return ("function", _qualname(facts, funcs[-1]))
    cls = facts.class_of(target, at)
    if cls is not None and not facts.is_name(target, "torch.compile") and "torch.compile" not in cls[1]:
        return ("class", cls[0].rsplit(".", 1)[-1])
    return ("unknown", "")


def _names(node):
    import libcst as cst

    if isinstance(node, cst.Name):
        yield node
    elif isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            yield from _names(el.value)


def _editable(facts, rel: str, node, positions) -> tuple[str | None, str | None, str | None]:
    """``(site, why_not, mode)`` of the compile at ``node`` (see :class:`OwnCompile`), read with the
    rewrite's own :mod:`rewriter.actions.own_call`, so that the candidate says what the rewrite would."""
    import libcst as cst

    from ..actions.base import imported_names
    from ..actions.own_call import OwnCallRefused, check, current, find_sites

    if isinstance(node, cst.Decorator):
        func = facts.parent(node)
    else:
        func = next((a for a in facts.ancestors(node) if isinstance(a, cst.FunctionDef)), None)
    if not isinstance(func, cst.FunctionDef):
        return None, f"{rel}: the compile runs at module level, which no plan target names; change its options by hand", None
    if any(isinstance(a, cst.FunctionDef) for a in facts.ancestors(func)):
        return None, f"{rel}: the compile is in a nested function ({func.name.value}), which no plan target names", None
    site = f"{rel}::{_qualname(facts, func)}"
    try:
        sites = find_sites(func, imported_names(facts.module))
        if len(sites) != 1:
            raise OwnCallRefused(f"{site} holds {len(sites)} compile calls: an edit would not know which one")
        check(sites[0].call, {"mode": "reduce-overhead"})
    except OwnCallRefused as exc:
        pos = positions.get(exc.node) if exc.node is not None else None
        return site, (f"{rel}:{pos.start.line}: " if pos is not None else "") + exc.message, None
    known, mode = current(sites[0], "mode")
    return site, None, mode if known else None


def own_compiles(src: str | Path, parsed: list[tuple[str, Any, Any]] | None = None) -> list[OwnCompile]:
    """Every compile the program under ``src`` does itself (``torch.compile(...)`` calls,
    ``module.compile(...)`` calls, ``@torch.compile`` decorators), in file order, each with what it
    covers and its ``fullgraph`` literal (:class:`OwnCompile`). Static, read with check's facts
    (:class:`rewriter.check.facts.FileFacts`); raises nothing (unreadable files are skipped).
    ``parsed``: :func:`parsed_setup` of ``src``, when the caller has it."""
    import libcst as cst

    from ..check.facts import options

    out: list[tuple[str, int, OwnCompile]] = []
    for rel, facts, positions in parsed if parsed is not None else _parsed(Path(src)):
        module = facts.module
        found = []
        for func, site in facts.compiled.items():
            if site.node in facts.compile_calls or site.whole_model:
                continue  # a call; listed below with what it names
            found.append((site.node, bool(site.fullgraph), ("function", f"{rel}::{_qualname(facts, func)}")))
        for call in facts.compile_calls:
            if isinstance(facts.parent(call), cst.Decorator):
                continue  # ``@torch.compile(...)``: its function, above
            target, node = facts.compile_target(call)
            cover = _covers(facts, target, call)
            if cover[0] == "function":
                cover = ("function", f"{rel}::{cover[1]}")
            found.append((node, bool(options(call)[0]), cover))
        for call in facts.method_compile_calls:
            cover = _covers(facts, call.func.value, call)
            if cover[0] == "function":  # fn.compile() is not a module's compile: not the setup's
                continue
            found.append((call, bool(options(call)[0]), cover))
        for node, fullgraph, cover in found:
            pos = positions.get(node)
            if pos is None:
                continue
            code = " ".join(module.code_for_node(node).split())[:120]
            if hasattr(node, "decorator") and not code.startswith("@"):
                code = "@" + code
            try:
                site, why_not, mode = _editable(facts, rel, node, positions)
            except Exception as exc:  # noqa: BLE001 - the setup is listed either way
                site, why_not, mode = None, f"{rel}:{pos.start.line}: the call could not be read ({type(exc).__name__})", None
            out.append((rel, pos.start.line, OwnCompile(f"{rel}:{pos.start.line}", code, fullgraph, cover, site, why_not, mode)))
    return [o for _, _, o in sorted(out, key=lambda t: (t[0], t[1]))]
