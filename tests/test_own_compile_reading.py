"""The program's own compile read right, statically and at run time, and the regional edit of its
call (``own_call: {regional: ...}``): fast, no diagnose run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewriter.diagnose.own_compile import OwnCompile, own_compiles
from rewriter.diagnose.runtime_compile import disagreements, granularity, per_call

MODEL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self = torch.compile(self)

    def forward(self, x):
        return x


def compile_model(model):
    return torch.compile(model)


@torch.compile
def never(x):
    return x + 1


unused_fast = torch.compile(never)


def build_model():
    return torch.compile(Net())


def main():
    model = Net()
    fast = torch.compile(model)
    torch.compile(model)
    return model(1)


def serve():
    model = Net()
    model.forward = torch.compile(model.forward)
    return model(1)


if __name__ == "__main__":
    main()
    serve()
"""


def _read(tmp_path: Path) -> dict[int, OwnCompile]:
    (tmp_path / "m.py").write_text(MODEL)
    return {int(o.where.rsplit(":", 1)[1]): o for o in own_compiles(tmp_path, entries=frozenset({"m.py::build_model"}))}


def test_compiles_that_compile_nothing_are_told_from_live_ones(tmp_path):
    own = _read(tmp_path)
    assert own[9].idle_kind == "no-op" and "rebinds the local name self" in own[9].idle
    assert own[16].idle_kind == "uncalled" and "compile_model, is never called" in own[16].idle
    assert own[19].idle is None  # `never` is compiled again below: its name is used
    assert own[24].idle_kind == "unused" and "unused_fast, which nothing in SRC uses" in own[24].idle
    assert own[28].idle is None  # the harness's model function: stackpart calls it by name
    assert own[33].idle_kind == "unused" and "fast, which main never uses" in own[33].idle
    assert own[34].idle_kind == "no-op" and "is discarded" in own[34].idle
    assert own[40].idle is None and own[40].covers == ("class", "Net")  # the model's forward, compiled in place


def test_a_no_op_compile_the_harness_runs_is_not_said_to_be_off_its_path(tmp_path):
    own = _read(tmp_path)
    rc = {"frames": [], "modules": [], "src_imported": ["m.py"]}
    said = disagreements([own[9]], rc)
    assert said == ["the program's own compile m.py:9: torch.compile(self) compiles nothing: it rebinds the local name "
                    "self to the compiled module: the module the caller holds is not compiled, so nothing compiles; "
                    "self.compile() compiles it in place; at run time, no frame or module of it compiled, as the source says"]
    assert per_call([own[9]], rc) == ["m.py:9: torch.compile(self): compiled nothing (no-op)"]


def _frame(name, path, graphs, recompiles=0):
    return {"name": name, "file": "model.py", "line": 10, "graphs": graphs, "recompiles": recompiles, "fullgraph": False,
            "entry": {"kind": "module", "path": path, "class": name.split(".")[0], "file": "model.py", "line": 5}}


def test_a_per_layer_compile_is_told_from_a_whole_model_one_at_run_time():
    per_layer = {"modules": [{"path": f"layers.{i}", "class": "Block", "how": "torch.compile(module)", "fullgraph": False}
                             for i in range(3)],
                 "frames": [_frame("Block.forward", "layers.0", 2, 1)], "src_imported": ["model.py", "train.py"]}
    assert granularity(per_layer) == ("per layer: 3 x Block (layers.0-2, torch.compile(module)), 1 frame, 2 graphs, "
                                      "1 recompile")
    whole = {"modules": [{"path": "<model>", "class": "Net", "how": "module.compile()", "fullgraph": True}],
             "frames": [_frame("Net.forward", "<model>", 1)], "src_imported": ["model.py"]}
    assert granularity(whole) == "whole model: Net (module.compile(), fullgraph), 1 frame, 1 graph, 0 recompiles"
    assert granularity({"modules": [], "frames": []}) is None
    own = OwnCompile("train.py:12", "torch.compile(layer)", False, ("unknown", ""))
    assert per_call([own], per_layer) == ["train.py:12: torch.compile(layer): 1 frame, 2 graphs, 1 recompile"]


