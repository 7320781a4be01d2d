"""``[tool.stackpart]`` in pyproject.toml: the plan for drift checks and default rule selection.

::

    [tool.stackpart]
    plan = "examples/gpt/plan.yaml"   # relative to pyproject.toml
    src = "examples/gpt/src"          # the root the plan's targets are relative to (default: the
                                      # folder that joined with a file the plan targets gives one
                                      # of the files checked, else pyproject.toml's folder)
    select = ["SP1"]                  # optional, as --select
    ignore = ["SP109"]                # optional, as --ignore
    project = false                   # optional, as --no-project (default true: read the
                                      # project for compiles reaching the checked files)

The file is found by walking up from the working directory (as ruff and black do); command-line
flags win over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StackpartError

KEYS = ("plan", "src", "select", "ignore", "project")


@dataclass
class CheckConfig:
    """The resolved configuration (paths absolute or relative to the working directory)."""

    plan: str | None = None
    src: str | None = None
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    path: str | None = None  # the pyproject.toml it came from
    root: str | None = None  # its folder: SRC where ``src`` is unset and the files checked name none
    plan_as_written: str | None = None  # ``plan``'s value as pyproject.toml writes it
    project: bool = True  # project-level reachability (rewriter.check.project)
    lines: dict[str, int] = field(default_factory=dict)  # each key's line in ``path`` (where found)


def _toml(path: Path) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise StackpartError(
                "reading [tool.stackpart] needs Python >= 3.11 or the 'tomli' package", path=str(path)
            ) from None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise StackpartError(f"not valid TOML: {exc}", path=str(path)) from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise StackpartError("not valid TOML: not UTF-8 text", path=str(path), line=line) from None
    except OSError as exc:
        raise StackpartError(f"cannot read: {exc.strerror}", path=str(path)) from None


def key_lines(text: str) -> dict[str, int]:
    """The 1-based line of each key set directly under the ``[tool.stackpart]`` header of
    pyproject.toml's ``text`` (``plan = ...``, ``"plan" = ...``), for errors at their line; keys set
    otherwise (a dotted ``tool.stackpart.plan`` key, an inline table) are not found and get none."""
    import re

    lines: dict[str, int] = {}
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            inside = re.fullmatch(r"\[\s*tool\s*\.\s*stackpart\s*\](\s*#.*)?", stripped) is not None
            continue
        m = re.match(r"""\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_-]+))\s*=""", line) if inside else None
        if m is not None:
            lines.setdefault(next(g for g in m.groups() if g is not None), number)
    return lines


def find_pyproject(start: Path) -> Path | None:
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path | None = None) -> CheckConfig:
    """The ``[tool.stackpart]`` table of the nearest pyproject.toml above ``start`` (default: cwd).

    Raises:
        StackpartError: invalid TOML, an unknown key (with near names), or a value of the wrong type.
    """
    from ..errors import near_names

    pyproject = find_pyproject((start or Path.cwd()).resolve())
    if pyproject is None:
        return CheckConfig()
    where = str(pyproject)
    tool = _toml(pyproject).get("tool", {})
    if not isinstance(tool, dict):
        raise StackpartError("`tool` must be a table ([tool.stackpart] is read from it)", path=where)
    table = tool.get("stackpart")
    if table is None:
        return CheckConfig()
    if not isinstance(table, dict):
        raise StackpartError("[tool.stackpart] must be a table (plan = ..., src = ..., ...)", path=where)
    try:
        lines = key_lines(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):  # read just above: _toml said what was wrong
        lines = {}
    for key in table:
        if key not in KEYS:
            raise StackpartError(
                f"[tool.stackpart] has unknown key {key!r}; expected one of {', '.join(KEYS)}",
                path=where, line=lines.get(key),
                hint=near_names(key, KEYS),
            )
    root = pyproject.parent
    config = CheckConfig(path=where, root=str(root), lines=lines)
    for key in ("plan", "src"):
        if key in table:
            if not isinstance(table[key], str):
                raise StackpartError(f"[tool.stackpart] {key} must be a string path", path=where, line=lines.get(key))
            setattr(config, key, str(root / table[key]))
    config.plan_as_written = table.get("plan")
    for key in ("select", "ignore"):
        if key in table:
            value = table[key]
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise StackpartError(f"[tool.stackpart] {key} must be a list of rule codes", path=where, line=lines.get(key))
            from .runner import select_rules

            try:  # a code no rule has is named with the file it is in
                select_rules(value)
            except StackpartError as exc:
                raise StackpartError(f"[tool.stackpart] {key}: {exc.message}", path=where, line=lines.get(key),
                                     hint=exc.hint) from None
            setattr(config, key, value)
    if "project" in table:
        if not isinstance(table["project"], bool):
            raise StackpartError("[tool.stackpart] project must be true or false", path=where, line=lines.get("project"))
        config.project = table["project"]
    return config


def check_config_plan(config: CheckConfig) -> None:
    """Where the plan comes from ``[tool.stackpart] plan``: it is a file.

    Raises:
        StackpartError: at pyproject.toml's ``plan =`` line, with a near name.
    """
    from ..errors import near_path

    if config.plan is not None and not Path(config.plan).is_file():
        raise StackpartError(
            f"[tool.stackpart] plan: {config.plan_as_written} is not a file (read relative to pyproject.toml's "
            f"folder, {config.root})", path=config.path, line=config.lines.get("plan"),
            hint=near_path(config.plan, config.plan_as_written, dirs=False))
