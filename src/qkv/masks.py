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

Every public function parses the masks it is given once, with `parse_mask`, into one `Mask`: the value that
the rest of the package passes down and that every backend reads.
"""

import dataclasses
import functools
from typing import Literal

import torch
from torch import Tensor

from qkv._checks import (
    check_broadcast,
    check_cumulative_lengths,
    check_device,
    check_key_mask,
    check_mask,
    check_sizes,
    shape,
)

Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS = ("top_left", "bottom_right")
Causal = bool | Alignment  # how callers say it: True means "top_left"


@dataclasses.dataclass(frozen=True, eq=False)
class Mask:
    """Which keys each query may attend, parsed once (by `parse_mask`) and read by every backend.

    Query `i` of L may attend key `j` of S in batch `b` when every part given allows it:

    - `alignment`: `"top_left"`, `j <= i` (torch's `is_causal`), or `"bottom_right"`, `j <= i + S - L`;
      None: no causal mask.
    - `window`: also `j > i + offset - window` (offset 0 top-left, `S - L` bottom-right); needs `alignment`.
    - `key_lengths`: `(B,)` integers, `j < key_lengths[b]` (a length outside [0, S] acts as 0 or S).
    - `dense`: bool (True = may attend) or float (added to the scores), broadcastable to the scores
      `(..., L, S)`.

    The FlashAttention kernels take the first three (the structure) and no `dense` part.
    """

    alignment: Alignment | None = None
    window: int | None = None
    key_lengths: Tensor | None = None
    dense: Tensor | None = None

    def as_tensor(
        self,
        seqlen_q: int,
        seqlen_k: int,
        device: torch.device | str | None = None,
    ) -> Tensor | None:
        """Every part as one mask for the formula and for torch's function; None if nothing is masked.

        Returns:
            bool (True = may attend) if every part is, else float (0 or the bias where attending is
            allowed, `-inf` where it is not): `(L, S)` for a causal mask or window, `(B, 1, L, S)` with key
            lengths, broadcast with `dense`'s shape.
        """
        parts, aligned = [], self.alignment
        if self.window is not None:
            parts.append(
                sliding_window_mask(
                    seqlen_q, self.window, seqlen_k, device, alignment=aligned
                )
            )
        elif aligned is not None:
            parts.append(
                causal_mask(seqlen_q, seqlen_k, device, alignment=aligned)
            )  # (L, S)
        if self.key_lengths is not None:
            lengths = self.key_lengths.clamp(0, seqlen_k)
            parts.append(padding_mask(lengths, seqlen_k))  # (B, 1, 1, S)
        if self.dense is not None:
            parts.append(self.dense)
        return functools.reduce(_both, parts) if parts else None


def parse_mask(
    query: Tensor,
    key: Tensor,
    scores: tuple[int, ...],
    attn_mask: object = None,
    is_causal: object = False,
    window: object = None,
    key_lengths: object = None,
    *,
    key_padding_mask: object = None,
    causal_name: str = "is_causal",
    mask_name: str = "attn_mask",
) -> Mask:
    """Check every way a caller can say "mask" and parse them into one `Mask`: the one place they are read.

    A bool `key_padding_mask` that ignores a suffix of every row (True = ignore only after the last key
    kept) becomes `key_lengths`, which the kernels take; reading it costs one device sync on a GPU. Any other
    becomes part of `dense`, with `attn_mask`.

    Args:
        query: the queries; the masks must be on their device, float masks of float32 or their dtype.
        key: the keys as the caller gave them; `(B, S, ·)` (`(S, ·)` unbatched) with `key_padding_mask`.
        scores: the shape of the scores, `(..., L, S)`; `(B, H, L, S)` with `key_lengths`.
        attn_mask: bool (True = may attend) or float (added), broadcastable to `scores`.
        is_causal: False, True (= `"top_left"`), `"top_left"` or `"bottom_right"`.
        window: None, or how many keys each query sees (at least 1); needs `is_causal`.
        key_lengths: None, or an integer tensor `(B,)` on the queries' device.
        key_padding_mask: `nn.MultiheadAttention`'s: `(B, S)` (`(S,)` unbatched, a dimension of size 1
            broadcasts), bool (True = IGNORE this key) or float (added).
        causal_name: what the caller calls its `is_causal` argument.
        mask_name: what the caller calls its `attn_mask` argument in a message about its shape.

    Raises:
        TypeError: an `is_causal` that is neither a bool nor a str, a `window` that is not an int,
            `key_lengths` that are not an integer tensor, masks of a dtype other than these.
        ValueError: an unknown alignment, a `window` below 1 or without `is_causal`, `key_lengths` that are
            not `(B,)` on the queries' device, masks that do not broadcast or are on another device.
    """
    aligned = _alignment(is_causal, causal_name)
    _check_window(window, aligned, causal_name)
    # a longer window sees no more keys; the kernels take an int32
    if window is not None:
        window = min(window, scores[-2] + scores[-1])
    if key_lengths is not None:
        _check_key_lengths(key_lengths, scores[0], query.device)
    if attn_mask is not None:
        check_mask("attn_mask", attn_mask, query)
        check_broadcast(mask_name, attn_mask, scores)
    dense = attn_mask
    if key_padding_mask is not None:
        check_key_mask(
            "key_padding_mask", key_padding_mask, query, key, "True = ignore"
        )
        keep = (
            ~key_padding_mask
            if key_padding_mask.dtype == torch.bool
            else key_padding_mask
        )
        lengths = _kept_prefix(keep, scores) if key_lengths is None else None
        if lengths is not None:
            key_lengths = lengths
        else:
            padding = keep[..., None, None, :]  # (B, S) -> (B, 1, 1, S)
            dense = padding if dense is None else _both(dense, padding)
    return Mask(
        alignment=aligned, window=window, key_lengths=key_lengths, dense=dense
    )


def _alignment(is_causal: object, name: str) -> Alignment | None:
    """The alignment `is_causal` asks for: None, `"top_left"` (for True) or `"bottom_right"`."""
    if isinstance(is_causal, bool):
        return "top_left" if is_causal else None
    if not isinstance(is_causal, str):
        raise TypeError(
            f"{name} must be a bool or one of {ALIGNMENTS}, got {type(is_causal).__name__}"
        )
    if is_causal not in ALIGNMENTS:
        raise ValueError(
            f"{name} must be False, True or one of {ALIGNMENTS}, got {is_causal!r}"
        )
    return is_causal


def _check_window(
    window: object, aligned: Alignment | None, causal_name: str
) -> None:
    """Raise unless `window` is None, or an int of at least 1 with a causal alignment."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(
            f"window must be an int or None, got {type(window).__name__}"
        )
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    if aligned is None:
        raise ValueError(
            f"window={window} needs a causal alignment: pass {causal_name}=True, 'top_left' or "
            "'bottom_right' (the window ends at the last key a query may see)"
        )


