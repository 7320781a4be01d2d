"""SP112: ``logger.info(...)``/``logging.warning(...)`` inside a compiled function (a graph break)."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ..rule import COMPILE_NEEDLE, Invalid, Rule, Valid

#: The methods of ``logging.Logger`` that emit a record, which are also module-level functions
#: of ``logging`` (``logging.info``); Python docs, "logging — Logging facility for Python".
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})

#: Methods transformers adds to ``logging.Logger`` (transformers/utils/logging.py:
#: ``logging.Logger.warning_once = warning_once``...); a logger call only, not ``logging.<name>``.
TRANSFORMERS_METHODS = frozenset({"warning_once", "info_once", "warning_advice"})

#: Calls whose result is a logger: the standard library's and transformers' own helper
#: (``transformers.utils.logging.get_logger`` returns a ``logging.Logger``).
LOGGER_FACTORIES = frozenset({"logging.getLogger", "transformers.utils.logging.get_logger"})

#: The Dynamo config sets that name logging calls to skip while tracing (torch 2.13
#: torch/_dynamo/config.py: ``ignore_logger_methods`` is an alias of ``ignore_logging_functions``).
KNOBS = frozenset({"ignore_logger_methods", "ignore_logging_functions"})


class LoggingInCompiled(Rule):
    CODE = "SP112"
    NAME = "logging-in-compiled"
    SUMMARY = "`logger.info(...)` or `logging.warning(...)` inside a compiled function: a graph break"
    EXPLANATION = """\
Dynamo does not trace `logging.Logger` methods: a `logger.debug/info/warning/error/...` call in a
compiled function is a **graph break** (torch 2.13: "logging.Logger method not supported for
non-export cases", GB0291), and with `fullgraph=True` an `Unsupported` error at the first call.
The module-level functions (`logging.info(...)`) break as well (Dynamo inlines them into the
logging module and stops there). The break runs the log call eagerly between two graphs, every
call; a log line in a block's `forward` costs a break per layer.

The knob that removes the break is `torch._dynamo.config.ignore_logger_methods` (added by
pytorch#139403; torch 2.13 keeps it as an alias of its new name, `ignore_logging_functions`,
torch/_dynamo/config.py): set it where the program starts, before the first compiled call,

```python
torch._dynamo.config.ignore_logger_methods.add(logging.Logger.info)  # every logger's .info
torch._dynamo.config.ignore_logger_methods.add(logger.info)          # this logger only
torch._dynamo.config.ignore_logger_methods.add(logging.info)         # logging.info (torch >= 2.11)
```

A call in the set is **skipped** while tracing: no break, and no log record from compiled code
(the call runs when the function runs eager). Where the record matters, move the call out of the
compiled function or keep it under `if not torch.compiler.is_compiling():`. A method the set does
not name exactly still breaks: transformers' `logger.warning_once(...)` needs
`logging.Logger.warning_once` itself (adding `logging.Logger.warning` leaves the break; measured).
The rule does not report a call whose method this file already adds to the set.

A call counts as logging when it is `logging.<method>(...)` or `<name>.<method>(...)` on a name
(or `self.` attribute) bound in this file to `logging.getLogger(...)` or transformers'
`logging.get_logger(...)`; reachability is the other rules' (a compiled function, not an eager-only
branch). There is no safe fix: the knob changes what the program logs.

Source: torch 2.13 torch/_dynamo/config.py (`ignore_logging_functions`, `ignore_logger_methods`),
torch/_dynamo/variables/misc.py (`LoggingLoggerVariable.call_method`); measured on torch 2.13 with
`backend="eager"`: one graph break for a `logger.info` between two ops, none once
`logging.Logger.info` is in the set (tests/test_check_rules.py).
"""
    NEEDLES = (COMPILE_NEEDLE, r"\b(?:debug|info|warning|warn|error|exception|critical|fatal|log|warning_once|info_once|warning_advice)\s*\(")
    VALID = [
        Valid(
            """\
import logging

import torch

logger = logging.getLogger(__name__)

@torch.compile
def step(x):
    y = x * 2
    if not torch.compiler.is_compiling():
        logger.info("eager only")
    return y.relu()

logger.info("outside the compiled region")
""",
            note="a log call in an eager-only branch, and one outside the compiled region",
        ),
        Valid(
            """\
import logging

import torch

logger = logging.getLogger(__name__)
torch._dynamo.config.ignore_logger_methods.add(logging.Logger.info)

