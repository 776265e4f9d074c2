"""GPU kernels. Triton is imported on first use, so `import qkv` works where Triton is missing."""

from torch import Tensor


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> Tensor:
    """Exact scaled dot-product attention by the fused Triton kernels; differentiable.

    Computes `softmax(q k^T * scale) v` like `torch.nn.functional.scaled_dot_product_attention` with
    `is_causal=causal`, without materialising the `(L, S)` scores. Triton is imported on the first call.
    It runs on CUDA tensors, and on CPU tensors only under Triton's interpreter (`TRITON_INTERPRET=1` set
    before Triton is imported): slowly, for testing, and in float16 only.

    With `causal`, query `i` may attend key `j` iff `j <= i`, aligned at the top left as in torch (the lower
    triangle of an L x S matrix of ones), also when `L != S`. For L = 3, S = 5 and for L = 5, S = 3
    (1 = may attend):

        1 0 0 0 0        1 0 0
        1 1 0 0 0        1 1 0
        1 1 1 0 0        1 1 1
                         1 1 1
                         1 1 1

    Every row keeps key 0, so no row is fully masked; the kernel would return zeros for one.

    Args:
        q: `(B, H, L, D)` queries, float16 or bfloat16, `D` in 16, 32, 64, 128.
        k: `(B, H, S, D)` keys, same dtype and device.
        v: `(B, H, S, D)` values, same dtype and device.
        causal: let query `i` attend keys `j <= i` only.
        scale: multiplies the scores; `1 / sqrt(D)` when None.

    Returns:
        `(B, H, L, D)`, in the inputs' dtype.

    Raises:
        TypeError: a non-tensor, a dtype other than float16/bfloat16 (bfloat16 under the interpreter),
            tensors of different dtypes, or a `scale` that is not a number.
        ValueError: a tensor that is not 4-D, shapes that disagree, an unsupported head size, an empty
            sequence, a batch or head count above 65535 (CUDA's grid limit), tensors on different
            devices, or CPU tensors without `TRITON_INTERPRET=1`.
    """
    from qkv.kernels.flash import flash_attention as kernel

    return kernel(q, k, v, causal=causal, scale=scale)
