"""The fullgraph rules' predictions, checked against torch itself (CPU, ``backend="eager"``).

SP110 and SP111 say that their flagged code raises a given error at the first call of a
``fullgraph=True`` region; each INVALID example is run under torch and must raise exactly that
(class and text), must run once ``fullgraph=True`` is dropped (the error is the fullgraph one),
and each VALID example must run. SP104's fullgraph message is checked the same way, and so are
the claims the rules' pages make about what torch accepts (``capture_scalar_outputs``, sizes,
``assert``, a 0-d int64 argument).
"""

from __future__ import annotations

import textwrap

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES
from rewriter.check.rules.sp104_data_dependent_branch import DataDependentBranch
from rewriter.check.rules.sp110_fullgraph_scalar_branch import FullgraphScalarBranch
from rewriter.check.rules.sp111_fullgraph_scalar_loop_bound import FullgraphScalarLoopBound

torch = pytest.importorskip("torch")

# what each rule predicts torch raises: exception class, text of its message
PREDICTED = {
    "SP110": (torch._dynamo.exc.UserError, "Could not guard on data-dependent expression"),
    "SP111": (torch._dynamo.exc.UserError, "Could not extract specialized integer from data-dependent expression"),
}
RULES = [FullgraphScalarBranch, FullgraphScalarLoopBound]
INVALID = [pytest.param(r, ex, id=f"{r.CODE}-invalid-{i}") for r in RULES for i, ex in enumerate(r.INVALID)]
VALID = [pytest.param(r, ex, id=f"{r.CODE}-valid-{i}") for r in RULES for i, ex in enumerate(r.VALID)]


def _input():
    return torch.tensor([[1.0, -2.0, 3.0, 4.0], [0.5, 0.5, -1.0, 2.0]])


def run_example(code: str, monkeypatch, *args):
    """Execute an example with every ``torch.compile`` on the eager backend and call its entry:
    an ``nn.Module`` class it defines (instantiated), else the last thing it compiled."""
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
    torch._dynamo.reset()
    namespace: dict = {"__name__": "example"}
    exec(compile(code, "example.py", "exec"), namespace)
    modules = [v for v in namespace.values()
               if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == "example"]
    entry = modules[0]() if modules else compiled[-1]
    try:
        return entry(*(args or (_input(),)))
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_invalid_example_raises_the_predicted_error(rule, example, monkeypatch):
    error, text = PREDICTED[rule.CODE]
    [finding] = [f for f in check_text(example.code, "example.py", [rule]).findings]
    assert error.__name__ in finding.message and text in finding.message, "the message names the error"
    with pytest.raises(error, match=text):
        run_example(example.code, monkeypatch)


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_invalid_example_runs_without_fullgraph(rule, example, monkeypatch):
    """The error is fullgraph's: the same code without it runs (a graph break, SP103's finding)."""
    assert "fullgraph=True" in example.code
    without = example.code.replace("fullgraph=True", "fullgraph=False")
    assert check_text(without, "example.py", [rule]).findings == []
    run_example(without, monkeypatch)
    if ".item()" in without or ".tolist()" in without:
        assert "SP103" in {f.code for f in check_text(without, "example.py", ALL_RULES).findings}


@pytest.mark.parametrize(("rule", "example"), VALID)
def test_valid_example_runs(rule, example, monkeypatch):
    assert check_text(example.code, "example.py", [rule]).findings == []
    run_example(example.code, monkeypatch)


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_one_finding_per_line_across_all_rules(rule, example):
    """SP103 is silent in fullgraph regions and SP104 skips reads: no double report."""
    found = [f.code for f in check_text(example.code, "example.py", ALL_RULES).findings if f.line == example.line]
    assert found == [rule.CODE]


