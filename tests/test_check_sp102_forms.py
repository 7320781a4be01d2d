"""SP102 on the compile forms users write beside ``x = torch.compile(x)``: a compiled bound method
(``model.forward = torch.compile(model.forward)``) and ``self = torch.compile(self)``, and where
its fix ``x.compile()`` is safe (no other name holds the module). Each claim the messages make is
checked against torch itself (``backend="eager"``: no Inductor)."""

from __future__ import annotations

import io
import pickle

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules.sp102_compile_wraps_module import CompileWrapsModule

NET = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    def step(self, x):
        return self.fc(x) * 2
"""


def _sp102(code: str):
    result = check_text(code, "m.py", [CompileWrapsModule])
    assert result.error is None
    return result.findings


def test_a_compiled_bound_forward_is_not_reported_for_state_dict_keys():
    code = NET + "\nmodel = Net()\nmodel.forward = torch.compile(model.forward)\ntorch.save(model.state_dict(), 'c.pt')\n"
    assert _sp102(code) == []
    # no suggestion of `model.forward.compile(...)`, which does not exist, anywhere
    code2 = NET + "\nmodel = Net()\nmodel.step = torch.compile(model.step, fullgraph=True)\n"
    assert _sp102(code2) == []


def test_a_compiled_bound_method_on_a_pickled_module_is_reported_with_a_fix_that_exists():
    code = NET + "\nmodel = Net()\nmodel.forward = torch.compile(model.forward)\ntorch.save(model, 'm.pt')\n"
    [f] = _sp102(code)
    assert f.line == 16 and not f.fixable
    assert "state_dict keys are unchanged" in f.message and "_orig_mod" not in f.message
    assert "`model.compile(...)`" in f.message and "forward.compile" not in f.message
    code2 = NET + "\nmodel = Net()\nmodel.step = torch.compile(model.step)\npickle.dump(model, fh)\nimport pickle\n"
    [g] = _sp102(code2.replace("import torch\n", "import pickle\nimport torch\n", 1))
    assert "`@torch.compile` on `Net.step`" in g.message and "step.compile" not in g.message


def test_an_attribute_holding_a_module_is_still_the_wrapper_case():
    code = NET + "\nmodel = Net()\nmodel.fc = torch.compile(model.fc)\n"
    [f] = _sp102(code)
    assert "_orig_mod." in f.message


def test_self_rebinding_is_reported_as_compiling_nothing():
    code = NET.replace("        self.fc = nn.Linear(4, 4)\n", "        self.fc = nn.Linear(4, 4)\n        self = torch.compile(self)\n")
    [f] = _sp102(code)
    assert f.line == 8 and not f.fixable
    assert "local name `self`" in f.message and "compiles nothing" in f.message
    assert "_orig_mod" not in f.message  # no state_dict here: not the cause
    returned = NET + "\n    def compiled(self):\n        self = torch.compile(self)\n        return self\n"
    assert _sp102(returned) == []  # the caller gets the wrapper: the ordinary form, no state_dict use


def test_the_claims_hold_in_torch(tmp_path, monkeypatch):
    import importlib

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    (tmp_path / "sp102_net.py").write_text(NET)  # an importable class: pickle finds it by name
    monkeypatch.syspath_prepend(str(tmp_path))
    Net = importlib.import_module("sp102_net").Net
    torch._dynamo.reset()
    model = Net()
    model.forward = torch.compile(model.forward, backend="eager")
    model(torch.ones(2, 4))
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"]  # keys unchanged
    with pytest.raises(pickle.PicklingError, match="not the same object"):
        torch.save(model, io.BytesIO())
    fixed = Net()
    fixed.compile(backend="eager")
    fixed(torch.ones(2, 4))
    torch.save(fixed, io.BytesIO())  # the fix pickles
    assert not hasattr(fixed.forward, "compile")  # `model.forward.compile(...)` does not exist

    class Rebinds(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self = torch.compile(self, backend="eager")  # noqa: PLW0642

        def forward(self, x):
            return self.fc(x)

    torch._dynamo.reset()
    counters.clear()
    Rebinds()(torch.ones(2, 4))
    assert counters["stats"]["unique_graphs"] == 0  # nothing was compiled


SHARED = """\
import torch
from torch import nn

