"""Repeated blocks a model declares itself: the ``_repeated_blocks`` class attribute.

diffusers' models list the class names of their repeated blocks for regional compilation
(``FluxTransformer2DModel._repeated_blocks = ["FluxTransformerBlock",
"FluxSingleTransformerBlock"]``), and ``ModelMixin.compile_repeated_blocks()`` calls
``submodule.compile(...)`` on every submodule whose class name is listed (diffusers 0.42.1,
``models/modeling_utils.py``). The attribute is read the same way here on any ``nn.Module``
(a transformers model or a user's own model may declare it too): on the model and every
submodule, names matched to the live submodules' classes under the module that declares them,
by ``type(module).__name__``, as diffusers matches them.

The declaration only chooses the per-block candidate's compile targets (:mod:`.granularity`,
:mod:`.planner`); that candidate is measured by the search's engine like every other, never
assumed best.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The class attribute diffusers' ``ModelMixin.compile_repeated_blocks`` reads.
ATTR = "_repeated_blocks"


@dataclass
class Declared:
    """What the model's ``_repeated_blocks`` declarations say, matched against its submodules.

    Attributes:
        declarers: ``"FluxTransformer2DModel._repeated_blocks"`` for each module class that
            declares a non-empty list, model order (the class name, as the library's source
            spells the declaration).
        names: every declared class name, declaration order, without repeats.
        classes: the submodule classes whose ``__name__`` is declared, declaration order (two
            classes of one name: both, model order).
        instances: for each class in ``classes``, ``[(qualified name, module)]`` of its instances
            that lie inside no instance of another declared class (an inner one runs inside the
            outer's compiled region already), model order.
        unmatched: declared names no submodule's class has under its declarer, as
            ``(declarer's class name + "._repeated_blocks", name)``.
        nested: declared classes every instance of which lies inside another declared class's
            instance, as ``(name, outer class name)``: compiled as part of that region.
        ignored: declarations that are not a list or tuple of class names, as one line each.
        unresolved: declared classes with no plan target (neither under SRC nor importable by
            path), one line each; filled by :func:`.granularity.find_blocks`.
    """

    declarers: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    classes: list[type] = field(default_factory=list)
    instances: list[list[tuple[str, Any]]] = field(default_factory=list)
    unmatched: list[tuple[str, str]] = field(default_factory=list)
    nested: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)

    @property
    def targets(self) -> bool:
        """Whether some declared class is a compile target (matched and resolvable)."""
        return len(self.unresolved) < len(self.classes)

    @property
    def source(self) -> str:
        """The declaration(s) the targets come from, for a ``why:``: ``FluxTransformer2DModel._repeated_blocks``."""
        return " and ".join(self.declarers)

    def notes(self) -> list[str]:
        """The report's lines about declarations that do not all hold: names that match no
        submodule, declarations ignored, and whether detection is the fallback."""
        out = [f"{d} names {n!r}, which is the class of no submodule of the model: not a compile target"
               for d, n in self.unmatched]
        out += [f"{n!r} ({self.source}): every instance lies inside a {outer}, compiled as part of that region"
                for n, outer in self.nested]
        out += self.ignored + self.unresolved
        if (self.unmatched or self.ignored or self.unresolved) and not self.targets:
            out.append("no declared repeated block matched a submodule: per-block targets come from stackpart's own "
                       "repeated-block detection (instances of one class in ModuleList/Sequential/ModuleDict containers)")
        return out


def _names(value: Any) -> list[str] | None:
    """The class names of a ``_repeated_blocks`` value (a list or tuple of str), else None; an
    empty or missing value is ``[]`` (diffusers' ``ModelMixin`` sets ``_repeated_blocks = []``)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def read(model: Any) -> Declared:
    """The ``_repeated_blocks`` declarations of ``model`` (an ``nn.Module``) and of every submodule,
    matched to the classes of the submodules under each declarer by class name (as diffusers'
    ``compile_repeated_blocks`` matches them: ``submod.__class__.__name__ in repeated_blocks``).

    Pure structure: no forward runs. A model wrapped by ``torch.compile`` is read through its
    wrapper, and a wrapper inside it declares nothing of its own (an ``OptimizedModule`` answers
    for the module it wraps): each declaration is read once, and every name is the module's own,
    without ``_orig_mod.``. A declaration that is not a list or tuple of strings (a
    bare string, which diffusers would read by substring), or one that raises when read, is ignored
    with a line in :attr:`Declared.ignored`; the declarer itself is never its own block.

    Returns:
        a :class:`Declared`; empty (no ``declarers``) when nothing declares a non-empty list.
    """
    from ..engine.watch import unwrapped, without_compile_hops as _own

    out = Declared()
    model = unwrapped(model)
    modules = [(_own(q), m) for q, m in model.named_modules(remove_duplicate=True) if unwrapped(m) is m]
    wanted: dict[str, list[str]] = {}  # declarer's qualified name -> names
    seen_decl: set[str] = set()
    for qual, module in modules:
        label = f"{type(module).__name__}.{ATTR}"
        try:
            value = getattr(module, ATTR, None)
        except Exception as exc:  # a property or __getattr__ of the user's that raises
            if label not in seen_decl:
                seen_decl.add(label)
                out.ignored.append(f"{label} raised {type(exc).__name__} when read ({' '.join(str(exc).split())[:120]}): ignored")
            continue
        names = _names(value)
        if names is None:
            if label not in seen_decl:
                seen_decl.add(label)
                out.ignored.append(f"{label} = {value!r} is not a list of class names: ignored"[:300])
            continue
        if not names:
            continue
        wanted[qual] = names
        if label not in seen_decl:
            seen_decl.add(label)
            out.declarers.append(label)
        out.names.extend(n for n in names if n not in out.names)
    if not wanted:
        return out
    # class -> instances, in model order, each under a declarer that names its class
    found: dict[type, list[tuple[str, Any]]] = {}
    matched_names: set[tuple[str, str]] = set()
    for qual, module in modules:
        name = type(module).__name__
        for decl, names in wanted.items():
            inside = decl == "" and qual != "" or qual.startswith(decl + ".")
            if inside and name in names:
                matched_names.add((decl, name))
                found.setdefault(type(module), []).append((qual, module))
                break
    for decl, names in wanted.items():
        label = f"{type(unwrapped(model.get_submodule(decl))).__name__}.{ATTR}" if decl else f"{type(model).__name__}.{ATTR}"
        for n in names:
            if (decl, n) not in matched_names and (label, n) not in out.unmatched:
                out.unmatched.append((label, n))
    order = {n: i for i, n in enumerate(out.names)}
    classes = sorted(found, key=lambda c: order[c.__name__])  # stable: model order within a name
    outers = [q for c in classes for q, _ in found[c]]
    for cls in classes:
        mine = [(q, m) for q, m in found[cls] if not any(q.startswith(o + ".") for o in outers if o != q)]
        if not mine:
            outer = next(o for o in outers if found[cls][0][0].startswith(o + "."))
            outer_cls = next(type(m).__name__ for q, m in modules if q == outer)
            out.nested.append((cls.__name__, outer_cls))
            continue
        out.classes.append(cls)
        out.instances.append(mine)
    return out
