"""The mask builders, the converters between the three conventions, and the one parsed mask value."""

import dataclasses
import functools
import itertools
import math
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right

import qkv
from qkv import dispatch, masks
from qkv._checks import check_attention_inputs
from qkv.kernels import contract, flash
from qkv.masks import Mask, parse_mask
from tests.library.reference import reference_mask


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
            lambda: qkv.causal_mask(3, device="gpu"),
            ValueError,
            r"device must name a device torch knows, got 'gpu'",
        ),
        (
            lambda: qkv.sliding_window_mask(3, 2, device=[0]),
            TypeError,
            r"device must be a torch\.device, a str such as 'cuda:0' or an int, got list",
        ),
        (
            lambda: qkv.additive_to_keep(torch.tensor([[0.0, -math.inf], [math.nan, 1.0]])),
            ValueError,
            r"mask must hold finite biases or -inf, got nan at \(1, 0\) of mask \(2, 2\)",
        ),
        (
            lambda: qkv.additive_to_keep(torch.tensor([0.0, math.inf])),
            ValueError,
            r"mask must hold finite biases or -inf, got inf at \(1,\)",
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


def cumulative(*lengths):
    """int32 `(N + 1,)` cumulative lengths: 0, then the running sums of `lengths`."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def grid(*rows):
    """A bool mask from rows of 0 and 1 written as strings, "1 0 1"."""
    return torch.tensor([[int(x) for x in row.split()] for row in rows], dtype=torch.bool)


@pytest.mark.parametrize(
    ("causal", "drawn"),
    [
        (False, grid("1 1 1 0 0", "1 1 1 0 0", "0 0 0 1 1")),
        ("top_left", grid("1 0 0 0 0", "1 1 0 0 0", "0 0 0 1 0")),
        ("bottom_right", grid("1 1 0 0 0", "1 1 1 0 0", "0 0 0 1 1")),
    ],
    ids=["full", "top-left", "bottom-right"],
)
def test_document_mask_is_the_grid_its_docstring_draws(causal, drawn):
    # Two sequences of 2 and 1 queries, 3 and 2 keys.
    mask = qkv.document_mask(cumulative(2, 1), cumulative(3, 2), causal=causal)
    assert torch.equal(mask, drawn)


@given(
    lengths=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=4),
    causal=st.sampled_from([False, True, "bottom_right"]),
    window=st.one_of(st.none(), st.integers(1, 7)),
)
def test_document_mask_keeps_each_query_to_its_own_sequence(lengths, causal, window):
    window = window if causal else None
    seqlens_q, seqlens_k = zip(*lengths, strict=True)
    mask = qkv.document_mask(
        cumulative(*seqlens_q), cumulative(*seqlens_k), causal=causal, window=window
    )
    # (sequence, position) of every query and key, and each sequence's causal offset
    queries = [(b, i) for b, n in enumerate(seqlens_q) for i in range(n)]
    keys = [(b, j) for b, n in enumerate(seqlens_k) for j in range(n)]
    offsets = [s - q if causal == "bottom_right" else 0 for q, s in lengths]
    assert mask.shape == (len(queries), len(keys))
    for row, (b, i) in enumerate(queries):
        for col, (c, j) in enumerate(keys):
            last = i + offsets[b]  # the last key query i may see
            kept = b == c and (not causal or j <= last) and (window is None or j > last - window)
            assert mask[row, col] == kept, (row, col)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (
            (cumulative(2, 3).long(), cumulative(2, 3)),
            {},
            TypeError,
            r"cu_seqlens_q must be int32 cumulative lengths, got dtype torch\.int64",
        ),
        (
            ([0, 2, 5], cumulative(2, 3)),
            {},
            TypeError,
            r"cu_seqlens_q must be a torch\.Tensor, got list",
        ),
        (
            (cumulative(2, 3), cumulative(2, 3)[None]),
            {},
            ValueError,
            r"cu_seqlens_k must be 1-D \(N \+ 1,\), got shape \(1, 3\)",
        ),
        (
            (cumulative(2, 3) + 1, cumulative(2, 3)),
            {},
            ValueError,
            r"cu_seqlens_q must start at 0, got \[1, 3, 6\]",
        ),
        (
            (torch.tensor([0, 4, 3], dtype=torch.int32), cumulative(2, 3)),
            {},
            ValueError,
            r"cu_seqlens_q must not decrease, got cu_seqlens_q\[1\] = 4 > cu_seqlens_q\[2\] = 3",
        ),
        (
            (cumulative(2, 3), cumulative(2, 3, 1)),
            {},
            ValueError,
            r"disagree on the number of sequences N: cu_seqlens_q \(3,\) vs cu_seqlens_k \(4,\)",
        ),
        (
            (cumulative(2, 3), cumulative(2, 3).to("meta")),
            {},
            ValueError,
            r"cu_seqlens_k is on meta but cu_seqlens_q is on cpu",
        ),
        (
            (cumulative(2, 3), cumulative(2, 3)),
            {"window": 2},
            ValueError,
            r"window=2 needs a causal alignment: pass causal=True",
        ),
        (
            (cumulative(2, 3), cumulative(2, 3)),
            {"causal": "top_right"},
            ValueError,
            r"causal must be False, True or one of",
        ),
    ],
    ids=[
        "int64",
        "list",
        "2-d",
        "not-from-0",
        "decreasing",
        "different-n",
        "devices",
        "window-without-causal",
        "alignment",
    ],
)
def test_document_mask_names_what_is_wrong(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.document_mask(*args, **kwargs)


def test_a_long_list_of_lengths_is_shortened_in_the_message():
    lengths = torch.arange(0, 40, dtype=torch.int32)
    lengths[30] = 0
    with pytest.raises(ValueError, match=r"\[0, 1, 2, 3, 4, 5, \.\.\., 34, 35, 36, 37, 38, 39\]$"):
        qkv.document_mask(lengths, lengths)


# The one parsed mask value: qkv.masks.Mask, built by qkv.masks.parse_mask.

Q = torch.randn(2, 3, 4, 16)  # (B, H, L, E)
SCORES = (2, 3, 4, 6)  # (B, H, L, S)


def parse(**kwargs):
    """`parse_mask` for scores `(2, 3, 4, 6)`, keys `(2, 6, 16)` as a multi-head module takes them."""
    return parse_mask(Q, torch.randn(2, 6, 16), SCORES, **kwargs)


@pytest.mark.parametrize(
    ("is_causal", "alignment"),
    [(False, None), (True, "top_left"), ("top_left", "top_left"), ("bottom_right", "bottom_right")],
)
def test_is_causal_becomes_an_alignment(is_causal, alignment):
    mask = parse(is_causal=is_causal)
    assert mask.alignment == alignment
    assert (mask.window, mask.key_lengths, mask.dense) == (None, None, None)


def test_the_parts_are_kept_as_given():
    lengths, keep = torch.tensor([6, 2]), torch.rand(4, 6) < 0.5
    mask = parse(attn_mask=keep, is_causal="bottom_right", window=3, key_lengths=lengths)
    assert (mask.alignment, mask.window) == ("bottom_right", 3)
    assert mask.key_lengths is lengths
    assert mask.dense is keep


def test_a_mask_cannot_change():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Mask().window = 3


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"alignment": "top_left"},
        {"alignment": "bottom_right", "window": 2},
        {"key_lengths": [5, 9]},
        {"alignment": "top_left", "window": 3, "key_lengths": [0, 4]},
    ],
    ids=["none", "causal", "window-bottom-right", "lengths", "all"],
)
@pytest.mark.parametrize(("seqlen_q", "seqlen_k"), [(4, 6), (6, 4), (1, 1)])
def test_as_tensor_is_the_mask_the_kernel_computes(options, seqlen_q, seqlen_k):
    lengths = options.get("key_lengths")
    lengths = None if lengths is None else torch.tensor(lengths)
    mask = Mask(options.get("alignment"), options.get("window"), lengths)
    expected = reference_mask(2, seqlen_q, seqlen_k, options.get("alignment", False), **{
        "window": options.get("window"), "key_lengths": lengths
    })  # fmt: skip
    got = mask.as_tensor(seqlen_q, seqlen_k)
    assert got is None if not options else torch.equal(got.expand_as(expected), expected)


def test_as_tensor_adds_a_float_mask_where_the_structure_keeps():
    bias = torch.randn(2, 1, 3, 3)
    got = Mask("top_left", key_lengths=torch.tensor([3, 1]), dense=bias).as_tensor(3, 3)
    keep = reference_mask(2, 3, 3, True, key_lengths=torch.tensor([3, 1]))  # (B, 1, L, S)
    assert got.dtype == bias.dtype
    torch.testing.assert_close(got, bias.masked_fill(~keep, float("-inf")))
    both = Mask("top_left", dense=torch.rand(3, 3) < 0.5)
    assert torch.equal(both.as_tensor(3, 3), both.dense & qkv.causal_mask(3))


IGNORE_A_SUFFIX = torch.tensor([[False] * 6, [False, False, True, True, True, True]])  # (B, S)


def test_a_key_padding_mask_that_ignores_a_suffix_becomes_key_lengths():
    mask = parse(key_padding_mask=IGNORE_A_SUFFIX, is_causal=True)
    assert mask.key_lengths.tolist() == [6, 2]
    assert mask.dense is None
    shared = parse(key_padding_mask=IGNORE_A_SUFFIX[1:])  # (1, S): one row for the whole batch
    assert shared.key_lengths.tolist() == [2, 2]


@pytest.mark.parametrize(
    "ignore",
    [
        IGNORE_A_SUFFIX.flip(-1),  # a prefix ignored: left padding
        torch.tensor([[False, True] * 3, [False] * 6]),  # holes
    ],
    ids=["left-padding", "holes"],
)
def test_any_other_key_padding_mask_stays_a_dense_mask(ignore):
    keep = torch.rand(4, 6) < 0.5  # (L, S)
    mask = parse(key_padding_mask=ignore, attn_mask=keep)
    assert mask.key_lengths is None
    assert torch.equal(mask.dense, qkv.key_padding_to_keep(ignore) & keep)  # (B, 1, L, S)


def test_a_float_key_padding_mask_is_added():
    bias = torch.randn(2, 6)
    mask = parse(key_padding_mask=bias)
    assert mask.key_lengths is None
    torch.testing.assert_close(mask.dense, bias[:, None, None, :])  # (B, 1, 1, S)


def test_unbatched_key_padding_stays_dense():
    query, key = torch.randn(4, 16), torch.randn(6, 16)  # (L, E), (S, E): scores (H, L, S)
    mask = parse_mask(query, key, (3, 4, 6), key_padding_mask=IGNORE_A_SUFFIX[1])
    assert mask.key_lengths is None
    assert torch.equal(mask.dense, ~IGNORE_A_SUFFIX[1][None, None, :])


BAD_MASKS = {
    "is_causal int": (
        {"is_causal": 1},
        TypeError,
        r"is_causal must be a bool or one of .* got int",
    ),
    "is_causal unknown": (
        {"is_causal": "lower_right"},
        ValueError,
        r"is_causal must be False, True or one of \('top_left', 'bottom_right'\), got 'lower_right'",
    ),
    "causal named": (
        {"is_causal": "x", "causal_name": "causal"},
        ValueError,
        r"^causal must be False, True",
    ),
    "window float": (
        {"is_causal": True, "window": 2.0},
        TypeError,
        r"window must be an int or None, got float",
    ),
    "window 0": ({"is_causal": True, "window": 0}, ValueError, r"window must be at least 1, got 0"),
    "window alone": (
        {"window": 2, "causal_name": "causal"},
        ValueError,
        r"window=2 needs a causal alignment: pass causal=True",
    ),
    "lengths list": (
        {"key_lengths": [1, 2]},
        TypeError,
        r"key_lengths must be a tensor or None, got list",
    ),
    "lengths float": (
        {"key_lengths": torch.tensor([1.0, 2.0])},
        TypeError,
        r"key_lengths must be an integer tensor, got dtype torch.float32",
    ),
    "lengths shape": (
        {"key_lengths": torch.tensor([1, 2, 3])},
        ValueError,
        r"key_lengths must be \(B,\) = \(2,\), one length per batch, got \(3,\)",
    ),
    "lengths device": (
        {"key_lengths": torch.tensor([1, 2], device="meta")},
        ValueError,
        r"key_lengths is on meta but the queries are on cpu",
    ),
    "mask dtype": (
        {"attn_mask": torch.ones(4, 6, dtype=torch.int)},
        TypeError,
        r"attn_mask must be bool \(True = may attend\) or floating point, got torch.int32",
    ),
    "mask shape": (
        {"attn_mask": torch.ones(6, 4, dtype=torch.bool)},
        ValueError,
        r"attn_mask of shape \(6, 4\) does not broadcast to the scores' shape \(2, 3, 4, 6\)",
    ),
    "mask named": (
        {"attn_mask": torch.ones(6, 4, dtype=torch.bool), "mask_name": "attn_mask (6, 4),"},
        ValueError,
        r"attn_mask \(6, 4\), of shape",
    ),
    "padding dtype": (
        {"key_padding_mask": torch.zeros(2, 6, dtype=torch.long)},
        TypeError,
        r"key_padding_mask must be bool \(True = ignore\) or floating point, got torch.int64",
    ),
    "padding shape": (
        {"key_padding_mask": torch.zeros(2, 4, dtype=torch.bool)},
        ValueError,
        r"key_padding_mask of shape \(2, 4\) does not broadcast to key's \(B, S\)",
    ),
}


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_MASKS.values(), ids=BAD_MASKS.keys())
def test_parse_mask_names_what_is_wrong(kwargs, error, message):
    keys = torch.randn(2, 6, 16)  # (B, S, E), as a key_padding_mask's key
    with pytest.raises(error, match=message):
        parse_mask(Q, keys, SCORES, **kwargs)


# Each call parses is_causal once: the alignment that every backend reads is the parse's, not a new one.


def calls(run, *functions):
    """How many times each of `functions` runs during `run()`, however it was imported (by code object)."""
    counted = {function.__code__: function.__name__ for function in functions}
    counts = dict.fromkeys(counted.values(), 0)

    def profile(frame, event, _):
        if event == "call" and frame.f_code in counted:
            counts[counted[frame.f_code]] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return counts


ONCE = {"check_attention_inputs": 1, "parse_mask": 1, "_alignment": 1}
KERNEL_DEVICE = "cpu" if flash.INTERPRETED else "cuda"


@pytest.mark.parametrize("backend", ["triton", "torch", "reference", "auto"])
def test_attention_parses_is_causal_once_whatever_the_backend(backend):
    q, k, v = (
        torch.randn(2, 2, n, 16, dtype=torch.float16, device=KERNEL_DEVICE) for n in (5, 7, 7)
    )
    lengths = torch.tensor([7, 3], device=KERNEL_DEVICE)

    def run():
        qkv.attention(
            q, k, v, is_causal="bottom_right", window=4, key_lengths=lengths, backend=backend
        )

    counts = calls(run, check_attention_inputs, masks.parse_mask, masks._alignment)
    assert counts == ONCE


def test_auto_parses_is_causal_once_on_its_way_to_the_kernel(monkeypatch):
    # a GPU whose measured table sends causal calls to the kernel, without a GPU
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(contract, "interpreted", lambda: False)
    monkeypatch.setattr(dispatch, "_device_name", lambda device: "GPU")
    q = torch.empty(1, 2, 64, 16, dtype=torch.float16, device="meta")
    case = dispatch.call_kind(q, q, Mask("top_left"), backward=False)
    case |= {"device_name": "GPU", "seqlen_q": 64, "seqlen_k": 64, "triton_ms": 1, "torch_ms": 2}
    monkeypatch.setattr(dispatch, "_measurements", lambda: [case])
    chosen = []
    counts = calls(
        lambda: chosen.append(qkv.select_backend(q, q, q, is_causal=True)),
        masks.parse_mask,
        masks._alignment,
    )
    assert chosen == ["triton"]
    assert counts == {"parse_mask": 1, "_alignment": 1}


def test_flash_attention_and_the_functions_parse_is_causal_once():
    q = torch.randn(1, 2, 5, 16, dtype=torch.float16, device=KERNEL_DEVICE)
    for run in (
        lambda: qkv.flash_attention(q, q, q, causal=True, window=2),
        lambda: qkv.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True),
        lambda: qkv.attention_weights(q.float(), q.float(), is_causal=True),
    ):
        assert calls(run, masks.parse_mask, masks._alignment) == {"parse_mask": 1, "_alignment": 1}


def test_multihead_attention_parses_its_masks_once():
    mha = qkv.MultiHeadAttention(32, 2).half().to(KERNEL_DEVICE)
    x = torch.randn(2, 5, 32, dtype=torch.float16, device=KERNEL_DEVICE)
    ignore = IGNORE_A_SUFFIX[:, :5].to(KERNEL_DEVICE)

    def run():
        mha(x, key_padding_mask=ignore, is_causal=True, backend="triton")

    assert calls(run, masks.parse_mask, masks._alignment) == {"parse_mask": 1, "_alignment": 1}


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_a_window_past_any_int_is_the_causal_mask(alignment):
    expected = qkv.causal_mask(3, 5, alignment=alignment)
    assert torch.equal(qkv.sliding_window_mask(3, 2**70, 5, alignment=alignment), expected)
