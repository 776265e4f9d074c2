"""qkv.gpt against torch written out by hand and against transformers' LlamaForCausalLM.

Every option of `GPTConfig` is checked against `reference_logits`, the forward pass written here again with
plain torch operations from the model's weights (RoPE as complex rotations, ALiBi from the paper's slopes,
the causal mask as `j <= i`, soft-capping as `c * tanh(s / c)`). The Llama-shaped configs are also checked against transformers, in float64.
transformers computes RoPE's angles and RMSNorm in float32 whatever the dtype, so its float64 logits carry
float32 round-off, which grows with the position (an angle of 47 radians is held to about 4e-6): measured at
most 5.6e-6 here, on logits of size 2 to 6 at positions up to 47 (transformers 5.24, torch 2.13), they are
held to `HF_TOLERANCE` = 2e-5. With those two steps done in float64 instead (a patch of this test,
`float64_llama`), the logits agree to float64 round-off (1e-12): the whole difference is those two steps.
"""

from __future__ import annotations

import ast
import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import qkv
from qkv.gpt import (
    GPT,
    GPTConfig,
    from_transformers,
    generate,
    next_token_probabilities,
    softcapped_attention,
    to_transformers,
)
from qkv.masks import Mask

# one worker imports transformers (seconds) for all the tests that need it, under `--dist loadgroup`
needs_transformers = pytest.mark.xdist_group("transformers")
HF_TOLERANCE = 2e-5  # transformers' float32 RoPE angles and RMSNorm (module docstring)
EXACT = {"rtol": 1e-12, "atol": 1e-12}  # float64, the same formula computed in another order


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


def tiny(**options) -> GPTConfig:
    """A config small enough for many tests: vocabulary 23, width 16, 2 layers, 4 heads, context 24."""
    sizes = {"vocab_size": 23, "width": 16, "layers": 2, "heads": 4, "context": 24}
    return GPTConfig(**{**sizes, **options})


def random_model(config: GPTConfig, std: float = 0.3, seed: int = 0) -> GPT:
    """A float64 GPT whose every parameter (norms too) is drawn from N(0, std^2) (or N(1, std^2) for norms)."""
    torch.manual_seed(seed)
    model = GPT(config).double()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            mean = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            parameter.normal_(mean, std)
    return model.eval()


def random_ids(config: GPTConfig, batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(
        config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed)
    )


# --- the reference: the forward pass again, in plain torch ------------------------------------------------


def reference_norm(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm `x / sqrt(mean(x^2) + eps) * w` or LayerNorm `(x - mean) / sqrt(var + eps) * w + b`."""
    if isinstance(module, torch.nn.RMSNorm):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + module.eps) * module.weight
    centred = x - x.mean(-1, keepdim=True)
    variance = centred.pow(2).mean(-1, keepdim=True)
    return centred / torch.sqrt(variance + module.eps) * module.weight + module.bias


def reference_rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """`(B, H, L, D)`: channel pairs (i, i + D/2) as complex numbers, times `exp(1j * position * base**(-2i/D))`."""
    half = x.size(-1) // 2
    pairs = torch.complex(x[..., :half], x[..., half:])  # (B, H, L, D/2)
    frequencies = base ** (-2 * torch.arange(half, dtype=torch.float64) / x.size(-1))  # (D/2,)
    angles = torch.arange(x.size(-2), dtype=torch.float64)[:, None] * frequencies  # (L, D/2)
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([turned.real, turned.imag], dim=-1)


def reference_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`x W^T`, plus the bias if the layer has one."""
    y = x @ module.weight.T
    return y if module.bias is None else y + module.bias


def reference_logits(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """The logits `(B, L, V)` of `model` on `ids`, from its weights alone (H a power of two for ALiBi)."""
    config = model.config
    pre = config.norm_position == "pre"
    heads, kv_heads, head_dim, length = config.heads, config.kv_heads, config.head_dim, ids.size(1)
    x = model.embed.weight[ids]  # (B, L, E)
    if config.positions == "learned":
        x = x + model.position_embed.weight[:length]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float64) / heads)  # (H,)
    for block in model.blocks:
        attn = block.attn
        h = reference_norm(block.attn_norm, x) if pre else x
        q = reference_linear(attn.q_proj, h).view(*ids.shape, heads, head_dim).transpose(1, 2)
        k = reference_linear(attn.k_proj, h).view(*ids.shape, kv_heads, head_dim).transpose(1, 2)
        v = reference_linear(attn.v_proj, h).view(*ids.shape, kv_heads, head_dim).transpose(1, 2)
        if config.qk_norm:
            q, k = reference_norm(attn.q_norm, q), reference_norm(attn.k_norm, k)
        if config.positions == "rope":
            q, k = reference_rope(q, config.rope_base), reference_rope(k, config.rope_base)
        group = torch.arange(heads) // (heads // kv_heads)  # the key-value head of each query head
        scores = q @ k[:, group].transpose(-1, -2) / math.sqrt(head_dim)  # (B, H, L, L)
        if config.softcap is not None:
            scores = config.softcap * torch.tanh(scores / config.softcap)
        if config.positions == "alibi":
            scores = scores - slopes[:, None, None] * (i - j)
        scores = scores.masked_fill(j > i, -math.inf)
        if config.sinks:  # one more logit per head in every row, its share dropped
            sink = attn.sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (B, H, L, 1)
            weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            weights = torch.softmax(scores, dim=-1)
        out = weights @ v[:, group]  # (B, H, L, D)
        if config.gate:  # each head's features times sigmoid of a map of the sub-layer's input
            gate = reference_linear(attn.gate_proj, h).view(*ids.shape, heads, head_dim)
            out = out * torch.sigmoid(gate.transpose(1, 2))
        out = out.transpose(1, 2).reshape(*ids.shape, heads * head_dim)
        x = x + reference_linear(attn.out_proj, out)
        x = x if pre else reference_norm(block.attn_norm, x)
        h = reference_norm(block.mlp_norm, x) if pre else x
        mlp = block.mlp
        if config.mlp == "swiglu":
            gate = reference_linear(mlp.gate_proj, h)
            hidden = gate * torch.sigmoid(gate) * reference_linear(mlp.up_proj, h)
        else:
            up = reference_linear(mlp.up_proj, h)
            hidden = 0.5 * up * (1 + torch.erf(up / math.sqrt(2)))
        x = x + reference_linear(mlp.down_proj, hidden)
        x = x if pre else reference_norm(block.mlp_norm, x)
    return (reference_norm(model.norm, x) if pre else x) @ model.lm_head.weight.T


