"""qkv.kernels.tiles: the tiles the kernels compute, skip and mask, against masks built by qkv's mask builders.

For every block of rows (and of keys) and every tile of the other axis, the tile must be skipped exactly when
the mask keeps nothing in it, computed without a mask only when it keeps everything in range, and masked
otherwise. A packed batch's count is checked against `qkv.document_mask`, tile by tile.
"""

import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.kernels import tiles
from tests.library.reference import reference_mask

MASKS = st.fixed_dictionaries(
    {
        "seqlen_q": st.integers(1, 70),
        "seqlen_k": st.integers(1, 70),
        "causal": st.sampled_from([False, "top_left", "bottom_right"]),
        "window": st.one_of(st.none(), st.integers(1, 80)),
        "kv_len": st.one_of(st.none(), st.integers(-2, 75)),
    }
)
BLOCKS = st.sampled_from([4, 8, 16])


def kernel_mask(seqlen_q, seqlen_k, causal, window, kv_len):
    """`(L, S)` bool, True = kept, and the kernels' arguments `(kv_len, offset, window, CAUSAL, WINDOW)`."""
    window = window if causal else None
    key_lengths = None if kv_len is None else torch.tensor([kv_len])
    mask = reference_mask(1, seqlen_q, seqlen_k, causal, window, key_lengths)[0, 0]
    offset = seqlen_k - seqlen_q if causal == "bottom_right" else 0
    kept = seqlen_k if kv_len is None else min(max(kv_len, 0), seqlen_k)
    return mask, (kept, offset, window or 0, bool(causal), window is not None)


def classify(position, start, full_start, full_end, end):
    """Which stage of a kernel's loop computes the tile that begins at `position`."""
    if full_start <= position < full_end:
        return "full"
    return "partial" if start <= position < end else "empty"


def assert_classified(kind, tile, in_range):
    """The tile's stage agrees with the mask: empty keeps nothing, full keeps all of an in-range tile."""
    if kind == "empty":
        assert not tile.any()
    elif kind == "full":
        assert in_range
        assert tile.all()
    else:
        assert tile.any()
        assert not (in_range and tile.all())


@given(masks=MASKS, block_m=BLOCKS, block_n=BLOCKS)
@settings(max_examples=300)  # plain Python: cheap
def test_key_tiles_of_each_query_block_follow_the_mask(masks, block_m, block_n):
    mask, (kv_len, offset, window, causal, windowed) = kernel_mask(**masks)
    seqlen_q, seqlen_k = mask.shape
    for first_row in range(0, seqlen_q, block_m):
        last_row = min(first_row + block_m, seqlen_q) - 1
        bounds = tiles.key_bounds(first_row, last_row, kv_len, offset, window, causal, windowed)
        ranges = tiles.tile_ranges(*bounds, block_n)
        for first_col in range(0, seqlen_k, block_n):
            tile = mask[first_row : last_row + 1, first_col : first_col + block_n]
            in_range = first_col + block_n <= kv_len
            assert_classified(classify(first_col, *ranges), tile, in_range)


@given(masks=MASKS, block_m=BLOCKS, block_n=BLOCKS)
@settings(max_examples=300)  # plain Python: cheap
def test_query_tiles_of_each_key_block_follow_the_mask(masks, block_m, block_n):
    mask, (kv_len, offset, window, causal, windowed) = kernel_mask(**masks)
    seqlen_q, seqlen_k = mask.shape
    for first_col in range(0, seqlen_k, block_n):
        last_col = first_col + block_n - 1
        bounds = tiles.query_bounds(
            first_col, last_col, kv_len, seqlen_q, offset, window, causal, windowed
        )
        ranges = tiles.tile_ranges(*bounds, block_m)
        for first_row in range(0, seqlen_q, block_m):
            tile = mask[first_row : first_row + block_m, first_col : last_col + 1]
            in_range = first_row + block_m <= seqlen_q and last_col < kv_len
            assert_classified(classify(first_row, *ranges), tile, in_range)


