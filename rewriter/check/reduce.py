"""Give LibCST only the part of a file the rules can see: check's cost tracks what is compiled,
not the file's length.

A LibCST parse with metadata costs about 40x CPython's ``ast.parse`` (a 50,000-line file: 0.15 s
for ``ast``, 1.9 s for LibCST's parse alone and 11.7 s for the whole of ``check``, this machine,
libcst 1.9). Every rule looks at compiled code and what it reaches, so a top-level function or
class that nothing relevant names cannot hold a finding. :func:`reduce_source` keeps

- every top-level statement that is not a ``def``/``class`` (imports, assignments, ``if
  __name__ == "__main__":`` blocks: cheap, and where ``torch.compile`` is usually called), except
  a *data* assignment, a plain name bound to a literal (``V1 = 3``, ``TABLE = [1, 2]``), which is
  kept like a definition, only when a kept statement loads its name: a generated table of 400,000
  such lines took ``check`` 2 min 39 s on 2 cores before, 11 s after (6.5 MB; most of it CPython's parse),
- every top-level ``def``/``class`` whose subtree calls or decorates with one of
  :data:`SEED_CALLS` (``compile``, ``disable``, ``mark_dynamic``, ...) or a module-level alias of one,
- and, transitively, every top-level ``def``/``class`` bound to a name that a kept statement
  loads (``torch.compile(Model())`` keeps ``Model``; ``Model.forward`` calling ``helper`` keeps
  ``helper``) and every one that loads the name of a kept definition (``GPT`` building 12
  compiled ``Block``s is what SP109 judges the block by),

and leaves the lines of the rest out; :func:`map_lines` puts findings back at the original lines
(columns are unchanged: whole lines are dropped). The closure is by name, over-approximating what a statement can reach (an
attribute ``self.block`` reaches nothing by itself; the class that builds it names ``Block``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace

from .rule import Finding

#: Lines as CPython numbers them (``\r\n``, ``\r`` or ``\n``; not ``str.splitlines``'s form
#: feeds and other separators).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _first_line(node: ast.stmt) -> int:
    """1-based first line of a statement, its decorators included."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def statement_facts(node: ast.AST) -> tuple[set[str], set[str]]:
    """One walk of a subtree: ``(calls, loads)``, the last components of the names it calls or
    decorates with (``re.compile``/``regex.compile`` left out: not torch's) and every name it
    reads (``Name`` in load context, the root of each attribute chain)."""
    calls: set[str] = set()
    loads: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                loads.add(n.id)
            continue
        targets: Iterable[ast.expr] = ()
        if isinstance(n, ast.Call):
            func = n.func
            if isinstance(func, ast.Attribute) and func.attr == "compile" and isinstance(func.value, ast.Name) \
                    and func.value.id in ("re", "regex"):
                continue
            targets = (func,)
        elif isinstance(n, _DEFS):
            targets = [d.func if isinstance(d, ast.Call) else d for d in n.decorator_list]
        for t in targets:
            if isinstance(t, ast.Attribute):
                calls.add(t.attr)
            elif isinstance(t, ast.Name):
                calls.add(t.id)
    return calls, loads


#: The calls that make code compiled, disabled or marked: every rule's finding lies in code that
#: one of them reaches (SP101-SP111). A top-level definition holding one is kept with all it names.
SEED_CALLS = frozenset({"compile", "disable", "mark_dynamic", "mark_static", "maybe_mark_dynamic",
                        "mark_unbacked", "nested_compile_region"})