model = nn.Linear(4, 4)
{between}
model = torch.compile(model)  # compile it
torch.save(model.state_dict(), "c.pt")
"""


@pytest.mark.parametrize("between", [
    "eager = model",
    "keep(model)",
    "models = [model]",
    "models.append(model)",
    "holder.net = model",
    "model = model.get_submodule('fc')",
])
def test_no_safe_fix_where_another_name_may_hold_the_module(between):
    """``.compile()`` compiles the object in place: a name bound to it before the compile (an
    alias, an argument, a list, an attribute) would run compiled where it ran eager."""
    code = SHARED.format(between=between)
    [f] = _sp102(code)
    assert f.line == 6 and not f.fixable
    assert "not applied by --fix" in f.message and "line 5" in f.message
    assert check_text(code, "m.py", [CompileWrapsModule], fix=True).fixed is None


@pytest.mark.parametrize("between", ["model.to('cpu')", "model = model.eval()", "x = 1", "def f():\n    return 1"])
def test_safe_fix_where_the_module_is_the_names_alone(between):
    code = SHARED.format(between=between)
    [f] = _sp102(code)
    assert f.fixable and "not applied" not in f.message
    fixed = check_text(code, "m.py", [CompileWrapsModule], fix=True).fixed
    assert fixed is not None and "model.compile()  # compile it\n" in fixed


def test_no_safe_fix_where_a_function_reads_the_name_before_the_compile():
    code = SHARED.format(between="def register():\n    registry.append(model)\nregister()")
    [f] = _sp102(code)
    assert not f.fixable and "register" in f.message


def test_no_safe_fix_for_a_parameter_or_a_name_bound_elsewhere():
    param = "import torch\n\ndef train(model):\n    model = torch.compile(model)\n    torch.save(model.state_dict(), 'c.pt')\n"
    [f] = _sp102(param)
    assert not f.fixable and "parameter of `train`" in f.message and "caller" in f.message
    other = "import torch\n\nmodel = nets[0]\nmodel = torch.compile(model)\ntorch.save(model.state_dict(), 'c.pt')\n"
    [g] = _sp102(other)
    assert not g.fixable and "line 3" in g.message


def test_an_annotated_assignment_is_flagged_and_fixed_like_the_plain_one():
    code = SHARED.format(between="x = 1").replace("model = torch.compile(model)", "model: nn.Module = torch.compile(model)")
    [f] = _sp102(code)
    assert f.line == 6 and f.fixable
    fixed = check_text(code, "m.py", [CompileWrapsModule], fix=True).fixed
    assert fixed is not None and "\nmodel.compile()  # compile it\n" in fixed
    shared = SHARED.format(between="eager = model").replace("model = torch.compile(model)", "model: nn.Module = torch.compile(model)")
    [g] = _sp102(shared)
    assert g.line == 6 and not g.fixable


def test_in_place_compile_compiles_every_name_of_the_module():
    """The claim behind withholding the fix: after ``model.compile()`` an alias taken before
    runs compiled, where after ``model = torch.compile(model)`` it ran eager."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()

    torch._dynamo.reset()
    counters.clear()
    model = Net()
    eager = model
    model = torch.compile(model, backend="eager")
    eager(torch.ones(2, 4))
    assert counters["stats"]["unique_graphs"] == 0
    torch._dynamo.reset()
    counters.clear()
    model = Net()
    eager = model
    model.compile(backend="eager")
    eager(torch.ones(2, 4))
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("made, fixable", [
    ("model = get_model()", False),  # a function's result: it may hand out a module a cache keeps
    ("model = Net().eval()", True),
    ("model = AutoModel.from_pretrained('x')", True),
    ("model = load.from_pretrained('x')", False),
])
def test_only_a_constructed_module_is_the_names_alone(made, fixable):
    """``model = get_model()`` (a cached module) was taken for a fresh object, and the fix compiled
    the module for everyone holding it."""
    code = f"import torch\n\n{made}\nmodel = torch.compile(model)\ntorch.save(model.state_dict(), 'c.pt')\n"
    [f] = _sp102(code)
    assert f.fixable is fixable, f.message
