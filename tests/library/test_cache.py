"""qkv.KVCache, and decoding with it: token by token gives the outputs of one causal forward."""

import pytest
import torch

import qkv
from tests.library.reference import reference_attention

E, H = 16, 4


def test_update_appends_along_the_sequence():
    cache = qkv.KVCache()
    assert len(cache) == 0
    k1, v1 = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 5)
    k2, v2 = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 5)
    keys, values = cache.update(k1, v1)
    assert torch.equal(keys, k1)
    assert torch.equal(values, v1)
    keys, values = cache.update(k2, v2)
    assert torch.equal(keys, torch.cat([k1, k2], dim=2))
    assert torch.equal(values, torch.cat([v1, v2], dim=2))
    assert len(cache) == 4


def test_cached_attention_of_the_last_token_matches_full_attention():
    q, k, v = torch.randn(3, 1, H, 6, 8, dtype=torch.float64)
    cache = qkv.KVCache()
    for t in range(6):
        keys, values = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
        out = qkv.scaled_dot_product_attention(q[:, :, t : t + 1], keys, values)
        expected = reference_attention(q, k, v, is_causal=True)[:, :, t : t + 1]
        torch.testing.assert_close(out, expected)


def test_multi_head_attention_decodes_like_one_causal_forward():
    mha = qkv.MultiHeadAttention(E, H).double().eval()
    x = torch.randn(2, 7, E, dtype=torch.float64)
    full = mha(x, is_causal=True)
    cache = qkv.KVCache()
    steps = [mha(x[:, :3], is_causal=True, cache=cache)]  # prefill 3 tokens
    steps += [mha(x[:, t : t + 1], cache=cache) for t in range(3, 7)]  # then one at a time
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert len(cache) == 7


def test_chunks_meet_cached_keys_bottom_right():
    mha = qkv.MultiHeadAttention(E, H).double().eval()
    x = torch.randn(1, 8, E, dtype=torch.float64)
    cache = qkv.KVCache()
    chunks = [mha(x[:, a:b], is_causal=True, cache=cache) for a, b in ((0, 3), (3, 6), (6, 8))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), mha(x, is_causal=True))


def test_need_weights_with_a_cache_covers_every_cached_key():
    mha = qkv.MultiHeadAttention(E, H).double().eval()
    x = torch.randn(1, 5, E, dtype=torch.float64)
    _, full_weights = mha(x, is_causal=True, need_weights=True)
    cache = qkv.KVCache()
    mha(x[:, :4], is_causal=True, cache=cache)
    _, weights = mha(x[:, 4:], cache=cache, need_weights=True)  # (B, H, 1, 5)
    torch.testing.assert_close(weights, full_weights[:, :, 4:])


def stack(layers, cross):
    torch.manual_seed(1)
    return [
        qkv.TransformerBlock(E, H, cross_attention=cross).double().eval() for _ in range(layers)
    ]


@pytest.mark.parametrize("cross", [False, True], ids=["decoder-only", "with-cross-attention"])
def test_a_stack_of_blocks_decodes_like_one_causal_forward(cross):
    blocks = stack(3, cross)
    x = torch.randn(2, 9, E, dtype=torch.float64)
    memory = torch.randn(2, 4, E, dtype=torch.float64) if cross else None

    def run(h, caches=None, causal=True):
        for i, block in enumerate(blocks):
            h = block(h, memory, is_causal=causal, cache=None if caches is None else caches[i])
        return h

    full = run(x)
    caches = [qkv.KVCache() for _ in blocks]
    outputs = [run(x[:, :5], caches)]  # prefill
    outputs += [run(x[:, t : t + 1], caches, causal=False) for t in range(5, 9)]  # decode
    torch.testing.assert_close(torch.cat(outputs, dim=1), full)
    assert all(len(c) == 9 for c in caches)