OPTIONS = [
    {"norm": norm, "mlp": mlp, "positions": positions, "qk_norm": qk_norm}
    for norm in ("rms", "layer")
    for mlp in ("swiglu", "gelu")
    for positions in ("rope", "learned", "alibi", None)
    for qk_norm in (False, True)
]
# the options of the older and newer blocks, with the positions they meet (soft-capping comes before ALiBi)
BLOCK_OPTIONS = [
    {"norm_position": norm_position, "bias": bias, "softcap": softcap, "positions": positions}
    for norm_position in ("pre", "post")
    for bias in (False, True)
    for softcap in (None, 0.5)
    for positions in ("rope", "alibi")
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_logits_equal_the_reference_for_every_option(options):
    config = tiny(**options, kv_heads=2)
    model = random_model(config)
    ids = random_ids(config, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), **EXACT)


@pytest.mark.parametrize("options", BLOCK_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_logits_equal_the_reference_for_every_block_option(options):
    config = tiny(**options, kv_heads=2, norm="layer")
    model = random_model(config)
    ids = random_ids(config, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), **EXACT)


# learned sinks with what their softmax meets: GQA, ALiBi's bias, soft-capping, another norm and MLP
SINK_OPTIONS = [
    {"kv_heads": 2},
    {"kv_heads": 1, "positions": "alibi"},
    {"softcap": 0.5},
    {"softcap": 0.5, "positions": "alibi", "norm": "layer", "mlp": "gelu"},
    {"norm_position": "post", "bias": True, "positions": None},
]


@pytest.mark.parametrize("options", SINK_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_logits_with_sinks_equal_a_softmax_over_one_more_logit(options):
    config = tiny(**options, sinks=True)
    model = random_model(config, std=0.5)
    ids = random_ids(config, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), **EXACT)


