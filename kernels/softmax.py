"""Row softmax over the last dim: one read when the row fits a tile, online softmax otherwise.

Replaces ``torch.softmax(x, -1)``, ``torch.nn.functional.softmax(x, dim=-1)`` and
``x.softmax(-1)`` (no ``dtype=``) for float16, bfloat16 and float32 inputs; accumulates in
float32 and writes the input's dtype, as torch does.

One program per row. A row of up to :data:`MAX_TILE` elements is held in registers: one read,
one write, the bandwidth floor. A longer row is processed in tiles with the online softmax of
Milakov & Gimelshein, "Online normalizer calculation for softmax" (arXiv:1805.02867): a single
pass keeps a running max and a running sum per lane, rescaling the sum when the max grows; a
second pass writes ``exp(x - max) / sum`` (its reads mostly hit L2 for rows of a few hundred KB).
Backward: ``dx = y * (dy - sum(dy * y))`` per row, from the saved output ``y`` (the same tiling:
one read of ``y`` and ``dy`` when the row fits a tile, a reduction loop then a write loop when not).
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
    "name": "softmax",
    "summary": "Row softmax over the last dim: register-resident rows, online softmax for long rows",
    "functions": {
        "torch.softmax": ["input", "dim", "dtype"],
        "torch.nn.functional.softmax": ["input", "dim", "_stacklevel", "dtype"],
        "torch.special.softmax": ["input", "dim", "dtype"],
    },
    "method": ["softmax", ["input", "dim", "dtype"]],
    "defaults": {"dim": None, "dtype": None, "_stacklevel": 3},
    "allowed": {"dim": [-1], "dtype": [None]},
    "reasons": {
        "dim": "the kernel normalises over the last dim only (dim must be the literal -1)",
        "dtype": "the kernel writes the input's dtype (dtype= is not supported)",
    },
    "passes": ["input"],
    "entry": "triton_softmax",
    "backward": True,
}

#: Longest row held in registers (one read); longer rows use the online two-pass loop.
MAX_TILE = 32768
#: Tile of the online loop.
LOOP_TILE = 4096
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def next_power_of_2(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()


def fake(x):
    """FakeTensor/meta rule: a contiguous tensor like ``x`` (reads no data), as :func:`launch`."""
    torch._check(x.dim() >= 1, lambda: "softmax: expected a tensor with at least one dim")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def fake_backward(dy, y):
    """FakeTensor/meta rule for the backward: a contiguous tensor like ``y`` (reads no data)."""
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)


def reference_backward(dy, y):
    """``dx`` of softmax from its output, in float32 like the kernel."""
    yf, dyf = y.float(), dy.float()
    return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)


def reference(x):
    """The op this kernel replaces, with the kernel's argument pattern."""
    return torch.softmax(x, dim=-1).contiguous()


def supported(x):
    """Whether :func:`launch` runs the Triton kernel for ``x`` (else the reference)."""
    return triton is not None and x.dtype in FLOAT_DTYPES and x.dim() >= 1


