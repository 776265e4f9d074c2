"""qkv.paged: attention through block tables equals attention over contiguous caches; pages are shared safely.

The reference is torch's scaled_dot_product_attention on each sequence's contiguous keys and values, with an
explicit bottom-right causal mask (the newest L queries of a sequence of T tokens see tokens up to
T - L + i), in float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import qkv
from qkv.paged import PagedKVCache, gather_pages, paged_attention

EXACT = {"rtol": 1e-12, "atol": 1e-12}


def contiguous_attention(query, keys, values):
    """`query (H, L, D)` over one sequence's `keys (H_kv, T, D)`, `values`, bottom-right causal."""
    seqlen_q, total = query.size(1), keys.size(1)
    mask = torch.ones(seqlen_q, total, dtype=torch.bool).tril(total - seqlen_q)
    return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=True)


def filled_cache(lengths, page_size=4, heads_kv=2, dim=8, value_dim=8, num_pages=64):
    """A cache with one sequence per length, written in uneven chunks; and each sequence's tokens."""
    cache = PagedKVCache(
        num_pages, page_size, heads_kv, dim, value_dim=value_dim, dtype=torch.float64
    )
    generator = torch.Generator().manual_seed(sum(lengths))
    written = {}
    for index, length in enumerate(lengths):
        cache.add(index)
        keys = torch.randn(heads_kv, length, dim, generator=generator, dtype=torch.float64)
        values = torch.randn(heads_kv, length, value_dim, generator=generator, dtype=torch.float64)
        for start, stop in (
            (0, length // 3),
            (length // 3, length // 3 + 1),
            (length // 3 + 1, length),
        ):
            cache.append(index, keys[:, start:stop], values[:, start:stop])
        written[index] = (keys, values)
    return cache, written


@pytest.mark.parametrize("seqlen_q", [1, 3])
@pytest.mark.parametrize(
    ("heads", "heads_kv", "page_size"), [(2, 2, 4), (4, 2, 4), (6, 1, 5), (4, 2, 1)], ids=str
)
def test_paged_attention_equals_contiguous_attention(seqlen_q, heads, heads_kv, page_size):
    lengths = [3, 17, 8, 1 + page_size, 12][: 5 if seqlen_q <= 3 else 4]
    lengths = [max(length, seqlen_q) for length in lengths]  # ragged, page boundaries and not
    cache, written = filled_cache(lengths, page_size=page_size, heads_kv=heads_kv, value_dim=6)
    query = torch.randn(len(lengths), heads, seqlen_q, 8, dtype=torch.float64)
    tables, cached = cache.batch(list(range(len(lengths))))
    assert cached.tolist() == lengths
    out = paged_attention(query, cache.key_pages, cache.value_pages, tables, cached)
    assert out.shape == (len(lengths), heads, seqlen_q, 6)
    for b, (keys, values) in written.items():
        torch.testing.assert_close(out[b], contiguous_attention(query[b], keys, values), **EXACT)


def test_pages_hold_the_tokens_in_order():
    cache, written = filled_cache([13, 4, 9])
    for index, (keys, values) in written.items():
        got_keys, got_values = cache.contiguous(index)
        assert torch.equal(got_keys, keys)
        assert torch.equal(got_values, values)
        assert cache.length(index) == keys.size(1)
        assert len(cache.block_table(index)) == -(-keys.size(1) // 4)  # ceil: no page wasted
    assert int((cache.references > 0).sum()) == 4 + 1 + 3


def test_a_fork_shares_the_prompt_and_copies_only_the_page_it_writes_into():
    cache, written = filled_cache([10])  # pages of 4: two full, one with 2 tokens
    prompt = cache.block_table(0)
    cache.add("fork", fork_of=0)
    assert cache.block_table("fork") == prompt
    assert cache.references[prompt].tolist() == [2, 2, 2]
    before = cache.key_pages.clone(), cache.value_pages.clone()
    new_key, new_value = (
        torch.ones(2, 3, 8, dtype=torch.float64),
        torch.ones(2, 3, 8, dtype=torch.float64),
    )
    cache.append("fork", new_key, new_value)  # fills the shared last page: it is copied first
    fork = cache.block_table("fork")
    assert fork[:2] == prompt[:2]  # the full pages stay shared
    assert fork[2] != prompt[2]
    assert cache.references[prompt].tolist() == [2, 2, 1]
    assert torch.equal(
        cache.key_pages[prompt], before[0][prompt]
    )  # the prompt's pages are untouched
    assert torch.equal(cache.value_pages[prompt], before[1][prompt])
    keys, values = written[0]
    got_keys, got_values = cache.contiguous("fork")
    torch.testing.assert_close(got_keys, torch.cat([keys, new_key], dim=1), rtol=0, atol=0)
    torch.testing.assert_close(got_values, torch.cat([values, new_value], dim=1), rtol=0, atol=0)
    assert torch.equal(cache.contiguous(0)[0], keys)


def test_a_fork_at_a_page_boundary_copies_nothing():
    cache, _ = filled_cache([8])  # two full pages
    cache.add("fork", fork_of=0)
    cache.append("fork", *(torch.zeros(2, 1, 8, dtype=torch.float64) for _ in range(2)))
    assert cache.block_table("fork")[:2] == cache.block_table(0)
    assert cache.references[cache.block_table(0)].tolist() == [2, 2]


def test_freed_pages_return_to_the_pool_once_no_sequence_reads_them():
    cache, _ = filled_cache([6], num_pages=3)
    cache.add("fork", fork_of=0)
    cache.free(0)
    assert cache.references.tolist() == [1, 1, 0]  # the fork still reads both pages
    cache.free("fork")
    assert cache.references.tolist() == [0, 0, 0]
    cache.add("next")
    cache.append("next", *(torch.zeros(2, 12, 8, dtype=torch.float64) for _ in range(2)))
    assert sorted(cache.block_table("next")) == [0, 1, 2]


def test_a_full_pool_refuses_and_writes_nothing():
    cache, _ = filled_cache([6], num_pages=3)  # two pages used, one free
    cache.add("long")
    before = cache.references.clone()
    with pytest.raises(RuntimeError, match=r"1 free pages of 3, 2 are needed"):
        cache.append("long", *(torch.zeros(2, 5, 8, dtype=torch.float64) for _ in range(2)))
    assert torch.equal(cache.references, before)
    assert cache.length("long") == 0


def test_cache_errors_name_the_argument():
    cache = PagedKVCache(4, 2, kv_heads=2, head_dim=8)
    with pytest.raises(ValueError, match=r"sequence 'a' was never added"):
        cache.append("a", torch.zeros(2, 1, 8), torch.zeros(2, 1, 8))
    cache.add("a")
    with pytest.raises(ValueError, match=r"sequence 'a' was added already"):
        cache.add("a")
    with pytest.raises(ValueError, match=r"sequence 'b' was never added"):
        cache.add("c", fork_of="b")
    with pytest.raises(
        ValueError, match=r"key must be \(H_kv, T_new, D\) = \(2, T_new, 8\), got \(2, 1, 4\)"
    ):
        cache.append("a", torch.zeros(2, 1, 4), torch.zeros(2, 1, 8))
    with pytest.raises(ValueError, match=r"disagree on T_new"):
        cache.append("a", torch.zeros(2, 1, 8), torch.zeros(2, 2, 8))
    with pytest.raises(TypeError, match=r"key is torch.float64 on cpu, the pool torch.float32"):
        cache.append("a", torch.zeros(2, 1, 8, dtype=torch.float64), torch.zeros(2, 1, 8))
    with pytest.raises(ValueError, match=r"num_pages"):
        PagedKVCache(0, 2, 2, 8)


def test_paged_attention_errors_name_the_argument():
    cache, _ = filled_cache([5, 9])
    tables, lengths = cache.batch([0, 1])
    query = torch.randn(2, 2, 1, 8, dtype=torch.float64)
    pages = (cache.key_pages, cache.value_pages)
    with pytest.raises(ValueError, match=r"reads pages outside the pool's 64: \[64, 64\]"):
        paged_attention(query, *pages, tables.index_fill(1, torch.tensor([0]), 64), lengths)
    with pytest.raises(ValueError, match=r"at least L = 3 .* got \[2, 9\]"):
        paged_attention(query.expand(2, 2, 3, 8), *pages, tables, torch.tensor([2, 9]))
    with pytest.raises(ValueError, match=r"at most 12 \(max_pages \* page_size\)"):
        paged_attention(query, *pages, tables, torch.tensor([5, 13]))
    with pytest.raises(TypeError, match=r"block_tables must be an integer tensor"):
        paged_attention(query, *pages, tables.double(), lengths)
    with pytest.raises(ValueError, match=r"divide the query heads"):
        paged_attention(torch.randn(2, 3, 1, 8, dtype=torch.float64), *pages, tables, lengths)
    with pytest.raises(ValueError, match=r"block_tables must be \(B, max_pages\)"):
        paged_attention(query, *pages, tables[:1], lengths)
    # an entry past a sequence's pages is never read, whatever it holds
    past = tables.clone()
    past[0, -1] = 1000
    torch.testing.assert_close(
        paged_attention(query, *pages, past, lengths),
        paged_attention(query, *pages, tables, lengths),
        rtol=0,
        atol=0,
    )


def test_paged_attention_is_exported():
    assert qkv.paged_attention is paged_attention
    assert qkv.PagedKVCache is PagedKVCache


def test_gather_pages_reads_tokens_in_the_tables_order():
    # 3 pages of 2 slots, 1 head of 1 feature; the values say where each token was written
    pages = torch.tensor(
        [[[[10.0], [11.0]]], [[[20.0], [21.0]]], [[[30.0], [31.0]]]]
    )  # (3, 1, 2, 1)
    got = gather_pages(pages, [2, 0], 3)  # tokens 0, 1 in page 2, token 2 in page 0
    assert got.flatten().tolist() == [30.0, 31.0, 10.0]
    assert gather_pages(pages, torch.tensor([1]), 0).shape == (1, 0, 1)


def test_gather_pages_refuses_a_length_beyond_the_pages():
    with pytest.raises(ValueError, match=r"length must be in \[0, 4\]"):
        gather_pages(torch.zeros(3, 1, 2, 1), [0, 1], 5)
