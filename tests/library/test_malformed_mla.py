"""qkv.MultiHeadLatentAttention fed malformed input: errors as clear as MultiHeadAttention's, named.

An empty sequence is not malformed: as `qkv.MultiHeadAttention`, the module returns `(B, 0, E)`.
"""

from __future__ import annotations

import pytest
import torch

from qkv.cache import KVCache
from qkv.mla import LatentCache, MultiHeadLatentAttention

META = "meta"  # a device with no data: stands in for another device than the CPU
WIDTH, HEADS, HEAD_DIM, ROPE_DIM, LATENT_DIM = 8, 2, 4, 2, 6


def module(latent_dim=LATENT_DIM, dtype=torch.float64):
    torch.manual_seed(0)
    return MultiHeadLatentAttention(WIDTH, HEADS, HEAD_DIM, ROPE_DIM, latent_dim).to(dtype)


def filled_cache(batch=2, latent_dim=LATENT_DIM, dtype=torch.float64):
    """A cache holding 3 tokens of a module of `latent_dim`, in `dtype`."""
    cache = LatentCache()
    module(latent_dim, dtype)(torch.randn(batch, 3, WIDTH, dtype=dtype), cache)
    return cache


X = torch.randn(2, 5, WIDTH, dtype=torch.float64)
FORWARD = {  # case -> (x, cache maker, options, error, what the message must say)
    "x 2-D": (X[0], None, {}, ValueError, r"x must be \(B, T, E\) with E = 8, got \(5, 8\)"),
    "x of another width": (X[..., :7], None, {}, ValueError, r"x must be \(B, T, E\) with E = 8"),
    "x of ints": (X.long(), None, {}, TypeError, r"x must be a floating-point tensor"),
    "x as a list": (X.tolist(), None, {}, TypeError, r"x must be a torch\.Tensor"),
    "x of another dtype": (X.float(), None, {}, TypeError, r"x has dtype torch\.float32 but the module's parameters are torch\.float64"),
    "x on another device": (X.to(META), None, {}, ValueError, r"x is on meta but the module's parameters are on cpu"),
    "a KVCache": (X, KVCache, {}, TypeError, r"cache must be a qkv\.mla\.LatentCache or None, got KVCache"),
    "a list as cache": (X, list, {}, TypeError, r"cache must be a qkv\.mla\.LatentCache or None, got list"),
    "a cache of another batch": (X[:1], filled_cache, {}, ValueError, r"cache holds latents \(2, 3, 6\) .*this call's are \(1, ., 6\)"),
    "a cache of another latent size": (X, lambda: filled_cache(latent_dim=5), {}, ValueError, r"cache holds latents \(2, 3, 5\)"),
    "a cache of another dtype": (X, lambda: filled_cache(dtype=torch.float32), {}, TypeError, r"cache's latents and x disagree on dtype"),
    "absorbed a str": (X, None, {"absorbed": "yes"}, TypeError, r"absorbed must be a bool"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("x", "cache", "options", "error", "match"), FORWARD.values(), ids=FORWARD.keys()
)
def test_forward_refuses_malformed_input_by_name(x, cache, options, error, match):
    with pytest.raises(error, match=match):
        module()(x, None if cache is None else cache(), **options)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"rope_base": 1.0}, ValueError, r"rope_base must be a finite number above 1"),
        ({"rope_base": "1e4"}, TypeError, r"rope_base must be a number"),
        ({"heads": True}, TypeError, r"heads must be an int"),
        ({"rope_dim": 0}, ValueError, r"rope_dim must be positive"),
        ({"width": 0}, ValueError, r"width must be positive"),
    ],
    ids=str,
)
def test_construction_refuses_malformed_sizes_by_name(arguments, error, match):
    sizes = {"width": 8, "heads": 2, "head_dim": 4, "rope_dim": 2, "latent_dim": 6} | arguments
    with pytest.raises(error, match=match):
        MultiHeadLatentAttention(**sizes)


@pytest.mark.parametrize("absorbed", [False, True], ids=["plain", "absorbed"])
@pytest.mark.parametrize("x", [X[:, :0], X[:0]], ids=["no token", "no sequence"])
def test_an_empty_input_gives_an_empty_output(absorbed, x):
    out = module()(x, absorbed=absorbed)
    assert out.shape == x.shape


@pytest.mark.parametrize("absorbed", [False, True], ids=["plain", "absorbed"])
def test_no_new_token_after_a_cache_gives_nothing_and_keeps_the_cache(absorbed):
    mla, cache = module(), filled_cache()
    assert mla(X[:, :0], cache, absorbed=absorbed).shape == (2, 0, WIDTH)
    assert len(cache) == 3


def test_non_contiguous_and_expanded_input_give_the_contiguous_result():
    mla = module()
    strided = X.transpose(0, 1).contiguous().transpose(0, 1)
    torch.testing.assert_close(mla(strided), mla(X.contiguous()), rtol=0, atol=1e-12)
    expanded = X[:1].expand(2, -1, -1)
    torch.testing.assert_close(mla(expanded), mla(X[:1]).expand(2, -1, -1), rtol=0, atol=1e-12)


UPDATE = {  # case -> (latents, rope_keys, cache maker, error, what the message must say)
    "latents a list": ([[0.0]], torch.zeros(1, 1, ROPE_DIM), LatentCache, TypeError, r"latents must be a torch\.Tensor"),
    "latents of ints": (torch.zeros(1, 1, LATENT_DIM, dtype=torch.long), torch.zeros(1, 1, ROPE_DIM), LatentCache, TypeError, r"latents must be a floating-point tensor"),
    "latents 2-D": (torch.zeros(1, LATENT_DIM), torch.zeros(1, 1, ROPE_DIM), LatentCache, ValueError, r"latents must be \(B, T, features\), got shape \(1, 6\)"),
    "rope_keys of another dtype": (torch.zeros(1, 1, LATENT_DIM), torch.zeros(1, 1, ROPE_DIM, dtype=torch.float64), LatentCache, TypeError, r"latents and rope_keys disagree on dtype"),
    "rope_keys of another length": (torch.zeros(1, 2, LATENT_DIM), torch.zeros(1, 1, ROPE_DIM), LatentCache, ValueError, r"latents and rope_keys disagree on \(B, T\): latents \(1, 2, 6\) vs rope_keys \(1, 1, 2\)"),
    "another batch than the cache's": (torch.zeros(1, 1, LATENT_DIM, dtype=torch.float64), torch.zeros(1, 1, ROPE_DIM, dtype=torch.float64), filled_cache, ValueError, r"latents \(1, 1, 6\) disagrees with the cached latents \(2, 3, 6\)"),
    "another latent size than the cache's": (torch.zeros(2, 1, 4, dtype=torch.float64), torch.zeros(2, 1, ROPE_DIM, dtype=torch.float64), filled_cache, ValueError, r"latents \(2, 1, 4\) disagrees with the cached latents"),
    "another dtype than the cache's": (torch.zeros(2, 1, LATENT_DIM), torch.zeros(2, 1, ROPE_DIM), filled_cache, TypeError, r"cached latents and latents disagree on dtype"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("latents", "rope_keys", "cache", "error", "match"), UPDATE.values(), ids=UPDATE.keys()
)
def test_the_latent_cache_refuses_malformed_updates_by_name(
    latents, rope_keys, cache, error, match
):
    with pytest.raises(error, match=match):
        cache().update(latents, rope_keys)
