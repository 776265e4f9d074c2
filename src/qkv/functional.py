"""Scaled dot-product attention written out step by step: scores, scale, mask, softmax, weighted sum.

Shapes follow `torch.nn.functional.scaled_dot_product_attention`: `query` is `(..., L, E)`, `key` is
`(..., S, E)` and `value` is `(..., S, Ev)`, where `...` is any number of batch dimensions (usually `(B, H)`)
that broadcast against each other.
A boolean `attn_mask` means True = may attend; a floating-point one is added to the scores.
"""

import math

import torch
from torch import Tensor

from qkv._checks import check_attention_inputs, check_bool, check_sinks, shape
from qkv.masks import Mask, parse_mask


def attention_weights(
    query: Tensor,
    key: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    sinks: Tensor | None = None,
) -> Tensor:
    """The attention probabilities `softmax(q k^T * scale + mask)` that weigh the values.

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`; with `enable_gqa`, its head dimension (-3) may divide the query's.
        attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to `(..., L, S)`.
        is_causal: let query `i` attend keys `j <= i` only (top-left aligned when `L != S`).
        scale: multiplies the scores; `1 / sqrt(E)` when None.
        enable_gqa: repeat each key head for a group of query heads (grouped-query attention).
        sinks: `(H,)` float, one learned logit per query head, as `qkv.attention` takes it: the softmax runs
            over each row's scores and the sink, and the sink's share is left out of the weights.

    Returns:
        `(..., L, S)`, each row summing to 1 (to 1 less the sink's share, with `sinks`), except rows whose
        keys are all masked: those are zeros.

    Raises:
        TypeError: a non-tensor, non-float input, a mask that is neither bool nor float, an `is_causal`
            that is not a bool (for `"bottom_right"`, see `qkv.attention`), or `sinks` not a float tensor.
        ValueError: shapes that disagree, a mask that does not broadcast, a mask together with `is_causal`,
            or `sinks` not `(H,)` on the query's device.
    """
    check_bool("is_causal", is_causal)
    mask = parse_call(query, key, None, attn_mask, is_causal, scale, enable_gqa)
    check_sinks(sinks, query)
    return _attention_weights(query, key, mask, scale, enable_gqa, sinks)


