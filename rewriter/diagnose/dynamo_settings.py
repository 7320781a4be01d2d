"""The program's own ``torch._dynamo.config`` settings, as it ran: each knob whose value differs
from torch's default after setup built the model and ran a step at every harness shape (the
program's imports, its model function and its first calls set them, a computed value included,
which no reading of the source sees). The ladder's rungs run in this process, so these are also
the settings their compiles ran under; stackpart itself sets no knob outside a ``config.patch``.

Read from the config module torch installs over ``torch/_dynamo/config.py``
(``torch.utils._config_module``): each entry's ``default`` (torch >= 2.6; ``_default`` before),
an alias (``cache_size_limit`` for ``recompile_limit``, torch >= 2.7) read through the knob it
names. What a knob changes for the report's symptoms is said where stackpart knows it
(:data:`EFFECTS`, from the comments in torch/_dynamo/config.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: What a knob changes for the symptoms diagnose measures, where it differs from torch's default
#: (torch/_dynamo/config.py's own comments on each).
EFFECTS = {
    "suppress_errors": "a compile error in compiled code does not raise: Dynamo logs it and runs that frame eager, "
                       "so a failed compile shows only as fewer graphs (a silent fallback to eager)",
    "recompile_limit": "a code object keeps compiling new graphs up to this many before its later calls run eager: "
                       "recompiles past torch's default limit go on compiling",
    "cache_size_limit": "a code object keeps compiling new graphs up to this many before its later calls run eager: "
                        "recompiles past torch's default limit go on compiling",
    "accumulated_recompile_limit": "the graphs all code objects together may compile before Dynamo stops compiling",
    "capture_scalar_outputs": "Tensor.item()/.tolist() stay in the graph as unbacked symbols instead of breaking it",
    "capture_dynamic_output_shape_ops": "nonzero/unique/boolean-mask ops stay in the graph instead of breaking it",
    "automatic_dynamic_shapes": "a dim that changes is not made dynamic after its first recompile: every new size "
                                "recompiles (one graph per size)",
    "assume_static_by_default": "dims are dynamic from the first compile, not after a recompile",
    "allow_unspec_int_on_nn_module": "int attributes of nn.Modules are not guarded on their value",
    "force_parameter_static_shapes": "parameter shapes are guarded as static",
    "error_on_recompile": "a recompile raises instead of compiling",
    "fail_on_recompile_limit_hit": "reaching the recompile limit raises instead of running eager",
}

#: The knob of Dynamo's per-code-object recompile limit, by torch version (``cache_size_limit``
#: before 2.7, an alias of ``recompile_limit`` since).
LIMIT_KEYS = ("recompile_limit", "cache_size_limit")


@dataclass(frozen=True)
class Setting:
    """One knob of ``torch._dynamo.config`` the run set away from torch's default.

    Attributes:
        name: the knob (``suppress_errors``).
        value: its value in the run, as read (a repr where it is not a JSON scalar).
        default: torch's default.
    """

    name: str
    value: Any
    default: Any
    #: ``VAR=value`` of the environment variable that set the knob at torch's import
    #: (:func:`environment_settings`), None for a knob the program set
    variable: str | None = None

    @property
    def text(self) -> str:
        """``torch._dynamo.config.NAME = VALUE (torch's default: DEFAULT)``, and what it changes
        where :data:`EFFECTS` says it."""
        effect = EFFECTS.get(self.name)
        alias = " (cache_size_limit before torch 2.7)" if self.name == "recompile_limit" else ""
        by = f"; set by {self.variable} in the environment" if self.variable is not None else ""
        return (f"torch._dynamo.config.{self.name}{alias} = {self.value!r} (torch's default: {self.default!r}{by})"
                + (f": {effect}" if effect else ""))

    def to_json(self) -> dict[str, Any]:
        """report.json's form: ``name``, ``value``, ``default``, ``effect`` (None where not known) and ``text``."""
        return {"name": self.name, "value": self.value, "default": self.default, "effect": EFFECTS.get(self.name),
                "text": self.text, **({"variable": self.variable} if self.variable is not None else {})}


def _scalar(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)[:120]


def _defaults(config: Any) -> dict[str, Any]:
    """``name -> torch's default`` of every knob that is not an alias, hidden or deprecated: the
    entries' ``default`` (torch >= 2.6), else the module's ``_default`` dict."""
    from torch.utils import _config_module

    unset = getattr(_config_module, "_UNSET_SENTINEL", None)
    entries = getattr(config, "_config", None) or {}
    if entries and all(hasattr(e, "default") for e in entries.values()):
        return {name: e.default for name, e in entries.items()
                if not (getattr(e, "alias", None) or getattr(e, "hide", False) or getattr(e, "deprecated", False))
                and e.default is not unset}
    return dict(getattr(config, "_default", None) or {})


def read() -> list[Setting]:
    """The knobs of ``torch._dynamo.config`` whose value in this process differs from torch's
    default, by name. Raises nothing: a config module this reading does not know gives ``[]``."""
    try:
        import torch._dynamo.config as config

        defaults = _defaults(config)
        out = []
        for name, default in sorted(defaults.items()):
            value = getattr(config, name)
            if value != default:
                out.append(Setting(name, _scalar(value), _scalar(default)))
        return out
    except Exception:  # noqa: BLE001 - a report-only reading never stops the diagnosis
        return []


#: The prefixes of the environment variables torch's compile stack reads at import
#: (torch/_dynamo/config.py, torch/_inductor/config.py, torch/compiler/config.py).
ENV_PREFIXES = ("TORCHDYNAMO_", "TORCH_DYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_")

#: The knobs that change what the ladder's counts mean (:data:`COUNT_KNOBS`) and that torch sets
#: from an environment variable at import: ``knob -> (variable, torch's default without it)``
#: (torch/_dynamo/config.py: ``suppress_errors = bool(os.environ.get("TORCHDYNAMO_SUPPRESS_ERRORS",
#: False))``, ``capture_scalar_outputs = os.environ.get("TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS") == "1"``,
#: ``automatic_dynamic_shapes = os.environ.get("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES", "1") == "1"``).
ENV_KNOBS = {"suppress_errors": ("TORCHDYNAMO_SUPPRESS_ERRORS", False),
             "capture_scalar_outputs": ("TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", False),
             "automatic_dynamic_shapes": ("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES", True)}


def environment(environ: Any = None) -> dict[str, str]:
    """``name -> value`` of the environment variables of this process that torch's compile stack
    reads (:data:`ENV_PREFIXES`), sorted by name. torch turns such a variable into the knob's
    default when it imports (``suppress_errors = bool(os.environ.get(
    "TORCHDYNAMO_SUPPRESS_ERRORS", False))``), so :func:`read` cannot tell that knob from torch's
    own default; the report lists the variables beside the knobs instead, and
    :func:`environment_settings` reads the knobs :data:`ENV_KNOBS` names. ``environ``: a mapping
    to read (``os.environ`` where None)."""
    import os

    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES)}


