"""qkv.paged fed malformed input: a clear error naming the argument; unread storage never reaches the output.

A pool made with `torch.empty`, as serving code makes it, holds anything in the slots past a sequence's
length and in the pages that padding entries of a block table name: `paged_attention` must give there what
attention over the sequence's own tokens gives (torch's, in float64), whatever those slots hold.
"""

from __future__ import annotations

import math

import pytest
import torch

from qkv.paged import PagedKVCache, gather_pages, paged_attention
from tests.library.reference import reference_attention

META = "meta"  # a device with no data: stands in for another device than the CPU


def pool(pages=6, heads_kv=2, page_size=4, dim=8, dtype=torch.float64):
    """Standard-normal key and value pools `(P, H_kv, page_size, D)`."""
    return (torch.randn(pages, heads_kv, page_size, dim, dtype=dtype) for _ in range(2))


def inputs(dtype=torch.float64):
    """Two sequences of 5 and 9 tokens in pages [0, 1, 2] and [3, 4, 5]; 4 query heads, 2 new tokens."""
    query = torch.randn(2, 4, 2, 8, dtype=dtype)
    key_pages, value_pages = pool(dtype=dtype)
    return query, key_pages, value_pages, torch.tensor([[0, 1, 2], [3, 4, 5]]), torch.tensor([5, 9])


