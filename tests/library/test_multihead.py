"""qkv.MultiHeadAttention against torch.nn.MultiheadAttention(batch_first=True)."""

import logging
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qkv
from qkv.kernels import flash
from tests.library.reference import assert_close_to_reference


@st.composite
def mha_case(draw):
    """A torch module, inputs, and the same masks as torch takes them and as we take them."""
    heads = draw(st.integers(1, 4))
    embed_dim = heads * draw(st.integers(1, 4))
    cross = draw(st.booleans())
    kdim = draw(st.integers(1, 6)) if cross and draw(st.booleans()) else None
    vdim = draw(st.integers(1, 6)) if kdim else None
    batch = draw(st.sampled_from([(), (1,), (3,)]))  # (): unbatched, query (L, E)
    q_len = draw(st.integers(1, 6))
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
    query = torch.randn(*batch, q_len, embed_dim, dtype=torch.float64)
    key = torch.randn(*batch, k_len, kdim or embed_dim, dtype=torch.float64) if cross else query
    value = torch.randn(*batch, k_len, vdim or embed_dim, dtype=torch.float64) if cross else query
    ignore = torch.rand(*batch, k_len) < draw(st.floats(0, 0.6))  # (B, S), True = ignore
    key_padding_mask = {
        "none": None,
        "bool": ignore,
        "float": torch.randn(ignore.shape, dtype=torch.float64).masked_fill(ignore, float("-inf")),
    }[draw(st.sampled_from(["none", "bool", "float"]))]
    mask_kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    per_head = draw(st.booleans())
    shape = (math.prod(batch) * heads, q_len, k_len) if per_head else (q_len, k_len)
    attn_mask = {  # torch's: bool True = may NOT attend; (L, S) or one per head (B*H, L, S)
        "none": None,
        "bool": torch.rand(shape) < 0.3,
        "float": torch.randn(shape, dtype=torch.float64),
        "causal": ~qkv.causal_mask(q_len, k_len),
    }[mask_kind]
    ours = {"key_padding_mask": key_padding_mask}
    if mask_kind == "causal":
        ours["is_causal"] = True  # ours builds the causal mask itself
    elif attn_mask is not None:
        ours["attn_mask"] = attn_mask if attn_mask.is_floating_point() else ~attn_mask
        if per_head and batch and draw(st.booleans()):
            ours["attn_mask"] = ours["attn_mask"].unflatten(0, (*batch, heads))  # (B, H, L, S)
    torch_masks = {"key_padding_mask": key_padding_mask, "attn_mask": attn_mask}
    if any(m is not None and m.is_floating_point() for m in torch_masks.values()):
        torch_masks = {  # torch wants both masks of one type
            name: qkv.keep_to_additive(~m, torch.float64)
            if m is not None and m.dtype == torch.bool
            else m
            for name, m in torch_masks.items()
        }
    args = (query, key, value) if cross else (query,)
    return theirs, args, (query, key, value), ours, torch_masks


@given(mha_case())
def test_matches_torch_outputs_and_per_head_weights(case):
    theirs, args, torch_args, ours_kwargs, torch_kwargs = case
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    out, weights = ours(*args, **ours_kwargs, need_weights=True)
    expected, expected_weights = theirs(*torch_args, **torch_kwargs, average_attn_weights=False)
    answered = ~expected.isnan().any(-1)  # (B, L): torch gives NaN where a query may attend nothing
    torch.testing.assert_close(out[answered], expected[answered])
    torch.testing.assert_close(  # (B, H, L, S) -> (B, L, H, S)
        weights.transpose(-3, -2)[answered], expected_weights.transpose(-3, -2)[answered]
    )
    # the fast path agrees with the explicit one
    torch.testing.assert_close(ours(*args, **ours_kwargs), out)


