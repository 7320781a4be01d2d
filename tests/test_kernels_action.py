"""The ``kernel`` action's rewrite: which calls it replaces, which it leaves alone and why, the
files it vendors, and its refusals. In-process and Triton-free (the kernels themselves are
checked by tests/test_kernels.py)."""

from __future__ import annotations

import ast
import importlib.util
import textwrap
from pathlib import Path

import pytest

from rewriter.actions.kernel import catalog, kernel_source
from rewriter.rewrite.apply import apply_changes
from rewriter.cli import main
from rewriter.errors import StackpartError
from rewriter.plan import load_plan
from rewriter.rewrite.transform import plan_rewrite


def _tree(tmp_path: Path, source: str, actions: str, name: str = "model.py") -> tuple[Path, Path]:
    src = tmp_path / "src"
    (src / name).parent.mkdir(parents=True, exist_ok=True)
    (src / name).write_text(textwrap.dedent(source))
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nactions:\n" + textwrap.dedent(actions))
    return src, plan


def _rewrite(src: Path, plan: Path):
    result = plan_rewrite(load_plan(str(plan)), src, unsafe=True)
    files = {c.relpath: c.new.decode() for c in result.changes}
    return result, files


def _action(target: str, call: str, kernel: str) -> str:
    return f"  - {{action: kernel, target: {target}, call: {call}, kernel: {kernel}}}\n"


def test_every_spelling_of_the_op_is_replaced(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch as T
        from torch import topk as pick


        def step(logits, k):
            a = T.topk(logits, k)
            b = logits.topk(k, -1, True, True).indices
            c = pick(logits, k=k)
            def inner(x):
                return x.topk(2)
            return a, b, c, inner(logits)


        def other(logits):
            return T.topk(logits, 3)


        class Router:
            def route(self, logits):
                return self.topk(logits), logits.topk(1)
        ''', _action("model.py::step", "torch.topk", "topk") + _action("model.py::Router.route", "torch.topk", "topk"))
    result, files = _rewrite(src, plan)
    model = files["model.py"]
    assert "triton_topk(logits, k)" in model
    assert "triton_topk(logits, k).indices" in model
    assert "c = triton_topk(logits, k)" in model  # k= is the kernel's second parameter
    assert model.count("triton_topk(") == 5  # a, b, c, the nested function, Router's logits.topk
    assert "return self.topk(logits), triton_topk(logits, 1)" in model  # a method of self: kept
    assert "return T.topk(logits, 3)" in model  # outside the target: untouched
    assert "from _stackpart.kernel_topk import triton_topk" in model
    assert result.warnings == []


def test_unsupported_arguments_are_left_alone_with_file_line_and_reason(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch
        import torch.nn.functional as F


        def step(x, k, d, extra):
            a = torch.topk(x, k, sorted=False)
            b = torch.topk(x, k, largest=False)
            c = torch.topk(x, k, dim=d)
            e = torch.topk(*extra)
            f = F.softmax(x)
            g = F.softmax(x, dim=-1, dtype=torch.float32)
            h = torch.topk(x, k, 0)
            return a, b, c, e, f, g, h
        ''', _action("model.py::step", "torch.topk", "topk") + _action("model.py::step", "F.softmax", "softmax"))
    result, files = _rewrite(src, plan)
    notes = "\n".join(result.warnings)
    assert "model.py:7:9: torch.topk(x, k, sorted=False) left alone: sorted=False" in notes
    assert "model.py:8:9: torch.topk(x, k, largest=False) left alone: largest=False" in notes
    assert "dim=d is not a literal" in notes
    assert "*-arguments cannot be mapped" in notes
    assert "F.softmax(x) left alone: dim not given" in notes
    assert "dtype=torch.float32" in notes
    assert "torch.topk(x, k, 0) left alone: dim=0" in notes
    # Nothing supported was found, so nothing was written.
    assert files == {}


def test_arguments_are_mapped_by_name_and_position(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch
        from torch.nn import functional as F


        def norm(x, w, b):
            y = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-6, bias=b)
            z = torch.layer_norm(y, y.shape[-1:], w, b, 1e-5, True)
            return F.rms_norm(z, normalized_shape=[8], weight=w)
        ''', _action("model.py::norm", "torch.nn.functional.layer_norm", "layer_norm")
        + _action("model.py::norm", "F.rms_norm", "rms_norm"))
    result, files = _rewrite(src, plan)
    model = files["model.py"]
    assert "triton_layer_norm(x, (x.shape[-1],), bias=b, eps=1e-6)" in model
    assert "triton_layer_norm(y, y.shape[-1:], w, b, 1e-5)" in model  # cudnn_enable dropped
    assert "triton_rms_norm(z, [8], w)" in model
    for rel, text in files.items():
        ast.parse(text, filename=rel)


def test_rerunning_the_plan_is_a_no_op(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch


        def step(x, k):
            return torch.topk(x, k), torch.softmax(x, -1)
        ''', _action("model.py::step", "torch.topk", "topk") + _action("model.py::step", "torch.softmax", "softmax"))
    result, _ = _rewrite(src, plan)
    apply_changes(src, result.changes)
    again, files = _rewrite(src, plan)
    assert again.changes == [], files.keys()


