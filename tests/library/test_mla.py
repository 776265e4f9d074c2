"""qkv.MultiHeadLatentAttention: its formula, its cache, and the absorbed form, all in float64."""

from __future__ import annotations

import math

import pytest
import torch

import qkv
from qkv.mla import LatentCache, MultiHeadLatentAttention

EXACT = {"rtol": 1e-10, "atol": 1e-10}


def module(heads=4, head_dim=8, rope_dim=4, latent_dim=12, width=16):
    torch.manual_seed(0)
    return MultiHeadLatentAttention(width, heads, head_dim, rope_dim, latent_dim).double()


def reference(mla, x):
    """The formula of the module docstring, head by head, every token attending itself and earlier ones."""
    batch, length, _ = x.shape
    heads, head_dim, rope_dim = mla.heads, mla.head_dim, mla.rope_dim
    latents = x @ mla.down.weight.T  # (B, T, C)
    rope_keys = qkv.apply_rope(x @ mla.rope_key.weight.T)  # (B, T, Dr)
    queries = (x @ mla.query.weight.T).view(batch, length, heads, head_dim + rope_dim)
    outputs = []
    for h in range(heads):
        w_uk = mla.up_key.weight[h * head_dim : (h + 1) * head_dim]  # (D, C)
        w_uv = mla.up_value.weight[h * head_dim : (h + 1) * head_dim]
        content = queries[:, :, h, :head_dim] @ (latents @ w_uk.T).transpose(1, 2)  # (B, T, T)
        rotated = qkv.apply_rope(queries[:, :, h, head_dim:]) @ rope_keys.transpose(1, 2)
        scores = (content + rotated) / math.sqrt(head_dim + rope_dim)
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, -math.inf).softmax(-1)
        outputs.append(weights @ (latents @ w_uv.T))  # (B, T, D)
    return torch.cat(outputs, dim=-1) @ mla.out.weight.T  # (B, T, E)


@pytest.mark.parametrize("absorbed", [False, True], ids=["plain", "absorbed"])
def test_mla_is_its_formula(absorbed):
    mla = module()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    torch.testing.assert_close(mla(x, absorbed=absorbed), reference(mla, x), **EXACT)


@pytest.mark.parametrize(
    "sizes", [(4, 8, 4, 12), (1, 16, 2, 4), (3, 4, 6, 40)], ids=["small-latent", "one-head", "wide"]
)
def test_absorbed_weights_give_the_plain_result(sizes):
    mla = module(*sizes)
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    torch.testing.assert_close(mla(x, absorbed=True), mla(x), **EXACT)


@pytest.mark.parametrize("absorbed", [False, True], ids=["plain", "absorbed"])
def test_decoding_with_the_latent_cache_equals_one_forward_pass(absorbed):
    mla = module()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    cache = LatentCache()
    steps = [mla(x[:, :6], cache, absorbed=absorbed)]  # prefill 6, then decode 1, 2, 1
    for start, stop in ((6, 7), (7, 9), (9, 10)):
        steps.append(mla(x[:, start:stop], cache, absorbed=absorbed))
    torch.testing.assert_close(torch.cat(steps, dim=1), mla(x), **EXACT)
    assert len(cache) == 10


def test_the_cache_holds_latent_plus_rope_numbers_per_token():
    mla = module(heads=4, head_dim=8, rope_dim=4, latent_dim=12)
    cache = LatentCache()
    mla(torch.randn(1, 5, 16, dtype=torch.float64), cache)
    per_token = cache.latents.size(-1) + cache.rope_keys.size(-1)
    assert per_token == mla.cached_numbers_per_token == 16  # against 2 * 4 * 8 = 64 for MHA


def test_bad_sizes_and_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match=r"rope_dim must be even"):
        MultiHeadLatentAttention(16, 4, 8, 3, 12)
    with pytest.raises(ValueError, match=r"latent_dim"):
        MultiHeadLatentAttention(16, 4, 8, 4, 0)
    with pytest.raises(ValueError, match=r"x must be \(B, T, E\) with E = 16, got \(2, 5, 8\)"):
        module()(torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x"):
        module()("tokens")


def test_mla_is_exported():
    assert qkv.MultiHeadLatentAttention is MultiHeadLatentAttention
