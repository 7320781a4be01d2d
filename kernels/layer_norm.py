"""LayerNorm over the last dim, forward and backward.

Replaces ``torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)`` and
``torch.layer_norm`` for float16, bfloat16 and float32 inputs with a one-element
``normalized_shape`` equal to the last dim; the output has x's dtype, statistics are float32.

Forward: one program per row, the row held in registers (one read of x, one write of y):
``mean``, biased ``var``, ``rstd = 1 / sqrt(var + eps)``, ``y = (x - mean) * rstd * w + b``;
``mean`` and ``rstd`` are saved per row for the backward.

Backward (Triton tutorial 05, "Layer Normalization", with per-band partial sums instead of
locks): ``xhat = (x - mean) * rstd``, ``g = dy * w``,
``dx = rstd * (g - xhat * mean(g * xhat) - mean(g))``; each program accumulates its band's
``sum(dy * xhat)`` and ``sum(dy)`` in float32 and one ``torch.sum`` finishes ``dw`` and ``db``.
Row offsets are int64; loads and stores are masked.
"""

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the reference and the FakeTensor rule work without Triton
    triton = None

#: What the rewriter reads (with ``ast.literal_eval``, never by importing this file).
CATALOG = {
    "name": "layer_norm",
    "summary": "LayerNorm over the last dim, forward and backward",
    "functions": {
        "torch.nn.functional.layer_norm": ["input", "normalized_shape", "weight", "bias", "eps"],
        "torch.layer_norm": ["input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"],
    },
    "method": None,
    "defaults": {"weight": None, "bias": None, "eps": 1e-05, "cudnn_enable": True},
    "allowed": {},
    "reasons": {},
    "passes": ["input", "normalized_shape", "weight", "bias", "eps"],
    "entry": "triton_layer_norm",
    "backward": True,
}

#: Longest row held in registers; longer rows use the reference.
MAX_TILE = 32768
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def next_power_of_2(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()


def fake(x, weight, bias, eps):
    """FakeTensor/meta rule for the forward: ``(y like x, mean, rstd [...] float32)``; no data read."""
    torch._check(x.dim() >= 1, lambda: "layer_norm: expected a tensor with at least one dim")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    return y, mean, rstd


def fake_backward(dy, x, weight, bias, mean, rstd):
    """FakeTensor/meta rule for the backward: ``(dx, dw, db)``, empty ``[0]`` for absent params."""
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = _empty_like_param(weight, x)
    db = _empty_like_param(bias, x)
    return dx, dw, db


def _empty_like_param(param, x):
    """A fresh gradient buffer for ``param``; ``[0]`` when it is None (outputs never alias)."""
    if param is None:
        return torch.empty((0,), dtype=x.dtype, device=x.device)
    return torch.empty(param.shape, dtype=param.dtype, device=x.device)


def reference(x, weight, bias, eps):
    """``(y, mean, rstd)`` computed with torch ops in float32, the kernel's arithmetic."""
    xf = x.float()
    mean = xf.mean(-1)
    xc = xf - mean.unsqueeze(-1)
    rstd = torch.rsqrt((xc * xc).mean(-1) + eps)
    y = xc * rstd.unsqueeze(-1)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype), mean, rstd