def _rewrite(tmp_path: Path, body: str, own_call: str, strategy: str = "region") -> str:
    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import plan_rewrite

    (tmp_path / "train.py").write_text(body)
    plan = parse_plan(f"version: 1\nactions:\n  - action: compile\n    target: train.py::build\n    strategy: {strategy}\n"
                      f"    own_call: {own_call}\n", "plan.yaml")
    result = plan_rewrite(plan, tmp_path)
    new = result.changes[0].new if result.changes else body
    return new.decode() if isinstance(new, bytes) else new


_NET = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
       "        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])\n"


@pytest.mark.parametrize("line, expect", [
    ('    model = torch.compile(model, backend="eager", fullgraph=True)\n',
     '    for block in model.layers:\n        block.compile(backend="eager", fullgraph=True)\n'),
    ("    model.compile(mode='max-autotune')\n", "    for block in model.layers:\n        block.compile(mode='max-autotune')\n"),
    ("    model.forward = torch.compile(model.forward)\n", "    for block in model.layers:\n        block.compile()\n"),
])
def test_the_programs_whole_model_call_turned_regional_at_the_call_site(tmp_path, line, expect):
    (tmp_path / "model.py").write_text(_NET)  # its layers an nn.ModuleList: the loop walks it as it is
    body = f"import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n{line}    return model\n"
    new = _rewrite(tmp_path, body, "{regional: layers}")
    assert new == body.replace(line, expect), new
    (tmp_path / "train.py").write_text(new)
    assert _rewrite(tmp_path, new, "{regional: layers}") == new  # idempotent


@pytest.mark.parametrize("path, container", [("self.layers", "model.layers"), ("self.blocks.layers", "model.blocks.layers")])
def test_a_regional_path_written_as_it_reads_inside_the_class_drops_self(tmp_path, path, container):
    """``regional: self.layers`` names the attribute as the model's class reads it; the loop walks
    it on the compiled name (``model.layers``), never ``model.self.layers``."""
    from rewriter.plan import parse_plan

    own = parse_plan(f"version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call: {{regional: {path}}}\n")
    assert own.plan.actions[0].own_call.regional == path.removeprefix("self.")
    body = "import torch\n\n\ndef build():\n    model = Net()\n    model = torch.compile(model)\n    return model\n"
    new = _rewrite(tmp_path, body, f"{{regional: {path}}}")
    assert f"    for block in {container}.children():\n        block.compile()\n" in new, new
    assert "self" not in new, new


def test_a_regional_path_of_self_alone_is_refused_at_its_field():
    from rewriter.errors import StackpartError
    from rewriter.plan import parse_plan

    with pytest.raises(StackpartError, match=r"own_call.regional: expected an attribute path .*got 'self'"):
        parse_plan("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    own_call: {regional: self}\n")


def test_a_returned_compile_and_the_librarys_own_regional_compile(tmp_path):
    body = "import torch\n\n\ndef build():\n    return torch.compile(Net(), dynamic=False)\n"
    assert _rewrite(tmp_path, body, "{regional: layers, dynamic: true}") == (
        "import torch\n\n\ndef build():\n    model = Net()\n    for block in model.layers.children():\n        block.compile(dynamic=True)\n"
        "    return model\n")  # Net's class is not in SRC: children() walks a ModuleList, Sequential or ModuleDict alike
    body = "import torch\n\n\ndef build(pipe):\n    pipe.transformer = torch.compile(pipe.transformer)\n"
    assert _rewrite(tmp_path, body, "{regional: compile_repeated_blocks}") == (
        "import torch\n\n\ndef build(pipe):\n    pipe.transformer.compile_repeated_blocks()\n")


