"""qkv.apply_rope with a scaling rule, fed malformed input: a clear error naming the argument."""

from __future__ import annotations

import pytest
import torch

from qkv.positions import alibi_bias, apply_rope

META = "meta"  # a device with no data: stands in for another device than the CPU
X = torch.randn(2, 3, 5, 8)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}

CASES = {  # case -> (x, positions, options, error, what the message must say)
    "positions of floats": (X, torch.arange(5.0), {}, TypeError, r"positions must be an integer tensor"),
    "positions 2-D": (X, torch.arange(5)[None], {}, ValueError, r"positions must be \(N,\) with N = 5"),
    "positions for another N": (X, torch.arange(4), {}, ValueError, r"positions must be \(N,\) with N = 5"),
    "positions on another device": (X, torch.arange(5, device=META), {}, ValueError, r"positions is on meta but x is on cpu"),
    "positions as a list": (X, list(range(5)), {}, TypeError, r"positions must be a torch\.Tensor"),
    "x of ints": (X.long(), None, {}, TypeError, r"x must be a floating-point tensor"),
    "x 1-D": (X[0, 0, 0], None, {}, ValueError, r"x must have at least 2 dimensions"),
    "x with an odd D": (X[..., :7], None, {}, ValueError, r"x must have an even last dimension D"),
    "a scaling that is a str": (X, None, {"scaling": "yarn"}, TypeError, r"scaling must be a dict or None"),
    "a factor below 1": (X, None, {"scaling": YARN | {"factor": 0.5}}, ValueError, r'scaling\["factor"\] must be at least 1'),
    "interleaved a str": (X, None, {"interleaved": "yes"}, TypeError, r"interleaved must be a bool"),
    "base 0": (X, None, {"base": 0}, ValueError, r"base must be a finite number above 1"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("x", "positions", "options", "error", "match"), CASES.values(), ids=CASES.keys()
)
def test_apply_rope_with_scaling_refuses_malformed_input_by_name(
    x, positions, options, error, match
):
    with pytest.raises(error, match=match):
        apply_rope(x, positions, **{"scaling": YARN} | options)


def test_dynamic_scaling_at_negative_positions_is_plain_rope():
    # below the original length, dynamic NTK changes nothing: that holds for a largest position below 0
    positions = torch.arange(-10, -5)
    torch.testing.assert_close(
        apply_rope(X, positions, scaling=DYNAMIC), apply_rope(X, positions), rtol=0, atol=0
    )


def test_dynamic_scaling_of_no_row_is_empty():
    assert apply_rope(X[..., :0, :], scaling=DYNAMIC).shape == (2, 3, 0, 8)


def test_alibi_bias_refuses_a_device_torch_does_not_know():
    with pytest.raises(ValueError, match=r"device must name a device torch knows, got 'cuda:x'"):
        alibi_bias(2, 3, device="cuda:x")
