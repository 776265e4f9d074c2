"""qkv_lab.long_context: each measurement on a hand-made case, the sweep's report, and the recorded one."""

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from qkv.gpt import GPT, GPTConfig
from qkv_lab.long_context import (
    Settings,
    attention_shares,
    by_bucket,
    recomputed_bits,
    run,
    streaming_bits,
    with_context,
)
from qkv_lab.results import recorded

EXACT = {"rtol": 1e-10, "atol": 1e-10}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


def random_model(config: GPTConfig, seed: int = 0) -> GPT:
    """A float64 GPT with weights of N(0, 0.3^2) (norms around 1, sinks around 0): sharp, distinct heads."""
    torch.manual_seed(seed)
    model = GPT(config).double()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "norm" in name else 0.0, 0.3)
    return model.eval()


def bits_of_forward(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """`(B, N - 1)`: the bits of each next byte from the model's own forward over all of `ids`."""
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none") / math.log(2)


TINY = {"vocab_size": 19, "width": 16, "heads": 4, "kv_heads": 2, "context": 32}


@pytest.mark.parametrize(
    "options",
    [{"layers": 2}, {"layers": 2, "sinks": True, "qk_norm": True}],
    ids=["plain", "sinks"],
)
def test_a_stream_that_fits_the_cache_is_the_models_own_forward(options):
    model = random_model(GPTConfig(**TINY, **options))
    ids = torch.randint(19, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = bits_of_forward(model, ids)
    for kept in (0, 4):
        assert_close(streaming_bits(model, ids, window=20, kept=kept), expected, **EXACT)


@pytest.mark.parametrize("kept", [0, 1, 3])
def test_one_layer_streams_through_the_kept_and_recent_tokens_at_their_places_in_the_cache(kept):
    """In one block a token's key and value depend on the token alone, so the cache after byte t holds
    exactly the keys of a fresh sequence: the first `kept` bytes, then the last `window - kept` up to t,
    at positions 0, 1, ...; the model's own forward over that sequence gives the same next byte."""
    model = random_model(GPTConfig(**TINY, layers=1))
    ids = torch.randint(19, (2, 24), generator=torch.Generator().manual_seed(2))
    window = 6
    streamed = streaming_bits(model, ids, window, kept)
    for t in range(ids.size(1) - 1):
        if t + 1 <= window:
            held = ids[:, : t + 1]
        else:
            held = torch.cat([ids[:, :kept], ids[:, t + 1 - (window - kept) : t + 1]], dim=1)
        with torch.no_grad():
            logits = model(held)[:, -1]
        expected = F.cross_entropy(logits, ids[:, t + 1], reduction="none") / math.log(2)
        assert_close(streamed[:, t], expected, **EXACT)


def test_streaming_differs_with_and_without_the_kept_tokens_once_the_cache_is_full():
    model = random_model(GPTConfig(**TINY, layers=2))
    ids = torch.randint(19, (2, 16), generator=torch.Generator().manual_seed(3))
    window = 6
    without, with_kept = (
        streaming_bits(model, ids, window, 0),
        streaming_bits(model, ids, window, 2),
    )
    assert_close(
        without[:, : window - 1], with_kept[:, : window - 1], **EXACT
    )  # nothing evicted yet
    assert not torch.allclose(without[:, window:], with_kept[:, window:])


def test_streaming_refuses_a_model_whose_positions_it_cannot_assign():
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"streaming_bits needs positions='rope'.* got positions='learned'"
    ):
        streaming_bits(GPT(GPTConfig(**TINY, positions="learned")), ids, 4, 1)
    with pytest.raises(ValueError, match="needs softcap=None"):
        streaming_bits(GPT(GPTConfig(**TINY, softcap=5.0)), ids, 4, 1)


def test_recomputed_bits_come_from_the_window_before_each_predicted_byte():
    model = random_model(GPTConfig(**TINY, layers=2))
    ids = torch.randint(19, (2, 30), generator=torch.Generator().manual_seed(4))
    bits = recomputed_bits(model, ids, window=8, every=5)
    with torch.no_grad():
        assert_close(bits[:, :8], bits_of_forward(model, ids[:, :9]), **EXACT)  # bytes 1 to 8
        for p in (13, 18, 23, 28):  # 8 + 5, 8 + 10, ...
            logits = model(ids[:, p - 8 : p])[:, -1]
            expected = F.cross_entropy(logits, ids[:, p], reduction="none") / math.log(2)
            assert_close(bits[:, p - 1], expected, **EXACT)
    predicted = [p for p in range(1, 30) if not bits[:, p - 1].isnan().any()]
    assert predicted == [*range(1, 9), 13, 18, 23, 28]


def test_buckets_average_the_bytes_of_their_positions_and_skip_nan():
    bits = torch.tensor([[1.0, 2.0, 3.0, 4.0, math.nan, 6.0, 7.0]])  # bytes 1 to 7
    assert by_bucket(bits, 3) == [1.5, 3.5, 6.5]  # positions 1-2, 3-5 (5 is NaN), 6-7
    assert by_bucket(torch.ones(2, 8), 4) == [1.0, 1.0, 1.0]


def first_token_favoured(sink_logit: float | None) -> GPT:
    """One block, one head, no positions: every query scores byte 0 at 20, every other byte at 0."""
    config = GPTConfig(
        vocab_size=2,
        width=4,
        layers=1,
        heads=1,
        context=16,
        positions=None,
        sinks=sink_logit is not None,
    )
    model = GPT(config).eval()
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.embed.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))  # byte 0, byte 1
        model.blocks[0].attn_norm.weight.fill_(0.5)  # RMSNorm of a one-hot of width 4: 2 -> 1
        attn.q_proj.weight.copy_(torch.full((4, 4), 0.0).index_fill_(1, torch.tensor([0, 1]), 1.0))
        attn.k_proj.weight.zero_()
        attn.k_proj.weight[:, 0] = 10.0  # byte 0's key: (10, 10, 10, 10); byte 1's: 0
        if sink_logit is not None:
            attn.sinks.fill_(sink_logit)
    return model