@torch.compile
def step(x):
    y = x * 2
    logger.info("skipped while compiled")
    return y.relu()
""",
            note="the method is already in the knob's set: no break (and no record from compiled code)",
        ),
        Valid(
            """\
import torch

@torch.compile
def step(x, log):
    log.info("an object the file does not bind to a logger")
    return x.relu()
""",
            note="a receiver not known to be a logger",
        ),
    ]
    INVALID = [
        Invalid(
            """\
import logging

import torch

logger = logging.getLogger(__name__)

@torch.compile
def step(x):
    y = x * 2
    logger.info("scaled %s", y.shape)
    return y.relu()
""",
            line=10,
        ),
        Invalid(
            """\
import logging

import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.log = logging.getLogger("block")

    def forward(self, x):
        self.log.debug("block input")
        return x.relu()

model = torch.compile(Block(), fullgraph=True)
""",
            line=11,
            note="a logger held by the module, under fullgraph=True (an error, not a break)",
        ),
        Invalid(
            """\
import logging

import torch

@torch.compile
def step(x):
    logging.warning("step")
    return x + 1
""",
            line=7,
            note="a module-level logging function",
        ),
        Invalid(
            """\
import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

@torch.compile
def step(x):
    logger.warning_once("deprecated argument")
    return x + 1
""",
            line=8,
            note="transformers' logger and its warning_once",
        ),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._ignored: set[str] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in LOG_METHODS | TRANSFORMERS_METHODS):
            return
        method = func.attr.value
        if method in LOG_METHODS and self.facts.qnames(func) & {f"logging.{method}"}:
            what, knob = f"logging.{method}()", f"logging.{method}"
            when = " (torch >= 2.11, where it aliases ignore_logging_functions)"
        elif self._is_logger(func.value, node):
            receiver = get_full_name_for_node(func.value) or "logger"
            what, knob = f"{receiver}.{method}()", f"logging.Logger.{method}"
            when = ""
        else:
            return
        traced = self.facts.traced_by(node)
        if traced is None or self._already_ignored(knob, get_full_name_for_node(func)):
            return
        fn, site = traced
        effect = ("an Unsupported error at the first call (fullgraph=True)" if site.fullgraph
                  else "a graph break (the call then runs eager between two graphs, every call)")
        self.report(
            node,
            f"{what} inside compiled `{fn.name.value}`: Dynamo does not trace logging calls, {effect}; "
            f"`torch._dynamo.config.ignore_logger_methods.add({knob})` where the program starts{when} skips "
            "it while tracing (no break, no record from compiled code), or move it out of the compiled "
            "function / under `if not torch.compiler.is_compiling():`",
        )

    def _is_logger(self, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """Whether ``expr`` (a name or ``self.attr``) is bound in this file to a logger factory call."""
        if not isinstance(expr, (cst.Name, cst.Attribute)):
            return False
        value = self.facts.bound_value(expr, at)
        return isinstance(value, cst.Call) and bool(self.facts.qnames(value.func) & LOGGER_FACTORIES)

    def _already_ignored(self, *names: str | None) -> bool:
        """Whether this file puts any of ``names`` (dotted, as written) into the knob's set."""
        if self._ignored is None:
            self._ignored = _ignored_names(self.facts.module)
        return any(n is not None and n in self._ignored for n in names)


def _ignored_names(module: cst.Module) -> set[str]:
    """Dotted names a module adds to ``ignore_logger_methods``/``ignore_logging_functions``:
    ``<knob>.add(x)``, ``<knob>.update({x, ...})``/``|= {...}`` and ``<knob> = {x, ...}``."""
    found: set[str] = set()

    def elements(expr: cst.BaseExpression) -> None:
        if isinstance(expr, (cst.Set, cst.List, cst.Tuple)):
            for el in expr.elements:
                elements(el.value)
        elif isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) in ("set", "frozenset") and expr.args:
            elements(expr.args[0].value)
        else:
            name = get_full_name_for_node(expr)
            if name is not None:
                found.add(name)

    def is_knob(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Attribute) and expr.attr.value in KNOBS

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and is_knob(func.value) and func.attr.value in ("add", "update"):
                for arg in node.args:
                    elements(arg.value)

        def visit_Assign(self, node: cst.Assign) -> None:
            if any(is_knob(t.target) for t in node.targets):
                elements(node.value)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if is_knob(node.target):
                elements(node.value)

    module.visit(Visitor())
    return found