def test_a_regional_edit_that_cannot_hold_is_refused_with_the_line(tmp_path):
    from rewriter.errors import StackpartError

    body = "import torch\n\n\ndef build(model):\n    torch.compile(model)\n"
    with pytest.raises(StackpartError, match=r"train.py:5: own_call: regional: the result of torch.compile is not bound"):
        _rewrite(tmp_path, body, "{regional: layers}")
    with pytest.raises(StackpartError, match="expected strategy region"):
        _rewrite(tmp_path, body, "{regional: layers}", strategy="whole")
    with pytest.raises(StackpartError, match="expected an attribute path"):
        _rewrite(tmp_path, body, "{regional: 'layers[0]'}")


def test_a_regional_edit_keeps_the_users_comments(tmp_path):
    """The call's end-of-line comment and those between its arguments were dropped."""
    (tmp_path / "model.py").write_text(_NET)
    body = ("import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n"
            "    # compile everything\n"
            "    model = torch.compile(   # our compile call\n"
            "        model,\n"
            "        mode='max-autotune',  # try hard\n"
            "    )  # we have a break\n"
            "    return model\n")
    new = _rewrite(tmp_path, body, "{regional: layers}")
    assert new == ("import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n"
                   "    # compile everything\n"
                   "    # our compile call\n"
                   "    # try hard\n"
                   "    for block in model.layers:\n"
                   "        block.compile(mode='max-autotune')  # we have a break\n"
                   "    return model\n"), new
    (tmp_path / "train.py").write_text(new)
    assert _rewrite(tmp_path, new, "{regional: layers}") == new
    line = "    model.compile()   # our compile call\n"
    body = f"import torch\n\n\ndef build(model):\n{line}    return model\n"
    # a helper compiling its parameter: written where every caller passes a model that holds layers
    (tmp_path / "main.py").write_text("from model import Net\nfrom train import build\n\nbuild(Net())\n")
    assert _rewrite(tmp_path, body, "{regional: layers}") == body.replace(
        line, "    for block in model.layers:\n        block.compile()   # our compile call\n")


@pytest.mark.parametrize("line, expect", [
    # nanoGPT's train.py, its spacing kept: the comment stays on the compile, not on the loop's header
    ("        model = torch.compile(model) # requires PyTorch 2.0\n",
     "        for block in model.layers:\n            block.compile() # requires PyTorch 2.0\n"),
    ("        model.compile(dynamic=False)  # c\n",
     "        for block in model.layers:\n            block.compile(dynamic=False)  # c\n"),
    # a name bound anew: the comment goes on the compile, not on the assignment written before it
    ("        fast = torch.compile(model)  # c\n",
     "        fast = model\n        for block in fast.layers:\n            block.compile()  # c\n"),
    ("        fast = torch.compile(model)  # c\n        model = fast\n",
     "        fast = model\n        for block in fast.layers:\n            block.compile()  # c\n        model = fast\n"),
])
def test_a_regional_edit_keeps_the_lines_comment_on_the_compile(tmp_path, line, expect):
    """``model = torch.compile(model)  # requires PyTorch 2.0`` turned regional: the end-of-line
    comment annotated the compile, so it ends the line that compiles (``block.compile()``), with
    its own spacing; every other byte of the file is kept (docs/decisions.md, "A regional edit
    keeps the line's comment on the compile")."""
    (tmp_path / "model.py").write_text(_NET)
    body = f"import torch\nfrom model import Net\n\n\ndef build(compile=True):\n    model = Net()\n    if compile:\n{line}    return model\n"
    new = _rewrite(tmp_path, body, "{regional: layers}")
    assert new == body.replace(line, expect), new
    (tmp_path / "train.py").write_text(new)
    assert _rewrite(tmp_path, new, "{regional: layers}") == new


