"""Top-k over the last dim without sorting the row: threshold search, then gather.

Replaces ``torch.topk(x, k)`` / ``x.topk(k)`` with ``dim=-1``, ``largest=True``, ``sorted=True``
(the defaults) for float16, bfloat16 and float32 inputs. Values come back in descending order;
among equal values the lowest index comes first (torch leaves that order unspecified).

Algorithm (two launches, no full-row sort):

1. ``_topk_stage1``: the row is cut into chunks of ``CHUNK`` elements, one program per
   (row, chunk). Each value is mapped to an order-preserving int32 key (float bits with the low
   31 bits flipped for negatives), and a 32-step bitwise threshold search finds the k-th largest
   key of the chunk (each step counts the keys >= a candidate: a register reduction, no memory
   traffic). Keys above the threshold, then the first ties, are compacted with a prefix sum into
   the chunk's ``k`` candidate slots. This is the radix-select idea of PyTorch's own
   ``gatherTopK`` (aten/src/ATen/native/cuda/TensorTopK.cu) with one bit per step.
2. ``_topk_stage2``: one program per row runs the same search over the ``chunks * k``
   candidates, keeps exactly ``k`` of them, and sorts only those ``k`` (padded to a power of
   two) as packed int64 ``key << 32 | (2**31 - 1 - index)``.

Every row offset is int64 (``B * V`` may pass 2**31); loads and stores are masked.
NaN (positive sign bit clear) ranks above +inf, as in torch.topk.
"""

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the reference and the FakeTensor rule work without Triton
    triton = None

#: What the rewriter reads (with ``ast.literal_eval``, never by importing this file).
CATALOG = {
    "name": "topk",
    "summary": "Top-k over the last dim: threshold search + gather, no full-row sort",
    "functions": {"torch.topk": ["input", "k", "dim", "largest", "sorted"]},
    "method": ["topk", ["input", "k", "dim", "largest", "sorted"]],
    "defaults": {"dim": -1, "largest": True, "sorted": True},
    "allowed": {"dim": [-1], "largest": [True], "sorted": [True]},
    "reasons": {
        "dim": "the kernel selects over the last dim only (dim must be the literal -1)",
        "largest": "the kernel returns the largest k (largest must be True)",
        "sorted": "the kernel returns sorted values; sorted=False callers may rely on torch's own order",
    },
    "passes": ["input", "k"],
    "entry": "triton_topk",
    "backward": False,
}

