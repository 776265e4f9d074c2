"""qkv.scaled_dot_product_attention and qkv.attention_weights against torch's scaled_dot_product_attention."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.autograd import gradcheck

import qkv
from tests.library.reference import assert_close_to_reference, reference_attention, torch_attention


@st.composite
def attention_inputs(draw, dtype=torch.float64):
    """Random query, key, value and keyword arguments that torch's function accepts."""
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    gqa = draw(st.booleans())
    kv_heads = draw(st.integers(1, 3))
    q_heads = kv_heads * draw(st.integers(1, 3)) if gqa else kv_heads
    q_len, k_len = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    e, ev = draw(st.integers(0, 8)), draw(st.integers(1, 8))  # E = 0: every score is 0
    q = torch.randn(*batch, q_heads, q_len, e, dtype=dtype)
    k = torch.randn(*batch, kv_heads, k_len, e, dtype=dtype)
    v = torch.randn(*batch, kv_heads, k_len, ev, dtype=dtype)
    kwargs = {"enable_gqa": gqa}
    if draw(st.booleans()):
        kwargs["scale"] = draw(st.floats(0.05, 3.0))
    mask_kind = draw(st.sampled_from(["none", "causal", "bool", "float"]))
    # a mask of the full scores shape, or one that broadcasts over batch and heads
    mask_shape = draw(
        st.sampled_from([(*batch, q_heads, q_len, k_len), (q_len, k_len), (1, k_len)])
    )
    if mask_kind == "causal":
        kwargs["is_causal"] = True
    elif mask_kind == "bool":
        kwargs["attn_mask"] = torch.rand(mask_shape) < draw(st.floats(0.0, 1.0))
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(mask_shape, dtype=dtype)
    return q, k, v, kwargs


@given(attention_inputs())
def test_matches_torch_in_float64(inputs):
    q, k, v, kwargs = inputs
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, **kwargs),
        F.scaled_dot_product_attention(q, k, v, **kwargs),
    )


@given(attention_inputs(dtype=torch.float32))
def test_matches_torch_in_float32(inputs):
    q, k, v, kwargs = inputs
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, **kwargs),
        F.scaled_dot_product_attention(q, k, v, **kwargs),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@given(data=st.data())
def test_low_precision_within_twice_torchs_error(dtype, data):
    q, k, v, kwargs = data.draw(attention_inputs(dtype=dtype))
    assert_close_to_reference(
        qkv.scaled_dot_product_attention(q, k, v, **kwargs),
        reference_attention(q, k, v, **dict(kwargs)),
        torch_attention(q, k, v, **kwargs),
        factor=2.0,
        atol=1e-3 if dtype == torch.float16 else 1e-2,
    )


@given(attention_inputs())
def test_weights_are_probabilities(inputs):
    q, k, _, kwargs = inputs
    weights = qkv.attention_weights(q, k, **kwargs)
    sums = weights.sum(-1)
    allowed_nothing = (weights == 0).all(-1)
    assert (weights >= 0).all()
    torch.testing.assert_close(sums[~allowed_nothing], torch.ones_like(sums[~allowed_nothing]))


@given(attention_inputs())
def test_weights_times_values_is_the_output(inputs):
    q, k, v, kwargs = inputs
    weights = qkv.attention_weights(q, k, **kwargs)
    groups = q.size(-3) // v.size(-3) if kwargs["enable_gqa"] else 1
    output = weights @ v.repeat_interleave(groups, dim=-3)
    torch.testing.assert_close(output, qkv.scaled_dot_product_attention(q, k, v, **kwargs))


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64])
def test_fully_masked_row_gives_zeros_like_torch(mask_dtype):
    q, k, v = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 5, 3), torch.randn(2, 5, 6)
    k, v = k.double(), v.double()
    keep = torch.rand(2, 4, 5) < 0.7
    keep[:, 2] = False  # query 2 may attend nothing
    mask = keep if mask_dtype == torch.bool else qkv.keep_to_additive(keep, torch.float64)
    ours = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ours[:, 2].eq(0).all()
    assert not ours.isnan().any()
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize(("q_len", "k_len"), [(1, 1), (1, 7), (7, 1), (3, 8), (8, 3)])
def test_causal_is_aligned_top_left_when_lengths_differ(q_len, k_len):
    q, k, v = (torch.randn(2, n, 4, dtype=torch.float64) for n in (q_len, k_len, k_len))
    ours = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    explicit = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    torch.testing.assert_close(ours, qkv.scaled_dot_product_attention(q, k, v, attn_mask=explicit))


