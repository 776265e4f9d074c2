"""The one reference every comparison in the test suite is made against.

`reference_attention` runs PyTorch's own `scaled_dot_product_attention` (math backend) in float64 on copies of
the inputs, so that it stands above every dtype under test. `assert_close_to_reference` applies the tolerance rule
that flash-attention's tests use: in low precision an implementation may be at most `factor` times as far from the
float64 reference as PyTorch itself is in the same dtype (plus a small absolute floor). `reference_mask` spells
the kernel's mask options (causal alignment, window, key lengths) as the boolean mask torch takes.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import qkv


def reference_attention(query, key, value, **kwargs):
    """torch's math-backend attention in float64 on copies of the inputs; kwargs as for torch's function."""
    mask = kwargs.pop("attn_mask", None)
    if mask is not None and mask.is_floating_point():
        mask = mask.double()
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            query.double(), key.double(), value.double(), attn_mask=mask, **kwargs
        )


def torch_attention(query, key, value, **kwargs):
    """torch's own attention in the inputs' dtype: the yardstick for what low precision may lose."""
    return F.scaled_dot_product_attention(query, key, value, **kwargs)


def assert_close_to_reference(actual, expected, yardstick, factor=2.0, atol=1e-5):
    """Fail unless `actual` is within `factor` times `yardstick`'s error from `expected` (float64).

    Args:
        actual: the result under test, any dtype.
        expected: the float64 reference of the same shape.
        yardstick: torch's own result in the dtype of `actual`.
        factor: how many times torch's own error `actual` may make (2 for outputs, 3 for gradients).
        atol: an absolute floor, for results that torch happens to get exactly.
    """
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {tuple(actual.shape)} != reference {tuple(expected.shape)}")
    errors = (actual.double() - expected).abs()
    error = errors.max().item()
    allowed = factor * (yardstick.double() - expected).abs().max().item() + atol
    if not error <= allowed:
        # where: enough to tell a wrong row, key or batch from noise on a run that cannot be repeated
        worst = [int(i) for i in torch.unravel_index(errors.argmax(), errors.shape)]
        over = int((errors > allowed).sum())
        raise AssertionError(
            f"max error {error:.3e} exceeds {allowed:.3e} ({factor}x torch's own + {atol}), "
            f"at index {worst} of {tuple(actual.shape)}; {over} of {errors.numel()} elements over"
        )


def assert_grads_close_to_reference(actual, expected, yardstick, dtype):
    """`(output, dq, dk, dv)` in `dtype`, each as close to the float64 `expected` as `assert_close_to_reference`
    allows against torch's `yardstick`: twice torch's error for the output, three times for the gradients."""
    for name, a, e, y, factor in zip(
        ("output", "dq", "dk", "dv"), actual, expected, yardstick, (2, 3, 3, 3), strict=True
    ):
        assert a.dtype == dtype, name
        try:
            assert_close_to_reference(a, e, y, factor)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None


def reference_mask(batch, seqlen_q, seqlen_k, causal=False, window=None, key_lengths=None):
    """The mask of `qkv.flash_attention`'s options, built by qkv's mask builders: bool `(B, 1, L, S)`.

    True = may attend. `causal` is False, True, "top_left" or "bottom_right"; lengths outside [0, S] act as
    0 or S, as in the kernel.
    """
    alignment = "top_left" if causal is True else causal
    if window is not None:
        mask = qkv.sliding_window_mask(seqlen_q, window, seqlen_k, alignment=alignment)
    elif causal:
        mask = qkv.causal_mask(seqlen_q, seqlen_k, alignment=alignment)
    else:
        mask = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    mask = mask.expand(batch, 1, seqlen_q, seqlen_k)  # (L, S) -> (B, 1, L, S)
    if key_lengths is not None:
        mask = mask & qkv.padding_mask(key_lengths.cpu().clamp(0, seqlen_k), seqlen_k)
    return mask
