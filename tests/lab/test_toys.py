"""The toy tasks, the head scores, and what the toy models learn (behaviour, not bit-exact numbers)."""

import pytest
import torch

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


def test_aligner_learns_the_anti_diagonal():
    model = toys.train_aligner()
    source, target = toys.reverse_task(256, 8, 10, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights = model(source)  # (B, S, vocab), (B, S, S)
    assert (logits.argmax(-1) == target).float().mean() > 0.95
    on_anti_diagonal = weights.argmax(-1) == torch.arange(7, -1, -1)  # step i reads 7 - i
    assert on_anti_diagonal.float().mean() > 0.9


@pytest.fixture(scope="module")
def induction_run():
    model = toys.train_induction()
    tokens, n = toys.repeated_segments(512, 24, 32, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights = model(tokens)
    return model, tokens, n, logits, weights


def test_induction_model_predicts_the_repeat(induction_run):
    _, tokens, n, logits, _ = induction_run
    scored = toys.predictable(n, 24)[:, :-1]
    correct = logits[:, :-1].argmax(-1) == tokens[:, 1:]
    assert correct[scored].float().mean() > 0.85  # chance: 1 / 32


def test_layer_1_has_a_previous_token_head_and_layer_2_an_induction_head(induction_run):
    _, _, n, _, (first, second) = induction_run
    assert toys.previous_token_scores(first, n).max() > 0.85
    assert toys.induction_scores(second, n).max() > 0.8
    assert toys.induction_scores(first, n).max() < 0.3  # one layer cannot do it
    assert toys.previous_token_scores(second, n).max() < 0.5


def test_removing_the_previous_token_head_breaks_induction(induction_run):
    model, tokens, n, _, (first, _) = induction_run
    head = int(toys.previous_token_scores(first, n).argmax())
    d = model.layers[0].head_dim
    with torch.no_grad():
        model.layers[0].out_proj.weight[:, head * d : (head + 1) * d] = 0  # its write to the stream
        logits, _ = model(tokens)
    scored = toys.predictable(n, 24)[:, :-1]
    assert (logits[:, :-1].argmax(-1) == tokens[:, 1:])[scored].float().mean() < 0.6