def test_a_returned_compile_turned_regional_keeps_its_comment_on_the_compile(tmp_path):
    (tmp_path / "model.py").write_text(_NET)
    body = "import torch\nfrom model import Net\n\n\ndef build():\n    return torch.compile(Net())  # c\n"
    assert _rewrite(tmp_path, body, "{regional: layers}") == (
        "import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n    for block in model.layers:\n"
        "        block.compile()  # c\n    return model\n")
    body = "import torch\n\n\ndef build(pipe):\n    pipe.unet = torch.compile(pipe.transformer)  # c\n"
    assert _rewrite(tmp_path, body, "{regional: compile_repeated_blocks}") == (
        "import torch\n\n\ndef build(pipe):\n    pipe.unet = pipe.transformer\n    pipe.unet.compile_repeated_blocks()  # c\n")


_TINY = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 4)
"""


def test_a_regional_path_the_models_class_does_not_set_is_refused_with_a_near_name(tmp_path):
    """`regional: blokcs` was written as `for block in model.blokcs:` with exit 0: a loop that
    raises AttributeError when the program runs."""
    from rewriter.errors import StackpartError

    (tmp_path / "model.py").write_text(_TINY)
    body = "import torch\nfrom model import TinyLM\n\n\ndef build():\n    model = TinyLM().eval()\n    model = torch.compile(model)\n    return model\n"
    with pytest.raises(StackpartError, match=r"TinyLM \(model.py\) sets no attribute 'blokcs'.*did you mean 'blocks'\?"):
        _rewrite(tmp_path, body, "{regional: blokcs}")
    assert "for block in model.blocks:" in _rewrite(tmp_path, body, "{regional: blocks}")
    # a class the source does not define (an installed library's) is not checked: the run judges
    lib = "import torch\nfrom transformers import AutoModel\n\n\ndef build():\n    model = AutoModel.from_config(None)\n    model = torch.compile(model)\n    return model\n"
    assert "for block in model.anything.children():" in _rewrite(tmp_path, lib, "{regional: anything}")


def test_a_regional_path_the_class_may_provide_otherwise_is_not_refused(tmp_path):
    """A @property, or a class that forwards attributes (__getattr__), was refused as "sets no
    attribute"; a sibling that does not parse raised KeyError (a traceback) from the check."""
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self._blocks = nn.ModuleList()\n\n    @property\n    def blocks(self):\n        return self._blocks\n\n\n"
        "class Wrap(nn.Module):\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n")
    for cls in ("Net", "Wrap"):
        body = f"import torch\nfrom model import {cls}\n\n\ndef build():\n    model = {cls}()\n    model = torch.compile(model)\n    return model\n"
        assert "for block in model.blocks.children():" in _rewrite(tmp_path, body, "{regional: blocks}")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "mod.py").write_text("x = (\n")
    body = "import torch\nfrom broken.mod import Net\n\n\ndef build():\n    model = Net()\n    model = torch.compile(model)\n    return model\n"
    assert "for block in model.blocks.children():" in _rewrite(tmp_path, body, "{regional: blocks}")


def test_a_regional_edit_is_refused_where_the_program_reaches_into_the_wrapper(tmp_path):
    """`compiled = torch.compile(model)` turned regional left `compiled` the module itself, and the
    program's `torch.save(compiled._orig_mod.state_dict(), ...)` raised AttributeError after apply."""
    from rewriter.errors import StackpartError

    body = ("import torch\nfrom model import Net\n\n\ndef build():\n    model = Net()\n    compiled = torch.compile(model)\n"
            "    torch.save(compiled._orig_mod.state_dict(), 'ckpt.pt')\n    return compiled\n")
    with pytest.raises(StackpartError, match=r"train.py:8: own_call: regional: the function reads compiled._orig_mod"):
        _rewrite(tmp_path, body, "{regional: layers}")


