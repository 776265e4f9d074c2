"""Attention masks and the converters between the three conventions readers meet.

The package's convention is the one of `torch.nn.functional.scaled_dot_product_attention`: a boolean mask
whose True means "this query may attend this key". Two other conventions are common:

- `key_padding_mask` of `torch.nn.MultiheadAttention`: `(B, S)` bool, True means "ignore this key";
- additive masks: float, 0 where attending is allowed and `-inf` where it is not, added to the scores.

When query and key lengths differ, a causal mask has two alignments. Top-left is torch's `is_causal` (query
`i` attends keys `j <= i`); bottom-right puts the last query on the last key (query `i` attends keys
`j <= i + S - L`), which is what new queries need when they meet cached keys. For L = 3, S = 5:

    top_left       bottom_right
    1 0 0 0 0      1 1 1 0 0
    1 1 0 0 0      1 1 1 1 0
    1 1 1 0 0      1 1 1 1 1
"""

from typing import Literal

import torch
from torch import Tensor

from qkv._checks import check_sizes, shape

Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS = ("top_left", "bottom_right")


def causal_mask(
    q_len: int,
    k_len: int | None = None,
    device: torch.device | str | None = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """Query `i` may attend key `j` when `j <= i + offset`: a lower triangle of an `(L, S)` matrix of ones.

    Args:
        q_len: L, the number of queries.
        k_len: S, the number of keys; `q_len` when None.
        device: where to make the mask.
        alignment: `"top_left"` (offset 0, torch's `is_causal`) or `"bottom_right"` (offset `S - L`, the last
            query sees every key: decoding with a cache).

    Returns:
        bool `(L, S)`, True = may attend. With `"bottom_right"` and `L > S`, the first `L - S` rows are
        fully masked.

    Raises:
        TypeError, ValueError: a length that is not a non-negative int, or an unknown `alignment`.
    """
    k_len = q_len if k_len is None else k_len
    check_sizes(0, q_len=q_len, k_len=k_len)
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(
        _offset(q_len, k_len, alignment)
    )


def sliding_window_mask(
    q_len: int,
    window: int,
    k_len: int | None = None,
    device: torch.device | str | None = None,
    *,
    alignment: Alignment = "top_left",
) -> Tensor:
    """Query `i` may attend the `window` keys ending at `i + offset`: keys `i + offset - window < j <= i + offset`.

    A causal mask that also forgets the distant past, as in local (sliding-window) attention.

    Args:
        q_len: L, the number of queries.
        window: how many keys each query sees, itself included (at least 1).
        k_len: S, the number of keys; `q_len` when None.
        device: where to make the mask.
        alignment: `"top_left"` (offset 0) or `"bottom_right"` (offset `S - L`), as in `causal_mask`.

    Returns:
        bool `(L, S)`, True = may attend.

    Raises:
        TypeError, ValueError: a length that is not a non-negative int, a `window` below 1, or an unknown
            `alignment`.
    """
    k_len = q_len if k_len is None else k_len
    check_sizes(0, q_len=q_len, k_len=k_len)
    check_sizes(window=window)
    last = torch.arange(q_len, device=device)[:, None] + _offset(q_len, k_len, alignment)  # (L, 1)
    j = torch.arange(k_len, device=device)[None, :]  # (1, S)
    return (j <= last) & (j > last - window)  # (L, S)


def _offset(q_len: int, k_len: int, alignment: object) -> int:
    """How far right of the diagonal the last key a query may see lies: 0 top-left, `S - L` bottom-right."""
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    return 0 if alignment == "top_left" else k_len - q_len


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Mark the real tokens of sequences padded to one length.

    Args:
        lengths: `(B,)` integer tensor, the true length of each sequence.
        max_len: S, the padded length; `lengths.max()` when None.

    Returns:
        bool `(B, 1, 1, S)`, True = real token (may be attended), broadcastable to scores `(B, H, L, S)`.

    Raises:
        TypeError: `lengths` is not an integer tensor, or `max_len` not an int.
        ValueError: `lengths` is not 1-D, has a negative entry, or exceeds `max_len`.
    """
    if (
        not isinstance(lengths, Tensor)
        or lengths.is_floating_point()
        or lengths.dtype == torch.bool
    ):
        raise TypeError(
            f"lengths must be an integer tensor, got {getattr(lengths, 'dtype', type(lengths))}"
        )
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {shape(lengths)}")
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else max_len
    check_sizes(0, max_len=max_len)
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
    if longest > max_len:
        raise ValueError(f"max_len {max_len} is shorter than the longest sequence ({longest})")
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    return (positions < lengths[:, None])[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def key_padding_to_keep(key_padding_mask: Tensor) -> Tensor:
    """Turn `nn.MultiheadAttention`'s `key_padding_mask` (True = ignore) into a keep mask.

    Args:
        key_padding_mask: bool `(B, S)`, True = ignore this key.

    Returns:
        bool `(B, 1, 1, S)`, True = may attend.
    """
    _check_bool("key_padding_mask", key_padding_mask, dims=(2,))
    return ~key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def keep_to_key_padding(mask: Tensor) -> Tensor:
    """Turn a per-key keep mask into `nn.MultiheadAttention`'s `key_padding_mask` (True = ignore).

    Args:
        mask: bool `(B, S)` or `(B, 1, 1, S)`, True = may attend.

    Returns:
        bool `(B, S)`, True = ignore this key.
    """
    _check_bool("mask", mask, dims=(2, 4))
    if mask.dim() == 4 and mask.shape[1:3] != (1, 1):
        raise ValueError(
            f"mask must be (B, S) or (B, 1, 1, S) to become a key padding mask, got {shape(mask)}"
        )
    return ~mask.reshape(mask.size(0), mask.size(-1))  # (B, 1, 1, S) -> (B, S)


def keep_to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Turn a keep mask into an additive one: 0 where attending is allowed, `-inf` where it is not.

    Args:
        mask: bool, any shape, True = may attend.
        dtype: floating-point dtype of the result (match the scores').

    Returns:
        `mask`'s shape, in `dtype`.

    Raises:
        TypeError: `mask` is not a bool tensor, or `dtype` is not floating point.
    """
    _check_bool("mask", mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
    )


def additive_to_keep(mask: Tensor) -> Tensor:
    """Turn an additive mask into a keep mask: True wherever the added value is not `-inf`.

    Args:
        mask: float, any shape, 0 (or any finite bias) where attending is allowed, `-inf` where it is not.

    Returns:
        bool, `mask`'s shape, True = may attend.
    """
    if not isinstance(mask, Tensor) or not mask.is_floating_point():
        raise TypeError(
            f"mask must be a floating-point tensor, got {getattr(mask, 'dtype', type(mask))}"
        )
    return mask > float("-inf")


def _check_bool(name: str, mask: object, dims: tuple[int, ...] | None = None) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}")
    if dims is not None and mask.dim() not in dims:
        wanted = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {wanted}, got shape {shape(mask)}")
