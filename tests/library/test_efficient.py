"""Efficient attention: every exact method equals masked dense attention, every approximation its own formula."""

import itertools
import math
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qkv
from qkv.efficient import elu_feature_map
from tests.library.reference import assert_close_to_reference, reference_attention, torch_attention


def qkv_inputs(*batch, q_len, k_len=None, e=8, ev=6, dtype=torch.float64):
    k_len = q_len if k_len is None else k_len
    return (
        torch.randn(*batch, q_len, e, dtype=dtype),
        torch.randn(*batch, k_len, e, dtype=dtype),
        torch.randn(*batch, k_len, ev, dtype=dtype),
    )


# --- sliding window -----------------------------------------------------------------------------------------


@given(st.integers(1, 40), st.integers(1, 45))
def test_sliding_window_attention_equals_masked_attention(n, window):
    q, k, v = qkv_inputs(2, 3, q_len=n)
    mask = qkv.sliding_window_mask(n, window=window)
    torch.testing.assert_close(
        qkv.sliding_window_attention(q, k, v, window), reference_attention(q, k, v, attn_mask=mask)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_sliding_window_attention_low_precision_within_torchs_error(dtype):
    q, k, v = qkv_inputs(1, 2, q_len=70, dtype=dtype)
    mask = qkv.sliding_window_mask(70, window=16)
    out = qkv.sliding_window_attention(q, k, v, 16)
    assert out.dtype == dtype
    expected = reference_attention(q, k, v, attn_mask=mask)
    assert_close_to_reference(out, expected, torch_attention(q, k, v, attn_mask=mask))


def test_a_window_past_any_int_is_causal_attention_in_little_memory():
    q, k, v = qkv_inputs(2, 3, q_len=6)
    expected = reference_attention(q, k, v, is_causal=True)
    # a band of 2**40 keys would need terabytes: the window is capped at N first
    torch.testing.assert_close(qkv.sliding_window_attention(q, k, v, 2**40), expected)
    torch.testing.assert_close(
        qkv.attention(q, k, v, is_causal=True, window=2**70), expected
    )  # past int64: parse_mask caps it at L + S


def test_sliding_window_attention_rejects_cross_attention_and_bad_window():
    q, k, v = qkv_inputs(1, q_len=4, k_len=5)
    with pytest.raises(ValueError, match="same length"):
        qkv.sliding_window_attention(q, k, v, 2)
    q, k, v = qkv_inputs(1, q_len=4)
    with pytest.raises(ValueError, match="window must be positive"):
        qkv.sliding_window_attention(q, k, v, 0)


@pytest.mark.parametrize(("n", "e", "ev"), [(0, 8, 6), (5, 0, 6), (5, 8, 0)])
def test_sliding_window_attention_empty_sizes_follow_torch(n, e, ev):
    q, k, v = qkv_inputs(2, q_len=n, e=e, ev=ev)
    mask = qkv.sliding_window_mask(n, window=3)
    expected = reference_attention(q, k, v, attn_mask=mask)  # E = 0: scores of 0, a masked mean
    torch.testing.assert_close(qkv.sliding_window_attention(q, k, v, 3), expected)


# --- sparse patterns ----------------------------------------------------------------------------------------


def test_strided_pattern_by_hand():
    mask = qkv.sparse_mask("strided", 6, 2)
    assert mask.int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [1, 0, 1, 1, 1, 0],
        [0, 1, 0, 1, 1, 1],
    ]


def test_fixed_pattern_by_hand():
    mask = qkv.sparse_mask("fixed", 6, 3)
    assert mask.int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 1],
    ]


def test_longformer_pattern_by_hand():
    mask = qkv.sparse_mask("longformer", 5, 1, num_global=1)
    assert mask.int().tolist() == [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 0, 1, 1, 1],
        [1, 0, 0, 1, 1],
    ]


def test_bigbird_adds_random_keys_to_longformer():
    generator = torch.Generator().manual_seed(0)
    bigbird = qkv.sparse_mask("bigbird", 30, 2, num_global=2, num_random=3, generator=generator)
    longformer = qkv.sparse_mask("longformer", 30, 2, num_global=2)
    assert (bigbird >= longformer).all()
    extra = (bigbird & ~longformer).sum(dim=-1)
    assert (extra <= 3).all()
    assert extra.sum() > 0


