"""The compiles a model object carries, found in one place (:func:`rewriter.engine.watch.carried_compiles`),
set aside for a while and put back as they were (:func:`rewriter.engine.watch.compiles_off`)."""

from __future__ import annotations

import pytest
import torch

from rewriter.engine.watch import (COMPILED_CALL, DECORATED, FORWARD_ATTRIBUTE, WRAPPED, carried_compiles,
                                   compiled_modules, compiles_off, unwrapped)


class _Decorated(torch.nn.Module):
    @torch.compile(backend="eager")
    def forward(self, x):
        return x + 1


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)] + [_Decorated()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _every_form() -> tuple[torch.nn.Module, _Net]:
    net = _Net()
    net.layers[0].compile(backend="eager")
    net.layers[1] = torch.compile(net.layers[1], backend="eager")
    net.layers[2].forward = torch.compile(net.layers[2].forward, backend="eager")
    return torch.compile(net, backend="eager"), net


def test_every_form_is_found_once_in_model_order():
    root, net = _every_form()
    found = [(c.how, c.path) for c in carried_compiles(root)]
    assert found == [(WRAPPED, "<model>"), (COMPILED_CALL, "layers.0"), (WRAPPED, "layers.1"),
                     (FORWARD_ATTRIBUTE, "layers.2"), (DECORATED, "_Decorated.forward")], found
    assert [c.how for c in carried_compiles(root, classes=False)] == [h for h, _ in found[:-1]]
    assert [r["how"] for r in compiled_modules(root)] == [h for h, _ in found[:-1]]  # a class's method is no module's
    assert unwrapped(root) is net and carried_compiles(torch.nn.Linear(2, 2)) == []


def test_compiles_set_aside_run_as_written_and_are_put_back():
    root, net = _every_form()
    before = list(net.layers)
    call, forward, method = net.layers[0]._compiled_call_impl, vars(net.layers[2])["forward"], _Decorated.__dict__["forward"]
    with compiles_off(root):
        assert net.layers[0]._compiled_call_impl is None and type(net.layers[1]) is torch.nn.Linear
        assert "forward" not in vars(net.layers[2]) and not hasattr(_Decorated.forward, "_torchdynamo_orig_callable")
        net(torch.randn(2, 4))
    assert list(net.layers) == before and net.layers[0]._compiled_call_impl is call
    assert vars(net.layers[2])["forward"] is forward and _Decorated.__dict__["forward"] is method


def test_a_compile_is_put_back_when_the_step_raises():
    net = _Net()
    wrapper = net.layers[1] = torch.compile(net.layers[1], backend="eager")
    with pytest.raises(RuntimeError), compiles_off(net, classes=False):
        assert net.layers[1] is wrapper._orig_mod
        raise RuntimeError("the step raised")
    assert net.layers[1] is wrapper


def test_a_module_compile_turned_off_is_no_compile():
    """``module.compile(disable=True)`` (the plan's ``own_call: {disable: true}`` on a
    ``model.compile()`` call) sets ``_compiled_call_impl`` to the module's own ``_call_impl``:
    torch.compile returned what it was given, so nothing is compiled and a re-diagnosis of the
    applied tree must not read the model as compiled ("whole model: Net (module.compile())")."""
    net = _Net()
    net.compile(backend="eager", disable=True)
    net.layers[0].compile(backend="eager", disable=True)
    assert net._compiled_call_impl is not None  # what torch leaves behind
    assert carried_compiles(net, classes=False) == [] and compiled_modules(net) == []
    net.layers[1].compile(backend="eager")
    assert [(c.how, c.path) for c in carried_compiles(net, classes=False)] == [(COMPILED_CALL, "layers.1")]