#: Largest k the kernel takes; above it the launch helper calls the reference.
MAX_K = 1024
#: Elements per stage-1 program (one chunk of one row) on large rows.
CHUNK = 4096
#: Largest candidate block stage 2 holds in registers.
MAX_CANDIDATES = 32768
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def next_power_of_2(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()


def empty_outputs(x, k):
    """Allocate ``(values, indices)`` for top-k of ``x`` over its last dim, as the kernel does.

    This is the FakeTensor rule too: it reads no data, only ``x``'s shape, dtype and device.
    Shapes: ``x[..., V]`` -> values ``[..., k]`` (x's dtype), indices ``[..., k]`` (int64).
    """
    shape = tuple(x.shape[:-1]) + (k,)
    values = torch.empty(shape, dtype=x.dtype, device=x.device)
    indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    return values, indices


def fake(x, k):
    """FakeTensor/meta rule: output shapes and dtypes of :func:`launch`, reading no data."""
    torch._check(x.dim() >= 1, lambda: "topk: expected a tensor with at least one dim")
    torch._check(0 <= k, lambda: f"topk: k must be >= 0, got {k}")
    torch._check(k <= x.shape[-1], lambda: "topk: selected index k out of range")
    return empty_outputs(x, k)


def reference(x, k):
    """The op this kernel replaces, with the kernel's argument pattern: ``torch.topk(x, k)``."""
    values, indices = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    return values.contiguous(), indices.contiguous()


def supported(x, k):
    """Whether :func:`launch` runs the Triton kernels for these arguments (else the reference)."""
    return triton is not None and x.dtype in FLOAT_DTYPES and x.dim() >= 1 and k <= MAX_K


if triton is not None:

    @triton.jit
    def _ordered_key(x):
        """float32 -> int32 whose signed order is the float order (NaN above +inf)."""
        bits = x.to(tl.int32, bitcast=True)
        return bits ^ ((bits >> 31) & 0x7FFFFFFF)

    @triton.jit
    def _kth_largest(key, valid, kk):
        """The largest t with count(valid & key >= t) >= kk: the kk-th largest key.

        A bitwise search from the top bit over ``u = t + 2**31``; 32 register reductions.
        """
        prefix = tl.full((), 0, tl.int64)
        for i in tl.static_range(32):
            cand = prefix | tl.full((), 1 << (31 - i), tl.int64)
            t = (cand - 2147483648).to(tl.int32)
            count = tl.sum((valid & (key >= t)).to(tl.int32), axis=0)
            prefix = tl.where(count >= kk, cand, prefix)
        return (prefix - 2147483648).to(tl.int32)

    @triton.jit
    def _take_mask(key, valid, thr, kk):
        """Exactly min(kk, count(valid)) elements: keys above ``thr``, then the first ties."""
        gt = valid & (key > thr)
        eq = valid & (key == thr)
        n_gt = tl.sum(gt.to(tl.int32), axis=0)
        rank = tl.cumsum(eq.to(tl.int32), axis=0)
        return gt | (eq & (rank <= kk - n_gt))

    @triton.jit
    def _topk_stage1(
        x_ptr, key_ptr, idx_ptr, N, stride_row, k, num_chunks,
        CHUNK: tl.constexpr, KP: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        chunk = tl.program_id(1)
        offs = tl.arange(0, CHUNK)
        col = chunk * CHUNK + offs
        valid = col < N
        x = tl.load(x_ptr + row * stride_row + col, mask=valid, other=0.0).to(tl.float32)
        key = _ordered_key(x)
        kk = tl.minimum(k, tl.minimum(N - chunk * CHUNK, CHUNK))
        thr = _kth_largest(key, valid, kk)
        take = _take_mask(key, valid, thr, kk)
        pos = tl.cumsum(take.to(tl.int32), axis=0) - 1
        base = (row * num_chunks + chunk) * k
        tl.store(key_ptr + base + pos, key, mask=take)
        tl.store(idx_ptr + base + pos, col, mask=take)
        slot = tl.arange(0, KP)
        empty = tl.full([KP], -1, tl.int32)
        tl.store(idx_ptr + base + slot, empty, mask=(slot >= kk) & (slot < k))

    @triton.jit
    def _topk_stage2(
        x_ptr, key_ptr, idx_ptr, val_out_ptr, idx_out_ptr, scratch_ptr, stride_row, C, k,
        CB: tl.constexpr, KP: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, CB)
        in_row = offs < C
        cidx = tl.load(idx_ptr + row * C + offs, mask=in_row, other=-1)
        valid = cidx >= 0
        key = tl.load(key_ptr + row * C + offs, mask=valid, other=0)
        thr = _kth_largest(key, valid, k)
        take = _take_mask(key, valid, thr, k)
        pos = tl.cumsum(take.to(tl.int32), axis=0) - 1
        packed = (key.to(tl.int64) << 32) + (2147483647 - cidx).to(tl.int64)
        slot = tl.arange(0, KP)
        lowest = tl.full([KP], -9223372036854775807 - 1, tl.int64)
        tl.store(scratch_ptr + row * KP + slot, lowest, mask=slot >= k)
        tl.store(scratch_ptr + row * KP + pos, packed, mask=take)
        tl.debug_barrier()
        best = tl.sort(tl.load(scratch_ptr + row * KP + slot), descending=True)
        index = 2147483647 - (best - ((best >> 32) << 32))
        keep = slot < k
        values = tl.load(x_ptr + row * stride_row + index, mask=keep, other=0.0)
        tl.store(val_out_ptr + row * k + slot, values, mask=keep)
        tl.store(idx_out_ptr + row * k + slot, index, mask=keep)


def _warps(block):
    """Warps per program: about 16 elements per thread; 32 warps from 32768 elements, where 16
    warps need 128 registers and spill (cuobjdump --dump-resource-usage, sm_90, triton 3.9)."""
    return 4 if block <= 1024 else (8 if block <= 4096 else (16 if block <= 16384 else 32))


def launch(x, k, wrap=lambda kernel: kernel, chunk=None):
    """Top-k of ``x`` over its last dim with the Triton kernels.

    Args:
        x: ``[..., V]`` float16/bfloat16/float32 tensor on a Triton device (or CPU under
            ``TRITON_INTERPRET=1``); any strides.
        k: how many values to keep, ``0 <= k <= V``.
        wrap: applied to each ``@triton.jit`` kernel before launch (``torch.library.wrap_triton``
            inside a ``triton_op``, so torch.compile sees the kernels).
        chunk: stage-1 chunk size (a power of two); default :data:`CHUNK` on large rows.

    Returns:
        ``(values [..., k], indices [..., k] int64)``, values descending.

    Raises:
        RuntimeError: ``k`` out of range (via ``torch._check``, as torch.topk).
    """
    values, indices = fake(x, k)
    if not supported(x, k):
        return reference(x, k)
    V = x.shape[-1]
    if values.numel() == 0:
        return values, indices
    x2 = x.reshape(-1, V)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    B = x2.shape[0]
    KP = max(next_power_of_2(k), 16)
    if chunk is None:
        chunk = CHUNK if V > CHUNK else max(next_power_of_2(V), 16)
    num_chunks = triton.cdiv(V, chunk)
    C = num_chunks * k
    CB = max(next_power_of_2(C), 16)
    if CB > MAX_CANDIDATES:
        return reference(x, k)
    cand_key = torch.empty((B, C), dtype=torch.int32, device=x.device)
    cand_idx = torch.empty((B, C), dtype=torch.int32, device=x.device)
    scratch = torch.empty((B, KP), dtype=torch.int64, device=x.device)
    wrap(_topk_stage1)[(B, num_chunks)](
        x2, cand_key, cand_idx, V, x2.stride(0), k, num_chunks,
        CHUNK=chunk, KP=KP, num_warps=_warps(chunk),
    )
    wrap(_topk_stage2)[(B,)](
        x2, cand_key, cand_idx, values, indices, scratch, x2.stride(0), C, k,
        CB=CB, KP=KP, num_warps=_warps(CB),
    )
    return values, indices
