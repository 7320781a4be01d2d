"""Project-level reachability: which functions a ``torch.compile`` anywhere in the project traces.

A project is laid out in files: the model under ``models/``, ``torch.compile(model)`` in
``train.py``. Per file, :mod:`.facts` sees only the compiles of that file. This module reads the
whole project for *facts only* and tells each checked file which of its functions are compiled
from elsewhere (:class:`FileView`), so the rules report ``.item()`` in ``models/layers.py`` when
``train.py`` compiles the model that holds the layer.

**What counts as reached** (the static image of what Dynamo traces; torch.compile docs,
"Compiling modules": a module's ``__call__`` runs its ``forward``, and Dynamo inlines the
submodules it calls):

* ``torch.compile(X)``, ``X.compile()``, ``torch.compile(**kw)(X)``: for an instance ``X`` of a
  project class (``Cls(...)``, ``Cls.from_pretrained(...)``, ``Cls(...).to(dev)``, a name or
  ``self.attr`` bound to one, ``self`` in a method), the class's ``forward`` (its own or a
  project base class's); for a function (``f``, ``Cls.f``, ``self.f``), that function;
* the blocks of a compiled model: the ``forward`` of every submodule its ``__init__`` builds
  (``self.x = Sub(...)``, ``self.h = nn.ModuleList([Block(...) for ...])``, also inside an
  ``nn.ModuleDict``), transitively, and of a decorated ``@torch.compile`` ``forward``'s class;
* ``torch.compile(model.forward)`` as ``torch.compile(model)``; ``torch.compile(model.step)``
  that method of the model's class;
* regional compiles: ``for block in model.h: block.compile()`` reaches the block class of
  ``model``'s ``h`` container.

Every submodule built in ``__init__`` counts, whether or not ``forward`` calls it (an
over-approximation: a submodule used only outside ``forward`` is taken as traced too).

A class or ``def`` defined inside a function is no project name: compiled in that function, it
is the file's own facts that reach it (:meth:`.facts.FileFacts.local_definitions`), and the
summary records no site for it, so a top-level or imported one of the same name is not reached
in its place.

A function under ``@torch.compiler.disable`` is never reached. Calls from reached code into
helper functions are followed (Dynamo inlines them), :data:`HELPER_DEPTH` calls deep: within a
file by :mod:`.facts` (a ``def`` of that file, ``self.method``), and into a top-level function
imported from another project file here (the summary's ``calls``: the imported names each
function calls).

**What is reported** (``check`` given some files, as pre-commit gives it the staged ones): the
findings located in the given files, whoever compiles them; and the findings located in other
project files that a given file causes: code reached by a compile in a given file, or through a
given file's model (``Mark.files``), and SP101 at a compile of a model whose class (or the class
that repeats its blocks) is in a given file. So a commit of ``train.py`` alone shows the
``.item()`` in ``models/layers.py`` that its compile now reaches, and a commit of
``models/layers.py`` alone shows it too. A file not given is never fixed, and its own parse
errors and skips are not reported.

**Names** are resolved through the project's own imports: ``from .layers import Block``,
``from models.layers import Block``, ``import models.layers as L; L.Block``, a re-export through
a package's ``__init__.py`` (three hops at most). A module path maps to a file under the project
root (``a/b.py`` or ``a/b/__init__.py``; a ``src/`` layout too); one that names no such file is
looked for beside the importing file (``from model import GPT`` in ``src/train.py`` is
``src/model.py``: a script's folder is the first entry of ``sys.path`` when it runs, as
``python train.py`` from ``src/`` does); in a folder that is no package (no ``__init__.py``: a
script's) the file beside comes first, before a module of that name elsewhere in the project. Names outside the project (torch, transformers installed
in site-packages) are not followed.

**Why the C ``ast`` module, not LibCST, for the index.** The rules themselves run on LibCST with
``ScopeProvider``/qualified names (:mod:`.facts`), but only for the files reported. Reading every
project file through LibCST's metadata costs about 40x CPython's parser (3.1 s of
``ScopeProvider`` alone on transformers' ``modeling_utils.py``; docs/decisions.md, "check's speed
and the splice's round trip"), which would make a commit of
one file pay for the whole tree. The index keeps its own import table (module-level and
function-level ``import``/``from ... import``, relative ones as LibCST spells them, ``.layers.Block``),
so its names are the strings LibCST's ``QualifiedNameProvider`` gives the checked file. What it
gives up: a local variable shadowing an imported name is not noticed in the *index* (the findings
are still computed by LibCST on the reported file).

**What is read.** Only files that can start a reach are parsed up front: those whose bytes
contain ``torch`` and a compile call or decorator (the runner's compile needle). Every other file
is parsed only when a reach needs one of its classes (on demand, through the imports). A class's
block being a repeated block of *some* model (SP101's exception) is known from the files read.

**Cache.** ``<root>/.stackpart_cache/project-v1.json`` (the directory holds a ``.gitignore`` of
``*``, as ruff's and pytest's caches do, so git ignores it without a rule): per file, keyed by
its path relative to the root, ``st_mtime_ns`` and ``st_size``, whether it can start a reach and
its summary once parsed. A file whose key is unchanged is neither read nor parsed again; the
cache is rewritten (atomically) only when something changed, and a root that cannot be written
just runs without it. The key is that of ruff's and mypy's caches (mtime + size): an edit that
keeps both within one timestamp tick is missed until the next change.

**Root.** The nearest directory at or above the checked file's own folder that holds a
``pyproject.toml`` or a ``.git`` (a folder, or the file a worktree or submodule has): where
pre-commit, ruff and black take the project to start. Files with no such parent share one
fallback root, the common folder of those given (:func:`fallback_root`; not the filesystem root
or the home directory), read without a cache; the summary line names it. ``stackpart check --no-project`` (or ``project = false`` under ``[tool.stackpart]``)
turns the project read off.
"""

from __future__ import annotations

import ast
import bisect
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..compile_facts import word_matches

CACHE_DIR = ".stackpart_cache"
CACHE_FILE = "project-v1.json"
#: Bumped when the summary's format or meaning changes (an old cache is then ignored).
CACHE_VERSION = 6
ROOT_MARKERS = ("pyproject.toml", ".git")
#: Folders never walked for project files (besides hidden ones): not the user's code.
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", CACHE_DIR})
#: The most ``.py`` files a project walk reads; past it the project is not read (a root such as
#: a home directory with a ``.git``) and files are checked on their own.
MAX_PROJECT_FILES = 50_000
#: Re-export hops followed when a name is imported from a package's ``__init__``.
MAX_HOPS = 3
#: Calls followed from reached code into imported project functions (as :data:`.facts.HELPER_DEPTH`).
HELPER_DEPTH = 3