@given(masks=MASKS, block_m=BLOCKS, block_n=BLOCKS)
@settings(max_examples=300)  # plain Python: cheap
def test_count_tiles_adds_up_the_forward_loop(masks, block_m, block_n):
    mask, (_, offset, window, causal, windowed) = kernel_mask(**masks)
    seqlen_q, seqlen_k = mask.shape
    count = tiles.count_tiles(
        seqlen_q,
        seqlen_k,
        block_m,
        block_n,
        offset=offset,
        causal=causal,
        window=window if windowed else None,
        kv_len=masks["kv_len"],
    )
    blocks = mask.split(block_m, dim=0)  # tiles: each block of rows split into blocks of keys
    kept = [tile.any().item() for rows in blocks for tile in rows.split(block_n, dim=1)]
    assert count.total == len(kept)
    assert count.computed == sum(kept)


def test_causal_square_computes_the_lower_triangle_of_blocks():
    # 10 x 10 blocks of 16: block row b computes b full tiles and one on the diagonal.
    count = tiles.count_tiles(160, 160, 16, 16, causal=True)
    assert (count.full, count.partial, count.empty) == (45, 10, 45)


def test_a_window_computes_a_band_of_blocks():
    # Window 32 over 256 keys in tiles of 16: block row b >= 1 keeps the tile before the diagonal whole,
    # and from b = 2 on it reaches into tile b - 2 (row 16 b keeps keys from 16 b - 31): 3 tiles, 1 full.
    count = tiles.count_tiles(256, 256, 16, 16, causal=True, window=32)
    assert (count.full, count.partial) == (15, 1 + 2 * 15 - 1)
    assert count.computed == 1 + 2 + 3 * 14


def cumulative(lengths):
    """int32 `(N + 1,)` cumulative lengths: 0, then the running sums of `lengths`."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


PACKED = st.fixed_dictionaries(
    {
        "lengths": st.lists(
            st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=5
        ),
        "causal": st.sampled_from([False, "top_left", "bottom_right"]),
        "window": st.one_of(st.none(), st.integers(1, 45)),
    }
)


@given(packed=PACKED, block_m=BLOCKS, block_n=BLOCKS)
@settings(max_examples=200)  # plain Python: cheap
def test_packed_tiles_are_the_tiles_of_each_sequence_that_the_document_mask_keeps(
    packed, block_m, block_n
):
    seqlens_q, seqlens_k = zip(*packed["lengths"], strict=True)
    causal, window = packed["causal"], packed["window"] if packed["causal"] else None
    cu_q, cu_k = cumulative(seqlens_q), cumulative(seqlens_k)
    mask = qkv.document_mask(cu_q, cu_k, causal=causal, window=window)  # (total_q, total_k)
    count = tiles.count_packed_tiles(
        seqlens_q, seqlens_k, block_m, block_n, causal=causal, window=window
    )
    kept, squares = [], 0
    for b in range(len(seqlens_q)):
        square = mask[cu_q[b] : cu_q[b + 1], cu_k[b] : cu_k[b + 1]]  # (L_b, S_b)
        squares += square.sum()
        kept += [
            square[row : row + block_m, col : col + block_n].any().item()
            for row in range(0, square.size(0), block_m)
            for col in range(0, square.size(1), block_n)
        ]
    assert squares == mask.sum()  # the document mask keeps nothing outside the squares
    assert count.total == len(kept)
    assert count.computed == sum(kept)


def test_packed_documents_cost_a_fraction_of_the_dense_matrix():
    # Four causal documents of 64, 32, 16 and 16 tokens in 16 x 16 tiles: 10 + 3 + 1 + 1 tiles on their
    # diagonals' blocks and below, against the 8 x 8 tiles of the packed (128, 128) matrix.
    lengths = [64, 32, 16, 16]
    packed = tiles.count_packed_tiles(lengths, lengths, 16, 16, causal=True)
    assert (packed.full, packed.partial) == (6 + 1, 4 + 2 + 1 + 1)
    assert packed.computed == 15
    assert tiles.count_tiles(128, 128, 16, 16).computed == 64