def _check_key_lengths(
    key_lengths: object, batch: int, device: torch.device
) -> None:
    """Raise unless `key_lengths` is an integer tensor `(B,)` on `device`."""
    if not isinstance(key_lengths, Tensor):
        raise TypeError(
            f"key_lengths must be a tensor or None, got {type(key_lengths).__name__}"
        )
    if (
        key_lengths.is_floating_point()
        or key_lengths.is_complex()
        or key_lengths.dtype == torch.bool
    ):
        raise TypeError(
            f"key_lengths must be an integer tensor, got dtype {key_lengths.dtype}"
        )
    if key_lengths.shape != (batch,):
        raise ValueError(
            f"key_lengths must be (B,) = ({batch},), one length per batch, got {shape(key_lengths)}"
        )
    if key_lengths.device != device:
        raise ValueError(
            f"key_lengths is on {key_lengths.device} but the queries are on {device}"
        )


def _kept_prefix(keep: Tensor, scores: tuple[int, ...]) -> Tensor | None:
    """The key lengths `(B,)` that say what `keep` says, or None if no lengths can.

    Lengths can when `keep` is bool, batched, and keeps a prefix of every row (True, then False).
    """
    if keep.dtype != torch.bool or len(scores) != 4:
        return None
    # (B, S), a dimension of size 1 broadcast
    keep = keep.expand(scores[0], scores[-1])
    lengths = keep.sum(-1)  # (B, S) -> (B,)
    prefix = (
        torch.arange(keep.size(-1), device=keep.device) < lengths[:, None]
    )  # (B, S)
    return lengths if torch.equal(prefix, keep) else None