def test_a_cache_refuses_other_masks():
    mha = qkv.MultiHeadAttention(E, H)
    x = torch.randn(1, 2, E)
    with pytest.raises(ValueError, match="with a cache, pass no key_padding_mask or attn_mask"):
        mha(x, key_padding_mask=torch.zeros(1, 2, dtype=torch.bool), cache=qkv.KVCache())
    with pytest.raises(ValueError, match="with a cache, pass no key_padding_mask or attn_mask"):
        mha(x, attn_mask=qkv.causal_mask(2), cache=qkv.KVCache())


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (
            torch.randn(3, 2, 1, 4),
            torch.randn(3, 2, 1, 4),
            r"key \(3, 2, 1, 4\) disagrees with the cached key \(2, 2, 5, 4\)",
        ),
        (torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4), r"key \(2, 1, 1, 4\) disagrees"),
        (torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 4), r"key \(2, 2, 1, 8\) disagrees"),
        (
            torch.randn(2, 2, 1, 4),
            torch.randn(2, 2, 1, 6),
            r"value \(2, 2, 1, 6\) disagrees with the cached value \(2, 2, 5, 4\)",
        ),
        (
            torch.randn(2, 2, 1, 4),
            torch.randn(2, 2, 2, 4),
            r"key and value disagree on \(B, H, T\)",
        ),
        (
            torch.randn(2, 1, 4),
            torch.randn(2, 1, 4),
            r"key must be \(B, H, T, D\), got shape \(2, 1, 4\)",
        ),
    ],
)
def test_update_rejects_shapes_that_disagree(key, value, match):
    cache = qkv.KVCache()
    cache.update(torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))
    with pytest.raises(ValueError, match=match):
        cache.update(key, value)
    assert len(cache) == 5  # a refused update leaves the cache as it was


def test_update_rejects_other_dtypes():
    cache = qkv.KVCache()
    cache.update(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4))
    with pytest.raises(TypeError, match="disagree on dtype"):
        cache.update(torch.randn(1, 1, 1, 4).double(), torch.randn(1, 1, 1, 4).double())
    with pytest.raises(TypeError, match=r"key must be a torch\.Tensor"):
        cache.update([[0.0]], torch.randn(1, 1, 1, 4))
    with pytest.raises(TypeError, match="value must be a floating-point tensor"):
        cache.update(torch.randn(1, 1, 1, 4), torch.ones(1, 1, 1, 4, dtype=torch.int64))


def stream(tokens: int) -> torch.Tensor:
    """`(2, 3, tokens, 1)`: token t holds t + 1 in every batch element and head, so it names itself."""
    return torch.arange(1.0, tokens + 1).view(1, 1, tokens, 1).expand(2, 3, tokens, 1)


@pytest.mark.parametrize(
    ("tokens", "window", "sinks", "kept"),
    [
        (10, 6, 2, [1, 2, 7, 8, 9, 10]),  # the first 2, then the last 4
        (10, 6, 0, [5, 6, 7, 8, 9, 10]),  # a plain sliding window
        (10, 6, 5, [1, 2, 3, 4, 5, 10]),  # the sinks, then only the newest token
        (7, 6, 4, [1, 2, 3, 4, 6, 7]),  # one token over: the oldest after the sinks goes
        (6, 6, 4, [1, 2, 3, 4, 5, 6]),  # full, not over: all kept
        (3, 6, 4, [1, 2, 3]),  # fewer tokens than sinks
        (1, 1, 0, [1]),
    ],
)
def test_streaming_window_keeps_exactly_the_sinks_and_the_most_recent(tokens, window, sinks, kept):
    out = qkv.streaming_window(stream(tokens), window, sinks)
    assert out.shape == (2, 3, len(kept), 1)
    assert out[1, 2, :, 0].tolist() == kept
    assert torch.equal(out, out[:1, :1].expand_as(out))  # every batch element and head alike


def test_streaming_window_applied_at_every_step_equals_once_on_the_whole_stream():
    """What a decoder does: append one token, then evict; the cache never holds more than the window."""
    x = torch.randn(2, 3, 20, 4)
    cache = x[..., :0, :]
    for t in range(20):
        cache = qkv.streaming_window(torch.cat([cache, x[..., t : t + 1, :]], dim=-2), 8, 3)
        assert cache.size(-2) == min(t + 1, 8)
    assert torch.equal(cache, qkv.streaming_window(x, 8, 3))
    assert torch.equal(cache, torch.cat([x[..., :3, :], x[..., 15:, :]], dim=-2))


@pytest.mark.parametrize(
    ("window", "sinks", "error", "match"),
    [
        (4, 4, ValueError, r"sinks \(4\) must be below window \(4\)"),
        (0, 0, ValueError, "window must be positive"),
        (4, -1, ValueError, "sinks must be non-negative"),
        (4.0, 1, TypeError, "window must be an int"),
    ],
)
def test_streaming_window_rejects_bad_sizes_by_name(window, sinks, error, match):
    with pytest.raises(error, match=match):
        qkv.streaming_window(torch.zeros(1, 5, 2), window, sinks)