@pytest.mark.parametrize(
    "shape", [(5, 4), (2, 5, 4), (2, 3, 5, 4), (2, 2, 3, 5, 4)], ids=["2d", "3d", "4d", "5d"]
)
def test_any_batch_rank(shape):
    q, k, v = (torch.randn(shape, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


@pytest.mark.parametrize(
    ("shapes", "kwargs"),
    [
        (((2, 4, 8), (1, 5, 8), (2, 5, 3)), {}),
        (((2, 3, 4, 8), (5, 8), (3, 5, 8)), {"attn_mask": "bool"}),
        (((4, 8), (5, 8), (2, 5, 3)), {}),
        (((2, 4, 4, 8), (1, 2, 5, 8), (2, 5, 3)), {"enable_gqa": True}),
        (((1, 4, 4, 8), (1, 2, 5, 8), (1, 4, 5, 3)), {"enable_gqa": True, "is_causal": True}),
        (((2, 0, 8), (2, 5, 8), (2, 5, 3)), {}),
        (((2, 4, 8), (2, 0, 8), (2, 0, 3)), {"is_causal": True}),
        (((2, 4, 0), (2, 5, 0), (2, 5, 3)), {"scale": 1.0}),
        (((2, 4, 0), (2, 5, 0), (2, 5, 3)), {}),
        (((2, 4, 0), (2, 5, 0), (2, 5, 3)), {"is_causal": True}),
        (((2, 4, 8), (2, 5, 8), (2, 5, 3)), {"scale": np.float32(0.5)}),
    ],
    ids=[
        "key-batch-1",
        "key-2d",
        "value-wider-batch",
        "gqa-broadcast",
        "gqa-value-heads",
        "L=0",
        "S=0",
        "E=0",
        "E=0-default-scale",
        "E=0-causal",
        "numpy-scale",
    ],
)
def test_batch_dimensions_broadcast_like_torch(shapes, kwargs):
    q, k, v = (torch.randn(shape, dtype=torch.float64) for shape in shapes)
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(q.shape[:-1] + k.shape[-2:-1]) < 0.7}
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, **kwargs),
        F.scaled_dot_product_attention(q, k, v, **kwargs),
    )


def test_no_features_give_uniform_weights_like_torch():
    # E = 0: every score is an empty sum, 0, so torch 2.13 returns the mean of the values
    q, k, v = (torch.randn(2, n, e, dtype=torch.float64) for n, e in ((4, 0), (5, 0), (5, 3)))
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(expected, v.mean(-2, keepdim=True).expand(2, 4, 3))
    torch.testing.assert_close(qkv.scaled_dot_product_attention(q, k, v), expected)
    torch.testing.assert_close(qkv.attention_weights(q, k), torch.full((2, 4, 5), 0.2).double())


@pytest.mark.parametrize("scale", [0.0, -0.7])
@pytest.mark.parametrize("mask", ["none", "causal", "float"])
def test_zero_and_negative_scale_match_torch(scale, mask):
    # against torch's math backend: its CPU flash kernel gives NaN for is_causal with a scale <= 0
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (5, 6, 6))
    kwargs = {
        "none": {},
        "causal": {"is_causal": True},
        "float": {"attn_mask": torch.randn(5, 6, dtype=torch.float64)},
    }[mask]
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, scale=scale, **kwargs),
        reference_attention(q, k, v, scale=scale, **kwargs),
    )


def test_gqa_equals_repeated_heads():
    q = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    k, v = (
        torch.randn(2, 2, 7, 4, dtype=torch.float64),
        torch.randn(2, 2, 7, 3, dtype=torch.float64),
    )
    repeated = [x.repeat_interleave(3, dim=1) for x in (k, v)]
    torch.testing.assert_close(
        qkv.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        qkv.scaled_dot_product_attention(q, *repeated),
    )


@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool", "float", "fully-masked-row"])
def test_gradcheck_in_float64(mask_kind):
    q = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 5, 2, dtype=torch.float64, requires_grad=True)
    kwargs = {
        "none": {},
        "causal": {"is_causal": True},
        "bool": {"attn_mask": torch.rand(4, 5) < 0.7},
        "float": {"attn_mask": torch.randn(4, 5, dtype=torch.float64)},
        "fully-masked-row": {
            "attn_mask": torch.ones(4, 5, dtype=torch.bool).index_fill(0, torch.tensor([1]), False)
        },
    }[mask_kind]
    assert gradcheck(lambda *x: qkv.scaled_dot_product_attention(*x, **kwargs), (q, k, v))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"attn_mask": "bool"}, {"enable_gqa": True}, {"scale": 0.3}],
    ids=str,
)
def test_gradients_match_torch(kwargs):
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(6, 7) < 0.6}
    heads = 4 if kwargs.get("enable_gqa") else 2
    q = torch.randn(2, 4, 6, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(
        2,
        heads // 2 if kwargs.get("enable_gqa") else 4,
        7,
        8,
        dtype=torch.float64,
        requires_grad=True,
    )
    v = torch.randn(*k.shape[:-1], 5, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(2, 4, 6, 5, dtype=torch.float64)
    ours = torch.autograd.grad(
        qkv.scaled_dot_product_attention(q, k, v, **kwargs), (q, k, v), grad_out
    )
    theirs = torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, **kwargs), (q, k, v), grad_out
    )
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


def test_fully_masked_row_has_finite_gradients():
    q, k, v = (torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    keep = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep).sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert q.grad[0, 1].eq(0).all()  # the query that attends nothing gets no gradient


