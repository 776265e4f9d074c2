"""qkv_lab.hybrid: the layer order, the floats each layer keeps, causality, a tiny sweep, bad input."""

import pytest
import torch

import qkv
from qkv_lab import hybrid
from qkv_lab.hybrid import MODELS, HybridConfig, HybridLM, cache_floats, run
from qkv_lab.lab_text import read_text, text_record
from qkv_lab.results import recorded

TINY = {"width": 16, "heads": 2, "context": 32}


@pytest.mark.parametrize("name", MODELS)
def test_the_layers_have_the_mixers_in_the_order_given(name):
    model = HybridLM(HybridConfig(MODELS[name], **TINY))
    kinds = [block["mixer"].kind for block in model.blocks]
    assert kinds == list(MODELS[name])


def test_the_hybrid_is_three_gated_delta_layers_then_softmax():
    assert MODELS["hybrid 3:1"] == ("gated-delta", "gated-delta", "gated-delta", "softmax")


def test_the_floats_per_layer_are_what_the_mixers_keep():
    config = HybridConfig(MODELS["hybrid 3:1"], width=16, heads=2)
    n, head_dim = 7, 8
    q = torch.randn(1, 2, n, head_dim)  # one sequence: (B, H, N, D)
    g, beta = torch.zeros(1, 2, n), torch.ones(1, 2, n)
    _, state = qkv.gated_delta_rule(q, q, q, g, beta, output_final_state=True)
    key_and_value = 2 * q.numel()  # a softmax layer's cache: k and v
    assert cache_floats(config, n) == [state.numel()] * 3 + [key_and_value]


def test_the_recorded_sizes_at_full_context():
    # 4 heads of 16 x 16; keys and values of 64 features for 128 tokens
    assert cache_floats(HybridConfig(MODELS["hybrid 3:1"]), 128) == [1024] * 3 + [16_384]


@pytest.mark.parametrize("name", MODELS)
def test_a_model_sees_only_the_bytes_before(name):
    torch.manual_seed(0)
    model = HybridLM(HybridConfig(MODELS[name], **TINY)).eval()
    tokens = torch.randint(256, (2, 20), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 256
    with torch.no_grad():
        logits, after = model(tokens), model(changed)
    assert logits.shape == (2, 20, 256)
    torch.testing.assert_close(logits[:, :12], after[:, :12])
    assert not torch.allclose(logits[:, 12:], after[:, 12:])


def test_the_sweep_reports_every_model_and_seed(monkeypatch, tmp_path):
    for name, value in TINY.items():
        monkeypatch.setattr(hybrid, name.upper(), value)
    text = "".join(f"line {i}: the state and the cache.\n" for i in range(60))
    out = tmp_path / "hybrid.json"
    report = run(MODELS, (0, 1), steps=2, batch=2, lr=1e-3, text=text, out=out)
    assert out.is_file()
    assert report["cpu_threads"] == 1
    assert report["bytes_seen"] == 2 * 2 * 32
    assert set(report["baselines"]) == {"unigram", "bigram", "trigram"}
    assert list(report["models"]) == list(MODELS)
    for name, entry in report["models"].items():
        assert entry["mixers"] == list(MODELS[name])
        assert len(entry["bits_per_byte"]) == len(entry["seconds"]) == 2
        assert all(0 < b < 16 for b in entry["bits_per_byte"])


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="mixers must be among"):
        HybridConfig(("softmax", "linear"))
    with pytest.raises(ValueError, match="at least one layer"):
        HybridConfig(())
    with pytest.raises(ValueError, match="width"):
        HybridConfig(("softmax",), width=10, heads=4)


def test_the_recorded_run_holds_its_snapshots_record_and_every_model_and_seed():
    report = recorded("hybrid")
    record = text_record(read_text(report["text_file"]))
    assert report["text_sha256"] == record["text_sha256"]
    assert report["baselines"] == pytest.approx(record["baselines"], abs=1e-9)
    assert list(report["models"]) == list(MODELS)
    for name, entry in report["models"].items():
        assert entry["mixers"] == list(MODELS[name])
        assert len(entry["bits_per_byte"]) == len(report["seeds"]) == 3
