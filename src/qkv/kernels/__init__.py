"""GPU kernels. Triton is imported on first use, so `import qkv` works where Triton is missing."""

from torch import Tensor


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> Tensor:
    """FlashAttention in Triton; see `qkv.kernels.flash.flash_attention`."""
    from qkv.kernels.flash import flash_attention as kernel

    return kernel(q, k, v, causal=causal, scale=scale)
