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
