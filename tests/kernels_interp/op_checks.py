"""The custom ops as ``stackpart rewrite --unsafe`` renders them into a user's tree.

Run by tests/test_kernels.py in a child process, once with ``TRITON_INTERPRET=1`` (the ops are
``torch.library.custom_op`` + ``register_fake`` and run the Triton kernels in the interpreter) and
once without (the ops are ``torch.library.triton_op`` where torch has it; on CPU they run the
reference path). Checks: the generated test files pass (opcheck + comparison with the original
op), ``torch.compile(fullgraph=True, backend="aot_eager")`` traces each op with no graph break
and no recompile across two sizes with dynamic shapes, the autograd of softmax and the norms
matches torch's, top-k (no backward) refuses inputs that require grad, two vendored trees load
side by side,
and a small model whose sampling step is dominated by top-k goes plan -> rewrite -> import with
outputs equal to the original's, also compiled with ``fullgraph=True``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

if os.environ.get("STACKPART_KERNEL_CHECKS") != "1":
    pytest.skip("run by tests/test_kernels.py in a child process", allow_module_level=True)

pytest.importorskip("triton")

from rewriter.cli import main  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
KERNELS = ["topk", "softmax", "rms_norm", "layer_norm"]

OPS_MODEL = '''
import torch
import torch.nn.functional as F


def topk_step(x, k: int):
    return torch.topk(x, k)


def softmax_step(x):
    return F.softmax(x, dim=-1)


def rms_norm_step(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def layer_norm_step(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)
'''

OPS_PLAN = '''
version: 1
actions:
  - {action: kernel, target: model.py::topk_step, call: torch.topk, kernel: topk}
  - {action: kernel, target: model.py::softmax_step, call: F.softmax, kernel: softmax}
  - {action: kernel, target: model.py::rms_norm_step, call: F.rms_norm, kernel: rms_norm}
  - {action: kernel, target: model.py::layer_norm_step, call: F.layer_norm, kernel: layer_norm}
'''

SAMPLING_MODEL = '''
"""A toy LM whose decode step is dominated by top-k over a large vocabulary."""

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 4096, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(self.embed(idx))


def sample_step(model, idx, k: int):
    logits = model(idx)[:, -1, :]
    values, indices = torch.topk(logits, k)
    probs = torch.softmax(values, dim=-1)
    choice = torch.argmax(probs, dim=-1, keepdim=True)
    return torch.cat([idx, indices.gather(-1, choice)], dim=1), probs
'''

SAMPLING_PLAN = '''
# Top-k dominates the sampling step's self time (diagnose rung 4): replace it with the catalog
# kernel, and the softmax over the k kept values too.
version: 1
actions:
  - action: kernel
    target: model.py::sample_step
    call: torch.topk
    kernel: topk
  - action: kernel
    target: model.py::sample_step
    call: torch.softmax
    kernel: softmax
'''

_TAG = "interp" if INTERPRET else "ref"


def _write_package(root: Path, package: str, model: str, plan: str) -> Path:
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(textwrap.dedent(model))
    (root / f"{package}.plan.yaml").write_text(textwrap.dedent(plan).replace("model.py", f"{package}/model.py"))
    return root / f"{package}.plan.yaml"


def _rewrite(plan: Path, src: Path) -> None:
    code = main(["rewrite", "--plan", str(plan), str(src), "--unsafe", "--apply", "--no-validate"])
    assert code == 0
    # Re-running the plan is a no-op.
    assert main(["rewrite", "--plan", str(plan), str(src), "--unsafe", "--check"]) == 0


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("trees")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


@pytest.fixture(scope="module")
def ops(src):
    """The four rendered op modules of one tree, imported."""
    package = f"kops_{_TAG}"
    _rewrite(_write_package(src, package, OPS_MODEL, OPS_PLAN), src)
    mods = {k: importlib.import_module(f"{package}._stackpart.kernel_{k}") for k in KERNELS}
    mods["model"] = importlib.import_module(f"{package}.model")
    mods["tests"] = {k: importlib.import_module(f"{package}._stackpart.test_kernel_{k}") for k in KERNELS}
    return mods


def test_registration_matches_the_installed_torch(ops):
    expected = hasattr(torch.library, "triton_op") and not INTERPRET
    for k in KERNELS:
        assert ops[k]._TRITON_OP is expected
        assert ops[k].NAMESPACE == f"stackpart_kops_{_TAG}"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_generated_test_file_passes(ops, kernel, dtype):
    generated = ops["tests"][kernel]
    generated.test_matches_original("cpu", dtype)
    generated.test_opcheck("cpu", dtype)


def _inputs(kernel, rows, cols):
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    x = torch.randn(rows, cols, generator=g)
    w = torch.randn(cols, generator=g)
    b = torch.randn(cols, generator=g)
    return {"topk": (x, 5), "softmax": (x,), "rms_norm": (x, w), "layer_norm": (x, w, b)}[kernel]


@pytest.mark.parametrize("kernel", KERNELS)
def test_compile_fullgraph_dynamic_no_graph_break_no_recompile(ops, kernel):
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    fn = getattr(ops["model"], f"{kernel}_step")
    torch._dynamo.reset()
    counters.clear()
    backend = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=backend, dynamic=True)
    frames = []
    for rows, cols in ((6, 300), (11, 257)):
        args = _inputs(kernel, rows, cols)
        with torch.no_grad():
            got = compiled(*args)
            want = {
                "topk": lambda x, k: torch.topk(x, k),
                "softmax": lambda x: F.softmax(x, dim=-1),
                "rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
                "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
            }[kernel](*args)
        torch.testing.assert_close(tuple(got) if kernel == "topk" else got,
                                   tuple(want) if kernel == "topk" else want)
        frames.append(backend.frame_count)
    assert sum(counters["graph_break"].values()) == 0
    # (The first compile may count twice: Dynamo restarts analysis to specialise float eps.)
    assert frames[0] >= 1 and frames[1] == frames[0], "the second size recompiled"
    names = {str(n.target) for g in backend.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert any(f"stackpart_kops_{_TAG}" in name for name in names), names


def test_softmax_autograd_matches_torch(ops):
    x = torch.randn(5, 67, generator=torch.Generator().manual_seed(3)) * 2
    leaf, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    dy = torch.randn(5, 67)
    (got,) = torch.autograd.grad(ops["model"].softmax_step(leaf), leaf, dy)
    (want,) = torch.autograd.grad(F.softmax(ref, dim=-1), ref, dy)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["rms_norm", "layer_norm"])
def test_norm_autograd_matches_torch(ops, kernel):
    x, w, *rest = _inputs(kernel, 5, 67)
    leaves = [t.clone().requires_grad_() for t in (x, w, *rest)]
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, *rest)]
    dy = torch.randn(5, 67)
    fn = getattr(ops["model"], f"{kernel}_step")
    got = torch.autograd.grad(fn(*leaves), leaves, dy)
    if kernel == "rms_norm":
        out = F.rms_norm(ref_leaves[0], (67,), ref_leaves[1], 1e-6)
    else:
        out = F.layer_norm(ref_leaves[0], (67,), ref_leaves[1], ref_leaves[2])
    want = torch.autograd.grad(out, ref_leaves, dy)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_kernel_without_backward_refuses_grad(ops):
    x = torch.randn(3, 40, requires_grad=True)
    with pytest.raises(RuntimeError, match="triton_topk: this Triton kernel has no backward"):
        ops["model"].topk_step(x, 4)
    with torch.no_grad():
        ops["model"].topk_step(x, 4)


def test_two_vendored_trees_load_in_one_process(ops, src):
    package = f"kops2_{_TAG}"
    _rewrite(_write_package(src, package, OPS_MODEL, OPS_PLAN), src)
    other = importlib.import_module(f"{package}._stackpart.kernel_topk")
    assert other.NAMESPACE != ops["topk"].NAMESPACE
    x = torch.randn(4, 100)
    assert torch.equal(other.triton_topk(x, 3).values, ops["topk"].triton_topk(x, 3).values)


def test_end_to_end_topk_sampling_model(src):
    """plan -> rewrite --unsafe -> import the rewritten tree -> outputs match, no graph break."""
    plan = _write_package(src, f"lm_before_{_TAG}", SAMPLING_MODEL, SAMPLING_PLAN)
    shutil.copytree(src / f"lm_before_{_TAG}", src / f"lm_after_{_TAG}")
    after_plan = src / f"lm_after_{_TAG}.plan.yaml"
    after_plan.write_text(plan.read_text().replace(f"lm_before_{_TAG}/", f"lm_after_{_TAG}/"))
    _rewrite(after_plan, src)
    rewritten_source = (src / f"lm_after_{_TAG}" / "model.py").read_text()
    assert "triton_topk(logits, k)" in rewritten_source and "torch.topk" not in rewritten_source
    before = importlib.import_module(f"lm_before_{_TAG}.model")
    after = importlib.import_module(f"lm_after_{_TAG}.model")

    torch.manual_seed(0)
    model = before.TinyLM().eval()
    model_after = after.TinyLM().eval()
    model_after.load_state_dict(model.state_dict())  # same keys: the rewrite leaves modules alone
    idx = torch.randint(0, 4096, (3, 5))
    want_idx, got_idx = idx, idx
    with torch.no_grad():
        for _ in range(3):
            want_idx, want_probs = before.sample_step(model, want_idx, 50)
            got_idx, got_probs = after.sample_step(model_after, got_idx, 50)
            assert torch.equal(got_idx, want_idx)
            torch.testing.assert_close(got_probs, want_probs)

        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(after.sample_step, fullgraph=True, backend="aot_eager")
        c_idx, c_probs = compiled(model_after, idx, 50)
        e_idx, e_probs = before.sample_step(model, idx, 50)
        assert torch.equal(c_idx, e_idx)
        torch.testing.assert_close(c_probs, e_probs)
        assert sum(counters["graph_break"].values()) == 0