def test_unbatched_input_matches_torch_and_a_batch_of_one():
    theirs = torch.nn.MultiheadAttention(
        8, 2, kdim=6, vdim=6, batch_first=True, dtype=torch.float64
    )
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x, memory = torch.randn(3, 8, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    ignore = torch.tensor([False, False, True, False, True])  # (S,), True = ignore
    hide = torch.rand(2, 3, 5) < 0.5  # (H, L, S), torch's True = may NOT attend
    hide[..., 0] = False  # every query keeps key 0
    expected, expected_weights = theirs(
        x, memory, memory, key_padding_mask=ignore, attn_mask=hide, average_attn_weights=False
    )
    out, weights = ours(
        x, memory, key_padding_mask=ignore, attn_mask=~hide, need_weights=True
    )  # (L, E), (H, L, S)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    batched = ours(x[None], memory[None], key_padding_mask=ignore[None], attn_mask=~hide)
    torch.testing.assert_close(out, batched[0])


@pytest.mark.parametrize("dtype", [torch.bool, torch.float64])
def test_per_head_mask_matches_torch(dtype):
    theirs = torch.nn.MultiheadAttention(
        8, 2, kdim=6, vdim=6, batch_first=True, dtype=torch.float64
    )
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x, memory = torch.randn(3, 4, 8, dtype=torch.float64), torch.randn(3, 5, 6, dtype=torch.float64)
    hide = torch.rand(3 * 2, 4, 5) < 0.5  # (B*H, L, S), torch's True = may NOT attend
    hide[..., 0] = False  # every query keeps key 0
    mask = ~hide if dtype == torch.bool else qkv.keep_to_additive(~hide, dtype)
    expected, _ = theirs(x, memory, memory, attn_mask=hide if dtype == torch.bool else mask)
    torch.testing.assert_close(ours(x, memory, attn_mask=mask), expected)
    per_head = mask.unflatten(0, (3, 2))  # (B*H, L, S) -> (B, H, L, S)
    torch.testing.assert_close(ours(x, memory, attn_mask=per_head), expected)


def test_float_key_padding_mask_is_added_like_torch():
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    ignore = torch.tensor([[False] * 4, [False, False, True, True]])
    bias = torch.randn(2, 4, dtype=torch.float64).masked_fill(ignore, float("-inf"))  # (B, S)
    torch.testing.assert_close(
        ours(x, key_padding_mask=bias), theirs(x, x, x, key_padding_mask=bias)[0]
    )
    additive = qkv.keep_to_additive(~ignore, torch.float64)  # 0 keeps, -inf ignores
    torch.testing.assert_close(ours(x, key_padding_mask=additive), ours(x, key_padding_mask=ignore))


@pytest.mark.parametrize("need_weights", [False, True])
def test_one_dimensional_attn_mask_is_refused_like_torch(need_weights):
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 3, 8)
    hide = torch.tensor([False, False, True])  # (S,)
    with pytest.raises(AssertionError, match="found 1-D"):
        theirs(x, x, x, attn_mask=hide, need_weights=need_weights)
    with pytest.raises(ValueError, match=r"attn_mask must be .* got \(3,\)"):
        ours(x, attn_mask=~hide, need_weights=need_weights)


@pytest.mark.parametrize(
    ("query_shape", "ignore", "torch_message", "message"),
    [
        (
            (2, 3, 8),
            torch.tensor([False, False, True]),  # (S,) for a batched query
            "For batched .* to be `None` or 2-D but found 1-D",
            r"key_padding_mask must be \(B, S\), one entry per key of key \(2, 3, 8\), got shape \(3,\)",
        ),
        (
            (3, 8),
            torch.tensor([[False, False, True]]),  # (1, S) for an unbatched query
            "For unbatched .* to be `None` or 1-D but found 2-D",
            r"key_padding_mask must be \(S,\), one entry per key of key \(3, 8\), got shape \(1, 3\)",
        ),
    ],
    ids=["1-d-for-batched", "2-d-for-unbatched"],
)
def test_key_padding_mask_of_another_rank_is_refused_like_torch(
    query_shape, ignore, torch_message, message
):
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(query_shape)
    with pytest.raises(AssertionError, match=torch_message):
        theirs(x, x, x, key_padding_mask=ignore)
    with pytest.raises(ValueError, match=message):
        ours(x, key_padding_mask=ignore)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("padding", [False, True], ids=["alone", "with-padding"])