def test_a_regional_edit_is_refused_where_the_program_also_runs_the_module_eager(tmp_path):
    """`cmodel = torch.compile(model)` for training and `model(x)` for an eager evaluation: the
    regional form compiles model's own blocks in place, so that evaluation would run compiled."""
    from rewriter.errors import StackpartError

    body = ("import torch\nfrom model import Net\n\n\ndef build(x):\n    model = Net()\n    cmodel = torch.compile(model)\n"
            "    loss = cmodel(x).sum()\n    with torch.no_grad():\n        ev = model(x)\n    return loss, ev\n")
    with pytest.raises(StackpartError, match=r"train.py:10: own_call: regional: the function also calls model itself"):
        _rewrite(tmp_path, body, "{regional: layers}")
    only = body.replace("        ev = model(x)\n", "        ev = cmodel(x)\n")  # the compiled name alone: rewritten
    new = _rewrite(tmp_path, only, "{regional: layers}")
    assert "    cmodel = model\n    for block in cmodel.layers" in new and "block.compile()" in new, new


def test_a_regional_edit_of_a_compile_regional_already_over_another_path_is_refused(tmp_path):
    """On a tree already applied, `regional: blocks` wrote `for block in layer.blocks:` inside the
    program's `for layer in model.layers:` loop, which raised at run time."""
    from rewriter.errors import StackpartError

    body = "import torch\n\n\ndef build(model):\n    for layer in model.layers:\n        layer.compile()\n    return model\n"
    with pytest.raises(StackpartError, match=r"regional already, over model.layers; regional: blocks would nest"):
        _rewrite(tmp_path, body, "{regional: blocks}")
    assert _rewrite(tmp_path, body, "{regional: layers}") == body  # the same path: as asked already


_DICT_MODEL = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc(x)


class Net(nn.Module):
    def __init__(self, d=4, n=3):
        super().__init__()
        self.blocks = nn.ModuleDict({f"b{i}": Block(d) for i in range(n)})
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        for blk in self.blocks.children():
            x = blk(x)
        return self.head(x)


def make(kind, n=3):
    blocks = [Block(4) for _ in range(n)]
    if kind == "dict":
        return nn.ModuleDict({f"b{i}": b for i, b in enumerate(blocks)})
    return nn.Sequential(*blocks) if kind == "seq" else nn.ModuleList(blocks)


class Made(Net):
    def __init__(self, kind):
        super().__init__()
        self.blocks = make(kind)
"""


def _run_build(tmp_path: Path, text: str, *args):
    """``build(*args)`` of the rewritten ``train.py``, imported from ``tmp_path``."""
    import importlib
    import sys

    (tmp_path / "train.py").write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        for name in ("train", "model"):
            sys.modules.pop(name, None)
        return importlib.import_module("train").build(*args)
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("train", "model"):
            sys.modules.pop(name, None)


def test_a_regional_loop_over_a_module_dict_walks_its_values(tmp_path):
    """`for block in model.blocks:` over an nn.ModuleDict walked its keys and raised `'str' object
    has no attribute 'compile'` when the program ran; the container's class is in the source."""
    import torch

    (tmp_path / "model.py").write_text(_DICT_MODEL)
    line = '    model.compile(backend="eager")\n'
    body = f"import torch\nfrom model import Net\n\n\ndef build():\n    model = Net().eval()\n{line}    return model\n"
    new = _rewrite(tmp_path, body, "{regional: blocks}")
    assert new == body.replace(line, '    for block in model.blocks.values():\n        block.compile(backend="eager")\n'), new
    assert _rewrite(tmp_path, new, "{regional: blocks}") == new  # idempotent
    model = _run_build(tmp_path, new)
    compiled = [name for name, m in model.named_modules() if m._compiled_call_impl is not None]
    assert compiled == ["blocks.b0", "blocks.b1", "blocks.b2"], compiled
    assert model(torch.randn(2, 4)).shape == (2, 2)


