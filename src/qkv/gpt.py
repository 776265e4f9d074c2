"""A small GPT: a decoder-only language model built from the package's attention, RoPE, ALiBi and KVCache.

    x = embed(ids)                                  (+ a learned position embedding)
    x = x + Attention(norm(x))      in each block   (causal; RoPE or ALiBi inside; a KV cache when decoding)
    x = x + MLP(norm(x))
    logits = lm_head(norm(x))

`GPTConfig` chooses the parts: the norm (RMSNorm or LayerNorm) and where it sits (before each sub-layer, as
above, or after each residual addition, as in the original Transformer), the MLP (SwiGLU or GELU), the
positions (RoPE, learned, ALiBi or none), QK-norm, grouped key-value heads, biases in the linear layers,
soft-capped attention scores, learned attention sinks, a gate on each head's output, tied embeddings. The
defaults are Llama's shape (RMSNorm before each sub-layer, SwiGLU, RoPE, no biases, no QK-norm, no
soft-capping), and `to_transformers` and
`from_transformers` convert such a model to and from `transformers`' `LlamaForCausalLM` (the optional extra
`qkv[hf]`; imported only by these two functions).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv._checks import (
    check_bool,
    check_number,
    check_sizes,
    check_tensor,
    shape,
)
from qkv.cache import KVCache
from qkv.dispatch import _attention
from qkv.masks import Mask
from qkv.positions import alibi_bias, apply_rope
from qkv.rope_scaling import RULES, rope_frequencies

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

Norm = Literal["rms", "layer"]
MLPKind = Literal["swiglu", "gelu"]
Positions = Literal["rope", "learned", "alibi"]
NormPosition = Literal["pre", "post"]
NORMS, MLPS, POSITIONS = (
    ("rms", "layer"),
    ("swiglu", "gelu"),
    ("rope", "learned", "alibi", None),
)
NORM_POSITIONS = ("pre", "post")


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """The shape of a `GPT`; checked when it is made.

    Args:
        vocab_size: V, the number of token ids (256 for bytes).
        width: E, the width of the residual stream.
        layers: the number of blocks.
        heads: H, query heads; each has `E // H` features.
        kv_heads: key-value heads, dividing H: H for multi-head attention, 1 for multi-query, between for
            grouped-query attention (Ainslie et al., 2023). None: H.
        mlp_width: the MLP's hidden width. None: `4 E` for GELU, `8 E // 3` for SwiGLU (the same number of
            parameters, in three matrices instead of two).
        norm: `"rms"` (RMSNorm, Zhang and Sennrich, 2019) or `"layer"` (LayerNorm).
        norm_position: `"pre"`, `x + f(norm(x))` for each sub-layer `f`, and a norm before the output; or
            `"post"`, `norm(x + f(x))` (the original Transformer's), and none before the output (the last
            block's output is already normalised).
        mlp: `"swiglu"`, `down(silu(gate x) * up x)` (Shazeer, 2020), or `"gelu"`, `down(gelu(up x))`.
        positions: `"rope"` (rotate queries and keys, `qkv.apply_rope`'s half-split layout), `"learned"`
            (an embedding per position, added to the tokens'), `"alibi"` (`qkv.alibi_bias` on the scores) or
            None (the causal mask alone tells order).
        rope_base: RoPE's base; pair `i` of a head turns by `position * rope_base**(-2i/D)`.
        rope_scaling: None, or a rule that stretches RoPE past the context the model was trained on, as
            `qkv.rope_frequencies` takes it: a dict in the format of a `transformers` config's
            `rope_parameters`, e.g. `{"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 128}`. Needs `positions="rope"`.
        qk_norm: normalise each head's queries and keys (with `norm`, over the head's features) before RoPE.
        bias: the linear layers of attention and of the MLP add a bias (the output layer never does).
        softcap: None, or `c > 0`: each attention score `s` (scaled, before ALiBi, the mask and the softmax)
            becomes `c * tanh(s / c)`, which lies in `(-c, c)` (Gemma 2's attention logit soft-capping).
            The scores are then computed here, not by a fused kernel.
        sinks: each query head has one learned logit, `qkv.attention`'s `sinks`, that sits beside every
            row's scores in the softmax and whose share is dropped: a head may give part of its weight to
            nothing instead of to a token. It starts at 0. Not a Llama option: `to_transformers` refuses it.
        gate: each head's output is multiplied, feature by feature, by `sigmoid(x W_g)`, `W_g` a learned
            `(E, H * D)` map of the sub-layer's input `x` (with a bias if `bias`): Qiu et al.'s (2025) gate
            after attention, as Qwen3-Next's full-attention layers apply it. Not a Llama option either.
        tie_embeddings: the output layer reuses the token embedding matrix.
        context: the most positions the model reads at once, cache included.
        norm_eps: the epsilon of every norm.

    Raises:
        TypeError: a size that is not an int, a flag that is not a bool, a number that is not a number.
        ValueError: a size that is not positive, `heads` not dividing `width`, `kv_heads` not dividing
            `heads`, an odd head size with RoPE, an unknown `norm`, `norm_position`, `mlp` or `positions`,
            a `rope_base` not above 1, a `norm_eps` or `softcap` not positive, a `rope_scaling` that
            `qkv.rope_frequencies` refuses or without RoPE.
    """

    vocab_size: int = 256
    width: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None
    mlp_width: int | None = None
    norm: Norm = "rms"
    norm_position: NormPosition = "pre"
    mlp: MLPKind = "swiglu"
    positions: Positions | None = "rope"
    rope_base: float = 10000.0
    rope_scaling: dict | None = None
    qk_norm: bool = False
    bias: bool = False
    softcap: float | None = None
    sinks: bool = False
    gate: bool = False
    tie_embeddings: bool = True
    context: int = 256
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        sizes = (
            "vocab_size",
            "width",
            "layers",
            "heads",
            "kv_heads",
            "mlp_width",
            "context",
        )
        check_sizes(
            **{
                name: getattr(self, name)
                for name in sizes
                if getattr(self, name) is not None
            }
        )
        for name, choices in (
            ("norm", NORMS),
            ("norm_position", NORM_POSITIONS),
            ("mlp", MLPS),
            ("positions", POSITIONS),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"{name} must be one of {choices}, got {getattr(self, name)!r}"
                )
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.mlp_width is None:
            default = (
                4 * self.width if self.mlp == "gelu" else 8 * self.width // 3
            )
            object.__setattr__(self, "mlp_width", default)
        if self.width % self.heads:
            raise ValueError(
                f"heads ({self.heads}) must divide width ({self.width})"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}): each key-value head serves "
                "a group of query heads"
            )
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(
                f"RoPE turns channels in pairs: the head size width // heads = {self.head_dim} must be even"
            )
        check_number("rope_base", self.rope_base, above=1.0)
        if self.rope_scaling is not None:
            if self.positions != "rope":
                raise ValueError(
                    f"rope_scaling needs positions='rope', got positions={self.positions!r}"
                )
            rope_frequencies(
                self.head_dim, base=self.rope_base, scaling=self.rope_scaling
            )
        check_number("norm_eps", self.norm_eps, above=0.0)
        if self.softcap is not None:
            check_number("softcap", self.softcap, above=0.0)
        check_bool("qk_norm", self.qk_norm)
        check_bool("bias", self.bias)
        check_bool("sinks", self.sinks)
        check_bool("gate", self.gate)
        check_bool("tie_embeddings", self.tie_embeddings)

    @property
    def head_dim(self) -> int:
        """D, the features of each head: `width // heads`."""
        return self.width // self.heads


def _norm(config: GPTConfig, size: int) -> nn.Module:
    """The config's norm over the last `size` features."""
    if config.norm == "rms":
        return nn.RMSNorm(size, eps=config.norm_eps)
    return nn.LayerNorm(size, eps=config.norm_eps)


class Attention(nn.Module):
    """Causal self-attention: grouped key-value heads; QK-norm, RoPE, soft-capping, sinks, an output gate if
    asked; a KV cache."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            config.heads,
            config.kv_heads,
            config.head_dim,
        )
        bias = config.bias
        self.q_proj = nn.Linear(
            config.width, config.heads * config.head_dim, bias=bias
        )
        self.k_proj = nn.Linear(
            config.width, config.kv_heads * config.head_dim, bias=bias
        )
        self.v_proj = nn.Linear(
            config.width, config.kv_heads * config.head_dim, bias=bias
        )
        self.out_proj = nn.Linear(
            config.heads * config.head_dim, config.width, bias=bias
        )
        self.q_norm = _norm(config, config.head_dim) if config.qk_norm else None
        self.k_norm = _norm(config, config.head_dim) if config.qk_norm else None
        self.rope_base = (
            config.rope_base if config.positions == "rope" else None
        )
        self.rope_scaling = config.rope_scaling
        self.softcap = config.softcap
        self.sinks = (
            nn.Parameter(torch.zeros(config.heads)) if config.sinks else None
        )  # (H,)
        self.gate_proj = (
            nn.Linear(config.width, config.heads * config.head_dim, bias=bias)
            if config.gate
            else None
        )

    # --8<-- [start:attention]
    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        mask: Mask,
        cache: KVCache | None = None,
    ) -> Tensor:
        """`x (B, L, E)` at `positions (L,)` -> `(B, L, E)`; the cache, if any,
        grows by L tokens."""
        q = self._split_heads(self.q_proj(x))  # (B, L, E) -> (B, H, L, D)
        k = self._split_heads(self.k_proj(x))  # (B, L, E) -> (B, Hkv, L, D)
        v = self._split_heads(self.v_proj(x))  # (B, L, E) -> (B, Hkv, L, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_base is not None:
            q = apply_rope(
                q, positions, base=self.rope_base, scaling=self.rope_scaling
            )
            k = apply_rope(
                k, positions, base=self.rope_base, scaling=self.rope_scaling
            )
        if cache is not None:
            # cached tokens first: (B, Hkv, S, D), S = past + L
            k, v = cache.update(k, v)
        if self.softcap is None:
            # (B, H, L, D)
            heads = _attention(q, k, v, mask, enable_gqa=True, sinks=self.sinks)
        else:
            heads = softcapped_attention(
                q, k, v, mask, self.softcap, self.sinks
            )  # (B, H, L, D)
        if self.gate_proj is not None:  # each head's features, scaled by (0, 1)
            heads = heads * torch.sigmoid(self._split_heads(self.gate_proj(x)))
        # (B, H, L, D) -> (B, L, E)
        return self.out_proj(heads.transpose(1, 2).flatten(2))

    # --8<-- [end:attention]

    def _split_heads(self, x: Tensor) -> Tensor:
        """`(B, L, heads * D) -> (B, heads, L, D)`, for the query heads or the key-value heads."""
        # (B, L, heads * D) -> (B, L, heads, D)
        x = x.unflatten(-1, (-1, self.head_dim))
        return x.transpose(1, 2)  # (B, L, heads, D) -> (B, heads, L, D)


def softcapped_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Mask,
    softcap: float,
    sinks: Tensor | None = None,
) -> Tensor:
    """Attention whose scaled scores are soft-capped, `softcap * tanh(scores / softcap)`, before the mask.

    Args:
        q: `(B, H, L, D)` queries.
        k: `(B, Hkv, S, D)` keys, `Hkv` dividing H (each serves `H // Hkv` query heads).
        v: `(B, Hkv, S, D)` values.
        mask: the causal mask and any bias (ALiBi's, added after the cap); every query keeps a key.
        softcap: the cap `c > 0`: every score lies in `(-c, c)`.
        sinks: None, or `(H,)` logits, one per query head, uncapped, as `qkv.attention` takes them.

    Returns:
        `(B, H, L, D)`.
    """
    groups = q.size(1) // k.size(1)
    k = k.repeat_interleave(groups, dim=1)  # (B, Hkv, S, D) -> (B, H, S, D)
    v = v.repeat_interleave(groups, dim=1)  # (B, Hkv, S, D) -> (B, H, S, D)
    # (B, H, L, D) @ (B, H, D, S) -> (B, H, L, S)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = softcap * torch.tanh(scores / softcap)
    # bool (L, S), or float with ALiBi's bias
    keep = mask.as_tensor(q.size(-2), k.size(-2), q.device)
    if keep.dtype == torch.bool:
        scores = scores.masked_fill(~keep, float("-inf"))
    else:
        scores = scores + keep.to(scores.dtype)
    if sinks is None:
        # (B, H, L, S) @ (B, H, S, D) -> (B, H, L, D)
        return torch.softmax(scores, dim=-1) @ v
    # (B, H, L, 1)
    sink = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    # (B, H, L, S + 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)
    weights = weights[..., :-1]  # the sink's share is dropped
    return weights @ v  # (B, H, L, S) @ (B, H, S, D) -> (B, H, L, D)


class MLP(nn.Module):
    """SwiGLU, `down(silu(gate x) * up x)`, or GELU, `down(gelu(up x))`; biases if the config asks."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        width, hidden, bias = config.width, config.mlp_width, config.bias
        swiglu = config.mlp == "swiglu"
        self.gate_proj = nn.Linear(width, hidden, bias=bias) if swiglu else None
        self.up_proj = nn.Linear(width, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, width, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """`(B, L, E) -> (B, L, E)`, through `(B, L, mlp_width)`."""
        if self.gate_proj is None:
            return self.down_proj(F.gelu(self.up_proj(x)))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm, `x = x + Attention(norm(x))` then `x = x + MLP(norm(x))`, or post-norm,
    `x = norm(x + Attention(x))` then `x = norm(x + MLP(x))`."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attn_norm = _norm(config, config.width)
        self.attn = Attention(config)
        self.mlp_norm = _norm(config, config.width)
        self.mlp = MLP(config)

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        mask: Mask,
        cache: KVCache | None = None,
    ) -> Tensor:
        """`(B, L, E) -> (B, L, E)`."""
        if self.pre_norm:
            x = x + self.attn(self.attn_norm(x), positions, mask, cache)
            return x + self.mlp(self.mlp_norm(x))
        x = self.attn_norm(x + self.attn(x, positions, mask, cache))
        return self.mlp_norm(x + self.mlp(x))


class GPT(nn.Module):
    """A decoder-only language model: token ids in, the logits of the next token at every position out.

    Weights start from a normal distribution of standard deviation 0.02, biases at 0 (norms at 1 and 0).

    Args:
        config: its shape.

    Raises:
        TypeError: `config` is not a `GPTConfig`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(
                f"config must be a qkv.gpt.GPTConfig, got {type(config).__name__}"
            )
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.width)
        learned = config.positions == "learned"
        self.position_embed = (
            nn.Embedding(config.context, config.width) if learned else None
        )
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        pre_norm = config.norm_position == "pre"
        self.norm = _norm(config, config.width) if pre_norm else nn.Identity()
        self.lm_head = nn.Linear(config.width, config.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def new_cache(self) -> list[KVCache]:
        """An empty cache for `forward`: one `KVCache` per block."""
        return [KVCache() for _ in self.blocks]

    # --8<-- [start:forward]
    def forward(
        self, ids: Tensor, cache: Sequence[KVCache] | None = None
    ) -> Tensor:
        """The logits of the token after each of `ids`.

        Args:
            ids: `(B, L)` int64 or int32 token ids in `[0, vocab_size)`, on the
                model's device.
            cache: None, or `new_cache()`'s list, which holds the tokens before
                `ids` and grows by them: pass the prompt, then one token at a
                time, and the logits are those of one pass over it all.

        Returns:
            `(B, L, vocab_size)` logits, in the model's dtype.

        Raises:
            TypeError: `ids` not an int64 or int32 tensor (uint8 bytes too:
                convert them with `ids.long()`), a cache that is not a list of
                `KVCache`.
            ValueError: `ids` not `(B, L)` with `B, L >= 1`, an id outside
                `[0, vocab_size)`, ids on another device, a cache of the wrong
                length or batch, or more positions (cached and new) than the
                model's `context`.
        """
        past = self._check(ids, cache)  # the number of tokens already cached
        length = ids.size(1)
        positions = torch.arange(past, past + length, device=ids.device)  # (L,)
        x = self.embed(ids)  # (B, L) -> (B, L, E)
        if self.position_embed is not None:
            x = x + self.position_embed(positions)  # (L, E) broadcast over B
        mask = Mask(
            alignment="bottom_right",
            dense=self._alibi(length, past + length, x.dtype),
        )
        caches = [None] * len(self.blocks) if cache is None else cache
        for block, block_cache in zip(self.blocks, caches, strict=True):
            x = block(x, positions, mask, block_cache)
        return self.lm_head(self.norm(x))  # (B, L, E) -> (B, L, V)

    # --8<-- [end:forward]

    def _alibi(
        self, length: int, keys: int, dtype: torch.dtype
    ) -> Tensor | None:
        """ALiBi's `(H, L, S)` bias for L queries after `S - L` cached tokens, or None without ALiBi."""
        if self.config.positions != "alibi":
            return None
        heads, device = self.config.heads, self.embed.weight.device
        # bottom-right: the L queries are the last L of the S positions, as for the causal mask
        # (H, L, S)
        bias = alibi_bias(heads, length, keys, device, alignment="bottom_right")
        return bias.to(dtype)

    def _check(self, ids: object, cache: object) -> int:
        """Raise unless `ids (B, L)` and `cache` fit the model; return the number of cached tokens."""
        if not isinstance(ids, Tensor):
            raise TypeError(
                f"ids must be a torch.Tensor, got {type(ids).__name__}"
            )
        if (
            ids.is_floating_point()
            or ids.is_complex()
            or ids.dtype == torch.bool
        ):
            raise TypeError(
                f"ids must be an integer tensor, got dtype {ids.dtype}"
            )
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"ids must be int64 or int32 (the embedding's index dtypes), got dtype {ids.dtype}: "
                "convert them with ids.long()"
            )
        if ids.dim() != 2 or ids.numel() == 0:
            raise ValueError(
                f"ids must be (B, L) with B, L >= 1, got shape {shape(ids)}"
            )
        device = self.embed.weight.device
        if ids.device != device:
            raise ValueError(
                f"ids is on {ids.device} but the model is on {device}"
            )
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"ids must lie in [0, vocab_size) = [0, {self.config.vocab_size}), "
                f"got ids from {low} to {high}"
            )
        past = _cached_tokens(cache, len(self.blocks), ids.size(0))
        if past + ids.size(1) > self.config.context:
            raise ValueError(
                f"{ids.size(1)} ids after {past} cached tokens make {past + ids.size(1)} positions, "
                f"more than the model's context ({self.config.context})"
            )
        return past


def _cached_tokens(cache: object, layers: int, batch: int) -> int:
    """Raise unless `cache` is None or one `KVCache` per block, all of one length and batch; that length."""
    if cache is None:
        return 0
    if not isinstance(cache, Sequence) or not all(
        isinstance(c, KVCache) for c in cache
    ):
        raise TypeError(
            "cache must be a list of qkv.KVCache, one per block (model.new_cache()), "
            f"got {type(cache).__name__}"
        )
    if len(cache) != layers:
        raise ValueError(
            f"cache must hold one KVCache per block ({layers}), got {len(cache)}"
        )
    lengths = {len(c) for c in cache}
    if len(lengths) > 1:
        raise ValueError(
            f"the cache's layers disagree on how many tokens they hold: {lengths}"
        )
    held = cache[0].key  # (B, Hkv, T, D), None while empty
    if held is not None and held.size(0) != batch:
        raise ValueError(
            f"cache holds a batch of {held.size(0)}, but ids have {batch} rows"
        )
    return lengths.pop()


# --8<-- [start:sampling]
def next_token_probabilities(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
) -> Tensor:
    """The distribution a sampler draws the next token from: softmax at a
    temperature, then the filters.

    Each filter keeps some tokens, sets the others to 0 and renormalises, in
    this order:

    - `top_k`: the k most probable tokens (and any tied with the k-th);
    - `top_p` (nucleus sampling, Holtzman et al., 2020): the most probable
      tokens, in order, until their mass reaches p; the token that crosses p is
      kept;
    - `min_p`: the tokens at least `min_p` times as probable as the most
      probable one.

    Args:
        logits: `(..., V)` floating point, no NaN or +inf; -inf rules a token
            out, but each row needs a finite logit.
        temperature: divides the logits; above 0 (below 1 sharpens, above 1
            flattens). The logits are shifted by their maximum and divided in
            float32 at least, so a tiny temperature gives the most probable
            tokens, not an overflow.
        top_k: None or a positive int (k >= V keeps every token).
        top_p: None or a number in (0, 1].
        min_p: None or a number in [0, 1].

    Returns:
        `(..., V)` probabilities, each row summing to 1, in the dtype of
        `logits`.

    Raises:
        TypeError, ValueError: `logits` not a floating-point tensor with a
            finite logit in each row, or an argument outside its range.
    """
    _check_logits(logits)
    _check_sampling(temperature, top_k, top_p, min_p, greedy_allowed=False)
    # --8<-- [start:sampling-rules]
    # in float32 at least, and shifted to at most 0: dividing by a tiny
    # temperature cannot overflow
    dtype = torch.promote_types(logits.dtype, torch.float32)
    # (..., V)
    shifted = logits.to(dtype) - logits.amax(-1, keepdim=True).to(dtype)
    # the most probable logit stays 0: 0 / a temperature that rounds to 0 in
    # dtype would be NaN
    divided = torch.where(shifted == 0, 0.0, shifted / temperature)
    probs = torch.softmax(divided, dim=-1)  # (..., V)
    if top_k is not None:
        # (..., 1)
        kth = probs.topk(min(top_k, probs.size(-1)), dim=-1).values[..., -1:]
        probs = _renormalised(probs, probs >= kth)
    if top_p is not None:
        # (..., V), most probable first
        ordered, order = probs.sort(dim=-1, descending=True)
        # the mass of the tokens more probable than each
        before = ordered.cumsum(-1) - ordered
        probs = _renormalised(
            probs, (before < top_p).scatter(-1, order, before < top_p)
        )
    if min_p is not None:
        probs = _renormalised(
            probs, probs >= min_p * probs.amax(-1, keepdim=True)
        )
    return probs.to(logits.dtype)
    # --8<-- [end:sampling-rules]


def _renormalised(probs: Tensor, keep: Tensor) -> Tensor:
    """`probs` where `keep`, 0 elsewhere, scaled to sum to 1 again."""
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


# --8<-- [end:sampling]


# --8<-- [start:generate]
@torch.no_grad()
def generate(
    model: GPT,
    ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    seed: int = 0,
) -> Tensor:
    """Continue `ids` by `max_new_tokens` tokens, one at a time, with a KV
    cache.

    The prompt goes through the model once (prefill); then each new token alone
    (decode), its keys and values appended to the cache. Temperature 0 takes the
    most probable token (greedy); otherwise each token is drawn from
    `next_token_probabilities` by a `torch.Generator` of its own, seeded with
    `seed`, so the same seed gives the same tokens and the global random state
    is left alone.

    Args:
        model: the `GPT`.
        ids: `(B, L)` integer prompt, as `GPT.forward` takes it.
        max_new_tokens: how many tokens to add (0 or more); `L + max_new_tokens`
            must fit the context.
        temperature: 0 (greedy) or above, as for `next_token_probabilities`.
        top_k: as for `next_token_probabilities`.
        top_p: as for `next_token_probabilities`.
        min_p: as for `next_token_probabilities`.
        seed: seeds the sampler's generator.

    Returns:
        `(B, L + max_new_tokens)`: the prompt, then the new tokens.

    Raises:
        TypeError, ValueError: as `GPT.forward` for `ids`; `model` not a `GPT`;
            `max_new_tokens` not a non-negative int or more than the context
            leaves; a sampling argument outside its range.
    """
    _check_generate(
        model, ids, max_new_tokens, temperature, top_k, top_p, min_p, seed
    )
    # --8<-- [start:generate-loop]
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    cache = model.new_cache()
    new = ids  # what the model reads next: the prompt, then each new token
    for _ in range(max_new_tokens):
        # (B, L, V) -> (B, V), the next token's
        logits = model(new, cache)[:, -1]
        if temperature == 0:
            new = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            probs = next_token_probabilities(
                logits,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
            )
            new = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        ids = torch.cat([ids, new], dim=1)  # (B, L + 1)
    return ids
    # --8<-- [end:generate-loop]


# --8<-- [end:generate]


def _check_generate(
    model: object,
    ids: object,
    max_new_tokens: object,
    temperature: object,
    top_k: object,
    top_p: object,
    min_p: object,
    seed: object,
    name: str = "model",
) -> None:
    """Raise unless a call of `generate` is well formed, before any token is computed.

    `name` is what the caller calls `model`, for the messages.
    """
    if not isinstance(model, GPT):
        raise TypeError(
            f"{name} must be a qkv.gpt.GPT, got {type(model).__name__}"
        )
    model._check(ids, None)
    check_sizes(0, max_new_tokens=max_new_tokens, seed=seed)
    if seed >= 2**64:  # what torch.Generator.manual_seed takes
        raise ValueError(f"seed must be below 2**64, got {seed}")
    _check_sampling(temperature, top_k, top_p, min_p, greedy_allowed=True)
    room = model.config.context - ids.size(1)
    if max_new_tokens > room:
        raise ValueError(
            f"max_new_tokens ({max_new_tokens}) is more than the {name}'s context "
            f"({model.config.context}) leaves after a prompt of {ids.size(1)} tokens ({room})"
        )


def _check_logits(logits: object) -> None:
    """Raise unless `logits (..., V)` is floating point, without NaN or +inf, with a finite logit per row."""
    check_tensor("logits", logits)
    if logits.size(-1) == 0:
        raise ValueError(
            f"logits must have a last dimension V of at least 1, got {shape(logits)}"
        )
    if logits.isnan().any() or logits.isposinf().any():
        raise ValueError(
            f"logits must hold no NaN or +inf, got some in logits {shape(logits)}"
        )
    if (logits.amax(-1) == -math.inf).any():
        raise ValueError(
            f"each row of logits needs a finite logit (all -inf rules out every token): logits "
            f"{shape(logits)}"
        )


def _check_sampling(
    temperature: object,
    top_k: object,
    top_p: object,
    min_p: object,
    greedy_allowed: bool,
) -> None:
    """Raise unless the sampling arguments are in range (temperature 0 only where greedy is possible)."""
    check_number("temperature", temperature, above=-math.inf)
    if temperature < 0 or (temperature == 0 and not greedy_allowed):
        least = "0 (greedy) or above" if greedy_allowed else "above 0"
        raise ValueError(f"temperature must be {least}, got {temperature}")
    if top_k is not None:
        check_sizes(top_k=top_k)
    if top_p is not None:
        check_number("top_p", top_p, above=0.0)
        if top_p > 1:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    if min_p is not None:
        check_number("min_p", min_p, above=-math.inf)
        if not 0 <= min_p <= 1:
            raise ValueError(f"min_p must lie in [0, 1], got {min_p}")


# Our parameter names and transformers' LlamaForCausalLM's; {} stands for the block's index.
LLAMA_NAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "blocks.{}.attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "blocks.{}.attn.q_proj.weight": "model.layers.{}.self_attn.q_proj.weight",
    "blocks.{}.attn.k_proj.weight": "model.layers.{}.self_attn.k_proj.weight",
    "blocks.{}.attn.v_proj.weight": "model.layers.{}.self_attn.v_proj.weight",
    "blocks.{}.attn.out_proj.weight": "model.layers.{}.self_attn.o_proj.weight",
    "blocks.{}.mlp_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "blocks.{}.mlp.gate_proj.weight": "model.layers.{}.mlp.gate_proj.weight",
    "blocks.{}.mlp.up_proj.weight": "model.layers.{}.mlp.up_proj.weight",
    "blocks.{}.mlp.down_proj.weight": "model.layers.{}.mlp.down_proj.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",  # untied only: tied, it is embed.weight
}
# What Llama's shape needs, as `GPTConfig` says it.
LLAMA_SHAPE = {
    "norm": "rms",
    "norm_position": "pre",
    "mlp": "swiglu",
    "positions": "rope",
    "qk_norm": False,
    "bias": False,
    "softcap": None,
    "sinks": False,
    "gate": False,
}
# `GPTConfig`'s fields by `LlamaConfig`'s names (RoPE's base is in `rope_parameters`).
LLAMA_CONFIG = {
    "vocab_size": "vocab_size",
    "width": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "mlp_width": "intermediate_size",
    "context": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "tie_embeddings": "tie_word_embeddings",
}


def to_transformers(model: GPT) -> LlamaForCausalLM:
    """A `transformers.LlamaForCausalLM` with `model`'s config and a copy of its weights.

    Both compute the same logits (transformers takes RoPE's angles and RMSNorm in float32 whatever the
    dtype: in float64 the two agree to about float32's round-off, not float64's).

    Raises:
        ImportError: transformers is not installed (`pip install 'qkv[hf]'`).
        TypeError: `model` is not a `GPT`.
        ValueError: its config is not Llama's shape (the message names the option).
    """
    if not isinstance(model, GPT):
        raise TypeError(
            f"model must be a qkv.gpt.GPT, got {type(model).__name__}"
        )
    config = model.config
    for option, needed in LLAMA_SHAPE.items():
        if getattr(config, option) != needed:
            raise ValueError(
                f"LlamaForCausalLM has no counterpart for {option}={getattr(config, option)!r}: "
                f"to_transformers needs {option}={needed!r} ({_llama_shape()})"
            )
    scaling = dict(config.rope_scaling or {})
    if scaling.get("rope_type") == "ntk":
        raise ValueError(
            "LlamaForCausalLM has no counterpart for rope_scaling with rope_type 'ntk' (transformers "
            "has 'dynamic', the same rule at a length that grows with the sequence)"
        )
    # transformers reads the original length from the context
    if scaling.get("rope_type") == "dynamic":
        original = scaling.pop("original_max_position_embeddings")
        if original != config.context:
            raise ValueError(
                "LlamaForCausalLM's dynamic RoPE takes the original length from the context: "
                f"to_transformers needs rope_scaling['original_max_position_embeddings'] ({original}) "
                f"= context ({config.context})"
            )
    llama_config, llama = _llama_classes()
    hf_config = llama_config(
        **{
            theirs: getattr(config, ours)
            for ours, theirs in LLAMA_CONFIG.items()
        },
        head_dim=config.head_dim,
        hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_base}
        | scaling,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    weight = model.embed.weight
    hf_model = llama(hf_config).to(device=weight.device, dtype=weight.dtype)
    _copy_weights(model, hf_model, to_hf=True)
    return hf_model.train(model.training)


def from_transformers(hf_model: LlamaForCausalLM) -> GPT:
    """A `GPT` with the config and a copy of the weights of a `transformers.LlamaForCausalLM`.

    Raises:
        ImportError: transformers is not installed (`pip install 'qkv[hf]'`).
        TypeError: `hf_model` is not a `LlamaForCausalLM`.
        ValueError: a config option that `GPT` lacks: biases, an activation other than SiLU, a RoPE type
            or parameter that `qkv.rope_frequencies` does not take, or a head size other than
            `hidden_size // num_attention_heads`.
    """
    _, llama = _llama_classes()
    if not isinstance(hf_model, llama):
        raise TypeError(
            f"hf_model must be a transformers.LlamaForCausalLM, got {type(hf_model).__name__}"
        )
    hf = hf_model.config
    rope = hf.rope_parameters
    unsupported = {
        "attention_bias": (hf.attention_bias, False),
        "mlp_bias": (hf.mlp_bias, False),
        "hidden_act": (hf.hidden_act, "silu"),
        "rope_parameters['rope_type']": (
            rope["rope_type"],
            rope["rope_type"]
            if rope["rope_type"] in RULES
            else "one of " + ", ".join(RULES),
        ),
        "head_dim": (hf.head_dim, hf.hidden_size // hf.num_attention_heads),
    }
    for option, (value, needed) in unsupported.items():
        if value != needed:
            raise ValueError(
                f"GPT has no counterpart for {option}={value!r}: from_transformers needs "
                f"{option}={needed!r}"
            )
    config = GPTConfig(
        **{ours: getattr(hf, theirs) for ours, theirs in LLAMA_CONFIG.items()},
        rope_base=float(rope["rope_theta"]),
        rope_scaling=_rope_scaling(rope, hf.max_position_embeddings),
        **LLAMA_SHAPE,
    )
    weight = hf_model.get_input_embeddings().weight
    model = GPT(config).to(device=weight.device, dtype=weight.dtype)
    _copy_weights(model, hf_model, to_hf=False)
    return model.train(hf_model.training)


def _rope_scaling(rope: dict, max_positions: int) -> dict | None:
    """`GPTConfig.rope_scaling` from a `transformers` config's `rope_parameters`: None for plain RoPE.

    transformers' "dynamic" takes the original length from `max_position_embeddings`; qkv names it.
    """
    if rope["rope_type"] == "default":
        return None
    scaling = {
        name: value for name, value in rope.items() if name != "rope_theta"
    }
    if rope["rope_type"] == "dynamic":
        scaling.setdefault("original_max_position_embeddings", max_positions)
    required, optional = RULES[rope["rope_type"]]
    unknown = set(scaling) - {"rope_type", *required, *optional}
    if unknown:
        raise ValueError(
            f"GPT has no counterpart for rope_parameters {sorted(unknown)} (rope_type "
            f"{rope['rope_type']!r}): from_transformers needs only {sorted({*required, *optional})}"
        )
    return scaling


def _llama_shape() -> str:
    return ", ".join(
        f"{option}={needed!r}" for option, needed in LLAMA_SHAPE.items()
    )


def _llama_classes() -> tuple[type, type]:
    """transformers' `LlamaConfig` and `LlamaForCausalLM`, imported now (an optional dependency)."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as error:
        raise ImportError(
            "converting to or from transformers needs the transformers package: "
            "pip install 'qkv[hf]'"
        ) from error
    return LlamaConfig, LlamaForCausalLM


def _copy_weights(model: GPT, hf_model: nn.Module, to_hf: bool) -> None:
    """Copy every parameter from `model` to `hf_model` (`to_hf`) or back, matched by `LLAMA_NAMES`."""
    # tied embeddings are one parameter, listed once in each: embed.weight, model.embed_tokens.weight
    theirs = dict(hf_model.named_parameters())
    ours = dict(model.named_parameters())
    names = {name: _llama_name(name) for name in ours}
    if sorted(names.values()) != sorted(theirs):
        raise ValueError(
            "the two models' parameters do not match one to one: "
            f"ours as transformers' {sorted(names.values())} vs theirs {sorted(theirs)}"
        )
    with torch.no_grad():
        for name, hf_name in names.items():
            ours_, theirs_ = ours[name], theirs[hf_name]
            (theirs_ if to_hf else ours_).copy_(ours_ if to_hf else theirs_)


def _llama_name(name: str) -> str:
    """transformers' name for our parameter `name`: `blocks.3.attn.q_proj.weight` -> `model.layers.3...`."""
    index = re.search(r"\.(\d+)\.", name)
    if index is None:
        return LLAMA_NAMES[name]
    return LLAMA_NAMES[name.replace(index.group(0), ".{}.", 1)].format(
        index.group(1)
    )
