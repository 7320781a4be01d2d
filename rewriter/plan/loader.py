"""Reading a plan file: the YAML text to a validated :class:`~rewriter.plan.schema.Plan`, with every
error at the plan's ``file:line:col``.

:func:`load_plan` reads the file (a regular file of at most :data:`MAX_PLAN_BYTES`, UTF-8);
:func:`parse_plan` gates the YAML (:mod:`rewriter.plan.yaml_gates`), validates it in pydantic's
strict mode against the schema, turns pydantic's errors into the plan's one-line messages
(:mod:`rewriter.plan.messages`), then checks what the schema alone cannot: a library target needs a
``site:``, and a ``dynamo_config`` key must exist in the torch in use.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import StackpartError, near_path
from .messages import errors_at
from .schema import DYNAMO_CONFIG_SINCE, DynamoConfigAction, Plan
from .yaml_gates import gate_yaml, no_duplicate_keys, no_long_numbers, no_merge_keys, no_yaml11_literals

#: The largest plan file read, in bytes (a 10,000-action plan is about 1.5 MB).
MAX_PLAN_BYTES = 16 * 1024 * 1024


@dataclass
class LoadedPlan:
    """A validated plan plus where each action was written (for errors that need the source).

    Attributes:
        plan: the validated plan.
        path: the plan file as given on the command line.
        action_lines: 1-based line of each action's mapping in the YAML, parallel to
            ``plan.actions``.
        site_line: the line of ``site:``, when the plan has one.
        marks: every YAML path (``("harness", "shapes", 0, "batch")``) -> its 1-based (line,
            col), for errors about a field found after loading (validate's harness check).
    """

    plan: Plan
    path: str
    action_lines: list[int] = field(default_factory=list)
    #: 1-based line of ``site:`` (None without one).
    site_line: int | None = None
    marks: dict[tuple, tuple[int, int]] = field(default_factory=dict)

    def mark_of(self, *keys: object) -> tuple[int | None, int | None]:
        """The (line, col) of the deepest of ``keys``' prefixes the plan spells out
        (``harness.model`` when written, else ``harness:``), or (None, None)."""
        for n in range(len(keys), 0, -1):
            if keys[:n] in self.marks:
                return self.marks[keys[:n]]
        return None, None

    def where(self, index: int) -> StackpartError:
        """An error template pointing at action ``index`` (fill in ``message``)."""
        line = self.action_lines[index] if index < len(self.action_lines) else None
        return StackpartError("", path=self.path, line=line)

    def error(self, index: int, message: str, hint: str | None = None) -> StackpartError:
        """A :class:`StackpartError` at action ``index``: ``plan.yaml:LINE: actions[i] (...)``."""
        err = self.where(index)
        action = self.plan.actions[index]
        err.message = f"actions[{index}] ({action.action} {action.target}): {message}"
        err.hint = hint
        return err


def _marks(node: yaml.Node, loc: tuple = ()) -> dict[tuple, tuple[int, int]]:
    """Map every path in the YAML tree to the 1-based (line, col) of its node (keys for mappings)."""
    out = {loc: (node.start_mark.line + 1, node.start_mark.column + 1)}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out.update(_marks(value_node, loc + (key,)))
            out[loc + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_marks(item, loc + (i,)))
    return out


def parse_plan(text: str, path: str = "plan.yaml") -> LoadedPlan:
    """Parse and validate plan text.

    Args:
        text: the YAML document.
        path: the plan's name as the user wrote it, used in error messages.

    Values are checked in pydantic's strict mode, against the types YAML itself gives: a boolean
    field takes ``true``/``false``, not ``1`` or ``'yes'``; an integer field takes no ``'8'``,
    ``8.0`` or ``true``. Before that, a plain scalar that PyYAML (YAML 1.1) reads as a boolean or
    a number and YAML 1.2 otherwise is refused (:func:`~rewriter.plan.yaml_gates.no_yaml11_literals`:
    ``1:30``, ``010``, ``0b11``, ``1_000``, ``yes``/``no``/``on``/``off``), so the plan means the
    same to every tool.

    Raises:
        StackpartError: malformed YAML, an unknown action or field (with near names), a wrong
            type or a choice not among a field's (``field: expected X, got Y``, with the near
            choices), a missing field, a YAML 1.1-only literal — at the file, line and column of
            the offending key or value.
    """
    root, data = _compose(text, path)
    _check_tree(root, data, path)
    marks = _marks(root)
    plan = _validate(data, marks, path)
    lines = [marks.get(("actions", i), (1, 1))[0] for i in range(len(plan.actions))]
    _check_site_given(plan, path, lines)
    _check_dynamo_config(plan, path, marks, lines)
    site_line = marks[("site",)][0] if ("site",) in marks else None
    return LoadedPlan(plan=plan, path=path, action_lines=lines, site_line=site_line, marks=marks)


def _compose(text: str, path: str) -> tuple[yaml.Node | None, object]:
    """The YAML tree of ``text`` and the values built from it, after the gates that must run before
    PyYAML composes (:func:`~rewriter.plan.yaml_gates.gate_yaml`) or constructs
    (:func:`~rewriter.plan.yaml_gates.no_long_numbers`, :func:`~rewriter.plan.yaml_gates.no_merge_keys`) anything.

    Raises:
        StackpartError: malformed YAML or a character YAML forbids, at its line and column; or a
            gate's refusal.
    """
    try:
        gate_yaml(text, path)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        no_long_numbers(root, path)  # before the constructor turns them into ints
        no_merge_keys(root, path)  # before the constructor merges them away
        # the values built from the tree just composed (yaml.safe_load would parse the text a
        # third time: a third of the load of a large plan)
        data = yaml.SafeLoader("").construct_document(root) if root is not None else None
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids (NUL, most C0 controls): the reader knows only its offset.
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise StackpartError(
            f"character #x{exc.character:04x} is not allowed in YAML (PyYAML accepts printable characters only)",
            path=path, line=line, col=col, hint="remove it; a plan is plain UTF-8 text",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise StackpartError(
            f"malformed YAML: {problem}",
            path=path,
            line=mark.line + 1 if mark else None,
            col=mark.column + 1 if mark else None,
        ) from None
    return root, data


def _check_tree(root: yaml.Node | None, data: object, path: str) -> None:
    """Refuse a document that is no mapping, a repeated key, and a plain scalar YAML 1.1 and 1.2
    read differently (:mod:`rewriter.plan.yaml_gates`), before anything is validated.

    Raises:
        StackpartError: at line 1 for a document that is no mapping, else at the key or scalar.
    """
    if root is None or not isinstance(data, dict):
        raise StackpartError(
            "expected a mapping with 'version: 1' and 'actions:'", path=path, line=1
        )
    no_duplicate_keys(root, path)
    no_yaml11_literals(root, path)


def _validate(data: object, marks: dict[tuple, tuple[int, int]], path: str) -> Plan:
    """``data`` as a :class:`Plan`, in pydantic's strict mode: YAML's own types, no ``1`` for
    ``true``, no ``'8'`` for ``8``.

    Raises:
        StackpartError: the first problem at its line and column, the others in its ``also``
            (:func:`rewriter.plan.messages.errors_at`).
    """
    try:
        return Plan.model_validate(data, strict=True)
    except ValidationError as exc:
        raise errors_at(exc, marks, path) from None


def _check_site_given(plan: Plan, path: str, lines: list[int]) -> None:
    """Refuse an action on an installed library's target in a plan without ``site:`` (nothing
    would apply it).

    Raises:
        StackpartError: at the first such action's line.
    """
    for i, action in enumerate(plan.actions):
        if action.library and plan.site is None:
            raise StackpartError(
                f"actions[{i}] ({action.action} {action.target}) targets an installed library, and "
                "the plan has no 'site:'",
                path=path, line=lines[i],
                hint="add 'site: file.py::func', the function under SRC that returns the model "
                "(stackpart applies the library actions to what it returns)",
            )


def _check_dynamo_config(plan: Plan, path: str, marks: dict[tuple, tuple[int, int]], lines: list[int]) -> None:
    """Refuse a ``dynamo_config`` key the torch in use does not have (:func:`dynamo_config_names`;
    nothing is checked where torch cannot be found).

    Raises:
        StackpartError: at the key's line: ``actions[i].settings.<key>``, the torch version, and
            the first torch that has the key (:data:`~rewriter.plan.schema.DYNAMO_CONFIG_SINCE`).
    """
    wanted = [(i, a) for i, a in enumerate(plan.actions) if isinstance(a, DynamoConfigAction)]
    if not wanted:
        return
    found = dynamo_config_names()
    if found is None:
        return
    version, names = found
    for i, action in wanted:
        for key, _ in action.settings.items():
            if key in names:
                continue
            line, col = marks.get(("actions", i, "settings", key), (lines[i], None))
            raise StackpartError(
                f"actions[{i}].settings.{key}: expected a key of torch._dynamo.config; the torch in use "
                f"({version or 'unknown version'}) has no {key!r}",
                path=path, line=line, col=col,
                # the key is one the plan allows (DYNAMO_CONFIG_KEYS), so a near torch name would be one it refuses
                hint=f"torch >= {DYNAMO_CONFIG_SINCE.get(key, '2.6')} has it: upgrade torch, or drop the setting",
            )


def _read_plan_bytes(path: Path) -> bytes:
    """A plan file's bytes through the guarded read of :func:`rewriter.source.read_bytes`: a
    regular file only (a FIFO or device would block or never end), at most :data:`MAX_PLAN_BYTES`.

    Raises:
        StackpartError: missing, unreadable, not a regular file, or too large.
    """
    from ..source import read_bytes

    try:
        return read_bytes(path, str(path), limit=MAX_PLAN_BYTES)[0]
    except StackpartError as exc:  # "skipped:" is check's word for a file it passes over
        why = exc.message.removeprefix("skipped: ").removeprefix("cannot read: ")
        missing = not os.path.lexists(path)
        raise StackpartError(f"cannot read plan: {why}", path=str(path), hint=near_path(path) if missing else None) from None


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan file (see :func:`parse_plan`).

    Raises:
        StackpartError: the file cannot be read or decoded, or :func:`parse_plan` fails.
    """
    name = str(path)
    try:
        data = _read_plan_bytes(Path(path))
        text = data.decode("utf-8-sig")
    except OSError as exc:
        raise StackpartError(f"cannot read plan: {exc.strerror}", path=name) from None
    except UnicodeDecodeError as exc:
        # exc.start counts from after a BOM, which utf-8-sig strips first.
        start = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        col = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise StackpartError(
            f"plan is not UTF-8 (byte {start}: {data[start:start + 1]!r})", path=name, line=line, col=col,
            hint="save it as UTF-8",
        ) from None
    return parse_plan(text, name)


