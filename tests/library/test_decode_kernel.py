"""qkv.decode_attention (the split-KV Triton kernels) against torch, contiguous and paged caches.

As in `test_flash.py`: on CPU tensors through Triton's interpreter by default, on CUDA with
`TRITON_INTERPRET=0` (float16 and bfloat16 there; the interpreter cannot multiply bfloat16). Every
comparison is against torch's float64 attention with an explicit mask, each query `i` of sequence `b`
seeing keys `j <= lengths[b] - L + i`, and torch's own error in the same dtype as the yardstick (2x).
The interpreter reads keys in tiles of 16, so lengths 32 (two whole tiles) and 37 (a partial third) and
page sizes 16, 5 and 24 cover tiles that end on, before and across page and length boundaries.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.kernels import contract, decode
from tests.library.reference import assert_close_to_reference, reference_attention, torch_attention

DEVICE = "cpu" if decode.INTERPRETED else "cuda"
DTYPES = [torch.float16] if decode.INTERPRETED else [torch.float16, torch.bfloat16]
interpreter_only = pytest.mark.skipif(not decode.INTERPRETED, reason="checks Triton's interpreter")


def decode_mask(lengths, seqlen_q, seqlen_k):
    """Bool `(B, 1, L, S)`, True = may attend: each sequence's own bottom-right causal mask, padded to S."""
    masks = [
        F.pad(qkv.causal_mask(seqlen_q, length, alignment="bottom_right"), (0, seqlen_k - length))
        for length in lengths.tolist()
    ]
    return torch.stack(masks)[:, None].to(DEVICE)  # (B, L, S) -> (B, 1, L, S)


def assert_matches_torch(out, q, k, v, lengths, scale=None):
    """`out` is as close to float64 attention as torch's own in q's dtype; k, v contiguous `(B, H_kv, S, D)`."""
    kwargs = {"attn_mask": decode_mask(lengths, q.size(2), k.size(2)), "scale": scale}
    kwargs["enable_gqa"] = q.size(1) != k.size(1)
    assert out.dtype == q.dtype
    expected = reference_attention(q, k, v, **kwargs)
    assert_close_to_reference(out, expected, torch_attention(q, k, v, **kwargs))


def random_cache(batch, heads, heads_kv, seqlen_q, seqlen_k, head_dim=16, dtype=torch.float16):
    """Standard-normal q `(B, H, L, D)`, k and v `(B, H_kv, S, D)` on the device under test."""
    q = torch.randn(batch, heads, seqlen_q, head_dim, dtype=dtype, device=DEVICE)
    k, v = (
        torch.randn(batch, heads_kv, seqlen_k, head_dim, dtype=dtype, device=DEVICE)
        for _ in range(2)
    )
    return q, k, v