if triton is not None:

    @triton.jit
    def _softmax_kernel(
        x_ptr, y_ptr, N, stride_x, stride_y, BLOCK: tl.constexpr, ONE_TILE: tl.constexpr
    ):
        row = tl.program_id(0).to(tl.int64)
        x_row = x_ptr + row * stride_x
        y_row = y_ptr + row * stride_y
        offs = tl.arange(0, BLOCK)
        if ONE_TILE:
            mask = offs < N
            x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
            e = tl.exp(x - tl.max(x, axis=0))
            y = e / tl.sum(e, axis=0)
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
        else:
            m_run = tl.full([BLOCK], -float("inf"), tl.float32)
            d_run = tl.zeros([BLOCK], tl.float32)
            for start in range(0, N, BLOCK):
                cols = start + offs
                x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
                m_new = tl.maximum(m_run, x)
                live = m_new > -float("inf")
                scale = tl.where(live, tl.exp(m_run - m_new), 0.0)
                d_run = d_run * scale + tl.where(live, tl.exp(x - m_new), 0.0)
                m_run = m_new
            m = tl.max(m_run, axis=0)
            d = tl.sum(d_run * tl.where(m_run > -float("inf"), tl.exp(m_run - m), 0.0), axis=0)
            for start in range(0, N, BLOCK):
                cols = start + offs
                mask = cols < N
                x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
                y = tl.exp(x - m) / d
                tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _softmax_bwd_kernel(
        dy_ptr, y_ptr, dx_ptr, N, BLOCK: tl.constexpr, ONE_TILE: tl.constexpr
    ):
        row = tl.program_id(0).to(tl.int64)
        base = row * N
        offs = tl.arange(0, BLOCK)
        if ONE_TILE:
            mask = offs < N
            y = tl.load(y_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
            dx = y * (dy - tl.sum(y * dy, axis=0))
            tl.store(dx_ptr + base + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        else:
            acc = tl.zeros([BLOCK], tl.float32)
            for start in range(0, N, BLOCK):
                cols = start + offs
                mask = cols < N
                y = tl.load(y_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
                acc += y * dy
            total = tl.sum(acc, axis=0)
            for start in range(0, N, BLOCK):
                cols = start + offs
                mask = cols < N
                y = tl.load(y_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
                dx = y * (dy - total)
                tl.store(dx_ptr + base + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _warps(block):
    """Warps per program: about 16 elements per thread; 32 warps from 32768 elements, where 16
    warps need 128 registers and spill (cuobjdump --dump-resource-usage, sm_90, triton 3.9)."""
    return 4 if block <= 1024 else (8 if block <= 4096 else (16 if block <= 16384 else 32))


def launch(x, wrap=lambda kernel: kernel, max_tile=MAX_TILE):
    """Softmax of ``x`` over its last dim with the Triton kernel.

    Args:
        x: ``[..., N]`` float16/bfloat16/float32 tensor, any strides.
        wrap: applied to the ``@triton.jit`` kernel before launch (``torch.library.wrap_triton``).
        max_tile: longest row held in registers; longer rows take the online loop (tests lower
            it to exercise that path on small rows).

    Returns:
        ``[..., N]`` contiguous tensor of x's dtype.
    """
    y = fake(x)
    if not supported(x):
        return reference(x)
    if y.numel() == 0:
        return y
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y2 = y.view(-1, N)
    one_tile = next_power_of_2(N) <= max_tile
    block = next_power_of_2(N) if one_tile else min(LOOP_TILE, max_tile)
    wrap(_softmax_kernel)[(x2.shape[0],)](
        x2, y2, N, x2.stride(0), y2.stride(0), BLOCK=block, ONE_TILE=one_tile,
        num_warps=_warps(block),
    )
    return y


def launch_backward(dy, y, wrap=lambda kernel: kernel, max_tile=MAX_TILE):
    """Backward softmax over the last dim: ``dx`` (contiguous, y's dtype) from ``dy`` and ``y``.

    Args:
        dy: gradient of the output, shape of ``y``, any strides.
        y: the forward's output.
        wrap, max_tile: as in :func:`launch`.
    """
    dx = fake_backward(dy, y)
    if not supported(y) or dx.numel() == 0:
        return reference_backward(dy, y)
    N = y.shape[-1]
    y2 = y.reshape(-1, N).contiguous()
    dy2 = dy.reshape(-1, N).contiguous()
    one_tile = next_power_of_2(N) <= max_tile
    block = next_power_of_2(N) if one_tile else min(LOOP_TILE, max_tile)
    wrap(_softmax_bwd_kernel)[(y2.shape[0],)](
        dy2, y2, dx, N, BLOCK=block, ONE_TILE=one_tile, num_warps=_warps(block)
    )
    return dx
