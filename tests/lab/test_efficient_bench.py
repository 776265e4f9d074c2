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


def test_the_seed_draws_the_random_matrices_and_nothing_else():
    q, k, v = efficient_bench.inputs(64)
    first, second = efficient_bench.methods(64, seed=0), efficient_bench.methods(64, seed=1)
    for name in ("performer", "linformer"):
        assert not torch.allclose(first[name](q, k, v), second[name](q, k, v))
    for name in ("exact", "sliding-window", "block-sparse", "linear"):
        torch.testing.assert_close(first[name](q, k, v), second[name](q, k, v))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QKV_CACHE", str(tmp_path))
    return tmp_path


def test_relative_errors_depend_on_the_seed_and_are_remembered(cache):
    errors = efficient_bench.relative_errors(256, "local", seed=1)
    (kept,) = cache.glob("relative_errors-*.pt")
    assert torch.load(kept, weights_only=True) == errors
    assert errors["sliding-window"] < 0.05 < errors["linear"]  # the weight is local
    other = efficient_bench.relative_errors(256, "local", seed=2)
    assert other["mean-of-values"] != errors["mean-of-values"]  # other inputs


def test_performer_errors_fall_with_more_features_for_every_seed(cache):
    for seed in range(3):
        errors = efficient_bench.performer_errors(256, [16, 256, 4096], seed=seed)
        assert errors == sorted(errors, reverse=True), seed
        assert errors[-1] < 0.5 * errors[0]