@pytest.mark.parametrize("options", SINK_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_cached_decoding_with_sinks_gives_the_logits_of_one_pass(options):
    config = tiny(**options, sinks=True)
    model = random_model(config, std=0.5)
    ids = random_ids(config, 2, 10)
    cache = model.new_cache()
    with torch.no_grad():
        whole = model(ids)
        pieces = [model(ids[:, :6], cache)]  # prefill, then one token at a time
        pieces += [model(ids[:, t : t + 1], cache) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, **EXACT)


# the output gate with what it meets: GQA, biases, soft-capping and sinks, post-LN, another norm and MLP
GATE_OPTIONS = [
    {"kv_heads": 2},
    {"kv_heads": 1, "bias": True, "softcap": 0.5, "sinks": True},
    {"norm_position": "post", "norm": "layer", "mlp": "gelu", "positions": "learned"},
]


@pytest.mark.parametrize("options", GATE_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_logits_with_an_output_gate_equal_the_reference(options):
    model = random_model(tiny(**options, gate=True), std=0.5)
    ids = random_ids(model.config, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), **EXACT)


@pytest.mark.parametrize("options", GATE_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_cached_decoding_with_an_output_gate_gives_the_logits_of_one_pass(options):
    model = random_model(tiny(**options, gate=True), std=0.5)
    ids = random_ids(model.config, 2, 10)
    cache = model.new_cache()
    with torch.no_grad():
        whole = model(ids)
        pieces = [model(ids[:, :6], cache)]  # prefill, then one token at a time
        pieces += [model(ids[:, t : t + 1], cache) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, **EXACT)


def test_a_closed_gate_silences_attention_and_a_zero_gate_halves_it():
    """sigmoid(-inf) = 0: the block's attention adds nothing; sigmoid(0) = 1/2: it adds half as much."""
    gated = random_model(tiny(gate=True, bias=True, layers=1), std=0.5)
    plain = GPT(tiny(bias=True, layers=1)).double().eval()
    plain.load_state_dict(
        {n: p for n, p in gated.state_dict().items() if "attn.gate_proj" not in n}
    )
    attn, x = gated.blocks[0].attn, torch.randn(2, 5, 16, dtype=torch.float64)
    positions, mask = torch.arange(5), Mask(alignment="bottom_right")
    with torch.no_grad():
        attn.gate_proj.weight.zero_()
        attn.gate_proj.bias.fill_(-1e4)  # closed
        closed = attn(x, positions, mask)
        attn.gate_proj.bias.zero_()  # half open
        half = attn(x, positions, mask)
        full = plain.blocks[0].attn(x, positions, mask)
    out_bias = attn.out_proj.bias.expand_as(full)
    torch.testing.assert_close(closed, out_bias, **EXACT)  # only out_proj's bias is left
    torch.testing.assert_close(half - out_bias, (full - out_bias) / 2, **EXACT)


def test_sinks_start_at_zero_learn_and_take_weight():
    model = GPT(tiny(sinks=True))
    sinks = [block.attn.sinks for block in model.blocks]
    assert all(torch.equal(s, torch.zeros(4)) for s in sinks)  # one per query head
    ids = random_ids(model.config, 2, 7)
    plain = GPT(tiny())
    plain.load_state_dict({n: p for n, p in model.state_dict().items() if not n.endswith("sinks")})
    with torch.no_grad():
        assert not torch.allclose(model(ids), plain(ids))  # e^0 = 1: each sink takes a share
    model(ids).logsumexp(-1).sum().backward()
    assert all(s.grad is not None and s.grad.abs().sum() > 0 for s in sinks)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("length", [1, 2, 24])
def test_logits_equal_the_reference_for_any_kv_heads_and_length(kv_heads, length):
    config = tiny(kv_heads=kv_heads, tie_embeddings=False, rope_base=100.0)
    model = random_model(config)
    ids = random_ids(config, 3, length)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference_logits(model, ids), **EXACT)


def test_reference_rope_turns_pairs_as_the_half_split_layout_does():
    """The reference itself, on one pair: (x_0, x_2) at position 1 turns by 1 radian, (x_1, x_3) by 1/100."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64).expand(2, 4)[
        None, None
    ]  # (1, 1, 2, 4)
    turned = reference_rope(x, base=10000.0)[0, 0, 1]
    c0, s0, c1, s1 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
    expected = [1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1]
    torch.testing.assert_close(turned, torch.tensor(expected, dtype=torch.float64))


# --- shapes, causality, the cache ----------------------------------------------------------------------------


def test_config_fills_in_kv_heads_and_mlp_width():
    assert tiny().kv_heads == 4
    assert tiny(mlp="swiglu").mlp_width == 42  # 8 * 16 // 3: the parameters of a 4x GELU MLP
    assert tiny(mlp="gelu").mlp_width == 64
    assert tiny(mlp_width=7, kv_heads=1).mlp_width == 7
    assert tiny().head_dim == 4


def test_parameter_count_is_the_sum_of_the_parts():
    config = tiny(kv_heads=2, tie_embeddings=False)  # E 16, V 23, H 4 of 4, 2 KV heads, SwiGLU 42
    attention = 16 * 16 + 2 * (16 * 8) + 16 * 16  # q, k and v of 2 heads of 4, out
    block = attention + 3 * 16 * 42 + 2 * 16  # the MLP's three matrices, two RMSNorm weights
    expected = 23 * 16 + 2 * block + 16 + 16 * 23  # embedding, blocks, final norm, untied output
    assert sum(p.numel() for p in GPT(config).parameters()) == expected
    tied = sum(p.numel() for p in GPT(tiny(kv_heads=2)).parameters())
    assert tied == expected - 16 * 23


@pytest.mark.parametrize("positions", ["rope", "learned", "alibi", None])
def test_no_logit_depends_on_a_later_token(positions):
    config = tiny(positions=positions)
    model = random_model(config)
    ids = random_ids(config, 1, 10)
    changed = ids.clone()
    changed[0, 6] = (changed[0, 6] + 1) % config.vocab_size
    with torch.no_grad():
        before, after = model(ids), model(changed)
    torch.testing.assert_close(before[:, :6], after[:, :6], **EXACT)
    assert not torch.allclose(before[:, 6:], after[:, 6:])


@pytest.mark.parametrize(
    "options", OPTIONS[::3] + BLOCK_OPTIONS[2::3], ids=lambda o: "-".join(map(str, o.values()))
)
def test_cached_decoding_gives_the_logits_of_one_pass(options):
    config = tiny(**options, kv_heads=2)
    model = random_model(config)
    ids = random_ids(config, 2, 12)
    cache = model.new_cache()
    with torch.no_grad():
        whole = model(ids)
        pieces = [model(ids[:, :5], cache), model(ids[:, 5:8], cache)]  # prefill, then a chunk
        pieces += [model(ids[:, t : t + 1], cache) for t in range(8, 12)]  # then one at a time
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, **EXACT)
    assert [len(c) for c in cache] == [12, 12]


def test_the_model_runs_in_float32_and_keeps_its_dtype():
    model = GPT(tiny())
    logits = model(random_ids(model.config, 2, 5))
    assert logits.shape == (2, 5, 23)
    assert logits.dtype == torch.float32


def test_initial_weights_are_small_and_the_embeddings_tied():
    model = GPT(tiny())
    assert model.lm_head.weight is model.embed.weight
    assert 0.015 < model.blocks[0].attn.q_proj.weight.std().item() < 0.025
    untied = GPT(tiny(tie_embeddings=False))
    assert untied.lm_head.weight is not untied.embed.weight


def block_outputs(model: GPT, ids: torch.Tensor) -> list[torch.Tensor]:
    """What each block of `model` returns on `ids`, `(B, L, E)` each."""
    outputs = []
    hooks = [b.register_forward_hook(lambda _, __, out: outputs.append(out)) for b in model.blocks]
    with torch.no_grad():
        model(ids)
    for hook in hooks:
        hook.remove()
    return outputs


def test_post_norm_normalises_after_each_residual_addition():
    """Post-LN at initialisation (gain 1, bias 0): every block's output has mean 0 and variance 1 per token."""
    torch.manual_seed(0)
    post = GPT(tiny(norm="layer", norm_position="post"))
    for out in block_outputs(post, random_ids(post.config, 2, 9)):
        torch.testing.assert_close(out.mean(-1), torch.zeros(2, 9), atol=1e-6, rtol=0)
        torch.testing.assert_close(out.var(-1, correction=0), torch.ones(2, 9), atol=1e-3, rtol=0)
    assert isinstance(post.norm, torch.nn.Identity)  # the last block's output is already normalised
    pre = GPT(tiny(norm="layer"))
    assert all(out.var(-1).mean() < 0.1 for out in block_outputs(pre, random_ids(pre.config, 2, 9)))


def test_post_norm_block_adds_then_normalises():
    """`x = norm(x + Attention(x))`, then `x = norm(x + MLP(x))`, from the block's own modules."""
    model = random_model(tiny(norm_position="post"))
    block, x = model.blocks[0], torch.randn(2, 9, 16, dtype=torch.float64)
    positions, mask = torch.arange(9), Mask(alignment="bottom_right")
    with torch.no_grad():
        h = block.attn_norm(x + block.attn(x, positions, mask))
        torch.testing.assert_close(block(x, positions, mask), block.mlp_norm(h + block.mlp(h)))


def attention_weights_of(q: torch.Tensor, k: torch.Tensor, softcap: float) -> torch.Tensor:
    """The `(B, H, L, S)` weights of `softcapped_attention`, read out through values that are the identity."""
    batch, kv_heads, keys, _ = k.shape
    v = torch.eye(keys, dtype=q.dtype).expand(
        batch, kv_heads, keys, keys
    )  # value j is the j-th unit vector
    return softcapped_attention(q, k, v, Mask(alignment="bottom_right"), softcap)


def test_softcap_bounds_the_scores_before_the_mask():
    """With scores in the hundreds, capped at c = 2 the kept weights of a row differ by at most e^(2c)."""
    generator = torch.Generator().manual_seed(0)
    q = 40 * torch.randn(2, 4, 5, 8, generator=generator, dtype=torch.float64)
    k = 40 * torch.randn(2, 2, 7, 8, generator=generator, dtype=torch.float64)  # 2 KV heads, 7 keys
    weights = attention_weights_of(q, k, softcap=2.0)
    later = (
        torch.arange(7)[None, :] > torch.arange(5)[:, None] + 2
    )  # bottom-right: query i sees j <= i + 2
    assert (weights[..., later] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=torch.float64))
    kept = weights.masked_fill(later, math.nan)
    ratio = kept.nan_to_num(-math.inf).amax(-1) / kept.nan_to_num(math.inf).amin(-1)  # (B, H, L)
    assert ratio.max() <= math.exp(4.0) * (1 + 1e-9)
    uncapped = attention_weights_of(q, k, softcap=1e9)  # tanh(s / c) = s / c to round-off
    assert (
        uncapped.masked_fill(later, 1.0).min() < 1e-20
    )  # without the cap, some kept keys get ~nothing


