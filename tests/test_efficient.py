"""Efficient attention: every exact method equals masked dense attention, every approximation its own formula."""

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qkv
from qkv.efficient import elu_feature_map
from tests.reference import assert_close_to_reference, reference_attention, torch_attention


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


def test_sliding_window_attention_rejects_cross_attention_and_bad_window():
    q, k, v = qkv_inputs(1, q_len=4, k_len=5)
    with pytest.raises(ValueError, match="same length"):
        qkv.sliding_window_attention(q, k, v, 2)
    q, k, v = qkv_inputs(1, q_len=4)
    with pytest.raises(ValueError, match="window must be positive"):
        qkv.sliding_window_attention(q, k, v, 0)


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


# --- linear attention ---------------------------------------------------------------------------------------


def quadratic_linear_attention(q, k, v, causal):
    """The quadratic form written out here, independently of the package: phi(q) phi(k)^T, masked, row-normalised."""
    similarity = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
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
