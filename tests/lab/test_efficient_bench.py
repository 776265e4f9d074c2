"""The efficient-attention benchmark's tools: the fitted exponent and the inputs."""

import pytest
import torch

from qkv_lab import efficient_bench


def test_fit_exponent_recovers_a_power_law():
    ns = [128, 256, 512, 1024]
    assert efficient_bench.fit_exponent(ns, [3 * n**2.5 for n in ns]) == pytest.approx(2.5)
    assert efficient_bench.fit_exponent(ns, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)


def test_local_inputs_put_the_weight_near_the_diagonal():
    q, k, _ = efficient_bench.inputs(256, kind="local")
    weights = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1)  # (B, H, N, N)
    distance = (torch.arange(256)[:, None] - torch.arange(256)).abs()
    assert (weights * (distance <= 32)).sum(-1).mean() > 0.9
    q, k, _ = efficient_bench.inputs(256, kind="diffuse")
    weights = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1)
    assert (weights * (distance <= 32)).sum(-1).mean() < 0.5


def test_inputs_reject_an_unknown_kind():
    with pytest.raises(ValueError, match="kind must be"):
        efficient_bench.inputs(8, kind="sparse")


def test_every_method_runs_and_exact_ones_match():
    q, k, v = efficient_bench.inputs(64)
    outs = {name: attend(q, k, v) for name, attend in efficient_bench.methods(64).items()}
    assert all(out.shape == v.shape for out in outs.values())
    torch.testing.assert_close(outs["exact"], outs["torch-sdpa"], atol=1e-5, rtol=1e-5)