def test_a_large_softcap_gives_plain_attention():
    config = tiny(kv_heads=2)
    model, capped = (
        random_model(config, std=0.1),
        random_model(tiny(kv_heads=2, softcap=1e9), std=0.1),
    )
    ids = random_ids(config, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(capped(ids), model(ids), rtol=1e-9, atol=1e-9)


def test_bias_adds_one_per_output_of_each_linear_layer_and_starts_at_zero():
    attention = 3 * 16 + 16  # q, k and v of 4 heads of 4 features, out
    for mlp, hidden in (("gelu", 64 + 16), ("swiglu", 2 * 42 + 16)):  # up (and gate), down
        without = sum(p.numel() for p in GPT(tiny(mlp=mlp)).parameters())
        model = GPT(tiny(mlp=mlp, bias=True))
        assert sum(p.numel() for p in model.parameters()) == without + 2 * (attention + hidden)
        biases = [p for name, p in model.named_parameters() if name.endswith("proj.bias")]
        assert len(biases) == 2 * (4 + (3 if mlp == "swiglu" else 2))
        assert all((b == 0).all() for b in biases)
    assert model.lm_head.bias is None


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"norm": "batch"}, ValueError, r"norm must be one of \('rms', 'layer'\), got 'batch'"),
        ({"mlp": "relu"}, ValueError, "mlp must be one of"),
        ({"positions": "none"}, ValueError, "positions must be one of"),
        ({"positions": "sinusoidal"}, ValueError, "positions must be one of"),
        ({"heads": 3}, ValueError, r"heads \(3\) must divide width \(16\)"),
        ({"kv_heads": 3}, ValueError, r"kv_heads \(3\) must divide heads \(4\)"),
        ({"width": 12, "heads": 4}, ValueError, "head size width // heads = 3 must be even"),
        ({"width": 0}, ValueError, "width must be positive"),
        ({"context": 2.5}, TypeError, "context must be an int"),
        ({"rope_base": 1.0}, ValueError, "rope_base must be a finite number above 1"),
        ({"rope_base": "10000"}, TypeError, "rope_base must be a number"),
        ({"norm_eps": 0.0}, ValueError, "norm_eps"),
        (
            {"norm_position": "middle"},
            ValueError,
            r"norm_position must be one of \('pre', 'post'\)",
        ),
        ({"softcap": 0.0}, ValueError, "softcap must be a finite number above 0"),
        ({"softcap": -30.0}, ValueError, "softcap must be a finite number above 0"),
        ({"softcap": math.inf}, ValueError, "softcap must be a finite number above 0"),
        ({"softcap": True}, TypeError, "softcap must be a number"),
        ({"bias": 0}, TypeError, "bias must be a bool"),
        ({"qk_norm": 1}, TypeError, "qk_norm must be a bool"),
        ({"tie_embeddings": "yes"}, TypeError, "tie_embeddings must be a bool"),
        ({"sinks": 1}, TypeError, "sinks must be a bool"),
    ],
)
def test_config_rejects_bad_options_by_name(options, error, match):
    with pytest.raises(error, match=match):
        tiny(**options)


