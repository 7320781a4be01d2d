"""A model's own list of its repeated blocks, ``_repeated_blocks`` (diffusers' regional
compilation), read without diffusers: toy ``nn.Module`` s.

The declared classes become the per-block targets, first, even where stackpart's repeated-block
detection would pick another class or none; a name that matches no submodule is said in a note
and detection is the fallback. The diffusers model itself is in test_diffusers_real.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from rewriter.diagnose.declared import read
from rewriter.diagnose.rungs.granularity import find_blocks

HERE = Path(__file__).resolve().parent
THIS = Path(__file__).name


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4)

    def forward(self, x):
        return self.q(x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attn()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.attn(x))


class Big(nn.Module):
    """Larger than Block: stackpart's own detection picks it first."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(4, 64), nn.Linear(64, 4))

    def forward(self, x):
        return self.fc(x)


class Model(nn.Module):
    _repeated_blocks = ["Block", "Attn", "Missing"]

    def __init__(self) -> None:
        super().__init__()
        self.first = Block()  # held directly, not in a container: the finder never sees it
        self.blocks = nn.ModuleList([Block()])
        self.bigs = nn.ModuleList([Big(), Big()])

    def forward(self, x):
        x = self.first(x)
        for b in [*self.blocks, *self.bigs]:
            x = b(x)
        return x


class Undeclared(Model):
    _repeated_blocks: list[str] = []  # diffusers' ModelMixin default: nothing declared