@pytest.mark.parametrize(
    ("pattern", "options"),
    [
        ("strided", {}),
        ("fixed", {}),
        ("longformer", {"num_global": 2}),
        ("bigbird", {"num_global": 1, "num_random": 2}),
    ],
)
@pytest.mark.parametrize(("n", "block_size"), [(1, 4), (23, 4), (40, 8), (64, 16), (37, 64)])
def test_block_sparse_attention_equals_masked_attention(pattern, options, n, block_size):
    options = {
        name: min(count, n) for name, count in options.items()
    }  # no more keys than there are
    mask = qkv.sparse_mask(pattern, n, 3, **options)
    q, k, v = qkv_inputs(2, 2, q_len=n)
    torch.testing.assert_close(
        qkv.block_sparse_attention(q, k, v, mask, block_size),
        reference_attention(q, k, v, attn_mask=mask),
    )


@given(st.integers(1, 20), st.integers(1, 20), st.integers(1, 9), st.integers(0, 2**16))
def test_block_sparse_attention_equals_masked_attention_for_any_mask(
    q_len, k_len, block_size, seed
):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(q_len, k_len, generator=generator) > 0.6
    q, k, v = qkv_inputs(1, 2, q_len=q_len, k_len=k_len)
    torch.testing.assert_close(
        qkv.block_sparse_attention(q, k, v, mask, block_size),
        reference_attention(q, k, v, attn_mask=mask),
    )


def test_block_sparse_attention_cross_attention_and_empty_rows():
    q, k, v = qkv_inputs(1, 2, q_len=9, k_len=13)
    mask = torch.rand(9, 13) > 0.7
    mask[4] = False  # a query with no key at all gives zeros, as torch does
    out = qkv.block_sparse_attention(q, k, v, mask, 4)
    torch.testing.assert_close(out, reference_attention(q, k, v, attn_mask=mask))
    assert (out[..., 4, :] == 0).all()


@pytest.mark.parametrize(("q_len", "k_len", "e"), [(0, 5, 8), (5, 0, 8), (0, 0, 8), (5, 7, 0)])
def test_block_sparse_attention_empty_sizes_follow_torch(q_len, k_len, e):
    q, k, v = qkv_inputs(2, q_len=q_len, k_len=k_len, e=e)
    mask = torch.rand(q_len, k_len) > 0.3
    torch.testing.assert_close(
        qkv.block_sparse_attention(q, k, v, mask, 2), reference_attention(q, k, v, attn_mask=mask)
    )


def test_block_layout_skips_empty_tiles():
    mask = qkv.sparse_mask("longformer", 64, 4)  # a band: only tiles on and beside the diagonal
    layout = qkv.block_layout(mask, 16)
    assert layout.int().tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [0, 1, 1, 1],
        [0, 0, 1, 1],
    ]


def test_sparse_mask_rejects_unknown_pattern_and_misplaced_options():
    with pytest.raises(ValueError, match="pattern must be one of"):
        qkv.sparse_mask("dilated", 8, 2)
    with pytest.raises(ValueError, match="no global tokens"):
        qkv.sparse_mask("strided", 8, 2, num_global=1)
    with pytest.raises(ValueError, match="only bigbird"):
        qkv.sparse_mask("longformer", 8, 2, num_random=1)
    with pytest.raises(TypeError, match="window must be an int"):
        qkv.sparse_mask("fixed", 8, 2.0)


def test_block_sparse_attention_rejects_a_mask_that_does_not_fit():
    q, k, v = qkv_inputs(1, q_len=4)
    with pytest.raises(ValueError, match=r"mask must be \(L, S\) = \(4, 4\), got \(4, 5\)"):
        qkv.block_sparse_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        qkv.block_sparse_attention(q, k, v, torch.ones(4, 4))


# --- axial --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", ["row", "column"])
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 5), (4, 4)])
def test_axial_attention_equals_dense_attention_under_its_mask(axis, rows, cols):
    q, k, v = qkv_inputs(2, rows, q_len=cols)  # (B, R, C, E) grids
    flat = [x.flatten(-3, -2) for x in (q, k, v)]  # (B, R C, E), row-major
    expected = reference_attention(*flat, attn_mask=qkv.axial_mask(rows, cols, axis))
    out = qkv.axial_attention(q, k, v, axis)
    torch.testing.assert_close(out.flatten(-3, -2), expected)


