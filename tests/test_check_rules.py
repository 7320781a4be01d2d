"""Every rule's VALID/INVALID examples, collected into parametrized tests (Fixit-style), plus the
claims the rules make about torch checked against torch itself where that is cheap on CPU."""

from __future__ import annotations

import textwrap

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES

VALID = [pytest.param(rule, ex, id=f"{rule.CODE}-valid-{i}") for rule in ALL_RULES for i, ex in enumerate(rule.VALID)]
INVALID = [
    pytest.param(rule, ex, id=f"{rule.CODE}-invalid-{i}") for rule in ALL_RULES for i, ex in enumerate(rule.INVALID)
]


def test_codes_are_unique_and_well_formed():
    codes = [r.CODE for r in ALL_RULES]
    assert len(set(codes)) == len(codes)
    assert all(c.startswith("SP1") and len(c) == 5 for c in codes)
    assert all(r.VALID and r.INVALID for r in ALL_RULES), "every rule carries both kinds of example"


@pytest.mark.parametrize(("rule", "example"), VALID)
def test_valid_example_is_not_reported(rule, example):
    result = check_text(example.code, "example.py", [rule])
    assert result.error is None
    assert result.findings == []


@pytest.mark.parametrize(("rule", "example"), VALID)
def test_valid_example_is_clean_under_all_rules_of_its_kind(rule, example):
    # the rule's own example must not trip the same rule through another path (e.g. fixes)
    result = check_text(example.code, "example.py", [rule], fix=True)
    assert result.fixed is None


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_invalid_example_is_reported_at_its_line(rule, example):
    result = check_text(example.code, "example.py", [rule])
    assert result.error is None
    assert result.findings, f"{rule.CODE} did not report its own INVALID example"
    first = result.findings[0]
    assert (first.code, first.line) == (rule.CODE, example.line)
    assert first.path == "example.py" and first.col >= 1
    assert first.fixable == (example.fixed is not None)


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_fix_gives_the_expected_code_and_a_clean_recheck(rule, example):
    result = check_text(example.code, "example.py", [rule], fix=True)
    assert result.fixed == example.fixed
    if example.fixed is not None:
        again = check_text(example.fixed, "example.py", [rule])
        assert [f for f in again.findings if f.code == rule.CODE] == []
        compile(example.fixed, "example.py", "exec")  # the fix is valid Python


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_suppression_comment_silences_exactly_that_code(rule, example):
    lines = example.code.splitlines()
    target = lines[example.line - 1]
    suppressed = lines[:]
    suppressed[example.line - 1] = f"{target}  # stackpart: ignore[{rule.CODE}]"
    text = "\n".join(suppressed) + "\n"
    found = [f for f in check_text(text, "x.py", [rule]).findings if f.line == example.line]
    assert found == []
    other = lines[:]
    other[example.line - 1] = f"{target}  # stackpart: ignore[SP199]"
    found = [f for f in check_text("\n".join(other) + "\n", "x.py", [rule]).findings if f.line == example.line]
    assert found, "a suppression for another code must not silence this one"


def test_torch_aliases_are_resolved_and_lookalikes_are_not():
    aliased = textwrap.dedent(
        """\
        from torch import compile as tc

        @tc
        def f(x):
            return x.sum().item()
        """
    )
    assert [f.code for f in check_text(aliased, "a.py", ALL_RULES).findings] == ["SP103"]
    lookalike = textwrap.dedent(
        """\
        import re
        import torch

        class torch_like:
            compile = staticmethod(lambda f: f)

        @torch_like.compile
        def f(x):
            return x.sum().item()

        PATTERN = re.compile("x")
        """
    )
    assert check_text(lookalike, "b.py", ALL_RULES).findings == []


def test_eager_only_branch_and_nested_function_are_not_traced():
    code = textwrap.dedent(
        """\
        import torch

        @torch.compile
        def f(x):
            if torch.compiler.is_compiling():
                y = x * 2
            else:
                print("eager")
            def helper():
                return x.item()
            return y
        """
    )
    assert check_text(code, "c.py", ALL_RULES).findings == []


# --- the rules' claims, checked against torch (CPU, backend="eager": Dynamo only) -----------------

def _module_from(code: str) -> dict:
    namespace: dict = {}
    exec(compile(code, "example.py", "exec"), namespace)
    return namespace


