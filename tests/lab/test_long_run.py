"""qkv_lab.long_run: the probe's scores on hand-made maps, the watched run, and the recorded report."""

import math

import pytest
import torch
from torch.testing import assert_close

from qkv.gpt import GPT, GPTConfig
from qkv_lab import long_run
from qkv_lab.gpt_attention import ablated_bits
from qkv_lab.gpt_training import SITE_CONFIG, bits_per_byte, encode, split, train_gpt
from qkv_lab.long_run import (
    ALPHABET,
    copy_bits,
    induction_scores,
    previous_byte_scores,
    repeated_random_bytes,
    run,
)
from qkv_lab.results import recorded

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


def test_the_probe_is_random_printable_bytes_repeated_once():
    ids = repeated_random_bytes(3, 10, seed=5)
    assert ids.shape == (3, 20)
    assert torch.equal(ids[:, :10], ids[:, 10:])
    assert bool(((ids >= 32) & (ids <= 126)).all())
    assert torch.equal(ids, repeated_random_bytes(3, 10, seed=5))
    assert not torch.equal(ids, repeated_random_bytes(3, 10, seed=6))
    assert len(ALPHABET) == 95


def one_hot_maps(length: int, offset: int) -> torch.Tensor:
    """`(1, 1, 1, 2n, 2n)`: query i puts all its weight on key `i - offset` (on itself where that is < 0)."""
    rows = torch.arange(2 * length)
    maps = torch.zeros(1, 1, 1, 2 * length, 2 * length)
    keys = rows - offset
    maps[..., rows, torch.where(keys < 0, rows, keys)] = 1.0
    return maps


def test_a_head_on_the_byte_after_the_twin_scores_one_and_a_previous_byte_head_zero():
    n = 6
    induction = one_hot_maps(n, n - 1)  # query i on key i - n + 1
    previous = one_hot_maps(n, 1)
    assert induction_scores(induction, n).item() == 1.0
    assert induction_scores(previous, n).item() == 0.0
    assert previous_byte_scores(previous).item() == 1.0
    assert previous_byte_scores(induction).item() == 0.0


def test_a_uniform_head_scores_the_mean_of_one_over_the_keys_it_sees():
    n = 5
    causal = torch.ones(2 * n, 2 * n).tril()
    uniform = (causal / causal.sum(-1, keepdim=True))[None, None, None]  # (1, 1, 1, 2n, 2n)
    expected = sum(1 / (i + 1) for i in range(n, 2 * n)) / n  # queries n ... 2n - 1
    assert induction_scores(uniform, n).item() == pytest.approx(expected)
    assert previous_byte_scores(uniform).item() == pytest.approx(
        sum(1 / (i + 1) for i in range(1, 2 * n)) / (2 * n - 1)
    )


def test_copy_bits_are_the_models_bits_on_each_copy():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, width=16, layers=1, heads=2, context=16)).eval()
    ids = repeated_random_bytes(2, 8, seed=1)
    bits = ablated_bits(model, ids)  # (B, 15): entry i is byte i + 1
    first, second = copy_bits(model, ids, 8)
    assert first == pytest.approx(bits[:, :7].mean().item())  # bytes 1 ... 7
    assert second == pytest.approx(bits[:, 8:].mean().item())  # bytes 9 ... 15


TEXT = "Each new token attends to the tokens before it; the block adds what it read. " * 40


TINY = GPTConfig(vocab_size=256, width=16, layers=2, heads=2, context=16)


def test_the_watched_run_is_train_gpts_own_run():
    """The checkpoints measure the weights `train_gpt` reaches, and watching does not change the run."""
    report = run(TEXT, steps=4, every=2, seeds=(0,), config=TINY, batch=2, probe=(3, 8))
    checkpoints = report["runs"][0]["checkpoints"]
    assert [c["step"] for c in checkpoints] == [2, 4]
    train, validation = split(encode(TEXT))
    model, losses = train_gpt(TINY, train, 4, 2, long_run.LR, 0)
    assert checkpoints[-1]["bits_per_byte"] == pytest.approx(bits_per_byte(model, validation))
    assert checkpoints[-1]["train_bits_per_byte"] == pytest.approx(
        sum(losses[2:]) / 2 / math.log(2)
    )
    assert report["tokens_seen"] == 4 * 2 * 16
    layers, heads = TINY.layers, TINY.heads
    for name in ("induction", "previous_byte", "first_byte_weight"):
        assert torch.tensor(checkpoints[-1][name]).shape == (layers, heads)


@pytest.mark.parametrize("gate", [False, True])
def test_the_command_trains_the_site_gpt_with_a_gate_when_asked(monkeypatch, tmp_path, gate):
    trained = []
    monkeypatch.setattr(long_run, "run", lambda *args: trained.append(args[5]))
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    argv = ["--text", str(text), "--out", str(tmp_path / "run.json")] + ["--gate"] * gate
    assert long_run.main(argv) == 0
    assert trained == [GPTConfig(**{**SITE_CONFIG.__dict__, "gate": gate})]


@pytest.fixture(scope="module")
def report():
    return recorded("long-run")


def test_the_recorded_run_states_its_budget_and_settings(report):
    assert GPTConfig(**report["config"]) == SITE_CONFIG  # fields added since: defaults
    assert report["tokens_seen"] == report["steps"] * report["batch"] * report["context"]
    assert report["context"] == SITE_CONFIG.context
    assert report["cpu_threads"] == 1
    assert report["threshold"] == long_run.THRESHOLD
    assert report["probe"] == {
        "sequences": long_run.SEQUENCES,
        "repeat": long_run.REPEAT,
        "seed": long_run.PROBE_SEED,
        "alphabet": [32, 126],
    }
    assert [r["seed"] for r in report["runs"]] == report["seeds"]


def test_the_recorded_checkpoints_are_whole_and_agree_with_the_stated_formation(report):
    layers, heads = SITE_CONFIG.layers, SITE_CONFIG.heads
    for runs in report["runs"]:
        steps = [c["step"] for c in runs["checkpoints"]]
        assert steps == list(range(report["every"], report["steps"] + 1, report["every"]))
        for checkpoint in runs["checkpoints"]:
            for name in ("induction", "previous_byte", "first_byte_weight"):
                scores = torch.tensor(checkpoint[name])
                assert scores.shape == (layers, heads)
                assert bool(((scores >= 0) & (scores <= 1)).all())
            assert 0 < checkpoint["bits_per_byte"] < 8
            assert 0 < checkpoint["train_bits_per_byte"] < 8
        passed = [
            c["step"]
            for c in runs["checkpoints"]
            if torch.tensor(c["induction"]).max() > report["threshold"]
        ]
        assert runs["formed_at"] == (passed[0] if passed else None)


def test_the_uniform_head_is_far_below_the_threshold():
    """The threshold's scale: a head with uniform weights gives about 1/100 to the byte after the twin."""
    n = long_run.REPEAT
    uniform = sum(1 / (i + 1) for i in range(n, 2 * n)) / n
    assert round(uniform, 3) == 0.011
    assert uniform < long_run.THRESHOLD / 30
    assert_close(torch.tensor(uniform), torch.tensor(math.log(2) / n), atol=2e-4, rtol=0)