def test_rows_then_columns_reach_every_position():
    row, column = qkv.axial_mask(3, 4, "row").int(), qkv.axial_mask(3, 4, "column").int()
    assert row.sum() == 12 * 4
    assert column.sum() == 12 * 3
    assert ((column @ row) > 0).all()  # two layers: every position depends on every other


def test_axial_attention_rejects_unknown_axis_and_grids_that_differ():
    q, k, v = qkv_inputs(2, 3, q_len=4)
    with pytest.raises(ValueError, match="axis must be one of"):
        qkv.axial_attention(q, k, v, "diagonal")
    with pytest.raises(ValueError, match="share the grid"):
        qkv.axial_attention(q, k[:, :2], v, "row")


def test_axial_attention_reports_the_grids_as_given():
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(3, 2, 3, 4), torch.randn(3, 2, 3, 4)
    with pytest.raises(
        ValueError, match=r"do not broadcast: query \(2, 2, 3, 4\), key \(3, 2, 3, 4\)"
    ):
        qkv.axial_attention(q, k, v, "column")  # not the transposed (..., C, R, E)


# --- linear attention ---------------------------------------------------------------------------------------


def elu_plus_one(x):
    """`elu(x) + 1` by its two branches: `x + 1` above 0, `exp(x)` below."""
    return torch.where(x > 0, x + 1, torch.exp(x))


def quadratic_linear_attention(q, k, v, causal):
    """The quadratic form written out here, independently of the package: phi(q) phi(k)^T, masked, row-normalised."""
    similarity = elu_plus_one(q) @ elu_plus_one(k).transpose(-2, -1)
    if causal:
        similarity = similarity.tril()
    return similarity / similarity.sum(-1, keepdim=True) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "chunk_size"), [(1, 64), (17, 1), (17, 5), (64, 64), (130, 64)])
def test_linear_attention_equals_its_quadratic_form(causal, n, chunk_size):
    q, k, v = qkv_inputs(2, 3, q_len=n)
    out = qkv.linear_attention(q, k, v, causal, chunk_size=chunk_size)
    torch.testing.assert_close(out, quadratic_linear_attention(q, k, v, causal))
    weights = qkv.linear_attention_weights(q, k, causal)
    torch.testing.assert_close(out, weights @ v)


def test_linear_attention_cross_attention():
    q, k, v = qkv_inputs(2, q_len=5, k_len=9)
    out = qkv.linear_attention(q, k, v)
    torch.testing.assert_close(out, quadratic_linear_attention(q, k, v, causal=False))


def test_causal_linear_attention_ignores_the_future():
    q, k, v = qkv_inputs(1, q_len=20)
    out = qkv.linear_attention(q, k, v, causal=True, chunk_size=8)
    k2, v2 = k.clone(), v.clone()
    k2[:, 12:], v2[:, 12:] = (
        torch.randn(1, 8, 8, dtype=k.dtype),
        torch.randn(1, 8, 6, dtype=v.dtype),
    )
    torch.testing.assert_close(qkv.linear_attention(q, k2, v2, causal=True)[:, :12], out[:, :12])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_attention_computes_half_precision_in_float32(dtype):
    q, k, v = qkv_inputs(1, 2, q_len=33, dtype=dtype)
    out = qkv.linear_attention(q, k, v, causal=True, chunk_size=8)
    assert out.dtype == dtype
    expected = quadratic_linear_attention(q.double(), k.double(), v.double(), causal=True)
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)


def test_linear_attention_rejects_unknown_feature_map_and_causal_cross_attention():
    q, k, v = qkv_inputs(1, q_len=4)
    with pytest.raises(ValueError, match="feature_map must be one of"):
        qkv.linear_attention(q, k, v, feature_map="relu")
    with pytest.raises(TypeError, match="feature_map must be a name or a callable"):
        qkv.linear_attention(q, k, v, feature_map=3)
    q, k, v = qkv_inputs(1, q_len=4, k_len=6)
    with pytest.raises(ValueError, match="same length"):
        qkv.linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="disagree on the feature size"):
        qkv.linear_attention(q, k[..., :3], v)