def test_sp104_fullgraph_message_names_the_error_torch_raises(monkeypatch):
    [example] = [ex for ex in DataDependentBranch.INVALID if "fullgraph=True" in ex.code]
    [finding] = check_text(example.code, "example.py", [DataDependentBranch]).findings
    assert "torch._dynamo.exc.Unsupported" in finding.message and "Data-dependent branching" in finding.message
    assert "a graph break and a device sync" not in finding.message
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Data-dependent branching"):
        run_example(example.code, monkeypatch, torch.ones(3), torch.tensor(False))
    found = [f.code for f in check_text(example.code, "example.py", ALL_RULES).findings if f.line == example.line]
    assert found == ["SP104"]
    without = DataDependentBranch.INVALID[0]
    [finding] = check_text(without.code, "example.py", [DataDependentBranch]).findings
    assert "a graph break and a device sync" in finding.message and "fullgraph" not in finding.message


# --- the claims on the rules' pages --------------------------------------------------------------

def _fullgraph(fn, *args, **config):
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(**config):
            return torch.compile(fn, backend="eager", fullgraph=True)(*args)
    finally:
        torch._dynamo.reset()


def test_capture_scalar_outputs_is_implied_by_fullgraph_and_does_not_fix_a_branch(monkeypatch):
    from torch._dynamo.utils import counters

    def arithmetic(x):
        n = x.sum().item()
        return x / n

    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(capture_scalar_outputs=False):
        torch.compile(arithmetic, backend="eager", fullgraph=True)(_input())
        assert int(counters["stats"]["unique_graphs"]) == 1
        torch._dynamo.reset()
        reasons = torch._dynamo.explain(arithmetic)(_input()).break_reasons
        assert any(r.graph_break for r in reasons), "without fullgraph the .item() is a break"
    torch._dynamo.reset()

    def branch(x):
        if x.sum().item() > 0:
            return x
        return -x

    with pytest.raises(torch._dynamo.exc.UserError, match="Could not guard on data-dependent expression"):
        _fullgraph(branch, _input(), capture_scalar_outputs=True)


def test_item_of_a_0d_int64_argument_is_specialized_not_an_error():
    """Why SP110 does not report ``arg.item()``: a 0-d int64 argument compiles (guarded on its
    value), one of another dtype raises; without dtypes the rule cannot tell them apart."""
    code = textwrap.dedent(
        """\
        import torch

        @torch.compile(fullgraph=True)
        def f(x, n):
            if n.item() > 0:
                return x
            return -x
        """
    )
    assert check_text(code, "a.py", ALL_RULES).findings == []
    ns: dict = {}
    exec(code.replace("@torch.compile(fullgraph=True)\n", ""), ns)
    _fullgraph(ns["f"], _input(), torch.tensor(3))
    with pytest.raises(torch._dynamo.exc.UserError, match="Could not guard on data-dependent expression"):
        _fullgraph(ns["f"], _input(), torch.tensor(3.0))


def test_tolist_of_a_float_tensor_fails_at_the_read():
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Tensor.tolist\\(\\) with non-integer tensor"):
        _fullgraph(lambda x: x * x.sum().tolist(), _input())


def test_reads_used_as_sizes_and_in_assert_compile_and_only_the_item_reads_are_reported():
    """They compile on torch 2.13 (a fullgraph region captures scalars); SP103 still reports each
    ``.item()`` (an error on torch before pytorch/pytorch#163121), and nothing once the file sets
    ``capture_scalar_outputs``; no rule reports the sizes, the assert or the integer ``.tolist()``."""
    code = textwrap.dedent(
        """\
        import torch

        @torch.compile(fullgraph=True)
        def f(x):
            n = (x > 0).sum().item()
            lengths = (x > 0).sum(0).tolist()
            assert x.sum().item() > 0
            a = torch.zeros(n)
            b = x.reshape(-1)[:n]
            c = x.reshape(-1).view(n + 2, -1)
            d = x.reshape(-1).split([n, 8 - n])
            e = x.new_zeros(lengths)
            for k in lengths:
                a = a + k
            return a, b, c, d, e
        """
    )
    found = check_text(code, "a.py", ALL_RULES).findings
    assert [(f.code, f.line) for f in found] == [("SP103", 5), ("SP103", 7)]
    assert all("capture_scalar_outputs = True" in f.message and "pytorch/pytorch#163121" in f.message for f in found)
    knob = code.replace("import torch\n", "import torch\n\ntorch._dynamo.config.capture_scalar_outputs = True\n", 1)
    assert check_text(knob, "a.py", ALL_RULES).findings == []
    ns: dict = {}
    exec(code.replace("@torch.compile(fullgraph=True)\n", ""), ns)
    _fullgraph(ns["f"], _input())


