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

    return kernel(q, k, v, causal, scale, window=window, key_lengths=key_lengths)


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
    read by separate programs, whose partial softmaxes are merged by their logsumexps (Flash-Decoding);
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
        num_splits: slices of the keys per sequence, in [1, 128]; None chooses enough to fill the GPU
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
        q, k, v, lengths=lengths, block_tables=block_tables, num_splits=num_splits, scale=scale
    )
