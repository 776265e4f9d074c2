"""The last-seen task, the model of each positional scheme, and the remembered accuracies."""

from pathlib import Path

import pytest
import torch

from qkv_lab import extrapolation


def test_the_target_is_the_latest_value_token_so_far() -> None:
    tokens, target = extrapolation.last_seen_batch(torch.Generator().manual_seed(0), 16, 40)
    assert tokens.shape == target.shape == (16, 40)
    assert int(tokens.max()) <= extrapolation.VALUES
    for row, expected in zip(tokens.tolist(), target.tolist(), strict=True):
        latest = -100  # nothing to answer before the first value token
        for token, answer in zip(row, expected, strict=True):
            latest = token if token else latest
            assert answer == latest


@pytest.mark.parametrize("scheme", extrapolation.SCHEMES)
def test_every_scheme_is_causal(scheme: str) -> None:
    model = extrapolation.LastSeenModel(scheme)
    tokens = torch.randint(0, extrapolation.VALUES + 1, (2, 12))
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % (extrapolation.VALUES + 1)
    logits = model(tokens)
    assert logits.shape == (2, 12, extrapolation.VALUES + 1)
    torch.testing.assert_close(model(changed)[:, :8], logits[:, :8])
    assert not torch.allclose(model(changed)[:, 8:], logits[:, 8:])


def test_only_the_schemes_with_positions_see_order() -> None:
    tokens = torch.tensor([[3, 0, 5, 0, 0, 7]])
    swapped = tokens[:, [2, 1, 0, 3, 4, 5]]  # the first value token and the second change places
    for scheme in extrapolation.SCHEMES:
        model = extrapolation.LastSeenModel(scheme)
        same = torch.allclose(model(tokens)[:, -1], model(swapped)[:, -1])
        # with no positions, the last query sees the same set of tokens in both
        assert same == (scheme == "none"), scheme


def test_the_learned_table_ends_at_the_training_length() -> None:
    model = extrapolation.LastSeenModel("learned")
    model(torch.zeros(1, extrapolation.TRAIN_LENGTH, dtype=torch.long))
    with pytest.raises(IndexError):
        model(torch.zeros(1, extrapolation.TRAIN_LENGTH + 1, dtype=torch.long))


def test_accuracies_are_remembered_and_the_same_when_trained_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QKV_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    first = extrapolation.accuracies("alibi", steps=2, seed=3)
    assert torch.get_num_threads() == threads
    assert list(first) == list(extrapolation.TEST_LENGTHS)
    assert all(0 <= accuracy <= 1 for accuracy in first.values())
    (kept,) = tmp_path.glob("accuracies-*.pt")
    assert torch.load(kept, weights_only=True) == first
    kept.unlink()
    assert extrapolation.accuracies("alibi", steps=2, seed=3) == first  # trained again
    learned = extrapolation.accuracies("learned", steps=2, seed=3)
    assert list(learned) == [extrapolation.TRAIN_LENGTH]  # no rows past it


def test_training_learns_the_task_with_positions() -> None:
    model = extrapolation.train("rope", steps=60, seed=0)
    assert extrapolation.accuracy(model, extrapolation.TRAIN_LENGTH) > 0.8
    assert not model.training
