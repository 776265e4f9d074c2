"""qkv.TransformerBlock against torch's pre-LN TransformerEncoderLayer and TransformerDecoderLayer."""

import pytest
import torch

import qkv

E, H, HIDDEN = 16, 4, 32


def torch_layer(cross, **kwargs):
    kind = torch.nn.TransformerDecoderLayer if cross else torch.nn.TransformerEncoderLayer
    settings = {
        "dropout": 0.0,
        "activation": "gelu",
        "batch_first": True,
        "norm_first": True,
    } | kwargs
    return kind(E, H, HIDDEN, **settings).double().eval()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_encoder_block_matches_torch(causal):
    layer = torch_layer(cross=False)
    block = qkv.TransformerBlock.from_torch(layer)
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
    block = qkv.TransformerBlock.from_torch(layer)
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


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"embed_dim": 0}, ValueError, r"embed_dim must be positive, got 0"),
        ({"embed_dim": "16"}, TypeError, r"embed_dim must be an int, got str"),
        ({"num_heads": 0}, ValueError, r"num_heads must be positive, got 0"),
        ({"mlp_ratio": "4"}, TypeError, r"mlp_ratio must be a number, got str"),
        ({"mlp_ratio": float("nan")}, ValueError, r"mlp_ratio must be finite, got nan"),
        ({"mlp_ratio": float("inf")}, ValueError, r"mlp_ratio must be finite, got inf"),
        ({"dropout": 1.5}, ValueError, r"dropout must lie in \[0, 1\], got 1.5"),
        ({"cross_attention": "no"}, TypeError, r"cross_attention must be a bool, got str"),
    ],
    ids=[
        "width-0",
        "width-str",
        "heads-0",
        "ratio-str",
        "ratio-nan",
        "ratio-inf",
        "dropout",
        "cross",
    ],
)
def test_bad_construction_is_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        qkv.TransformerBlock(**{"embed_dim": E, "num_heads": H, **kwargs})


ENCODER, DECODER = qkv.TransformerBlock(E, H), qkv.TransformerBlock(E, H, cross_attention=True)
X, MEMORY = torch.randn(2, 3, E), torch.randn(2, 5, E)
BAD_CALLS = {
    "x width": (
        ENCODER,
        {"x": torch.randn(2, 3, E + 1)},
        ValueError,
        r"x must be \(B, N, 16\) \(batch first\) or \(N, 16\) \(unbatched\), got shape \(2, 3, 17\)",
    ),
    "x rank": (ENCODER, {"x": torch.randn(E)}, ValueError, r"x must be .* got shape \(16,\)"),
    "x integer": (
        ENCODER,
        {"x": torch.ones(2, 3, E, dtype=torch.long)},
        TypeError,
        r"x must be a floating-point tensor, got dtype torch.int64",
    ),
    "x dtype, block's": (
        ENCODER,
        {"x": X.double()},
        TypeError,
        r"x has dtype torch.float64 but the module's parameters are torch.float32",
    ),
    "x device, block's": (
        ENCODER,
        {"x": X.to("meta")},
        ValueError,
        r"x is on meta but the module's parameters are on cpu",
    ),
    "memory width": (
        DECODER,
        {"x": X, "memory": torch.randn(2, 5, E + 1)},
        ValueError,
        r"memory must be \(B, N, 16\) \(batch first\), got shape \(2, 5, 17\)",
    ),
    "memory dtype": (
        DECODER,
        {"x": X, "memory": MEMORY.double()},
        TypeError,
        r"x and memory disagree on dtype: x torch.float32 vs memory torch.float64",
    ),
    "memory batch": (
        DECODER,
        {"x": X, "memory": MEMORY[:1]},
        ValueError,
        r"x and memory disagree on the batch size: x \(2, 3, 16\) vs memory \(1, 5, 16\)",
    ),
    "memory padding shape": (
        DECODER,
        {"x": X, "memory": MEMORY, "memory_key_padding_mask": torch.zeros(2, 3, dtype=torch.bool)},
        ValueError,
        r"memory_key_padding_mask of shape \(2, 3\) does not broadcast to memory's \(B, S\) \(2, 5\)",
    ),
    "memory padding 1-d": (
        DECODER,
        {"x": X, "memory": MEMORY, "memory_key_padding_mask": torch.zeros(5, dtype=torch.bool)},
        ValueError,
        r"memory_key_padding_mask must be \(B, S\), one entry per key of memory \(2, 5, 16\), "
        r"got shape \(5,\)",
    ),
    "memory padding dtype": (
        DECODER,
        {"x": X, "memory": MEMORY, "memory_key_padding_mask": torch.zeros(2, 5, dtype=torch.long)},
        TypeError,
        r"memory_key_padding_mask must be bool \(True = ignore\) or floating point, got torch.int64",
    ),
    "memory padding without memory": (
        ENCODER,
        {"x": X, "memory_key_padding_mask": torch.zeros(2, 5, dtype=torch.bool)},
        ValueError,
        r"memory_key_padding_mask needs memory \(a block with cross_attention=True\)",
    ),
    "padding 1-d": (
        ENCODER,
        {"x": X, "key_padding_mask": torch.zeros(3, dtype=torch.bool)},
        ValueError,
        r"key_padding_mask must be \(B, S\), .* got shape \(3,\)",
    ),
    "is_causal unknown": (
        ENCODER,
        {"x": X, "is_causal": "causal"},
        ValueError,
        r"is_causal must be False, True or one of \('top_left', 'bottom_right'\), got 'causal'",
    ),
}


