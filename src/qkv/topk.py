"""Sparse attention that learns where to look: a lightning indexer scores the keys, each query keeps its top k.

DeepSeek Sparse Attention (DeepSeek-V3.2, 2025) puts a small scorer, the lightning indexer, in front of
attention. It has a few heads of its own with queries `q_h` and a single key `k_s` per token, shared by the
heads, and scores key `s` for query `l` as

    I[l, s] = sum_h w[l, h] * ReLU(scale * q_h[l] . k[s])

with per-query head weights `w` computed from the token. Each query then attends only to the `top_k` keys of
highest score (2,048 in DeepSeek-V3.2), so the main attention costs `O(L top_k)` instead of `O(L S)`. The
indexer itself still scores every pair, `O(L S)`, only with a smaller constant (few heads, one key per token).

- `indexer_scores`: the scores `I`, `-inf` where a mask forbids the pair.
- `topk_indices`: each query's `top_k` keys, `-1` where fewer keys are allowed.
- `topk_mask`: the boolean mask those indices make (True = takes part).
- `topk_attention`: attention over the selected keys only, equal to dense attention under that mask.

Index convention: `-1` marks an empty slot (no key), as in DeepSeek's FlashMLA sparse kernels; every other
entry is a key position in `[0, S)` and appears at most once per query.
"""

import math

import torch
from torch import Tensor

from qkv._checks import (
    check_broadcast,
    check_same_dtype_and_device,
    check_scale,
    check_sizes,
    check_tensor,
    dtype_or_type,
    shape,
)
from qkv.functional import safe_softmax

NO_KEY = -1  # an empty slot in a row of indices