def paged(k, v, lengths, page_size, spare_pages=3):
    """The cache `(B, H_kv, S, D)` as a shuffled pool `(P, H_kv, page_size, D)` and block tables `(B, max_pages)`.

    Each sequence gets the pages its length needs, in a random order of the pool; spare pages and the
    slots past each length are NaN, and table entries past a sequence's pages are -1: none may be read.
    """
    batch, heads_kv, seqlen_k, head_dim = k.shape
    max_pages = -(-seqlen_k // page_size)
    needed = [-(-length // page_size) for length in lengths.tolist()]
    pool_size = sum(needed) + spare_pages
    order = torch.randperm(pool_size).tolist()
    shape = (pool_size, heads_kv, page_size, head_dim)
    pools = [torch.full(shape, float("nan"), dtype=k.dtype, device=DEVICE) for _ in range(2)]
    tables = torch.full((batch, max_pages), -1, dtype=torch.int64)
    for b, (length, pages) in enumerate(zip(lengths.tolist(), needed, strict=True)):
        for page in range(pages):
            tables[b, page] = slot = order.pop()
            tokens = slice(page * page_size, min((page + 1) * page_size, length))
            width = tokens.stop - tokens.start
            for pool, cache in zip(pools, (k, v), strict=True):
                pool[slot, :, :width] = cache[b, :, tokens]
    return *pools, tables.to(DEVICE)


# Three sequences: exactly L tokens, two whole tiles (32), a partial third tile (37).
LENGTHS = [pytest.param(1, id="L1"), pytest.param(4, id="L4")]
HEADS = [
    pytest.param(2, 2, id="mha-2-2"),
    pytest.param(8, 2, id="gqa-8-2"),
    pytest.param(4, 1, id="mqa-4-1"),
]


@pytest.mark.parametrize("num_splits", [1, 2, 5], ids=lambda n: f"splits{n}")
@pytest.mark.parametrize(("heads", "heads_kv"), HEADS)
@pytest.mark.parametrize("seqlen_q", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_contiguous_cache_matches_torch(dtype, seqlen_q, heads, heads_kv, num_splits):
    # 5 splits of 3 tiles at most: some splits are empty, whole or for some rows only.
    q, k, v = random_cache(3, heads, heads_kv, seqlen_q, 37, dtype=dtype)
    lengths = torch.tensor([seqlen_q, 32, 37], device=DEVICE)
    out = qkv.decode_attention(q, k, v, lengths=lengths, num_splits=num_splits)
    assert_matches_torch(out, q, k, v, lengths)


@pytest.mark.parametrize("page_size", [16, 5, 24], ids=lambda n: f"page{n}")
@pytest.mark.parametrize("seqlen_q", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_cache_matches_torch_and_paged_attention(dtype, seqlen_q, page_size):
    q, k, v = random_cache(3, 8, 2, seqlen_q, 37, dtype=dtype)
    lengths = torch.tensor([37, seqlen_q, 32], device=DEVICE)
    key_pages, value_pages, tables = paged(k, v, lengths, page_size)
    out = qkv.decode_attention(
        q, key_pages, value_pages, lengths=lengths, block_tables=tables, num_splits=3
    )
    assert_matches_torch(out, q, k, v, lengths)
    # qkv.paged_attention reads the same pages through the same tables; it multiplies the NaN past each
    # length by a weight of 0 (NaN), so it gets them as zeros, and its unused table entries as page 0.
    # Against `out` in q's dtype: rounding an output between 2 and 4 to that dtype alone can cost one eps
    # (half a unit in the last place), and 0.0066 was seen in bfloat16 on an H200 (eps 0.0078): 4 eps.
    key_pages, value_pages = (pool.double().nan_to_num(0.0) for pool in (key_pages, value_pages))
    expected = qkv.paged_attention(q.double(), key_pages, value_pages, tables.clamp(min=0), lengths)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=4 * torch.finfo(dtype).eps)


@given(
    seqlen_q=st.integers(1, 8),
    extra=st.lists(st.integers(0, 40), min_size=1, max_size=2),
    heads=st.sampled_from([(2, 2), (4, 1), (6, 2)]),
    page_size=st.one_of(st.none(), st.integers(1, 20)),
    num_splits=st.integers(1, 6),
)
@settings(max_examples=15)
def test_any_lengths_pages_and_splits_match_torch(seqlen_q, extra, heads, page_size, num_splits):
    lengths = torch.tensor([seqlen_q + n for n in extra], device=DEVICE)  # each at least L
    torch.manual_seed(int(lengths.sum()))
    q, k, v = random_cache(len(extra), *heads, seqlen_q, int(lengths.max()))
    cache, tables = (k, v), None
    if page_size is not None:
        *cache, tables = paged(k, v, lengths, page_size, spare_pages=1)
    out = qkv.decode_attention(
        q, *cache, lengths=lengths, block_tables=tables, num_splits=num_splits
    )
    assert_matches_torch(out, q, k, v, lengths)


def test_without_lengths_every_sequence_uses_the_whole_cache():
    q, k, v = random_cache(2, 4, 2, 4, 21)
    out = qkv.decode_attention(q, k, v, num_splits=2)
    assert_matches_torch(out, q, k, v, torch.tensor([21, 21]))


def test_contiguous_keys_past_the_lengths_are_never_read():
    q, k, v = random_cache(2, 4, 2, 4, 40)
    lengths = torch.tensor([7, 33], device=DEVICE)
    real = torch.arange(40, device=DEVICE)[None, :] < lengths[:, None]  # (B, S)
    real = real[:, None, :, None]  # (B, 1, S, 1)
    poisoned = [x.masked_fill(~real, float("nan")) for x in (k, v)]
    clean = qkv.decode_attention(q, k, v, lengths=lengths, num_splits=3)
    dirty = qkv.decode_attention(q, *poisoned, lengths=lengths, num_splits=3)
    assert torch.equal(clean, dirty)


def test_pages_slots_and_table_entries_past_the_lengths_are_never_read():
    # paged() fills spare pages and slots past each length with NaN, table entries past them with -1
    q, k, v = random_cache(2, 4, 2, 4, 40)
    lengths = torch.tensor([11, 33], device=DEVICE)
    key_pages, value_pages, tables = paged(k, v, lengths, page_size=8)
    assert key_pages.isnan().any()
    assert (tables < 0).any()
    out = qkv.decode_attention(q, key_pages, value_pages, lengths=lengths, block_tables=tables)
    assert not out.isnan().any()
    assert_matches_torch(out, q, k, v, lengths)


def test_a_group_of_more_than_64_rows_takes_several_programs():
    # MQA with 20 heads and L = 4: 80 rows per key/value head, two programs of 64 rows.
    assert decode.rows_per_program(20, 4) == decode.MAX_ROWS == 64
    q, k, v = random_cache(1, 20, 1, 4, 19)
    lengths = torch.tensor([19], device=DEVICE)
    assert_matches_torch(
        qkv.decode_attention(q, k, v, lengths=lengths, num_splits=2), q, k, v, lengths
    )


@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_head_sizes_and_a_custom_scale_match_torch(head_dim):
    q, k, v = random_cache(2, 2, 1, 2, 20, head_dim)
    lengths = torch.tensor([20, 9], device=DEVICE)
    out = qkv.decode_attention(q, k, v, lengths=lengths, num_splits=2, scale=0.3)
    assert_matches_torch(out, q, k, v, lengths, scale=0.3)


@pytest.mark.parametrize(
    ("programs", "multiprocessors", "key_blocks", "splits"),
    [
        # B = 4, H_kv = 8 on an H100 or H200: 12 x 32 = 384 of 3 x 132 slots (0.97); 9 to 11 fill less
        (32, 132, 1024, 12),
        (32, 108, 1024, 10),  # the same on an A100: 320 of 3 x 108 slots
        (32, 132, 8, 8),  # 1k keys in 128-key tiles: 8 splits, 256 of 2 x 132 slots (0.97)
        (512, 132, 1024, 1),  # enough programs already: 512 of 4 x 132 slots
        (1, 132, 10**7, 128),  # at most MAX_SPLITS, 128 of 132 slots
        (4, 1, 1, 1),  # a cache of one tile
        (4, 4, 10, 2),  # the interpreter's 4 multiprocessors: two whole waves
    ],
)
def test_default_splits_fill_whole_waves(programs, multiprocessors, key_blocks, splits):
    assert decode.default_splits(programs, multiprocessors, key_blocks) == splits


def test_default_splits_are_asked_with_the_devices_multiprocessors(monkeypatch):
    asked = []
    choose = decode.default_splits
    monkeypatch.setattr(decode, "default_splits", lambda *args: asked.append(args) or choose(*args))
    q, k, v = random_cache(1, 4, 2, 1, 40)  # B = 1, H_kv = 2, one row block: 2 programs
    assert_matches_torch(qkv.decode_attention(q, k, v), q, k, v, torch.tensor([40]))
    if DEVICE == "cpu":  # the interpreter's 4; 40 keys are 3 tiles of 16: 2 splits fill 4 slots
        assert asked == [(2, 4, 3)]
        assert choose(*asked[0]) == 2
    else:  # 40 keys: one tile of 64 or 128 keys
        assert asked == [(2, torch.cuda.get_device_properties(DEVICE).multi_processor_count, 1)]


def test_the_autotuner_keys_on_cache_length_and_batch():
    assert {"max_keys", "batch", "num_splits"} <= set(decode.TUNING_KEY)
    assert set(decode.TUNING_KEY) <= set(decode._split_kernel.arg_names)


@pytest.mark.parametrize(
    ("seqlen_q", "page_size"),
    [(1, None), (3, None), (1, 16), (3, 32), (3, 5)],
    ids=["L1-contiguous", "L3-contiguous", "L1-page16", "L3-page32", "L3-page5"],
)
def test_descriptor_variant_matches_torch_and_the_pointers(monkeypatch, seqlen_q, page_size):
    # 48 keys: three whole tiles of 16 under the interpreter, read through TMA where a page holds
    # whole tiles (contiguous, 16, 32), through pointers where it does not (5); lengths L, 48 and 37.
    q, k, v = random_cache(3, 8, 2, seqlen_q, 48)
    lengths = torch.tensor([seqlen_q, 48, 37], device=DEVICE)
    cache, tables = (k, v), None
    if page_size is not None:
        *cache, tables = paged(k, v, lengths, page_size)
    pointers = decode.decode(q, *cache, lengths, tables, 2, None)
    monkeypatch.setattr(decode._tuned_split, "configs", decode.DECODE_VARIANTS[:1])  # pinned
    out = decode.decode(q, *cache, lengths, tables, 2, None)
    assert_matches_torch(out, q, k, v, lengths)
    assert torch.equal(out, pointers)


# Both merges on the same inputs: GQA, batch 3 with lengths L (one key per query), a partial tile and two
# whole tiles, 1 to 5 splits (some empty), contiguous and paged.
MERGE_CASES = [
    pytest.param(1, 1, None, id="L1-splits1"),
    pytest.param(1, 5, None, id="L1-splits5"),
    pytest.param(3, 2, None, id="L3-splits2"),
    pytest.param(3, 4, 5, id="L3-splits4-page5"),
]


@pytest.mark.parametrize(("seqlen_q", "num_splits", "page_size"), MERGE_CASES)
def test_merge_in_launch_and_merge_kernel_agree_bit_for_bit(seqlen_q, num_splits, page_size):
    q, k, v = random_cache(3, 8, 2, seqlen_q, 37)
    lengths = torch.tensor([seqlen_q, 37, 32], device=DEVICE)
    cache, tables = (k, v), None
    if page_size is not None:
        *cache, tables = paged(k, v, lengths, page_size)
    outs = [
        decode.decode(q, *cache, lengths, tables, num_splits, None, merge_in_launch=merged)
        for merged in (True, False)
    ]
    assert_matches_torch(outs[1], q, k, v, lengths)
    assert torch.equal(outs[0], outs[1])


def test_merge_in_launch_leaves_its_counters_at_zero():
    q, k, v = random_cache(2, 4, 1, 2, 21)
    lengths = torch.tensor([21, 5], device=DEVICE)
    first = decode.decode(q, k, v, lengths, None, 3, None, merge_in_launch=True)
    counters = decode._counters[q.device, 0]
    assert counters.numel() >= 2
    assert not counters.any()
    # a count left over would skip the merge
    again = decode.decode(q, k, v, lengths, None, 3, None, merge_in_launch=True)
    assert torch.equal(first, again)
    assert_matches_torch(again, q, k, v, lengths)


@interpreter_only
def test_bfloat16_is_refused_under_the_interpreter():
    q, k, v = random_cache(1, 1, 1, 1, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"bfloat16, which Triton's interpreter cannot multiply"):
        qkv.decode_attention(q, k, v)


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(contract, "interpreted", lambda: False)
    q, k, v = (torch.randn(1, 1, 1, 16, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match=r"on the CPU \(1, 1, 1, 16\).*TRITON_INTERPRET=1"):
        qkv.decode_attention(q, k, v)


def test_gradients_are_refused_and_no_grad_runs():
    q, k, v = random_cache(1, 2, 1, 1, 8)
    q.requires_grad_()
    with pytest.raises(ValueError, match=r"computes no gradients .*torch\.no_grad\(\)"):
        qkv.decode_attention(q, k, v)
    with torch.no_grad():
        out = qkv.decode_attention(q, k, v)
    assert_matches_torch(out, q.detach(), k, v, torch.tensor([8]))


def half(*size):
    return torch.randn(*size, dtype=torch.float16, device=DEVICE)


def ints(*values):
    return torch.tensor(values, device=DEVICE)


Q, KV = half(2, 4, 2, 16), half(2, 2, 8, 16)  # B = 2, H = 4, L = 2, D = 16; H_kv = 2, S = 8
POOL, TABLES = half(3, 2, 4, 16), ints([0, 1], [2, 0])  # 3 pages of 4 tokens, 2 pages per sequence
BAD_INPUTS = [
    pytest.param(
        (Q, KV, [[1.0]]), {}, TypeError, r"v must be a torch\.Tensor, got list", id="list"
    ),
    pytest.param(
        (Q[0], KV, KV),
        {},
        ValueError,
        r"q must be 4-D \(B, H, L, D\), got shape \(4, 2, 16\)",
        id="3d",
    ),
    pytest.param(
        (Q.float(), KV.float(), KV.float()),
        {},
        TypeError,
        r"q has dtype torch\.float32; decode_attention takes torch\.float16 or torch\.bfloat16",
        id="float32",
    ),
    pytest.param(
        (Q, KV, KV.bfloat16()), {}, TypeError, r"q and v disagree on dtype", id="dtype-mismatch"
    ),
    pytest.param(
        (Q, KV, torch.empty(2, 2, 8, 16, dtype=torch.float16, device="meta")),
        {},
        ValueError,
        r"q and v are on different devices",
        id="device-mismatch",
    ),
    pytest.param(
        (Q, KV, KV[:, :, :7]),
        {},
        ValueError,
        r"k and v must have the same shape: k \(2, 2, 8, 16\) vs v \(2, 2, 7, 16\)",
        id="kv-shapes",
    ),
    pytest.param(
        (Q, KV[:, :1].expand(2, 3, 8, 16), KV[:, :1].expand(2, 3, 8, 16)),
        {},
        ValueError,
        r"H_kv must divide q's heads H .*q \(2, 4, 2, 16\), k \(2, 3, 8, 16\)",
        id="heads-do-not-divide",
    ),
    pytest.param(
        (half(2, 4, 2, 48), half(2, 2, 8, 48), half(2, 2, 8, 48)),
        {},
        ValueError,
        r"one head size D in \(16, 32, 64, 128\): q \(2, 4, 2, 48\)",
        id="head-size-48",
    ),
    pytest.param(
        (half(2, 4, 65, 16), KV, KV),
        {},
        ValueError,
        r"1 to 64 new queries L .*flash_attention.*: q \(2, 4, 65, 16\)",
        id="too-many-queries",
    ),
    pytest.param(
        (Q, KV[:1], KV[:1]),
        {},
        ValueError,
        r"contiguous cache .* needs q's batch size B: q \(2, 4, 2, 16\), k \(1, 2, 8, 16\)",
        id="batch",
    ),
    pytest.param(
        (Q, KV, KV),
        {"num_splits": 0},
        ValueError,
        r"num_splits must be in \[1, 128\], got 0",
        id="splits0",
    ),
    pytest.param(
        (Q, KV, KV),
        {"num_splits": 2.0},
        TypeError,
        r"num_splits must be an int or None, got float",
        id="splits-float",
    ),
    pytest.param(
        (Q, KV, KV),
        {"scale": "0.1"},
        TypeError,
        r"scale must be a number or None, got str",
        id="scale-str",
    ),
    pytest.param(
        (Q, KV, KV),
        {"lengths": torch.tensor([8.0, 8.0], device=DEVICE)},
        TypeError,
        r"lengths must be an integer tensor, got torch\.float32",
        id="lengths-float",
    ),
    pytest.param(
        (Q, KV, KV),
        {"lengths": ints(8, 8, 8)},
        ValueError,
        r"lengths must be \(B,\) = \(2,\), got \(3,\)",
        id="lengths-shape",
    ),
    pytest.param(
        (Q, KV, KV),
        {"lengths": torch.tensor([8, 8], device="meta")},
        ValueError,
        r"lengths is on meta but q is on",
        id="lengths-device",
    ),
    pytest.param(
        (Q, KV, KV),
        {"lengths": ints(1, 8)},
        ValueError,
        r"lengths must be at least L = 2 .* at most 8 \(S\), got \[1, 8\]",
        id="length-below-L",
    ),
    pytest.param(
        (Q, KV, KV),
        {"lengths": ints(8, 9)},
        ValueError,
        r"at most 8 \(S\), got \[8, 9\]",
        id="length-above-S",
    ),
    pytest.param(
        (Q, POOL, POOL),
        {"block_tables": TABLES},
        ValueError,
        r"paged cache .* needs lengths",
        id="paged-no-lengths",
    ),
    pytest.param(
        (Q, POOL, POOL),
        {"block_tables": TABLES[:1], "lengths": ints(8, 8)},
        ValueError,
        r"block_tables must be \(B, max_pages\) with B = 2, got \(1, 2\)",
        id="tables-shape",
    ),
    pytest.param(
        (Q, POOL, POOL),
        {"block_tables": TABLES.float(), "lengths": ints(8, 8)},
        TypeError,
        r"block_tables must be an integer tensor",
        id="tables-float",
    ),
    pytest.param(
        (Q, POOL, POOL),
        {"block_tables": TABLES, "lengths": ints(8, 9)},
        ValueError,
        r"at most 8 \(max_pages \* page_size\), got \[8, 9\]",
        id="length-above-pages",
    ),
    pytest.param(
        (Q, POOL, POOL),
        {"block_tables": ints([0, 3], [2, -1]), "lengths": ints(8, 4)},
        ValueError,
        r"block_tables reads pages outside the pool's 3: \[3\]",  # -1 is past sequence 1's one page
        id="page-out-of-range",
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "error", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_the_shapes(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.decode_attention(*args, **kwargs)


def test_without_triton_the_error_names_the_extra(monkeypatch):
    import qkv.kernels

    monkeypatch.setattr(qkv.kernels, "triton_installed", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r"qkv\[kernel\]"):
        qkv.decode_attention(Q, KV, KV)


# Compiles both kernels to sm_90 machine code (Triton's bundled ptxas, no GPU), as test_flash.py does the
# FlashAttention kernels: contiguous and paged, both merges, and every autotuner tile size at D = 128
# and 64 rows, merging in the launch, without spills (4 warps at 128-key tiles and 64 rows spill with
# either merge: the 8-warp configuration of each tile size is the one checked).
COMPILE_FOR_GPU = textwrap.dedent(
    """
    from qkv.kernels import decode
    from qkv_lab.sm90 import H100_SHARED_MEMORY, compile_for_sm90, usage

    assert not decode.INTERPRETED


    def compiles(kernel, constants, num_warps=4, num_stages=3):
        options = {"num_warps": num_warps, "num_stages": num_stages}
        compiled = compile_for_sm90(kernel, constants, **options)
        assert compiled.asm["cubin"], kernel.__name__
        assert compiled.metadata.shared <= H100_SHARED_MEMORY, (constants, num_stages)
        return compiled


    def without_spills(kernel, constants, num_warps=4, num_stages=3):
        found = usage(compiles(kernel, constants, num_warps, num_stages))
        assert found["stack"] == 0, (kernel.__name__, constants, num_warps, found)


    for rows in (16, 64):
        without_spills(decode._merge_kernel, {"HEAD_DIM": 128, "BLOCK_M": rows})
    for tables in ({"BlockTables": None}, {}):  # contiguous, paged
        for merge in (True, False):
            constants = {"HEAD_DIM": 64, "BLOCK_M": 16, "BLOCK_N": 64}
            constants |= {"MERGE_IN_LAUNCH": merge, **tables}
            compiles(decode._split_kernel, constants)

    # The variants with tensor descriptors, for one query and for sixteen of a group of four heads,
    # contiguous: TMA copies in the code, no spills.
    for config in decode.DECODE_VARIANTS:
        for rows in (16, 64):
            constants = {"HEAD_DIM": 128, "BLOCK_M": rows, "MERGE_IN_LAUNCH": True}
            constants |= {"BlockTables": None, **config.kwargs}
            compiled = compiles(
                decode._split_kernel, constants, config.num_warps, config.num_stages
            )
            assert "cp.async.bulk.tensor" in compiled.asm["ptx"], constants
            assert usage(compiled)["stack"] == 0, (constants, usage(compiled))

    # Each tile size the autotuner may try, at its deepest pipeline (the most shared memory), merging
    # in the launch: no spills.
    by_stages = sorted(decode._tuned_split.configs, key=lambda config: config.num_stages)
    for config in {tuple(config.kwargs.items()): config for config in by_stages}.values():
        constants = {"HEAD_DIM": 128, "BLOCK_M": 64, "MERGE_IN_LAUNCH": True, **config.kwargs}
        without_spills(decode._split_kernel, constants, config.num_warps, config.num_stages)
    """
)


def test_kernels_compile_for_a_gpu():
    """The interpreter skips GPU compilation; this catches what only the compiler rejects."""
    env = os.environ | {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    env["QKV_FLASH_AUTOTUNE"] = "1"  # every configuration the autotuner may try
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_GPU],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
