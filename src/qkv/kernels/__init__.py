"""GPU kernels. Triton is imported on first use, so `import qkv` works where Triton is missing."""

from torch import Tensor

from qkv.kernels.contract import NO_TRITON, triton_installed
from qkv.masks import Causal


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: Causal = False,
    scale: float | None = None,
    *,
    window: int | None = None,
    key_lengths: Tensor | None = None,
) -> Tensor:
    """Exact scaled dot-product attention by the fused Triton kernels; differentiable.

    Computes `softmax(q k^T * scale + mask) v` like `torch.nn.functional.scaled_dot_product_attention`,
    without materialising the `(L, S)` scores. Triton is imported on the first call. It runs on CUDA
    tensors, and on CPU tensors only under Triton's interpreter (`TRITON_INTERPRET=1` set before Triton is
    imported): slowly, for testing, and in float16 only.

    The mask keeps query `i` and key `j` (1 = may attend) when all the options given allow it:

    - `causal=True` or `"top_left"`: `j <= i`, torch's `is_causal` (the lower triangle of an L x S matrix of
      ones); `"bottom_right"`: `j <= i + S - L`, the last query on the last key, as decoding with a cache
      needs. For L = 3, S = 5 and for L = 5, S = 3:

            top_left        bottom_right      top_left   bottom_right
            1 0 0 0 0       1 1 1 0 0         1 0 0      0 0 0
            1 1 0 0 0       1 1 1 1 0         1 1 0      0 0 0
            1 1 1 0 0       1 1 1 1 1         1 1 1      1 0 0
                                              1 1 1      1 1 0
                                              1 1 1      1 1 1

    - `window=w`: also `j > i - w` (top-left) or `j > i + S - L - w` (bottom-right): each query sees at most
      the `w` most recent keys it may see, exactly `qkv.sliding_window_mask(L, w, S, alignment=...)`.
    - `key_lengths`: in batch `b`, `j < key_lengths[b]`, exactly `qkv.padding_mask(key_lengths, S)` (a
      length below 0 or above S acts as 0 or S). The alignments are taken against S, not the lengths.

    A query that may attend no key (the first L - S rows of a bottom-right mask when L > S, a batch whose
    length is 0) gets zeros, and passes zero gradients back.

    Args:
        q: `(B, H, L, D)` queries, float16 or bfloat16, `D` in 16, 32, 64, 128.
        k: `(B, H_kv, S, D)` keys, same dtype and device; `H_kv` divides `H`, and query head `h` reads key
            head `h // (H // H_kv)` (grouped-query attention, torch's `enable_gqa`), without copying.
        v: `(B, H_kv, S, D)` values.
        causal: False, True (= `"top_left"`) or `"bottom_right"`.
        scale: multiplies the scores; `1 / sqrt(D)` when None.
        window: how many keys each query sees, itself included (at least 1); needs `causal`.
        key_lengths: `(B,)` integer tensor on the inputs' device, the number of real keys per batch.

    Returns:
        `(B, H, L, D)`, in the inputs' dtype.

    Raises:
        ModuleNotFoundError: Triton is not installed (the `kernel` extra).
        TypeError: a non-tensor, a dtype other than float16/bfloat16 (bfloat16 under the interpreter),
            tensors of different dtypes, a `scale` that is not a number, a `causal` that is neither a bool
            nor a str, a `window` that is not an int, or `key_lengths` that are not integers.
        ValueError: a tensor that is not 4-D, shapes that disagree, key heads that do not divide the query
            heads, an unsupported head size, an empty sequence, a batch or head count above 65535 (CUDA's
            grid limit), tensors on different devices, CPU tensors without `TRITON_INTERPRET=1`, an unknown
            alignment, a `window` below 1 or without `causal`, or `key_lengths` that are not `(B,)` on the
            inputs' device.
    """
    if not triton_installed():
        raise ModuleNotFoundError(NO_TRITON, name="triton")
    from qkv.kernels.flash import flash_attention as kernel

    return kernel(
        q, k, v, causal, scale, window=window, key_lengths=key_lengths
    )