def test_an_odd_head_size_is_fine_without_rope():
    assert tiny(width=12, heads=4, positions="learned").head_dim == 3


def test_gpt_takes_only_a_config():
    with pytest.raises(TypeError, match=r"config must be a qkv\.gpt\.GPTConfig, got dict"):
        GPT({"width": 16})


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (
            [[1, 2, 23]],
            ValueError,
            r"ids must lie in \[0, vocab_size\) = \[0, 23\), got ids from 1 to 23",
        ),
        ([[-1, 2]], ValueError, "got ids from -1 to 2"),
        ([1, 2, 3], ValueError, r"ids must be \(B, L\) with B, L >= 1, got shape \(3,\)"),
        (torch.zeros(1, 0, dtype=torch.long), ValueError, r"got shape \(1, 0\)"),
        ([[1.0, 2.0]], TypeError, "ids must be an integer tensor, got dtype torch.float32"),
        ([[True]], TypeError, "integer tensor, got dtype torch.bool"),
        (
            [[0] * 25],
            ValueError,
            r"25 ids after 0 cached tokens make 25 positions, more than the model's context \(24\)",
        ),
    ],
)
def test_forward_rejects_bad_ids_by_name(ids, error, match):
    model = GPT(tiny())
    with pytest.raises(error, match=match):
        model(torch.as_tensor(ids))


def test_forward_rejects_ids_that_are_not_a_tensor():
    with pytest.raises(TypeError, match=r"ids must be a torch\.Tensor, got list"):
        GPT(tiny())([[1, 2]])


def test_forward_rejects_a_cache_that_does_not_fit():
    model = GPT(tiny())
    ids = torch.zeros(2, 20, dtype=torch.long)
    cache = model.new_cache()
    model(ids, cache)
    with pytest.raises(ValueError, match=r"5 ids after 20 cached tokens make 25 positions"):
        model(torch.zeros(2, 5, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="cache holds a batch of 2, but ids have 3 rows"):
        model(torch.zeros(3, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"one KVCache per block \(2\), got 1"):
        model(ids[:, :1], cache[:1])
    with pytest.raises(TypeError, match=r"cache must be a list of qkv\.KVCache"):
        model(ids[:, :1], [None, None])
    cache[0].update(*(torch.zeros(2, 4, 1, 4),) * 2)
    with pytest.raises(ValueError, match="disagree on how many tokens they hold"):
        model(ids[:, :1], cache)


# --- sampling: each filter against a distribution computed by hand ------------------------------------------

PROBS = [
    Fraction(50, 100),
    Fraction(20, 100),
    Fraction(15, 100),
    Fraction(10, 100),
    Fraction(5, 100),
]


def normalised(weights: list[Fraction]) -> torch.Tensor:
    """Exact fractions, normalised, as float64."""
    total = sum(weights)
    return torch.tensor([float(w / total) for w in weights], dtype=torch.float64)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, PROBS),
        ({"temperature": 0.5}, [p * p for p in PROBS]),  # p^(1/T), renormalised
        ({"temperature": 2.0}, [Fraction(math.sqrt(p)) for p in PROBS]),
        ({"top_k": 2}, [*PROBS[:2], 0, 0, 0]),
        ({"top_k": 5}, PROBS),
        ({"top_k": 99}, PROBS),
        ({"top_p": 0.45}, [1, 0, 0, 0, 0]),  # the first token alone crosses 0.45
        ({"top_p": 0.6}, [*PROBS[:2], 0, 0, 0]),  # 0.5 < 0.6: the second is needed to cross it
        ({"top_p": 0.75}, [*PROBS[:3], 0, 0]),
        ({"top_p": 1.0}, PROBS),
        ({"min_p": 0.35}, [*PROBS[:2], 0, 0, 0]),  # at least 0.175
        ({"min_p": 0.25}, [*PROBS[:3], 0, 0]),  # at least 0.125
        ({"min_p": 0.0}, PROBS),
        ({"min_p": 1.0}, [1, 0, 0, 0, 0]),
        # in order: top-k leaves 0.5, 0.2, 0.15 (/0.85); top-p 0.8 then keeps 0.5/0.85 + 0.2/0.85 = 0.82
        ({"top_k": 3, "top_p": 0.8}, [*PROBS[:2], 0, 0, 0]),
        # top-p 0.9 keeps four (0.85 < 0.9); min-p 0.25 then needs 0.125/0.95 and drops 0.1/0.95
        ({"top_p": 0.9, "min_p": 0.25}, [*PROBS[:3], 0, 0]),
    ],
)
def test_next_token_probabilities_equal_the_hand_computed_ones(options, expected):
    logits = torch.tensor([float(p) for p in PROBS], dtype=torch.float64).log() + 3.0  # any shift
    probs = next_token_probabilities(logits, **options)
    torch.testing.assert_close(probs, normalised([Fraction(e) for e in expected]), **EXACT)


