"""qkv_lab.recall: the recall task's sequences, the three models, a tiny sweep, and the recorded report."""

import pytest
import torch

import qkv
from qkv_lab import recall
from qkv_lab.recall import MIXERS, RecallModel, mqar_batch, run
from qkv_lab.results import recorded


def test_each_asked_key_is_followed_by_the_value_it_was_shown_with():
    tokens, targets = mqar_batch(5, 6, torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (5, 24)
    for row, target in zip(tokens.tolist(), targets.tolist(), strict=True):
        shown = dict(zip(row[0:12:2], row[1:12:2], strict=True))
        assert len(shown) == 6  # distinct keys
        assert all(key < 32 <= value < 64 for key, value in shown.items())
        asked = row[12::2]
        assert sorted(asked) == sorted(shown)  # every key asked once
        assert row[13::2] == [shown[key] for key in asked]
        expected = [-1] * 12 + [x for key in asked for x in (shown[key], -1)]
        assert target == expected


@pytest.mark.parametrize("kind", MIXERS)
def test_a_model_sees_only_the_tokens_before(kind):
    torch.manual_seed(0)
    model = RecallModel(kind, width=16, heads=2, layers=1)
    tokens, _ = mqar_batch(2, 4, torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % recall.VOCAB
    with torch.no_grad():
        logits, after = model(tokens), model(changed)
    assert logits.shape == (2, 16, recall.VOCAB)
    torch.testing.assert_close(logits[:, :10], after[:, :10])
    assert not torch.allclose(logits[:, 10:], after[:, 10:])


def test_the_sweep_reports_every_mixer_and_seed(monkeypatch, tmp_path):
    monkeypatch.setattr(recall, "TEST_SEQUENCES", 8)
    out = tmp_path / "recall.json"
    report = run(MIXERS, (0, 1), steps=2, batch=4, lr=1e-3, pairs=4, out=out)
    assert out.is_file()
    assert report["task"] == {"vocab": 64, "pairs": 4, "length": 16, "test_sequences": 8}
    assert report["cpu_threads"] == 1
    for kind in MIXERS:
        entry = report["mixers"][kind]
        assert len(entry["accuracy"]) == len(entry["seconds"]) == 2
        assert all(0 <= a <= 1 for a in entry["accuracy"])


def test_the_state_sizes_are_what_the_mixers_keep():
    head_dim = recall.WIDTH // recall.HEADS
    q = torch.randn(1, recall.HEADS, 3, head_dim)
    g, beta = torch.zeros(1, recall.HEADS, 3), torch.ones(1, recall.HEADS, 3)
    _, state = qkv.gated_delta_rule(q, q, q, g, beta, output_final_state=True)
    report = recorded("recall")
    sizes = {kind: entry["state_floats_per_layer"] for kind, entry in report["mixers"].items()}
    assert sizes["gated-delta"] == state.numel()
    assert sizes["linear"] == state.numel() + recall.HEADS * head_dim  # S and z
    length = report["task"]["length"]
    assert sizes["softmax"] == 2 * length * recall.WIDTH  # every key and value


def test_the_recorded_report_holds_three_seeds_of_every_mixer_at_the_modules_settings():
    report = recorded("recall")
    assert report["seeds"] == list(recall.SEEDS)
    assert (report["steps"], report["batch"], report["lr"]) == (
        recall.STEPS,
        recall.BATCH,
        recall.LR,
    )
    assert report["model"] == {
        "width": recall.WIDTH,
        "heads": recall.HEADS,
        "layers": recall.LAYERS,
        "conv": 4,
    }
    assert report["task"]["pairs"] == recall.PAIRS
    assert report["cpu_threads"] == 1
    assert set(report["mixers"]) == set(MIXERS)
    for entry in report["mixers"].values():
        assert len(entry["accuracy"]) == len(recall.SEEDS)
        assert entry["parameters"] > 0
