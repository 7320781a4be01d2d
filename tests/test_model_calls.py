"""A call turned off (``disable=True``) in a helper the harness's model function calls is one the
harness runs: diagnose follows the model function's calls into SRC's functions
(:mod:`rewriter.diagnose.model_calls`), in its file and in others, and proposes turning the call
back on (``as-is+compile-on``); a helper the model function never reaches is pruned, and says so
(docs/design.md, "The search")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rewriter.diagnose.candidates import OwnScope
from rewriter.diagnose.evidence import Evidence
from rewriter.diagnose.model_calls import calls_from
from rewriter.diagnose.own_candidates import COMPILE_ON, compile_on
from rewriter.diagnose.own_compile import OFF_SAID, harness_entries, off_compiles
from rewriter.plan import parse_plan

MODEL = '''\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
'''

#: The helper holding the call turned off, in a file of its own; ``main`` calls it too, from a
#: script the harness does not run.
NETS = '''\
import torch
from model import Net


def make_net():
    return torch.compile(Net(), backend="eager", disable=True)
'''

HARNESS = '''\
import torch
from nets import make_net


def build_model():
    return make_net()


def make_inputs(batch: int = 4):
    return (torch.randn(batch, 8),)
'''


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_calls_are_followed_into_other_files_through_their_imports_and_each_function_once(tmp_path):
    """``from nets import make_net``, ``import helpers; helpers.other()``, a package's re-export, a
    function of a class of the file, a class's ``__init__``; ``make_net`` and ``other`` call each
    other (a cycle); a local named like a module of SRC is not that module."""
    _tree(tmp_path, {
        "harness.py": "import helpers\nfrom nets import make_net\nfrom pkg import deep\n\n\ndef build_model():\n"
                      "    nets = make_net()\n    helpers.other()\n    nets.unrelated()\n    return deep()\n",
        "nets.py": "from helpers import other\n\n\ndef make_net():\n    return other()\n\n\ndef unrelated():\n    return 0\n",
        "helpers.py": "import nets\n\n\nclass F:\n    def __init__(self):\n        self.n = 1\n\n    @staticmethod\n"
                      "    def make():\n        return F()\n\n\ndef other():\n    F.make()\n    return nets.make_net\n",
        "pkg/__init__.py": "from .inner import deep\n",
        "pkg/inner.py": "def deep():\n    return 1\n",
    })
    reached = calls_from(tmp_path, ["harness.py::build_model"])
    assert reached == {
        "nets.py::make_net": ("harness.py::build_model", "nets.py::make_net"),
        "helpers.py::other": ("harness.py::build_model", "helpers.py::other"),
        "pkg/inner.py::deep": ("harness.py::build_model", "pkg/inner.py::deep"),
        "helpers.py::F.make": ("harness.py::build_model", "helpers.py::other", "helpers.py::F.make"),
        "helpers.py::F.__init__": ("harness.py::build_model", "helpers.py::other", "helpers.py::F.make",
                                   "helpers.py::F.__init__"),
    }, reached
    assert not (tmp_path / ".stackpart_cache").exists()  # check's index never writes into SRC here


def test_the_depth_is_bounded(tmp_path):
    chain = "".join(f"def f{i}():\n    return f{i + 1}()\n\n\n" for i in range(6)) + "def f6():\n    return 0\n"
    _tree(tmp_path, {"m.py": chain})
    assert sorted(calls_from(tmp_path, ["m.py::f0"], depth=2)) == ["m.py::f1", "m.py::f2"]
    assert calls_from(tmp_path, ["m.py::f0"])["m.py::f4"] == tuple(f"m.py::f{i}" for i in range(5))
    assert "m.py::f5" not in calls_from(tmp_path, ["m.py::f0"])  # 5 calls deep
    assert calls_from(tmp_path, ["m.py::nothing"]) == {}


def _ctx(src: Path):
    import torch

    spec = parse_plan("version: 1\nharness: {file: harness.py, model: build_model}\nactions: []\n").plan.harness
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    return SimpleNamespace(backend="eager", session=SimpleNamespace(spec=spec, src=src), evidence=Evidence(), amortization_assumed=True,
                           reference=lambda: (model, None, None))


@pytest.mark.parametrize("where", ["other file", "same file"])
def test_a_call_in_a_helper_the_model_function_calls_is_turned_back_on(tmp_path, where):
    if where == "other file":
        _tree(tmp_path, {"model.py": MODEL, "nets.py": NETS, "harness.py": HARNESS})
        site, chain = "nets.py::make_net", "harness.py::build_model -> nets.py::make_net"
    else:
        harness = HARNESS.replace("from nets import make_net\n", "from model import Net\n") + "\n\n" + NETS.split("\n\n\n", 1)[1]
        _tree(tmp_path, {"model.py": MODEL, "harness.py": harness})
        site, chain = "harness.py::make_net", "harness.py::build_model -> harness.py::make_net"
    ctx = _ctx(tmp_path)
    [own] = off_compiles(tmp_path, entries=harness_entries(ctx.session.spec))
    assert own.site == site and own.idle is None
    pruned: list[str] = []
    [(name, decision)] = compile_on(ctx, OwnScope(off=[(own, "whole")]), pruned)
    [action] = decision.plan.actions
    assert (name, action.target, action.own_call.edits(), pruned) == (COMPILE_ON, site, {"disable": False}, [])
    assert action.why.endswith(f"; the harness runs it through {chain}"), action.why


def test_a_helper_the_model_function_does_not_reach_is_pruned_with_the_reason(tmp_path):
    """``make_net`` is called by ``train.py``'s ``main`` only: the harness's model function builds
    its own model, so turning that call on would measure nothing."""
    _tree(tmp_path, {"model.py": MODEL, "nets.py": NETS,
                     "harness.py": HARNESS.replace("from nets import make_net\n", "from model import Net\n")
                     .replace("return make_net()", "return Net()"),
                     "train.py": "from nets import make_net\n\n\ndef main():\n    make_net()(1)\n"})
    ctx = _ctx(tmp_path)
    [own] = off_compiles(tmp_path, entries=harness_entries(ctx.session.spec))
    pruned: list[str] = []
    assert compile_on(ctx, OwnScope(off=[(own, "whole")]), pruned) == []
    [why] = pruned
    assert why.startswith(f"{COMPILE_ON}: the harness does not run the program's call nets.py:6: "), why
    assert "not in the harness's model function harness.py::build_model, a function of SRC it calls" in why, why


@pytest.mark.slow
def test_diagnose_measures_the_call_turned_off_in_a_helper_of_another_file(tmp_path, monkeypatch):
    """End to end on CPU (eager backend): ``build_model`` returns ``make_net()`` of nets.py, whose
    ``torch.compile(Net(), disable=True)`` is listed as turned off; ``as-is+compile-on`` is
    measured (a cold compile, graphs, numerics ok) and no whole-model compile of ours is proposed
    over it."""
    from rewriter.diagnose.runner import diagnose, harness_from_flags

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = _tree(tmp_path / "src", {"model.py": MODEL, "nets.py": NETS, "harness.py": HARNESS})
    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 4}], mode=None,
                                 dtype=None, device="cpu")
    outcome = diagnose(spec, src, tmp_path / "out" / "plan.yaml", backend="eager", only={"search"})
    search = outcome.search
    assert search.own_off_setup == [f'nets.py:6: torch.compile(Net(), backend="eager", disable=True) ({OFF_SAID})']
    row = {r["candidate"]: r for r in search.table()}[COMPILE_ON]
    assert not row["status"].startswith("failed") and row["numerics"] == "ok" and row["graphs"] >= 1, row
    assert row["cold_compile_s"], row
    assert not any(p.startswith(f"{COMPILE_ON}:") for p in search.pruned), search.pruned
    assert any("is turned off (disable=True)" in p for p in search.pruned), search.pruned
