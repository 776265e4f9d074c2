"""qkv.flex against torch.nn.attention.flex_attention (eager, on the CPU) and against its own definition.

torch's flex_attention warns when it runs without torch.compile (it then materialises the scores, as ours
does): that warning is expected here. Its create_block_mask classifies tiles as ours does, so the counts of
partial and full tiles are compared exactly, and the outputs to float32 round-off.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

import qkv
from qkv.flex import EMPTY, FULL, PARTIAL, BlockMask

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
FLOAT32 = {"rtol": 1e-5, "atol": 1e-5}

DOCUMENTS = torch.tensor([0] * 30 + [1] * 45 + [2] * 25)  # three packed sequences, 100 tokens
LENGTHS = torch.tensor([100, 61])  # keys kept per batch element
SLOPES = qkv.alibi_slopes(4)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window_of_20(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 20)


def prefix_lm(b, h, q_idx, kv_idx):  # the first 25 tokens see each other; the rest is causal
    return (kv_idx < 25) | (q_idx >= kv_idx)


def documents(b, h, q_idx, kv_idx):  # causal within each packed sequence
    return (DOCUMENTS[q_idx] == DOCUMENTS[kv_idx]) & (q_idx >= kv_idx)


def padded_keys(b, h, q_idx, kv_idx):  # depends on the batch element
    return kv_idx < LENGTHS[b]


def odd_heads_causal(b, h, q_idx, kv_idx):  # depends on the head
    return (h % 2 == 0) | (q_idx >= kv_idx)


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx).abs()


def softcap(score, b, h, q_idx, kv_idx):
    return 5.0 * torch.tanh(score / 5.0)


MASKS = [
    pytest.param(causal, None, None, id="causal"),
    pytest.param(window_of_20, None, None, id="window"),
    pytest.param(prefix_lm, None, None, id="prefix-lm"),
    pytest.param(documents, None, None, id="documents"),
    pytest.param(padded_keys, 2, None, id="per-batch"),
    pytest.param(odd_heads_causal, None, 4, id="per-head"),
]


def qkv_tensors(batch=2, heads=4, heads_kv=None, seqlen_q=100, seqlen_k=100, dim=16):
    generator = torch.Generator().manual_seed(seqlen_q * 1000 + seqlen_k)
    q = torch.randn(batch, heads, seqlen_q, dim, generator=generator)
    heads_kv = heads_kv or heads
    k, v = (torch.randn(batch, heads_kv, seqlen_k, dim, generator=generator) for _ in range(2))
    return q, k, v


CASES = [
    *(pytest.param(*mask.values, None, id=f"{mask.id}-plain") for mask in MASKS),
    pytest.param(documents, None, None, alibi, id="documents-alibi"),
    pytest.param(odd_heads_causal, None, 4, alibi, id="per-head-alibi"),
    pytest.param(window_of_20, None, None, softcap, id="window-softcap"),
    pytest.param(padded_keys, 2, None, softcap, id="per-batch-softcap"),
]


@pytest.mark.parametrize(("mask_fn", "batch", "heads", "score_mod"), CASES)
def test_flex_attention_equals_torch(mask_fn, batch, heads, score_mod):
    q, k, v = qkv_tensors()
    ours = qkv.block_mask(mask_fn, batch, heads, 100, 100, block_size=16)
    theirs = torch_flex.create_block_mask(
        mask_fn, batch, heads, 100, 100, device="cpu", BLOCK_SIZE=16
    )
    partial, full = ours.counts()
    assert torch.equal(partial, theirs.kv_num_blocks.long())
    assert torch.equal(full, theirs.full_kv_num_blocks.long())
    out = qkv.flex_attention(q, k, v, score_mod=score_mod, block_mask=ours)
    expected = torch_flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=theirs)
    torch.testing.assert_close(out, expected, **FLOAT32)


@pytest.mark.parametrize(
    ("seqlen_q", "seqlen_k", "block_size"),
    [(1, 1, 128), (1, 77, 16), (70, 150, 32), (150, 70, 32), (33, 33, 128)],
)
def test_lengths_that_differ_and_partial_tiles_equal_torch(seqlen_q, seqlen_k, block_size):
    offset = seqlen_k - seqlen_q

    def bottom_right(
        b, h, q_idx, kv_idx
    ):  # the last query sees every key; with L > S, rows see none
        return q_idx + offset >= kv_idx

    q, k, v = qkv_tensors(seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    ours = qkv.block_mask(bottom_right, None, None, seqlen_q, seqlen_k, block_size=block_size)
    theirs = torch_flex.create_block_mask(
        bottom_right, None, None, seqlen_q, seqlen_k, device="cpu", BLOCK_SIZE=block_size
    )
    assert torch.equal(ours.counts()[0], theirs.kv_num_blocks.long())
    assert torch.equal(ours.counts()[1], theirs.full_kv_num_blocks.long())
    out = qkv.flex_attention(q, k, v, block_mask=ours, scale=0.3)
    expected = torch_flex.flex_attention(q, k, v, block_mask=theirs, scale=0.3)
    torch.testing.assert_close(out, expected, **FLOAT32)
    if seqlen_q > seqlen_k:  # the first L - S queries keep no key: zeros, not NaN
        assert torch.equal(
            out[:, :, : seqlen_q - seqlen_k],
            torch.zeros_like(out[:, :, :1]).expand_as(out[:, :, : seqlen_q - seqlen_k]),
        )


def test_grouped_query_heads_equal_torch():
    q, k, v = qkv_tensors(heads=4, heads_kv=2)
    ours = qkv.block_mask(documents, None, None, 100, 100, block_size=32)
    theirs = torch_flex.create_block_mask(
        documents, None, None, 100, 100, device="cpu", BLOCK_SIZE=32
    )
    out = qkv.flex_attention(q, k, v, score_mod=alibi, block_mask=ours, enable_gqa=True)
    expected = torch_flex.flex_attention(
        q, k, v, score_mod=alibi, block_mask=theirs, enable_gqa=True
    )
    torch.testing.assert_close(out, expected, **FLOAT32)


def test_flex_attention_is_the_formula():
    # softmax(score_mod(q k^T / sqrt(D)) with -inf where the mask drops) v, written out per pair.
    q, k, v = (x.double() for x in qkv_tensors(batch=1, heads=2, seqlen_q=9, seqlen_k=12, dim=4))
    out = qkv.flex_attention(
        q,
        k,
        v,
        score_mod=softcap,
        block_mask=qkv.block_mask(window_of_20, 1, 2, 9, 12, block_size=4),
    )
    for h in range(2):
        for i in range(9):
            scores = [
                5 * math.tanh(float(q[0, h, i] @ k[0, h, j]) / 2 / 5)
                if i - 20 < j <= i
                else -math.inf
                for j in range(12)
            ]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            expected = sum(w * v[0, h, j] for j, w in enumerate(weights)) / sum(weights)
            torch.testing.assert_close(out[0, h, i], expected, rtol=1e-12, atol=1e-12)


def test_tiles_are_classified_as_the_mask_says():
    # 8 x 8 causal in tiles of 4: the diagonal tiles partial, the one below full, the one above empty.
    mask = qkv.block_mask(causal, None, None, 8, 8, block_size=4)
    assert mask.kinds.tolist() == [[[[PARTIAL, EMPTY], [FULL, PARTIAL]]]]
    # 6 x 6 with tiles of 4: the tile past the last key is never full, even where all its pairs are kept.
    everything = qkv.block_mask(
        lambda b, h, q_idx, kv_idx: q_idx >= 0, None, None, 6, 6, block_size=4
    )
    assert everything.kinds.tolist() == [[[[FULL, PARTIAL], [PARTIAL, PARTIAL]]]]


def test_flex_attention_reads_the_tiles_not_only_the_function():
    # Tiles recorded as full are kept without asking the function, as a kernel would keep them.
    q, k, v = qkv_tensors(batch=1, heads=1, seqlen_q=8, seqlen_k=8)
    all_full = BlockMask(causal, torch.full((1, 1, 2, 2), FULL, dtype=torch.int8), 8, 8, 4)
    torch.testing.assert_close(
        qkv.flex_attention(q, k, v, block_mask=all_full), qkv.flex_attention(q, k, v)
    )
    all_empty = BlockMask(causal, torch.full((1, 1, 2, 2), EMPTY, dtype=torch.int8), 8, 8, 4)
    assert not qkv.flex_attention(q, k, v, block_mask=all_empty).any()


def test_no_block_mask_is_plain_attention():
    q, k, v = qkv_tensors(seqlen_q=20, seqlen_k=30)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(qkv.flex_attention(q, k, v), expected, **FLOAT32)


def test_half_precision_computes_in_float32_and_returns_the_input_dtype():
    q, k, v = (x.half() for x in qkv_tensors(seqlen_q=20, seqlen_k=30))
    out = qkv.flex_attention(q, k, v, block_mask=qkv.block_mask(causal, None, None, 20, 30))
    assert out.dtype == torch.float16
    expected = qkv.flex_attention(
        q.float(), k.float(), v.float(), block_mask=qkv.block_mask(causal, None, None, 20, 30)
    )
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=1e-3)


@pytest.mark.parametrize(
    ("mask_fn", "error", "message"),
    [
        (
            lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx).int(),
            TypeError,
            r"bool tensor.*got dtype torch.int32",
        ),
        (lambda b, h, q_idx, kv_idx: True, TypeError, r"bool tensor.*got bool"),
        (
            lambda b, h, q_idx, kv_idx: torch.ones(3, 7, dtype=torch.bool),
            ValueError,
            r"returned \(3, 7\)",
        ),
        ("causal", TypeError, r"mask_fn must be a function"),
    ],
)
def test_bad_mask_functions_are_refused(mask_fn, error, message):
    with pytest.raises(error, match=message):
        qkv.block_mask(mask_fn, None, None, 5, 6)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [((0, None, 5, 5), r"B"), ((None, None, 0, 5), r"L"), ((None, 2, 5, 5.0), r"S")],
)
def test_bad_sizes_are_refused_by_name(sizes, message):
    with pytest.raises((TypeError, ValueError), match=message):
        qkv.block_mask(causal, *sizes)


def test_bad_calls_of_flex_attention_name_the_argument():
    q, k, v = qkv_tensors(heads=4, heads_kv=2, seqlen_q=10, seqlen_k=12)
    with pytest.raises(ValueError, match=r"pass enable_gqa=True"):
        qkv.flex_attention(q, k, v)
    q, k, v = qkv_tensors(seqlen_q=10, seqlen_k=12)
    with pytest.raises(
        ValueError, match=r"score_mod must return scores of the shape.*\(2, 4, 10, 12\)"
    ):
        qkv.flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score.sum(-1))
    with pytest.raises(ValueError, match=r"block_mask was made for .* \(1, 1, 12, 10\)"):
        qkv.flex_attention(q, k, v, block_mask=qkv.block_mask(causal, None, None, 12, 10))
    with pytest.raises(ValueError, match=r"block_mask was made for \(B, H, L, S\) = \(3, 1"):
        qkv.flex_attention(q, k, v, block_mask=qkv.block_mask(causal, 3, None, 10, 12))
    with pytest.raises(TypeError, match=r"block_mask must be a qkv.flex.BlockMask, got BlockMask"):
        qkv.flex_attention(
            q,
            k,
            v,
            block_mask=torch_flex.create_block_mask(causal, None, None, 10, 12, device="cpu"),
        )
    with pytest.raises(ValueError, match=r"q must be 4-D"):
        qkv.flex_attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"disagree on the head size D"):
        qkv.flex_attention(q, k[..., :8], v)