#: The compile needle: ``compile`` as a word, then ``(``, the line's end or a comment (a call or a
#: decorator). The literal opens the pattern, so the scan jumps between occurrences; the word's
#: start is checked after (:func:`rewriter.compile_facts.word_matches`): a leading ``\\b`` makes the engine try every
#: position of each file, 10x slower over torch's and transformers' 5,236 files.
_COMPILE_RE = re.compile(rb"compile[ \t]*(?:\(|$|#)", re.M)
COMPILE = "torch.compile"
DISABLE = frozenset({"torch.compiler.disable", "torch._dynamo.disable"})
CONTAINERS = frozenset({"torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList",
                        "torch.nn.modules.container.Sequential"})
MODULE_DICTS = frozenset({"torch.nn.ModuleDict", "torch.nn.modules.container.ModuleDict"})
DICT_CONTAINERS = MODULE_DICTS | {"dict"}
PASSTHROUGH = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "double", "requires_grad_"})
CONSTRUCTORS = frozenset({"from_pretrained", "from_config", "_from_config"})
#: ``torch.nn`` classes that are a block of layers themselves (attention, feed-forward, norms and
#: residuals in one module, or ``nn.Sequential(...)`` built inline), unlike its single layers.
TORCH_NN_BLOCKS = frozenset({"TransformerEncoderLayer", "TransformerDecoderLayer", "Sequential"})


def is_block_stack(constructor: str, per_item: bool) -> bool:
    """Whether a container built by a comprehension of ``constructor(...)`` calls is a stack of
    repeated blocks, the unit regional compilation compiles once and reuses (SP101).

    Not one when its elements are single ``torch.nn`` layers (``nn.Linear``, ``nn.Conv2d``,
    ``nn.LayerNorm``...: a region of one layer has nothing inside it to fuse), nor when they are
    built one per item of a collection (``per_item``: the element's arguments use a variable of a
    comprehension that does not count with ``range(...)``, as ``{t: Head(d, n_classes[t]) for t
    in tasks}`` does): such elements are parallel branches or differ in shape, and share no
    compiled code. A counted comprehension is a stack whatever its arguments (``Layer(cfg, i) for
    i in range(n)`` passes a layer's index, as transformers' decoder layers take ``layer_idx``).

    Args:
        constructor: the element's class as qualified in its file (``torch.nn.Linear``,
            ``.layers.Block``; ``nn.Linear`` where ``nn`` is not imported).
        per_item: see above.
    """
    last = constructor.rsplit(".", 1)[-1]
    if constructor.startswith(("torch.nn.", "nn.")) and last not in TORCH_NN_BLOCKS:
        return False
    return not per_item


# -- the summary of one file (JSON: it is what the cache holds) ------------------------------------

