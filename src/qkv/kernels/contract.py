"""What the FlashAttention kernels take: the one statement that `qkv.flash_attention` and `qkv.attention` read.

`refusal` says why the kernels cannot take a call, or None; `qkv.attention` reads it to choose a backend,
and `check_kernel_inputs` (`qkv.flash_attention`'s check) raises it. `check_packed_inputs` is
`qkv.flash_attention_varlen`'s check, and `Packing` what it passes on. Importing this module does not import
Triton.
"""

import importlib.util
from typing import NamedTuple

import torch
from torch import Tensor

from qkv._checks import (
    check_cumulative_lengths,
    check_same_dtype_and_device,
    check_scale,
    check_sizes,
    check_tensor,
    shape,
)
from qkv.masks import Mask

NO_TRITON = (
    "the kernels need Triton, which is not installed: install qkv with its kernel extra, "
    "qkv[kernel] (the Get started page gives the command), or pip install triton"
)


def triton_installed() -> bool:
    """Whether Triton can be imported, without importing it."""
    return importlib.util.find_spec("triton") is not None


def interpreted() -> bool:
    """Whether Triton runs the kernels in its CPU interpreter (`TRITON_INTERPRET=1` before its import).

    Imports Triton: call it only where Triton is installed.
    """
    import triton

    return triton.knobs.runtime.interpret


DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)
# CUDA's limit on grid axes 1 and 2 (axis 0 allows 2**31 - 1)
MAX_GRID_YZ = 65535


class Refusal(NamedTuple):
    """Why the kernels cannot take a call: the error a caller raises if it asked for them, and the reason."""

    error: type[TypeError] | type[ValueError]
    reason: str


def refusal(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask | None = None,
    dropout_p: float = 0.0,
) -> Refusal | None:
    """Why the kernels cannot take `q`, `k`, `v` with `mask` and `dropout_p`, or None if they can.

    The kernels take `q (B, H, L, D)`, `k` and `v (B, H_kv, S, D)` with `H_kv` dividing `H`, float16 or
    bfloat16, `D` in `HEAD_DIMS`, `L, S >= 1`, `B, H <= MAX_GRID_YZ`; a mask without a dense part (a causal
    alignment, a window, key lengths) and no dropout. They run on CUDA, or on the CPU under Triton's
    interpreter, which cannot multiply bfloat16.

    Args:
        q, k, v: tensors of one floating dtype and device (the caller has checked that).
        mask: the parsed masks; None for none.
        dropout_p: the probability of dropping an attention weight.
    """
    if dropout_p > 0.0:
        return Refusal(
            ValueError,
            f"the kernels have no dropout, got dropout_p={dropout_p}",
        )
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            return Refusal(
                ValueError,
                f"{name} must be 4-D (B, H, N, D), got shape {shape(x)}",
            )
    if q.dtype not in DTYPES:
        return Refusal(
            TypeError,
            f"q has dtype {q.dtype}; flash_attention takes torch.float16 or torch.bfloat16",
        )
    shapes = f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
    if not q.size(0) == k.size(0) == v.size(0):
        return Refusal(
            ValueError, f"q, k and v disagree on the batch size B: {shapes}"
        )
    if k.size(1) != v.size(1) or q.size(1) % k.size(1) != 0:
        return Refusal(
            ValueError,
            "k and v must have the same number of heads H_kv, dividing q's H (grouped-query "
            f"attention): {shapes}",
        )
    if k.size(2) != v.size(2):
        return Refusal(
            ValueError,
            f"k and v disagree on length S: k {shape(k)} vs v {shape(v)}",
        )
    if not q.size(3) == k.size(3) == v.size(3):
        return Refusal(
            ValueError, f"q, k and v disagree on head size D: {shapes}"
        )
    if q.size(3) not in HEAD_DIMS:
        return Refusal(
            ValueError,
            f"head size D must be one of {HEAD_DIMS}, got {q.size(3)}: q {shape(q)}",
        )
    if max(q.shape[:2]) > MAX_GRID_YZ:
        return Refusal(
            ValueError,
            f"batch and heads must each be at most {MAX_GRID_YZ} (CUDA's limit on a launch grid "
            f"axis): q {shape(q)}",
        )
    if q.size(2) == 0 or k.size(2) == 0:
        return Refusal(
            ValueError,
            f"q and k need at least one position: q {shape(q)}, k {shape(k)}",
        )
    refused = _platform_refusal(q)
    if refused is not None:
        return refused
    return None if mask is None else mask_refusal(mask)


