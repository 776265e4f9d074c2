"""Additive (Bahdanau) and multiplicative (Luong) attention against their formulas and torch."""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import qkv

B, L, S, DQ, DK, DV, HIDDEN = 2, 3, 5, 4, 6, 7, 8


def inputs(query_dim=DQ, key_dim=DK):
    return (
        torch.randn(B, L, query_dim, dtype=torch.float64),
        torch.randn(B, S, key_dim, dtype=torch.float64),
        torch.randn(B, S, DV, dtype=torch.float64),
    )


def pairwise(score):
    """Score every (i, j) pair one at a time with `score(q_i, k_j)`: the formula, written as a loop."""

    def scores(query, keys):
        return torch.stack(
            [
                torch.stack([torch.stack([score(qi, kj) for kj in k]) for qi in q])
                for q, k in zip(query, keys, strict=True)
            ]
        )

    return scores


def masked_attention(scores, values, keep):
    """softmax of the `(B, L, S)` scores over the allowed keys (no row fully masked), then the weighted sum."""
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def test_additive_matches_bahdanau_formula():
    module = qkv.AdditiveAttention(DQ, DK, HIDDEN).double()
    query, keys, values = inputs()
    w_a, u_a, b_a = module.query_proj.weight, module.key_proj.weight, module.key_proj.bias
    v_a = module.score.weight[0]
    scores = pairwise(lambda q, k: v_a @ torch.tanh(w_a @ q + u_a @ k + b_a))(query, keys)
    expected = masked_attention(scores, values, None)
    for a, e in zip(module(query, keys, values), expected, strict=True):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_luong_matches_its_formula(score):
    module = qkv.LuongAttention(DK, score).double()
    query, keys, values = inputs(query_dim=DK)
    formula = {
        "dot": lambda q, k: q @ k,
        "general": lambda q, k: q @ (module.weight_proj.weight @ k),
        "concat": lambda q, k: (
            module.score.weight[0] @ torch.tanh(module.concat_proj.weight @ torch.cat([q, k]))
        ),
    }[score]
    keep = torch.rand(B, S) < 0.7
    expected = masked_attention(pairwise(formula)(query, keys), values, keep)
    for a, e in zip(module(query, keys, values, mask=keep), expected, strict=True):
        torch.testing.assert_close(a, e)


def test_luong_dot_scaled_is_torchs_scaled_dot_product_attention():
    module = qkv.LuongAttention(DK, "dot")
    query, keys, values = inputs(query_dim=DK)
    context, _ = module(query / DK**0.5, keys, values)
    torch.testing.assert_close(context, F.scaled_dot_product_attention(query, keys, values))


@pytest.mark.parametrize(
    "module",
    [
        qkv.AdditiveAttention(DK, DK, HIDDEN),
        *(qkv.LuongAttention(DK, s) for s in ("dot", "general", "concat")),
    ],
    ids=["additive", "dot", "general", "concat"],
)
def test_fully_masked_row_gives_zero_weights_and_context(module):
    query, keys, values = (x.float() for x in inputs(query_dim=DK))
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1] = False
    context, weights = module(query, keys, values, mask=keep)
    assert weights[1].eq(0).all()
    assert context[1].eq(0).all()
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(L))
    assert not context.isnan().any()


@pytest.mark.parametrize(
    "module",
    [
        qkv.AdditiveAttention(DK, DK, HIDDEN),
        *(qkv.LuongAttention(DK, s) for s in ("dot", "general", "concat")),
    ],
    ids=["additive", "dot", "general", "concat"],
)
def test_float_mask_is_added_to_the_scores(module):
    module = module.double()
    query, keys, values = inputs(query_dim=DK)
    keep = torch.rand(B, S) < 0.7
    keep[:, 0] = True  # every query keeps key 0
    additive = qkv.keep_to_additive(keep, torch.float64)  # 0 keeps, -inf hides
    for a, e in zip(
        module(query, keys, values, additive), module(query, keys, values, keep), strict=True
    ):
        torch.testing.assert_close(a, e)
    bias = torch.randn(B, S, dtype=torch.float64)  # (B, S)
    weights = torch.softmax(module.scores(query, keys) + bias[:, None, :], dim=-1)  # (B, L, S)
    context, got = module(query, keys, values, bias)
    torch.testing.assert_close(got, weights)
    torch.testing.assert_close(context, weights @ values)


