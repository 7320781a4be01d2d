"""The Triton kernel catalog (kernels/) against torch, on CPU under the Triton interpreter.

Run by tests/test_kernels.py in a subprocess whose environment has ``TRITON_INTERPRET=1`` before
triton is first imported: triton's own ``@jit`` helpers (``tl.sort``, ``tl.cumsum``) are made at
import and only work in the interpreter when it was on by then, and setting it in the shared
pytest process would change what other test modules see. Each kernel is compared with the torch op it replaces: float32 and
float16, odd sizes, a zero-size dim, non-contiguous inputs, and each launch path (one tile and the
online loop for softmax, one and several chunks for top-k, with and without weights for the
norms, forward and backward).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")


ROOT = Path(__file__).resolve().parents[2]
DTYPES = [torch.float32, torch.float16]

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "run by tests/test_kernels.py in a subprocess with TRITON_INTERPRET=1 set before triton "
        "is imported", allow_module_level=True
    )


def load_catalog_kernel(name: str):
    """Import kernels/<name>.py (not a package: kernels/ is data the rewriter vendors)."""
    spec = importlib.util.spec_from_file_location(
        f"_stackpart_test_catalog_{name}", ROOT / "kernels" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the interpreter resolves nested @triton.jit calls by module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def kernels():
    return {n: load_catalog_kernel(n) for n in ("topk", "softmax", "rms_norm", "layer_norm")}


def tol(dtype):
    """Fused float32 arithmetic vs torch's: a few float16 ulps; torch's defaults for float32."""
    return {"atol": 4e-3, "rtol": 4e-3} if dtype == torch.float16 else {}


def _gen():
    return torch.Generator().manual_seed(0)


# -- top-k --------------------------------------------------------------------------------------


def _check_topk(x, k, values, indices):
    ref_values, _ = torch.topk(x, k)
    assert values.shape == ref_values.shape and indices.dtype == torch.int64
    torch.testing.assert_close(values, ref_values, atol=0, rtol=0)
    torch.testing.assert_close(x.gather(-1, indices), values, atol=0, rtol=0)
    if indices.numel():
        # k distinct positions per row, never the same element twice.
        assert (indices.sort(-1).values.diff(dim=-1) > 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,k,chunk",
    [
        ((3, 1000), 7, 256),  # several chunks, the last one partial
        ((2, 3, 77), 5, None),  # one chunk, odd size, 3-d input
        ((4, 300), 50, 64),  # chunks smaller than k: every element of a chunk is a candidate
        ((2, 33), 33, None),  # k == V
    ],
)
def test_topk_matches_torch(kernels, dtype, shape, k, chunk):
    x = torch.randn(shape, generator=_gen()).to(dtype)
    values, indices = kernels["topk"].launch(x, k, chunk=chunk)
    _check_topk(x, k, values, indices)


def test_topk_ties_negative_zero_and_infinities(kernels):
    x = torch.randint(-3, 4, (3, 500), generator=_gen()).to(torch.float16)
    x[0, 10] = float("inf")
    x[1, :5] = -float("inf")
    x[2, 7] = -0.0
    values, indices = kernels["topk"].launch(x, 40, chunk=128)
    _check_topk(x, 40, values, indices)
    # Among equal values the lowest index comes first (documented order).
    same = values[:, 1:] == values[:, :-1]
    assert (indices[:, 1:][same] > indices[:, :-1][same]).all()


def test_topk_non_contiguous_zero_size_and_k_zero(kernels):
    x = torch.randn(64, 9, generator=_gen())
    for view, k in ((x.t(), 10), (x[::2, 1:], 3)):
        assert not view.is_contiguous()
        _check_topk(view, k, *kernels["topk"].launch(view, k))
    empty = torch.randn(0, 40)
    values, indices = kernels["topk"].launch(empty, 4)
    assert values.shape == (0, 4) and indices.shape == (0, 4)
    values, indices = kernels["topk"].launch(x, 0)
    assert values.shape == (64, 0)


def test_topk_k_out_of_range_is_an_error(kernels):
    with pytest.raises(RuntimeError, match="out of range"):
        kernels["topk"].launch(torch.randn(2, 5), 6)


# -- softmax ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_tile", [32768, 64])  # the row in registers / the online loop
def test_softmax_matches_torch(kernels, dtype, max_tile):
    g = _gen()
    cases = [
        torch.randn(5, 333, generator=g) * 4,
        torch.randn(2, 3, 17, generator=g),
        torch.randn(40, 130, generator=g).t(),  # non-contiguous: last-dim stride 130
        (torch.randn(6, 201, generator=g) * 10)[:, 1:],  # row stride != row length
    ]
    for x in cases:
        x = x.to(dtype)
        torch.testing.assert_close(
            kernels["softmax"].launch(x, max_tile=max_tile), F.softmax(x, dim=-1), **tol(dtype)
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_tile", [32768, 64])
def test_softmax_backward_matches_autograd(kernels, dtype, max_tile):
    g = _gen()
    x = (torch.randn(5, 333, generator=g) * 3).to(dtype)
    dy = torch.randn(5, 333, generator=g).to(dtype)
    y = kernels["softmax"].launch(x, max_tile=max_tile)
    dx = kernels["softmax"].launch_backward(dy, y, max_tile=max_tile)
    (gx,) = _torch_grads(lambda a: F.softmax(a, dim=-1), dy, x)
    torch.testing.assert_close(dx.float(), gx, **({"atol": 2e-3, "rtol": 2e-2} if dtype == torch.float16 else {}))


def test_softmax_masked_positions_and_zero_size(kernels):
    x = torch.randn(4, 100, generator=_gen())
    x[:, 50:] = -float("inf")  # attention-style masking: exp(-inf) = 0, never NaN
    for max_tile in (32768, 16):
        y = kernels["softmax"].launch(x, max_tile=max_tile)
        torch.testing.assert_close(y, F.softmax(x, dim=-1))
        assert (y[:, 50:] == 0).all()
    assert kernels["softmax"].launch(torch.randn(0, 7)).shape == (0, 7)


# -- RMSNorm and LayerNorm, forward and backward -------------------------------------------------


def _norm_inputs(dtype, shape=(6, 67)):
    g = _gen()
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    w = torch.randn(shape[-1], generator=g).to(dtype)
    b = torch.randn(shape[-1], generator=g).to(dtype)
    dy = torch.randn(shape, generator=g).to(dtype)
    return x, w, b, dy


def _torch_grads(fn, dy, *inputs):
    leaves = [t.detach().float().requires_grad_() for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, dy.float())
    return grads


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_forward_and_backward(kernels, dtype, with_weight):
    k = kernels["rms_norm"]
    x, w, _, dy = _norm_inputs(dtype)
    weight = w if with_weight else None
    y, rstd = k.launch(x, weight, 1e-6)
    torch.testing.assert_close(y, F.rms_norm(x, (67,), weight, 1e-6), **tol(dtype))
    assert rstd.dtype == torch.float32 and rstd.shape == (6,)
    dx, dw = k.launch_backward(dy, x, weight, rstd, programs=4)  # several rows per program
    if with_weight:
        gx, gw = _torch_grads(lambda a, b: F.rms_norm(a, (67,), b, 1e-6), dy, x, w)
        torch.testing.assert_close(dw.float(), gw, **({"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {}))
    else:
        (gx,) = _torch_grads(lambda a: F.rms_norm(a, (67,), None, 1e-6), dy, x)
        assert dw.numel() == 0
    torch.testing.assert_close(dx.float(), gx, **({"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {}))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward_and_backward(kernels, dtype, affine):
    k = kernels["layer_norm"]
    x, w, b, dy = _norm_inputs(dtype)
    weight, bias = (w, b) if affine else (None, None)
    y, mean, rstd = k.launch(x, weight, bias, 1e-5)
    torch.testing.assert_close(y, F.layer_norm(x, (67,), weight, bias, 1e-5), **tol(dtype))
    dx, dw, db = k.launch_backward(dy, x, weight, bias, mean, rstd, programs=4)
    loose = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {}
    if affine:
        gx, gw, gb = _torch_grads(lambda a, c, d: F.layer_norm(a, (67,), c, d, 1e-5), dy, x, w, b)
        torch.testing.assert_close(dw.float(), gw, **loose)
        torch.testing.assert_close(db.float(), gb, **loose)
    else:
        (gx,) = _torch_grads(lambda a: F.layer_norm(a, (67,), None, None, 1e-5), dy, x)
        assert dw.numel() == 0 and db.numel() == 0
    torch.testing.assert_close(dx.float(), gx, **loose)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_norms_non_contiguous_and_zero_size(kernels, name):
    k = kernels[name]
    base = torch.randn(67, 8, generator=_gen())
    x = base.t()  # non-contiguous, last-dim stride 8
    w = torch.randn(67, generator=_gen())
    if name == "rms_norm":
        torch.testing.assert_close(k.launch(x, w, 1e-6)[0], F.rms_norm(x, (67,), w, 1e-6))
        assert k.launch(torch.randn(0, 67), w, 1e-6)[0].shape == (0, 67)
    else:
        torch.testing.assert_close(k.launch(x, w, None, 1e-5)[0], F.layer_norm(x, (67,), w, None, 1e-5))
        assert k.launch(torch.randn(0, 67), w, None, 1e-5)[0].shape == (0, 67)


def test_fake_rules_read_no_data(kernels):
    """Each FakeTensor rule runs on meta tensors (no storage) and matches the real outputs."""
    x = torch.randn(5, 40)
    meta = x.to("meta")
    w = torch.randn(40)
    pairs = [
        (kernels["topk"].fake(meta, 7), kernels["topk"].launch(x, 7)),
        ((kernels["softmax"].fake(meta),), (kernels["softmax"].launch(x),)),
        (kernels["rms_norm"].fake(meta, w.to("meta"), 1e-6), kernels["rms_norm"].launch(x, w, 1e-6)),
        (
            kernels["layer_norm"].fake(meta, w.to("meta"), None, 1e-5),
            kernels["layer_norm"].launch(x, w, None, 1e-5),
        ),
    ]
    for fakes, reals in pairs:
        for f, r in zip(fakes, reals):
            assert f.device.type == "meta"
            assert (f.shape, f.dtype, f.stride()) == (r.shape, r.dtype, r.stride())