@pytest.mark.parametrize(
    ("causal", "q_len", "k_len"), [(False, 0, 0), (False, 0, 5), (False, 5, 0), (True, 0, 0)]
)
def test_linear_attention_empty_sequences_follow_torch(causal, q_len, k_len):
    q, k, v = qkv_inputs(2, q_len=q_len, k_len=k_len)
    out = qkv.linear_attention(q, k, v, causal)
    torch.testing.assert_close(out, reference_attention(q, k, v, is_causal=causal))  # S = 0: zeros
    weights = qkv.linear_attention_weights(q, k, causal)
    assert weights.shape == (2, q_len, k_len)


@pytest.mark.parametrize("function", ["linear_attention", "linear_attention_weights"])
def test_linear_attention_refuses_zero_features(function):
    q, k, v = qkv_inputs(2, q_len=5, e=0)
    inputs = (q, k, v) if function == "linear_attention" else (q, k)
    with pytest.raises(ValueError, match=r"E >= 1.*query \(2, 5, 0\)"):
        getattr(qkv, function)(*inputs)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_refuses_a_normaliser_lost_to_underflow(causal):
    q, k, v = qkv_inputs(1, q_len=4, dtype=torch.float32)
    q[0, 3] = -200.0  # elu(x) + 1 = exp(-200): 0 in float32 for every feature, so 0 / 0
    with pytest.raises(ValueError, match="normaliser"):
        qkv.linear_attention(q, k, v, causal)
    with pytest.raises(ValueError, match="normaliser"):
        qkv.linear_attention_weights(q, k, causal)
    # float64 reaches exp(-200)
    out = qkv.linear_attention(q.double(), k.double(), v.double(), causal)
    expected = quadratic_linear_attention(q.double(), k.double(), v.double(), causal)
    torch.testing.assert_close(out, expected)


def test_elu_feature_map_keeps_its_digits_far_below_zero():
    x = torch.tensor([-90.0, -50.0, -20.0, -3.0, 0.0, 2.0])
    expected = torch.tensor([math.exp(-90), math.exp(-50), math.exp(-20), math.exp(-3), 1.0, 3.0])
    # relative only: elu(x) + 1 rounds to 0 from about -17 in float32
    torch.testing.assert_close(elu_feature_map(x), expected, rtol=1e-5, atol=0)


def test_linear_attention_refuses_features_that_are_not_positive():
    q, k, v = torch.ones(1, 2, 2), torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]]), torch.randn(1, 2, 3)
    with pytest.raises(ValueError, match="normaliser"):  # phi(q) . (phi(k_1) + phi(k_2)) = 0
        qkv.linear_attention(q, k, v, feature_map=lambda x: x)


# --- Performer ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("orthogonal", [False, True])
def test_performer_features_estimate_the_softmax_kernel(orthogonal):
    generator = torch.Generator().manual_seed(1_000)
    features = qkv.PerformerFeatures(16, 20_000, orthogonal=orthogonal, generator=generator)
    q, k = (
        0.5 * torch.randn(5, 16, dtype=torch.float64),
        0.5 * torch.randn(7, 16, dtype=torch.float64),
    )
    estimate = features(q) @ features(k).T  # stabilisers differ: compare up to one constant
    exact = torch.exp(q @ k.T / 4)
    ratio = estimate / exact
    torch.testing.assert_close(ratio / ratio.mean(), torch.ones_like(ratio), atol=0.1, rtol=0)


def unstabilised_performer(features, x):
    """FAVOR+'s features in float64 straight from the formula, with no constant subtracted."""
    x = x.double() * x.size(-1) ** -0.25
    exponent = x @ features.projection.double().T - (x * x).sum(dim=-1, keepdim=True) / 2
    return torch.exp(exponent) / features.projection.size(0) ** 0.5