@pytest.mark.parametrize("is_causal", [True, "top_left", "bottom_right"])
@pytest.mark.parametrize(("q_len", "k_len"), [(3, 5), (5, 3)])
def test_causal_alignments_match_torch(q_len, k_len, is_causal, padding, need_weights):
    theirs = torch.nn.MultiheadAttention(
        8, 2, kdim=6, vdim=6, batch_first=True, dtype=torch.float64
    )
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, q_len, 8, dtype=torch.float64)
    memory = torch.randn(2, k_len, 6, dtype=torch.float64)
    # query i sees keys j <= i + offset; torch's bool mask is True = may NOT attend
    offset = k_len - q_len if is_causal == "bottom_right" else 0
    hide = torch.ones(q_len, k_len, dtype=torch.bool).triu(offset + 1)  # (L, S)
    ignore = torch.zeros(2, k_len, dtype=torch.bool)
    ignore[1, -1] = True  # the second sequence's last key is padding
    ignore = ignore if padding else None
    expected, expected_weights = theirs(
        x, memory, memory, attn_mask=hide, key_padding_mask=ignore, average_attn_weights=False
    )
    result = ours(
        x, memory, is_causal=is_causal, key_padding_mask=ignore, need_weights=need_weights
    )
    out = result[0] if need_weights else result
    answered = ~expected.isnan().any(-1)  # (B, L): torch gives NaN where a query may attend nothing
    torch.testing.assert_close(out[answered], expected[answered])
    torch.testing.assert_close(  # zeros before out_proj leave its bias
        out[~answered], theirs.out_proj.bias.expand_as(out[~answered])
    )
    if need_weights:
        weights = result[1].transpose(-3, -2)  # (B, H, L, S) -> (B, L, H, S)
        torch.testing.assert_close(weights[answered], expected_weights.transpose(-3, -2)[answered])
        assert weights[~answered].eq(0).all()


@pytest.mark.parametrize("is_causal", [True, "bottom_right"])
def test_a_cache_aligns_is_causal_bottom_right(is_causal):
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    hide = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch's True = may NOT attend
    expected, _ = theirs(x, x, x, attn_mask=hide)
    cache = qkv.KVCache()
    chunks = [ours(x[:, a:b], is_causal=is_causal, cache=cache) for a, b in ((0, 2), (2, 5))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), expected)