def _platform_refusal(q: Tensor) -> Refusal | None:
    """Why the kernels cannot run where `q` is: no Triton, the CPU without the interpreter, or bfloat16 there."""
    if not triton_installed():
        return Refusal(ValueError, NO_TRITON)
    if q.device.type == "cpu" and not interpreted():
        return Refusal(
            ValueError,
            f"q, k and v are on the CPU {shape(q)}: the kernels need CUDA tensors, or Triton's "
            "interpreter (TRITON_INTERPRET=1 set before triton is imported)",
        )
    if interpreted() and q.dtype == torch.bfloat16:
        return Refusal(
            TypeError,
            "q has dtype torch.bfloat16, which Triton's interpreter cannot multiply (it reads "
            "bfloat16 tl.dot operands as 16-bit integers); use float16, or run on a GPU",
        )
    return None


def mask_refusal(mask: Mask) -> Refusal | None:
    """Why the kernels cannot take `mask` for tensors that `refusal` accepts, or None."""
    if mask.dense is not None:
        return Refusal(
            ValueError,
            "the kernels take no attn_mask (masks: is_causal, window, key_lengths; "
            "MultiHeadAttention passes a key_padding_mask that hides a suffix of each row as key_lengths)",
        )
    return None


def check_kernel_inputs(q: Tensor, k: Tensor, v: Tensor, scale: object) -> None:
    """Raise, naming the argument and the shapes, unless the kernels can take `q`, `k`, `v` and `scale`.

    Checks that they are tensors of one floating dtype and device, and a number or None, then raises the
    `refusal` if there is one.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
    check_same_dtype_and_device(q=q, k=k, v=v)
    check_scale(scale)
    refused = refusal(q, k, v)
    if refused is not None:
        raise refused.error(refused.reason)


class Packing(NamedTuple):
    """Sequences packed one after another (`qkv.flash_attention_varlen`), as the kernels take them.

    `cu_seqlens_q` and `cu_seqlens_k` are the cumulative lengths, int32 `(N + 1,)`; `max_seqlen_q` and
    `max_seqlen_k` at least the longest sequence's (they size the launch grid and key the autotuner).
    """

    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    max_seqlen_q: int
    max_seqlen_k: int


def check_packed_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: object,
    max_seqlen_k: object,
    scale: object,
) -> Packing:
    """Raise, naming the argument and the shapes or values, unless the kernels can take a packed batch.

    They take `q (total_q, H, D)`, `k` and `v (total_k, H_kv, D)` of one dtype (float16 or bfloat16) and
    device, `H_kv` dividing `H`, `D` in `HEAD_DIMS`; `cu_seqlens_q` and `cu_seqlens_k` int32 `(N + 1,)` on
    that device, starting at 0, never decreasing, ending at total_q and total_k; `N, H <= MAX_GRID_YZ`;
    `max_seqlen_q`, `max_seqlen_k` None or ints at least the longest sequence's. Sequences of length 0 are
    allowed. Reading the lengths synchronises with the GPU.

    Returns:
        The `Packing`, with the longest lengths where `max_seqlen_q` or `max_seqlen_k` is None.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
    check_same_dtype_and_device(q=q, k=k, v=v)
    check_scale(scale)
    for name, x, layout in (
        ("q", q, "total_q, H"),
        ("k", k, "total_k, H_kv"),
        ("v", v, "total_k, H_kv"),
    ):
        if x.dim() != 3:
            raise ValueError(
                f"{name} must be 3-D ({layout}, D), sequences packed one after another, "
                f"got shape {shape(x)}"
            )
    if q.dtype not in DTYPES:
        raise TypeError(
            f"q has dtype {q.dtype}; flash_attention_varlen takes torch.float16 or torch.bfloat16"
        )
    shapes = f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have one shape (total_k, H_kv, D): k {shape(k)} vs v {shape(v)}"
        )
    if k.size(1) == 0 or q.size(1) % k.size(1) != 0:
        raise ValueError(
            f"k's heads H_kv must be at least 1 and divide q's heads H (grouped-query attention): {shapes}"
        )
    if q.size(2) != k.size(2) or q.size(2) not in HEAD_DIMS:
        raise ValueError(
            f"q, k and v need one head size D in {HEAD_DIMS}: {shapes}"
        )
    if q.size(1) > MAX_GRID_YZ:
        raise ValueError(
            f"q's heads H must be at most {MAX_GRID_YZ} (CUDA's limit on a launch grid axis): q {shape(q)}"
        )
    for name, cu_seqlens in (
        ("cu_seqlens_q", cu_seqlens_q),
        ("cu_seqlens_k", cu_seqlens_k),
    ):
        if isinstance(cu_seqlens, Tensor) and cu_seqlens.device != q.device:
            raise ValueError(
                f"{name} is on {cu_seqlens.device} but q is on {q.device}"
            )
    refused = _platform_refusal(q)
    if refused is not None:
        raise refused.error(refused.reason)
    lengths_q = check_cumulative_lengths(
        "cu_seqlens_q", cu_seqlens_q, q.size(0), f"q {shape(q)}"
    )
    lengths_k = check_cumulative_lengths(
        "cu_seqlens_k", cu_seqlens_k, k.size(0), f"k {shape(k)}"
    )
    if len(lengths_q) != len(lengths_k):
        raise ValueError(
            "cu_seqlens_q and cu_seqlens_k disagree on the number of sequences N: "
            f"cu_seqlens_q {shape(cu_seqlens_q)} vs cu_seqlens_k {shape(cu_seqlens_k)}"
        )
    if len(lengths_q) > MAX_GRID_YZ:
        raise ValueError(
            f"at most {MAX_GRID_YZ} sequences (CUDA's limit on a launch grid axis), got "
            f"{len(lengths_q)}: cu_seqlens_q {shape(cu_seqlens_q)}"
        )
    longest = [
        _longest(name, given, lengths)
        for name, given, lengths in (
            ("max_seqlen_q", max_seqlen_q, lengths_q),
            ("max_seqlen_k", max_seqlen_k, lengths_k),
        )
    ]
    return Packing(cu_seqlens_q, cu_seqlens_k, *longest)


