"""Masks and score changes written as functions of the indices, as in PyTorch's FlexAttention.

A mask function says whether query `q_idx` of head `h` of batch element `b` may attend key `kv_idx`; a score
modifier returns a new score from the score and the same indices:

    def causal(b, h, q_idx, kv_idx):              def alibi(score, b, h, q_idx, kv_idx):
        return q_idx >= kv_idx                         return score - slopes[h] * (q_idx - kv_idx)

Both are called once, on index tensors that broadcast to the scores `(B, H, L, S)` (`b` is `(B, 1, 1, 1)`,
`h` `(1, H, 1, 1)`, `q_idx` `(1, 1, L, 1)`, `kv_idx` `(1, 1, 1, S)`), so they must be written with tensor
operations (`&`, `|`, `torch.where`), not Python's `and`, `or` and `if`, as torch's own require.

`block_mask` cuts the `(L, S)` plane into tiles of `block_size` x `block_size` and records, for each, whether
the mask keeps none of its pairs (empty: a kernel never loads it), all of them (full: computed without the
mask), or some (partial). `flex_attention` reads that record as a kernel does: a pair in an empty tile is
dropped and one in a full tile kept without a look at the mask function, which decides only inside partial
tiles. (This reference still computes every score; a kernel would not load the empty tiles at all.)
"""

# B, H, L, S: the names the articles and torch's create_block_mask give these sizes.
# ruff: noqa: N803

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from qkv._checks import (
    check_bool,
    check_device,
    check_same_dtype_and_device,
    check_scale,
    check_sizes,
    check_tensor,
    dtype_or_type,
    shape,
)
from qkv.functional import safe_softmax

MaskFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
EMPTY, PARTIAL, FULL = 0, 1, 2  # the kinds of tile
INDICES = (
    "b",
    "h",
    "q_idx",
    "kv_idx",
)  # what a mask or score function is given


@dataclass(frozen=True)
class BlockMask:
    """A mask function and which of its tiles are empty, partial or full (made by `block_mask`).

    Attributes:
        mask_fn: the mask function (True = may attend).
        kinds: int8 `(B, H, ceil(L / block_size), ceil(S / block_size))`, B and H of 1 where the mask was made
            for every batch element or head: `EMPTY` (0), `PARTIAL` (1) or `FULL` (2) for each tile.
        seqlen_q: L.
        seqlen_k: S.
        block_size: the side of a tile.
    """

    mask_fn: MaskFn
    kinds: Tensor
    seqlen_q: int
    seqlen_k: int
    block_size: int

    def counts(self) -> tuple[Tensor, Tensor]:
        """Per row of tiles, the partial and the full tiles: two int `(B, H, ceil(L / block_size))`.

        Their sum is the tiles that a kernel computes for that block of queries; the rest it skips.
        """
        return (self.kinds == PARTIAL).sum(-1), (self.kinds == FULL).sum(-1)


def block_mask(
    mask_fn: MaskFn,
    B: int | None,
    H: int | None,
    L: int,
    S: int,
    *,
    block_size: int = 128,
    device: torch.device | str = "cpu",
) -> BlockMask:
    """Evaluate `mask_fn` over `(B, H, L, S)` and classify its tiles of `block_size` x `block_size`.

    A tile is full when the mask keeps every pair of it and every pair lies inside `(L, S)` (a tile that
    runs past the last query or key is at most partial), empty when it keeps none, partial otherwise.

    Args:
        mask_fn: `mask_fn(b, h, q_idx, kv_idx)` -> bool, True = may attend (see the module docstring).
        B: batch elements, or None when the mask is the same for all (`b` is then 0).
        H: heads, or None when the mask is the same for all (`h` is then 0).
        L: queries.
        S: keys.
        block_size: the side of a tile.
        device: where the index tensors are made (that of any tensor `mask_fn` reads), and the record kept.

    Returns:
        The `BlockMask`.

    Raises:
        TypeError: `mask_fn` not callable, not taking 4 arguments, using Python's `and`/`or`/`if` on the
            indices, or returning something other than a bool tensor; a size not an int.
        ValueError: a size below 1; `mask_fn` returning a shape that does not broadcast to `(B, H, L, S)`
            or indexing past a tensor it reads;
            a `device` torch does not know.
    """
    if not callable(mask_fn):
        raise TypeError(
            f"mask_fn must be a function of (b, h, q_idx, kv_idx), got {mask_fn!r}"
        )
    check_sizes(L=L, S=S, block_size=block_size)
    check_sizes(
        **{name: n for name, n in (("B", B), ("H", H)) if n is not None}
    )
    check_device(device)
    # --8<-- [start:tiles]
    keep = _evaluate_mask(mask_fn, B or 1, H or 1, L, S, device)  # (B, H, L, S)
    tiles_q, tiles_k = math.ceil(L / block_size), math.ceil(S / block_size)
    padded = keep.new_zeros(
        B or 1, H or 1, tiles_q * block_size, tiles_k * block_size
    )
    # pairs past (L, S) count as dropped: such a tile is never full
    padded[..., :L, :S] = keep
    tiles = padded.view(
        B or 1, H or 1, tiles_q, block_size, tiles_k, block_size
    )
    # (B, H, tiles_q, tiles_k)
    any_kept, all_kept = (tiles.any(dim=(3, 5)), tiles.all(dim=(3, 5)))
    kinds = torch.where(
        all_kept, FULL, torch.where(any_kept, PARTIAL, EMPTY)
    ).to(torch.int8)
    return BlockMask(mask_fn, kinds, L, S, block_size)
    # --8<-- [end:tiles]


