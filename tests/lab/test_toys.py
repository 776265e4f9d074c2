"""The toy tasks, the head scores, and what the toy models learn (behaviour, not bit-exact numbers)."""

import pytest
import torch

import qkv
from qkv_lab import toys


def test_reverse_task_targets_are_the_source_reversed():
    source, target = toys.reverse_task(3, 5, 7, torch.Generator().manual_seed(0))
    assert source.shape == target.shape == (3, 5)
    assert torch.equal(target, source[:, [4, 3, 2, 1, 0]])
    assert int(source.max()) < 7


def test_repeated_segments_repeat_n_distinct_tokens():
    tokens, n = toys.repeated_segments(64, 24, 32, torch.Generator().manual_seed(0))
    assert tokens.shape == (64, 24)
    assert n.shape == (64,)
    assert set(n.tolist()) == set(range(3, 13))  # every length from 3 to N / 2 appears
    for row, m in zip(tokens, n.tolist(), strict=True):
        assert len(row[:m].unique()) == m  # distinct, so each token's next one is unambiguous
        assert torch.equal(row[m : 2 * m], row[:m])


def test_predictable_marks_the_second_copy_but_its_last_token():
    expected = torch.tensor([[False] * 3 + [True] * 2 + [False] * 3])  # n = 3: t = 3, 4
    assert torch.equal(toys.predictable(torch.tensor([3]), 8), expected)


def test_scores_are_one_for_heads_that_do_exactly_that():
    n, length = torch.tensor([3, 4]), 8
    previous = torch.zeros(2, 1, length, length)  # (B, H, N, N): every query on the token before it
    previous[:, :, 0, 0] = 1
    previous[:, :, torch.arange(1, length), torch.arange(length - 1)] = 1
    induction = torch.eye(length).repeat(2, 1, 1, 1)  # (B, H, N, N): each query on itself ...
    for b, m in enumerate(
        n.tolist()
    ):  # ... but the repeated ones, on the token after the first copy
        t = torch.arange(m, 2 * m - 1)
        induction[b, 0, t] = 0
        induction[b, 0, t, t - m + 1] = 1
    assert toys.previous_token_scores(previous, n).tolist() == [1.0]
    assert toys.induction_scores(induction, n).tolist() == [1.0]
    assert toys.induction_scores(previous, n).tolist() == [0.0]
    assert toys.previous_token_scores(induction, n).tolist() == [0.0]


def test_models_reject_bad_sizes():
    with pytest.raises(ValueError, match="dim"):
        toys.ReverseAligner(10, 8, 0)
    with pytest.raises(ValueError, match="embed_dim"):
        toys.AttentionOnly(32, 24, dim=10, heads=4)


def test_training_leaves_the_thread_count_alone():
    threads = torch.get_num_threads()
    toys.train_aligner(steps=1)
    assert torch.get_num_threads() == threads


def test_training_is_deterministic():
    a, b = toys.train_aligner(steps=5), toys.train_aligner(steps=5)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


SEEDS = range(5)  # the seeds the articles report; every claim holds for each


@pytest.mark.parametrize("seed", SEEDS)
def test_aligner_learns_the_anti_diagonal(seed):
    run = toys.measure_aligner(seed)
    assert run["accuracy"] == 1
    assert run["reads"] == 1  # step i reads source position 7 - i
    assert run["on_anti_diagonal"] > 0.95
    assert run["b_trained"] > 5 * run["b_start"]  # sharp weights need a larger v_a


def test_head_removed_takes_away_that_heads_write_and_nothing_else():
    layer, x = qkv.MultiHeadAttention(8, 2), torch.randn(1, 5, 8)  # heads of width 4
    weight = layer.out_proj.weight.detach().clone()
    with torch.no_grad():
        whole = layer(x)
        with toys.head_removed(layer, 0):
            only_1 = layer(x)
        with toys.head_removed(layer, 1):
            only_0 = layer(x)
        assert torch.equal(layer.out_proj.weight, weight)  # given back on leaving
        # sum_i head_i W_O^i + b, each head's write counted once
        torch.testing.assert_close(only_0 + only_1, whole + layer.out_proj.bias)
        layer.v_proj.weight[:4] += 1  # head 0's values: none reach the output without head 0
        with toys.head_removed(layer, 0):
            torch.testing.assert_close(layer(x), only_1)
        assert not torch.allclose(layer(x), whole)


def test_head_removed_gives_the_weight_back_after_an_error():
    layer = qkv.MultiHeadAttention(8, 2)
    weight = layer.out_proj.weight.detach().clone()
    with pytest.raises(RuntimeError), toys.head_removed(layer, 1):
        raise RuntimeError
    assert torch.equal(layer.out_proj.weight, weight)


@pytest.mark.parametrize("seed", SEEDS)
def test_induction_model_predicts_the_repeat(seed):
    assert toys.measure_induction(seed)["accuracy"] > 0.9  # chance: 1 / 32


@pytest.mark.parametrize("seed", SEEDS)
def test_layer_1_has_a_previous_token_head_and_layer_2_induction_heads(seed):
    run = toys.measure_induction(seed)
    assert max(run["previous_1"]) > 0.95 > 0.55 > min(run["previous_1"])  # one of the two
    assert min(run["induction_2"]) > 0.84  # both
    assert max(run["induction_1"]) < 0.2  # one layer cannot do it
    assert max(run["previous_2"]) < 0.35


@pytest.mark.parametrize("seed", SEEDS)
def test_removing_the_previous_token_head_breaks_induction(seed):
    run = toys.measure_induction(seed)
    head = run["previous_1"].index(max(run["previous_1"]))
    assert run["without_1"][head] < 0.35
    assert run["accuracy"] - run["without_1"][1 - head] < 0.03  # the other head: little