def test_top_k_keeps_ties_and_rows_are_independent():
    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    probs = next_token_probabilities(logits, top_k=1)
    torch.testing.assert_close(probs, torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"temperature": 0.0}, ValueError, "temperature must be above 0, got 0.0"),
        ({"temperature": -1.0}, ValueError, "temperature must be above 0"),
        ({"temperature": math.nan}, ValueError, "temperature must be a finite number"),
        ({"top_k": 0}, ValueError, "top_k must be positive"),
        ({"top_k": 2.0}, TypeError, "top_k must be an int"),
        ({"top_p": 0.0}, ValueError, "top_p must be a finite number above 0"),
        ({"top_p": 1.5}, ValueError, r"top_p must lie in \(0, 1\], got 1.5"),
        ({"min_p": -0.1}, ValueError, r"min_p must lie in \[0, 1\], got -0.1"),
        ({"min_p": "0.1"}, TypeError, "min_p must be a number"),
    ],
)
def test_next_token_probabilities_rejects_bad_options_by_name(options, error, match):
    with pytest.raises(error, match=match):
        next_token_probabilities(torch.zeros(5), **options)


# --- generation ------------------------------------------------------------------------------------------


def test_greedy_generation_takes_the_argmax_of_one_full_pass_at_each_step():
    config = tiny(kv_heads=2)
    model = random_model(config)
    ids = random_ids(config, 2, 3)
    out = generate(model, ids, 8, temperature=0)
    assert out.shape == (2, 11)
    assert torch.equal(out[:, :3], ids)
    with torch.no_grad():
        for t in range(3, 11):  # no cache: the whole sequence again at every step
            assert torch.equal(out[:, t], model(out[:, :t])[:, -1].argmax(-1))


def test_sampling_is_seeded_and_leaves_the_global_generator_alone():
    config = tiny()
    model = random_model(config, std=0.1)  # flat enough that different seeds draw differently
    ids = random_ids(config, 2, 2)
    state = torch.random.get_rng_state()
    first = generate(model, ids, 15, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(generate(model, ids, 15, seed=3), first)
    assert not torch.equal(generate(model, ids, 15, seed=4), first)


def test_sampled_tokens_follow_the_filtered_distribution():
    config = tiny()
    model = random_model(config, std=0.2)
    prompt = random_ids(config, 1, 3)
    draws = 20000
    options = {"temperature": 0.7, "top_k": 6}
    tokens = generate(model, prompt.expand(draws, 3), 1, seed=0, **options)[:, -1]
    with torch.no_grad():
        probs = next_token_probabilities(model(prompt)[0, -1], **options)  # (V,)
    frequencies = torch.bincount(tokens, minlength=config.vocab_size).double() / draws
    assert set(tokens.unique().tolist()) <= set(probs.nonzero().flatten().tolist())
    sigma = (probs * (1 - probs) / draws).sqrt()
    assert ((frequencies - probs).abs() <= 5 * sigma + 1e-12).all()


def test_generation_of_nothing_returns_the_prompt():
    model = GPT(tiny())
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(generate(model, ids, 0), ids)


def test_generation_fills_the_context_and_no_more():
    model = GPT(tiny())
    ids = torch.tensor([[1, 2, 3, 4]])
    assert generate(model, ids, 20, temperature=0).shape == (1, 24)
    with pytest.raises(
        ValueError,
        match=r"max_new_tokens \(21\) is more than the model's context \(24\) leaves after a prompt of 4 tokens \(20\)",
    ):
        generate(model, ids, 21)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be non-negative"),
        ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an int"),
        ({"temperature": -0.5}, ValueError, r"temperature must be 0 \(greedy\) or above"),
        ({"top_p": 2}, ValueError, "top_p must lie in"),
        ({"seed": None}, TypeError, "seed must be an int"),
        ({"ids": torch.tensor([[99]])}, ValueError, "ids must lie in"),
        ({"model": torch.nn.Linear(2, 2)}, TypeError, "model must be a qkv.gpt.GPT, got Linear"),
    ],
)
def test_generate_rejects_bad_arguments_by_name(arguments, error, match):
    call = {"model": GPT(tiny()), "ids": torch.tensor([[1, 2]]), "max_new_tokens": 3, **arguments}
    with pytest.raises(error, match=match):
        generate(**call)