def _attention_weights(
    query: Tensor,
    key: Tensor,
    mask: Mask,
    scale: float | None = None,
    enable_gqa: bool = False,
    sinks: Tensor | None = None,
) -> Tensor:
    """`attention_weights` of checked inputs, with the masks parsed into `mask`.

    `sinks (H,)`: one more logit per query head, beside every row's scores, that takes weight in the softmax
    and gives nothing back (see `qkv.attention`).
    """
    output_dtype, dtype = query.dtype, _compute_dtype(query)
    query, key = query.to(dtype), key.to(dtype)
    if scale is None and query.size(-1) == 0:
        scale = 1.0  # E = 0: every score is an empty sum, 0 whatever the scale (torch's result)
    # --8<-- [start:weights]
    if enable_gqa:
        key = _repeat_heads(key, query.size(-3) // key.size(-3))
    if scale is None:
        scale = 1 / math.sqrt(query.size(-1))
    attn_mask = mask.as_tensor(query.size(-2), key.size(-2), query.device)

    # (..., L, E) @ (..., E, S) -> (..., L, S)
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask.to(scores.dtype)
    weights = safe_softmax(scores)
    # --8<-- [end:weights]
    if sinks is not None:
        # --8<-- [start:sinks]
        sink = sinks.to(scores.dtype)[:, None, None].expand(
            *scores.shape[:-1], 1
        )  # (..., H, L, 1)
        # (..., H, L, S + 1)
        weights = safe_softmax(torch.cat([scores, sink], dim=-1))
        # the sink's share is dropped: each row sums to less than 1
        weights = weights[..., :-1]
        # --8<-- [end:sinks]
    return weights.to(output_dtype)


def safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last dimension that returns zeros for a row with no finite score.

    A plain softmax of a row of `-inf` divides zero by zero and gives NaN; attention asks for zeros instead:
    a query that may attend nothing takes nothing from the values.

    Args:
        scores: `(..., S)`, with `-inf` where a key is masked.

    Returns:
        `(..., S)`, rows summing to 1, or zeros where every score in the row is `-inf`.
    """
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)  # (..., 1)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention as the explicit formula `softmax(q k^T * scale + mask) v`, like torch's function of the name.

    Same arguments, semantics and results as `torch.nn.functional.scaled_dot_product_attention`; written to be
    read rather than to be fast. Half-precision inputs are computed in float32 and the result cast back.

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`; with `enable_gqa`, its head dimension (-3) may divide the query's.
        value: `(..., S, Ev)`; with `enable_gqa`, its head dimension (-3) may divide the query's.
        attn_mask: bool (True = may attend) or float (added to the scores), broadcastable to `(..., L, S)`.
        dropout_p: probability of zeroing each attention weight (applied whenever it is positive, as torch does).
        is_causal: let query `i` attend keys `j <= i` only (top-left aligned when `L != S`).
        scale: multiplies the scores; `1 / sqrt(E)` when None.
        enable_gqa: repeat each key and value head for a group of query heads (grouped-query attention).

    Returns:
        `(..., L, Ev)`. A query row with no allowed key gives zeros, not NaN.

    Raises:
        TypeError: a non-tensor or non-float input, tensors of different dtypes, a mask of the wrong dtype,
            or an `is_causal` that is not a bool (torch's rule; `qkv.attention` takes `"bottom_right"`).
        ValueError: shapes that disagree, a mask that does not broadcast, a mask together with `is_causal`,
            or a `dropout_p` outside [0, 1].
    """
    check_bool("is_causal", is_causal)
    mask = parse_call(
        query, key, value, attn_mask, is_causal, scale, enable_gqa, dropout_p
    )
    return _scaled_dot_product_attention(
        query, key, value, mask, dropout_p, scale, enable_gqa
    )


def _scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Mask,
    dropout_p: float = 0.0,
    scale: float | None = None,
    enable_gqa: bool = False,
    sinks: Tensor | None = None,
) -> Tensor:
    """`scaled_dot_product_attention` of checked inputs, with the masks parsed into `mask`; `sinks` as for
    `_attention_weights`."""
    output_dtype, dtype = query.dtype, _compute_dtype(query)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    weights = _attention_weights(query, key, mask, scale, enable_gqa, sinks)
    if enable_gqa:
        value = _repeat_heads(value, query.size(-3) // value.size(-3))
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ value  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    return output.to(output_dtype)


def parse_call(
    query: Tensor,
    key: Tensor,
    value: Tensor | None,
    attn_mask: object,
    is_causal: object,
    scale: object,
    enable_gqa: bool,
    dropout_p: object = 0.0,
    window: object = None,
    key_lengths: object = None,
) -> Mask:
    """Check a call made as to torch's `scaled_dot_product_attention` and parse its masks, once.

    The boundary of this module's public functions and of `qkv.attention`, which adds `is_causal="bottom_right"`,
    `window` and `key_lengths`. As in torch's function, `attn_mask` excludes the other masks.

    Returns:
        The masks, parsed by `qkv.masks.parse_mask`.

    Raises:
        TypeError, ValueError: as `check_attention_inputs` and `parse_mask`; `key_lengths` without 4-D query
            and key; `attn_mask` together with `is_causal` or `key_lengths`.
    """
    scores = check_attention_inputs(
        query, key, value, scale, enable_gqa, dropout_p
    )  # (..., L, S)
    if key_lengths is not None and (query.dim() != 4 or key.dim() != 4):
        raise ValueError(
            f"key_lengths needs 4-D (B, H, N, E) query and key, got query {shape(query)}, "
            f"key {shape(key)}"
        )
    mask = parse_mask(
        query, key, scores, attn_mask, is_causal, window, key_lengths
    )
    if attn_mask is not None and mask.alignment is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    if attn_mask is not None and mask.key_lengths is not None:
        raise ValueError("pass either attn_mask or key_lengths, not both")
    return mask


def _compute_dtype(x: Tensor) -> torch.dtype:
    """float32 for half-precision inputs, their own dtype otherwise: the precision torch's kernels compute in."""
    return torch.promote_types(x.dtype, torch.float32)


def _repeat_heads(x: Tensor, groups: int) -> Tensor:
    """Repeat each head of `x` `groups` times along dim -3: `(..., Hk, S, E) -> (..., Hk * groups, S, E)`."""
    return x.repeat_interleave(groups, dim=-3)
