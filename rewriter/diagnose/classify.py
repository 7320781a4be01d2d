"""Op-mix categories for device kernels and CPU operators.

Order of evidence (docs/design.md): the profiler's own category (memcpy / memset activities), then the
parent aten op that launched the kernel, then the kernel's name. Name patterns: cuBLAS / CUTLASS /
``sm90_xmma`` / ``nvjet`` / ``gemm`` are GEMMs; flash / fmha / ``efficient_attention`` are
attention; Inductor's ``triton_tem`` (template: GEMM), ``triton_red``/``triton_per``
(reductions, usually norms), ``triton_poi`` (pointwise); ``nccl*`` is communication. On CPU the
aten operator itself is classified.
"""

from __future__ import annotations

import re

CATEGORIES = ("gemm", "attention", "norm", "elementwise", "reduction", "copy", "communication", "other")

_ATEN = {
    "gemm": (
        "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_addmm_activation", "conv1d", "conv2d",
        "conv3d", "convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution",
        "einsum", "_scaled_mm", "_int_mm", "addbmm", "addmv", "mv", "dot",
    ),
    "attention": (
        "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
        "_efficient_attention_backward", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward",
    ),
    "norm": (
        "layer_norm", "native_layer_norm", "native_layer_norm_backward", "rms_norm", "_fused_rms_norm",
        "group_norm", "native_group_norm", "batch_norm", "native_batch_norm", "_batch_norm_impl_index",
        "cudnn_batch_norm", "_native_batch_norm_legit", "_fused_rms_norm_backward",
    ),
    "reduction": (
        "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "softmax", "_softmax",
        "log_softmax", "_log_softmax", "topk", "sort", "argsort", "cumsum", "cumprod", "var",
        "std", "var_mean", "norm", "linalg_vector_norm", "logsumexp", "prod", "any", "all",
        "multinomial", "kthvalue", "median", "unique", "_unique2", "nonzero", "_softmax_backward_data",
        "nll_loss_forward", "nll_loss_backward", "nll_loss", "cross_entropy_loss", "searchsorted",
        "bincount", "histc", "scatter_add", "index_add", "embedding_dense_backward",
    ),
    "copy": (
        "copy_", "_to_copy", "to", "clone", "contiguous", "cat", "stack", "index_select", "gather",
        "scatter", "embedding", "index", "index_put_", "_local_scalar_dense", "item", "fill_",
        "zero_", "zeros", "ones", "empty", "empty_strided", "full", "pad", "constant_pad_nd",
        "repeat", "flip", "roll", "narrow_copy", "slice_scatter", "select_backward", "masked_scatter",
        "_unsafe_view", "new_zeros", "arange", "randint", "tril", "triu", "where",
    ),
    "communication": ("all_reduce", "allreduce_", "all_gather", "reduce_scatter", "broadcast_", "all_to_all", "send", "recv"),
}
_ATEN_LOOKUP = {op: cat for cat, ops in _ATEN.items() for op in ops}
#: Pointwise math and activations (anything else elementwise lands here too, see _elementwise).
_ELEMENTWISE = re.compile(
    r"^(add|sub|mul|div|neg|exp|exp2|log|log1p|sqrt|rsqrt|pow|tanh|sigmoid|relu|gelu|silu|"
    r"mish|hardswish|leaky_relu|elu|softplus|threshold|clamp|clamp_min|clamp_max|abs|sign|"
    r"sin|cos|erf|reciprocal|lerp|addcmul|addcdiv|maximum|minimum|eq|ne|lt|le|gt|ge|"
    r"logical_\w+|bitwise_\w+|masked_fill|dropout|native_dropout|rsub|square|floor|ceil|round|"
    r"trunc|fmod|remainder|_foreach_\w+|\w+_backward|glu|hardtanh|silu_backward|gelu_backward)_?$"
)
_KERNEL_NAMES = [
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|cutlass.*fmha", re.I)),
    ("gemm", re.compile(r"triton_tem|gemm|xmma|nvjet|cublas|cutlass|s\d+gemm|_mm_|matmul|wgmma|sm\d+_xmma|ampere_.*(s|h)\d+|splitk", re.I)),
    ("norm", re.compile(r"layer_?norm|rms_?norm|group_?norm|batch_?norm", re.I)),
    ("reduction", re.compile(r"triton_red|triton_per|reduce|softmax|topk|sort|radix|scan|cub::|argmax|bitonic", re.I)),
    ("copy", re.compile(r"copy|memcpy|memset|cat_|index|gather|scatter|fill|embedding", re.I)),
    ("elementwise", re.compile(r"triton_poi|elementwise|vectorized|unrolled|pointwise|activation|gelu|silu|relu", re.I)),
]


def classify_aten(op: str) -> str | None:
    """Category of an aten operator name (``aten::addmm`` → ``gemm``), or None if unknown."""
    name = op.split("::", 1)[-1].split(".", 1)[0]
    if op.startswith("c10d::"):
        return "communication"
    if name in _ATEN_LOOKUP:
        return _ATEN_LOOKUP[name]
    if name.endswith("_") and name[:-1] in _ATEN_LOOKUP:
        return _ATEN_LOOKUP[name[:-1]]
    if name.endswith("_backward") and _ATEN_LOOKUP.get(name.removesuffix("_backward")) in ("attention", "gemm", "norm"):
        # an attention / GEMM / norm op's own backward (``_scaled_dot_product_flash_attention_for_cpu_backward``)
        # is that op's kind, not pointwise math (the ``\w+_backward`` pattern below)
        return _ATEN_LOOKUP[name.removesuffix("_backward")]
    if _ELEMENTWISE.match(name):
        return "elementwise"
    if name.startswith(("view", "reshape", "permute", "transpose", "t", "expand", "as_strided", "squeeze", "unsqueeze", "split", "chunk", "slice", "select", "narrow", "detach", "alias", "unbind", "flatten", "resolve_")):
        return "copy"
    return None


def classify_kernel(name: str, kind: str = "kernel", parent_op: str | None = None) -> str:
    """Category of a device activity: profiler kind, then parent aten op, then kernel name.

    Args:
        name: the kernel name as the profiler records it.
        kind: ``kernel``, ``memcpy`` or ``memset`` (the profiler's activity category).
        parent_op: the aten op that launched it (``aten::mm``), if known.

    Returns:
        One of :data:`CATEGORIES`.
    """
    if kind in ("memcpy", "memset"):
        return "copy"
    # Inductor's generated kernels carry no meaningful parent op (the launch is from a compiled
    # graph), and nccl kernels are unambiguous: the name decides for those.
    if name.startswith("triton_") or "nccl" in name.lower():
        return _by_name(name)
    if parent_op:
        cat = classify_aten(parent_op)
        if cat is not None and cat != "copy":
            return cat
        if cat == "copy" and _by_name(name) in ("copy", "other"):
            return "copy"
    return _by_name(name)


def _by_name(name: str) -> str:
    if name.startswith("triton_poi"):
        return "elementwise"
    if name.startswith(("triton_red", "triton_per")):
        return "norm" if re.search(r"norm|rsqrt|var_mean", name) else "reduction"
    for cat, pattern in _KERNEL_NAMES:
        if pattern.search(name):
            return cat
    return "other"


def classify_cpu_op(op: str) -> str:
    """Category of a CPU operator (the no-CUDA op mix): aten name, then ``other``."""
    return classify_aten(op) or "other"
