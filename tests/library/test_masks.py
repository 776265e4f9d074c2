"""The mask builders and the converters between the three conventions."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right

import qkv


@given(st.integers(0, 9), st.integers(0, 9))
def test_causal_mask_is_torchs_is_causal(q_len, k_len):
    mask = qkv.causal_mask(q_len, k_len)
    assert mask.dtype == torch.bool
    assert mask.shape == (q_len, k_len)
    for i in range(q_len):
        for j in range(k_len):
            assert mask[i, j] == (j <= i)


def test_causal_mask_drives_attention_like_is_causal():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=qkv.causal_mask(3, 5)),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


@given(st.integers(1, 9), st.integers(1, 9))
def test_bottom_right_causal_mask_is_torchs_causal_lower_right(q_len, k_len):
    q, k, v = torch.randn(1, q_len, 4), torch.randn(1, k_len, 4), torch.randn(1, k_len, 3)
    mask = qkv.causal_mask(q_len, k_len, alignment="bottom_right")
    for i in range(q_len):
        assert mask[i].tolist() == [j <= i + k_len - q_len for j in range(k_len)]
    if q_len <= k_len:  # torch's lower-right bias leaves no row empty only then
        torch.testing.assert_close(
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q_len, k_len)),
        )


def test_bottom_right_causal_mask_gives_the_last_query_every_key():
    assert qkv.causal_mask(1, 5, alignment="bottom_right").tolist() == [[True] * 5]
    assert qkv.causal_mask(1, 5).tolist() == [[True] + [False] * 4]  # top-left: key 0 only


@pytest.mark.parametrize(
    "builder", [qkv.causal_mask, functools.partial(qkv.sliding_window_mask, window=2)]
)
def test_unknown_alignment_is_named(builder):
    with pytest.raises(ValueError, match="alignment must be one of"):
        builder(3, alignment="top-right")


def test_causal_mask_defaults_to_square():
    assert qkv.causal_mask(4).shape == (4, 4)


@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_sliding_window_sees_itself_and_the_window_before(q_len, k_len, window):
    mask = qkv.sliding_window_mask(q_len, window, k_len)
    assert mask.shape == (q_len, k_len)
    for i in range(q_len):
        assert mask[i].tolist() == [i - window < j <= i for j in range(k_len)]


@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_bottom_right_sliding_window_is_shifted_by_s_minus_l(q_len, k_len, window):
    mask = qkv.sliding_window_mask(q_len, window, k_len, alignment="bottom_right")
    shift = k_len - q_len
    for i in range(q_len):
        assert mask[i].tolist() == [i + shift - window < j <= i + shift for j in range(k_len)]


def test_sliding_window_as_wide_as_the_sequence_is_causal():
    assert torch.equal(qkv.sliding_window_mask(6, 6), qkv.causal_mask(6))


def test_padding_mask_marks_real_tokens():
    mask = qkv.padding_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.shape == (3, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]


def test_padding_mask_defaults_to_the_longest():
    assert qkv.padding_mask(torch.tensor([2, 5])).shape == (2, 1, 1, 5)


def test_padding_mask_hides_padded_keys_from_attention():
    lengths = torch.tensor([2, 4])
    q, k, v = torch.randn(2, 3, 3, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    out = qkv.scaled_dot_product_attention(q, k, v, attn_mask=qkv.padding_mask(lengths))
    truncated = qkv.scaled_dot_product_attention(q[:1], k[:1, :, :2], v[:1, :, :2])
    torch.testing.assert_close(out[:1], truncated)


@given(st.lists(st.booleans(), min_size=1, max_size=12).map(lambda b: torch.tensor(b).view(1, -1)))
def test_key_padding_round_trip(ignore):
    keep = qkv.key_padding_to_keep(ignore)
    assert keep.shape == (1, 1, 1, ignore.size(1))
    assert torch.equal(keep[0, 0, 0], ~ignore[0])
    assert torch.equal(qkv.keep_to_key_padding(keep), ignore)
    assert torch.equal(qkv.keep_to_key_padding(keep[:, 0, 0]), ignore)


def test_key_padding_mask_means_the_same_as_its_keep_mask_in_torch():
    ignore = torch.tensor([[False, False, True], [False, True, True]])
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(2, 3, 4)
    _, weights = mha(x, x, x, key_padding_mask=ignore)
    keep = qkv.key_padding_to_keep(ignore)[:, 0]  # (B, 1, S), broadcast over queries
    assert torch.equal(weights > 0, keep.expand_as(weights))


def test_keep_and_additive_round_trip():
    keep = torch.rand(3, 4, 5) < 0.5
    additive = qkv.keep_to_additive(keep, torch.float16)
    assert additive.dtype == torch.float16
    assert torch.equal(additive == 0, keep)
    assert torch.isneginf(additive[~keep]).all()
    assert torch.equal(qkv.additive_to_keep(additive), keep)


def test_additive_and_bool_masks_give_the_same_attention():
    keep = torch.rand(4, 6) < 0.7
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep),
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=qkv.keep_to_additive(keep)),
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: qkv.causal_mask(-1), ValueError, r"q_len must be non-negative, got -1"),
        (lambda: qkv.causal_mask(2.5), TypeError, r"q_len must be an int"),
        (lambda: qkv.sliding_window_mask(4, 0), ValueError, r"window must be positive, got 0"),
        (
            lambda: qkv.padding_mask(torch.tensor([1.0, 2.0])),
            TypeError,
            r"lengths must be an integer tensor",
        ),
        (
            lambda: qkv.padding_mask(torch.tensor([[1, 2]])),
            ValueError,
            r"lengths must be 1-D \(B,\), got shape \(1, 2\)",
        ),
        (lambda: qkv.padding_mask(torch.tensor([1, -2])), ValueError, r"non-negative"),
        (
            lambda: qkv.padding_mask(torch.tensor([1, 5]), max_len=3),
            ValueError,
            r"max_len 3 is shorter than the longest sequence \(5\)",
        ),
        (
            lambda: qkv.key_padding_to_keep(torch.zeros(2, 3)),
            TypeError,
            r"key_padding_mask must be a bool tensor",
        ),
        (
            lambda: qkv.key_padding_to_keep(torch.zeros(2, 1, 3, dtype=torch.bool)),
            ValueError,
            r"2-D, got shape \(2, 1, 3\)",
        ),
        (
            lambda: qkv.keep_to_key_padding(torch.zeros(2, 4, 1, 3, dtype=torch.bool)),
            ValueError,
            r"got \(2, 4, 1, 3\)",
        ),
        (lambda: qkv.keep_to_additive(torch.zeros(2, 3)), TypeError, r"mask must be a bool tensor"),
        (
            lambda: qkv.keep_to_additive(torch.ones(2, 3, dtype=torch.bool), torch.bool),
            TypeError,
            r"dtype must be a floating-point torch.dtype, got torch.bool",
        ),
        (
            lambda: qkv.padding_mask(torch.tensor([1, 2]), max_len=3.0),
            TypeError,
            r"max_len must be an int, got float",
        ),
        (
            lambda: qkv.additive_to_keep(torch.zeros(2, 3, dtype=torch.bool)),
            TypeError,
            r"floating-point",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_bad_input_is_rejected_with_a_clear_message(call, error, message):
    with pytest.raises(error, match=message):
        call()