def flex_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    score_mod: ScoreMod | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention with the scores changed by `score_mod` and masked by `block_mask`.

    `softmax(score_mod(q k^T * scale) masked) v`, where a pair is kept if its tile is full, or its tile is
    partial and `block_mask.mask_fn` keeps it (empty tiles: dropped). A query that keeps no key gets zeros.
    No `block_mask`: every pair is kept.

    Args:
        q: `(B, H, L, D)`.
        k: `(B, H_kv, S, D)`; H_kv = H, or with `enable_gqa` any divisor of H.
        v: `(B, H_kv, S, D_v)`.
        score_mod: `score_mod(score, b, h, q_idx, kv_idx)` -> the new scores, of the shape of `score`.
        block_mask: from `block_mask(mask_fn, B or None, H or None, L, S)`, on q's device.
        scale: multiplies `q k^T`; `1 / sqrt(D)` when None.
        enable_gqa: let H_kv divide H, each key-value head serving `H / H_kv` query heads.

    Returns:
        `(B, H, L, D_v)`, in `q`'s dtype (computed in float32 at least).

    Raises:
        TypeError: a non-tensor, a `block_mask` that is not a `BlockMask`, a `score_mod` not callable, not
            taking 5 arguments or returning anything but floating-point scores, `enable_gqa` not a bool.
        ValueError: shapes that disagree (named with the shapes), tensors on different devices, a
            `block_mask` made for other sizes or on another device than `q`, a `score_mod` that changes the shape of the scores
            or turns a score of a kept pair into NaN or +inf (the softmax would give NaN), or that indexes
            past a tensor it reads.
    """
    _check_inputs(q, k, v, enable_gqa)
    check_scale(scale)
    if score_mod is not None and not callable(score_mod):
        raise TypeError(f"score_mod must be a function, got {score_mod!r}")
    batch, heads, seqlen_q, dim = q.shape
    seqlen_k = k.size(2)
    if enable_gqa:
        groups = heads // k.size(1)
        k, v = (
            k.repeat_interleave(groups, dim=1),
            v.repeat_interleave(groups, dim=1),
        )  # (B, H, S, .)
    dtype = torch.promote_types(q.dtype, torch.float32)
    scale = 1 / math.sqrt(dim) if scale is None else scale
    scores = q.to(dtype) @ k.to(dtype).transpose(-2, -1) * scale  # (B, H, L, S)
    b, h, q_idx, kv_idx = _indices(batch, heads, seqlen_q, seqlen_k, q.device)
    if score_mod is not None:
        modified = _called("score_mod", score_mod, scores, b, h, q_idx, kv_idx)
        if not isinstance(modified, Tensor):
            raise TypeError(
                f"score_mod must return a tensor, got {type(modified).__name__}"
            )
        if not modified.is_floating_point():
            raise TypeError(
                f"score_mod must return floating-point scores, got {modified.dtype}"
            )
        if modified.shape != scores.shape:
            raise ValueError(
                f"score_mod must return scores of the shape it was given, {shape(scores)}, "
                f"got {shape(modified)}"
            )
        given, scores = scores, modified.to(dtype)
    if block_mask is not None:
        keep = _kept(block_mask, batch, heads, seqlen_q, seqlen_k, q.device)
        scores = scores.masked_fill(~keep, -math.inf)
    if score_mod is not None:
        _check_modified(given, scores)
    # (B, H, L, S); zeros for a row that keeps no key
    weights = safe_softmax(scores)
    return (weights @ v.to(dtype)).to(q.dtype)  # (B, H, L, D_v)


def _check_modified(given: Tensor, scores: Tensor) -> None:
    """Raise unless `score_mod` made no NaN or +inf, among the pairs kept, out of a score that had none."""
    made = (scores.isnan() | scores.isposinf()) & ~(
        given.isnan() | given.isposinf()
    )
    if bool(made.any()):
        b, h, row, column = (int(i) for i in made.nonzero()[0])
        raise ValueError(
            f"score_mod must return finite scores, or -inf to drop a pair: it turned the score "
            f"{given[b, h, row, column].item()} at (b, h, q_idx, kv_idx) = {(b, h, row, column)} "
            f"into {scores[b, h, row, column].item()}, which the softmax would make NaN"
        )


def _kept(
    mask: BlockMask,
    batch: int,
    heads: int,
    seqlen_q: int,
    seqlen_k: int,
    device: torch.device,
) -> Tensor:
    """bool `(B, H, L, S)`: the pairs that `mask` keeps, its function asked inside partial tiles only."""
    if not isinstance(mask, BlockMask):
        raise TypeError(
            f"block_mask must be a qkv.flex.BlockMask, got {type(mask).__name__}"
        )
    if mask.kinds.device != device:
        raise ValueError(
            f"block_mask was made on {mask.kinds.device} but q is on {device}: pass device= to block_mask"
        )
    mask_b, mask_h = mask.kinds.shape[:2]
    if (
        (mask.seqlen_q, mask.seqlen_k) != (seqlen_q, seqlen_k)
        or mask_b not in (1, batch)
        or mask_h
        not in (
            1,
            heads,
        )
    ):
        raise ValueError(
            f"block_mask was made for (B, H, L, S) = ({mask_b}, {mask_h}, {mask.seqlen_q}, "
            f"{mask.seqlen_k}) (B, H of 1: any), but the scores are {(batch, heads, seqlen_q, seqlen_k)}"
        )
    size = mask.block_size
    kinds = mask.kinds.repeat_interleave(size, dim=2).repeat_interleave(
        size, dim=3
    )
    # (B|1, H|1, L, S): the kind of each pair's tile
    kinds = kinds[..., :seqlen_q, :seqlen_k]
    partial = kinds == PARTIAL
    keep = kinds == FULL
    if partial.any():
        asked = _evaluate_mask(
            mask.mask_fn, mask_b, mask_h, seqlen_q, seqlen_k, mask.kinds.device
        )
        keep = keep | (partial & asked)
    return keep.expand(batch, heads, seqlen_q, seqlen_k)


def _evaluate_mask(
    mask_fn: MaskFn,
    batch: int,
    heads: int,
    seqlen_q: int,
    seqlen_k: int,
    device,
) -> Tensor:
    """`mask_fn` on the broadcasting index tensors, checked, as bool `(B, H, L, S)`."""
    keep = _called(
        "mask_fn", mask_fn, *_indices(batch, heads, seqlen_q, seqlen_k, device)
    )
    scores = (batch, heads, seqlen_q, seqlen_k)
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool:
        got = dtype_or_type(keep)
        raise TypeError(
            f"mask_fn must return a bool tensor (True = may attend), got {got}: compare the indices, "
            "e.g. q_idx >= kv_idx, and combine with & and |, not and/or"
        )
    try:
        return keep.expand(scores)
    except RuntimeError:
        raise ValueError(
            f"mask_fn returned {shape(keep)}, which does not broadcast to (B, H, L, S) = {scores}"
        ) from None


def _called(name: str, fn: Callable, *args: Tensor) -> object:
    """`fn(*args)`, with the errors a function of the indices commonly makes named: the wrong number of
    arguments, Python's `and`, `or` or `if` on a tensor, an index past a tensor it reads."""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError as error:
        names = ("score", *INDICES) if len(args) == 5 else INDICES
        raise TypeError(
            f"{name} must take {len(args)} arguments ({', '.join(names)}): {error}"
        ) from None
    except ValueError:  # no signature to read (some builtins): let the call say
        pass
    try:
        return fn(*args)
    except IndexError as error:
        ranges = ", ".join(
            f"{index} in [0, {x.numel()})"
            for index, x in zip(INDICES, args[-4:], strict=True)
        )
        raise ValueError(
            f"{name} indexed past a tensor it reads ({error}); it is called with {ranges}"
        ) from error
    except RuntimeError as error:
        if "Boolean value of Tensor" not in str(error):
            raise
        raise TypeError(
            f"{name} is called once on index tensors, so it cannot use Python's and, or, if or not "
            f"on them: combine with &, | and torch.where ({error})"
        ) from error


