"""The attention of a `qkv.gpt.GPT`, head by head: its weights recomputed, and a head's output switched off.

`qkv.gpt.Attention` returns its output, not its weights (the fused call never forms them). `attention_maps`
recomputes them from the model's own parts, layer by layer: the block's norm, its query and key projections,
its QK-norm if any, RoPE (`qkv.apply_rope`) at the block's base and scaling, and `qkv.attention_weights` with
the causal mask and the block's learned sinks if any (the weights of a row then sum to less than 1); the
residual stream between layers is the model's own blocks'. tests/lab/test_gpt_attention.py checks
that these weights, times the block's values, give the block's own attention output.

`ablated_bits` runs the model's own forward with chosen heads' outputs set to zero (a hook on each block's
output projection, removed afterwards) and gives the loss of every predicted token. `PASSAGE` is the text
the article, its figure and its interactive map read the maps on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv.functional import attention_weights
from qkv.gpt import GPT, Attention
from qkv.masks import Mask
from qkv.positions import apply_rope

# A sentence in the site's style for the maps, 47 bytes: short enough to draw, byte by byte, on a phone.
PASSAGE = "Each new token attends to the tokens before it."


def _check(model: object, ids: object) -> None:
    """Raise unless `model` is a GPT whose weights can be recomputed and `ids` is a batch it takes."""
    if not isinstance(model, GPT):
        raise TypeError(
            f"model must be a qkv.gpt.GPT, got {type(model).__name__}"
        )
    if model.config.positions == "alibi":
        raise ValueError(
            "model uses ALiBi: its weights need the bias, which attention_maps leaves out"
        )
    model._check(ids, None)


# --8<-- [start:maps]
# --8<-- [start:head-weights]
def head_weights(attn: Attention, x: Tensor, positions: Tensor) -> Tensor:
    """One block's attention weights, from its own projections: `x (B, L, E)`
    normed -> `(B, H, L, L)`."""
    # (B, L, E) -> (B, H, L, D)
    q = attn.q_proj(x).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
    # (B, Hkv, L, D)
    k = attn.k_proj(x).unflatten(-1, (attn.kv_heads, -1)).transpose(1, 2)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.rope_base is not None:
        q = apply_rope(
            q, positions, base=attn.rope_base, scaling=attn.rope_scaling
        )
        k = apply_rope(
            k, positions, base=attn.rope_base, scaling=attn.rope_scaling
        )
    return attention_weights(
        q, k, is_causal=True, enable_gqa=True, sinks=attn.sinks
    )  # (B, H, L, L)
    # --8<-- [end:head-weights]


@torch.no_grad()
def attention_maps(model: GPT, ids: Tensor) -> Tensor:
    """Every head's weights on `ids (B, L)`: `(layers, B, H, L, L)`, row i the
    weights of query i.

    Raises:
        TypeError, ValueError: `model` not a GPT, a GPT with ALiBi, `ids` as
            `GPT.forward` rejects them.
    """
    _check(model, ids)
    positions = torch.arange(ids.size(1), device=ids.device)  # (L,)
    x = model.embed(ids)  # (B, L) -> (B, L, E)
    if model.position_embed is not None:
        x = x + model.position_embed(positions)
    maps = []
    for block in model.blocks:
        maps.append(head_weights(block.attn, block.attn_norm(x), positions))
        # the model's own block
        x = block(x, positions, Mask(alignment="bottom_right"))
    return torch.stack(maps)  # (layers, B, H, L, L)


# --8<-- [end:maps]


# --8<-- [start:ablation]
@torch.no_grad()
def ablated_bits(
    model: GPT, ids: Tensor, heads: Iterable[tuple[int, int]] = ()
) -> Tensor:
    """The bits of each next byte of `ids (B, L)` with the outputs of `heads`
    (layer, head) set to zero.

    Returns:
        `(B, L - 1)`: entry i is `-log2 p(ids[:, i + 1] | ids[:, : i + 1])`.

    Raises:
        TypeError, ValueError: as `attention_maps`, a head that is not
            `(layer, head)` within the model.
    """
    _check(model, ids)
    zeroed: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (
            0 <= layer < model.config.layers and 0 <= head < model.config.heads
        ):
            raise ValueError(
                "heads must be (layer, head) with layer < "
                f"{model.config.layers} and head < {model.config.heads}, "
                f"got ({layer}, {head})"
            )
        zeroed.setdefault(layer, []).append(head)

    # --8<-- [start:ablation-hook]
    def zero(heads_of_layer: list[int]):
        def hook(_module, inputs: tuple[Tensor]) -> tuple[Tensor]:
            # (B, L, H, D)
            merged = inputs[0].unflatten(-1, (model.config.heads, -1)).clone()
            merged[:, :, heads_of_layer] = 0
            return (merged.flatten(-2),)  # (B, L, H * D), what out_proj reads

        return hook

    hooks = [
        model.blocks[layer].attn.out_proj.register_forward_pre_hook(
            zero(heads_of_layer)
        )
        for layer, heads_of_layer in zeroed.items()
    ]
    # --8<-- [end:ablation-hook]
    try:
        logits = model(ids[:, :-1])  # (B, L - 1, V)
    finally:
        for hook in hooks:
            hook.remove()
    # (B, L - 1)
    nats = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return nats / math.log(2)


# --8<-- [end:ablation]