def test_the_first_token_weight_of_a_model_whose_scores_favour_it_is_near_one():
    validation = torch.tensor(
        [0] + [1] * 15 + [0] + [1] * 15 + [1, 1]
    )  # two windows, then 2 dropped
    first, sink = attention_shares(first_token_favoured(None), validation)
    assert first.shape == sink.shape == (1, 1)
    assert first.item() > 0.999  # score 20 against 0: e^20 / (e^20 + 15) at the worst
    assert sink.abs().item() < 1e-6
    uniform = torch.tensor([0] * 32)  # byte 0 everywhere: every key scores alike
    assert attention_shares(first_token_favoured(None), uniform)[0].item() == pytest.approx(
        sum(1 / (i + 1) for i in range(1, 16)) / 15
    )


def test_a_large_learned_sink_takes_the_weight_the_first_token_had():
    validation = torch.tensor([0] + [1] * 15)
    first, sink = attention_shares(first_token_favoured(40.0), validation)
    assert first.item() < 1e-6
    assert sink.item() > 0.999


def test_with_context_keeps_the_weights_and_changes_the_positions():
    model = random_model(GPTConfig(**TINY, layers=1))
    scaling = {"rope_type": "linear", "factor": 2.0}
    longer = with_context(model, 64, scaling)
    assert (longer.config.context, longer.config.rope_scaling) == (64, scaling)
    assert all(
        torch.equal(p, q)
        for p, q in zip(model.state_dict().values(), longer.state_dict().values(), strict=True)
    )
    ids = torch.randint(19, (1, 32), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert not torch.allclose(model(ids), longer(ids))  # the rotations are halved


TINY_SETTINGS = Settings(
    config=GPTConfig(vocab_size=256, width=8, layers=1, heads=2, context=8),
    steps=3,
    batch=2,
    seeds=(0, 1),
    stream=32,
    window=8,
    kept=2,
    bucket=8,
    recompute_every=4,
    lengths=(8, 16),
    scalings=(("plain", None), ("linear", {"rope_type": "linear", "factor": 2.0})),
    fine_tune_steps=2,
    fine_tune_batch=2,
)


def test_the_sweep_reports_every_model_seed_and_rule(tmp_path):
    text = "a long context, byte by byte, " * 40  # 1,200 bytes: 120 to validate, 3 streams of 32
    out = tmp_path / "report.json"
    report = json.loads(json.dumps(run(TINY_SETTINGS, text, out)))  # tuples as lists
    assert json.loads(out.read_text()) == report
    assert (report["validation_bytes"], report["streams"], report["cpu_threads"]) == (120, 3, 1)
    assert report["settings"] == json.loads(json.dumps(dataclasses.asdict(TINY_SETTINGS)))
    assert list(report["models"]) == ["plain", "sinks"]
    assert report["models"]["sinks"]["config"]["sinks"] is True
    for model in report["models"].values():
        assert len(model["bits_per_byte"]) == len(model["seconds"]) == 2
        assert all(0 < bits < 9 for bits in model["bits_per_byte"])  # 8: uniform over bytes
        for shares in (model["first_token_weight"], model["sink_weight"]):
            assert torch.tensor(shares).shape == (2, 1, 2)  # seeds, layers, heads
        for buckets in model["streaming"].values():
            assert torch.tensor(buckets).shape == (2, 4)  # seeds, 32 / 8 buckets
    assert list(report["models"]["plain"]["streaming"]) == [
        "sliding window",
        "first 2 kept",
        "recomputed",
    ]
    assert list(report["models"]["sinks"]["streaming"]) == ["sliding window", "first 2 kept"]
    shared = report["models"]["plain"]["recomputed_positions"]  # bytes 12, 16, ..., 28 past 8
    assert list(shared) == ["sliding window", "first 2 kept", "recomputed"]
    assert all(len(means) == 2 for means in shared.values())
    assert "recomputed_positions" not in report["models"]["sinks"]
    assert torch.tensor(report["models"]["plain"]["sink_weight"]).abs().max() < 1e-6
    assert list(report["rope"]) == ["plain", "linear"]
    for rule in report["rope"].values():
        assert (
            torch.tensor(rule["as_trained"]).shape
            == torch.tensor(rule["fine_tuned"]).shape
            == (2, 2)
        )
    plain = report["rope"]["plain"]["as_trained"]
    assert [seed[0] for seed in plain] == report["models"]["plain"][
        "bits_per_byte"
    ]  # 1x: as trained


def test_the_recorded_report_holds_every_measurement_of_the_current_settings():
    report, settings = recorded("long-context"), Settings()
    recorded_settings = dict(report["settings"])  # its model's config is read as a GPTConfig:
    assert (
        GPTConfig(**recorded_settings.pop("config")) == settings.config
    )  # fields added since: defaults
    expected = json.loads(json.dumps(dataclasses.asdict(settings)))
    assert recorded_settings == {
        name: value for name, value in expected.items() if name != "config"
    }
    assert report["cpu_threads"] == 1
    seeds, buckets = len(settings.seeds), settings.stream // settings.bucket
    shape = (seeds, settings.config.layers, settings.config.heads)
    assert list(report["models"]) == ["plain", "sinks"]
    for kind, model in report["models"].items():
        assert GPTConfig(**model["config"]) == dataclasses.replace(
            settings.config, sinks=kind == "sinks"
        )
        assert len(model["bits_per_byte"]) == seeds
        assert torch.tensor(model["first_token_weight"]).shape == shape
        for name, streamed in model["streaming"].items():
            assert torch.tensor(streamed).shape == (seeds, buckets), name
            assert torch.tensor(streamed).isfinite().all()
    shared = report["models"]["plain"]["recomputed_positions"]
    assert list(shared) == list(report["models"]["plain"]["streaming"])
    assert all(len(means) == seeds for means in shared.values())
    assert [name for name, _ in settings.scalings] == list(report["rope"])
    for (_, scaling), rule in zip(settings.scalings, report["rope"].values(), strict=True):
        assert rule["scaling"] == scaling
        for measured in (rule["as_trained"], rule["fine_tuned"]):
            assert torch.tensor(measured).shape == (seeds, len(settings.lengths))
            assert torch.tensor(measured).isfinite().all()
