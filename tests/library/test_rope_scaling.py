"""qkv.rope_frequencies against transformers' own RoPE functions, against the rules written out here, and its errors.

transformers computes the frequencies in float32, qkv in float64: they are compared to float32 round-off
(`FLOAT32`). The rules are also checked against their definitions, as each paper states them, computed here
in another way (per pair, with Python's math), so that a rule that both libraries got wrong would still fail.
"""

from __future__ import annotations

import math

import pytest
import torch

import qkv
from qkv.rope_scaling import RULES

FLOAT32 = {"rtol": 2e-6, "atol": 0.0}
needs_transformers = pytest.mark.xdist_group("transformers")

SCALINGS = [
    pytest.param(None, id="plain"),
    pytest.param({"rope_type": "linear", "factor": 4.0}, id="linear"),
    pytest.param(
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 512},
        id="dynamic",
    ),
    pytest.param(
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, id="yarn"
    ),
    pytest.param(
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
        },
        id="yarn-deepseek-mscale",
    ),
    pytest.param(
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 1024,
            "attention_factor": 1.3,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
        },
        id="yarn-given-factor-untruncated",
    ),
    pytest.param(
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        id="llama3.1",
    ),
    pytest.param(
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        id="llama3.2",
    ),
]


def transformers_frequencies(head_dim, base, scaling, seq_len):
    """transformers' `(inv_freq, attention_factor)` for a Llama config of this head size and rule."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    parameters = {"rope_type": "default", "rope_theta": base} | (scaling or {})
    max_positions = parameters.get("original_max_position_embeddings", 2048)
    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        rope_parameters=parameters,
    )
    if parameters["rope_type"] == "default":
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        return inv_freq, 1.0
    return ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config, "cpu", seq_len=seq_len)


@needs_transformers
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize(("head_dim", "base"), [(64, 10000.0), (128, 500000.0), (16, 10000.0)])
def test_frequencies_equal_transformers(scaling, head_dim, base):
    seq_lens = [None]
    if scaling and scaling["rope_type"] == "dynamic":
        seq_lens = [None, 100, 512, 513, 1500, 4096]  # below, at and past the original length
    for seq_len in seq_lens:
        ours, factor = qkv.rope_frequencies(head_dim, base=base, scaling=scaling, seq_len=seq_len)
        theirs, their_factor = transformers_frequencies(head_dim, base, scaling, seq_len)
        assert ours.dtype == torch.float64
        assert ours.shape == (head_dim // 2,)
        torch.testing.assert_close(ours, theirs.double(), **FLOAT32)
        assert factor == pytest.approx(float(their_factor), rel=1e-12)


def plain(head_dim, base):
    return [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]


def test_linear_divides_every_frequency_by_the_factor():
    ours, factor = qkv.rope_frequencies(32, scaling={"rope_type": "linear", "factor": 4.0})
    assert ours.tolist() == pytest.approx([f / 4 for f in plain(32, 10000.0)], rel=1e-14)
    assert factor == 1.0


def test_ntk_keeps_the_fastest_pair_and_slows_the_slowest_by_the_factor():
    # base' = base * s**(D / (D - 2)): the last pair, exponent (D - 2) / D, slows by exactly s.
    head_dim, s = 64, 8.0
    ours, factor = qkv.rope_frequencies(head_dim, scaling={"rope_type": "ntk", "factor": s})
    before = plain(head_dim, 10000.0)
    assert ours[0].item() == 1.0
    assert before[-1] / ours[-1].item() == pytest.approx(s, rel=1e-12)
    assert factor == 1.0


def test_ntk_is_dynamic_ntk_at_the_length_where_their_factors_meet():
    # dynamic's factor at length T is s T / T0 - (s - 1): it equals s where T / T0 = (2 s - 1) / s.
    s, original = 4.0, 1000
    ntk, _ = qkv.rope_frequencies(32, scaling={"rope_type": "ntk", "factor": s})
    dynamic = {"rope_type": "dynamic", "factor": s, "original_max_position_embeddings": original}
    at, _ = qkv.rope_frequencies(32, scaling=dynamic, seq_len=int(original * (2 * s - 1) / s))
    torch.testing.assert_close(ntk, at, rtol=1e-12, atol=0)


def test_dynamic_changes_nothing_up_to_the_original_length():
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 256}
    for seq_len in (None, 1, 256):
        ours, _ = qkv.rope_frequencies(32, scaling=dynamic, seq_len=seq_len)
        assert ours.tolist() == pytest.approx(plain(32, 10000.0), rel=1e-14)
    longer, _ = qkv.rope_frequencies(32, scaling=dynamic, seq_len=257)
    assert (longer[1:] < torch.tensor(plain(32, 10000.0))[1:]).all()


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_ramps_between():
    # Pair i turns L0 * f_i / (2 pi) times over the original length L0: more than beta_fast (32) turns,
    # kept; fewer than beta_slow (1), divided by the factor. D = 64, base 10^4, L0 = 2048, untruncated.
    head_dim, s, original = 64, 4.0, 2048
    yarn = {
        "rope_type": "yarn",
        "factor": s,
        "original_max_position_embeddings": original,
        "truncate": False,
    }
    ours, factor = qkv.rope_frequencies(head_dim, scaling=yarn)
    for i, (f, before) in enumerate(zip(ours.tolist(), plain(head_dim, 10000.0), strict=True)):
        turns = original * before / (2 * math.pi)
        if turns > 32:
            assert f == pytest.approx(before, rel=1e-14), i
        elif turns < 1:
            assert f == pytest.approx(before / s, rel=1e-14), i
        else:
            assert before / s < f < before, i
    assert factor == pytest.approx(0.1 * math.log(s) + 1)


def test_llama3_bands_follow_the_wavelengths():
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    ours, factor = qkv.rope_frequencies(128, base=500000.0, scaling=scaling)
    for f, before in zip(ours.tolist(), plain(128, 500000.0), strict=True):
        wavelength = 2 * math.pi / before
        if wavelength < 8192 / 4:
            assert f == pytest.approx(before, rel=1e-14)
        elif wavelength > 8192 / 1:
            assert f == pytest.approx(before / 8, rel=1e-14)
        else:
            assert before / 8 <= f <= before
    assert factor == 1.0


def test_apply_rope_with_plain_scaling_is_apply_rope():
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64)
    torch.testing.assert_close(qkv.apply_rope(x, scaling=None), qkv.apply_rope(x), rtol=0, atol=0)


def test_apply_rope_turns_by_the_scaled_frequencies_and_multiplies_by_the_factor():
    # Pair i of row p turns by p * inv_freq[i] (the rotate-half layout), the result times the factor.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    x = torch.randn(1, 2, 11, 16, dtype=torch.float64)
    inv_freq, factor = qkv.rope_frequencies(16, scaling=yarn)
    angles = torch.arange(11, dtype=torch.float64)[:, None] * inv_freq  # (N, D/2)
    pairs = torch.complex(x[..., :8], x[..., 8:]) * torch.polar(torch.ones_like(angles), angles)
    expected = factor * torch.cat([pairs.real, pairs.imag], dim=-1)
    torch.testing.assert_close(qkv.apply_rope(x, scaling=yarn), expected, rtol=1e-12, atol=1e-12)


def test_apply_rope_reads_dynamic_lengths_from_the_positions():
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    x = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    positions = torch.arange(20, 24)  # the last 4 of 24 positions: seq_len 24
    inv_freq, _ = qkv.rope_frequencies(8, scaling=dynamic, seq_len=24)
    angles = positions.double()[:, None] * inv_freq
    pairs = torch.complex(x[..., :4], x[..., 4:]) * torch.polar(torch.ones_like(angles), angles)
    expected = torch.cat([pairs.real, pairs.imag], dim=-1)
    torch.testing.assert_close(qkv.apply_rope(x, positions, scaling=dynamic), expected)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"head_dim": 7}, ValueError, r"head_dim must be even"),
        ({"head_dim": 0}, ValueError, r"head_dim"),
        ({"base": 1.0}, ValueError, r"base must be a finite number above 1"),
        ({"base": "10000"}, TypeError, r"base must be a number"),
        ({"scaling": "yarn"}, TypeError, r"scaling must be a dict or None, got str"),
        ({"scaling": {"rope_type": "ntk-aware", "factor": 2}}, ValueError, r"one of \('default'"),
        ({"scaling": {"type": "linear", "factor": 2}}, ValueError, r'"type" is its old name'),
        ({"scaling": {"rope_type": "yarn", "factor": 2}}, ValueError, r"needs \['original_max"),
        ({"scaling": {"rope_type": "linear"}}, ValueError, r"needs \['factor'\]"),
        ({"scaling": {"rope_type": "linear", "factor": 0.5}}, ValueError, r"at least 1"),
        ({"scaling": {"rope_type": "linear", "factor": "2"}}, TypeError, r"factor\"\] must be a n"),
        (
            {"scaling": {"rope_type": "linear", "factor": 2, "beta_fast": 3}},
            ValueError,
            r"does not read: \['beta_fast'\]",
        ),
        (
            {
                "scaling": {
                    "rope_type": "llama3",
                    "factor": 8,
                    "low_freq_factor": 4,
                    "high_freq_factor": 1,
                    "original_max_position_embeddings": 8192,
                }
            },
            ValueError,
            r"low_freq_factor\"\] must be below",
        ),
        (
            {
                "scaling": {
                    "rope_type": "yarn",
                    "factor": 2,
                    "original_max_position_embeddings": 64,
                    "truncate": 1,
                }
            },
            TypeError,
            r"truncate\"\] must be a bool",
        ),
        (
            {
                "scaling": {
                    "rope_type": "dynamic",
                    "factor": 2,
                    "original_max_position_embeddings": 64.0,
                }
            },
            TypeError,
            r"original_max_position_embeddings",
        ),
        ({"seq_len": -1}, ValueError, r"seq_len"),
    ],
)
def test_bad_arguments_are_refused_by_name(arguments, error, message):
    with pytest.raises(error, match=message):
        qkv.rope_frequencies(**({"head_dim": 16} | arguments))


def test_every_rule_is_tested_against_transformers_or_by_its_definition():
    tested = {param.values[0]["rope_type"] for param in SCALINGS if param.values[0]}
    assert set(RULES) - {"default"} == tested | {
        "ntk"
    }  # ntk: no transformers function, tested above