def _both(first: Tensor, second: Tensor) -> Tensor:
    """Two masks as one: bool where both are (True = both keep), else float (the sum, `-inf` where either hides)."""
    if first.dtype == torch.bool and second.dtype == torch.bool:
        return first & second
    if first.dtype == torch.bool:
        first, second = second, first
    if second.dtype == torch.bool:
        return torch.where(second, first, float("-inf"))
    return first + second


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
        TypeError, ValueError: a length that is not a non-negative int, an unknown `alignment`, or a
            `device` torch does not know.
    """
    k_len = q_len if k_len is None else k_len
    check_sizes(0, q_len=q_len, k_len=k_len)
    check_device(device)
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
        TypeError, ValueError: a length that is not a non-negative int, a `window` below 1, an unknown
            `alignment`, or a `device` torch does not know.
    """
    k_len = q_len if k_len is None else k_len
    check_sizes(0, q_len=q_len, k_len=k_len)
    check_sizes(window=window)
    check_device(device)
    window = min(window, q_len + k_len)  # sees every key up to i + offset
    last = torch.arange(q_len, device=device)[:, None] + _offset(
        q_len, k_len, alignment
    )  # (L, 1)
    j = torch.arange(k_len, device=device)[None, :]  # (1, S)
    return (j <= last) & (j > last - window)  # (L, S)


def _offset(q_len: int, k_len: int, alignment: object) -> int:
    """How far right of the diagonal the last key a query may see lies: 0 top-left, `S - L` bottom-right."""
    if alignment not in ALIGNMENTS:
        raise ValueError(
            f"alignment must be one of {ALIGNMENTS}, got {alignment!r}"
        )
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
        raise ValueError(
            f"lengths must be 1-D (B,), got shape {shape(lengths)}"
        )
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else max_len
    check_sizes(0, max_len=max_len)
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(
            f"lengths must be non-negative, got {lengths.tolist()}"
        )
    if longest > max_len:
        raise ValueError(
            f"max_len {max_len} is shorter than the longest sequence ({longest})"
        )
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    # (B, S) -> (B, 1, 1, S)
    return (positions < lengths[:, None])[:, None, None, :]