def indexer_scores(
    q: Tensor,
    k: Tensor,
    weights: Tensor,
    *,
    scale: float | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """The lightning indexer's score of every key for every query: `sum_h weights[h] * ReLU(scale * q_h . k)`.

    Args:
        q: the indexer's queries `(B, H, L, D)`, one per indexer head.
        k: the indexer's keys `(B, S, D)`: one per token, shared by all heads.
        weights: each query's weight for each head, `(B, L, H)`; DeepSeek-V3.2 computes them from the token
            and folds in `H^-0.5` (transformers' `DeepseekV32Indexer` does the same).
        scale: multiplies `q_h . k` inside the ReLU; `1 / sqrt(D)` when None.
        mask: bool, broadcastable to `(B, L, S)`: True = the pair takes part (torch's convention for
            `scaled_dot_product_attention`); a causal indexer whose queries are the last L of S positions
            passes `qkv.causal_mask(L, S, alignment="bottom_right")` (the default top-left alignment is right
            only when L = S).

    Returns:
        `(B, L, S)` scores, `-inf` where `mask` is False; computed and returned in float32 for half-precision
        inputs (DeepSeek's indexer scores in float32), in the inputs' dtype otherwise.

    Raises:
        TypeError: a non-tensor or non-float input, inputs of different dtypes, a mask that is not bool.
        ValueError: shapes that disagree, a mask that does not broadcast to `(B, L, S)`, tensors on
            different devices.
    """
    _check_indexer_inputs(q, k, weights, scale, mask)
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, weights = q.to(dtype), k.to(dtype), weights.to(dtype)
    if scale is None:
        # D = 0: every product is 0
        scale = 1 / math.sqrt(q.size(-1)) if q.size(-1) else 1.0
    # --8<-- [start:indexer]
    # (B, H, L, S)
    per_head = torch.relu(q @ k.unsqueeze(1).transpose(-2, -1) * scale)
    # sum over heads, (B, L, S)
    scores = torch.einsum("blh,bhls->bls", weights, per_head)
    # --8<-- [end:indexer]
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return scores


def topk_indices(scores: Tensor, top_k: int) -> Tensor:
    """Each query's `top_k` keys of highest score, best first; `-1` where fewer than `top_k` keys are allowed.

    Args:
        scores: `(..., L, S)`, `-inf` where a key is not allowed (as `indexer_scores` gives under a mask).
        top_k: how many keys each query keeps.

    Returns:
        int64 `(..., L, top_k)`: key positions in `[0, S)`, then `-1` in the slots left over when a row has
        fewer than `top_k` finite scores (short rows, `S < top_k`). Ties are broken as `torch.topk` breaks
        them.

    Raises:
        TypeError: `scores` not a float tensor, `top_k` not an int.
        ValueError: `scores` with fewer than 2 dimensions, a negative `top_k`.
    """
    check_tensor("scores", scores, 2)
    check_sizes(0, top_k=top_k)
    kept = min(top_k, scores.size(-1))
    # --8<-- [start:topk]
    best, indices = scores.topk(kept, dim=-1)  # (..., L, kept), best first
    # a masked key is no key
    indices = indices.masked_fill(best == -math.inf, NO_KEY)
    # --8<-- [end:topk]
    # S < top_k
    short = indices.new_full((*indices.shape[:-1], top_k - kept), NO_KEY)
    return torch.cat([indices, short], dim=-1)


def topk_mask(indices: Tensor, num_keys: int) -> Tensor:
    """The boolean mask that `indices` make: query `l` may attend key `s` when `s` is in `indices[b, l]`.

    Args:
        indices: `(B, L, K)` key positions as `topk_attention` takes them (`-1` = no key).
        num_keys: S, the number of keys.

    Returns:
        bool `(B, 1, L, S)`, True = takes part: the `attn_mask` under which
        `qkv.scaled_dot_product_attention` equals `topk_attention` (shared by all heads).

    Raises:
        TypeError, ValueError: as `topk_attention` for `indices`; a negative `num_keys`.
    """
    check_sizes(0, num_keys=num_keys)
    _check_indices(indices, num_keys)
    batch, length, _ = indices.shape
    mask = torch.zeros(
        batch, length, num_keys + 1, dtype=torch.bool, device=indices.device
    )
    # no key: the spare column S
    columns = indices.long().masked_fill(indices == NO_KEY, num_keys)
    mask = mask.scatter(-1, columns, True)  # (B, L, S + 1)
    return mask[..., :num_keys].unsqueeze(1)  # (B, L, S) -> (B, 1, L, S)


def topk_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    indices: Tensor,
    *,
    scale: float | None = None,
) -> Tensor:
    """Attention of each query over its selected keys only: `softmax(q k_sel^T * scale) v_sel`.

    Equal to `qkv.scaled_dot_product_attention(q, k, v, attn_mask=topk_mask(indices, S), scale=scale,
    enable_gqa=True)`, but scores only `K` keys per query, not `S`. The selection is shared by all heads, as in
    DeepSeek Sparse Attention (where the indexer picks keys per token, for all attention heads).

    Args:
        q: `(B, H, L, E)`.
        k: `(B, Hk, S, E)`, `Hk` dividing `H` (grouped-query attention: query head `h` reads key head
            `h // (H / Hk)`).
        v: `(B, Hk, S, Ev)`.
        indices: int32 or int64 `(B, L, K)`: the keys query `l` attends, positions in `[0, S)`, each at most
            once per row, in any order; `-1` marks an empty slot (fewer than `K` keys), as `topk_indices`
            and DeepSeek's FlashMLA sparse kernels do.
        scale: multiplies the scores; `1 / sqrt(E)` when None.

    Returns:
        `(B, H, L, Ev)`. A query whose slots are all `-1` takes nothing: its row is zeros, as a fully masked
        row of `qkv.scaled_dot_product_attention`.

    Raises:
        TypeError: a non-tensor or non-float `q`, `k`, `v`, or of different dtypes; `indices` not an int32
            or int64 tensor.
        ValueError: `q`, `k`, `v` that are not 4-D or disagree on B, heads (`Hk` must divide `H`), S or E;
            tensors on different devices; `indices` not `(B, L, K)`, or holding a position outside
            `[0, S)` other than `-1`, or the same key twice in a row (a repeated key would count twice in a
            gathered softmax but once in a mask: refused rather than guessed).
    """
    _check_attention_inputs(q, k, v, scale)
    _check_indices(indices, k.size(-2), q)
    output_dtype, dtype = q.dtype, torch.promote_types(q.dtype, torch.float32)
    if k.size(-2) == 0:  # no key at all: every slot is -1
        return q.new_zeros(*q.shape[:-1], v.size(-1))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if scale is None:
        # E = 0: every score is 0
        scale = 1 / math.sqrt(q.size(-1)) if q.size(-1) else 1.0
    batch = torch.arange(q.size(0), device=q.device)[:, None, None]  # (B, 1, 1)
    groups = q.size(1) // k.size(1)
    # --8<-- [start:topk-attention]
    # an empty slot reads key 0, masked below
    chosen = indices.long().clamp(min=0)
    # (B, L, K, Hk, E) -> (B, Hk, L, K, E)
    keys = k[batch, :, chosen].permute(0, 3, 1, 2, 4)
    values = v[batch, :, chosen].permute(0, 3, 1, 2, 4)  # (B, Hk, L, K, Ev)
    q = q.unflatten(1, (-1, groups))  # (B, H, L, E) -> (B, Hk, H/Hk, L, E)

    # (B, Hk, H/Hk, L, K)
    scores = torch.einsum("bhgle,bhlke->bhglk", q, keys) * scale
    scores = scores.masked_fill(indices[:, None, None] == NO_KEY, -math.inf)
    weights = safe_softmax(scores)  # zeros for a query with no key
    # (B, Hk, H/Hk, L, Ev)
    out = torch.einsum("bhglk,bhlkv->bhglv", weights, values)
    # --8<-- [end:topk-attention]
    return out.flatten(1, 2).to(output_dtype)  # (B, H, L, Ev)


