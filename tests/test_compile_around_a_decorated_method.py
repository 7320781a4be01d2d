"""A plan's ``compile`` whose region holds a method another compile already covers:

* the source compiles a method with a decorator (``@torch.compile`` on ``Block._attn``) that the
  plan's compiled ``forward`` runs, through ``self._attn(x)`` in ``Block.forward`` (a plan compile
  of ``Block``), or inside a class the plan's compiled class builds (a compile of ``Net``, whose
  ``__init__`` builds the ``Block``s, whole or region): Dynamo traces the decorated method inside the
  plan's compile and inlines it, so that decorator's compile and its options are never used;
* the plan itself compiles both (``Net`` and ``Block``, neither a ``nested`` hint): the inner
  compile gets no graph of its own.

Each premise is pinned below on CPU torch with ``CompileCounter``; each refusal is at the inner
compile's plan line (for a source decorator, at the plan's compile), exit 2, nothing written.
"""

from __future__ import annotations

import pytest

from rewrite_tree import rewrite_files

MODEL = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    {attn}
    def _attn(self, x):
        return torch.relu(self.lin(x))

    {forward}
    def forward(self, x):
        return self._attn(x) + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""


def _model(attn: str = "", forward: str = "") -> str:
    """model.py: ``Block`` (the first decorator given at line 10, or 13 where it is ``forward``'s alone)
    and ``Net`` (building the blocks at line 21 with one decorator given, 20 with none); a decorator
    not given is no line."""
    text = MODEL.format(attn=attn or "#", forward=forward or "#")
    return "\n".join(line for line in text.split("\n") if line.strip() != "#")


def _frames(attn: str, forward: str, net: str = "", whole: bool = False) -> tuple[int, ...]:
    """Frames each compile got for one call of ``Net`` (CPU torch, ``CompileCounter``): the backends
    ``attn``, ``forward``, ``net`` and, with ``whole``, a ``torch.compile(Net())`` of backend ``w``."""
    import torch
    from torch._dynamo.testing import CompileCounter

    counters = {k: CompileCounter() for k in ("attn_be", "forward_be", "net_be", "w")}
    code = MODEL.format(attn=attn or "pass_", forward=forward or "pass_").replace("    pass_\n", "")
    if net:
        code = code.replace("    def forward(self, x):\n        for", f"    {net}\n    def forward(self, x):\n        for")
    namespace = {"torch": torch, "nn": torch.nn, **counters}
    exec(compile(code, "pinned_nested.py", "exec"), namespace)
    torch._dynamo.reset()
    try:
        model = namespace["Net"]()
        model = torch.compile(model, backend=counters["w"]) if whole else model
        with torch.no_grad():
            model(torch.randn(3, 4))
    finally:
        torch._dynamo.reset()
    return tuple(counters[k].frame_count for k in ("attn_be", "forward_be", "net_be", "w"))


def test_a_decorated_method_under_another_compile_gets_no_graph_of_its_own():
    """What the refusals rest on: ``Block._attn``'s decorator compiles its frames alone; under a
    compile of ``Block.forward``, of ``Net.forward`` or of the whole ``Net`` it gets none; and a
    compile of ``Block.forward`` under a compile of ``Net.forward`` gets none either."""
    dec = "@torch.compile(backend={})"
    assert _frames(dec.format("attn_be"), "") == (1, 0, 0, 0)
    assert _frames(dec.format("attn_be"), dec.format("forward_be")) == (0, 1, 0, 0)
    assert _frames(dec.format("attn_be"), "", net=dec.format("net_be")) == (0, 0, 1, 0)
    assert _frames(dec.format("attn_be"), "", whole=True) == (0, 0, 0, 1)
    assert _frames("", dec.format("forward_be"), net=dec.format("net_be")) == (0, 0, 1, 0)


BLOCK = "  - {action: compile, target: model.py::Block}\n"
NET = "  - {action: compile, target: model.py::Net}\n"
NET_WHOLE = "  - {action: compile, target: model.py::Net, strategy: whole}\n"


@pytest.mark.parametrize("decorator", ["@torch.compile", "@torch.compile(mode='max-autotune')",
                                       "@torch._dynamo.optimize('eager')"])
