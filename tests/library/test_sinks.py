"""qkv.attention's `sinks`: a plain softmax over each row's scores and one more logit, whose share is dropped.

The expected results are written here from the definition: the scores of each row, masked, with the head's
sink appended as one more column, a plain `torch.softmax`, the last column dropped, times the values; in
float64 (`EXACT`), for both backends that take sinks (reference and torch), many masks, GQA and L != S.
"""

from __future__ import annotations

import math

import pytest
import torch

import qkv

EXACT = {"rtol": 1e-12, "atol": 1e-12}


def tensors(batch=2, heads=4, heads_kv=4, seqlen_q=5, seqlen_k=7, dim=8):
    generator = torch.Generator().manual_seed(seqlen_q * 100 + seqlen_k)
    query = torch.randn(batch, heads, seqlen_q, dim, generator=generator, dtype=torch.float64)
    key, value = (
        torch.randn(batch, heads_kv, seqlen_k, dim, generator=generator, dtype=torch.float64)
        for _ in range(2)
    )
    sinks = torch.tensor([-1.0, 0.0, 2.0, 5.0], dtype=torch.float64)[:heads]
    return query, key, value, sinks


def keep_and_bias(name, seqlen_q, seqlen_k):
    """The call's mask options, and what they keep (bool, broadcast to (B, H, L, S)) and add, written out."""
    ones = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool)
    shift = seqlen_k - seqlen_q  # bottom-right: query i sees keys j <= i + S - L
    bias = torch.zeros(seqlen_q, seqlen_k, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    if name == "none":
        return {}, ones, bias
    if name == "causal":
        return {"is_causal": True}, ones.tril(), bias
    if name == "bottom-right":
        return {"is_causal": "bottom_right"}, ones.tril(shift), bias
    if name == "window":
        keep = ones.tril(shift) & ones.triu(shift - 2)  # the 3 most recent keys
        return {"is_causal": "bottom_right", "window": 3}, keep, bias
    if name == "key-lengths":
        keep = (torch.arange(seqlen_k) < torch.tensor([7, 2])[:, None])[
            :, None, None, :
        ]  # (B, 1, 1, S)
        return {"key_lengths": torch.tensor([7, 2])}, keep, bias
    if name == "bool-mask":
        keep = torch.rand(seqlen_q, seqlen_k, generator=generator) < 0.6
        return {"attn_mask": keep}, keep, bias
    bias = torch.randn(seqlen_q, seqlen_k, dtype=torch.float64, generator=generator)
    return {"attn_mask": bias}, ones, bias


def concatenated(query, key, value, keep, sinks, scale=None, groups=1, bias=0.0):
    """`softmax([scores, sink])[..., :-1] @ value`, the sink appended to every row; keep: bool `(..., L, S)`."""
    key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale + bias  # (..., H, L, S)
    scores = scores.masked_fill(~keep, -math.inf)
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (..., H, L, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return weights @ value


MASKS = ["none", "causal", "bottom-right", "window", "key-lengths", "bool-mask", "float-mask"]


@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize(("seqlen_q", "seqlen_k"), [(5, 7), (7, 5), (1, 1), (4, 4)], ids=str)
def test_sinks_are_a_softmax_over_the_concatenated_logit(backend, mask, seqlen_q, seqlen_k):
    query, key, value, sinks = tensors(seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    options, keep, bias = keep_and_bias(mask, seqlen_q, seqlen_k)
    out = qkv.attention(query, key, value, backend=backend, sinks=sinks, **options)
    torch.testing.assert_close(
        out, concatenated(query, key, value, keep, sinks, bias=bias), **EXACT
    )


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_sinks_with_grouped_query_heads_and_a_scale(backend):
    query, key, value, sinks = tensors(heads=4, heads_kv=2)
    keep = torch.ones(5, 7, dtype=torch.bool).tril(2)  # bottom-right for L = 5, S = 7
    out = qkv.attention(
        query, key, value, is_causal="bottom_right", scale=0.3, enable_gqa=True, sinks=sinks,
        backend=backend,
    )  # fmt: skip
    torch.testing.assert_close(
        out, concatenated(query, key, value, keep, sinks, scale=0.3, groups=2), **EXACT
    )


def test_the_weights_sum_to_one_less_the_sinks_share():
    # Each row's weights sum to 1 - e^sink / (e^sink + sum_j e^s_j): with values of ones, the output is
    # that sum; a fully masked row gives everything to the sink.
    query, key, _, sinks = tensors(batch=1, seqlen_q=3, seqlen_k=3)
    ones = torch.ones(1, 4, 3, 1, dtype=torch.float64)
    out = qkv.attention(query, key, ones, key_lengths=torch.tensor([2]), sinks=sinks)[..., 0]
    scores = query @ key.transpose(-2, -1) / math.sqrt(8)  # (1, H, L, S)
    kept = scores[..., :2].exp().sum(-1)  # keys 0 and 1
    expected = kept / (kept + sinks[:, None].exp())
    torch.testing.assert_close(out, expected, **EXACT)
    nothing = qkv.attention(query, key, ones, key_lengths=torch.tensor([0]), sinks=sinks)
    assert torch.equal(nothing, torch.zeros_like(nothing))


@pytest.mark.parametrize("mask", ["none", "causal", "bool-mask", "float-mask"])  # torch's masks
def test_the_weights_with_sinks_are_the_concatenated_softmax_less_the_sinks_column(mask):
    query, key, value, sinks = tensors()
    options, keep, bias = keep_and_bias(mask, 5, 7)
    weights = qkv.attention_weights(query, key, sinks=sinks, **options)
    eye = torch.eye(7, dtype=torch.float64).expand(2, 4, 7, 7)  # value row j picks key j's weight
    torch.testing.assert_close(
        weights, concatenated(query, key, eye, keep, sinks, bias=bias), **EXACT
    )
    torch.testing.assert_close(
        weights @ value, qkv.attention(query, key, value, sinks=sinks, **options)
    )


def test_a_sink_of_minus_infinity_is_plain_attention():
    query, key, value, _ = tensors()
    none = torch.full((4,), -math.inf, dtype=torch.float64)
    for backend in ("reference", "torch"):
        torch.testing.assert_close(
            qkv.attention(query, key, value, is_causal=True, sinks=none, backend=backend),
            qkv.attention(query, key, value, is_causal=True, backend=backend),
            **EXACT,
        )


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_gradients_reach_the_sinks_and_the_inputs(backend):
    # float64 finite differences against autograd, through the sinks, the queries and the values
    query, key, value, sinks = tensors(batch=1, heads=2, heads_kv=2, seqlen_q=3, seqlen_k=4, dim=2)
    inputs = tuple(x.clone().requires_grad_() for x in (query, value, sinks))

    def attend(query, value, sinks):
        return qkv.attention(
            query, key, value, is_causal="bottom_right", sinks=sinks, backend=backend
        )

    assert torch.autograd.gradcheck(attend, inputs)


def test_half_precision_sinks_agree_with_float64():
    query, key, value, sinks = tensors()
    half = qkv.attention(query.half(), key.half(), value.half(), sinks=sinks.half(), is_causal=True)
    assert half.dtype == torch.float16
    torch.testing.assert_close(
        half.double(),
        qkv.attention(query, key, value, sinks=sinks, is_causal=True),
        rtol=0,
        atol=5e-3,
    )


def test_bad_sinks_are_refused_by_name():
    query, key, value, sinks = tensors()
    with pytest.raises(
        ValueError, match=r"sinks must be \(H,\), one logit per query head .* got sinks \(3,\)"
    ):
        qkv.attention(query, key, value, sinks=sinks[:3])
    with pytest.raises(
        TypeError, match=r"sinks must be a floating-point tensor, got dtype torch.int64"
    ):
        qkv.attention(query, key, value, sinks=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"got list"):
        qkv.attention(query, key, value, sinks=[0.0] * 4)
    with pytest.raises(ValueError, match=r"query \(5, 8\)"):
        qkv.attention(query[0, 0], key[0, 0], value[0, 0], sinks=sinks)
    with pytest.raises(ValueError, match=r"sinks must be \(H,\).* got sinks \(3,\)"):
        qkv.attention_weights(query, key, sinks=sinks[:3])
    with pytest.raises(ValueError, match=r"the kernels take no sinks"):
        qkv.attention(query, key, value, sinks=sinks, backend="triton")
