"""RMSNorm over the last dim, forward and backward.

Replaces ``torch.nn.functional.rms_norm(x, (N,), weight, eps)`` and ``torch.rms_norm`` for
float16, bfloat16 and float32 inputs with a one-element ``normalized_shape`` equal to the last
dim; the output has x's dtype, statistics are float32.

Forward: one program per row, the row held in registers (one read of x, one write of y, plus the
weight, which stays in L2): ``rstd = 1 / sqrt(mean(x^2) + eps)``, ``y = x * rstd * w``; ``rstd``
is saved per row for the backward.

Backward: each program walks a contiguous band of rows, writing
``dx = rstd * (dy*w - xhat * mean(dy*w*xhat))`` with ``xhat = x * rstd``, and accumulates its
band's ``sum(dy * xhat)`` in float32 registers; the bands' partial ``dw`` rows are summed with
one ``torch.sum`` (the split used by Triton's layer-norm tutorial, without atomics).
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
    "name": "rms_norm",
    "summary": "RMSNorm over the last dim, forward and backward",
    "functions": {
        "torch.nn.functional.rms_norm": ["input", "normalized_shape", "weight", "eps"],
        "torch.rms_norm": ["input", "normalized_shape", "weight", "eps"],
    },
    "method": None,
    "defaults": {"weight": None, "eps": None},
    "allowed": {},
    "reasons": {},
    "passes": ["input", "normalized_shape", "weight", "eps"],
    "entry": "triton_rms_norm",
    "backward": True,
}

#: Longest row held in registers; longer rows use the reference.
MAX_TILE = 32768
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def next_power_of_2(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()


def fake(x, weight, eps):
    """FakeTensor/meta rule for the forward: ``(y like x, rstd [...] float32)``, reading no data."""
    torch._check(x.dim() >= 1, lambda: "rms_norm: expected a tensor with at least one dim")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    return y, rstd


def fake_backward(dy, x, weight, rstd):
    """FakeTensor/meta rule for the backward: ``(dx like x, dw like weight or empty)``."""
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if weight is None:
        dw = torch.empty((0,), dtype=x.dtype, device=x.device)
    else:
        dw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    return dx, dw


def reference(x, weight, eps):
    """``(y, rstd)`` computed with torch ops in float32, the kernel's arithmetic."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
    y = xf * rstd.unsqueeze(-1)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype), rstd


def reference_backward(dy, x, weight, rstd):
    """``(dx, dw)`` with torch ops; ``dw`` is an empty tensor when there is no weight."""
    xf, dyf = x.float(), dy.float()
    xhat = xf * rstd.unsqueeze(-1)
    wdy = dyf * weight.float() if weight is not None else dyf
    c = (wdy * xhat).mean(-1, keepdim=True)
    dx = (rstd.unsqueeze(-1) * (wdy - xhat * c)).to(x.dtype)
    if weight is None:
        return dx, torch.empty((0,), dtype=x.dtype, device=x.device)
    dw = (dyf * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    return dx, dw


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
    def _rms_norm_fwd(
        x_ptr, w_ptr, y_ptr, rstd_ptr, N, stride_x, eps,
        HAS_W: tl.constexpr, BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        y = x * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(rstd_ptr + row, rstd)

    @triton.jit
    def _rms_norm_bwd(
        dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, M, N, rows_per_program,
        HAS_W: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        cols = offs < N
        if HAS_W:
            w = tl.load(w_ptr + offs, mask=cols, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK], tl.float32)
        first = pid.to(tl.int64) * rows_per_program
        for i in range(0, rows_per_program):
            row = first + i
            ok = row < M
            mask = cols & ((tl.zeros([BLOCK], tl.int64) + row) < M)
            x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row, mask=ok, other=0.0)
            xhat = x * rstd
            wdy = dy * w if HAS_W else dy
            c = tl.sum(wdy * xhat, axis=0) / N
            dx = rstd * (wdy - xhat * c)
            tl.store(dx_ptr + row * N + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * xhat
        if HAS_W:
            tl.store(dw_ptr + pid.to(tl.int64) * N + offs, dw, mask=cols)


def _warps(block):
    """Warps per program: about 16 elements per thread; 32 warps from 32768 elements, where 16
    warps need 128 registers and spill (cuobjdump --dump-resource-usage, sm_90, triton 3.9)."""
    return 4 if block <= 1024 else (8 if block <= 4096 else (16 if block <= 16384 else 32))


def launch(x, weight, eps, wrap=lambda kernel: kernel):
    """Forward RMSNorm of ``x`` over its last dim.

    Args:
        x: ``[..., N]`` float16/bfloat16/float32, any strides.
        weight: ``[N]`` or None.
        eps: added to the mean square (a float; the caller resolves torch's ``None`` default).
        wrap: applied to the ``@triton.jit`` kernel before launch (``torch.library.wrap_triton``).

    Returns:
        ``(y [..., N] of x's dtype, rstd [...] float32)``, both contiguous.
    """
    y, rstd = fake(x, weight, eps)
    if not supported(x):
        return reference(x, weight, eps)
    if y.numel() == 0:
        return reference(x, weight, eps)
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    block = next_power_of_2(N)
    w = weight.contiguous() if weight is not None else x2
    wrap(_rms_norm_fwd)[(x2.shape[0],)](
        x2, w, y, rstd, N, x2.stride(0), eps, HAS_W=weight is not None, BLOCK=block,
        num_warps=_warps(block),
    )
    return y, rstd


def launch_backward(dy, x, weight, rstd, wrap=lambda kernel: kernel, programs=None):
    """Backward RMSNorm: ``(dx like x, dw like weight)`` (``dw`` empty when weight is None).

    Args:
        dy: gradient of ``y``, shape of ``x``.
        x, weight, rstd: the forward's input, weight and saved ``rstd``.
        programs: how many row bands (default: ``min(M, 4 * SMs)`` on CUDA, ``min(M, 8)`` else).
    """
    dx, dw = fake_backward(dy, x, weight, rstd)
    if not supported(x):
        return reference_backward(dy, x, weight, rstd)
    N = x.shape[-1]
    x2 = x.reshape(-1, N).contiguous()
    dy2 = dy.reshape(-1, N).contiguous()
    M = x2.shape[0]
    if M == 0 or N == 0:
        return reference_backward(dy, x, weight, rstd)
    if programs is None:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 2
        programs = min(M, 4 * sms)
    rows = triton.cdiv(M, programs)
    programs = triton.cdiv(M, rows)
    block = next_power_of_2(N)
    partial = torch.empty((programs, N), dtype=torch.float32, device=x.device)
    w = weight.contiguous() if weight is not None else x2
    wrap(_rms_norm_bwd)[(programs,)](
        dy2, x2, w, rstd, dx, partial, M, N, rows, HAS_W=weight is not None, BLOCK=block,
        num_warps=_warps(block),
    )
    if weight is not None:
        dw = partial.sum(0).to(weight.dtype)
    return dx, dw