@pytest.mark.parametrize("kind", ["list", "seq", "dict"])
def test_a_regional_loop_over_a_container_the_source_does_not_say_compiles_exactly_the_blocks(tmp_path, kind):
    """Where the container comes from a factory, the loop walks `.children()`: for a ModuleList,
    a Sequential and a ModuleDict alike it compiles each block once, and nothing else."""
    import torch

    (tmp_path / "model.py").write_text(_DICT_MODEL)
    body = ("import torch\nfrom model import Made\n\n\ndef build(kind):\n    model = Made(kind)\n"
            '    model = torch.compile(model, backend="eager")\n    return model\n')
    new = _rewrite(tmp_path, body, "{regional: blocks}")
    assert '    for block in model.blocks.children():\n        block.compile(backend="eager")\n' in new, new
    model = _run_build(tmp_path, new, kind)
    compiled = [name for name, m in model.named_modules() if m._compiled_call_impl is not None]
    assert compiled == [f"blocks.{k}" for k in (("b0", "b1", "b2") if kind == "dict" else ("0", "1", "2"))], compiled
    assert model(torch.randn(2, 4)).shape == (2, 2)


def test_a_dotted_regional_path_reads_the_container_through_module_dict_keys(tmp_path):
    """nanoGPT's `self.transformer = nn.ModuleDict(dict(h=nn.ModuleList(...)))`: `transformer.h`
    is a ModuleList, walked as it is."""
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass GPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(4, 4), h=nn.ModuleList([nn.Linear(4, 4)])))\n"
        "        self.towers = nn.ModuleDict({'a': nn.ModuleDict({'x': nn.Linear(4, 4)})})\n")
    body = "import torch\nfrom model import GPT\n\n\ndef build():\n    model = GPT()\n    model.compile()\n    return model\n"
    assert "for block in model.transformer.h:\n" in _rewrite(tmp_path, body, "{regional: transformer.h}")
    # the class called inside the compile (torch.compile(GPT().eval())) is read too
    called = "import torch\nfrom model import GPT\n\n\ndef build():\n    return torch.compile(GPT().eval())\n"
    assert "for block in model.transformer.h:\n" in _rewrite(tmp_path, called, "{regional: transformer.h}")
    assert "for block in model.towers.a.values():\n" in _rewrite(tmp_path, body, "{regional: towers.a}")


def test_diagnose_proposes_a_regional_loop_only_where_it_compiles_exactly_the_blocks():
    """At run time the container's class is known: a ModuleDict's blocks are a regional path (the
    rewrite walks its values), a container that holds another module beside the blocks is not (a
    loop over it would compile that module too)."""
    import torch.nn as nn

    from rewriter.diagnose.own_candidates import _not_only_the_blocks
    from rewriter.engine.blocks import find_block_groups

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.ln = nn.LayerNorm(4)

    def first(model):
        g = find_block_groups(model)[0]
        return {"cls": g.cls, "modules": g.modules}, g.containers[0].name

    for container in (nn.ModuleDict({f"b{i}": Block() for i in range(3)}), nn.ModuleList([Block() for _ in range(3)]),
                      nn.Sequential(*[Block() for _ in range(3)])):
        model = nn.Module()
        model.blocks = container
        block, name = first(model)
        assert name == "blocks" and _not_only_the_blocks(model, name, block) is None
    model = nn.Module()
    model.blocks = nn.ModuleList([Block(), Block(), Block(), nn.Linear(4, 4)])
    block, name = first(model)
    assert _not_only_the_blocks(model, name, block) == (
        "blocks holds Linear beside its Block blocks: a loop over it would compile those too")