def report_dir_for(plan_path: str | Path, base: str) -> Path:
    """``<plan dir>/<base>`` for ``plan.yaml``, ``<plan dir>/<base>-<stem>`` for any other plan
    name, so two plans in one folder never overwrite each other's report (diagnose's and
    validate's default report folders)."""
    path = Path(plan_path)
    return path.parent / (base if path.name == "plan.yaml" else f"{base}-{path.stem}")


def dynamo_config_names() -> tuple[str | None, frozenset[str]] | None:
    """``(torch version, names assigned at the top level of torch/_dynamo/config.py)`` of the torch
    this Python would import, read from its source without importing torch (``check`` and
    ``rewrite`` never import it); None where torch cannot be found or its config file cannot be
    read (the whitelist alone then decides).

    Source: torch/_dynamo/config.py defines each knob as a module-level assignment
    (``capture_scalar_outputs = os.environ.get(...)``), which ``install_config_module`` turns into
    the attributes of ``torch._dynamo.config``.
    """
    return _dynamo_config_names()


@functools.lru_cache(maxsize=1)
def _dynamo_config_names() -> tuple[str | None, frozenset[str]] | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return _config_names(Path(spec.origin).parent)


def _config_names(root: Path) -> tuple[str | None, frozenset[str]] | None:
    """``(version, config names)`` of the torch package at ``root``: the names its
    ``_dynamo/config.py`` assigns at module scope, as parsed by the definitions reader of
    :mod:`rewriter.library_targets` (so a name in a comment, docstring or string is none); None
    where that file cannot be read or parsed."""
    from ..library_targets import definitions

    try:
        defs, _ = definitions(root / "_dynamo" / "config.py")
    except (OSError, SyntaxError, ValueError):
        return None
    names = frozenset(name for name, kind in defs.items() if kind == "value")
    try:
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", (root / "version.py").read_text(encoding="utf-8"), flags=re.M)
    except OSError:
        found = None
    return (found.group(1) if found else None), names