def _indices(
    batch: int, heads: int, seqlen_q: int, seqlen_k: int, device
) -> tuple[Tensor, ...]:
    """`b (B,1,1,1)`, `h (1,H,1,1)`, `q_idx (1,1,L,1)`, `kv_idx (1,1,1,S)`: int64 indices that broadcast."""
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)
    q_idx = torch.arange(seqlen_q, device=device).view(1, 1, -1, 1)
    kv_idx = torch.arange(seqlen_k, device=device).view(1, 1, 1, -1)
    return b, h, q_idx, kv_idx


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, enable_gqa: bool) -> None:
    """Raise, naming the argument and the shapes, unless q, k, v are `(B, H, L, D)`, `(B, H_kv, S, D)` twice."""
    check_bool("enable_gqa", enable_gqa)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got {shape(x)}")
    shapes = f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
    check_same_dtype_and_device(q=q, k=k, v=v)
    if not q.size(0) == k.size(0) == v.size(0):
        raise ValueError(f"q, k and v disagree on the batch size B: {shapes}")
    if q.size(3) != k.size(3):
        raise ValueError(f"q and k disagree on the head size D: {shapes}")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"k and v disagree on heads or length: {shapes}")
    heads, heads_kv = q.size(1), k.size(1)
    if heads_kv != heads and not (enable_gqa and heads % heads_kv == 0):
        hint = "; pass enable_gqa=True" if heads % heads_kv == 0 else ""
        raise ValueError(
            f"k and v must have q's heads, or (enable_gqa) a divisor of them: {shapes}{hint}"
        )