def flash_attention_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    *,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    causal: Causal = False,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """Exact attention over a packed batch of sequences of different lengths, by the same Triton kernels.

    The N sequences lie one after another, without padding: sequence `b` is queries `cu_seqlens_q[b] ..
    cu_seqlens_q[b + 1] - 1` of `q` and keys `cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1` of `k` and `v`.
    Each query attends only its own sequence's keys (the document mask), and among them what `causal`
    and `window` allow, with positions counted from its sequence's start and the alignment taken per
    sequence: exactly `qkv.document_mask(cu_seqlens_q, cu_seqlens_k, causal=causal, window=window)`, with
    `flash_attention`'s options. For sequences of 2 and 1 queries, 3 and 2 keys (True = may attend):

        causal=False   "top_left"   "bottom_right"
        1 1 1 0 0      1 0 0 0 0    1 1 0 0 0
        1 1 1 0 0      1 1 0 0 0    1 1 1 0 0
        0 0 0 1 1      0 0 0 1 0    0 0 0 1 1

    `causal=True` means `"top_left"`, as in every qkv function and torch's `is_causal`. The flash-attention
    library's `causal=True` (since its version 2.1) aligns bottom-right instead, the last query of a sequence
    on its last key, as new queries against a cache need: pass `"bottom_right"` for that. The two agree where
    a sequence has as many queries as keys, as in training on packed documents.

    The kernels never visit the tiles between two sequences: a packed batch costs the tiles of each
    sequence's own `(L_b, S_b)` square (`qkv.kernels.tiles.count_packed_tiles`), not those of the
    `(total_q, total_k)` matrix. The inputs are copied into one run of rows per head and the output back
    (time linear in the tokens). A sequence may be empty; a query with no key (an empty key sequence, or
    before every key bottom-right) gets zeros and passes zero gradients back. Differentiable. Runs like
    `flash_attention`: CUDA tensors, or CPU tensors under Triton's interpreter in float16. Checked on CPU
    under the interpreter only: the CUDA path has not run on a GPU yet.

    Args:
        q: `(total_q, H, D)` queries, float16 or bfloat16, `D` in 16, 32, 64, 128.
        k: `(total_k, H_kv, D)` keys, same dtype and device; `H_kv` divides `H`, and query head `h` reads
            key head `h // (H // H_kv)` (grouped-query attention).
        v: `(total_k, H_kv, D)` values.
        cu_seqlens_q: int32 `(N + 1,)` on the inputs' device: 0, the cumulative query lengths, total_q.
        cu_seqlens_k: int32 `(N + 1,)`: 0, the cumulative key lengths, total_k.
        max_seqlen_q: at least the longest query sequence; computed from `cu_seqlens_q` when None. It sizes
            the launch grid and keys the autotuner.
        max_seqlen_k: at least the longest key sequence; computed when None.
        causal: False, True (= `"top_left"`) or `"bottom_right"`, per sequence.
        scale: multiplies the scores; `1 / sqrt(D)` when None.
        window: how many keys each query sees, itself included (at least 1); needs `causal`.

    Returns:
        `(total_q, H, D)`, in the inputs' dtype.

    Raises:
        ModuleNotFoundError: Triton is not installed (the `kernel` extra).
        TypeError: a non-tensor, a dtype other than float16/bfloat16 (bfloat16 under the interpreter),
            tensors of different dtypes, cumulative lengths that are not int32, a `max_seqlen` or
            `window` that is not an int, a `scale` that is not a number, a `causal` neither bool nor str.
        ValueError: a tensor that is not 3-D, k and v of different shapes, key heads that do not divide the
            query heads, an unsupported head size, more than 65535 heads or sequences, cumulative lengths
            that are not `(N + 1,)`, do not start at 0, decrease, do not end at total_q (total_k), count
            different N for q and k, or lie on another device; a `max_seqlen` below a sequence's length,
            CPU tensors without `TRITON_INTERPRET=1`, an unknown alignment, a `window` below 1 or without
            `causal`. Reading the lengths synchronises with the GPU.
    """
    if not triton_installed():
        raise ModuleNotFoundError(NO_TRITON, name="triton")
    from qkv.kernels.flash import flash_attention_varlen as kernel

    return kernel(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        causal=causal,
        scale=scale,
        window=window,
    )


def decode_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    lengths: Tensor | None = None,
    block_tables: Tensor | None = None,
    num_splits: int | None = None,
    scale: float | None = None,
) -> Tensor:
    """Attention of each sequence's newest L queries on its cached keys, by split-KV Triton kernels (decoding).

    Query `i` of sequence `b` is its token `lengths[b] - L + i` and sees the cached tokens `0 ..
    lengths[b] - L + i` (causal, aligned bottom-right per sequence: the queries' own keys and values are
    already in the cache), exactly `qkv.paged_attention`. The keys are split into `num_splits` slices
    read by separate programs, whose partial softmaxes are merged by their logsumexps (Flash-Decoding),
    by a second kernel, in split order (the same bits run after run);
    the query heads sharing a key/value head read each key tile once. Forward only: no gradients. Runs on
    CUDA tensors, and on CPU tensors under Triton's interpreter (float16 only), like `flash_attention`.

    Args:
        q: `(B, H, L, D)` queries, float16 or bfloat16, `1 <= L <= 64` (built for 1 to 16), `D` in 16,
            32, 64, 128.
        k: the key cache, same dtype and device: contiguous `(B, H_kv, S, D)`, or with `block_tables` a
            pool of pages `(P, H_kv, page_size, D)`; `H_kv` divides `H`, and query head `h` reads key
            head `h // (H // H_kv)`.
        v: the value cache, the shape of `k`.
        lengths: integer `(B,)` on the inputs' device: the tokens cached per sequence, in `[L, S]` (S
            when None), or `[L, max_pages * page_size]` when paged (needed then).
        block_tables: integer `(B, max_pages)`: each sequence's pages in order; entries past its last
            page are not read. None for a contiguous cache.
        num_splits: slices of the keys per sequence, in [1, 128]; None chooses enough to fill whole
            waves of the GPU's multiprocessors, at most one per key tile
            (`qkv.kernels.decode.default_splits`). Splits past a sequence's keys do nothing.
        scale: multiplies the scores; `1 / sqrt(D)` when None.

    Returns:
        `(B, H, L, D)`, in the inputs' dtype.

    Raises:
        ModuleNotFoundError: Triton is not installed (the `kernel` extra).
        TypeError: a non-tensor, a dtype other than float16/bfloat16 (bfloat16 under the interpreter),
            tensors of different dtypes, non-integer lengths or tables, a non-int `num_splits`.
        ValueError: shapes that disagree (named with the shapes), an unsupported head size or L, tensors
            on different devices, CPU tensors without `TRITON_INTERPRET=1`, paged without lengths, a
            length below L or above the capacity, a page index outside `[0, P)` among the pages read,
            `num_splits` outside [1, 128], or inputs that require grad while grad mode is on.
    """
    if not triton_installed():
        raise ModuleNotFoundError(NO_TRITON, name="triton")
    from qkv.kernels.decode import decode_attention as kernel

    return kernel(
        q,
        k,
        v,
        lengths=lengths,
        block_tables=block_tables,
        num_splits=num_splits,
        scale=scale,
    )
