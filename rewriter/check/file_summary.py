"""What one file defines, imports and compiles: the ``ast`` summary the project index reads.

:func:`summarize` reads one module's ``ast`` into plain JSON data (what the project's cache holds,
:mod:`.project_files`): its imports, top-level definitions, classes (bases, methods, the
submodules ``__init__`` builds, the containers of repeated blocks), its compile sites and the
imported functions each function calls. Names are qualified through the file's own imports only;
:mod:`.project` resolves them across files. :func:`is_block_stack` is the one reading of a
container of repeated blocks, shared with the per-file facts (:mod:`.facts`). A change to the
summary's format or meaning bumps :data:`.project_files.CACHE_VERSION`.

**Why the C ``ast`` module, not LibCST, for the index.** The rules themselves run on LibCST with
``ScopeProvider``/qualified names (:mod:`.facts`), but only for the files reported. Reading every
project file through LibCST's metadata costs about 40x CPython's parser (3.1 s of
``ScopeProvider`` alone on transformers' ``modeling_utils.py``; docs/decisions.md, "check's speed
and the splice's round trip"), which would make a commit of
one file pay for the whole tree. The summary keeps its own import table (module-level and
function-level ``import``/``from ... import``, relative ones as LibCST spells them, ``.layers.Block``),
so its names are the strings LibCST's ``QualifiedNameProvider`` gives the checked file. What it
gives up: a local variable shadowing an imported name is not noticed in the *index* (the findings
are still computed by LibCST on the reported file).
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Iterator, Sequence

from ..compile_facts import word_matches

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


def compile_lines(data: bytes) -> list[int]:
    """1-based lines of ``data`` where the compile needle matches (a call or a decorator)."""
    out, line, pos = [], 1, 0
    for match in word_matches(_COMPILE_RE, data):
        line += data.count(b"\n", pos, match.start())
        pos = match.start()
        out.append(line)
    return out


def can_start_reach(data: bytes) -> bool:
    """Whether a file's bytes can start a reach: they mention ``torch`` and the compile needle
    matches (a call or a decorator). The project parses such files up front
    (:mod:`.project_files`)."""
    return b"torch" in data and next(word_matches(_COMPILE_RE, data), None) is not None


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