def test_performer_stabilisers_are_the_constants_that_cancel():
    features = qkv.PerformerFeatures(8, 32, generator=torch.Generator().manual_seed(1_000))
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    exact = unstabilised_performer(features, x)
    per_sequence = features(x) / exact  # keys: one factor per sequence (B, H)
    torch.testing.assert_close(per_sequence, per_sequence[..., :1, :1].expand_as(per_sequence))
    per_row = features(x, query=True) / exact  # queries: one factor per row
    torch.testing.assert_close(per_row, per_row[..., :1].expand_as(per_row))
    assert not torch.allclose(per_row, per_row[..., :1, :1].expand_as(per_row))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("std", [3, 4])
def test_performer_stays_finite_on_inputs_of_large_norm(std, causal):
    features = qkv.PerformerFeatures(64, 128, generator=torch.Generator().manual_seed(1_000))
    q, k, v = qkv_inputs(1, 2, q_len=32, e=64, ev=8, dtype=torch.float32)
    q, k = std * q, std * k
    similarity = unstabilised_performer(features, q) @ unstabilised_performer(features, k).mT
    if causal:
        similarity = similarity.tril()
    weights = similarity / similarity.sum(dim=-1, keepdim=True)  # the estimator as written, float64
    assert weights.isfinite().all()  # float64's range holds these exponents, float32's does not
    out = qkv.linear_attention(q, k, v, causal, feature_map=features, chunk_size=8)
    assert out.isfinite().all()
    torch.testing.assert_close(out.double(), weights @ v.double(), atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(
        qkv.linear_attention_weights(q, k, causal, feature_map=features).double(),
        weights,
        atol=1e-5,
        rtol=1e-3,
    )


def test_performer_refuses_where_float32_cannot_hold_its_features():
    features = qkv.PerformerFeatures(16, 64, generator=torch.Generator().manual_seed(1_000))
    q, k, v = qkv_inputs(1, q_len=32, e=16, dtype=torch.float32)
    q, k = 16 * q, 16 * k
    with pytest.raises(ValueError, match="normaliser"):
        qkv.linear_attention(q, k, v, causal=True, feature_map=features)
    out = qkv.linear_attention(q.double(), k.double(), v.double(), True, feature_map=features)
    assert out.isfinite().all()


def test_orthogonal_blocks_are_orthogonal():
    features = qkv.PerformerFeatures(8, 20, generator=torch.Generator().manual_seed(1_000))
    directions = torch.nn.functional.normalize(features.projection[:8], dim=-1)
    torch.testing.assert_close(directions @ directions.T, torch.eye(8), atol=1e-5, rtol=0)


def test_performer_error_falls_with_the_number_of_features():
    q, k, v = qkv_inputs(1, 2, q_len=256, e=16, ev=16)
    q, k = 0.5 * q, 0.5 * k
    exact = reference_attention(q, k, v)
    errors = []
    for num_features in (64, 256, 1024, 4096):
        features = qkv.PerformerFeatures(
            16, num_features, generator=torch.Generator().manual_seed(1_000)
        )
        out = qkv.linear_attention(q, k, v, feature_map=features)
        errors.append(((out - exact).norm() / exact.norm()).item())
    # a Monte Carlo estimate: 4x the features should halve the error; ask for at least 1.4x
    assert all(more > 1.4 * fewer for more, fewer in itertools.pairwise(errors))


# --- Linformer ----------------------------------------------------------------------------------------------


def test_linformer_is_softmax_attention_over_projected_keys_and_values():
    q, k, v = qkv_inputs(2, 3, q_len=10, k_len=12)
    projection = qkv.linformer_projection(12, 4, generator=torch.Generator().manual_seed(1_000))
    expected = reference_attention(q, projection.double() @ k, projection.double() @ v)
    torch.testing.assert_close(qkv.linformer_attention(q, k, v, projection), expected)
    identity = torch.eye(12, dtype=torch.float64)
    torch.testing.assert_close(
        qkv.linformer_attention(q, k, v, identity), reference_attention(q, k, v)
    )


def test_linformer_rejects_a_projection_of_the_wrong_length():
    q, k, v = qkv_inputs(1, q_len=10, k_len=12)
    with pytest.raises(ValueError, match=r"projection must be \(K, S\) with S = 12"):
        qkv.linformer_attention(q, k, v, torch.randn(4, 10))


# --- malformed inputs ---------------------------------------------------------------------------------------

Q, K, V = torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 6)
KEEP = torch.ones(5, 5, dtype=torch.bool)
PERFORMER = qkv.PerformerFeatures(8, 16, generator=torch.Generator().manual_seed(1_000))