# --- transformers ----------------------------------------------------------------------------------------

LLAMA_CONFIGS = [
    {"kv_heads": 4, "tie_embeddings": True, "rope_base": 10000.0},
    {"kv_heads": 2, "tie_embeddings": False, "rope_base": 10000.0},
    {"kv_heads": 1, "tie_embeddings": True, "rope_base": 500.0},
    {"kv_heads": 1, "tie_embeddings": False, "rope_base": 1e6},
    {"kv_heads": 2, "layers": 1, "heads": 2, "rope_base": 2.0},
    {"kv_heads": 3, "width": 24, "heads": 6, "layers": 3, "mlp_width": 37, "norm_eps": 1e-6},
]


def llama_config(**options) -> GPTConfig:
    return GPTConfig(**{"vocab_size": 31, "width": 16, "heads": 4, "context": 48, **options})


@needs_transformers
@pytest.mark.parametrize("options", LLAMA_CONFIGS, ids=str)
@pytest.mark.parametrize("length", [1, 48])
def test_logits_equal_llama_for_causal_lm(options, length):
    model = random_model(llama_config(**options))
    hf_model = to_transformers(model)
    ids = random_ids(model.config, 2, length)
    with torch.no_grad():
        ours, theirs = model(ids), hf_model(ids).logits
    assert theirs.dtype == torch.float64
    assert (ours - theirs).abs().max().item() <= HF_TOLERANCE


@pytest.fixture
def float64_llama(monkeypatch):
    """transformers' Llama with its two float32 steps, RMSNorm and RoPE's angles, done in the input's dtype."""
    from transformers.models.llama import modeling_llama

    def rms_norm(self, x):
        return self.weight * (
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        )

    def rotary(self, x, position_ids):
        dim, base = self.config.head_dim, self.config.rope_parameters["rope_theta"]
        frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (D/2,)
        angles = position_ids[..., None].double() * frequencies  # (B, L, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (B, L, D): the half-split layout
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)


@needs_transformers
@pytest.mark.parametrize("options", LLAMA_CONFIGS[::2], ids=str)
def test_logits_equal_llama_to_float64_round_off_once_its_float32_steps_are_float64(
    options, float64_llama
):
    model = random_model(llama_config(**options))
    hf_model = to_transformers(model)
    ids = random_ids(model.config, 2, 48)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf_model(ids).logits, **EXACT)


@needs_transformers
@pytest.mark.parametrize("options", LLAMA_CONFIGS, ids=str)
def test_conversion_round_trips_config_and_weights(options):
    model = random_model(llama_config(**options))
    back = from_transformers(to_transformers(model))
    assert back.config == model.config
    assert back.embed.weight.dtype == torch.float64
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    assert (back.lm_head.weight is back.embed.weight) == model.config.tie_embeddings


@needs_transformers
def test_a_model_made_by_transformers_converts_and_agrees():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=50,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=30,
        rope_parameters={"rope_type": "default", "rope_theta": 300.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    hf_model = LlamaForCausalLM(config).double().eval()
    with torch.no_grad():  # away from the initial N(0, 0.02): logits of size 1, not 0.01
        for parameter in hf_model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    model = from_transformers(hf_model)
    assert model.config == GPTConfig(
        vocab_size=40, width=32, layers=2, heads=8, kv_heads=2, mlp_width=50, rope_base=300.0,
        tie_embeddings=False, context=30, norm_eps=1e-6,
    )  # fmt: skip
    ids = random_ids(model.config, 2, 30)
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() <= HF_TOLERANCE
    again = to_transformers(model).state_dict()
    assert all(torch.equal(again[name], value) for name, value in hf_model.state_dict().items())


@needs_transformers
@pytest.mark.parametrize("options", LLAMA_CONFIGS[:4], ids=str)
def test_greedy_generation_equals_transformers_generate(options):
    model = random_model(llama_config(**options), std=0.5)
    hf_model = to_transformers(model)
    ids = random_ids(model.config, 3, 4)
    ours = generate(model, ids, 30, temperature=0)
    theirs = hf_model.generate(ids, max_new_tokens=30, do_sample=False)
    assert torch.equal(ours, theirs)


@needs_transformers
@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"norm": "layer"}, "norm='layer'"),
        ({"mlp": "gelu"}, "mlp='gelu'"),
        ({"positions": "learned"}, "positions='learned'"),
        ({"positions": "alibi"}, "positions='alibi'"),
        ({"positions": None}, "positions=None"),
        ({"qk_norm": True}, "qk_norm=True"),
        ({"norm_position": "post"}, "norm_position='post'"),
        ({"bias": True}, "bias=True"),
        ({"softcap": 50.0}, "softcap=50.0"),
        ({"sinks": True}, "sinks=True"),
        ({"gate": True}, "gate=True"),
    ],
)
def test_to_transformers_rejects_what_llama_lacks_by_name(options, option):
    with pytest.raises(ValueError, match=f"LlamaForCausalLM has no counterpart for {option}"):
        to_transformers(GPT(llama_config(**options)))