def _longest(name: str, given: object, lengths: list[int]) -> int:
    """`given` if it is an int at least the longest of `lengths` (which it is when None)."""
    longest = max(lengths, default=0)
    if given is None:
        return longest
    check_sizes(0, **{name: given})
    if given < longest:
        sequence = lengths.index(longest)
        raise ValueError(
            f"{name} = {given} is shorter than sequence {sequence}, of length {longest}"
        )
    return given


MAX_DECODE_QUERIES = 64  # decode_attention's L at most: a few new tokens (prefill is flash_attention's)
MAX_SPLITS = 128  # splits per sequence: the default's cap, past which they only add merge work


def check_decode_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lengths: Tensor | None,
    block_tables: Tensor | None,
    num_splits: object,
    scale: object,
) -> None:
    """Raise, naming the argument and the shapes, unless the split-KV decoding kernels can take the call.

    They take `q (B, H, L, D)` with `1 <= L <= MAX_DECODE_QUERIES`, and either a contiguous cache, `k`
    and `v (B, H_kv, S, D)` with optional `lengths (B,)` in `[L, S]`, or a paged one, `k` and `v
    (P, H_kv, page_size, D)` with `block_tables (B, max_pages)` and `lengths (B,)` in
    `[L, max_pages * page_size]` whose pages read lie in `[0, P)`. Same dtype (float16 or bfloat16) and
    device for q, k, v; integer tables and lengths on that device; `H_kv` divides `H`; `D` in
    `HEAD_DIMS`; `num_splits` None or an int in `[1, MAX_SPLITS]`; no gradients asked for (grad mode
    and `requires_grad`). Reading the
    lengths and tables synchronises with the GPU.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
        if x.dim() != 4:
            layout = (
                "(B, H, L, D)"
                if name == "q"
                else "(B, H_kv, S, D) or (P, H_kv, page_size, D)"
            )
            raise ValueError(
                f"{name} must be 4-D {layout}, got shape {shape(x)}"
            )
    check_same_dtype_and_device(q=q, k=k, v=v)
    check_scale(scale)
    if q.dtype not in DTYPES:
        raise TypeError(
            f"q has dtype {q.dtype}; decode_attention takes torch.float16 or torch.bfloat16"
        )
    batch, heads, seqlen_q, head_dim = q.shape
    shapes = f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape: k {shape(k)} vs v {shape(v)}"
        )
    if 0 in (batch, heads, *k.shape[:3]):
        raise ValueError(
            f"q's B and H and k's first three sizes must be at least 1 (nothing to decode): {shapes}"
        )
    if heads % k.size(1) != 0:
        raise ValueError(
            f"k's heads H_kv must divide q's heads H (grouped-query attention): {shapes}"
        )
    if k.size(3) != head_dim or head_dim not in HEAD_DIMS:
        raise ValueError(
            f"q, k and v need one head size D in {HEAD_DIMS}: {shapes}"
        )
    if not 1 <= seqlen_q <= MAX_DECODE_QUERIES:
        raise ValueError(
            f"decode_attention takes 1 to {MAX_DECODE_QUERIES} new queries L (use flash_attention "
            f"for longer ones): q {shape(q)}"
        )
    if max(batch, k.size(1)) > MAX_GRID_YZ:
        raise ValueError(
            f"B and H_kv must each be at most {MAX_GRID_YZ} (a launch grid axis): {shapes}"
        )
    if num_splits is not None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int):
            raise TypeError(
                f"num_splits must be an int or None, got {type(num_splits).__name__}"
            )
        if not 1 <= num_splits <= MAX_SPLITS:
            raise ValueError(
                f"num_splits must be in [1, {MAX_SPLITS}], got {num_splits}"
            )
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise ValueError(
            "decode_attention computes no gradients (forward only, for inference): call it under "
            "torch.no_grad() or torch.inference_mode(), or pass tensors that do not require grad"
        )
    capacity = _check_cache_layout(q, k, lengths, block_tables)
    if q.device.type == "cpu" and not interpreted():
        raise ValueError(
            f"q, k and v are on the CPU {shape(q)}: decode_attention needs CUDA tensors, or Triton's "
            "interpreter (TRITON_INTERPRET=1 set before triton is imported)"
        )
    if interpreted() and q.dtype == torch.bfloat16:
        raise TypeError(
            "q has dtype torch.bfloat16, which Triton's interpreter cannot multiply; use float16, or "
            "run on a GPU"
        )
    if lengths is not None:
        _check_lengths(
            lengths, seqlen_q, capacity, k.size(2), block_tables, k.size(0)
        )


def _check_cache_layout(
    q: Tensor, k: Tensor, lengths: Tensor | None, block_tables: Tensor | None
) -> int:
    """Check the shapes, dtypes and devices of `lengths` and `block_tables`; return the cache's capacity."""
    batch = q.size(0)
    for name, x in (("lengths", lengths), ("block_tables", block_tables)):
        if x is None:
            continue
        if not isinstance(x, Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor or None, got {type(x).__name__}"
            )
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device} but q is on {q.device}")
    if lengths is not None and lengths.shape != (batch,):
        raise ValueError(
            f"lengths must be (B,) = ({batch},), got {shape(lengths)}"
        )
    if block_tables is None:
        if k.size(0) != batch:
            raise ValueError(
                f"a contiguous cache k (B, H_kv, S, D) needs q's batch size B: q {shape(q)}, "
                f"k {shape(k)} (for a paged cache, pass block_tables and lengths)"
            )
        return k.size(2)
    if lengths is None:
        raise ValueError(
            "a paged cache (block_tables given) needs lengths (B,): the tokens cached"
        )
    if block_tables.dim() != 2 or block_tables.size(0) != batch:
        raise ValueError(
            f"block_tables must be (B, max_pages) with B = {batch}, got {shape(block_tables)}"
        )
    return block_tables.size(1) * k.size(2)


def _check_lengths(
    lengths: Tensor,
    seqlen_q: int,
    capacity: int,
    page_size: int,
    block_tables: Tensor | None,
    pages: int,
) -> None:
    """Raise unless every length lies in `[L, capacity]` and, paged, every page read lies in `[0, P)`."""
    if ((lengths < seqlen_q) | (lengths > capacity)).any():
        where = "max_pages * page_size" if block_tables is not None else "S"
        raise ValueError(
            f"lengths must be at least L = {seqlen_q} (the new queries' own tokens are cached) and at "
            f"most {capacity} ({where}), got {lengths.tolist()}"
        )
    if block_tables is None:
        return
    pages_read = (lengths[:, None] + page_size - 1) // page_size  # (B, 1)
    read = block_tables[
        torch.arange(block_tables.size(1), device=lengths.device) < pages_read
    ]
    if read.numel() and (read.min() < 0 or read.max() >= pages):
        outside = read[(read < 0) | (read >= pages)].tolist()
        raise ValueError(
            f"block_tables reads pages outside the pool's {pages}: {outside}"
        )
