"""qkv.MultiHeadAttention against torch.nn.MultiheadAttention(batch_first=True)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qkv


@st.composite
def mha_case(draw):
    """A torch module, its copy, inputs and masks in both conventions."""
    heads = draw(st.integers(1, 4))
    embed_dim = heads * draw(st.integers(1, 4))
    cross = draw(st.booleans())
    kdim = draw(st.integers(1, 6)) if cross and draw(st.booleans()) else None
    vdim = draw(st.integers(1, 6)) if kdim else None
    batch, q_len = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    k_len = draw(st.integers(1, 6)) if cross else q_len
    theirs = torch.nn.MultiheadAttention(
        embed_dim,
        heads,
        bias=draw(st.booleans()),
        kdim=kdim,
        vdim=vdim,
        batch_first=True,
        dtype=torch.float64,
    ).eval()
    query = torch.randn(batch, q_len, embed_dim, dtype=torch.float64)
    key = torch.randn(batch, k_len, kdim or embed_dim, dtype=torch.float64) if cross else query
    value = torch.randn(batch, k_len, vdim or embed_dim, dtype=torch.float64) if cross else query
    ignore = torch.rand(batch, k_len) < draw(st.floats(0, 0.6)) if draw(st.booleans()) else None
    mask_kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    mask_shape = draw(st.sampled_from([(q_len, k_len), (batch * heads, q_len, k_len)]))
    masked = {  # torch's attn_mask: bool True = NOT allowed; (L, S) or one per head (B*H, L, S)
        "none": None,
        "bool": torch.rand(mask_shape) < 0.3,
        "float": torch.randn(mask_shape, dtype=torch.float64),
        "causal": ~qkv.causal_mask(q_len, k_len),
    }[mask_kind]
    ours_kwargs = {"key_padding_mask": ignore}
    if mask_kind == "causal":
        ours_kwargs["is_causal"] = True
    elif mask_kind == "bool":
        ours_kwargs["attn_mask"] = ~masked  # ours: bool True = may attend
    elif mask_kind == "float":
        ours_kwargs["attn_mask"] = masked
    args = (query, key, value) if cross else (query,)
    if mask_kind == "float" and ignore is not None:  # torch wants both masks of one type
        ignore = qkv.keep_to_additive(~ignore, torch.float64)
    return (
        theirs,
        args,
        (query, key, value),
        ours_kwargs,
        {"key_padding_mask": ignore, "attn_mask": masked},
    )


@given(mha_case())
def test_matches_torch_outputs_and_per_head_weights(case):
    theirs, args, torch_args, ours_kwargs, torch_kwargs = case
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    out, weights = ours(*args, **ours_kwargs, need_weights=True)
    expected, expected_weights = theirs(*torch_args, **torch_kwargs, average_attn_weights=False)
    answered = ~expected.isnan().any(-1)  # torch gives NaN where a query may attend nothing
    torch.testing.assert_close(out[answered], expected[answered])
    torch.testing.assert_close(
        weights.transpose(1, 2)[answered], expected_weights.transpose(1, 2)[answered]
    )
    torch.testing.assert_close(
        ours(*args, **ours_kwargs), out
    )  # the fast path agrees with the explicit one


def test_fully_masked_query_gives_zeros_where_torch_gives_nan():
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, bias=False)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 4, 8)
    ignore = torch.zeros(2, 4, dtype=torch.bool)
    ignore[1] = True  # the second sequence is all padding
    assert theirs(x, x, x, key_padding_mask=ignore)[0][1].isnan().all()
    out = ours(x, key_padding_mask=ignore)
    assert out[1].eq(0).all()  # no bias, so zeros survive the output projection
    torch.testing.assert_close(out[0], theirs(x, x, x, key_padding_mask=ignore)[0][0])


def test_gradients_match_torch():
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    causal = ~qkv.causal_mask(5)
    (grad_theirs,) = torch.autograd.grad(theirs(x, x, x, attn_mask=causal)[0].square().sum(), x)
    (grad_ours,) = torch.autograd.grad(ours(x, is_causal=True).square().sum(), x)
    torch.testing.assert_close(grad_ours, grad_theirs)
    ours(x, is_causal=True).square().sum().backward()
    theirs(x, x, x, attn_mask=causal)[0].square().sum().backward()
    torch.testing.assert_close(ours.q_proj.weight.grad, theirs.in_proj_weight.grad[:8])
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_key_and_value_default_to_query():
    mha = qkv.MultiHeadAttention(8, 2)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    torch.testing.assert_close(mha(x), mha(x, x, x))
    torch.testing.assert_close(mha(x, memory), mha(x, memory, memory))


def test_masks_combine():
    mha = qkv.MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    ignore = torch.tensor([[False] * 5, [False, False, False, True, True]])
    keep = qkv.key_padding_to_keep(ignore) & qkv.causal_mask(5)  # (B, 1, 5, 5)
    expected = mha(x, attn_mask=keep)
    torch.testing.assert_close(mha(x, key_padding_mask=ignore, is_causal=True), expected)
    additive = qkv.keep_to_additive(qkv.causal_mask(5))
    torch.testing.assert_close(mha(x, key_padding_mask=ignore, attn_mask=additive), expected)


def test_dropout_only_while_training():
    mha = qkv.MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    assert not torch.allclose(mha(x), mha(x))
    mha.eval()
    torch.testing.assert_close(mha(x), mha(x))


def test_from_torch_keeps_training_mode_dtype_and_dims():
    theirs = torch.nn.MultiheadAttention(
        6, 3, kdim=4, vdim=5, bias=False, batch_first=True, dtype=torch.float64
    )
    ours = qkv.MultiHeadAttention.from_torch(theirs.eval())
    assert not ours.training
    assert ours.q_proj.weight.dtype == torch.float64
    assert (ours.k_proj.in_features, ours.v_proj.in_features, ours.q_proj.bias) == (4, 5, None)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: qkv.MultiHeadAttention(10, 3),
            ValueError,
            r"embed_dim \(10\) must be divisible by num_heads \(3\)",
        ),
        (lambda: qkv.MultiHeadAttention(0, 1), ValueError, r"embed_dim must be positive, got 0"),
        (lambda: qkv.MultiHeadAttention(8, 2, kdim=0), ValueError, r"kdim must be positive, got 0"),
        (lambda: qkv.MultiHeadAttention(8, 2, vdim=-1), ValueError, r"vdim must be positive"),
        (lambda: qkv.MultiHeadAttention(8, "2"), TypeError, r"num_heads must be an int, got str"),
        (
            lambda: qkv.MultiHeadAttention(8, 2, dropout=2.0),
            ValueError,
            r"dropout must lie in \[0, 1\]",
        ),
        (
            lambda: qkv.MultiHeadAttention(8, 2, dropout="0.1"),
            TypeError,
            r"dropout must be a number, got str",
        ),
        (
            lambda: qkv.MultiHeadAttention.from_torch(torch.nn.Linear(2, 2)),
            TypeError,
            r"must be a torch.nn.MultiheadAttention",
        ),
        (
            lambda: qkv.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(4, 2)),
            ValueError,
            r"batch_first=True",
        ),
        (
            lambda: qkv.MultiHeadAttention.from_torch(
                torch.nn.MultiheadAttention(4, 2, add_bias_kv=True, batch_first=True)
            ),
            ValueError,
            r"add_bias_kv and add_zero_attn",
        ),
    ],
    ids=[
        "heads-divide",
        "positive",
        "kdim-0",
        "vdim-negative",
        "heads-str",
        "dropout",
        "dropout-str",
        "not-mha",
        "not-batch-first",
        "bias-kv",
    ],
)
def test_bad_construction_is_rejected(make, error, message):
    with pytest.raises(error, match=message):
        make()


MHA = qkv.MultiHeadAttention(8, 2, kdim=6)
X, MEMORY = torch.randn(2, 3, 8), torch.randn(2, 5, 6)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"query": torch.randn(3, 8), "key": MEMORY},
            ValueError,
            r"query must be \(B, N, 8\) \(batch first\), got shape \(3, 8\)",
        ),
        (
            {"query": X, "key": torch.randn(2, 5, 8)},
            ValueError,
            r"key must be \(B, N, 6\) \(batch first\), got shape \(2, 5, 8\)",
        ),
        (
            {"query": X, "key": MEMORY, "value": torch.randn(2, 4, 8)},
            ValueError,
            r"key and value disagree on \(B, S\): key \(2, 5, 6\) vs value \(2, 4, 8\)",
        ),
        (
            {"query": torch.randn(1, 3, 8), "key": MEMORY, "value": torch.randn(2, 5, 8)},
            ValueError,
            r"batch size: query \(1, 3, 8\) vs key \(2, 5, 6\)",
        ),
        (
            {"query": X, "key": MEMORY.double(), "value": torch.randn(2, 5, 8)},
            TypeError,
            r"query and key disagree on dtype",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "key_padding_mask": torch.zeros(2, 5),
            },
            TypeError,
            r"key_padding_mask must be a bool tensor \(True = ignore\)",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "key_padding_mask": torch.zeros(2, 3, dtype=torch.bool),
            },
            ValueError,
            r"key_padding_mask must be \(B, S\) = \(2, 5\), got \(2, 3\)",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "attn_mask": torch.ones(5, 3, dtype=torch.bool),
            },
            ValueError,
            r"attn_mask of shape \(5, 3\) does not broadcast to the scores' shape \(2, 2, 3, 5\)",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "attn_mask": torch.ones(4, 3, 4, dtype=torch.bool),
            },
            ValueError,
            r"attn_mask \(4, 3, 4\), one per head, of shape \(2, 2, 3, 4\) does not broadcast",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "attn_mask": torch.ones(3, 5, dtype=torch.int),
            },
            TypeError,
            r"attn_mask must be bool",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "attn_mask": torch.zeros(3, 5, dtype=torch.float64),
            },
            TypeError,
            r"attn_mask of dtype torch.float64 must be bool, float32 or query's dtype",
        ),
        (
            {
                "query": X,
                "key": MEMORY,
                "value": torch.randn(2, 5, 8),
                "key_padding_mask": torch.zeros(2, 5, dtype=torch.bool, device="meta"),
            },
            ValueError,
            r"key_padding_mask is on meta but the keys are on cpu",
        ),
    ],
    ids=[
        "query-rank",
        "key-features",
        "value-length",
        "batch",
        "dtype",
        "padding-dtype",
        "padding-shape",
        "mask-shape",
        "per-head-mask-shape",
        "mask-dtype",
        "float-mask-dtype",
        "padding-device",
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(kwargs, error, message):
    with pytest.raises(error, match=message):
        MHA(**kwargs)