@needs_transformers
@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"attention_bias": True}, "attention_bias=True"),
        ({"mlp_bias": True}, "mlp_bias=True"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"head_dim": 8}, "head_dim=8"),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "rope_theta": 1e4,
                    "short_factor": [1.0, 1.0],
                    "long_factor": [2.0, 2.0],
                    "original_max_position_embeddings": 16,
                },
                "max_position_embeddings": 32,
            },
            r"rope_parameters\['rope_type'\]='longrope'",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "linear",
                    "rope_theta": 1e4,
                    "factor": 2.0,
                    "partial_rotary_factor": 0.5,
                }
            },
            r"rope_parameters \['partial_rotary_factor'\]",
        ),
    ],
)
def test_from_transformers_rejects_what_gpt_lacks_by_name(options, option):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=10, hidden_size=16, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=4, **options,
    )  # fmt: skip
    with pytest.raises(ValueError, match=f"GPT has no counterpart for {option}"):
        from_transformers(LlamaForCausalLM(config))


ROPE_SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 48},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 12},
    {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 6,
        "beta_fast": 8.0,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
    },
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 12,
    },
]


@needs_transformers
@pytest.mark.parametrize("scaling", ROPE_SCALINGS, ids=lambda s: s["rope_type"])
def test_rope_scaling_equals_llama_and_round_trips(scaling):
    # qkv.rope_frequencies in the model, transformers' own RoPE functions in Llama: the same logits
    model = random_model(llama_config(kv_heads=2, rope_scaling=scaling, rope_base=500.0))
    hf_model = to_transformers(model)
    assert hf_model.config.rope_parameters["rope_type"] == scaling["rope_type"]
    ids = random_ids(model.config, 2, 48)
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() <= HF_TOLERANCE
        plain = to_transformers(random_model(llama_config(kv_heads=2, rope_base=500.0)))
        difference = (plain(ids).logits - hf_model(ids).logits).abs().max().item()
    # the scaling changed the logits: except dynamic's, plain up to its original length, here the context
    assert (difference == 0.0) == (scaling["rope_type"] == "dynamic")
    assert from_transformers(hf_model).config == model.config


@needs_transformers
def test_to_transformers_rejects_rope_scaling_llama_lacks():
    ntk = llama_config(rope_scaling={"rope_type": "ntk", "factor": 2.0})
    with pytest.raises(ValueError, match=r"no counterpart for rope_scaling with rope_type 'ntk'"):
        to_transformers(GPT(ntk))
    shorter = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 24}
    with pytest.raises(
        ValueError, match=r"original_max_position_embeddings'\] \(24\) = context \(48\)"
    ):
        to_transformers(GPT(llama_config(rope_scaling=shorter)))


def test_rope_scaling_is_checked_with_the_config():
    with pytest.raises(
        ValueError, match=r"rope_scaling needs positions='rope', got positions='alibi'"
    ):
        llama_config(positions="alibi", rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match=r"needs \['factor'\]"):
        llama_config(rope_scaling={"rope_type": "linear"})


@needs_transformers
def test_conversions_reject_the_wrong_model_type():
    with pytest.raises(TypeError, match=r"model must be a qkv\.gpt\.GPT"):
        to_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(
        TypeError, match=r"hf_model must be a transformers\.LlamaForCausalLM, got GPT"
    ):
        from_transformers(GPT(llama_config()))


def test_conversion_without_transformers_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    with pytest.raises(ImportError, match=r"pip install 'qkv\[hf\]'"):
        to_transformers(GPT(llama_config()))


def imported_at_import_time(node: ast.AST) -> set[str]:
    """The top-level packages imported when the module runs: not inside functions, not for type checkers."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return set()
    if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
        return set()
    if isinstance(node, ast.Import):
        return {alias.name.partition(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        return {node.module.partition(".")[0]} if node.level == 0 else set()
    return set().union(*map(imported_at_import_time, ast.iter_child_nodes(node)))


def test_importing_qkv_imports_no_transformers():
    modules = sorted(Path(qkv.__file__).parent.rglob("*.py"))
    assert "transformers" in imported_at_import_time(ast.parse("import transformers.models"))
    assert "transformers" not in imported_at_import_time(
        ast.parse("def f():\n    import transformers")
    )
    offenders = [
        path.name
        for path in modules
        if "transformers" in imported_at_import_time(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == []


def test_the_package_exports_the_gpt():
    assert qkv.GPT is GPT
    assert qkv.GPTConfig is GPTConfig
    assert qkv.generate is generate
    assert qkv.next_token_probabilities is next_token_probabilities
