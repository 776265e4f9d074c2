"""qkv.TransformerBlock against torch's pre-LN TransformerEncoderLayer and TransformerDecoderLayer."""

import pytest
import torch

import qkv

E, H, HIDDEN = 16, 4, 32


def copy_into(block, layer):
    """Give `block` the weights of a torch encoder or decoder layer (norm_first, GELU)."""
    block.self_attn.load_state_dict(qkv.MultiHeadAttention.from_torch(layer.self_attn).state_dict())
    block.attn_norm.load_state_dict(layer.norm1.state_dict())
    if block.cross_attn is not None:
        block.cross_attn.load_state_dict(
            qkv.MultiHeadAttention.from_torch(layer.multihead_attn).state_dict()
        )
        block.cross_norm.load_state_dict(layer.norm2.state_dict())
    block.mlp_norm.load_state_dict(
        (layer.norm3 if block.cross_attn is not None else layer.norm2).state_dict()
    )
    block.mlp[0].load_state_dict(layer.linear1.state_dict())
    block.mlp[3].load_state_dict(layer.linear2.state_dict())


def torch_layer(cross):
    kind = torch.nn.TransformerDecoderLayer if cross else torch.nn.TransformerEncoderLayer
    return (
        kind(E, H, HIDDEN, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        .double()
        .eval()
    )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_encoder_block_matches_torch(causal):
    layer = torch_layer(cross=False)
    block = qkv.TransformerBlock(E, H, mlp_ratio=HIDDEN / E).double().eval()
    copy_into(block, layer)
    x = torch.randn(2, 5, E, dtype=torch.float64)
    ignore = torch.tensor([[False] * 5, [False, False, False, True, True]])
    mask = (
        torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
        if causal
        else None
    )
    expected = layer(
        x,
        src_mask=mask,
        src_key_padding_mask=qkv.keep_to_additive(~ignore, torch.float64),
        is_causal=causal,
    )
    torch.testing.assert_close(block(x, is_causal=causal, key_padding_mask=ignore), expected)


def test_decoder_block_matches_torch():
    layer = torch_layer(cross=True)
    block = qkv.TransformerBlock(E, H, mlp_ratio=HIDDEN / E, cross_attention=True).double().eval()
    copy_into(block, layer)
    x, memory = torch.randn(2, 4, E, dtype=torch.float64), torch.randn(2, 6, E, dtype=torch.float64)
    memory_ignore = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    expected = layer(
        x,
        memory,
        tgt_mask=mask,
        tgt_is_causal=True,
        memory_key_padding_mask=qkv.keep_to_additive(~memory_ignore, torch.float64),
    )
    torch.testing.assert_close(
        block(x, memory, is_causal=True, memory_key_padding_mask=memory_ignore), expected
    )


def test_block_trains():
    block = qkv.TransformerBlock(E, H, dropout=0.1)
    x, target = torch.randn(4, 6, E), torch.randn(4, 6, E)
    optimizer = torch.optim.Adam(block.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = (block(x, is_causal=True) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_memory_must_match_cross_attention():
    with pytest.raises(ValueError, match="cross_attention=True"):
        qkv.TransformerBlock(E, H)(torch.randn(1, 2, E), torch.randn(1, 3, E))
    with pytest.raises(ValueError, match="cross_attention=True"):
        qkv.TransformerBlock(E, H, cross_attention=True)(torch.randn(1, 2, E))


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match=r"embed_dim \(16\) must be divisible by num_heads \(3\)"):
        qkv.TransformerBlock(E, 3)


@pytest.mark.parametrize("mlp_ratio", [0.0, -1.0])
def test_mlp_needs_a_hidden_unit(mlp_ratio):
    with pytest.raises(ValueError, match=rf"mlp_ratio {mlp_ratio} leaves the MLP no hidden unit"):
        qkv.TransformerBlock(E, H, mlp_ratio=mlp_ratio)