def _check_attention_inputs(
    q: object, k: object, v: object, scale: object
) -> None:
    """Raise, naming the argument, unless q `(B, H, L, E)`, k `(B, Hk, S, E)`, v `(B, Hk, S, Ev)` fit."""
    tensors = {"q": q, "k": k, "v": v}
    for name, x in tensors.items():
        check_tensor(name, x)
    check_same_dtype_and_device(**tensors)
    for name, x in tensors.items():
        if x.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (B, heads, N, features), got shape {shape(x)}"
            )
    if k.size(0) != q.size(0) or k.size(-1) != q.size(-1):
        raise ValueError(
            f"k must be (B, Hk, S, E) with q's B and E: q {shape(q)} vs k {shape(k)}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"k and v disagree on (B, Hk, S): k {shape(k)} vs v {shape(v)}"
        )
    if k.size(1) == 0 or q.size(1) % k.size(1) != 0:
        raise ValueError(
            f"k's heads must divide q's: q {shape(q)} has {q.size(1)}, k {shape(k)} has {k.size(1)}"
        )
    check_scale(scale)


def _check_indexer_inputs(
    q: object, k: object, weights: object, scale: object, mask: object
) -> None:
    """Raise, naming the argument, unless the arguments make a well-formed `indexer_scores` call."""
    tensors = {"q": q, "k": k, "weights": weights}
    for name, x in tensors.items():
        check_tensor(name, x)
    check_same_dtype_and_device(**tensors)
    layouts = {
        "q": ("(B, H, L, D)", 4),
        "k": ("(B, S, D)", 3),
        "weights": ("(B, L, H)", 3),
    }
    for name, x in tensors.items():
        layout, rank = layouts[name]
        if x.dim() != rank:
            raise ValueError(f"{name} must be {layout}, got shape {shape(x)}")
    batch, heads, length, dim = q.shape
    if k.size(0) != batch or k.size(2) != dim:
        raise ValueError(
            f"k must be (B, S, D) with q's B = {batch} and D = {dim}: q {shape(q)} vs k {shape(k)}"
        )
    if weights.shape != (batch, length, heads):
        raise ValueError(
            f"weights must be (B, L, H) = {(batch, length, heads)} for q {shape(q)}, "
            f"got {shape(weights)}"
        )
    check_scale(scale)
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            got = dtype_or_type(mask)
            raise TypeError(
                f"mask must be a bool tensor (True = takes part), got {got}"
            )
        if mask.device != q.device:
            raise ValueError(f"mask is on {mask.device} but q is on {q.device}")
        check_broadcast(
            "mask", mask, (batch, length, k.size(1)), "the scores' (B, L, S)"
        )


def _check_indices(
    indices: object, num_keys: int, q: Tensor | None = None
) -> None:
    """Raise unless `indices` is an int32/int64 `(B, L, K)` tensor of distinct positions in `[0, S)` or -1,
    with `q (B, H, L, E)`'s B and L and on its device when `q` is given.

    Reads the values (a device sync on a GPU), after the shapes and the device.
    """
    if not isinstance(indices, Tensor):
        raise TypeError(
            f"indices must be a torch.Tensor, got {type(indices).__name__}"
        )
    if indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"indices must be int32 or int64 key positions, got dtype {indices.dtype}"
        )
    if indices.dim() != 3:
        raise ValueError(
            f"indices must be (B, L, K), got shape {shape(indices)}"
        )
    if q is not None and indices.shape[:2] != (q.size(0), q.size(2)):
        raise ValueError(
            f"indices must be (B, L, K) with q's B = {q.size(0)} and L = {q.size(2)}: "
            f"q {shape(q)} vs indices {shape(indices)}"
        )
    if q is not None and indices.device != q.device:
        raise ValueError(
            f"indices is on {indices.device} but q is on {q.device}"
        )
    outside = (indices < NO_KEY) | (indices >= num_keys)
    if bool(outside.any()):
        b, row, slot = (int(i) for i in outside.nonzero()[0])
        raise ValueError(
            f"indices must be key positions in [0, {num_keys}) or -1 (no key), got "
            f"indices[{b}, {row}, {slot}] = {int(indices[b, row, slot])}"
        )
    ordered = indices.sort(dim=-1).values  # (B, L, K)
    repeated = (ordered[..., 1:] == ordered[..., :-1]) & (
        ordered[..., 1:] != NO_KEY
    )
    if bool(repeated.any()):
        b, row, slot = (int(i) for i in repeated.nonzero()[0])
        raise ValueError(
            f"indices must name each key at most once per query, got key {int(ordered[b, row, slot])} "
            f"twice in indices[{b}, {row}]"
        )
