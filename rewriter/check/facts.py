"""What the rules of one file share, computed once before the rules run.

Torch names are resolved through LibCST's scope analysis (``ScopeProvider`` and
``Scope.get_qualified_names_for``, what ``QualifiedNameProvider`` calls, asked only for the nodes a
rule looks at), so
``import torch as T; T.compile``, ``from torch import compile`` and ``from torch._dynamo import
mark_dynamic as md`` are all recognised, and a local variable that happens to be called ``torch``
is not.

The analysis of the file itself is deliberately simple (no type inference); what other files
of the project do to it comes in as a :class:`~rewriter.check.project.FileView` (see
:mod:`.project`):

* a function is *compiled* when it carries ``@torch.compile`` / ``@torch.compile(...)``, when its
  name (``f``, ``self.f``, ``Cls.f``) is passed to ``torch.compile`` in this file, or, for a
  class's ``forward``, when an instance bound in this file (``m = Cls(...)``) is compiled (a
  top-level class, or one defined in the body of the function that compiles it, which shadows
  a top-level class of its name, as a nested ``def`` does a top-level one); and
  when the view marks it: a compile in another file reaches it, or it is the ``forward`` of a
  block of a model compiled here or elsewhere (such a site has ``origin`` set and no node);
* a function of this file that compiled code calls (``helper(...)``, ``self.method(...)``, three
  calls deep, not one under ``@torch.compiler.disable``) is traced as well: Dynamo inlines it;
* a node is *traced* when its nearest enclosing function is compiled (or such a helper) and it is
  not in a branch that only runs eager (``if not torch.compiler.is_compiling():`` and friends);
* a class *repeats a block* when its ``__init__`` builds ``nn.ModuleList``/``nn.Sequential`` from
  a comprehension of calls (``[Block(cfg) for _ in range(n)]``), or ``nn.ModuleDict`` from a dict
  comprehension of calls (``{f"b{i}": Block(cfg) for i in range(n)}``), that is a stack of blocks
  (:func:`.file_summary.is_block_stack`: no single ``torch.nn`` layer, no element per item of a
  collection, as a multi-task head's ``{t: nn.Linear(d, n[t]) for t in tasks}``), or holds (``self.x = Cls(...)``)
  a class of this file that does; a ``transformers`` ``*For*``/``AutoModel*`` class counts too
  (every such model is a stack of layers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, QualifiedNameSource, ScopeProvider

from ..compile_facts import first_positional, is_repeated_blocks_call, options, turned_off
from ..rewrite.callers import self_returning
from ..rewrite.factories import factory_call
from ..targets import is_type_checking
from .file_summary import is_block_stack

if TYPE_CHECKING:
    from .project import FileView

COMPILE = "torch.compile"
DISABLE = {"torch.compiler.disable", "torch._dynamo.disable"}
MARK_DYNAMIC = {"torch._dynamo.mark_dynamic", "torch._dynamo.decorators.mark_dynamic"}
IS_COMPILING = {
    "torch.compiler.is_compiling",
    "torch.compiler.is_dynamo_compiling",
    "torch._dynamo.is_compiling",
    "torch._dynamo.external_utils.is_compiling",
    "torch._utils.is_compiling",
    "torch.jit.is_scripting",
    "torch.jit.is_tracing",
    "torch.fx._symbolic_trace.is_fx_tracing",
}
CONTAINERS = {"torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList",
              "torch.nn.ModuleDict", "torch.nn.modules.container.ModuleDict"}
# Method calls that only move or re-flag a module and return it (``Cls(...).to(dev)``).
PASSTHROUGH = {"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "double", "requires_grad_"}
CONSTRUCTORS = {"from_pretrained", "from_config", "_from_config"}
#: Calls followed from compiled code into this file's helpers (:meth:`FileFacts._follow_helpers`).
HELPER_DEPTH = 3
# torch.compile modes that use CUDA graphs (torch.compile docs: "reduce-overhead" uses CUDA
# graphs; "max-autotune" enables them on GPU as well).
CUDA_GRAPH_MODES = {"reduce-overhead", "max-autotune"}


@dataclass
class CompileSite:
    """How a function came to be compiled.

    Attributes:
        node: the decorator or the ``torch.compile(...)`` call.
        fullgraph: the literal ``fullgraph=`` value, or None when absent or not a literal.
        mode: the literal ``mode=`` string, or None.
        whole_model: compiled through an instance of its class (``torch.compile(model)``).
        origin: for a compile reached through the project (another file, or a model holding
            this block), where the ``torch.compile`` is (``train.py:12``, ``line 12``); then
            ``node`` is None.
        files: absolute paths of the files that reach went through (see
            :class:`~rewriter.check.project.Mark`).
    """

    node: cst.CSTNode | None
    fullgraph: bool | None = None
    mode: str | None = None
    whole_model: bool = False
    origin: str | None = None
    files: frozenset[str] = frozenset()
    #: for a helper traced because a compiled function calls it (:meth:`FileFacts.helpers`), the
    #: call chain as printed (``helper `norm` called from compiled `forward```); else None.
    via: str | None = None


@dataclass
class Repeated:
    """A repeated block a class builds: ``self.<attr> = nn.ModuleList([<block>(...) for ...])``."""

    attr: str
    block: str
    container: str


@dataclass
class ClassInfo:
    node: cst.ClassDef
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    repeated: list[Repeated] = field(default_factory=list)
    # self.<attr> = <Cls>(...) in __init__: attr -> dotted class name
    children: dict[str, str] = field(default_factory=dict)


def _per_item(comp: cst.ListComp | cst.GeneratorExp | cst.DictComp, made: cst.Call) -> bool:
    """Whether ``made``, the element a comprehension builds, uses a variable of one of its ``for``
    clauses that does not iterate ``range(...)`` (:func:`.file_summary.is_block_stack`)."""
    uncounted: set[str] = set()
    clause: cst.CompFor | None = comp.for_in
    while clause is not None:
        if not m.matches(clause.iter, m.Call(func=m.Name("range"))):
            uncounted |= {n.value for n in m.findall(clause.target, m.Name())}  # type: ignore[attr-defined]
        clause = clause.inner_for_in
    return any(n.value in uncounted for n in m.findall(made, m.Name()))  # type: ignore[attr-defined]


DefT = TypeVar("DefT", cst.FunctionDef, cst.ClassDef)
_CLAUSES = (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase)


def _suite_statements(node: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """The statements of ``node``'s blocks in source order, those nested in compound statements
    (an ``if``'s body, ``elif`` and ``else``, a ``try``'s handlers, ...) included; the body of a
    nested ``def`` or ``class`` is not entered."""
    for child in node.children:
        if isinstance(child, cst.IndentedBlock):
            for stmt in child.body:
                yield stmt
                if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                    yield from _suite_statements(stmt)
        elif isinstance(child, cst.If):  # an elif
            yield child
            yield from _suite_statements(child)
        elif isinstance(child, _CLAUSES):
            yield from _suite_statements(child)


class FileFacts:
    """The shared analysis of one file; see the module docstring for what each answer means."""

    def __init__(self, wrapper: MetadataWrapper, node_types: frozenset[str] = frozenset(),
                 view: FileView | None = None) -> None:
        """Analyse ``wrapper.module``; remember every node whose class name is in ``node_types``
        (the rules' ``visit_<Type>`` methods), in document order, in :attr:`nodes`. ``view``:
        what the project knows of this file (compiles reaching it, classes of other files that
        repeat a block); None for the file on its own."""
        self.view = view
        self.wrapper = wrapper
        self.module = wrapper.module
        self._scopes = wrapper.resolve(ScopeProvider)
        self._qcache: dict[cst.CSTNode, frozenset] = {}
        self._parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.node_types = node_types
        self.nodes: list[cst.CSTNode] = []
        self.classes: dict[str, ClassInfo] = {}
        # classes defined in a function's body (``def make(): class GPT(nn.Module): ...``), by
        # their statement: several may share a name (:meth:`local_definitions` picks)
        self.local_classes: dict[cst.ClassDef, ClassInfo] = {}
        self.functions: dict[str, cst.FunctionDef] = {}  # module-level defs
        self.compiled: dict[cst.FunctionDef, CompileSite] = {}
        # functions of this file that compiled code calls (Dynamo inlines them): traced like the
        # compiled ones, kept apart since no compile names them (:meth:`_follow_helpers`)
        self.helpers: dict[cst.FunctionDef, CompileSite] = {}
        self.disabled: set[cst.FunctionDef] = set()
        self.untraced: set[cst.CSTNode] = set()  # blocks that run only eager
        self.never_run: set[cst.CSTNode] = set()  # `if TYPE_CHECKING:` bodies: for type checkers only
        # (scope node, "name" or "self.attr") -> the value last bound to it
        self.bindings: dict[tuple[cst.CSTNode, str], cst.BaseExpression] = {}
        self.compile_calls: list[cst.Call] = []
        self.method_compile_calls: list[cst.Call] = []  # X.compile(...)
        # X.compile_repeated_blocks(...): the model's declared blocks compiled in place (diffusers'
        # regional compile); the program's own compile, which reaches no function of this file here
        self.repeated_compile_calls: list[cst.Call] = []
        # the compile calls of the three kinds above (a decorator's call included) that pass a
        # literal ``disable=True`` (:func:`rewriter.compile_facts.turned_off`): ``(kind, call)``,
        # kind ``call``, ``method`` or ``repeated``. They compile nothing, so no rule reads them as
        # a compile; diagnose lists them as the program's compile turned off
        # (:func:`rewriter.diagnose.own_compile.off_compiles`)
        self.off_compile_calls: list[tuple[str, cst.Call]] = []
        _Collector(self).visit_module()
        self._resolve_repeated()
        self._resolve_compiled()

    # -- names --------------------------------------------------------------------------------
    def qnames(self, node: cst.CSTNode) -> set[str]:
        """Qualified names of ``node`` (``{"torch.compile"}`` for ``T.compile`` after ``import torch as T``)."""
        return {q.name for q in self._raw_qnames(node)}

    def _raw_qnames(self, node: cst.CSTNode) -> frozenset:
        cached = self._qcache.get(node)
        if cached is None:
            scope = self._scopes.get(node)
            if callable(scope) and not isinstance(scope, cst.CSTNode):  # libcst's LazyValue
                scope = scope()
            cached = frozenset(scope.get_qualified_names_for(node)) if scope is not None else frozenset()
            self._qcache[node] = cached
        return cached

    def is_imported(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` names something bound by an import (``math``, ``np``), not a local."""
        return any(q.source is QualifiedNameSource.IMPORT for q in self._raw_qnames(node))

    def is_name(self, node: cst.CSTNode, names: str | set[str]) -> bool:
        wanted = {names} if isinstance(names, str) else names
        return bool(self.qnames(node) & wanted)

    def is_call(self, node: cst.CSTNode, names: str | set[str]) -> bool:
        """``node`` is a call of a plain (dotted) name resolving to ``names``; ``f(...)(...)`` is not."""
        return (
            isinstance(node, cst.Call)
            and isinstance(node.func, (cst.Name, cst.Attribute))
            and self.is_name(node.func, names)
        )

    def compile_target(self, call: cst.Call) -> tuple[cst.BaseExpression | None, cst.CSTNode]:
        """What a ``torch.compile`` call compiles and the node to report at.

        ``torch.compile(fn, **kw)`` -> ``(fn, call)``; ``torch.compile(**kw)(fn)`` (the decorator
        form applied by hand) -> ``(fn, outer call)``; ``torch.compile(**kw)`` alone -> ``(None, call)``.
        """
        target = first_positional(call)
        if target is not None:
            return target, call
        parent = self.parent(call)
        if isinstance(parent, cst.Call) and parent.func is call:
            return first_positional(parent), parent
        return None, call

    def compile_call(self, dec: cst.Decorator) -> tuple[bool, cst.Call | None]:
        """Whether a decorator is ``torch.compile`` (one that compiles: not ``disable=True``,
        :func:`rewriter.compile_facts.turned_off`) and its call when it has arguments."""
        expr = dec.decorator
        if isinstance(expr, cst.Call):
            return self.is_name(expr.func, COMPILE) and not turned_off(expr), expr
        return self.is_name(expr, COMPILE), None

    # -- tree ---------------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        node = self._parents.get(node)
        while node is not None:
            yield node
            node = self._parents.get(node)

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.FunctionDef):
                return anc
        return None

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.ClassDef):
                return anc
        return None

    def traced_by(self, node: cst.CSTNode) -> tuple[cst.FunctionDef, CompileSite] | None:
        """The compiled function that traces ``node`` and how it is compiled, or None.

        None when the nearest enclosing function (or lambda) is not compiled, or when ``node``
        sits in a branch that runs only eager (``if not torch.compiler.is_compiling():``).
        """
        for anc in self.ancestors(node):
            if anc in self.untraced:
                return None
            if isinstance(anc, cst.Lambda):
                return None
            if isinstance(anc, cst.FunctionDef):
                site = self.compiled.get(anc) or self.helpers.get(anc)
                if site is not None and any(outer in self.never_run for outer in self.ancestors(anc)):
                    return None  # a definition under `if TYPE_CHECKING:` never runs
                return (anc, site) if site is not None else None
        return None

    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        return self.enclosing_function(node) or self.module

    # -- values -------------------------------------------------------------------------------
    def bound_value(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
        """What a name (``m``) or ``self.attr`` at ``at`` was last bound to in its scope, else None."""
        key = get_full_name_for_node(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key is None:
            return None
        scope = self.scope_of(at)
        value = self.bindings.get((scope, key))
        if value is None and key.startswith("self."):
            cls = self.enclosing_class(at)
            info = self.info_of(cls) if cls is not None else None
            init = info.methods.get("__init__") if info is not None else None
            if init is not None:
                value = self.bindings.get((init, key))
        if value is None and isinstance(expr, cst.Name):
            value = self.bindings.get((self.module, key))
        return value

    def class_of(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> tuple[str, set[str]] | None:
        """The class an expression evaluates to an instance of: ``(dotted name, qualified names)``.

        Understands ``Cls(...)``, ``Cls.from_pretrained(...)``, ``Cls(...).to(dev)`` and a name or
        ``self.attr`` bound to one of those in the same scope. A call of a function of this file is
        read as the class it returns an instance of, one call deep (``build()`` with ``def build():
        return Net()``: :func:`rewriter.rewrite.factories.factory_call`); a function defined in the
        enclosing function's body, or a top-level one that does not say its class, gives None. None
        when unknown.
        """
        if depth > 4:
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)) and not isinstance(expr, cst.Call):
            value = self.bound_value(expr, at)
            return self.class_of(value, at, depth + 1) if value is not None and value is not expr else None
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in PASSTHROUGH:
            return self.class_of(func.value, at, depth + 1)
        if isinstance(func, cst.Attribute) and func.attr.value in CONSTRUCTORS:
            func = func.value
        if isinstance(func, cst.Name) and not self.local_definitions(func.value, at, cst.ClassDef):
            if self.local_definitions(func.value, at, cst.FunctionDef):
                return None  # a function of the enclosing function's body: not followed
            if func.value in self.functions and not self.is_imported(func):
                made = factory_call(self.module, func.value)
                return self.class_of(made, made, depth + 1) if made is not None else None
        name = get_full_name_for_node(func)
        if name is None:
            return None
        return name, self.qnames(func)

    def info_of(self, node: cst.ClassDef) -> ClassInfo | None:
        """What this file knows of the class statement ``node``: a top-level class or one
        defined in a function's body (:attr:`local_classes`); None for others (a class nested
        in a class, one under ``if TYPE_CHECKING:``)."""
        local = self.local_classes.get(node)
        if local is not None:
            return local
        info = self.classes.get(node.name.value)
        return info if info is not None and info.node is node else None

    def class_info(self, name: str, at: cst.CSTNode) -> ClassInfo | None:
        """The class ``name`` as seen at ``at``: a class the enclosing function defines before
        ``at`` (:meth:`local_definitions`; of several, one that repeats a block, else the last),
        else the top-level class of this file; None otherwise."""
        local = [i for c in self.local_definitions(name, at, cst.ClassDef) if (i := self.local_classes.get(c))]
        if local:
            return next((i for i in local if i.repeated), local[-1])
        return self.classes.get(name)

    def all_classes(self) -> list[ClassInfo]:
        """Every class this file knows: the top-level ones, then those of functions' bodies."""
        return [*self.classes.values(), *self.local_classes.values()]

    def repeats(self, cls: tuple[str, set[str]], at: cst.CSTNode | None = None) -> str | None:
        """Why the class repeats a block (``"self.h: nn.ModuleList of Block"``), or None.

        A class of this file is judged here (``at``: where the class is named, so a class the
        enclosing function defines is the one judged); a class of another project file (or one
        of this file whose repeated block is a submodule from another file) by the view."""
        return self.repeats_with_files(cls, at)[0]

    def repeats_with_files(self, cls: tuple[str, set[str]], at: cst.CSTNode | None = None) -> tuple[str | None, tuple[str, ...]]:
        """:meth:`repeats` and the project files that answer comes from (absolute; empty when
        this file alone answers it)."""
        name, qnames = cls
        info = self.class_info(name, at) if at is not None else self.classes.get(name)
        if info is not None and info.repeated:
            r = info.repeated[0]
            return f"{r.attr} is an {r.container} of {r.block}", ()
        if self.view is not None:
            for q in sorted(qnames | {name}):
                hit = self.view.repeats.get(q)
                if hit is not None:
                    attr, block, container, files = hit
                    return f"{attr} is an {container} of {block}", files
        return self._library_repeats(qnames), ()

    def repeated(self, cls: tuple[str, set[str]], at: cst.CSTNode | None = None) -> Repeated | None:
        """The repeated block :meth:`repeats` reads for the class, with its container's attribute
        path (``self.h``, ``self.transformer.h``) and class; None where the source does not say
        it (a ``transformers`` model, judged by its class name alone)."""
        name, qnames = cls
        info = self.class_info(name, at) if at is not None else self.classes.get(name)
        if info is not None and info.repeated:
            return info.repeated[0]
        if self.view is not None:
            for q in sorted(qnames | {name}):
                hit = self.view.repeats.get(q)
                if hit is not None:
                    return Repeated(hit[0], hit[1], hit[2])
        return None

    def _library_repeats(self, qnames: set[str]) -> str | None:
        for q in qnames:
            if q.startswith("transformers."):
                last = q.rsplit(".", 1)[-1]
                if last.startswith("AutoModel") or "For" in last:
                    return f"{last} is a transformers model, a stack of repeated layers"
        return None

    def is_repeated_block(self, name: str, qnames: set[str] | frozenset[str] = frozenset()) -> bool:
        """Whether class ``name`` is itself the block a class of this file repeats (``Block`` of
        ``nn.ModuleList([Block(...) for ...])``), or, per the view, of a project class read:
        compiling it is regional compilation, even when it holds a list of its own (an MoE
        block's experts)."""
        last = name.rsplit(".", 1)[-1]
        if any(r.block.rsplit(".", 1)[-1] == last for info in self.all_classes() for r in info.repeated):
            return True
        return self.view is not None and bool(self.view.blocks & ({name} | set(qnames)))

    # -- resolution after the pass ------------------------------------------------------------
    def _resolve_repeated(self) -> None:
        changed = True
        while changed:  # a class holding a class that repeats a block repeats it too
            changed = False
            for info in self.all_classes():
                if info.repeated:
                    continue
                for attr, child in info.children.items():
                    sub = self.class_info(child, info.node)  # a class of its own function first
                    if sub is not None and sub.repeated and sub is not info:
                        r = sub.repeated[0]
                        info.repeated.append(Repeated(f"{attr}.{r.attr.removeprefix('self.')}", r.block, r.container))
                        changed = True
                        break

    def _mark(self, func: cst.FunctionDef | None, site: CompileSite) -> None:
        if func is not None and func not in self.compiled:
            self.compiled[func] = site

    def _target_functions(self, expr: cst.BaseExpression, at: cst.CSTNode) -> list[cst.FunctionDef]:
        """The functions of this file that ``expr`` may name at ``at`` (``f``, ``self.f``,
        ``Cls.f``): several where a function defines ``f`` in each branch of an ``if``
        (:meth:`local_definitions`); empty when none."""
        if isinstance(expr, cst.Name):
            local = self.local_definitions(expr.value, at, cst.FunctionDef)
            if local:
                return local
            top = self.functions.get(expr.value)
            return [top] if top is not None else []
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = expr.value.value
            if owner == "self":
                cls = self.enclosing_class(at)
                info = self.classes.get(cls.name.value) if cls else None
            else:
                info = self.classes.get(owner)
            if info is not None:
                method = info.methods.get(expr.attr.value)
                return [method] if method is not None else []
        return []

    def local_definitions(self, name: str, at: cst.CSTNode, kind: type[DefT]) -> list[DefT]:
        """The ``def name`` / ``class name`` statements (``kind``) of the function holding ``at``
        that may bind ``name`` when ``at`` runs (``def make(): class Inner(nn.Module): ...;
        return torch.compile(Inner())``), in source order; empty at module level or where the
        function has none.

        :attr:`classes` and :attr:`functions` hold the top-level definitions only; one defined and
        compiled in a function is found here, and it shadows a top-level one of the same name, as
        in Python. The function's statements are read in source order, those under an ``if``,
        ``with``, ``try``, ``for`` or ``match`` included, not those of a nested ``def`` or ``class``
        (their own scope); a statement after ``at`` does not bind the name when ``at`` runs. A
        definition that always runs (in the function's own block or a ``with``'s) replaces the
        ones before it; one under a branch, loop, ``try`` or ``match`` may not run, so it joins
        them: ``if big: class Blk ... else: class Blk ...`` gives both classes (taking the last one alone
        would leave a compile of the ``if`` branch's class unseen).
        """
        scope = self.scope_of(at)
        if scope is self.module or "." in name:
            return []
        stop = next((a for a in self.ancestors(at) if isinstance(a, cst.BaseStatement)), None)
        found: list[DefT] = []
        for stmt in _suite_statements(scope):
            if stmt is stop:
                break
            if isinstance(stmt, kind) and stmt.name.value == name:
                found = found + [stmt] if self._conditional(stmt, scope) else [stmt]
        return found

    def _conditional(self, stmt: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Whether ``stmt`` lies under a branch, loop, ``try`` or ``match`` of ``scope``."""
        for anc in self.ancestors(stmt):
            if anc is scope:
                return False
            if isinstance(anc, (cst.If, cst.For, cst.While, cst.Try, cst.TryStar, cst.Match)):
                return True
        return False

    def _forwards_of(self, name: str, at: cst.CSTNode) -> list[cst.FunctionDef]:
        """The own ``forward`` of each class ``name`` may be at ``at``: the classes of the
        enclosing function (:meth:`local_definitions`), else a top-level class of this file."""
        local = self.local_definitions(name, at, cst.ClassDef)
        if local:
            return [fwd for cls in local for fwd in getattr(cls.body, "body", ())
                    if isinstance(fwd, cst.FunctionDef) and fwd.name.value == "forward"]
        info = self.classes.get(name)
        fwd = info.methods.get("forward") if info is not None else None
        return [fwd] if fwd is not None else []

    def _resolve_compiled(self) -> None:
        for call in self.compile_calls:
            target, _ = self.compile_target(call)
            if target is None:
                continue
            fullgraph, mode = options(call)
            funcs = self._target_functions(target, call)
            for func in funcs:
                self._mark(func, CompileSite(call, fullgraph, mode))
            if funcs:
                continue
            cls = self.class_of(target, call)
            if cls is not None:
                for fwd in self._forwards_of(cls[0], call):
                    self._mark(fwd, CompileSite(call, fullgraph, mode, whole_model=True))
        for call in self.method_compile_calls:
            assert isinstance(call.func, cst.Attribute)
            cls = self.class_of(call.func.value, call)
            if cls is not None:
                fullgraph, mode = options(call)
                for fwd in self._forwards_of(cls[0], call):
                    self._mark(fwd, CompileSite(call, fullgraph, mode, whole_model=True))
        self._apply_view()
        self._follow_helpers()

    def _follow_helpers(self, depth: int = HELPER_DEPTH) -> None:
        """Mark the functions of this file that traced code calls, ``depth`` calls deep.

        Dynamo inlines a call to a plain Python function into the caller's graph (torch.compile
        docs, "Dynamo Overview": function calls are inlined), so a graph break or a branch on a
        tensor's value in such a helper is one of the compiled function. Followed: ``helper(...)``
        naming a ``def`` of this file (a top-level one, or one the calling function defines) and
        ``self.method(...)`` naming a method of the caller's class; a call that runs only eager
        (``traced_by`` None: a lambda, an ``is_compiling()`` else branch) is not, nor a function
        under ``@torch.compiler.disable`` (Dynamo runs it eagerly). Calls through imports, other
        objects or base classes are not resolved here.
        """
        frontier = list(self.compiled.items())
        # how each is reached, as printed: a function the project reached through calls keeps its chain
        chain = {func: f"compiled `{func.name.value}`" if site.via is None else
                 f"`{func.name.value}`, called from {site.via.split(' is called from ', 1)[1]}" for func, site in frontier}
        for _ in range(depth):
            found: list[tuple[cst.FunctionDef, CompileSite]] = []
            for func, site in frontier:
                for call in m.findall(func, m.Call(func=m.Name() | m.Attribute(value=m.Name("self"), attr=m.Name()))):
                    assert isinstance(call, cst.Call)
                    traced = self.traced_by(call)
                    if traced is None or traced[0] is not func:
                        continue
                    helper = self._helper(call, func)
                    if helper is None or helper in self.compiled or helper in self.helpers or helper in self.disabled:
                        continue
                    new = CompileSite(site.node, site.fullgraph, site.mode, site.whole_model, site.origin, site.files,
                                      via=f"`{helper.name.value}` is called from {chain[func]}")
                    chain[helper] = f"`{helper.name.value}`, called from {chain[func]}"
                    self.helpers[helper] = new
                    found.append((helper, new))
            frontier = found
            if not frontier:
                return

    def _helper(self, call: cst.Call, caller: cst.FunctionDef) -> cst.FunctionDef | None:
        """The ``def`` of this file that ``call`` (in ``caller``) runs, as :meth:`_follow_helpers`
        resolves it, else None."""
        func = call.func
        if isinstance(func, cst.Name):
            if self.is_imported(func):
                return None
            local = self.local_definitions(func.value, call, cst.FunctionDef)
            if local:
                return local[-1]
            top = self.functions.get(func.value)
            if top is not None and self.qnames(func) == {func.value}:
                return top
            return None
        if isinstance(func, cst.Attribute):
            cls = self.enclosing_class(caller)
            info = self.info_of(cls) if cls is not None else None
            method = info.methods.get(func.attr.value) if info is not None else None
            if method is not None and method is not caller:
                return method
        return None

    def _apply_view(self) -> None:
        """Mark what the view says a compile elsewhere reaches (after this file's own sites, which
        win: they have a node here). A function under ``@torch.compiler.disable`` stays eager."""
        if self.view is None:
            return
        for qual, mark in self.view.marks.items():
            owner, _, method = qual.partition(".")
            if method:
                info = self.classes.get(owner)
                func = info.methods.get(method) if info is not None else None
            else:
                func = self.functions.get(owner)
            if func is None or func in self.disabled:
                continue
            self._mark(func, CompileSite(None, mark.fullgraph, mark.mode, mark.whole_model, mark.origin, mark.files,
                                         via=mark.via))


class _Collector(cst.CSTVisitor):
    """One pass over the module filling a :class:`FileFacts` (defs, classes, bindings, calls)."""

    def __init__(self, facts: FileFacts) -> None:
        super().__init__()
        self.f = facts
        self.class_stack: list[cst.ClassDef] = []
        self.func_stack: list[cst.FunctionDef] = []
        self.stack: list[cst.CSTNode] = []

    def visit_module(self) -> None:
        self.f.module.visit(self)

    # parents and the rules' nodes are recorded here, in the same pass (ParentNodeProvider and
    # a second, batched traversal for the rules each cost as much as this whole pass)
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.f._parents[node] = self.stack[-1]
        self.stack.append(node)
        if type(node).__name__ in self.f.node_types:
            self.f.nodes.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self.stack.pop()

    def _never_runs(self) -> bool:
        """Whether the node being visited lies under ``if TYPE_CHECKING:`` (its definitions are
        no runtime classes or functions: the ``else:`` ones are)."""
        return bool(self.f.never_run) and any(n in self.f.never_run for n in self.stack)

    def _owner(self, node: cst.CSTNode | None = None) -> cst.CSTNode | None:
        """The innermost ``def`` or ``class`` statement holding ``node`` (on the visit stack;
        default: the node being visited)."""
        end = self.stack.index(node) if node is not None else len(self.stack) - 1
        return next((n for n in reversed(self.stack[:end]) if isinstance(n, (cst.FunctionDef, cst.ClassDef))), None)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_stack.append(node)
        if not self.func_stack and len(self.class_stack) == 1 and not self._never_runs():
            self.f.classes.setdefault(node.name.value, ClassInfo(node))
        elif isinstance(self._owner(), cst.FunctionDef) and not self._never_runs():
            self.f.local_classes[node] = ClassInfo(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        f = self.f
        if not self.func_stack and not self._never_runs():
            if not self.class_stack:
                f.functions.setdefault(node.name.value, node)
            elif len(self.class_stack) == 1 and self.class_stack[0].name.value in f.classes:
                f.classes[self.class_stack[0].name.value].methods.setdefault(node.name.value, node)
        elif (owner := self._owner()) in f.local_classes:
            f.local_classes[owner].methods.setdefault(node.name.value, node)  # type: ignore[index]
        for dec in node.decorators:
            is_compile, call = f.compile_call(dec)
            if is_compile:
                fullgraph, mode = options(call)
                f.compiled[node] = CompileSite(dec, fullgraph, mode)
            expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            if f.is_name(expr, DISABLE):
                f.disabled.add(node)
        self.func_stack.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.func_stack.pop()

    def _scope(self) -> cst.CSTNode:
        return self.func_stack[-1] if self.func_stack else self.f.module

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            key = get_full_name_for_node(target.target) if isinstance(target.target, (cst.Name, cst.Attribute)) else None
            if key is None:
                continue
            # keep the first non-compile binding: `m = Cls(); m = torch.compile(m)` must still say Cls;
            # `m = m.eval()` (methods that return the module itself) keeps what m was bound to
            if (self.f.is_call(node.value, COMPILE) or self_returning(node.value, key)) and (self._scope(), key) in self.f.bindings:
                continue
            self.f.bindings[(self._scope(), key)] = node.value
            self._record_child(key, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        key = get_full_name_for_node(node.target) if isinstance(node.target, (cst.Name, cst.Attribute)) else None
        if key is not None and node.value is not None:
            self.f.bindings.setdefault((self._scope(), key), node.value)
            self._record_child(key, node.value)

    def _record_child(self, key: str, value: cst.BaseExpression) -> None:
        if not (self.class_stack and self.func_stack and self.func_stack[-1].name.value == "__init__"):
            return
        info = self._init_class() or self.f.classes.get(self.class_stack[-1].name.value)
        if info is None or not key.startswith("self.") or key.count(".") != 1:
            return
        if isinstance(value, cst.Call):
            name = get_full_name_for_node(value.func)
            if name is not None and (name in self.f.classes or info.node in self.f.local_classes):
                info.children[key] = name

    def visit_Call(self, node: cst.Call) -> None:
        f = self.f
        kind = ("call" if f.is_call(node, COMPILE) else "method" if m.matches(node.func, m.Attribute(attr=m.Name("compile")))
                else "repeated" if is_repeated_blocks_call(node) else None)
        if kind is not None and turned_off(node):
            f.off_compile_calls.append((kind, node))  # disable=True: compiles nothing
        elif kind == "call":
            f.compile_calls.append(node)
        elif kind == "method":
            f.method_compile_calls.append(node)
        elif kind == "repeated":
            f.repeated_compile_calls.append(node)
        if self.class_stack and self.func_stack and self.func_stack[-1].name.value == "__init__":
            if f.is_name(node.func, CONTAINERS):
                self._record_container(node)

    def _record_container(self, node: cst.Call) -> None:
        info = self._init_class() or self.f.classes.get(self.class_stack[0].name.value)
        if info is None:
            return
        for arg in node.args:
            comp = arg.value
            made = (comp.elt if isinstance(comp, (cst.ListComp, cst.GeneratorExp))
                    else comp.value if isinstance(comp, cst.DictComp) else None)
            if isinstance(made, cst.Call):
                block = get_full_name_for_node(made.func)
                if block is None:
                    continue
                per_item = _per_item(comp, made)  # type: ignore[arg-type]
                if all(is_block_stack(c, per_item) for c in self.f.qnames(made.func) or {block}):
                    attr = self._owner_attr(node)
                    container = "nn." + get_full_name_for_node(node.func).rsplit(".", 1)[-1]  # type: ignore[union-attr]
                    info.repeated.append(Repeated(attr, block, container))
                return

    def _init_class(self) -> ClassInfo | None:
        """The class whose ``__init__`` is being visited, when this file knows it
        (:meth:`FileFacts.info_of`: a top-level class or one of a function's body)."""
        owner = self._owner(self.func_stack[-1])
        return self.f.info_of(owner) if isinstance(owner, cst.ClassDef) else None

    def _owner_attr(self, node: cst.CSTNode) -> str:
        """``self.h`` for ``self.h = nn.ModuleList(...)``; ``self.transformer.h`` for
        ``self.transformer = nn.ModuleDict(dict(h=nn.ModuleList(...)))`` (ModuleDict keys are
        attributes)."""
        keys: list[str] = []
        for anc in self.f.ancestors(node):
            if isinstance(anc, cst.Assign) and anc.targets:
                owner = get_full_name_for_node(anc.targets[0].target) or "a submodule"
                return ".".join([owner, *reversed(keys)])
            if isinstance(anc, cst.Arg) and anc.keyword is not None:
                keys.append(anc.keyword.value)
            if isinstance(anc, cst.DictElement) and isinstance(anc.key, cst.SimpleString):
                keys.append(str(anc.key.evaluated_value))
            if isinstance(anc, cst.FunctionDef):
                break
        return ".".join(reversed(keys)) or "a submodule"

    def visit_If(self, node: cst.If) -> None:
        test, negated = node.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if not negated and is_type_checking(node.test):
            self.f.never_run.add(node.body)
        if self.f.is_call(test, IS_COMPILING):
            # `if is_compiling():` -> the else branch runs only eager; `if not ...:` -> the body
            if negated:
                self.f.untraced.add(node.body)
            elif node.orelse is not None:
                self.f.untraced.add(node.orelse)