class Wrapper(nn.Module):
    """A harness's own wrapper around a model that declares its blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Model()
        self.head = Block()  # outside the declarer: not one of its blocks

    def forward(self, x):
        return self.head(self.inner(x))


def test_declared_classes_are_matched_by_class_name_in_declaration_order():
    d = read(Model())
    assert d.declarers == ["Model._repeated_blocks"] and d.source == "Model._repeated_blocks"
    assert d.names == ["Block", "Attn", "Missing"]
    assert d.classes == [Block]
    assert [q for q, _ in d.instances[0]] == ["first", "blocks.0"]
    # Attn lies inside every Block: part of that region, not a second one
    assert d.nested == [("Attn", "Block")]
    assert d.unmatched == [("Model._repeated_blocks", "Missing")]
    notes = d.notes()
    assert any("'Missing', which is the class of no submodule" in n for n in notes), notes
    assert not any("stackpart's own repeated-block detection" in n for n in notes), notes  # Block matched


def test_declared_blocks_come_first_even_where_detection_picks_another_class():
    model = Model()
    blocks = find_blocks(model, HERE, read(model))
    assert [b["cls"] for b in blocks] == [Block, Big]
    first = blocks[0]
    assert first["declared"] == "Model._repeated_blocks"
    assert first["target"] == f"{THIS}::Block"
    assert first["instances"] == ["first", "blocks.0"] and len(first["modules"]) == 2
    # the direct attribute is its own holder: owner the model, attr its name; the list is a container
    assert first["attr"] == "first" and first["owner"] is model
    assert [c["name"] for c in first["containers"]] == ["first", "blocks"]
    assert blocks[1]["declared"] is None  # the finder's class, after
    # without a declaration, the finder alone: Big first, the single listed Block not at all
    plain = find_blocks(model, HERE)
    assert [b["cls"] for b in plain] == [Big]


def test_an_empty_declaration_is_no_declaration():
    d = read(Undeclared())
    assert d.declarers == [] and d.classes == [] and d.notes() == []
    assert [b["cls"] for b in find_blocks(Undeclared(), HERE, d)] == [Big]


def test_a_declaration_on_a_submodule_covers_only_that_submodule():
    d = read(Wrapper())
    assert d.declarers == ["Model._repeated_blocks"]
    assert [q for q, _ in d.instances[0]] == ["inner.first", "inner.blocks.0"]  # not "head"


def _reading(d) -> tuple:
    return d.declarers, d.names, d.classes, [[q for q, _ in i] for i in d.instances], d.unmatched, d.nested


def test_a_model_wrapped_by_torch_compile_declares_once_and_its_paths_are_its_own():
    """The program's ``torch.compile(model)``: the ``OptimizedModule`` answers for the model's
    ``_repeated_blocks`` but is no declarer, and no path carries its ``_orig_mod.``."""
    from rewriter.engine.variants import repeated_blocks

    model = Model()
    wrapped = torch.compile(model, backend="eager")
    assert _reading(read(wrapped)) == _reading(read(model))
    blocks = find_blocks(wrapped, HERE, read(wrapped))
    assert blocks[0]["declared"] == "Model._repeated_blocks"
    assert blocks[0]["instances"] == ["first", "blocks.0"] and blocks[1]["instances"] == ["bigs.0", "bigs.1"]
    assert [c["name"] for b in blocks for c in b["containers"]] == ["first", "blocks", "bigs"]
    assert blocks[0]["owner"] is model and blocks[0]["owner_target"] == f"{THIS}::Model"
    assert [n for n, _ in repeated_blocks(wrapped)] == ["bigs"]
    # a wrapper inside the harness's model: its paths lose the hop, its class is the owner's
    outer = Wrapper()
    outer.inner = torch.compile(outer.inner, backend="eager")
    d = read(outer)
    assert d.declarers == ["Model._repeated_blocks"] and d.unmatched == [("Model._repeated_blocks", "Missing")]
    assert [q for q, _ in d.instances[0]] == ["inner.first", "inner.blocks.0"]
    inner = find_blocks(outer, HERE, d)[0]
    assert inner["instances"] == ["inner.first", "inner.blocks.0"] and inner["containers"][1]["owner_target"] == f"{THIS}::Model"


@pytest.mark.parametrize("value, says", [
    ("Block", "Bad._repeated_blocks = 'Block' is not a list of class names: ignored"),
    ([Block], "is not a list of class names: ignored"),
])
def test_a_malformed_declaration_is_ignored_with_a_note_and_detection_is_the_fallback(value, says):
    Bad = type("Bad", (Model,), {"_repeated_blocks": value})
    model = Bad()
    d = read(model)
    assert d.classes == [] and any(says in n for n in d.notes()), d.notes()
    assert any("stackpart's own repeated-block detection" in n for n in d.notes())
    assert [b["cls"] for b in find_blocks(model, HERE, d)] == [Big]


def test_only_unmatched_names_fall_back_to_detection():
    Odd = type("Odd", (Model,), {"_repeated_blocks": ("Nothing",)})
    model = Odd()
    d = read(model)
    assert d.unmatched == [("Odd._repeated_blocks", "Nothing")]
    assert any("stackpart's own repeated-block detection" in n for n in d.notes())
    assert [b["cls"] for b in find_blocks(model, HERE, d)] == [Big]


def test_a_declared_class_without_a_target_is_said_and_skipped():
    local = type("Local", (nn.Module,), {"__init__": lambda self: (nn.Module.__init__(self), setattr(self, "fc", nn.Linear(2, 2)))[0],
                                          "__qualname__": "f.<locals>.Local"})
    Holder = type("Holder", (nn.Module,), {"_repeated_blocks": ["Local"], "__init__": lambda self: (
        nn.Module.__init__(self), setattr(self, "a", local()), setattr(self, "b", local()))[0]})
    model = Holder()
    d = read(model)
    assert d.classes == [local]
    assert find_blocks(model, HERE, d) == []
    assert any("f.<locals>.Local, defined inside a function (no import path names it): not a compile target" in n
               for n in d.notes()), d.notes()
    assert any("stackpart's own repeated-block detection" in n for n in d.notes())


def test_why_a_class_has_no_target_names_the_reason():
    from rewriter.diagnose.locate import untargetable

    assert untargetable(nn.Linear) == "torch.nn.modules.linear.Linear, torch's own (a torch module is not a block to plan)"
    Main = type("Main", (nn.Module,), {"__module__": "__main__"})
    assert untargetable(Main) == "__main__.Main, defined in __main__ (no import path names it)"
    Gone = type("Gone", (nn.Module,), {"__module__": "not_a_module_anywhere"})
    assert untargetable(Gone) == "not_a_module_anywhere.Gone, neither under SRC nor importable by path"


MODEL = textwrap.dedent('''\
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.fc = nn.Linear(w, w)
            self.fc2 = nn.Linear(w, w)

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc(x)))


    class Mixer(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.norm = nn.LayerNorm(w)
            self.fc = nn.Linear(w, w)

        def forward(self, x):
            return x + self.fc(self.norm(x))


    class Net(nn.Module):
        _repeated_blocks = ["Block", "Mixer", "Nope"]

        def __init__(self, w=64):
            super().__init__()
            self.blocks = nn.ModuleList(Block(w) for _ in range(3))
            self.mixer = Mixer(w)  # one instance, no container: only the declaration names it

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.mixer(x)
''')

HARNESS = textwrap.dedent('''\
    import torch
    from model import Net


    def build_model():
        return Net()


    def make_inputs(batch: int = 8):
        return (torch.randn(batch, 16, 64),)
''')


def test_diagnose_plans_the_declared_blocks_of_a_model_under_src(tmp_path):
    """The rule's per-block plan (the rungs it rests on, eager backend) compiles both declared
    classes, the one-instance Mixer included, and says the targets came from the declaration."""
    import json

    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.plan import load_plan

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 8}],
                                 mode=None, dtype=None, device="cpu")
    out = tmp_path / "out"
    diagnose(spec, src, out / "plan.yaml", backend="eager", only={"graph_breaks", "recompiles", "granularity"})
    plan = load_plan(out / "plan.yaml").plan
    compiles = [a for a in plan.actions if a.action == "compile"]
    assert [(a.target, a.strategy) for a in compiles] == [("model.py::Block", "region"), ("model.py::Mixer", "region")]
    assert all("declared: Net._repeated_blocks lists" in a.why for a in compiles), [a.why for a in compiles]
    assert plan.site is None  # under SRC: decorators, no site
    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    gran = next(r for r in report["rungs"] if r["name"] == "granularity")
    assert gran["measurement"]["declared"]["targets"] == ["model.py::Block", "model.py::Mixer"], gran
    assert "declared by Net._repeated_blocks" in gran["verdict"], gran
    assert "'Nope', which is the class of no submodule" in json.dumps(report)


def test_a_declaration_that_raises_when_read_is_ignored_with_a_note():
    """A user's ``_repeated_blocks`` property that raises must not stop diagnose: it is a
    declaration that does not hold, said once, and detection is the fallback."""

    class Raising(Model):
        @property
        def _repeated_blocks(self):  # type: ignore[override]
            raise RuntimeError("not configured")

    model = Raising()
    d = read(model)
    assert d.classes == [] and any("Raising._repeated_blocks raised RuntimeError when read (not configured): ignored" in n
                                   for n in d.notes()), d.notes()
    assert [b["cls"] for b in find_blocks(model, HERE, d)] == [Big]


TWO = textwrap.dedent('''\
    import torch
    from torch import nn


    class Pre(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.fc = nn.Linear(w, w)

        def forward(self, c):
            return self.fc(c)


    class Blk(nn.Module):
        def __init__(self, w, i):
            super().__init__()
            self.fc = nn.Linear(w, w)
            self.i = i

        def forward(self, x):
            x = x + self.fc(x)
            if self.i == 0:  # per-instance state: a value guard, one graph per instance
                x = x * 2
            return x


    class Net(nn.Module):
        _repeated_blocks = ["Pre", "Blk"]

        def __init__(self, w=16):
            super().__init__()
            self.register_buffer("cond", torch.randn(2, w))  # the same shape at every batch
            self.pres = nn.ModuleList(Pre(w) for _ in range(2))
            self.blks = nn.ModuleList(Blk(w, i) for i in range(3))

        def forward(self, x):
            c = self.cond
            for p in self.pres:
                c = p(c)
            for b in self.blks:
                x = b(x)
            return x + c.mean()
''')


def _diagnose_two(tmp_path, model_text: str, only: set[str]):
    """diagnose (CPU, eager) on ``model_text`` as SRC/model.py at batch 2 and 3, with ``only``
    these rungs; returns the output folder (plan.yaml, stackpart-diagnose/report.json)."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(model_text)
    (src / "harness.py").write_text(HARNESS.replace("(batch, 16, 64)", "(batch, 16)"))
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2}, {"batch": 3}],
                                 mode="inference", dtype=None, device="cpu")
    out = tmp_path / "out"
    diagnose(spec, src, out / "plan.yaml", backend="eager", steps=1, only=only)
    return out