def _per_item(comp: ast.ListComp | ast.GeneratorExp | ast.DictComp, made: ast.expr) -> bool:
    """Whether ``made``, the element a comprehension builds, uses a variable of one of its ``for``
    clauses that does not iterate ``range(...)`` (:func:`is_block_stack`)."""
    uncounted = {n.id for gen in comp.generators
                 if not (isinstance(gen.iter, ast.Call) and isinstance(gen.iter.func, ast.Name) and gen.iter.func.id == "range")
                 for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
    return any(isinstance(n, ast.Name) and n.id in uncounted for n in ast.walk(made))


def dotted(expr: ast.expr) -> str | None:
    """The dotted name an expression is written as (``torch.nn.Linear``), or None where it is no
    chain of attributes on a name (``fns[0]``, ``make()``)."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def _literal(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def _off(call: ast.Call | None) -> bool:
    """Whether ``call`` passes a literal ``disable=True``: torch.compile then returns what it was
    given and compiles nothing (as :func:`rewriter.compile_facts.turned_off` reads one file)."""
    return call is not None and _literal(call, "disable") is True


def _options(call: ast.Call | None) -> tuple[bool | None, str | None]:
    if call is None:
        return None, None
    fg, mode = _literal(call, "fullgraph"), _literal(call, "mode")
    return (fg if isinstance(fg, bool) else None), (mode if isinstance(mode, str) else None)


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement under ``body``, nested ones included (no expressions are walked), in
    source order. Iterative: an ``elif`` chain nests each branch in the one before it (a
    1,000-branch chain is 1,000 levels), deeper than Python's recursion limit allows."""
    work: list[ast.AST] = list(reversed(body))
    while work:
        stmt = work.pop()
        if isinstance(stmt, ast.stmt):
            yield stmt
        inner: list[ast.AST] = []
        for name in _BODIES:
            inner.extend(getattr(stmt, name, None) or ())
        work.extend(reversed(inner))


class _Summarizer:
    """A walk over a module's *statements* building its summary (see :func:`summarize`).

    Expressions are walked only in statements that span a line where a compile call can be
    (``compile_lines``; None: every statement): the generic ``ast`` walk of every node of a
    5,000-line file costs several times its parse, and only compile calls are looked for inside
    expressions. Assignments are read at their top (``x = Cls(...)``, ``self.h =
    nn.ModuleList([...])``), which is all the bindings need.
    """

    def __init__(self, tree: ast.Module, compile_lines: Sequence[int] | None = None) -> None:
        self.compile_lines = sorted(compile_lines) if compile_lines is not None else None
        self.imports: dict[str, str] = {}
        self.defs: dict[str, str] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.defs.setdefault(stmt.name, "class")
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(stmt.name, "def")
        for node in _statements(tree.body):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.imports.setdefault(a.asname, a.name)
                    else:
                        head = a.name.split(".")[0]
                        self.imports.setdefault(head, head)
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        sep = "" if base.endswith(".") or not base else "."
                        self.imports.setdefault(a.asname or a.name, f"{base}{sep}{a.name}")
        self.classes: dict[str, dict] = {}
        self.sites: list[list] = []
        self.disabled: list[str] = []
        # (scope, key) -> (value, scope it was bound in); scope: "" module, "C.f" a method, "f"...
        self.bindings: dict[tuple[str, str], tuple] = {}
        self.cls: list[str] = []
        self.func: list[str] = []
        # (scope, name) of a class or def statement inside a function: a name the file's own facts
        # resolve (FileFacts.local_definitions), never a top-level or imported one
        self.local: set[tuple[str, str]] = set()
        self.kinds: list[str] = []  # "class"/"def" of each enclosing statement, innermost last
        # function (as marks name it: "f", "Cls.f") -> qualified imported names it calls
        self.calls: dict[str, list[str]] = {}

    def _may_compile(self, stmt: ast.stmt) -> bool:
        lines = self.compile_lines
        if lines is None:
            return True
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        i = bisect.bisect_left(lines, first)
        return i < len(lines) and lines[i] <= (stmt.end_lineno or stmt.lineno)

    # names ----------------------------------------------------------------------------------
    def qualify(self, expr: ast.expr) -> str | None:
        """The qualified name of a dotted expression, as LibCST's QualifiedNameProvider spells it."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.imports and head not in self.defs:
            base = self.imports[head]
            return f"{base}.{rest}" if rest else base
        return name

    def scope(self) -> str:
        return self.func[-1] if self.func else ""

    def class_of(self, expr: ast.expr, scope: str, depth: int = 0) -> tuple | None:
        """What an expression is an instance of: ``("cls", qualified class)`` or
        ``("block", qualified class, "h")`` (an element of that class's ``self.h`` container)."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Name) and expr.id == "self" and self.cls:
            return ("cls", self.cls[-1])
        if isinstance(expr, (ast.Name, ast.Attribute)):
            key = dotted(expr)
            if key is None:
                return None
            bound = self.bindings.get((scope, key)) or self.bindings.get(("", key))
            if bound is None and key.startswith("self.") and self.cls:
                bound = self.bindings.get((f"{self.cls[-1]}.__init__", key))
            if bound is None:
                return None
            value, where = bound
            if isinstance(value, tuple):  # a loop variable over a container
                return value
            return self.class_of(value, where, depth + 1)
        if not isinstance(expr, ast.Call):
            return None
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in PASSTHROUGH:
            return self.class_of(func.value, scope, depth + 1)
        if isinstance(func, ast.Attribute) and func.attr in CONSTRUCTORS:
            func = func.value
        if isinstance(func, ast.Name) and (scope, func.id) in self.local:
            return None  # a class of the function itself (it shadows a top-level one)
        name = self.qualify(func)
        return ("cls", name) if name is not None else None

    def function_target(self, expr: ast.expr) -> str | None:
        """``f`` / ``Cls.f`` / ``self.f`` naming a function (qualified), else None (also for a
        ``def``/``class`` of the enclosing function, :attr:`local`)."""
        head = expr.value if isinstance(expr, ast.Attribute) else expr
        if isinstance(head, ast.Name) and (self.scope(), head.id) in self.local:
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self" and self.cls:
            return f"{self.cls[-1]}.{expr.attr}"
        if isinstance(expr, ast.Name) and self.defs.get(expr.id) == "def":
            return expr.id
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and self.defs.get(expr.value.id) == "class":
            return f"{expr.value.id}.{expr.attr}"
        if isinstance(expr, ast.Name) and expr.id in self.imports and not self.bound(expr.id):
            return self.qualify(expr)  # an imported function (or class: resolution decides)
        return None

    def bound(self, name: str) -> bool:
        return (self.scope(), name) in self.bindings or ("", name) in self.bindings

    # sites ----------------------------------------------------------------------------------
    def _site(self, target: ast.expr | None, call: ast.Call | None, line: int, method: bool) -> None:
        if target is None:
            return
        fg, mode = _options(call)
        cls = self.class_of(target, self.scope())
        if cls is not None and cls[0] == "block":
            self.sites.append(["block", cls[1], cls[2], fg, mode, line])
            return
        if cls is None and not method and isinstance(target, ast.Attribute):
            owner = self.class_of(target.value, self.scope())
            if owner is not None and owner[0] == "cls" and not (isinstance(target.value, ast.Name) and target.value.id == "self"):
                # torch.compile(model.forward): the model's forward, its blocks with it; another
                # method of an instance: that method
                if target.attr == "forward":
                    self.sites.append(["instance", owner[1], None, fg, mode, line])
                else:
                    self.sites.append(["function", f"{owner[1]}.{target.attr}", None, fg, mode, line])
                return
        func = None if method else self.function_target(target)
        if func is not None:
            self.sites.append(["function", func, None, fg, mode, line])
        elif cls is not None:
            self.sites.append(["instance", cls[1], None, fg, mode, line])

    def _scan(self, *exprs: ast.AST | None) -> None:
        """Compile calls inside ``exprs`` (lambdas and comprehensions included)."""
        for expr in exprs:
            if expr is None:
                continue
            for node in ast.walk(expr):
                if isinstance(node, ast.Call):
                    self._call(node)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if _off(node) or (isinstance(func, ast.Call) and _off(func)):
            return  # disable=True: compiles nothing
        if self.qualify(func) == COMPILE:
            if node.args and not isinstance(node.args[0], ast.Starred):
                self._site(node.args[0], node, node.lineno, method=False)
        elif isinstance(func, ast.Call) and self.qualify(func.func) == COMPILE and node.args:
            self._site(node.args[0], func, node.lineno, method=False)  # torch.compile(**kw)(fn)
        elif isinstance(func, ast.Attribute) and func.attr == "compile" and not node.args:
            if not (isinstance(func.value, ast.Name) and func.value.id in ("re", "regex")):
                self._site(func.value, node, node.lineno, method=True)

    # statements -----------------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        """Read ``stmts`` and every statement nested in them, in source order.

        Iterative (a stack of statements and of the exits of the ``class``/``def`` scopes they
        open): an ``elif`` chain nests each branch in the one before it, and a 1,000-branch chain
        is deeper than Python's recursion limit allows a recursive walk."""
        work: list[ast.stmt | Callable[[], None]] = list(reversed(stmts))
        while work:
            item = work.pop()
            if isinstance(item, ast.stmt):
                work.extend(reversed(self.statement(item)))
            else:
                item()

    def statement(self, stmt: ast.stmt) -> list[ast.stmt | Callable[[], None]]:
        """Read one statement's own part; returns what :meth:`body` reads next, in order: the
        statements nested in it and, for a ``class``/``def``, the exit of its scope."""
        scan = self._may_compile(stmt)
        if isinstance(stmt, ast.ClassDef):
            return self._class(stmt, scan)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self._function(stmt, scan)
        if isinstance(stmt, ast.Assign):
            if scan:
                self._scan(stmt.value)
            for target in stmt.targets:
                self._bind(target, stmt.value)
            return []
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                if scan:
                    self._scan(stmt.value)
                self._bind(stmt.target, stmt.value)
            return []
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            if scan:
                self._scan(stmt.iter)
            self._loop(stmt)
            return [*stmt.body, *stmt.orelse]
        if scan:
            # the statement's own expressions, not those of the statements nested in it
            self._scan(*(v for k, v in ast.iter_fields(stmt) if k not in _BODIES and isinstance(v, ast.AST)))
            for k, v in ast.iter_fields(stmt):
                if k not in _BODIES and isinstance(v, list):
                    self._scan(*(x for x in v if isinstance(x, ast.AST) and not isinstance(x, ast.stmt)))
        nested: list[ast.stmt | Callable[[], None]] = []
        for name in _BODIES:
            for item in getattr(stmt, name, None) or ():
                # an except handler or a match case: its body
                nested.extend([item] if isinstance(item, ast.stmt) else getattr(item, "body", []))
        return nested

    def _class(self, node: ast.ClassDef, scan: bool) -> list[ast.stmt | Callable[[], None]]:
        top = not self.cls and not self.func
        if top:
            self.classes.setdefault(node.name, {
                "bases": [b for b in (self.qualify(e) for e in node.bases) if b],
                "methods": [], "disabled": [], "children": {}, "repeated": [],
            })
        if self.kinds and self.kinds[-1] == "def":
            self.local.add((self.scope(), node.name))
        self.cls.append(node.name if top else f"<nested {node.name}>")
        self.kinds.append("class")

        def leave() -> None:
            self.kinds.pop()
            self.cls.pop()

        return [*node.body, leave]

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scan: bool) -> list[ast.stmt | Callable[[], None]]:
        info = self.classes.get(self.cls[-1]) if self.cls and not self.func else None
        if info is not None:
            info["methods"].append(node.name)
        for dec in node.decorator_list:
            expr = dec.func if isinstance(dec, ast.Call) else dec
            name = self.qualify(expr)
            if name in DISABLE:
                if info is not None:
                    info["disabled"].append(node.name)
                elif not self.cls and not self.func:
                    self.disabled.append(node.name)
            elif name == COMPILE and info is not None and node.name == "forward" and not _off(dec if isinstance(dec, ast.Call) else None):
                fg, mode = _options(dec if isinstance(dec, ast.Call) else None)
                self.sites.append(["forward", self.cls[-1], None, fg, mode, dec.lineno])
        if scan:
            self._scan(*(d for d in node.decorator_list if isinstance(d, ast.Call)))
        if self.kinds and self.kinds[-1] == "def":
            self.local.add((self.scope(), node.name))
        owner = f"{self.cls[-1]}.{node.name}" if info is not None else (f"{self.scope()}.{node.name}" if self.func else node.name)
        if not self.func and (info is not None or not self.cls):
            called = self._imported_calls(node)
            if called:
                self.calls[owner] = called
        self.func.append(owner)
        self.kinds.append("def")

        def leave() -> None:
            self.kinds.pop()
            self.func.pop()

        return [*node.body, leave]

    def _imported_calls(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
        """Qualified names of the imported functions ``node``'s body calls (``clip(x)`` after
        ``from .ops import clip``: ``.ops.clip``), sorted; the project's reach follows them."""
        found: set[str] = set()
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Call) and isinstance(sub.func, (ast.Name, ast.Attribute)):
                    head = sub.func
                    while isinstance(head, ast.Attribute):
                        head = head.value
                    if isinstance(head, ast.Name) and head.id in self.imports and head.id not in self.defs:
                        name = self.qualify(sub.func)
                        if name is not None:
                            found.add(name)
        return sorted(found)

    # bindings -------------------------------------------------------------------------------
    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        key = dotted(target)
        if key is None:
            return
        scope = self.scope()
        is_compile = isinstance(value, ast.Call) and self.qualify(value.func) == COMPILE
        if is_compile and (scope, key) in self.bindings:
            return  # `m = Cls(); m = torch.compile(m)` still says Cls
        self.bindings[(scope, key)] = (value, scope)
        in_init = self.cls and self.func and self.func[-1] == f"{self.cls[-1]}.__init__"
        info = self.classes.get(self.cls[-1]) if in_init else None
        if info is not None and key.startswith("self.") and key.count(".") == 1:
            attr = key[5:]
            for path, block, container, stack in self._containers(value, [attr]):
                info["repeated"].append([".".join(["self", *path]), block, container, stack])
            if isinstance(value, ast.Call):
                cls = self.class_of(value, scope)
                if cls is not None and cls[0] == "cls" and self.qualify(value.func) not in CONTAINERS | DICT_CONTAINERS:
                    info["children"][attr] = cls[1]

    def _containers(self, expr: ast.expr, path: list[str]) -> Iterator[tuple[list[str], str, str, bool]]:
        """``(attribute path, element class, container, stack)`` of the ``ModuleList``/``Sequential``
        of a comprehension of calls in ``expr``, also nested in ``ModuleDict``/``dict`` keys, and of
        a ``ModuleDict`` of a dict comprehension of calls; ``stack``: whether it is a stack of
        repeated blocks (:func:`is_block_stack`), else its elements are only reached through it."""
        if isinstance(expr, ast.Call):
            name = self.qualify(expr.func)
            if name in MODULE_DICTS:
                for arg in expr.args:
                    if isinstance(arg, ast.DictComp) and isinstance(arg.value, ast.Call):
                        cls = self.class_of(arg.value, self.scope())
                        if cls is not None and cls[0] == "cls":
                            yield path, cls[1], "nn.ModuleDict", is_block_stack(cls[1], _per_item(arg, arg.value))
                            return
            if name in CONTAINERS:
                for arg in expr.args:
                    comp = arg.value if isinstance(arg, ast.Starred) else arg
                    if isinstance(comp, (ast.ListComp, ast.GeneratorExp)) and isinstance(comp.elt, ast.Call):
                        cls = self.class_of(comp.elt, self.scope())
                        if cls is not None and cls[0] == "cls":
                            yield path, cls[1], "nn." + name.rsplit(".", 1)[-1], is_block_stack(cls[1], _per_item(comp, comp.elt))
                            return
            elif name in DICT_CONTAINERS:
                for kw in expr.keywords:
                    if kw.arg:
                        yield from self._containers(kw.value, [*path, kw.arg])
                for arg in expr.args:
                    yield from self._containers(arg, path)
        elif isinstance(expr, ast.Dict):
            for k, v in zip(expr.keys, expr.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    yield from self._containers(v, [*path, k.value])

    def _loop(self, node: ast.For | ast.AsyncFor) -> None:
        """``for block in model.h:`` (or ``enumerate(model.h)``, ``model.h.values()``,
        ``model.h.children()``: how a regional loop walks a ``ModuleDict`` or a container of a class
        the source does not say) binds ``block`` to an element of ``model``'s class's ``self.h``
        container."""
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("values", "children")
                and not it.args and not it.keywords):
            it = it.func.value
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
            it = it.args[0]
            target = node.target.elts[1] if isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2 else None
        else:
            target = node.target
        if isinstance(target, ast.Name) and isinstance(it, ast.Attribute):
            owner, attrs = it, []
            while isinstance(owner, ast.Attribute):
                attrs.append(owner.attr)
                owner = owner.value
            cls = self.class_of(owner, self.scope())
            if cls is not None and cls[0] == "cls":
                self.bindings[(self.scope(), target.id)] = (("block", cls[1], ".".join(reversed(attrs))), self.scope())


def _strs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_class(value: object) -> bool:
    return (isinstance(value, dict) and _strs(value.get("bases")) and _strs(value.get("methods"))
            and _strs(value.get("disabled")) and _str_map(value.get("children"))
            and isinstance(value.get("repeated"), list)
            and all(isinstance(r, list) and len(r) == 4 and _strs(r[:3]) and isinstance(r[3], bool)
                    for r in value["repeated"]))


def _is_site(value: object) -> bool:
    """``[kind, target, attr, fullgraph, mode, line]`` (:func:`summarize`)."""
    return (isinstance(value, list) and len(value) == 6 and isinstance(value[0], str) and isinstance(value[1], str)
            and (value[2] is None or isinstance(value[2], str)) and (value[3] is None or isinstance(value[3], bool))
            and (value[4] is None or isinstance(value[4], str)) and isinstance(value[5], int))


def _is_summary(value: object) -> bool:
    """The shape of a :func:`summarize` result, all the way down: the cache is data from disk,
    and an entry that is not one (edited, or written by another version under the same
    :data:`CACHE_VERSION`) is read again here rather than failing later in the reach."""
    return (isinstance(value, dict) and _str_map(value.get("imports")) and _str_map(value.get("defs"))
            and _strs(value.get("disabled"))
            and isinstance(value.get("classes"), dict)
            and all(isinstance(k, str) and _is_class(c) for k, c in value["classes"].items())
            and isinstance(value.get("sites"), list) and all(_is_site(s) for s in value["sites"])
            and isinstance(value.get("calls"), dict) and all(isinstance(k, str) and _strs(v) for k, v in value["calls"].items()))


def _is_entry(value: object) -> bool:
    """The shape of a cache entry, ``[mtime_ns, size, can_start_a_reach, summary or None]``
    (:meth:`Project._entry`)."""
    return isinstance(value, list) and len(value) == 4 and (value[3] is None or _is_summary(value[3]))


def compile_lines(data: bytes) -> list[int]:
    """1-based lines of ``data`` where the compile needle matches (a call or a decorator)."""
    out, line, pos = [], 1, 0
    for match in word_matches(_COMPILE_RE, data):
        line += data.count(b"\n", pos, match.start())
        pos = match.start()
        out.append(line)
    return out


def summarize(tree: ast.Module, lines: Sequence[int] | None = None) -> dict:
    """The facts of one module that reachability needs, as plain JSON data.

    Args:
        tree: the module's ``ast``.
        lines: :func:`compile_lines` of its text (only statements spanning one are searched for
            compile calls); None: every statement is.

    Returns:
        ``{"imports": {local name: qualified name}, "defs": {top-level name: "class"|"def"},
        "disabled": [top-level functions under @torch.compiler.disable], "classes": {name:
        {"bases", "methods", "disabled", "children": {attr: class}, "repeated": [[attr path,
        element class, container, stack]]}}, "sites": [[kind, target, attr, fullgraph, mode, line]],
        "calls": {"f" or "Cls.f": [qualified imported names it calls]}}``;
        names are qualified the way LibCST's ``QualifiedNameProvider`` qualifies them in that
        file (``models.layers.Block``, ``.layers.Block``, ``Block`` for a local class). A site's
        kind is ``instance`` (an instance of ``target`` is compiled), ``function``, ``forward``
        (``@torch.compile`` on ``target``'s ``forward``) or ``block`` (each element of
        ``target``'s ``self.<attr>`` container).
    """
    s = _Summarizer(tree, lines)
    s.body(tree.body)
    return {"imports": s.imports, "defs": s.defs, "disabled": s.disabled, "classes": s.classes, "sites": s.sites,
            "calls": s.calls}


# -- what one checked file learns from the project ---------------------------------------------

@dataclass(frozen=True)
class Mark:
    """A compile that reaches a function of the checked file from outside that function.

    Attributes:
        origin: where the ``torch.compile`` is, as printed (``train.py:12``; ``line 12`` in the
            same file).
        fullgraph, mode: the compile's literal options (None when absent or not literal).
        whole_model: reached through a compiled model (its ``forward`` or a block of it).
        files: absolute paths of the files the reach went through (the compile's file, the
            model's, the block's): a finding it causes is reported when one of them is given.
    """

    origin: str
    fullgraph: bool | None = None
    mode: str | None = None
    whole_model: bool = False
    files: frozenset[str] = frozenset()
    #: for a function reached through calls from compiled code in another file, the call chain
    #: as printed (``helper `clip` called from `Block.forward` in model.py``); else None.
    via: str | None = None


@dataclass
class FileView:
    """What the facts of one checked file take from the project (picklable, for worker processes).

    Attributes:
        marks: ``"Cls.forward"`` / ``"func"`` of this file -> how it is reached.
        repeats: qualified class name (as this file's LibCST names it) -> ``(attr, block,
            container, files)`` when that project class repeats a block.
        blocks: qualified class names that are a repeated block of some project class read.
        report_only: for a file that was not given (checked because a given file's compile
            reaches it, or it compiles a given file's model), the absolute paths of the given
            files: only findings caused through one of them are reported. None for a given file.
    """

    marks: dict[str, Mark] = field(default_factory=dict)
    repeats: dict[str, tuple[str, str, str, tuple[str, ...]]] = field(default_factory=dict)
    blocks: set[str] = field(default_factory=set)
    report_only: frozenset[str] | None = None

    def top_names(self) -> set[str]:
        """Top-level definitions holding a reached function (what the reduction must keep)."""
        return {q.split(".", 1)[0] for q in self.marks}


# -- the project --------------------------------------------------------------------------------

def find_root(path: str) -> str | None:
    """The project root of ``path``: the nearest folder at or above the file's own folder holding
    ``pyproject.toml`` or ``.git`` (see the module docstring), or None."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in ROOT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def fallback_root(paths: Sequence[str]) -> str | None:
    """The project root taken for given files that have none (:func:`find_root` None): their
    common folder, so that files given together (``check train.py models/net.py``) reach each
    other, and a file given alone reaches the files beside it. None without such files, or when
    that folder is the filesystem's root or the home directory (no project is that wide)."""
    if not paths:
        return None
    common = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
    if common in (os.path.abspath(os.sep), os.path.abspath(os.path.expanduser("~"))):
        return None
    return common


def _walked(rel: str) -> bool:
    """Whether a path relative to the root lies where :meth:`Project._walk` looks."""
    parts = rel.replace(os.sep, "/").split("/")[:-1]
    return not rel.startswith("..") and not any(p.startswith(".") or p in SKIP_DIRS for p in parts)


def _display(abspath: str) -> str:
    rel = os.path.relpath(abspath)
    return (abspath if rel.startswith("..") else rel).replace(os.sep, "/")


class Project:
    """The ``.py`` files under one root, their cached summaries, name resolution and the reach.

    ``files`` (relative path -> absolute path) is walked at construction (hidden folders,
    :data:`SKIP_DIRS` and links to folders left out). Summaries are computed on demand and kept
    in the cache (see the module docstring).
    """

    def __init__(self, root: str, files: dict[str, str] | None = None, use_cache: bool = True,
                 keep: frozenset[str] = frozenset()) -> None:
        """Walk ``root`` (or take ``files``, relpath -> abspath, as the project: tests, a single
        file) and load the cache when ``use_cache``. ``keep``: absolute paths whose bytes are
        kept in :attr:`kept` once read (the files given to ``check``, which reads them next)."""
        self.root = root
        self._keep = keep
        self.kept: dict[str, bytes] = {}
        self.files = files if files is not None else self._walk()
        self.use_cache = use_cache and files is None
        self._cache: dict[str, list] = self._load() if self.use_cache else {}
        self._dirty = False
        self._summaries: dict[str, dict] = {}
        self._stats: dict[str, tuple[int, int]] = {}
        self.modules = self._module_map()
        self.parsed = 0  # files parsed (not taken from the cache) in this run
        self._seeds: list[str] | None = None
        self._resolved: dict[tuple[str, str, int], tuple[str, str] | None] = {}
        self._repeats: dict[tuple[str, str], tuple | None] = {}

    def _walk(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            rel_folder = os.path.relpath(folder, self.root).replace(os.sep, "/")
            prefix = "" if rel_folder == "." else rel_folder + "/"
            for name in names:
                if name.endswith(".py"):
                    out[prefix + name] = os.path.join(folder, name)
            if len(out) > MAX_PROJECT_FILES:
                return {}
        return out

    def _module_map(self) -> dict[str, str]:
        modules: dict[str, str] = {}
        for rel in self.files:
            parts = rel[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                modules.setdefault(".".join(parts), rel)
                if parts[0] == "src" and len(parts) > 1:
                    modules.setdefault(".".join(parts[1:]), rel)
        return modules

    # cache ------------------------------------------------------------------------------------
    def _cache_path(self) -> str:
        return os.path.join(self.root, CACHE_DIR, CACHE_FILE)

    def _load(self) -> dict[str, list]:
        try:
            with open(self._cache_path(), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8 JSON, nested too deep
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
            return {}
        # each entry's shape checked once, here: one that is not an entry is read again by _entry
        return {rel: entry for rel, entry in data["files"].items() if rel in self.files and _is_entry(entry)}

    def save(self) -> None:
        """Write the cache when something changed (atomically; an unwritable root is no error)."""
        if not (self.use_cache and self._dirty):
            return
        folder = os.path.join(self.root, CACHE_DIR)
        try:
            os.makedirs(folder, exist_ok=True)
            ignore = os.path.join(folder, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as fh:
                    fh.write("# written by stackpart check: the project facts cache\n*\n")
            live = {rel: entry for rel, entry in self._cache.items() if rel in self.files}
            import tempfile  # only to write (its import pulls random, shutil...)

            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": CACHE_VERSION, "files": live}, fh, separators=(",", ":"))
            os.replace(tmp, self._cache_path())
        except OSError:
            return
        self._dirty = False

    def _entry(self, rel: str) -> list | None:
        """``[mtime_ns, size, can_start_a_reach, summary or None]`` of ``rel``, fresh."""
        full = self.files.get(rel)
        if full is None:
            return None
        try:
            st = os.stat(full)
        except OSError:
            return None
        entry = self._cache.get(rel)  # of the shape _is_entry checks (loaded so, or made here)
        if entry is not None and entry[0] == st.st_mtime_ns and entry[1] == st.st_size:
            return entry
        data = self._read(rel)
        seed = b"torch" in data and next(word_matches(_COMPILE_RE, data), None) is not None
        entry = [st.st_mtime_ns, st.st_size, seed, None]
        self._cache[rel] = entry
        self._dirty = True
        if seed:
            entry[3] = self._parse(data)
        return entry

    def _read(self, rel: str) -> bytes:
        """The bytes of project file ``rel`` (``b""`` when it cannot be read); a file in
        ``keep`` is read once and its bytes kept."""
        full = self.files[rel]
        key = os.path.abspath(full)
        if key in self.kept:
            return self.kept[key]
        from ..source import Skipped, read_bytes
        from ..errors import StackpartError

        try:
            data, _ = read_bytes(full)
        except (Skipped, StackpartError):
            return b""
        if key in self._keep:
            self.kept[key] = data
        return data

    def _parse(self, data: bytes) -> dict:
        self.parsed += 1
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return {"imports": {}, "defs": {}, "disabled": [], "classes": {}, "sites": [], "calls": {}}
        try:
            return summarize(tree, compile_lines(data))
        except RecursionError:
            return {"imports": {}, "defs": {}, "disabled": [], "classes": {}, "sites": [], "calls": {}}

    def summary(self, rel: str) -> dict | None:
        """The summary of project file ``rel`` (parsed now if the cache has none), or None."""
        cached = self._summaries.get(rel)
        if cached is not None:
            return cached
        entry = self._entry(rel)
        if entry is None:
            return None
        if entry[3] is None:
            entry[3] = self._parse(self._read(rel))
            self._dirty = True
        self._summaries[rel] = entry[3]
        return entry[3]

    def seeds(self) -> list[str]:
        """Project files that can start a reach (they mention torch and call compile)."""
        if self._seeds is None:
            self._seeds = [rel for rel in self.files if (e := self._entry(rel)) is not None and e[2]]
        return self._seeds

    # names ------------------------------------------------------------------------------------
    def _module_of(self, qualified: str, rel: str) -> tuple[str, str] | None:
        """``(file, rest)``: the project module a qualified name starts with and the rest."""
        if qualified.startswith("."):
            level = len(qualified) - len(qualified.lstrip("."))
            package = rel.split("/")[:-1]
            if level > 1:
                package = package[: len(package) - (level - 1)] if level - 1 <= len(package) else None
            if package is None:
                return None
            names = qualified[level:].split(".") if qualified[level:] else []
            parts = [*package]
            for i in range(len(names), -1, -1):
                base = "/".join([*parts, *names[:i]])
                for cand in (f"{base}.py", f"{base}/__init__.py" if base else "__init__.py"):
                    if cand in self.files:
                        return cand, ".".join(names[i:])
            return None
        names = qualified.split(".")
        # `from model import GPT` in `src/train.py`, run as `python train.py` from `src/`: the
        # script's folder is sys.path[0], so a flat import names a file beside the importer, before
        # any module of that name elsewhere in the project; a folder that is a package (its
        # `__init__.py`) runs no script, so there the project's modules come first
        folder = rel.split("/")[:-1]
        script_folder = bool(folder) and "/".join([*folder, "__init__.py"]) not in self.files
        for beside in ((True, False) if script_folder else (False, True)):
            found = self._beside(names, folder) if beside else self._module(names)
            if found is not None:
                return found
        return None

    def _module(self, names: list[str]) -> tuple[str, str] | None:
        """The project module a dotted import names (its longest prefix), or None."""
        for i in range(len(names), 0, -1):
            mod = self.modules.get(".".join(names[:i]))
            if mod is not None:
                return mod, ".".join(names[i:])
        return None

    def _beside(self, names: list[str], folder: list[str]) -> tuple[str, str] | None:
        """The file a dotted import names in ``folder`` (a script's sibling), or None."""
        if not folder:
            return None
        for i in range(len(names), 0, -1):
            base = "/".join([*folder, *names[:i]])
            for cand in (f"{base}.py", f"{base}/__init__.py"):
                if cand in self.files:
                    return cand, ".".join(names[i:])
        return None

    def resolve(self, qualified: str, rel: str, hops: int = 0) -> tuple[str, str] | None:
        """``(file, "Name" or "Name.attr")``: the project definition a name of file ``rel``
        refers to, following re-exports (:data:`MAX_HOPS`); None outside the project."""
        key = (qualified, rel, hops)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(qualified, rel, hops)
        return self._resolved[key]

    def _resolve(self, qualified: str, rel: str, hops: int) -> tuple[str, str] | None:
        head, _, rest = qualified.partition(".")
        summ = self.summary(rel)
        if summ is not None and not qualified.startswith(".") and summ["defs"].get(head):
            return rel, qualified
        found = self._module_of(qualified, rel)
        if found is None:
            return None
        mod, inner = found
        if not inner:
            return None  # a module, not a definition
        ihead, _, irest = inner.partition(".")
        target = self.summary(mod)
        if target is None:
            return None
        if target["defs"].get(ihead):
            return mod, inner
        if hops < MAX_HOPS and ihead in target["imports"]:
            again = target["imports"][ihead] + (f".{irest}" if irest else "")
            return self.resolve(again, mod, hops + 1)
        return None

    def class_info(self, ref: tuple[str, str]) -> dict | None:
        """The summary of class ``ref`` (``(file, name)``; a top-level class), or None when
        ``ref`` is not one (a function, a method, a name the file does not define)."""
        summ = self.summary(ref[0])
        return summ["classes"].get(ref[1]) if summ is not None and "." not in ref[1] else None

    def _bases(self, ref: tuple[str, str], depth: int = 0) -> Iterator[tuple[tuple[str, str], dict]]:
        """The class and its project base classes (depth-first, at most 8 levels)."""
        info = self.class_info(ref)
        if info is None or depth > 8:
            return
        yield ref, info
        for base in info["bases"]:
            bref = self.resolve(base, ref[0])
            if bref is not None and bref != ref:
                yield from self._bases(bref, depth + 1)

    def forward_of(self, ref: tuple[str, str]) -> tuple[tuple[str, str], bool] | None:
        """``((file, class), disabled)`` of the class whose ``forward`` an instance of ``ref`` runs."""
        for bref, info in self._bases(ref):
            if "forward" in info["methods"]:
                return bref, "forward" in info["disabled"]
        return None

    def repeats(self, ref: tuple[str, str]) -> tuple[str, str, str, tuple[str, ...]] | None:
        """Why instances of ``ref`` repeat a block: ``(attr path, block name, container, files)``,
        from the class, a base class, or a submodule that repeats one (transitively); None."""
        if ref not in self._repeats:
            self._repeats[ref] = self._repeats_of(ref, frozenset())
        return self._repeats[ref]

    def _repeats_of(self, ref: tuple[str, str], seen: frozenset) -> tuple[str, str, str, tuple[str, ...]] | None:
        if ref in seen or len(seen) > 16:
            return None
        seen = seen | {ref}
        for bref, info in self._bases(ref):
            for attr, block, container, stack in info["repeated"]:
                if stack:
                    return attr, block.rsplit(".", 1)[-1], container, (bref[0],)
        for bref, info in self._bases(ref):
            for attr, child in info["children"].items():
                cref = self.resolve(child, bref[0])
                sub = self._repeats_of(cref, seen) if cref is not None else None
                if sub is not None:
                    return f"self.{attr}.{sub[0].removeprefix('self.')}", sub[1], sub[2], (bref[0], *sub[3])
        return None

    def blocks(self) -> set[tuple[str, str]]:
        """Classes that are the repeated block of some class in the files read so far."""
        out = set()
        for rel, summ in list(self._summaries.items()):
            for info in summ["classes"].values():
                for _, block, _, stack in info["repeated"]:
                    ref = self.resolve(block, rel) if stack else None
                    if ref is not None:
                        out.add(ref)
        return out

    # reach ------------------------------------------------------------------------------------
    def reach(self) -> dict[str, dict[str, Mark]]:
        """Every function a compile in the project reaches: ``{file: {"Cls.forward"|"f": Mark}}``.

        The first compile found reaching a function gives its options; the ``files`` of every
        compile reaching it are joined.
        """
        marks: dict[str, dict[str, Mark]] = {}

        def add(ref: tuple[str, str], mark: Mark) -> None:
            have = marks.setdefault(ref[0], {})
            old = have.get(ref[1])
            if old is None:
                have[ref[1]] = mark
            elif not mark.files <= old.files:
                have[ref[1]] = Mark(old.origin, old.fullgraph, old.mode, old.whole_model, old.files | mark.files, old.via)

        def full(rel: str) -> str:
            return os.path.abspath(self.files[rel])

        def model(ref: tuple[str, str], site: list, origin: str, chain: frozenset[str], seen: set, own: bool) -> None:
            if ref in seen or len(seen) > 256:
                return
            seen.add(ref)
            chain = chain | {full(ref[0])}
            fwd = self.forward_of(ref)
            if fwd is not None and not fwd[1] and own:
                add((fwd[0][0], f"{fwd[0][1]}.forward"), Mark(origin, site[3], site[4], True, chain | {full(fwd[0][0])}))
            for bref, info in self._bases(ref):
                subs = [*info["children"].values(), *(r[1] for r in info["repeated"])]
                for sub in subs:
                    sref = self.resolve(sub, bref[0])
                    if sref is not None and self.class_info(sref) is not None:
                        model(sref, site, origin, chain | {full(bref[0])}, seen, True)

        for rel in self.seeds():
            summ = self.summary(rel)
            if summ is None:
                continue
            for site in summ["sites"]:
                kind, target, attr, _, _, line = site
                origin = f"{_display(full(rel))}:{line}"
                start = frozenset({full(rel)})
                ref = self.resolve(target, rel)
                if ref is None:
                    continue
                owner, _, method = ref[1].partition(".")
                if kind == "function" and method == "forward" and self.class_info((ref[0], owner)) is not None:
                    # torch.compile(self.forward): the module's forward, its blocks with it
                    model((ref[0], owner), site, origin, start, set(), own=True)
                elif kind == "function":
                    if self.class_info(ref) is None and ref[1] not in self.summary(ref[0])["disabled"]:
                        add(ref, Mark(origin, site[3], site[4], False, start | {full(ref[0])}))
                elif kind in ("instance", "forward") and self.class_info(ref) is not None:
                    # a decorated forward is marked by its own file's facts; its blocks are not
                    model(ref, site, origin, start, set(), own=kind == "instance")
                elif kind == "block" and self.class_info(ref) is not None:
                    for bref, info in self._bases(ref):
                        for path, block, *_ in info["repeated"]:
                            if path.removeprefix("self.") == attr:
                                blk = self.resolve(block, bref[0])
                                if blk is not None and self.class_info(blk) is not None:
                                    model(blk, site, origin, start | {full(bref[0])}, set(), True)
        self._follow_calls(marks, add, full)
        return marks

    def _follow_calls(self, marks: dict[str, dict[str, Mark]], add, full) -> None:
        """Mark the top-level functions of other project files that reached code calls through an
        import (``from .ops import clip``), :data:`HELPER_DEPTH` calls deep: Dynamo inlines them
        (what :mod:`.facts` does within one file). A function under ``@torch.compiler.disable``
        is not followed."""
        frontier = [(rel, qual, mark) for rel, fmarks in marks.items() for qual, mark in fmarks.items()]
        for _ in range(HELPER_DEPTH):
            found = []
            for rel, qual, mark in frontier:
                summ = self.summary(rel)
                for name in (summ.get("calls", {}).get(qual, ()) if summ else ()):
                    ref = self.resolve(name, rel)
                    if ref is None or ref[0] == rel or "." in ref[1] or ref[1] in marks.get(ref[0], {}):
                        continue
                    target = self.summary(ref[0])
                    if target is None or target["defs"].get(ref[1]) != "def" or ref[1] in target["disabled"]:
                        continue
                    how = f"`{qual}` in {_display(full(rel))}" if mark.via is None else f"`{qual}`, {mark.via.split(' is called from ', 1)[1]}"
                    new = Mark(mark.origin, mark.fullgraph, mark.mode, False, mark.files | {full(ref[0])},
                               via=f"`{ref[1]}` is called from {how}")
                    add(ref, new)
                    found.append((ref[0], ref[1], new))
            frontier = found
            if not frontier:
                return

    def view(self, rel: str, marks: dict[str, dict[str, Mark]], blocks: set[tuple[str, str]]) -> FileView:
        """The :class:`FileView` of project file ``rel``."""
        view = FileView(marks=dict(marks.get(rel, {})))
        summ = self.summary(rel)
        if summ is None:
            return view
        # what SP101 asks about: the classes this file compiles, and its own classes
        names = {*(s[1] for s in summ["sites"]), *(n for n, kind in summ["defs"].items() if kind == "class")}
        for name in names:
            ref = self.resolve(name, rel)
            if ref is None or self.class_info(ref) is None:
                continue
            why = self.repeats(ref)
            if why is not None:
                view.repeats[name] = (why[0], why[1], why[2], tuple(full for full in (os.path.abspath(self.files[f]) for f in why[3])))
            if ref in blocks:
                view.blocks.add(name)
        return view


def local_view(tree: ast.Module, path: str = "<file>", lines: Sequence[int] | None = None) -> FileView:
    """The reach of one file's own compiles inside that file (the project of one file): the
    blocks of a model compiled in the same file, regional loops; origins read ``line N``.
    ``lines``: :func:`compile_lines` of the text, when known (a faster walk)."""
    rel = "file.py"
    project = Project("", files={rel: path})
    project._summaries[rel] = summarize(tree, lines)
    project._seeds = [rel]
    marks = project.reach()
    blocks = project.blocks()
    view = project.view(rel, marks, blocks)
    view.marks = {k: Mark(_line_only(m.origin), m.fullgraph, m.mode, m.whole_model, frozenset(), m.via) for k, m in view.marks.items()}
    view.repeats = {k: (*v[:3], ()) for k, v in view.repeats.items()}
    return view


def _line_only(origin: str) -> str:
    return "line " + origin.rsplit(":", 1)[-1]


@dataclass
class Plan:
    """What :func:`plan_project` decided for one ``check`` run.

    Attributes:
        views: each given file (as given) -> its :class:`FileView` (absent: not in a project).
        extra: files not given but checked for findings a given file causes (displayed path ->
            view with ``report_only`` set), in a stable order.
        parsed: project files parsed in this run (the cache answered for the rest).
        files: ``.py`` files in the projects read.
        data: the bytes of each given file (as given) that was read here (its cache entry was
            not fresh), for ``check`` to use instead of reading it again.
    """

    views: dict[str, FileView] = field(default_factory=dict)
    extra: dict[str, FileView] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    parsed: int = 0
    files: int = 0
    #: the folder taken as the project root of given files with no ``pyproject.toml`` or
    #: ``.git`` above them (:func:`fallback_root`), or None when every file had a root
    fallback_root: str | None = None


def plan_project(paths: Sequence[str], use_cache: bool = True) -> Plan:
    """Read the project(s) of ``paths`` (the files given to ``check``) for facts.

    Each given file's root is found with :func:`find_root`; the files of one root share one
    :class:`Project`. A file of a project that is not given is checked too (its findings filtered
    to those a given file causes) when a compile reach touches both: the compile is in a given
    file, or it goes through a given file's class.

    Returns:
        a :class:`Plan`. Nothing is raised for unreadable project files: they count as empty.
    """
    plan = Plan()
    by_root: dict[str, list[str]] = {}
    roots: dict[str, str | None] = {}
    orphans: list[str] = []
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in roots:
            roots[folder] = find_root(path)
        root = roots[folder]
        if root is not None:
            by_root.setdefault(root, []).append(path)
        else:
            orphans.append(path)
    plan.fallback_root = fallback_root(orphans)
    if plan.fallback_root is not None:
        by_root.setdefault(plan.fallback_root, []).extend(orphans)
    for root, given in by_root.items():
        # a file the walk leaves out (under a hidden folder such as .venv, or site-packages) is
        # not the project's: it is checked alone, and its root is not read for it
        given = [p for p in given if _walked(os.path.relpath(os.path.abspath(p), root))]
        if not given:
            continue
        given_abs = frozenset(os.path.abspath(p) for p in given)
        # no cache in a folder that is no project: nothing is written where no marker said so
        fallback = root == plan.fallback_root
        project = Project(root, use_cache=use_cache and not fallback, keep=given_abs)
        if not project.files and fallback:  # too many files under the common folder: the given ones
            project = Project(root, files={os.path.relpath(p, root).replace(os.sep, "/"): p for p in given_abs},
                              keep=given_abs)
        if not project.files:
            continue
        rel_of = {p: os.path.relpath(os.path.abspath(p), root).replace(os.sep, "/") for p in given}
        marks = project.reach()
        for p, rel in rel_of.items():
            if rel in project.files:
                project.summary(rel)
        blocks = project.blocks()
        for p, rel in rel_of.items():
            if rel in project.files:
                plan.views[p] = project.view(rel, marks, blocks)
        touched: set[str] = set()
        for rel, fmarks in marks.items():
            for mark in fmarks.values():
                if mark.files & given_abs:
                    touched.update(mark.files)
            # the file holding a compile whose class is given (SP101 is reported at the compile)
        for rel in project.seeds():
            summ = project.summary(rel)
            for site in summ["sites"] if summ else ():
                ref = project.resolve(site[1], rel)
                if ref is None or project.class_info(ref) is None:
                    continue
                why = project.repeats(ref)
                files = {os.path.abspath(project.files[f]) for f in (why[3] if why else ())} | {os.path.abspath(project.files[ref[0]])}
                if files & given_abs:
                    touched.add(os.path.abspath(project.files[rel]))
        for full in sorted(touched - given_abs):
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel in project.files:
                view = project.view(rel, marks, blocks)
                view.report_only = given_abs
                plan.extra.setdefault(_display(full), view)
        project.save()
        plan.data.update((p, project.kept[os.path.abspath(p)]) for p in given if os.path.abspath(p) in project.kept)
        plan.parsed += project.parsed
        plan.files += len(project.files)
    return plan