def expected(query, key_pages, value_pages, tables, lengths):
    """torch's float64 attention over each sequence's own tokens, read slot by slot, bottom-right causal."""
    outputs = []
    page_size = key_pages.size(2)
    for b, length in enumerate(lengths.tolist()):
        slots = [(int(tables[b, t // page_size]), t % page_size) for t in range(length)]
        keys = torch.stack([key_pages[p, :, s] for p, s in slots], dim=1)  # (H_kv, T, D)
        values = torch.stack([value_pages[p, :, s] for p, s in slots], dim=1)
        mask = torch.ones(query.size(2), length, dtype=torch.bool).tril(length - query.size(2))
        outputs.append(reference_attention(query[b], keys, values, attn_mask=mask, enable_gqa=True))
    return torch.stack(outputs)


@pytest.mark.parametrize("junk", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_slots_and_pages_that_are_not_read_never_reach_the_output(junk, dtype):
    query, key_pages, value_pages, tables, lengths = inputs(dtype)
    clean = expected(query, key_pages, value_pages, tables, lengths)
    for pages in (key_pages, value_pages):
        pages[1, :, 1:] = junk  # sequence 0 holds 5 tokens: page 1 slot 0 only
        pages[2] = junk  # sequence 0's third page: past its length
    tables[0, 2] = -1  # a padding entry
    out = paged_attention(query, key_pages, value_pages, tables, lengths)
    assert torch.isfinite(out).all()
    tolerance = 1e-12 if dtype == torch.float64 else 2e-3
    torch.testing.assert_close(out.double(), clean, rtol=tolerance, atol=tolerance)


def test_a_pool_made_with_torch_empty_gives_the_attention_of_the_tokens_written():
    cache = PagedKVCache(6, 4, kv_heads=2, head_dim=8, dtype=torch.float64)
    cache.key_pages.fill_(math.nan)  # what torch.empty may hold
    cache.value_pages.fill_(math.nan)
    for name, length in (("a", 3), ("b", 6)):
        cache.add(name)
        cache.append(name, *(torch.randn(2, length, 8, dtype=torch.float64) for _ in range(2)))
    tables, lengths = cache.batch(["a", "b"])
    query = torch.randn(2, 2, 1, 8, dtype=torch.float64)
    out = paged_attention(query, cache.key_pages, cache.value_pages, tables, lengths)
    reference = expected(query, cache.key_pages, cache.value_pages, tables, lengths)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)


def test_uint8_tables_and_lengths_index_pages_not_a_mask():
    query, key_pages, value_pages, tables, lengths = inputs()
    out = paged_attention(
        query, key_pages, value_pages, tables.to(torch.uint8), lengths.to(torch.uint8)
    )
    reference = expected(query, key_pages, value_pages, tables, lengths)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)


def test_non_contiguous_and_expanded_queries_give_the_reference():
    query, key_pages, value_pages, tables, lengths = inputs()
    strided = query.transpose(2, 3).contiguous().transpose(2, 3)
    expanded = query[:1].expand(2, -1, -1, -1)
    for q in (strided, expanded):
        torch.testing.assert_close(
            paged_attention(q, key_pages, value_pages, tables, lengths),
            expected(q, key_pages, value_pages, tables, lengths),
            rtol=1e-12,
            atol=1e-12,
        )


ARGUMENTS = ("query", "key_pages", "value_pages", "block_tables", "lengths")


def _with_table_entry(row: int, column: int, page: int):
    def spoil(tables):
        tables = tables.clone()
        tables[row, column] = page
        return tables

    return spoil


PAGED_ATTENTION = {  # case -> (argument, how it is spoiled, error, what the message must say)
    "query not a tensor": ("query", lambda x: x.tolist(), TypeError, r"query must be a torch\.Tensor"),
    "query of ints": ("query", lambda x: x.long(), TypeError, r"query must be a floating-point"),
    "query 3-D": ("query", lambda x: x[0], ValueError, r"query must be 4-D"),
    "query D = 0": ("query", lambda x: x[..., :0], ValueError, r"query \(2, 4, 2, 0\)"),
    "query with 0 heads": ("query", lambda x: x[:, :0], ValueError, r"query's H and D"),
    "query heads not a multiple": ("query", lambda x: x[:, :3], ValueError, r"query \(2, 3, 2, 8\)"),
    "query on another device": ("query", lambda x: x.to(META), ValueError, r"query .*meta"),
    "key_pages of another dtype": ("key_pages", lambda x: x.float(), TypeError, r"key_pages"),
    "key_pages on another device": ("key_pages", lambda x: x.to(META), ValueError, r"key_pages"),
    "key_pages of another D": ("key_pages", lambda x: x[..., :4], ValueError, r"key_pages \(6, 2, 4, 4\)"),
    "an empty pool": ("key_pages", lambda x: x[:0], ValueError, r"key_pages \(0, 2, 4, 8\)"),
    "value_pages of another P": ("value_pages", lambda x: x[:5], ValueError, r"value_pages \(5,"),
    "value_pages on another device": ("value_pages", lambda x: x.to(META), ValueError, r"value_pages"),
    "block_tables of floats": ("block_tables", lambda x: x.double(), TypeError, r"block_tables must be an integer"),
    "block_tables as a list": ("block_tables", lambda x: x.tolist(), TypeError, r"block_tables must be a torch"),
    "block_tables 1-D": ("block_tables", lambda x: x[0], ValueError, r"block_tables must be \(B, max_pages\)"),
    "block_tables on another device": ("block_tables", lambda x: x.to(META), ValueError, r"block_tables is on meta"),
    "a page read at -1": ("block_tables", _with_table_entry(0, 0, -1), ValueError, r"block_tables reads pages outside .*\[-1\]"),
    "a page read past the pool": ("block_tables", _with_table_entry(1, 2, 6), ValueError, r"block_tables reads pages outside the pool's 6: \[6\]"),
    "lengths of floats": ("lengths", lambda x: x.double(), TypeError, r"lengths must be an integer"),
    "lengths of bools": ("lengths", lambda x: x > 0, TypeError, r"lengths must be an integer"),
    "lengths as a list": ("lengths", lambda x: x.tolist(), TypeError, r"lengths must be a torch"),
    "lengths (B, 1)": ("lengths", lambda x: x[:, None], ValueError, r"lengths \(2, 1\)"),
    "lengths on another device": ("lengths", lambda x: x.to(META), ValueError, r"lengths is on meta"),
    "a negative length": ("lengths", lambda x: torch.tensor([-1, 9]), ValueError, r"lengths must be at least L = 2 .*\[-1, 9\]"),
    "a length below L": ("lengths", lambda x: torch.tensor([1, 9]), ValueError, r"lengths must be at least L"),
    "a length beyond the pages": ("lengths", lambda x: torch.tensor([5, 13]), ValueError, r"at most 12"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("argument", "spoil", "error", "match"), PAGED_ATTENTION.values(), ids=PAGED_ATTENTION.keys()
)
def test_paged_attention_refuses_malformed_input_by_name(argument, spoil, error, match):
    args = dict(zip(ARGUMENTS, inputs(), strict=True))
    args[argument] = spoil(args[argument])
    with pytest.raises(error, match=match):
        paged_attention(*args.values())


@pytest.mark.parametrize(
    ("scale", "error"), [(True, TypeError), ("1", TypeError), (math.nan, ValueError)]
)
def test_paged_attention_refuses_a_scale_that_is_not_a_finite_number(scale, error):
    with pytest.raises(error, match=r"scale must be"):
        paged_attention(*inputs(), scale=scale)


PAGES = torch.arange(6 * 2 * 4 * 3, dtype=torch.float64).view(6, 2, 4, 3)  # (P, H_kv, page, D)
GATHER = {  # case -> (pages, block_table, length, error, what the message must say)
    "pages not a tensor": (PAGES.tolist(), [0, 1], 3, TypeError, r"pages must be a torch\.Tensor"),
    "pages of ints": (PAGES.long(), [0, 1], 3, TypeError, r"pages must be a floating-point"),
    "pages 3-D": (PAGES[0], [0, 1], 3, ValueError, r"pages must be 4-D"),
    "a page at -1": (PAGES, [-1, 0], 6, ValueError, r"block_table names pages outside the pool's 6"),
    "a page past the pool": (PAGES, [0, 6], 6, ValueError, r"block_table names pages outside .*\[6\]"),
    "a page past int64": (PAGES, [0, 2**64], 6, ValueError, r"block_table names pages outside .*\[18446744073709551616\]"),
    "a table of floats": (PAGES, [0.0, 1.0], 3, TypeError, r"block_table must hold ints"),
    "a table of bools": (PAGES, torch.tensor([True, False]), 3, TypeError, r"block_table must be an integer"),
    "a float tensor table": (PAGES, torch.tensor([0.0, 1.0]), 3, TypeError, r"block_table must be an integer"),
    "a 2-D table": (PAGES, torch.tensor([[0, 1]]), 3, ValueError, r"block_table must be 1-D"),
    "a table on another device": (PAGES, torch.tensor([0, 1], device=META), 3, ValueError, r"block_table is on meta"),
    "a table that is a str": (PAGES, "01", 3, TypeError, r"block_table must be a torch\.Tensor"),
    "a negative length": (PAGES, [0, 1], -1, ValueError, r"length must be non-negative"),
    "a length beyond the pages": (PAGES, [0, 1], 9, ValueError, r"length must be in \[0, 8\]"),
    "a float length": (PAGES, [0, 1], 2.5, TypeError, r"length must be an int"),
    "a bool length": (PAGES, [0, 1], True, TypeError, r"length must be an int"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("pages", "table", "length", "error", "match"), GATHER.values(), ids=GATHER.keys()
)
def test_gather_pages_refuses_malformed_input_by_name(pages, table, length, error, match):
    with pytest.raises(error, match=match):
        gather_pages(pages, table, length)


@pytest.mark.parametrize(
    "table",
    [[2, 0], (2, 0), torch.tensor([2, 0]), torch.tensor([2, 0], dtype=torch.uint8)],
    ids=str,
)
def test_gather_pages_reads_the_named_pages_whatever_the_tables_type(table):
    # 6 tokens: page 2's four slots, then page 0's first two
    expected = torch.cat([PAGES[2], PAGES[0, :, :2]], dim=1)
    torch.testing.assert_close(gather_pages(PAGES, table, 6), expected, rtol=0, atol=0)


def test_gather_pages_of_no_page_is_empty():
    assert gather_pages(PAGES, [], 0).shape == (2, 0, 3)


def test_the_cache_refuses_malformed_input_by_name():
    with pytest.raises(TypeError, match=r"dtype must be a floating-point torch\.dtype"):
        PagedKVCache(4, 4, 2, 8, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"dtype must be a floating-point torch\.dtype"):
        PagedKVCache(4, 4, 2, 8, dtype="float32")
    with pytest.raises(TypeError, match=r"page_size must be an int"):
        PagedKVCache(4, True, 2, 8)
    with pytest.raises(ValueError, match=r"value_dim must be positive"):
        PagedKVCache(4, 4, 2, 8, value_dim=0)
    with pytest.raises(ValueError, match=r"device must name a device torch knows, got 'gpu'"):
        PagedKVCache(4, 4, 2, 8, device="gpu")
    cache = PagedKVCache(4, 4, 2, 8)
    with pytest.raises(TypeError, match=r"sequence must be hashable"):
        cache.add(["a"])
    cache.add("a")
    with pytest.raises(TypeError, match=r"sequences must be a list"):
        cache.batch("a")  # a str is iterable: its characters would be read as sequences
    with pytest.raises(ValueError, match=r"sequence 'b' was never added"):
        cache.batch(["b"])
    with pytest.raises(TypeError, match=r"key must be a torch\.Tensor"):
        cache.append("a", [[0.0]], [[0.0]])
    with pytest.raises(TypeError, match=r"key is torch.float32 on meta"):
        cache.append("a", torch.zeros(2, 1, 8, device=META), torch.zeros(2, 1, 8, device=META))
