"""qkv.positions against references written independently: the formulas as printed, complex rotations, and
the ALiBi slopes that Press et al. (2022) list."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import qkv


def test_sinusoidal_matches_the_formula_entry_by_entry():
    n, dim, base = 7, 6, 10000.0
    table = qkv.sinusoidal_positions(n, dim)
    assert table.shape == (n, dim)
    assert table.dtype == torch.float32
    for p in range(n):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_base_sets_the_wavelength():
    table = qkv.sinusoidal_positions(5, 4, base=4.0)
    # pair 1 turns at 4**(-2/4) = 1/2 radian per position
    torch.testing.assert_close(table[:, 2], (torch.arange(5.0) / 2).sin())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 4, "dim": 5}, ValueError, "dim must be even"),
        ({"n": 4, "dim": 0}, ValueError, "dim must be positive"),
        ({"n": -1, "dim": 4}, ValueError, "n must be non-negative"),
        ({"n": 4.0, "dim": 4}, TypeError, "n must be an int"),
        ({"n": 4, "dim": 4, "base": 1.0}, ValueError, "base must be a finite number above 1"),
        ({"n": 4, "dim": 4, "base": "big"}, TypeError, "base must be a number"),
    ],
)
def test_sinusoidal_rejects_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        qkv.sinusoidal_positions(**kwargs)


def rope_by_complex_numbers(x, positions, base, interleaved):
    """The rotation written with complex numbers: channel pair i is one number times exp(i * p * theta_i)."""
    dim = x.size(-1)
    theta = base ** (-torch.arange(dim // 2, dtype=torch.float64) * 2 / dim)  # (D/2,)
    turn = torch.polar(
        torch.ones(len(positions), dim // 2, dtype=torch.float64), positions[:, None] * theta
    )
    x = x.double()
    if interleaved:
        pairs = torch.complex(x[..., 0::2], x[..., 1::2]) * turn
        return torch.stack([pairs.real, pairs.imag], dim=-1).flatten(-2)
    half = dim // 2
    pairs = torch.complex(x[..., :half], x[..., half:]) * turn
    return torch.cat([pairs.real, pairs.imag], dim=-1)


@pytest.mark.parametrize("interleaved", [False, True], ids=["rotate-half", "interleaved"])
@given(
    length=st.integers(1, 9),
    half=st.integers(1, 8),
    start=st.integers(0, 5000),
    base=st.sampled_from([10000.0, 500000.0, 10.0]),
)
def test_rope_matches_a_complex_rotation(interleaved, length, half, start, base):
    x = torch.randn(2, 3, length, 2 * half, dtype=torch.float64)
    positions = torch.arange(start, start + length)
    out = qkv.apply_rope(x, positions, base=base, interleaved=interleaved)
    torch.testing.assert_close(out, rope_by_complex_numbers(x, positions, base, interleaved))


def test_rope_default_positions_count_from_zero():
    x = torch.randn(4, 8)
    torch.testing.assert_close(qkv.apply_rope(x), qkv.apply_rope(x, torch.arange(4)))
    torch.testing.assert_close(qkv.apply_rope(x)[0], x[0])  # position 0: no turn


@pytest.mark.parametrize("interleaved", [False, True], ids=["rotate-half", "interleaved"])
def test_rope_score_depends_on_the_offset_only(interleaved):
    q, k = torch.randn(2, 16, dtype=torch.float64)

    def score(m, n):
        q_m = qkv.apply_rope(q[None], torch.tensor([m]), interleaved=interleaved)
        k_n = qkv.apply_rope(k[None], torch.tensor([n]), interleaved=interleaved)
        return (q_m @ k_n.T).item()

    for offset in (0, 3, -5):
        scores = [score(n + offset, n) for n in (0, 7, 100, 4096)]
        assert max(scores) - min(scores) < 1e-9
    assert abs(score(3, 0) - score(0, 3)) > 1e-3


def test_rope_layouts_are_a_permutation_of_each_other():
    x = torch.randn(5, 8)
    to_interleaved = torch.tensor(
        [0, 4, 1, 5, 2, 6, 3, 7]
    )  # rotate-half channel order -> interleaved
    torch.testing.assert_close(
        qkv.apply_rope(x)[:, to_interleaved],
        qkv.apply_rope(x[:, to_interleaved], interleaved=True),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_keeps_the_dtype_and_norm(dtype):
    x = torch.randn(3, 6, 8, dtype=dtype)
    out = qkv.apply_rope(x, torch.arange(1000, 1006))
    assert out.dtype == dtype
    torch.testing.assert_close(
        out.float().norm(dim=-1), x.float().norm(dim=-1), atol=0.05, rtol=0.01
    )


@pytest.mark.parametrize(
    ("x", "positions", "error", "match"),
    [
        (torch.randn(2, 4, 7), None, ValueError, r"even last dimension D .* \(2, 4, 7\)"),
        (torch.randn(8), None, ValueError, "at least 2 dimensions"),
        (torch.ones(4, 8, dtype=torch.int64), None, TypeError, "floating-point"),
        (
            torch.randn(2, 4, 8),
            torch.arange(5),
            ValueError,
            r"N = 4 rows of x \(2, 4, 8\), got \(5,\)",
        ),
        (torch.randn(2, 4, 8), torch.arange(8).view(2, 4), ValueError, r"got \(2, 4\)"),
        (torch.randn(2, 4, 8), torch.arange(4.0), TypeError, "integer tensor"),
        (torch.randn(2, 4, 8), [0, 1, 2, 3], TypeError, "positions must be a torch.Tensor"),
    ],
)
def test_rope_rejects_bad_input(x, positions, error, match):
    with pytest.raises(error, match=match):
        qkv.apply_rope(x, positions)


def test_alibi_slopes_for_8_heads_are_the_papers():
    # Press et al. (2022), section 3: for 8 heads, 1/2^1, 1/2^2, ..., 1/2^8
    expected = torch.tensor([1 / 2**k for k in range(1, 9)])
    torch.testing.assert_close(qkv.alibi_slopes(8), expected, rtol=0, atol=0)


def test_alibi_slopes_for_16_heads_interleave():
    # the paper: 16 heads take the geometric average of each consecutive pair of the 8-head slopes,
    # 1/2^0.5, 1/2^1, 1/2^1.5, ..., 1/2^8
    expected = torch.tensor([2 ** (-k / 2) for k in range(1, 17)])
    torch.testing.assert_close(qkv.alibi_slopes(16), expected)


def test_alibi_slopes_for_12_heads_follow_the_rule_for_non_powers_of_two():
    # the 8 slopes of 8 heads, then 4 slopes of 16 heads that fall between them: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    expected = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    torch.testing.assert_close(qkv.alibi_slopes(12), torch.tensor(expected))


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 7, 12, 24, 40])
def test_alibi_slopes_are_distinct_and_in_0_1(heads):
    slopes = qkv.alibi_slopes(heads)
    assert slopes.shape == (heads,)
    assert (slopes > 0).all()
    assert (slopes < 1).all()
    assert len(set(slopes.tolist())) == heads


@pytest.mark.parametrize("heads", [0, -2])
def test_alibi_slopes_reject_no_heads(heads):
    with pytest.raises(ValueError, match="num_heads must be positive"):
        qkv.alibi_slopes(heads)


def test_alibi_bias_is_minus_slope_times_distance():
    bias = qkv.alibi_bias(2, 3, 5)  # (H, L, S)
    slopes = qkv.alibi_slopes(2)
    for h in range(2):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * (i - j))


def test_alibi_bias_bottom_right_puts_the_last_query_on_the_last_key():
    bias = qkv.alibi_bias(4, 2, 6, alignment="bottom_right")
    assert (bias[:, -1, -1] == 0).all()
    assert (bias[:, 0, -2] == 0).all()
    torch.testing.assert_close(bias, qkv.alibi_bias(4, 6)[:, -2:])


def test_alibi_bias_with_a_causal_mask_matches_a_direct_computation():
    heads, length = 4, 6
    q, k, v = torch.randn(3, 1, heads, length, 8, dtype=torch.float64)
    mask = qkv.alibi_bias(heads, length).double() + qkv.keep_to_additive(
        qkv.causal_mask(length), torch.float64
    )
    out = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    scores = q @ k.transpose(-2, -1) / 8**0.5 - qkv.alibi_slopes(heads).double()[:, None, None] * (
        i - j
    )
    expected = torch.softmax(scores.masked_fill(j > i, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(
        out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )


def test_alibi_bias_rejects_an_unknown_alignment():
    with pytest.raises(ValueError, match="alignment must be one of"):
        qkv.alibi_bias(2, 3, alignment="centre")