def test_vendored_files_and_namespace_in_a_package(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch


        def step(x, k):
            return torch.topk(x, k)
        ''', _action("my_lm/sample.py::step", "torch.topk", "topk"), name="my_lm/sample.py")
    (src / "my_lm" / "__init__.py").write_text("")
    _, files = _rewrite(src, plan)
    assert set(files) == {
        "my_lm/sample.py",
        "my_lm/_stackpart/__init__.py",
        "my_lm/_stackpart/kernel_topk.py",
        "my_lm/_stackpart/test_kernel_topk.py",
        "my_lm/_stackpart/triton_topk.py",
    }
    assert "from ._stackpart.kernel_topk import triton_topk" in files["my_lm/sample.py"]
    assert 'NAMESPACE = "stackpart_my_lm"' in files["my_lm/_stackpart/kernel_topk.py"]
    # The kernel's own source travels into the tree: the rewritten model never imports stackpart.
    assert files["my_lm/_stackpart/triton_topk.py"].endswith(kernel_source("topk"))
    for rel, text in files.items():
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
        assert imported <= {"torch", "triton", "os", "typing", "collections", "pytest", "_stackpart"}, rel


def test_stub_renders_a_skeleton_and_says_stub(tmp_path, capsys):
    src, plan = _tree(tmp_path, '''
        import torch


        def act(x):
            return torch.special.erf(x) + x.erfinv()
        ''', _action("model.py::act", "torch.special.erf", "stub") + _action("model.py::act", "torch.erfinv", "stub"))
    code = main(["rewrite", "--plan", str(plan), str(src), "--unsafe"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "kernel stub for torch.special.erf" in err and "kernel stub for torch.erfinv" in err
    assert "STUB kernel for `torch.special.erf`" in out  # the generated file's header, in the diff
    assert "+    return stub_special_erf(x) + stub_erfinv(x)" in out
    assert "@triton.jit" in out


def test_stub_runs_the_original_op(tmp_path):
    import torch

    src, plan = _tree(tmp_path, '''
        import torch


        def act(x):
            return torch.special.erf(x)
        ''', _action("model.py::act", "torch.special.erf", "stub"))
    result, _ = _rewrite(src, plan)
    apply_changes(src, result.changes)
    spec = importlib.util.spec_from_file_location(
        "_stackpart_stub_check", src / "_stackpart" / "kernel_stub_special_erf.py"
    )
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    x = torch.randn(5)
    assert stub.STUB is True
    assert torch.equal(stub.stub_special_erf(x), torch.special.erf(x))
    with pytest.raises(NotImplementedError, match="stub"):
        stub.launch(x)


@pytest.mark.parametrize(
    "kernel,call,message",
    [
        ("topkk", "torch.topk", "unknown kernel 'topkk'"),
        ("softmax", "torch.topk", "kernel 'softmax' replaces torch.softmax"),
        ("stub", "numpy.sort", "is not a torch function"),
        ("stub", "torch.not_an_op", "is not a torch function"),
    ],
)
def test_refusals_name_the_plan_line(tmp_path, kernel, call, message):
    src, plan = _tree(tmp_path, '''
        import torch


        def step(x):
            return torch.topk(x, 2)
        ''', _action("model.py::step", call, kernel))
    with pytest.raises(StackpartError) as info:
        plan_rewrite(load_plan(str(plan)), src, unsafe=True)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{plan}:3")


def test_a_target_without_the_call_is_refused(tmp_path):
    src, plan = _tree(tmp_path, '''
        import torch


        def step(x):
            return x + 1
        ''', _action("model.py::step", "torch.topk", "topk"))
    with pytest.raises(StackpartError, match="has no call of torch.topk"):
        plan_rewrite(load_plan(str(plan)), src, unsafe=True)


def test_catalog_names_real_ops_and_every_template_defines_its_entry():
    import torch

    from rewriter.render import render_python

    assert set(catalog()) == {"topk", "softmax", "rms_norm", "layer_norm"}
    for name, spec in catalog().items():
        for call in spec["functions"]:
            obj = torch
            for part in call.split(".")[1:]:
                obj = getattr(obj, part)
            assert callable(obj), call
        if spec["method"]:
            assert callable(getattr(torch.Tensor, spec["method"][0]))
        text = render_python(
            f"custom_op_{name}.py.j2", module=f"kernel_{name}", entry=spec["entry"],
            namespace="stackpart_x", call="torch.x", module_path="p", kernel_module=f"triton_{name}",
            summary=spec["summary"],
        )
        defined = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
        assert {spec["entry"], "original", "samples", "op_samples", "check_close"} <= defined
        assert ("register_autograd" in text) == spec["backward"]
        assert set(spec["allowed"]) <= set(spec["defaults"]) and set(spec["allowed"]) == set(spec["reasons"])


def test_a_method_of_an_object_annotated_as_another_type_is_left_alone(tmp_path):
    """``h.topk(3)`` on ``h: Heap`` became ``triton_topk(h, 3)``, which raised at run time."""
    src, plan = _tree(tmp_path, '''
        import torch


        class Heap:
            def topk(self, k):
                return k


        def step(x: torch.Tensor, k, h: Heap):
            g = h.topk(3)
            return x.topk(k), g
        ''', _action("model.py::step", "torch.topk", "topk"))
    result, files = _rewrite(src, plan)
    assert "g = h.topk(3)" in files["model.py"] and "triton_topk(x, k)" in files["model.py"]
    assert any("h is annotated Heap, not a Tensor" in w for w in result.warnings), result.warnings