def document_mask(
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    *,
    causal: Causal = False,
    window: int | None = None,
) -> Tensor:
    """Which keys each query of a packed batch may attend: its own sequence's, masked as if it were alone.

    Sequences are packed one after another: sequence `b` holds queries `cu_seqlens_q[b] .. cu_seqlens_q[b + 1]
    - 1` and keys `cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1`. A query may attend only keys of its own
    sequence (the document mask), and among those what `causal` and `window` allow, with positions counted
    from the sequence's start and the alignment taken per sequence, as `causal_mask` and
    `sliding_window_mask` of its `(L_b, S_b)`. Two sequences of 2 and 1 queries, 3 and 2 keys
    (`cu_seqlens_q = [0, 2, 3]`, `cu_seqlens_k = [0, 3, 5]`):

        causal=False   "top_left"   "bottom_right"
        1 1 1 0 0      1 0 0 0 0    1 1 0 0 0
        1 1 1 0 0      1 1 0 0 0    1 1 1 0 0
        0 0 0 1 1      0 0 0 1 0    0 0 0 1 1

    A query whose sequence has no key (or that comes before every key, bottom-right with `L_b > S_b`) keeps
    none: its row is all False, and attention gives it zeros. The mask is dense, `O(total_q * total_k)`: a
    reference for small batches; `qkv.flash_attention_varlen` computes the same without building it.

    Args:
        cu_seqlens_q: int32 `(N + 1,)`, the cumulative query lengths: 0, then non-decreasing.
        cu_seqlens_k: int32 `(N + 1,)`, the cumulative key lengths, on the same device.
        causal: False, True (= `"top_left"`) or `"bottom_right"`.
        window: how many keys each query sees, itself included (at least 1); needs `causal`.

    Returns:
        bool `(total_q, total_k)`, True = may attend, on the lengths' device; `total_q = cu_seqlens_q[N]`.

    Raises:
        TypeError: lengths that are not int32 tensors, a `causal` neither bool nor str, a non-int `window`.
        ValueError: lengths that are not 1-D, do not start at 0, decrease, or count different numbers of
            sequences or lie on different devices; an unknown alignment, a `window` below 1 or without
            `causal`.
    """
    aligned = _alignment(causal, "causal")
    _check_window(window, aligned, "causal")
    lengths_q = check_cumulative_lengths("cu_seqlens_q", cu_seqlens_q)
    device = cu_seqlens_q.device
    if isinstance(cu_seqlens_k, Tensor) and cu_seqlens_k.device != device:
        raise ValueError(
            f"cu_seqlens_k is on {cu_seqlens_k.device} but cu_seqlens_q is on {device}"
        )
    lengths_k = check_cumulative_lengths("cu_seqlens_k", cu_seqlens_k)
    if len(lengths_q) != len(lengths_k):
        raise ValueError(
            "cu_seqlens_q and cu_seqlens_k disagree on the number of sequences N: "
            f"cu_seqlens_q {shape(cu_seqlens_q)} vs cu_seqlens_k {shape(cu_seqlens_k)}"
        )
    # one sequence's mask, as the kernels read it
    within = Mask(alignment=aligned, window=window)
    mask = torch.zeros(
        sum(lengths_q), sum(lengths_k), dtype=torch.bool, device=device
    )
    first_q = first_k = 0
    for seqlen_q, seqlen_k in zip(lengths_q, lengths_k, strict=True):
        # (L_b, S_b), None: keeps every pair
        block = within.as_tensor(seqlen_q, seqlen_k, device)
        rows, cols = (
            slice(first_q, first_q + seqlen_q),
            slice(first_k, first_k + seqlen_k),
        )
        mask[rows, cols] = True if block is None else block
        first_q, first_k = first_q + seqlen_q, first_k + seqlen_k
    return mask


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


def keep_to_additive(
    mask: Tensor, dtype: torch.dtype = torch.float32
) -> Tensor:
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
        raise TypeError(
            f"dtype must be a floating-point torch.dtype, got {dtype}"
        )
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
    )


def additive_to_keep(mask: Tensor) -> Tensor:
    """Turn an additive mask into a keep mask: True wherever the added value is not `-inf`.

    Args:
        mask: float, any shape, 0 (or any finite bias) where attending is allowed, `-inf` where it is not.

    Returns:
        bool, `mask`'s shape, True = may attend.

    Raises:
        TypeError: `mask` is not a floating-point tensor.
        ValueError: `mask` holds NaN or +inf, which neither allow nor forbid (reads the values).
    """
    if not isinstance(mask, Tensor) or not mask.is_floating_point():
        raise TypeError(
            f"mask must be a floating-point tensor, got {getattr(mask, 'dtype', type(mask))}"
        )
    neither = mask.isnan() | mask.isposinf()
    if bool(neither.any()):
        where = tuple(int(i) for i in neither.nonzero()[0])
        raise ValueError(
            f"mask must hold finite biases or -inf, got {mask[where].item()} at {where} "
            f"of mask {shape(mask)}"
        )
    return mask > float("-inf")


def _check_bool(
    name: str, mask: object, dims: tuple[int, ...] | None = None
) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}"
        )
    if dims is not None and mask.dim() not in dims:
        wanted = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name} must be {wanted}, got shape {shape(mask)}")