def data_names(stmt: ast.stmt) -> list[str] | None:
    """The names a top-level *data* assignment binds (every target a plain ``Name``, the value a
    literal :func:`ast.literal_eval` reads: numbers, strings, containers of them, a sign), or
    None for any other statement. No rule can find anything in such a line; it matters only
    where a kept statement reads the name."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return None
    if not all(isinstance(t, ast.Name) for t in targets):
        return None
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return [t.id for t in targets]  # type: ignore[attr-defined]


def _seed_aliases(tree: ast.Module) -> set[str]:
    """Module-level names bound to a seed call: ``from torch import compile as tc`` and
    ``tc = torch.compile`` make ``tc`` a seed too."""
    out: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            out.update(a.asname for a in stmt.names if a.asname and a.name in SEED_CALLS)
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Attribute, ast.Name)):
            name = stmt.value.attr if isinstance(stmt.value, ast.Attribute) else stmt.value.id
            if name in SEED_CALLS:
                out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return out


def reduce_source(
    text: str, tree: ast.Module, facts: list[tuple[set[str], set[str]]] | None = None,
    keep: set[str] | frozenset[str] = frozenset(),
) -> tuple[str, list[int] | None]:
    """``text`` without the top-level ``def``/``class`` statements the rules cannot reach (see
    the module docstring).

    Args:
        text: the file's source.
        tree: ``ast.parse(text)``.
        facts: :func:`statement_facts` of each of ``tree.body``'s statements, when the caller
            has them (one walk serves the prefilter and this).
        keep: names of top-level definitions kept as seeds although they call no seed: the
            classes and functions a compile elsewhere in the project reaches
            (:meth:`rewriter.check.project.FileView.top_names`).

    Returns:
        ``(reduced text, line map)``: ``line_map[i]`` is the original 1-based line of the reduced
        text's line ``i + 1`` (columns are unchanged; :func:`map_lines` applies it). ``(text,
        None)`` when nothing is dropped. Removing the lines rather than blanking them matters: a
        blank line is still an ``EmptyLine`` node that every LibCST visitor walks (50,000 of them
        cost 2 s of rules on a 50,000-line file).
    """
    if facts is None:
        facts = [statement_facts(stmt) for stmt in tree.body]
    seeds = SEED_CALLS | _seed_aliases(tree)
    defs: dict[str, list[int]] = {}
    kept: set[int] = set()
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, _DEFS):
            defs.setdefault(stmt.name, []).append(i)
            if facts[i][0] & seeds or stmt.name in keep:
                kept.add(i)
        elif (names := data_names(stmt)) is not None:
            for name in names:  # kept only where a kept statement reads it
                defs.setdefault(name, []).append(i)
        else:
            kept.add(i)
    # Both directions: what a kept statement names, and the definitions that name a kept one
    # (SP101 and SP109 judge a compiled block by the model that holds it).
    loaded_by: dict[str, list[int]] = {}
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, _DEFS):
            for name in facts[i][1]:
                loaded_by.setdefault(name, []).append(i)
    todo = list(kept)
    while todo:
        i = todo.pop()
        near = [j for name in facts[i][1] for j in defs.get(name, ())]
        if isinstance(tree.body[i], _DEFS):
            near += loaded_by.get(tree.body[i].name, [])
        for j in near:
            if j not in kept:
                kept.add(j)
                todo.append(j)
    # Statements sharing a line (``A = 1; m = torch.compile(M())``) go or stay together: whole
    # lines are dropped, so a dropped one would take the kept one's code with it.
    body = tree.body
    for order in (range(len(body) - 1), range(len(body) - 2, -1, -1)):  # a chain A = 1; B = 2; kept()
        for i in order:
            if (i in kept) != (i + 1 in kept) and (body[i].end_lineno or body[i].lineno) >= _first_line(body[i + 1]):
                kept.update((i, i + 1))
    dropped = [i for i in range(len(body)) if i not in kept]
    if not dropped:
        return text, None
    lines = _LINE.findall(text)
    gone = [False] * len(lines)
    for i in dropped:
        stmt = body[i]
        end = min(stmt.end_lineno or stmt.lineno, len(lines))
        start = _first_line(stmt) - 1
        for k in range(start, end):
            gone[k] = True
        # The own-line comments just above it (a '# stackpart: ignore' for its first line) go too:
        # left, the last would cover the next kept line instead. Not a line of the statement
        # before (a string's line that starts with '#').
        above = 0 if i == 0 else (body[i - 1].end_lineno or body[i - 1].lineno)
        while start > above and lines[start - 1].lstrip().startswith("#"):
            start -= 1
            gone[start] = True
        while end < len(lines) and not lines[end].strip():  # the blank lines after it too
            gone[end] = True
            end += 1
    line_map = [k + 1 for k in range(len(lines)) if not gone[k]]
    return "".join(line for line, g in zip(lines, gone) if not g), line_map


def map_lines(findings: list[Finding], line_map: list[int]) -> list[Finding]:
    """``findings`` on a reduced text, at the original file's lines."""
    def orig(line: int) -> int:
        return line_map[line - 1] if 0 < line <= len(line_map) else line

    return [replace(f, line=orig(f.line), end_line=orig(f.end_line)) for f in findings]