def reference_backward(dy, x, weight, bias, mean, rstd):
    """``(dx, dw, db)`` with torch ops; empty ``[0]`` tensors for absent weight or bias."""
    xf, dyf = x.float(), dy.float()
    xhat = (xf - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
    g = dyf * weight.float() if weight is not None else dyf
    c1 = (g * xhat).mean(-1, keepdim=True)
    c2 = g.mean(-1, keepdim=True)
    dx = (rstd.unsqueeze(-1) * (g - xhat * c1 - c2)).to(x.dtype)
    N = x.shape[-1]
    dw = _empty_like_param(None, x) if weight is None else (dyf * xhat).reshape(-1, N).sum(0).to(weight.dtype)
    db = _empty_like_param(None, x) if bias is None else dyf.reshape(-1, N).sum(0).to(bias.dtype)
    return dx, dw, db


def supported(x):
    """Whether :func:`launch` runs the Triton kernel for ``x`` (else the reference)."""
    return (
        triton is not None
        and x.dtype in FLOAT_DTYPES
        and x.dim() >= 1
        and next_power_of_2(max(x.shape[-1], 1)) <= MAX_TILE
    )


if triton is not None:

    @triton.jit
    def _layer_norm_fwd(
        x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, stride_x, eps,
        HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
        y = xc * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)

    @triton.jit
    def _layer_norm_bwd(
        dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, M, N,
        rows_per_program, HAS_W: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        cols = offs < N
        if HAS_W:
            w = tl.load(w_ptr + offs, mask=cols, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK], tl.float32)
        db = tl.zeros([BLOCK], tl.float32)
        first = pid.to(tl.int64) * rows_per_program
        for i in range(0, rows_per_program):
            row = first + i
            ok = row < M
            mask = cols & ((tl.zeros([BLOCK], tl.int64) + row) < M)
            x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + row, mask=ok, other=0.0)
            rstd = tl.load(rstd_ptr + row, mask=ok, other=0.0)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            g = dy * w if HAS_W else dy
            c1 = tl.sum(g * xhat, axis=0) / N
            c2 = tl.sum(g, axis=0) / N
            dx = rstd * (g - xhat * c1 - c2)
            tl.store(dx_ptr + row * N + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * xhat
            db += dy
        tl.store(dw_ptr + pid.to(tl.int64) * N + offs, dw, mask=cols)
        tl.store(db_ptr + pid.to(tl.int64) * N + offs, db, mask=cols)


def _warps(block):
    """Warps per program: about 16 elements per thread; 32 warps from 32768 elements, where 16
    warps need 128 registers and spill (cuobjdump --dump-resource-usage, sm_90, triton 3.9)."""
    return 4 if block <= 1024 else (8 if block <= 4096 else (16 if block <= 16384 else 32))


def launch(x, weight, bias, eps, wrap=lambda kernel: kernel):
    """Forward LayerNorm of ``x`` over its last dim.

    Args:
        x: ``[..., N]`` float16/bfloat16/float32, any strides.
        weight, bias: ``[N]`` or None.
        eps: added to the variance.
        wrap: applied to the ``@triton.jit`` kernel before launch (``torch.library.wrap_triton``).

    Returns:
        ``(y [..., N] of x's dtype, mean [...] float32, rstd [...] float32)``, contiguous.
    """
    y, mean, rstd = fake(x, weight, bias, eps)
    if not supported(x) or y.numel() == 0:
        return reference(x, weight, bias, eps)
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    block = next_power_of_2(N)
    w = weight.contiguous() if weight is not None else x2
    b = bias.contiguous() if bias is not None else x2
    wrap(_layer_norm_fwd)[(x2.shape[0],)](
        x2, w, b, y, mean, rstd, N, x2.stride(0), eps,
        HAS_W=weight is not None, HAS_B=bias is not None, BLOCK=block, num_warps=_warps(block),
    )
    return y, mean, rstd


def launch_backward(dy, x, weight, bias, mean, rstd, wrap=lambda kernel: kernel, programs=None):
    """Backward LayerNorm: ``(dx like x, dw like weight, db like bias)``, empty for absent ones.

    Args:
        dy: gradient of ``y``, shape of ``x``.
        x, weight, bias, mean, rstd: the forward's inputs and saved statistics.
        programs: how many row bands (default: ``min(M, 4 * SMs)`` on CUDA, ``min(M, 4)`` else).
    """
    dx, dw, db = fake_backward(dy, x, weight, bias, mean, rstd)
    if not supported(x) or x.numel() == 0:
        return reference_backward(dy, x, weight, bias, mean, rstd)
    N = x.shape[-1]
    x2 = x.reshape(-1, N).contiguous()
    dy2 = dy.reshape(-1, N).contiguous()
    M = x2.shape[0]
    if programs is None:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
        programs = min(M, 4 * sms)
    rows = triton.cdiv(M, programs)
    programs = triton.cdiv(M, rows)
    block = next_power_of_2(N)
    dw_part = torch.empty((programs, N), dtype=torch.float32, device=x.device)
    db_part = torch.empty((programs, N), dtype=torch.float32, device=x.device)
    w = weight.contiguous() if weight is not None else x2
    wrap(_layer_norm_bwd)[(programs,)](
        dy2, x2, w, mean, rstd, dx, dw_part, db_part, M, N, rows,
        HAS_W=weight is not None, BLOCK=block, num_warps=_warps(block),
    )
    if weight is not None:
        dw = dw_part.sum(0).to(weight.dtype)
    if bias is not None:
        db = db_part.sum(0).to(bias.dtype)
    return dx, dw, db