def test_the_recompile_rungs_examine_every_declared_class(tmp_path):
    """Two declared classes, only the second (Blk) recompiling: its input's batch dim varies and
    its instances recompile on self.i. Both rungs read only the first class (Pre), and saw neither."""
    import json

    from rewriter.plan import load_plan

    out = _diagnose_two(tmp_path, TWO, {"graph_breaks", "recompiles", "instance_recompiles", "granularity"})
    rungs = {r["name"]: r for r in json.loads((out / "stackpart-diagnose" / "report.json").read_text())["rungs"]}
    rc, ir = rungs["recompiles"], rungs["instance_recompiles"]
    assert "varying: Blk: arg 0 dim 0" in rc["verdict"], rc["verdict"]
    assert "instances of Blk (guard at model.py:" in ir["verdict"], ir["verdict"]
    assert [c["class"] for c in rc["measurement"]["classes"]] == ["Pre", "Blk"], rc
    assert rc["measurement"]["classes"][0]["varying_block_dims"] == []
    assert rc["measurement"]["classes"][1]["varying_block_dims"] == [{"arg": 0, "dim": 0, "sizes": [2, 3]}], rc
    per = {c["class"]: c for c in ir["measurement"]["classes"]}
    assert per["Pre"]["recompiles"] == 0 and per["Blk"]["recompiles"] > 0, ir["measurement"]
    assert ir["measurement"]["recompiles"] == per["Blk"]["recompiles"]
    assert any(f["kind"] == "guard" and f["function"] == "Blk.forward" for f in ir["findings"]), ir["findings"]
    # the guard is in a compiled block's own forward: never a helper to keep eager
    plan = load_plan(out / "plan.yaml").plan
    assert not [a for a in plan.actions if a.action == "disable"], plan.actions


def test_a_later_declared_class_whose_input_varies_is_marked_dynamic_at_its_own_boundary(tmp_path):
    """Only the second declared class (Blk) sees a varying batch dim; the planner read the first
    class's dims (Pre: none) and wrote no mark_dynamic, so per-block+mark_dynamic was never a
    candidate."""
    from rewriter.plan import load_plan

    body = TWO.replace("        if self.i == 0:  # per-instance state: a value guard, one graph per instance\n"
                       "            x = x * 2\n", "")
    assert "self.i == 0" not in body
    out = _diagnose_two(tmp_path, body, {"graph_breaks", "recompiles", "instance_recompiles", "granularity", "search"})
    plan = load_plan(out / "plan.yaml").plan
    marks = [(a.target, a.arg, a.dim) for a in plan.actions if a.action == "mark_dynamic"]
    assert marks == [("model.py::Net.forward", "x", 0)], plan.actions  # where the Blk instances are called
    assert {a.target for a in plan.actions if a.action == "compile"} == {"model.py::Pre", "model.py::Blk"}
