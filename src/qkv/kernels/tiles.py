"""Which tiles of the `(L, S)` score matrix a mask leaves to compute: one statement for the kernels and for Python.

The kernels keep query `i` and key `j` when all of these hold, with `offset` 0 for top-left alignment and
`S - L` for bottom-right:

    j < kv_len                     key padding: kv_len is key_lengths[b] clamped to [0, S], else S
    j <= i + offset                causal
    j > i + offset - window        sliding window (always with causal)

So each query row keeps one interval of keys, each key is kept by one interval of rows, and both intervals
only move right as the row (or key) grows. Seen from a block of rows, a tile of keys is then

- **empty**: no pair in it is kept, so the kernel never loads it;
- **full**: every pair is kept and in range, so it is computed without a mask;
- **partial**: the rest, which cross a mask boundary and pay for masking.

`tile_ranges` returns positions `start <= full_start <= full_end <= end`: the tiles in `[start, full_start)`
and `[full_end, end)` are partial, those in `[full_start, full_end)` full, all others empty. `key_bounds`
gives its input for a block of rows (the forward and dQ kernels), `query_bounds` for a block of keys (the
dK/dV kernel). They are plain integer arithmetic (`min`, `max`, floor division of non-negative numbers) so
that Triton compiles them as they are and Python runs them as they are: `count_tiles` and the article use
the very functions the kernels call, and `count_packed_tiles` adds them up over the sequences of a packed
batch. Upper-case arguments are compile-time constants in the kernels.
"""

# Triton's convention: upper-case names for compile-time constants.
# ruff: noqa: N803

from collections.abc import Sequence
from dataclasses import dataclass


def key_bounds(first_row, last_row, kv_len, offset, window, CAUSAL, WINDOW):
    """The keys that rows `first_row` and `last_row` keep: `(lo_first, lo_last, hi_first, hi_last)`.

    Row `first_row` keeps keys `[lo_first, hi_first)`, row `last_row` keeps `[lo_last, hi_last)`; the rows
    between keep intervals between those.
    """
    lo_first = 0
    lo_last = 0
    hi_first = kv_len
    hi_last = kv_len
    if CAUSAL:
        hi_first = min(kv_len, max(0, first_row + offset + 1))
        hi_last = min(kv_len, max(0, last_row + offset + 1))
    if WINDOW:
        lo_first = max(0, first_row + offset - window + 1)
        lo_last = max(0, last_row + offset - window + 1)
    return lo_first, lo_last, hi_first, hi_last


def query_bounds(
    first_col, last_col, kv_len, seqlen_q, offset, window, CAUSAL, WINDOW
):
    """The rows that keep key `first_col` and key `last_col`: `(lo_first, lo_last, hi_first, hi_last)`.

    For a block of keys `[first_col, last_col]`: rows `[lo_first, hi_last)` keep some of its keys and rows
    `[lo_last, hi_first)` keep all of them (none do if the block reaches past `kv_len`).
    """
    # 1 if the block holds a key below kv_len, else 0
    visible = min(max(kv_len - first_col, 0), 1)
    # 1 if all its keys are below kv_len, else 0
    whole = min(max(kv_len - last_col, 0), 1)
    last_kept = min(last_col, kv_len - 1)
    lo_first = 0
    lo_last = 0
    hi_first = seqlen_q
    hi_last = seqlen_q
    if CAUSAL:
        lo_first = max(0, first_col - offset)
        lo_last = max(0, last_col - offset)
    if WINDOW:
        hi_first = min(seqlen_q, max(0, first_col - offset + window))
        hi_last = min(seqlen_q, max(0, last_kept - offset + window))
    return lo_first, lo_last, hi_first * whole, hi_last * visible