def test_a_static_condition_next_to_a_read_is_not_reported():
    code = textwrap.dedent(
        """\
        import torch

        @torch.compile(fullgraph=True)
        def f(x, mask=None):
            n = x.sum().item()
            if mask is not None and x.shape[0] > 1:
                x = x * mask
            if len(x.tolist()) > 1:
                x = x * 2
            return x / n
        """
    )
    # no branch is reported; the read on line 5 is SP103's (see the test above), nothing else
    assert [(f.code, f.line) for f in check_text(code, "a.py", ALL_RULES).findings] == [("SP103", 5)]
    ns: dict = {}
    exec(code.replace("@torch.compile(fullgraph=True)\n", ""), ns)
    _fullgraph(ns["f"], _input().long())


def test_reads_through_enumerate_bool_and_max_are_reported_and_raise():
    code = textwrap.dedent(
        """\
        import torch

        @torch.compile(fullgraph=True)
        def f(x):
            counts = (x > 0).sum(-1).tolist()
            for i, c in enumerate(counts):
                for _ in range(c):
                    x = x + i
            return x

        @torch.compile(fullgraph=True)
        def g(x):
            if bool(x.sum() > 0):
                return x
            return -x

        @torch.compile(fullgraph=True)
        def h(x):
            lengths = (x > 0).sum(-1).tolist()
            if max(lengths) > 2:
                return x
            return -x
        """
    )
    found = [(f.code, f.line) for f in check_text(code, "a.py", ALL_RULES).findings]
    assert found == [("SP111", 7), ("SP110", 13), ("SP110", 20)]
    ns: dict = {}
    exec(code.replace("@torch.compile(fullgraph=True)\n", ""), ns)
    with pytest.raises(torch._dynamo.exc.UserError, match=PREDICTED["SP111"][1]):
        _fullgraph(ns["f"], _input())
    for name in ("g", "h"):
        with pytest.raises(torch._dynamo.exc.UserError, match=PREDICTED["SP110"][1]):
            _fullgraph(ns[name], _input())


def test_sp103_reports_item_under_fullgraph_and_its_claims_hold_in_torch(monkeypatch):
    """SP103's fullgraph example: reported, with the knob as the fix; on this torch (2.13) the
    fullgraph region compiles it (so the message says a later torch captures it, not that it
    fails here); with the knob set the file is clean, and without fullgraph the knob removes
    the graph break (measured with Dynamo's own counter)."""
    from torch._dynamo.utils import counters

    from rewriter.check.rules.sp103_graph_break_call import GraphBreakCall

    [example] = [ex for ex in GraphBreakCall.INVALID if "fullgraph=True" in ex.code]
    [finding] = check_text(example.code, "example.py", ALL_RULES).findings
    assert (finding.code, finding.line) == ("SP103", example.line)
    assert "capture_scalar_outputs = True" in finding.message and "torch 2.13 compiles it" in finding.message
    run_example(example.code, monkeypatch)  # fullgraph=True on torch 2.13: no error
    [valid] = [ex for ex in GraphBreakCall.VALID if "capture_scalar_outputs" in ex.code]
    assert check_text(valid.code, "example.py", ALL_RULES).findings == []
    with torch._dynamo.config.patch(capture_scalar_outputs=False):  # the example sets it: restored after
        run_example(valid.code, monkeypatch)
    # without fullgraph: a break, which the knob removes
    plain = GraphBreakCall.INVALID[0]
    assert [f.code for f in check_text(plain.code, "example.py", [GraphBreakCall]).findings] == ["SP103"]
    knob = plain.code.replace("import torch\n", "import torch\ntorch._dynamo.config.capture_scalar_outputs = True\n", 1)
    assert check_text(knob, "example.py", [GraphBreakCall]).findings == []
    for setting, breaks in ((False, 1), (True, 0)):
        with torch._dynamo.config.patch(capture_scalar_outputs=setting):  # restored after, unlike setattr
            counters.clear()
            run_example(plain.code, monkeypatch)
            assert sum(counters["graph_break"].values()) == breaks
