"""qkv_lab.sparse_run: each piece on a tiny model or a hand-made case, and the recorded report."""

import math

import pytest
import torch
from torch.testing import assert_close

import qkv
from qkv.gpt import GPT, GPTConfig
from qkv_lab.gpt_training import bits_per_byte
from qkv_lab.results import recorded
from qkv_lab.sparse_run import (
    SCHEMES,
    Settings,
    attention_mass,
    choosers,
    dense_layers,
    distillation_loss,
    held_mass,
    kept,
    new_indexers,
    random_scores,
    sparse_bits_per_byte,
    sparse_logits,
    train_indexers,
    window_scores,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py

TINY = GPTConfig(vocab_size=19, width=16, layers=2, heads=4, kv_heads=2, context=12)
SMALL = Settings(
    top_ks=(3,), seeds=(0,), indexer_heads=2, indexer_dim=4, steps=60, batch=4, lr=1e-2
)


def tiny_model(seed: int = 0) -> GPT:
    """A float32 GPT with weights of N(0, 0.3^2) (norms around 1): sharp, distinct heads."""
    torch.manual_seed(seed)
    model = GPT(TINY)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "norm" in name else 0.0, 0.3)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model.eval()


def ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(19, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_distillation_loss_is_the_kl_divergence_to_the_head_summed_weights():
    generator = torch.Generator().manual_seed(0)
    causal = qkv.causal_mask(5, 5)
    weights = torch.rand(2, 3, 5, 5, generator=generator).masked_fill(~causal, 0)
    weights = weights / weights.sum(-1, keepdim=True)  # (B, H, L, S), rows sum to 1
    scores = torch.randn(2, 5, 5, generator=generator).masked_fill(~causal, -math.inf)
    expected = 0.0
    for b in range(2):
        for row in range(5):
            p = weights[b, :, row, : row + 1].mean(0)  # the heads' mean, over the past
            q = torch.softmax(scores[b, row, : row + 1], dim=-1)
            expected += (p * (p / q).log()).sum() / 10
    assert_close(distillation_loss(scores, weights), expected)
    matched = weights.mean(1).log()  # softmax of these is the target itself
    assert distillation_loss(matched, weights).abs() < 1e-6


def held_out_loss(model, indexers):
    """The summed distillation loss of `indexers` on windows that training never draws."""
    with torch.no_grad():
        layers = dense_layers(model, ids(8, 12, seed=5))
        return sum(distillation_loss(i(h), w) for i, (h, w) in zip(indexers, layers, strict=True))


def test_indexer_scores_are_causal_and_training_lowers_the_loss():
    model = tiny_model()
    h, _ = dense_layers(model, ids(2, 12))[0]
    torch.manual_seed(0)
    fresh = new_indexers(model, SMALL)  # the weights train_indexers starts from
    scores = fresh[0](h)
    assert scores.shape == (2, 12, 12)
    assert scores.isinf().equal(~qkv.causal_mask(12, 12).expand(2, 12, 12))
    trained, losses = train_indexers(model, ids(1, 400)[0], SMALL, seed=0)
    assert len(losses) == SMALL.steps
    assert held_out_loss(model, trained) < 0.8 * held_out_loss(model, fresh)


def test_dense_layers_weights_give_the_models_own_output():
    model, x = tiny_model(), ids(2, 12)
    layers = dense_layers(model, x)
    assert len(layers) == TINY.layers
    h, weights = layers[0]
    assert weights.shape == (2, 4, 12, 12)
    assert_close(weights.sum(-1), torch.ones(2, 4, 12))
    assert_close(h, model.blocks[0].attn_norm(model.embed(x)))


def test_the_window_keeps_the_last_k_keys():
    keep = kept(window_scores(6)[None], 3)  # (1, 1, L, S)
    rows = torch.arange(6)[:, None]
    expected = (torch.arange(6)[None, :] <= rows) & (torch.arange(6)[None, :] > rows - 3)
    assert keep[0, 0].equal(expected)


def test_random_keys_are_k_of_the_past():
    keep = kept(random_scores(4, 10, torch.Generator().manual_seed(0)), 3)[:, 0]
    assert not (keep & ~qkv.causal_mask(10, 10)).any()  # nothing in the future
    assert keep.sum(-1).equal(torch.arange(1, 11).clamp(max=3).expand(4, 10))
    assert not keep[0].equal(keep[1])  # drawn anew for each window


def test_held_mass_averages_the_queries_past_k():
    weights = torch.zeros(1, 2, 4, 4)
    weights[0, :, :, 0] = 1.0  # every query on key 0
    weights[0, 1, 3] = torch.tensor([0.25, 0.25, 0.25, 0.25])
    keep = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    keep[..., 0] = True
    # queries 2 and 3 only: head 0 holds 1 and 1, head 1 holds 1 and 0.25
    assert_close(held_mass(weights, keep, 2), torch.tensor([[1.0, 0.625]]))


def test_sparse_logits_keeping_every_key_is_the_dense_model():
    model, x = tiny_model(), ids(3, 12)
    everything = sparse_logits(model, x, lambda layer, h: torch.tensor(True))
    assert_close(everything, model(x))
    indexers = new_indexers(model, SMALL)
    generator = torch.Generator().manual_seed(0)
    for choose in choosers(indexers, 12, generator).values():  # k = L: every key
        assert_close(sparse_logits(model, x, choose), model(x))
    few = choosers(indexers, 2, generator)["window"]
    assert not torch.allclose(sparse_logits(model, x, few), model(x))


def test_sparse_bits_per_byte_with_every_key_is_the_dense_loss():
    model = tiny_model()
    validation = ids(1, 40)[0]
    indexers = new_indexers(model, SMALL)
    choose = choosers(indexers, 12, torch.Generator().manual_seed(0))["indexer"]
    assert math.isclose(
        sparse_bits_per_byte(model, validation, choose),
        bits_per_byte(model, validation),
        rel_tol=1e-5,
    )


def test_the_ceiling_holds_at_least_as_much_as_any_choice():
    model = tiny_model()
    indexers = new_indexers(model, SMALL)
    mass = attention_mass(model, indexers, ids(5, 12), 3, torch.Generator().manual_seed(0))
    assert set(mass) == set(SCHEMES)
    for name in SCHEMES:
        assert len(mass[name]) == TINY.layers
        for ceiling, other in zip(mass["ceiling"], mass[name], strict=True):
            assert 0 < other <= ceiling + 1e-6 <= 1 + 1e-6


def test_the_recorded_report_holds_every_measurement():
    report = recorded("sparse-attention")
    settings = report["settings"]
    seeds, layers = len(settings["seeds"]), report["model"]["config"]["layers"]
    assert len(report["distillation_loss"]) == len(report["seconds"]) == seeds
    assert set(report["top_k"]) == {str(k) for k in settings["top_ks"]}
    for where in report["top_k"].values():
        assert set(where["mass"]) == set(SCHEMES)
        for per_seed in where["mass"].values():
            assert len(per_seed) == seeds
            assert all(len(per_layer) == layers for per_layer in per_seed)
        assert set(where["bits_per_byte"]) == {"indexer", "window", "random"}
        assert all(len(bits) == seeds for bits in where["bits_per_byte"].values())
    assert set(report["bits_per_byte"]) == {"dense"}
    assert set(report["baselines"]) == {"unigram", "bigram", "trigram"}