def environment_settings(environ: Any = None) -> list[Setting]:
    """The knobs of :data:`ENV_KNOBS` an environment variable of this process set away from
    torch's default: each with its value in this process (read from ``torch._dynamo.config``,
    which torch built from that environment when it was imported), torch's default without the
    variable, and the variable as ``VAR=value`` (:attr:`Setting.variable`). :func:`read` cannot
    see these (the variable made its value the knob's default). ``environ``: the variables to
    read (``os.environ`` where None); the knobs' values are always this process's. Raises nothing:
    a config module this reading does not know gives ``[]``."""
    env = environment(environ)
    try:
        import torch._dynamo.config as config

        out = []
        for name, (variable, default) in ENV_KNOBS.items():
            if variable in env and hasattr(config, name):
                value = getattr(config, name)
                if value != default:
                    out.append(Setting(name, _scalar(value), default, f"{variable}={env[variable]}"))
        return out
    except Exception:  # noqa: BLE001 - a report-only reading never stops the diagnosis
        return []


#: The knobs whose setting changes what the ladder's counts mean (graph breaks, recompiles, graphs,
#: frames run eager): the terminal summary names each one the program set (:func:`counts_line`).
COUNT_KNOBS = (*LIMIT_KEYS, "capture_scalar_outputs", "suppress_errors", "automatic_dynamic_shapes",
               "assume_static_by_default")


def counts_line(settings: list[dict[str, Any]] | None, environment: list[dict[str, Any]] | None = None) -> str | None:
    """The terminal summary's line on the :data:`COUNT_KNOBS` the program set (report.json's
    ``meta.dynamo_config`` form, :meth:`Setting.to_json`) or an environment variable set
    (``environment``: ``meta.dynamo_config_environment``, :func:`environment_settings`): each knob
    with its value and torch's default, and the variable where one set it, in one line; None where
    none of them is set. A knob the program set itself is said once, as the program set it."""
    own = [s for s in settings or () if s.get("name") in COUNT_KNOBS]
    named = {s["name"] for s in own}
    said = [f"{s['name']} = {s['value']!r} (torch's default: {s['default']!r})" for s in own]
    said += [f"{s['name']} = {s['value']!r} (set by {s['variable']} in the environment; torch's default: {s['default']!r})"
             for s in environment or () if s.get("name") in COUNT_KNOBS and s["name"] not in named]
    if not said:
        return None
    return (f"the program's torch._dynamo.config: {'; '.join(said)}: the ladder's graph breaks and recompiles are "
            f"counted under {'this setting' if len(said) == 1 else 'these settings'} (report.md's \"The program's "
            "torch._dynamo.config\" says what each changes)")


def limit_raised(settings: list[Setting] | None) -> Setting | None:
    """The recompile-limit setting where the run raised it above torch's default, else None."""
    for s in settings or ():
        if s.name in LIMIT_KEYS and isinstance(s.value, int) and isinstance(s.default, int) and s.value > s.default:
            return s
    return None


def under(settings: list[Setting] | None, names: tuple[str, ...]) -> str:
    """``; counted under the program's torch._dynamo.config.X = v (...): what it changes`` for each
    of ``names`` the run set, for a rung's verdict whose counts those knobs change; empty where
    it set none of them."""
    said = [s.text for s in settings or () if s.name in names]
    return f"; counted under the program's {'; and '.join(said)}" if said else ""


def past_limit(recompiles: list[Any], default: int) -> list[int]:
    """Indices into ``recompiles`` (Dynamo's recompile log, :class:`.dynamo_log.Recompile`, in
    order) of the recompiles past ``default`` graphs of one code object (its function, file and
    line): the n-th recompile of a code object is its (n + 1)-th graph, which torch's default
    limit would not have compiled."""
    seen: dict[tuple[str, str, int], int] = {}
    out = []
    for i, rc in enumerate(recompiles):
        key = (rc.function, rc.file, rc.line)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] + 1 > default:
            out.append(i)
    return out
