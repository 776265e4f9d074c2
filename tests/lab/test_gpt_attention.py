"""qkv_lab.gpt_attention: the recomputed weights are the model's, and ablation switches off what it names."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from qkv.gpt import GPT, GPTConfig
from qkv.masks import Mask
from qkv_lab.gpt_attention import ablated_bits, attention_maps

CONFIGS = [
    GPTConfig(width=32, layers=2, heads=4, kv_heads=2, context=16),  # the site GPT's shape, smaller
    GPTConfig(width=32, layers=2, heads=2, norm="layer", qk_norm=True, context=16),
    GPTConfig(width=32, layers=1, heads=2, positions="learned", context=16),
    GPTConfig(width=32, layers=2, heads=4, kv_heads=2, context=16, sinks=True),
    GPTConfig(
        width=32, layers=2, heads=2, context=16, rope_scaling={"rope_type": "linear", "factor": 2.0}
    ),
]


def model_and_ids(config: GPTConfig) -> tuple[GPT, torch.Tensor]:
    torch.manual_seed(0)
    model = GPT(config).eval()
    for param in model.parameters():  # larger weights than the initial 0.02: sharper, distinct maps
        param.data.normal_(0, 0.3)
    return model, torch.randint(0, config.vocab_size, (2, 12))


@pytest.mark.parametrize(
    "config", CONFIGS, ids=["rope-gqa", "qk-norm", "learned", "sinks", "rope-scaling"]
)
def test_weights_times_values_give_each_blocks_own_attention_output(config):
    model, ids = model_and_ids(config)
    maps = attention_maps(model, ids)  # (layers, B, H, L, L)
    assert maps.shape == (config.layers, 2, config.heads, 12, 12)
    positions, mask = torch.arange(12), Mask(alignment="bottom_right")
    x = model.embed(ids) + (0 if model.position_embed is None else model.position_embed(positions))
    with torch.no_grad():
        for block, weights in zip(model.blocks, maps, strict=True):
            attn, normed = block.attn, block.attn_norm(x)
            v = attn.v_proj(normed).view(2, 12, config.kv_heads, -1).transpose(1, 2)
            v = v.repeat_interleave(config.heads // config.kv_heads, dim=1)  # (B, H, L, D)
            heads = (weights @ v).transpose(1, 2).reshape(2, 12, -1)  # (B, L, H * D)
            assert_close(attn.out_proj(heads), attn(normed, positions, mask))
            x = block(x, positions, mask)


def test_maps_are_causal_rows_that_sum_to_one():
    model, ids = model_and_ids(CONFIGS[0])
    maps = attention_maps(model, ids)
    assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))
    assert (maps.triu(1) == 0).all()
    assert maps[..., 0, 0].eq(1).all()  # the first byte sees itself alone


def test_no_heads_ablated_gives_the_models_own_loss():
    model, ids = model_and_ids(CONFIGS[0])
    bits = ablated_bits(model, ids)  # (B, L - 1)
    nats = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    assert bits.shape == (2, 11)
    assert_close(bits.mean(), nats.detach() / torch.log(torch.tensor(2.0)))


def test_ablating_every_head_of_a_layer_is_zeroing_its_output_projection():
    model, ids = model_and_ids(CONFIGS[0])
    every = ablated_bits(model, ids, [(1, h) for h in range(4)])
    with torch.no_grad():
        model.blocks[1].attn.out_proj.weight.zero_()
    assert_close(every, ablated_bits(model, ids))


def test_one_ablated_head_changes_the_loss_and_the_hook_is_removed():
    model, ids = model_and_ids(CONFIGS[0])
    before = ablated_bits(model, ids)
    assert not torch.allclose(ablated_bits(model, ids, [(0, 1)]), before)
    assert_close(ablated_bits(model, ids), before)


def test_bad_input_is_refused():
    model, ids = model_and_ids(CONFIGS[0])
    with pytest.raises(ValueError, match=r"heads must be \(layer, head\)"):
        ablated_bits(model, ids, [(2, 0)])
    with pytest.raises(TypeError, match=r"model must be a qkv\.gpt\.GPT"):
        attention_maps(torch.nn.Linear(2, 2), ids)
    with pytest.raises(ValueError, match="ALiBi"):
        attention_maps(GPT(GPTConfig(width=32, layers=1, heads=2, positions="alibi")), ids)
    with pytest.raises(ValueError, match=r"ids must be \(B, L\)"):
        attention_maps(model, ids[0])