@pytest.mark.parametrize(
    ("block", "kwargs", "error", "message"), BAD_CALLS.values(), ids=BAD_CALLS.keys()
)
def test_bad_input_is_rejected_with_a_clear_message(block, kwargs, error, message):
    with pytest.raises(error, match=message):
        block(**kwargs)


@pytest.mark.parametrize("cross", [False, True], ids=["encoder", "decoder"])
def test_unbatched_input_is_a_batch_of_one(cross):
    block = qkv.TransformerBlock(E, H, cross_attention=cross).double().eval()
    x, memory = torch.randn(3, E, dtype=torch.float64), torch.randn(5, E, dtype=torch.float64)
    memory, batched = (memory, memory[None]) if cross else (None, None)
    torch.testing.assert_close(
        block(x, memory, is_causal=True), block(x[None], batched, is_causal=True)[0]
    )


@pytest.mark.parametrize("hidden", [32, 61, 115])
@pytest.mark.parametrize("cross", [False, True], ids=["encoder", "decoder"])
def test_from_torch_copies_sizes_and_settings(cross, hidden):
    layer = torch.nn.TransformerEncoderLayer if not cross else torch.nn.TransformerDecoderLayer
    layer = layer(
        E,
        H,
        hidden,
        dropout=0.2,
        activation="gelu",
        layer_norm_eps=1e-3,
        batch_first=True,
        norm_first=True,
    )
    block = qkv.TransformerBlock.from_torch(layer)
    assert block.mlp[0].out_features == hidden  # e.g. 61 / 16 * 16 truncates to 60
    assert block.training
    assert block.residual_dropout.p == 0.2
    assert block.self_attn.dropout == 0.2
    assert block.attn_norm.eps == block.mlp_norm.eps == 1e-3
    assert (block.cross_attn is not None) == cross
    n_params = sum(p.numel() for p in block.parameters())
    assert n_params == sum(p.numel() for p in layer.parameters())


def test_from_torch_encoder_with_padding_under_no_grad():
    # eval mode without gradients sends torch's layer down its fused fast path
    layer = torch_layer(cross=False).float()
    block = qkv.TransformerBlock.from_torch(layer)
    x = torch.randn(3, 6, E)
    ignore = qkv.keep_to_key_padding(qkv.padding_mask(torch.tensor([6, 4, 1])))
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=ignore)
        out = block(x, key_padding_mask=ignore)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("seed", range(4))
def test_from_torch_decoder_with_every_mask(seed):
    torch.manual_seed(seed)
    layer = torch_layer(cross=True)
    block = qkv.TransformerBlock.from_torch(layer)
    length, memory_length = 5, 7
    x = torch.randn(2, length, E, dtype=torch.float64)
    memory = torch.randn(2, memory_length, E, dtype=torch.float64)
    ignore = qkv.keep_to_key_padding(qkv.padding_mask(torch.tensor([5, 3])))
    memory_ignore = qkv.keep_to_key_padding(qkv.padding_mask(torch.tensor([2, 7])))
    additive = {
        name: qkv.keep_to_additive(~mask, torch.float64)
        for name, mask in (("tgt", ignore), ("memory", memory_ignore))
    }
    expected = layer(
        x,
        memory,
        tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(length, dtype=torch.float64),
        tgt_is_causal=True,
        tgt_key_padding_mask=additive["tgt"],
        memory_key_padding_mask=additive["memory"],
    )
    out = block(
        x, memory, is_causal=True, key_padding_mask=ignore, memory_key_padding_mask=memory_ignore
    )
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"norm_first": False}, r"norm_first=True \(pre-LN\)"),
        ({"batch_first": False}, "batch_first=True"),
        ({"activation": "relu"}, 'activation="gelu"'),
        ({"activation": torch.nn.GELU(approximate="tanh")}, 'activation="gelu"'),
        ({"bias": False}, "bias=True"),
        ({"norm_first": False, "activation": "relu"}, r"norm_first=True \(pre-LN\), activation"),
    ],
)
@pytest.mark.parametrize("cross", [False, True], ids=["encoder", "decoder"])
def test_from_torch_rejects_other_layers(cross, kwargs, match):
    with pytest.raises(ValueError, match=match):
        qkv.TransformerBlock.from_torch(torch_layer(cross, **kwargs))


def test_from_torch_rejects_other_modules():
    with pytest.raises(TypeError, match="got MultiheadAttention"):
        qkv.TransformerBlock.from_torch(torch.nn.MultiheadAttention(E, H, batch_first=True))


def test_from_torch_accepts_a_gelu_module():
    layer = torch_layer(cross=False, activation=torch.nn.GELU())
    x = torch.randn(2, 3, E, dtype=torch.float64)
    torch.testing.assert_close(qkv.TransformerBlock.from_torch(layer)(x), layer(x))