@pytest.mark.parametrize(
    "module",
    [
        qkv.AdditiveAttention(DK, DK, HIDDEN),
        *(qkv.LuongAttention(DK, s) for s in ("dot", "general", "concat")),
    ],
    ids=["additive", "dot", "general", "concat"],
)
def test_gradcheck(module):
    module = module.double()
    query, keys, values = (x[:1, :2, :].requires_grad_() for x in inputs(query_dim=DK))
    keep = torch.tensor([[True, False]])
    assert gradcheck(lambda q, k, v: module(q, k, v, mask=keep)[0], (query, keys, values))


@pytest.mark.parametrize("score", ["general", "concat"])
def test_luong_inputs_must_have_the_parameters_dtype(score):
    module = qkv.LuongAttention(DK, score)
    query, keys, values = inputs(query_dim=DK)  # float64, the module float32
    with pytest.raises(
        TypeError,
        match=r"query has dtype torch.float64 but the module's parameters are torch.float32",
    ):
        module(query, keys, values)


def test_parameter_counts():
    assert sum(p.numel() for p in qkv.AdditiveAttention(DQ, DK, HIDDEN).parameters()) == (
        DQ * HIDDEN + DK * HIDDEN + HIDDEN + HIDDEN
    )
    assert sum(p.numel() for p in qkv.LuongAttention(DK, "dot").parameters()) == 0
    assert sum(p.numel() for p in qkv.LuongAttention(DK, "general").parameters()) == DK * DK
    assert sum(p.numel() for p in qkv.LuongAttention(DK, "concat").parameters()) == 2 * DK * DK + DK


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            (torch.randn(B, L, DQ), torch.randn(B, S, DK), torch.randn(B, S + 1, DV)),
            ValueError,
            r"keys and values disagree on \(B, S\): keys \(2, 5, 6\) vs values \(2, 6, 7\)",
        ),
        (
            (torch.randn(B, L, DQ + 1), torch.randn(B, S, DK), torch.randn(B, S, DV)),
            ValueError,
            r"query must be \(B, N, 4\) \(batch first\), got shape \(2, 3, 5\)",
        ),
        (
            (torch.randn(B, L, DQ), torch.randn(B, S, DK - 1), torch.randn(B, S, DV)),
            ValueError,
            r"keys must be \(B, N, 6\) \(batch first\), got shape \(2, 5, 5\)",
        ),
        (
            (torch.randn(B + 1, L, DQ), torch.randn(B, S, DK), torch.randn(B, S, DV)),
            ValueError,
            r"batch size: query \(3, 3, 4\) vs keys \(2, 5, 6\)",
        ),
        (
            (torch.randn(L, DQ), torch.randn(B, S, DK), torch.randn(B, S, DV)),
            ValueError,
            r"query must be \(B, N, 4\) \(batch first\), got shape \(3, 4\)",
        ),
        (
            (torch.randn(B, L, DQ), torch.randn(B, S, DK).double(), torch.randn(B, S, DV)),
            TypeError,
            r"query and keys disagree on dtype",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.ones(B, S, dtype=torch.long),
            ),
            TypeError,
            r"mask must be bool \(True = may attend\) or floating point, got torch.int64",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.ones(B, L, S, dtype=torch.bool),
            ),
            ValueError,
            r"mask must be \(B, S\), one entry per key of keys \(2, 5, 6\), got shape \(2, 3, 5\)",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.ones(S, dtype=torch.bool),
            ),
            ValueError,
            r"mask must be \(B, S\), one entry per key of keys \(2, 5, 6\), got shape \(5,\)",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.ones(B, 3, dtype=torch.bool),
            ),
            ValueError,
            r"mask of shape \(2, 3\) does not broadcast to keys' \(B, S\) \(2, 5\)",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.tensor(True),
            ),
            ValueError,
            r"mask must be \(B, S\), .* got shape \(\)",
        ),
        (
            (
                torch.randn(B, L, DQ),
                torch.randn(B, S, DK),
                torch.randn(B, S, DV),
                torch.ones(B, S, dtype=torch.bool, device="meta"),
            ),
            ValueError,
            r"mask is on meta but query is on cpu",
        ),
        (
            tuple(
                x.double()
                for x in (torch.randn(B, L, DQ), torch.randn(B, S, DK), torch.randn(B, S, DV))
            ),
            TypeError,
            r"query has dtype torch.float64 but the module's parameters are torch.float32",
        ),
        (
            tuple(
                x.to("meta")
                for x in (torch.randn(B, L, DQ), torch.randn(B, S, DK), torch.randn(B, S, DV))
            ),
            ValueError,
            r"query is on meta but the module's parameters are on cpu",
        ),
    ],
    ids=[
        "values-length",
        "query-features",
        "key-features",
        "batch",
        "rank",
        "dtype",
        "mask-dtype",
        "mask-3d",
        "mask-1d",
        "mask-shape",
        "mask-0d",
        "mask-device",
        "module-dtype",
        "module-device",
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(args, error, message):
    with pytest.raises(error, match=message):
        qkv.AdditiveAttention(DQ, DK, HIDDEN)(*args)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: qkv.AdditiveAttention(4, -1, 8), ValueError, r"key_dim must be positive, got -1"),
        (lambda: qkv.AdditiveAttention(4, 6, 0), ValueError, r"hidden_dim must be positive, got 0"),
        (lambda: qkv.LuongAttention(4.0), TypeError, r"dim must be an int, got float"),
    ],
    ids=["negative", "zero", "float"],
)
def test_bad_sizes_are_rejected(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_unknown_luong_score_is_rejected():
    with pytest.raises(
        ValueError, match=r"score must be 'dot', 'general' or 'concat', got 'cosine'"
    ):
        qkv.LuongAttention(4, "cosine")


@pytest.mark.parametrize(
    ("module", "query", "keys", "error", "message"),
    [
        (
            lambda: qkv.LuongAttention(DQ, "general"),
            torch.randn(B, L, DQ),
            torch.randn(B, S, DQ + 1),
            ValueError,
            rf"keys must be \(B, N, {DQ}\) \(batch first\), got shape \({B}, {S}, {DQ + 1}\)",
        ),
        (
            lambda: qkv.AdditiveAttention(DQ, DK, HIDDEN),
            [[0.0] * DQ],
            torch.randn(B, S, DK),
            TypeError,
            r"query must be a torch\.Tensor, got list",
        ),
        (
            lambda: qkv.LuongAttention(DQ, "dot"),
            torch.randn(B, L, DQ),
            torch.randn(B + 1, S, DQ),
            ValueError,
            r"query and keys disagree on the batch size",
        ),
        (
            lambda: qkv.AdditiveAttention(DQ, DK, HIDDEN),
            torch.randn(B, L, DQ, dtype=torch.float64),
            torch.randn(B, S, DK, dtype=torch.float64),
            TypeError,
            r"query has dtype torch.float64 but the module's parameters are torch.float32",
        ),
    ],
    ids=["luong-key-features", "additive-list", "luong-batch", "additive-dtype"],
)
def test_the_scores_method_checks_as_forward_does(module, query, keys, error, message):
    with pytest.raises(error, match=message):
        module().scores(query, keys)
