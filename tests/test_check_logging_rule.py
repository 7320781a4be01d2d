"""SP112's claims, checked against torch itself (CPU, ``backend="eager"``): each flagged example
breaks the graph where the rule says (an error under ``fullgraph=True``), the knob the message
names removes the break, and a call in the knob's set is skipped, not run, in compiled code."""

from __future__ import annotations

import logging

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES
from rewriter.check.rules.sp112_logging_in_compiled import LoggingInCompiled

torch = pytest.importorskip("torch")
from torch._dynamo.utils import counters  # noqa: E402


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run(code: str, monkeypatch, knob: set | None = None) -> tuple[int, list[str], list[str]]:
    """Execute an example with every ``torch.compile`` on the eager backend, call what it
    compiled once, and return (graph breaks counted by Dynamo, their reasons, log records)."""
    real = torch.compile
    compiled = []

    def eager_compile(model=None, **kwargs):
        kwargs["backend"] = "eager"
        if model is None:
            return lambda fn: eager_compile(fn, **kwargs)
        out = real(model, **kwargs)
        compiled.append(out)
        return out

    monkeypatch.setattr(torch, "compile", eager_compile)
    records = Records()
    root = logging.getLogger()
    root.addHandler(records)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    torch._dynamo.reset()
    counters.clear()
    try:
        namespace: dict = {"__name__": "example", "logging": logging}
        with torch._dynamo.config.patch(ignore_logger_methods=set(knob or ())):
            exec(compile(code, "example.py", "exec"), namespace)
            records.messages.clear()  # only what the compiled call logs
            compiled[-1](torch.ones(2, 3))
        reasons = list(counters["graph_break"])
        return sum(counters["graph_break"].values()), reasons, records.messages
    finally:
        root.removeHandler(records)
        root.setLevel(old_level)
        torch._dynamo.reset()


def test_a_logger_method_breaks_the_graph_and_the_knob_removes_the_break(monkeypatch):
    example = LoggingInCompiled.INVALID[0]
    [finding] = check_text(example.code, "example.py", [LoggingInCompiled]).findings
    assert "ignore_logger_methods.add(logging.Logger.info)" in finding.message
    breaks, reasons, messages = run(example.code, monkeypatch)
    assert breaks == 1 and "logging.Logger method" in reasons[0]
    assert messages == ["scaled torch.Size([2, 3])"], "without the knob the record is emitted (eagerly)"
    breaks, reasons, messages = run(example.code, monkeypatch, knob={logging.Logger.info})
    assert (breaks, messages) == (0, []), "in the set: no break, and the call is skipped"


def test_the_knob_must_name_the_method_called(monkeypatch):
    breaks, _, _ = run(LoggingInCompiled.INVALID[0].code, monkeypatch, knob={logging.Logger.warning})
    assert breaks == 1


def test_a_logger_under_fullgraph_is_an_error(monkeypatch):
    example = LoggingInCompiled.INVALID[1]
    [finding] = check_text(example.code, "example.py", [LoggingInCompiled]).findings
    assert "Unsupported" in finding.message and "logging.Logger.debug" in finding.message
    with pytest.raises(torch._dynamo.exc.Unsupported, match="logging.Logger method"):
        run(example.code, monkeypatch)
    assert run(example.code, monkeypatch, knob={logging.Logger.debug})[0] == 0


def test_a_module_level_logging_function_breaks_and_its_knob_entry_holds(monkeypatch):
    example = LoggingInCompiled.INVALID[2]
    [finding] = check_text(example.code, "example.py", [LoggingInCompiled]).findings
    assert "ignore_logger_methods.add(logging.warning)" in finding.message
    assert run(example.code, monkeypatch)[0] == 1
    breaks, _, messages = run(example.code, monkeypatch, knob={logging.warning})
    assert (breaks, messages) == (0, [])


def test_the_valid_examples_run_without_a_break(monkeypatch):
    for example in LoggingInCompiled.VALID[:2]:
        assert run(example.code, monkeypatch)[0] == 0


def test_print_stays_sp103s_and_logging_is_sp112s_only():
    code = LoggingInCompiled.INVALID[0].code
    assert [f.code for f in check_text(code, "example.py", ALL_RULES).findings] == ["SP112"]


def test_transformers_warning_once_needs_its_own_entry(monkeypatch):
    pytest.importorskip("transformers")
    example = LoggingInCompiled.INVALID[3]
    [finding] = check_text(example.code, "example.py", [LoggingInCompiled]).findings
    assert "ignore_logger_methods.add(logging.Logger.warning_once)" in finding.message
    assert run(example.code, monkeypatch)[0] == 1
    assert run(example.code, monkeypatch, knob={logging.Logger.warning})[0] == 1
    assert run(example.code, monkeypatch, knob={logging.Logger.warning_once})[0] == 0
