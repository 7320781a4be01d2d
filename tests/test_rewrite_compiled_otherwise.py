"""A ``compile`` (``disable``) of a target the source already compiles (disables) with other
options: the rewrite leaves the source's decorator as written, and says so as a warning naming its
``file:line``, the decorator and the plan's options; it never says the tree holds the plan's edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.cli import main

MODEL = '''\
import torch
from torch import nn


class Block(nn.Module):
    @torch.compile(mode="max-autotune")
    def forward(self, x):
        return x + 1


@torch.compiler.disable(recursive=False)
def route(x):
    return x.nonzero()
'''

COMPILE = "  - action: compile\n    target: model.py::Block\n    options: {fullgraph: true}\n"
DISABLE = "  - action: disable\n    target: model.py::route\n"
#: an action the source does not hold yet: the plan still writes something
OTHER = "  - action: disable\n    target: model.py::helper\n"


def _tree(tmp_path: Path, actions: str, extra: str = "") -> tuple[Path, Path, bytes]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL + extra)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + actions)
    return plan, src, (src / "model.py").read_bytes()


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())  # rich wraps long lines


@pytest.mark.parametrize("actions, said", [
    (COMPILE, "warning: model.py:6: Block.forward is compiled by the source's @torch.compile(mode=\"max-autotune\"), "
              "not with the plan's options {fullgraph: true}: the decorator is left as written and the plan's "
              "compile is not in the tree; own_call: {fullgraph: true, mode: default} on this action edits the "
              "program's own compile to them (docs/plan-reference.md)"),
    (DISABLE, "warning: model.py:11: route is disabled by the source's @torch.compiler.disable(recursive=False), "
              "not as the plan asks (recursive: true): the decorator is left as written and the plan's disable "
              "is not in the tree; edit the decorator by hand, or drop this action"),
])
def test_decorator_with_other_options_is_named_and_not_called_applied(tmp_path, capsys, actions, said):
    plan, src, before = _tree(tmp_path, actions)
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert (code, out) == (0, "") and said in err, err
    assert "already is what the plan asks" not in err, err
    assert f"no changes: 1 action(s) not written (above); {src} already has the rest" in err, err
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0 and said in err, err
    assert "already applied" not in err and "holds this plan's edits" not in err, err
    assert err.rstrip().endswith("no changes: 1 action(s) not written (above); nothing was written"), err
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--check")
    assert (code, out) == (0, "") and said in err, err  # nothing to write: --check has no diff to fail on
    assert (src / "model.py").read_bytes() == before


def test_other_actions_written_beside_it_say_whose_edits_the_tree_holds(tmp_path, capsys):
    plan, src, _ = _tree(tmp_path, COMPILE + OTHER, "\n\ndef helper(x):\n    return x\n")
    code, _, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0 and "applied: 1 file(s) changed" in err, err
    code, _, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0 and "Block.forward is compiled by the source's" in err, err
    assert "holds this plan's edits" not in err, err
    assert "already applied: " + str(src) + " holds the edits of this plan's other actions (1 action(s) not written, above)" in err, err
    code, _, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert "no changes: 1 action(s) not written (above); " + str(src) + " already has the rest" in err, err


@pytest.mark.parametrize("decorator, actions", [
    ('@torch.compile(fullgraph=True)', COMPILE),
    ("@torch.compile(fullgraph=True, mode='default')", COMPILE),
    ("@torch.compiler.disable", DISABLE),
    ("@torch.compiler.disable(recursive=True)", DISABLE),
])
def test_decorator_as_the_plan_asks_is_already_applied(tmp_path, capsys, decorator, actions):
    plan, src, before = _tree(tmp_path, actions)
    old = '@torch.compile(mode="max-autotune")' if "compile" in actions.split("\n")[0] else "@torch.compiler.disable(recursive=False)"
    (src / "model.py").write_text(MODEL.replace(old, decorator))
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert (code, out) == (0, "") and "warning" not in err, err
    assert f"no changes: {src} already is what the plan asks" in err, err


@pytest.mark.parametrize("decorator, actions, said", [
    ("@torch.compile(mode=MODE)", COMPILE,
     "model.py:6: Block.forward is compiled by the source's @torch.compile(mode=MODE), whose arguments are not all "
     "literal keyword arguments: they cannot be read as the plan's options {fullgraph: true}; the decorator is left "
     "as written: compare it with them by hand"),
    ('@torch.compile(fullgraph=True, options={"trace.enabled": True})', COMPILE,
     "own_call leaves options= as written: change it by hand"),
    ("@torch.compiler.disable(recursive=FLAG)", DISABLE,
     "model.py:11: route is disabled by the source's @torch.compiler.disable(recursive=FLAG), whose arguments are not "
     "all literal keyword arguments: they cannot be read as the plan asks (recursive: true)"),
])
def test_options_not_read_or_not_editable_are_said(tmp_path, capsys, decorator, actions, said):
    plan, src, _ = _tree(tmp_path, actions)
    old = '@torch.compile(mode="max-autotune")' if "compile" in actions.split("\n")[0] else "@torch.compiler.disable(recursive=False)"
    (src / "model.py").write_text(MODEL.replace(old, decorator))
    before = (src / "model.py").read_bytes()
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    assert code == 0 and said in err and "holds this plan's edits" not in err, err
    assert (src / "model.py").read_bytes() == before


def test_reason_is_no_difference(tmp_path, capsys):
    plan, src, _ = _tree(tmp_path, DISABLE)
    (src / "model.py").write_text(MODEL.replace("(recursive=False)", '(reason="data-dependent routing")'))
    code, _, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert code == 0 and "warning" not in err and "already is what the plan asks" in err, err


def test_summary_md_says_the_action_is_not_written(tmp_path, capsys):
    plan, src, _ = _tree(tmp_path, COMPILE)
    summary = tmp_path / "summary.md"
    assert _run(capsys, "rewrite", "--plan", str(plan), str(src), "--summary-md", str(summary))[0] == 0
    text = summary.read_text()
    assert "already what the plan asks" not in text and "already in place" not in text, text
    assert "| 0 | `compile` | `model.py::Block` | not written: the target's own decorator has other options" in text, text
    assert "- model.py:6: Block.forward is compiled by the source's" in text, text


#: ``f`` compiled by the source outside a ``@torch.compile``: torch.compile's older spelling as a
#: decorator, and the rebinding below the ``def`` in both spellings.
FUNCTION = "import torch\n\n\n{decorator}def f(x):\n    return x + 1\n{rebinding}"
OPTIMIZED = {
    "optimize decorator": ('@torch._dynamo.optimize("inductor")\n', "", 4,
                           "the source's @torch._dynamo.optimize(\"inductor\")", "decorator",
                           "own_call does not edit torch._dynamo.optimize (its arguments are not torch.compile's): "
                           "write it as @torch.compile(fullgraph=True) by hand, or drop this action"),
    "optimize rebinding": ("", '\n\nf = torch._dynamo.optimize("inductor")(f)\n', 8,
                           "the source's f = torch._dynamo.optimize(\"inductor\")(f)", "rebinding",
                           "own_call does not edit torch._dynamo.optimize (its arguments are not torch.compile's): "
                           "write it as f = torch.compile(f, fullgraph=True) by hand, or drop this action"),
    "compile rebinding": ("", "\n\nf = torch.compile(f, mode=\"max-autotune\")\n", 8,
                          "the source's f = torch.compile(f, mode=\"max-autotune\")", "rebinding",
                          "own_call: {fullgraph: true, mode: default} on this action edits the program's own "
                          "compile to them (docs/plan-reference.md)"),
    "compile applied by hand": ("", "\n\nf = torch.compile(mode=\"max-autotune\")(f)\n", 8,
                                "the source's f = torch.compile(mode=\"max-autotune\")(f)", "rebinding",
                                "own_call: {fullgraph: true, mode: default} on this action edits the program's own "
                                "compile to them (docs/plan-reference.md)"),
}
COMPILE_F = "  - action: compile\n    target: m.py::f\n    options: {fullgraph: true}\n"


@pytest.mark.parametrize("decorator, rebinding, line, source, kind, lever", list(OPTIMIZED.values()), ids=list(OPTIMIZED))
def test_other_spellings_of_the_sources_compile_with_other_options_are_named(tmp_path, capsys, decorator, rebinding,
                                                                              line, source, kind, lever):
    """``@torch._dynamo.optimize(...)`` and the rebinding ``f = torch._dynamo.optimize(...)(f)`` /
    ``f = torch.compile(f, ...)`` are the source's compile of ``f`` as a ``@torch.compile`` is: left
    as written (never a second ``@torch.compile`` on ``f``), with the same warning where their
    options are not the plan's; own_call does not edit torch._dynamo.optimize, so the lever is the
    rewrite by hand."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(FUNCTION.format(decorator=decorator, rebinding=rebinding))
    before = (src / "m.py").read_bytes()
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + COMPILE_F)
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")
    said = (f"warning: m.py:{line}: f is compiled by {source}, not with the plan's options {{fullgraph: true}}: the "
            f"{kind} is left as written and the plan's compile is not in the tree; {lever}")
    assert code == 0 and said in err, err
    assert err.rstrip().endswith("no changes: 1 action(s) not written (above); nothing was written"), err
    assert (src / "m.py").read_bytes() == before