def test_a_module_level_rebinding_is_editable_through_its_function(tmp_path):
    """``step = torch.compile(step, fullgraph=True)`` at module level: the rewrite edits that call
    through the target ``train.py::step``, so the search's variants of it are proposed (it read
    "the compile runs at module level, which no plan target names"); regional alone is refused."""
    from rewriter.cli import main
    from rewriter.diagnose.own_compile import own_compiles

    (tmp_path / "train.py").write_text(
        "import torch\n\n\ndef step(x):\n    return x.sum()\n\n\nstep = torch.compile(step, fullgraph=True)\n")
    [own] = own_compiles(tmp_path)
    assert (own.site, own.why_not) == ("train.py::step", None), own
    assert own.can("fullgraph") is None and own.can("disable") is None and "no blocks" in own.can("regional")
    assert own.value("fullgraph") is True
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n  - action: compile\n    target: train.py::step\n    own_call: {fullgraph: false}\n")
    assert main(["rewrite", "--plan", str(plan), str(tmp_path), "--apply", "--no-validate"]) == 0
    assert "step = torch.compile(step)\n" in (tmp_path / "train.py").read_text()


def test_a_regional_refusal_lists_only_the_attributes_that_can_hold_blocks(tmp_path):
    """The hint names what ``__init__`` (the class's and its bases') assigns on ``self``: the
    containers a regional path may name; methods (``forward``) and attributes only read are not
    among them."""
    from rewriter.errors import StackpartError

    (tmp_path / "model.py").write_text(
        _TINY.replace("class TinyLM(nn.Module):", "class Base(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                      "        self.embed = nn.Linear(4, 4)\n\n\nclass TinyLM(Base):")
        + "\n    def forward(self, x):\n        return self.head(self.embed(x))\n\n    def extra_repr(self):\n        return ''\n")
    body = "import torch\nfrom model import TinyLM\n\n\ndef build():\n    model = TinyLM().eval()\n    model = torch.compile(model)\n    return model\n"
    with pytest.raises(StackpartError) as err:
        _rewrite(tmp_path, body, "{regional: blokcs}")
    assert err.value.hint is not None and err.value.hint.endswith("(its attributes: blocks, embed, head)"), err.value.hint
    assert "did you mean 'blocks'?" in err.value.message


FACTORIES = """import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return x


def build():
    return Net().eval()


def build_bound():
    m = Net()
    m.train(False)
    return m


def build_either(big):
    if big:
        return nn.Linear(4, 4)
    return Net()


def build_built():
    return build()


def helper():
    return 3


def main():
    def local():
        return Net()

    a = torch.compile(build())
    b = build_bound()
    b = torch.compile(b)
    c = torch.compile(build_either(True))
    d = torch.compile(build_built())
    e = helper()
    e = torch.compile(e)
    f = torch.compile(local())
    return a(1), b(1), c(1), d(1), e(1), f(1)
"""


def test_a_model_made_by_a_factory_of_the_file_is_read_as_the_class_it_returns(tmp_path):
    """``model = build(); model = torch.compile(model)`` compiles what ``build`` returns: read one
    call deep as that class; a function that does not say one class (another factory, two classes,
    no module, a function of the caller's own body) is unknown, never a class named after it."""
    (tmp_path / "m.py").write_text(FACTORIES)
    covers = {o.code.split(" = ")[0]: o.covers for o in own_compiles(tmp_path)}
    assert covers == {"torch.compile(build())": ("class", "Net"), "torch.compile(b)": ("class", "Net"),
                      "torch.compile(build_either(True))": ("unknown", ""),
                      "torch.compile(build_built())": ("unknown", ""), "torch.compile(e)": ("unknown", ""),
                      "torch.compile(local())": ("unknown", "")}, covers


def test_a_rebinding_through_torch_compiles_decorator_is_read_at_the_inner_call(tmp_path):
    """``step = torch.compile(mode="max-autotune")(step)``: diagnose reads the rebinding's options
    from the inner call, as the rewrite edits them (its current mode read "default" from the outer
    call, which passes only the function)."""
    (tmp_path / "train.py").write_text(
        "import torch\n\n\ndef step(x):\n    return x.sum()\n\n\nstep = torch.compile(mode=\"max-autotune\")(step)\n")
    [own] = own_compiles(tmp_path)
    assert (own.site, own.why_not, own.mode) == ("train.py::step", None, "max-autotune"), own
    assert own.value("mode") == "max-autotune" and own.value("fullgraph") is False