def test_sp102_fix_keeps_state_dict_keys():
    import torch

    rule = next(r for r in ALL_RULES if r.CODE == "SP102")
    example = rule.INVALID[0]
    before = _module_from(example.code)["Net"]()
    after = _module_from(example.fixed)["Net"]()
    assert any(k.startswith("mlp._orig_mod.") for k in before.state_dict())
    assert not any("_orig_mod" in k for k in after.state_dict())
    assert isinstance(after, torch.nn.Module)


def test_sp103_and_sp104_examples_really_break_the_graph():
    import torch

    for code in ("SP103", "SP104"):
        rule = next(r for r in ALL_RULES if r.CODE == code)
        example = rule.INVALID[0]
        source = example.code.replace("@torch.compile(fullgraph=False)", "").replace("@torch.compile", "")
        fn = next(v for k, v in _module_from(source).items() if callable(v) and k in ("step", "f"))
        torch._dynamo.reset()
        reasons = torch._dynamo.explain(fn)(torch.ones(4)).break_reasons
        assert any(r.graph_break for r in reasons), code


def test_sp104_example_is_an_error_under_fullgraph():
    import torch

    rule = next(r for r in ALL_RULES if r.CODE == "SP104")
    fn = _module_from(rule.INVALID[0].code.replace("@torch.compile", ""))["f"]
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="[Dd]ata-dependent"):
        torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(4))


def test_sp108_example_fails_under_fullgraph():
    import torch

    rule = next(r for r in ALL_RULES if r.CODE == "SP108")
    source = rule.INVALID[0].code.replace("@torch.compile(fullgraph=True)", "")
    fn = _module_from(source)["block"]
    torch._dynamo.reset()
    with pytest.raises(Exception, match="disable"):
        torch.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))


def test_sp106s_fix_makes_the_size_1_call_it_warns_about_work():
    """SP106's fix lets the size-1 call it warns about run: a strict mark (min=1) raises at size 1,
    the fix's maybe_mark_dynamic accepts it, and sizes >= 2 keep sharing one dynamic graph (torch
    2.13, eager backend; docs/decisions.md, "Strict and soft marks")."""
    import libcst as cst
    import torch
    from torch._dynamo.utils import counters

    from rewriter.check.rules.sp106_mark_dynamic_min import MarkDynamicMin, _maybe

    [invalid, *_] = MarkDynamicMin.INVALID
    fixed = cst.parse_module(invalid.fixed).code
    assert "maybe_mark_dynamic(x, 1)" in fixed
    assert cst.Module([]).code_for_node(_maybe(cst.parse_expression("torch._dynamo.mark_dynamic(x, 1, min=1, max=64)"))) == \
        "torch._dynamo.maybe_mark_dynamic(x, 1)"

    def f(x):
        return (x * 2).sum(1)

    def run(mark, sizes):
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(f, backend="eager")
        for n in sizes:
            x = torch.randn(3, n)
            mark(x)
            compiled(x)
        return int(counters["stats"]["unique_graphs"])

    with pytest.raises(Exception):
        run(lambda x: torch._dynamo.mark_dynamic(x, 1, min=1, max=64), [1])
    assert run(lambda x: torch._dynamo.maybe_mark_dynamic(x, 1), [1, 5, 7, 9]) == 2
    torch._dynamo.reset()


def test_sp105_examples_fail_at_the_first_call_with_or_without_fullgraph():
    """SP105's page says the marks are an error in compiled code, not a graph break (torch 2.13):
    each INVALID example, run on the eager backend, raises "Attempt to trace forbidden callable"."""
    import torch

    rule = next(r for r in ALL_RULES if r.CODE == "SP105")
    for example in rule.INVALID:
        real = torch.compile
        namespace: dict = {"__name__": "example"}
        torch.compile = lambda model=None, **kw: real(model, backend="eager", **kw) if model is not None \
            else (lambda fn: real(fn, backend="eager", **kw))
        try:
            exec(compile(example.code, "example.py", "exec"), namespace)
        finally:
            torch.compile = real
        entry = namespace["model"] if "model" in namespace else namespace["block"]
        torch._dynamo.reset()
        with pytest.raises(AssertionError, match="Attempt to trace forbidden callable"):
            entry(torch.ones(3))
        torch._dynamo.reset()