@pytest.mark.parametrize("source", [
    FUNCTION.format(decorator='@torch._dynamo.optimize("inductor", nopython=True)\n', rebinding=""),
    FUNCTION.format(decorator="", rebinding="\n\nf = torch._dynamo.optimize(nopython=True)(f)\n"),
    FUNCTION.format(decorator="", rebinding="\n\nf = torch.compile(f, fullgraph=True)\n"),
    FUNCTION.format(decorator="", rebinding="\n\nf = torch.compile(fullgraph=True)(f)\n"),
])
def test_other_spellings_with_the_plans_options_are_already_applied(tmp_path, capsys, source):
    """``nopython=True`` is torch.compile's ``fullgraph=True`` (torch.compile passes
    ``nopython=fullgraph`` to torch._dynamo.optimize; pinned below) and ``inductor`` its default
    backend: nothing to say."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(source)
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + COMPILE_F)
    code, out, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert (code, out) == (0, "") and "warning" not in err, err
    assert f"no changes: {src} already is what the plan asks" in err, err


def test_optimize_compiles_the_function_and_nopython_is_fullgraph():
    """What the reading above rests on (CPU torch, CompileCounter): ``torch._dynamo.optimize(backend)(f)``
    compiles ``f`` with that backend, as ``torch.compile(f, backend=...)`` does, and ``nopython=True``
    raises at a graph break as ``fullgraph=True`` does."""
    import warnings

    import torch
    from torch._dynamo.testing import CompileCounter

    def f(x):
        return x + 1

    def breaks(x):
        torch._dynamo.graph_break()
        return x + 1

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counter = CompileCounter()
        torch._dynamo.optimize(counter)(f)(torch.randn(2))
        assert counter.frame_count == 1, counter.frame_count
        with pytest.raises(torch._dynamo.exc.Unsupported):
            torch._dynamo.optimize(CompileCounter(), nopython=True)(breaks)(torch.randn(2))
        with pytest.raises(torch._dynamo.exc.Unsupported):
            torch.compile(breaks, backend=CompileCounter(), fullgraph=True)(torch.randn(2))
    torch._dynamo.reset()


def test_a_rebinding_through_torch_compiles_decorator_is_read_and_edited_at_its_options(tmp_path, capsys):
    """``f = torch.compile(mode="max-autotune")(f)``: the options are the inner call's. A plan that
    asks torch.compile's default mode is told the source's mode differs (it read "already is what
    the plan asks"), and ``own_call`` edits the inner call (a keyword added to the outer call,
    ``(f, fullgraph=True)``, would be a TypeError of the decorator torch.compile returns)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(FUNCTION.format(decorator="", rebinding='\n\nf = torch.compile(mode="max-autotune")(f)\n'))
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    options: {mode: default}\n")
    code, _, err = _run(capsys, "rewrite", "--plan", str(plan), str(src))
    assert code == 0 and ("warning: m.py:8: f is compiled by the source's f = torch.compile(mode=\"max-autotune\")(f), "
                          "not with the plan's options (torch.compile defaults): the rebinding is left as written and "
                          "the plan's compile is not in the tree; own_call: {mode: default} on this action edits") in err, err
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call: {fullgraph: true}\n")
    assert _run(capsys, "rewrite", "--plan", str(plan), str(src), "--apply", "--no-validate")[0] == 0
    assert (src / "m.py").read_text().endswith('\nf = torch.compile(mode="max-autotune", fullgraph=True)(f)\n')


def test_torch_compile_applied_by_hand_compiles_with_the_inner_calls_options():
    """What the reading above rests on (CPU torch, CompileCounter): ``torch.compile(**options)(f)``
    compiles ``f`` with the inner call's options: its backend counts the frame, and its
    ``fullgraph=True`` raises at a graph break."""
    import torch
    from torch._dynamo.testing import CompileCounter

    def f(x):
        return x + 1

    def breaks(x):
        torch._dynamo.graph_break()
        return x + 1

    torch._dynamo.reset()
    counter = CompileCounter()
    torch.compile(backend=counter)(f)(torch.randn(2))
    assert counter.frame_count == 1, counter.frame_count
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(backend=CompileCounter(), fullgraph=True)(breaks)(torch.randn(2))
    torch._dynamo.reset()