def tile_ranges(lo_first, lo_last, hi_first, hi_last, BLOCK):
    """Partial, full and empty tiles of size `BLOCK`: `(start, full_start, full_end, end)`, see above."""
    start = lo_first // BLOCK * BLOCK
    # 0 if no member keeps anything (lo_first >= hi_last)
    kept = min(max(hi_last - lo_first, 0), 1)
    end = start + (max(start, hi_last) - start) * kept
    full_start = min((lo_last + BLOCK - 1) // BLOCK * BLOCK, end)
    full_end = max(full_start, hi_first // BLOCK * BLOCK)
    return start, full_start, full_end, end


@dataclass(frozen=True)
class TileCount:
    """The tiles of an `(L, S)` score matrix, as the forward kernel visits them."""

    full: int  # computed without a mask
    partial: int  # computed with the mask
    empty: int  # never loaded

    @property
    def computed(self) -> int:
        return self.full + self.partial

    @property
    def total(self) -> int:
        return self.computed + self.empty


def classify_tiles(
    seqlen_q: int,
    seqlen_k: int,
    block_m: int,
    block_n: int,
    *,
    offset: int = 0,
    causal: bool = False,
    window: int | None = None,
    kv_len: int | None = None,
) -> list[list[str]]:
    """What the forward kernel does with each tile of `block_m` queries by `block_n` keys.

    Args:
        seqlen_q: L.
        seqlen_k: S.
        block_m: queries per tile.
        block_n: keys per tile.
        offset: 0 for top-left alignment, `S - L` for bottom-right.
        causal: keep keys `j <= i + offset` only.
        window: also forget keys `j <= i + offset - window`.
        kv_len: keep keys `j < kv_len` only (one batch's key length); S when None.

    Returns:
        One row per block of queries, one entry per block of keys: `"full"`, `"partial"` or `"empty"`,
        by the kernel's own `key_bounds` and `tile_ranges`.
    """
    kv_len = seqlen_k if kv_len is None else min(max(kv_len, 0), seqlen_k)
    rows = []
    for first_row in range(0, seqlen_q, block_m):
        last_row = min(first_row + block_m, seqlen_q) - 1
        bounds = key_bounds(
            first_row,
            last_row,
            kv_len,
            offset,
            window,
            causal,
            window is not None,
        )
        start, full_start, full_end, end = tile_ranges(*bounds, block_n)
        rows.append(
            [
                "full"
                if full_start <= first_col < full_end
                else "partial"
                if start <= first_col < end
                else "empty"
                for first_col in range(0, seqlen_k, block_n)
            ]
        )
    return rows


def count_tiles(
    seqlen_q: int, seqlen_k: int, block_m: int, block_n: int, **mask
) -> TileCount:
    """How many tiles the forward kernel computes without a mask, with it, and not at all.

    The arguments are those of `classify_tiles`.
    """
    classes = [
        kind
        for row in classify_tiles(seqlen_q, seqlen_k, block_m, block_n, **mask)
        for kind in row
    ]
    return TileCount(
        classes.count("full"), classes.count("partial"), classes.count("empty")
    )


def count_packed_tiles(
    seqlens_q: Sequence[int],
    seqlens_k: Sequence[int],
    block_m: int,
    block_n: int,
    *,
    causal: bool | str = False,
    window: int | None = None,
) -> TileCount:
    """How many tiles the forward kernel computes on a packed batch (`qkv.flash_attention_varlen`).

    Each sequence's programs tile its own `(L_b, S_b)` square, starting at its first query and key, and
    never reach a tile of another sequence; so the count is `count_tiles` of each square, summed. `total`
    counts the tiles of those squares; a dense kernel with the document mask would meet the
    `count_tiles(sum(seqlens_q), sum(seqlens_k), ...)` tiles of the whole packed matrix instead.

    Args:
        seqlens_q: the query lengths `L_b` of the N sequences.
        seqlens_k: their key lengths `S_b`.
        block_m: queries per tile.
        block_n: keys per tile.
        causal: False, True or "top_left" (offset 0), "bottom_right" (offset `S_b - L_b`, per sequence).
        window: also forget keys `j <= i + offset - window`; needs `causal`.
    """
    counts = [
        count_tiles(
            seqlen_q,
            seqlen_k,
            block_m,
            block_n,
            offset=seqlen_k - seqlen_q if causal == "bottom_right" else 0,
            causal=bool(causal),
            window=window,
        )
        for seqlen_q, seqlen_k in zip(seqlens_q, seqlens_k, strict=True)
    ]
    return TileCount(
        sum(count.full for count in counts),
        sum(count.partial for count in counts),
        sum(count.empty for count in counts),
    )