def test_a_compile_of_a_block_whose_forward_calls_a_decorated_method_is_refused(tmp_path, capsys, decorator):
    err = rewrite_files(tmp_path, capsys, {"model.py": _model(attn=decorator)}, BLOCK, 2)
    assert ("plan.yaml:3: actions[0] (compile model.py::Block): compile of Block: the source compiles Block._attn "
            f"with a decorator at model.py:10: {decorator}, and Block.forward calls self._attn; Dynamo traces "
            "Block._attn inside this compile of Block.forward and inlines it, so that decorator's compile and its "
            "options would never be used") in err, err
    assert ("keep this action and turn that decorator off (action compile, target model.py::Block._attn, own_call: "
            "{disable: true})") in err, err


@pytest.mark.parametrize("actions", [NET, NET_WHOLE])
def test_a_compile_of_a_class_that_builds_a_block_with_a_decorated_method_is_refused(tmp_path, capsys, actions):
    err = rewrite_files(tmp_path, capsys, {"model.py": _model(attn="@torch.compile")}, actions, 2)
    assert ("plan.yaml:3: actions[0] (compile model.py::Net): compile of Net: the source compiles Block._attn with a "
            "decorator at model.py:10: @torch.compile, and Net encloses Block: Net.__init__ builds Block at "
            "model.py:21: self.blocks = nn.ModuleList([Block() for _ in range(2)]); Block.forward calls self._attn; "
            "Dynamo traces Block._attn inside this compile of Net.forward and inlines it") in err, err
    assert "target model.py::Block._attn, own_call: {disable: true}" in err, err


def test_a_compile_of_a_class_that_builds_a_block_with_a_decorated_forward_is_refused(tmp_path, capsys):
    err = rewrite_files(tmp_path, capsys, {"model.py": _model(forward="@torch.compile")}, NET_WHOLE, 2)
    assert ("compile of Net: the source compiles Block.forward with a decorator at model.py:13: @torch.compile, and "
            "Net encloses Block: Net.__init__ builds Block at model.py:21") in err, err
    assert "Block.forward calls" not in err, err


@pytest.mark.parametrize("attn, actions", [
    ("@torch.compile(disable=True)", BLOCK),  # compiles nothing
    ("@torch.compile", "  - {action: compile, target: model.py::Block._attn, own_call: {disable: true}}\n" + BLOCK),
    ("@torch.compile", "  - {action: compile, target: model.py::Block._attn, own_call: {disable: true}}\n" + NET),
    ("@torch.no_grad()", BLOCK),  # no compile
])
def test_a_decorator_that_compiles_nothing_is_not_counted(tmp_path, capsys, attn, actions):
    rewrite_files(tmp_path, capsys, {"model.py": _model(attn=attn)}, actions, 0)
    assert "    @torch.compile\n    def forward(self, x):\n" in (tmp_path / "src" / "model.py").read_text()


@pytest.mark.parametrize("outer", [NET, NET_WHOLE])
def test_two_plan_compiles_one_inside_the_other_are_refused_naming_both(tmp_path, capsys, outer):
    err = rewrite_files(tmp_path, capsys, {"model.py": _model()}, outer + BLOCK, 2)
    assert "plan.yaml:4: actions[1] (compile model.py::Block): compile of Block: actions[0] (" in err, err
    assert ("plan.yaml:3) compiles Net, and Net encloses Block: Net.__init__ builds Block at model.py:20: self.blocks = "
            "nn.ModuleList([Block() for _ in range(2)]); Dynamo traces Block.forward inside that compile of "
            "Net.forward and inlines it, so this compile and its options would never be used") in err, err
    assert "keep one: drop this action (actions[0]'s compile covers Block), or drop actions[0]" in err, err
    assert "strategy: nested on this action" in err, err


def test_a_plan_compile_of_a_method_its_compiled_forward_calls_is_refused(tmp_path, capsys):
    actions = BLOCK + "  - {action: compile, target: model.py::Block._attn}\n"
    err = rewrite_files(tmp_path, capsys, {"model.py": _model()}, actions, 2)
    assert "plan.yaml:4: actions[1] (compile model.py::Block._attn): compile of Block._attn: actions[0] (" in err, err
    assert ("plan.yaml:3) compiles Block, and Block.forward calls self._attn; Dynamo traces Block._attn inside that "
            "compile of Block.forward and inlines it") in err, err


def test_the_nested_hint_under_a_whole_compile_is_written(tmp_path, capsys):
    """``strategy: nested`` is the intended nesting: a hint to the whole compile, written."""
    actions = NET_WHOLE + "  - {action: compile, target: model.py::Block, strategy: nested}\n"
    rewrite_files(tmp_path, capsys, {"model.py": _model()}, actions, 0)
    text = (tmp_path / "src" / "model.py").read_text()
    assert "@torch.compiler.nested_compile_region" in text and text.count("@torch.compile\n") == 1, text
