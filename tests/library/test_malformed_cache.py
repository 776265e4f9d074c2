"""qkv.KVCache and qkv.streaming_window fed malformed input: a clear error naming the argument."""

from __future__ import annotations

import pytest
import torch

from qkv.cache import KVCache, streaming_window

META = "meta"  # a device with no data: stands in for another device than the CPU
X = torch.randn(1, 2, 3, 4)  # (B, H, T, D)


def held():
    """A cache holding X."""
    cache = KVCache()
    cache.update(X, X)
    return cache


UPDATE = {  # case -> (cache maker, key, value, error, what the message must say)
    "key 3-D": (KVCache, X[0], X[0], ValueError, r"key must be \(B, H, T, D\), got shape \(2, 3, 4\)"),
    "key of ints": (KVCache, X.long(), X, TypeError, r"key must be a floating-point tensor"),
    "key as a list": (KVCache, [1.0], X, TypeError, r"key must be a torch\.Tensor"),
    "value of another dtype": (KVCache, X, X.double(), TypeError, r"key and value disagree on dtype"),
    "value on another device": (KVCache, X, X.to(META), ValueError, r"key and value are on different devices"),
    "value of another length": (KVCache, X, X[:, :, :2], ValueError, r"key and value disagree on \(B, H, T\)"),
    "another batch than held": (held, torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4), ValueError, r"key \(2, 2, 1, 4\) disagrees with the cached key"),
    "other heads than held": (held, torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4), ValueError, r"key \(1, 3, 1, 4\) disagrees with the cached key"),
    "another Dv than held": (held, torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 5), ValueError, r"value \(1, 2, 1, 5\) disagrees with the cached value"),
    "another dtype than held": (held, X.double(), X.double(), TypeError, r"cached key and key disagree on dtype"),
    "another device than held": (held, X.to(META), X.to(META), ValueError, r"cached key and key are on different devices"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("cache", "key", "value", "error", "match"), UPDATE.values(), ids=UPDATE.keys()
)
def test_update_refuses_malformed_input_by_name(cache, key, value, error, match):
    with pytest.raises(error, match=match):
        cache().update(key, value)


@pytest.mark.parametrize(
    ("length", "error", "match"),
    [
        (-1, ValueError, r"length must be non-negative"),
        (4, ValueError, r"length must be at most the 3 tokens cached, got 4"),
        (True, TypeError, r"length must be an int"),
        (1.0, TypeError, r"length must be an int"),
    ],
    ids=str,
)
def test_crop_refuses_a_length_outside_the_cache_by_name(length, error, match):
    with pytest.raises(error, match=match):
        held().crop(length)


def test_an_update_of_no_token_and_an_expanded_one_are_kept_as_given():
    cache = KVCache()
    keys, _ = cache.update(X[:, :, :0], X[:, :, :0])
    assert keys.shape == (1, 2, 0, 4)
    expanded = X[:, :1].expand(1, 2, 3, 4)
    keys, _ = cache.update(expanded, expanded)
    torch.testing.assert_close(keys, expanded, rtol=0, atol=0)


STREAMING = {  # case -> (x, window, sinks, error, what the message must say)
    "x 1-D": (torch.randn(5), 3, 1, ValueError, r"x must have at least 2 dimensions"),
    "x of ints": (torch.ones(5, 2, dtype=torch.long), 3, 1, TypeError, r"x must be a floating-point"),
    "x as a list": ([[1.0]], 2, 1, TypeError, r"x must be a torch\.Tensor"),
    "window 0": (X, 0, 0, ValueError, r"window must be positive"),
    "window a bool": (X, True, 0, TypeError, r"window must be an int"),
    "sinks below 0": (X, 2, -1, ValueError, r"sinks must be non-negative"),
    "sinks as many as the window": (X, 2, 2, ValueError, r"sinks \(2\) must be below window \(2\)"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("x", "window", "sinks", "error", "match"), STREAMING.values(), ids=STREAMING.keys()
)
def test_streaming_window_refuses_malformed_input_by_name(x, window, sinks, error, match):
    with pytest.raises(error, match=match):
        streaming_window(x, window, sinks)


def test_streaming_window_of_an_empty_stream_is_empty():
    assert streaming_window(torch.randn(0, 3), 4, 1).shape == (0, 3)