MALFORMED = {  # what is wrong: the call, the error, what its message must say
    "causal a str": (
        partial(qkv.linear_attention, Q, K, V, "yes"),
        TypeError,
        "causal must be a bool",
    ),
    "causal an int": (
        partial(qkv.linear_attention_weights, Q, K, 1),
        TypeError,
        "causal must be a bool",
    ),
    "unknown feature map": (
        partial(qkv.linear_attention_weights, Q, K, feature_map="relu"),
        ValueError,
        r"feature_map must be one of \('elu',\)",
    ),
    "dtypes differ": (
        partial(qkv.linear_attention, Q, K.double(), V),
        TypeError,
        r"\bq and k disagree on dtype: q torch.float32 vs k torch.float64",
    ),
    "features of another length": (
        partial(qkv.linear_attention, Q, K, V, feature_map=lambda x: x[..., 1:, :]),
        ValueError,
        r"feature_map must map .* query \(2, 5, 8\) -> \(2, 4, 8\)",
    ),
    "no features": (
        partial(qkv.linear_attention, Q, K, V, feature_map=lambda x: x[..., :0]),
        ValueError,
        "feature_map must map .* the same M >= 1",
    ),
    "features in another dtype": (
        partial(qkv.linear_attention, Q, K, V, feature_map=torch.Tensor.double),
        TypeError,
        "feature_map must keep the query's dtype",
    ),
    "Performer of another head_dim": (
        partial(qkv.linear_attention, Q[..., :4], K[..., :4], V, feature_map=PERFORMER),
        ValueError,
        r"PerformerFeatures\(head_dim=8, .* got \(2, 5, 4\)",
    ),
    "Performer given a vector": (partial(PERFORMER, torch.randn(8)), ValueError, "x must have"),
    "Performer given ints": (
        partial(PERFORMER, torch.ones(3, 8, dtype=torch.int64)),
        TypeError,
        "x must be a floating-point tensor",
    ),
    "orthogonal a str": (
        partial(qkv.PerformerFeatures, 8, 16, orthogonal="no"),
        TypeError,
        "orthogonal must be a bool",
    ),
    "generator an int": (
        partial(qkv.PerformerFeatures, 8, 16, generator=3),
        TypeError,
        "generator must be a torch.Generator or None, got int",
    ),
    "no random features": (partial(qkv.PerformerFeatures, 8, 0), ValueError, "num_features must"),
    "sparse_mask's generator a str": (
        partial(qkv.sparse_mask, "bigbird", 8, 1, num_random=2, generator="7"),
        TypeError,
        "generator must be",
    ),
    "linformer's generator an int": (
        partial(qkv.linformer_projection, 8, 2, generator=0),
        TypeError,
        "generator must be",
    ),
    "elu of a str": (partial(elu_feature_map, "x"), TypeError, "x must be a torch.Tensor"),
    "mask on another device": (
        partial(qkv.block_sparse_attention, Q, K, V, KEEP.to("meta")),
        ValueError,
        "mask is on meta but query is on cpu",
    ),
    "mask of another shape": (
        partial(qkv.block_sparse_attention, Q, K, V, KEEP[:, :4]),
        ValueError,
        r"mask must be \(L, S\) = \(5, 5\), got \(5, 4\)",
    ),
    "block_size 0": (
        partial(qkv.block_sparse_attention, Q, K, V, KEEP, 0),
        ValueError,
        "block_size must be positive",
    ),
    "value in another dtype": (
        partial(qkv.block_sparse_attention, Q, K, V.double(), KEEP),
        TypeError,
        "query and value disagree on dtype",
    ),
    "window a bool": (
        partial(qkv.sliding_window_attention, Q, K, V, True),
        TypeError,
        "window must be an int",
    ),
    "unknown axis": (
        partial(qkv.axial_mask, 2, 3, "Row"),
        ValueError,
        r"axis must be one of \('row', 'column'\)",
    ),
}


@pytest.mark.parametrize(("call", "error", "match"), MALFORMED.values(), ids=MALFORMED)
def test_malformed_inputs_raise_errors_that_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