def test_dropout_zeroes_weights_and_rescales_the_rest():
    q, k = torch.randn(1, 64, 8), torch.randn(1, 64, 8)
    identity = torch.eye(64).unsqueeze(0)  # the output is then the weights themselves
    dropped = qkv.scaled_dot_product_attention(q, k, identity, dropout_p=0.5)
    weights = qkv.attention_weights(q, k)
    kept = dropped != 0
    assert 0.4 < kept.float().mean() < 0.6
    torch.testing.assert_close(dropped[kept], weights[kept] / 0.5)


def test_dropout_of_one_gives_zeros():
    q = k = v = torch.randn(2, 5, 4)
    assert qkv.scaled_dot_product_attention(q, k, v, dropout_p=1.0).eq(0).all()


BAD_CALLS = {
    "query not a tensor": (
        ([[1.0]], torch.randn(2, 3), torch.randn(2, 3)),
        {},
        TypeError,
        r"query must be a torch.Tensor",
    ),
    "integer key": (
        (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.long), torch.randn(2, 3)),
        {},
        TypeError,
        r"key must be a floating-point",
    ),
    "dtypes differ": (
        (torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3)),
        {},
        TypeError,
        r"query and key disagree on dtype",
    ),
    "1-d query": (
        (torch.randn(3), torch.randn(2, 3), torch.randn(2, 3)),
        {},
        ValueError,
        r"query must have at least 2 dimensions, got shape \(3,\)",
    ),
    "feature sizes differ": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 7), torch.randn(2, 5, 7)),
        {},
        ValueError,
        r"feature size E: query \(2, 4, 8\) vs key \(2, 5, 7\)",
    ),
    "key and value lengths differ": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 6, 8)),
        {},
        ValueError,
        r"key and value disagree .* key \(2, 5, 8\) vs value \(2, 6, 8\)",
    ),
    "batches differ": (
        (torch.randn(2, 4, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8)),
        {},
        ValueError,
        r"batch dimensions \(...\) do not broadcast: query \(2, 4, 8\), key \(3, 5, 8\)",
    ),
    "value's batch differs": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(3, 5, 8)),
        {},
        ValueError,
        r"do not broadcast: query \(2, 4, 8\), key \(2, 5, 8\), value \(3, 5, 8\)",
    ),
    "heads differ without gqa": (
        (torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)),
        {},
        ValueError,
        r"do not broadcast: query \(1, 4, 3, 8\), key \(1, 2, 3, 8\)",
    ),
    "gqa value heads do not divide": (
        (torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 3, 8)),
        {"enable_gqa": True},
        ValueError,
        r"value's heads must divide the query's: .* value \(1, 3, 3, 8\) has 3",
    ),
    "gqa heads do not divide": (
        (torch.randn(1, 4, 3, 8), torch.randn(1, 3, 3, 8), torch.randn(1, 3, 3, 8)),
        {"enable_gqa": True},
        ValueError,
        r"query \(1, 4, 3, 8\) has 4 heads, key \(1, 3, 3, 8\) has 3",
    ),
    "integer mask": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"attn_mask": torch.ones(4, 5, dtype=torch.long)},
        TypeError,
        r"attn_mask must be bool",
    ),
    "float mask of another dtype": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"attn_mask": torch.zeros(4, 5, dtype=torch.float64)},
        TypeError,
        r"attn_mask of dtype torch.float64 must be bool, float32 or query's dtype torch.float32",
    ),
    "mask shape": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"attn_mask": torch.ones(5, 4, dtype=torch.bool)},
        ValueError,
        r"attn_mask of shape \(5, 4\) does not broadcast to the scores' shape \(2, 4, 5\)",
    ),
    "mask and is_causal": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"attn_mask": torch.ones(4, 5, dtype=torch.bool), "is_causal": True},
        ValueError,
        r"either attn_mask or is_causal",
    ),
    "dropout out of range": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"dropout_p": 1.5},
        ValueError,
        r"dropout_p must lie in \[0, 1\], got 1.5",
    ),
    "dropout not a number": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"dropout_p": "0.1"},
        TypeError,
        r"dropout_p must be a number, got str",
    ),
    "scale not a number": (
        (torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)),
        {"scale": "0.5"},
        TypeError,
        r"scale must be a number",
    ),
}


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"), BAD_CALLS.values(), ids=BAD_CALLS.keys()
)
def test_bad_input_is_rejected_with_a_clear_message(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.scaled_dot_product_attention(*args, **kwargs)


WEIGHTS_BAD_CALLS = {
    name: call for name, call in BAD_CALLS.items() if "value" not in name and "dropout" not in name
}


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"), WEIGHTS_BAD_CALLS.values(), ids=WEIGHTS_BAD_CALLS.keys()
)
def test_attention_weights_rejects_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.attention_weights(args[0], args[1], **kwargs)


@pytest.mark.parametrize("flag", ["bottom_right", "top_left", 1, None])
def test_is_causal_takes_only_a_bool_as_torch_does(flag):
    # "bottom_right" once passed for True and silently aligned top-left; torch raises TypeError.
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, is_causal=flag)
    with pytest.raises(TypeError, match=rf"is_causal must be a bool, got {type(flag).__name__}"):
        qkv.scaled_dot_product_attention(q, k, v, is_causal=flag)
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        qkv.attention_weights(q, k, is_causal=flag)