def test_is_causal_alone_builds_the_mask_that_torch_needs():
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 5, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        theirs(x, x, x, is_causal=True)
    expected, _ = theirs(x, x, x, attn_mask=~qkv.causal_mask(5), is_causal=True)
    torch.testing.assert_close(ours(x, is_causal=True), expected)


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
            lambda: qkv.MultiHeadAttention(8, 2, bias="no"),
            TypeError,
            r"bias must be a bool, got str",
        ),
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
        "bias-str",
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
X, MEMORY, VALUE = torch.randn(2, 3, 8), torch.randn(2, 5, 6), torch.randn(2, 5, 8)
OTHER_HEADS = qkv.KVCache()  # what a module of 4 heads of 2 features cached
OTHER_HEADS.update(torch.randn(2, 4, 1, 2), torch.randn(2, 4, 1, 2))
BAD_CALLS = {
    "1-d query": (
        {"query": torch.randn(8), "key": MEMORY},
        ValueError,
        r"query must be \(B, N, 8\) \(batch first\) or \(N, 8\) \(unbatched\), got shape \(8,\)",
    ),
    "unbatched query, batched key": (
        {"query": torch.randn(3, 8), "key": MEMORY},
        ValueError,
        r"key must be \(N, 6\) as the unbatched query \(3, 8\), got shape \(2, 5, 6\)",
    ),
    "key features": (
        {"query": X, "key": torch.randn(2, 5, 8)},
        ValueError,
        r"key must be \(B, N, 6\) \(batch first\), got shape \(2, 5, 8\)",
    ),
    "value length": (
        {"query": X, "key": MEMORY, "value": torch.randn(2, 4, 8)},
        ValueError,
        r"key and value disagree on \(B, S\): key \(2, 5, 6\) vs value \(2, 4, 8\)",
    ),
    "unbatched value length": (
        {"query": torch.randn(3, 8), "key": MEMORY[0], "value": torch.randn(4, 8)},
        ValueError,
        r"key and value disagree on S: key \(5, 6\) vs value \(4, 8\)",
    ),
    "batch": (
        {"query": torch.randn(1, 3, 8), "key": MEMORY, "value": VALUE},
        ValueError,
        r"batch size: query \(1, 3, 8\) vs key \(2, 5, 6\)",
    ),
    "dtype": (
        {"query": X, "key": MEMORY.double(), "value": VALUE},
        TypeError,
        r"query and key disagree on dtype",
    ),
    "query dtype, module's": (
        {"query": X.double(), "key": MEMORY.double(), "value": VALUE.double()},
        TypeError,
        r"query has dtype torch.float64 but the module's parameters are torch.float32",
    ),
    "query device, module's": (
        {"query": X.to("meta"), "key": MEMORY.to("meta"), "value": VALUE.to("meta")},
        ValueError,
        r"query is on meta but the module's parameters are on cpu",
    ),
    "is_causal unknown": (
        {"query": X, "key": MEMORY, "is_causal": "bottom-right"},
        ValueError,
        r"is_causal must be False, True or one of \('top_left', 'bottom_right'\), got 'bottom-right'",
    ),
    "is_causal unknown, with weights": (
        {"query": X, "key": MEMORY, "is_causal": "diagonal", "need_weights": True},
        ValueError,
        r"is_causal must be False, True or one of .* got 'diagonal'",
    ),
    "is_causal unknown, with padding": (
        {
            "query": X,
            "key": MEMORY,
            "is_causal": "diagonal",
            "key_padding_mask": torch.zeros(2, 5, dtype=torch.bool),
        },
        ValueError,
        r"is_causal must be False, True or one of .* got 'diagonal'",
    ),
    "is_causal int": (
        {"query": X, "key": MEMORY, "is_causal": 1},
        TypeError,
        r"is_causal must be a bool or one of \('top_left', 'bottom_right'\), got int",
    ),
    "need_weights str": (
        {"query": X, "key": MEMORY, "need_weights": "no"},
        TypeError,
        r"need_weights must be a bool, got str",
    ),
    "cache type": (
        {"query": X, "key": MEMORY, "cache": []},
        TypeError,
        r"cache must be a qkv.KVCache or None, got list",
    ),
    "cache, unbatched query": (
        {"query": X[0], "key": MEMORY[0], "cache": qkv.KVCache()},
        ValueError,
        r"a cache takes batched input only: query must be \(B, L, E\), got shape \(3, 8\)",
    ),
    "cache, top-left": (
        {"query": X, "key": MEMORY, "cache": qkv.KVCache(), "is_causal": "top_left"},
        ValueError,
        r"with a cache, is_causal aligns bottom-right .* not 'top_left'",
    ),
    "cache of other heads": (
        {"query": X, "key": MEMORY, "cache": OTHER_HEADS},
        ValueError,
        r"cache holds keys \(2, 4, 1, 2\) \(B, H, T, E/H\), but this call's are \(2, 2, ., 4\)",
    ),
    "padding dtype": (
        {"query": X, "key": MEMORY, "key_padding_mask": torch.zeros(2, 5, dtype=torch.long)},
        TypeError,
        r"key_padding_mask must be bool \(True = ignore\) or floating point, got torch.int64",
    ),
    "float padding dtype": (
        {"query": X, "key": MEMORY, "key_padding_mask": torch.zeros(2, 5, dtype=torch.float64)},
        TypeError,
        r"key_padding_mask of dtype torch.float64 must be bool, float32 or query's dtype",
    ),
    "padding shape": (
        {"query": X, "key": MEMORY, "key_padding_mask": torch.zeros(2, 3, dtype=torch.bool)},
        ValueError,
        r"key_padding_mask of shape \(2, 3\) does not broadcast to key's \(B, S\) \(2, 5\)",
    ),
    "padding 0-d": (
        {"query": X, "key": MEMORY, "key_padding_mask": torch.tensor(False)},
        ValueError,
        r"key_padding_mask must be \(B, S\), .* got shape \(\)",
    ),
    "padding device": (
        {"query": X, "key": MEMORY, "key_padding_mask": torch.zeros(2, 5, device="meta")},
        ValueError,
        r"key_padding_mask is on meta but query is on cpu",
    ),
    "mask shape": (
        {"query": X, "key": MEMORY, "attn_mask": torch.ones(5, 3, dtype=torch.bool)},
        ValueError,
        r"attn_mask of shape \(5, 3\) does not broadcast to the scores' shape \(2, 2, 3, 5\)",
    ),
    "per-head mask shape": (
        {"query": X, "key": MEMORY, "attn_mask": torch.ones(4, 3, 4, dtype=torch.bool)},
        ValueError,
        r"attn_mask \(4, 3, 4\), one per head, of shape \(2, 2, 3, 4\) does not broadcast",
    ),
    "1-d mask": (
        {"query": X, "key": MEMORY, "attn_mask": torch.ones(5, dtype=torch.bool)},
        ValueError,
        r"attn_mask must be \(L, S\), \(B\*H, L, S\) or \(B, H, L, S\) for the scores' shape "
        r"\(2, 2, 3, 5\), got \(5,\)",
    ),
    "3-d mask not one per head": (
        {"query": X, "key": MEMORY, "attn_mask": torch.ones(2, 3, 5, dtype=torch.bool)},
        ValueError,
        r"attn_mask must be .* got \(2, 3, 5\)",
    ),
    "unbatched 4-d mask": (
        {"query": X[0], "key": MEMORY[0], "attn_mask": torch.ones(1, 2, 3, 5, dtype=torch.bool)},
        ValueError,
        r"attn_mask must be \(L, S\) or \(H, L, S\) for the scores' shape \(2, 3, 5\)",
    ),
    "mask dtype": (
        {"query": X, "key": MEMORY, "attn_mask": torch.ones(3, 5, dtype=torch.int)},
        TypeError,
        r"attn_mask must be bool \(True = may attend\) or floating point",
    ),
    "float mask dtype": (
        {"query": X, "key": MEMORY, "attn_mask": torch.zeros(3, 5, dtype=torch.float64)},
        TypeError,
        r"attn_mask of dtype torch.float64 must be bool, float32 or query's dtype",
    ),
}


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_input_is_rejected_with_a_clear_message(kwargs, error, message):
    kwargs = {"value": VALUE[0] if kwargs["key"].dim() == 2 else VALUE, **kwargs}
    with pytest.raises(error, match=message):
        MHA(**kwargs)


# What reaches the kernels: the causal mask, the window, and a key padding that ignores a suffix of each row.

KERNEL_DEVICE = "cpu" if flash.INTERPRETED else "cuda"
IGNORE_A_SUFFIX = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])  # (B, S), True = ignore


@pytest.mark.parametrize(
    "masks",
    [
        {"is_causal": True},
        {"is_causal": True, "key_padding_mask": IGNORE_A_SUFFIX},
        {"is_causal": True, "window": 3, "key_padding_mask": IGNORE_A_SUFFIX},
        {"key_padding_mask": IGNORE_A_SUFFIX},
    ],
    ids=["causal", "padded-causal", "padded-window", "padded"],
)
def test_causal_and_padded_calls_reach_the_kernel_and_match_torch(masks, caplog):
    theirs = torch.nn.MultiheadAttention(32, 2, batch_first=True, dtype=torch.float64)  # E/H = 16
    ours = qkv.MultiHeadAttention.from_torch(theirs).half().to(KERNEL_DEVICE)
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    hide = None  # torch's attn_mask: True = may NOT attend
    if "window" in masks:
        hide = ~qkv.sliding_window_mask(6, masks["window"])
    elif masks.get("is_causal"):
        hide = ~qkv.causal_mask(6)
    ignore = masks.get("key_padding_mask")
    expected, _ = theirs(x, x, x, attn_mask=hide, key_padding_mask=ignore)
    yardstick, _ = theirs.half()(*(x.half(),) * 3, attn_mask=hide, key_padding_mask=ignore)
    if ignore is not None:
        masks = masks | {"key_padding_mask": ignore.to(KERNEL_DEVICE)}
    with caplog.at_level(logging.DEBUG, logger="qkv"):
        out = ours(x.half().to(KERNEL_DEVICE), **masks, backend="triton")
    assert "attention: triton backend" in caplog.text
    assert_close_to_reference(out.cpu(), expected, yardstick)


def test_left_padding_is_refused_by_the_kernel():
    mha = qkv.MultiHeadAttention(32, 2).half().to(KERNEL_DEVICE)
    x = torch.randn(2, 6, 32, dtype=torch.float16, device=KERNEL_DEVICE)
    ignore = IGNORE_A_SUFFIX.flip(-1).to(KERNEL_DEVICE)  # a prefix ignored: no key lengths say that
    message = r"the triton backend cannot take these inputs: the kernels take no attn_mask"
    with pytest.raises(ValueError, match=message):
        mha(x, key_padding_mask=ignore, is_causal=True, backend="triton")


@pytest.mark.parametrize("is_causal", [True, "bottom_right"])
def test_a_window_is_the_sliding_window_mask(is_causal):
    mha = qkv.MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    alignment = "top_left" if is_causal is True else is_causal
    keep = qkv.sliding_window_mask(4, 3, 6, alignment=alignment)
    for need_weights in (False, True):
        got = mha(x, memory, is_causal=is_causal, window=3, need_weights=need_weights)
        expected = mha(x, memory, attn_mask=keep, need_weights=need_weights)
        torch.testing.assert_close(got, expected)


def test_a_window_and_a_cache_decode_as_one_call():
    mha = qkv.MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 7, 8)
    cache = qkv.KVCache()
    chunks = [mha(x[:, a:b], is_causal=True, window=3, cache=cache) for a, b in ((0, 4), (4, 7))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), mha(x, is_causal=True, window=3))
