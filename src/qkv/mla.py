"""Multi-head latent attention (MLA, DeepSeek-AI, 2024, "DeepSeek-V2"): a cache of one small latent per token.

Keys and values are not projected from a token directly but from a latent `c = W_dkv x` of `latent_dim`
numbers, shared by every head: `k_h = W_uk[h] c`, `v_h = W_uv[h] c`. RoPE cannot act on keys made this way
(a rotation between `W_uk` and the score would stop the trick below), so each head's score gets a second,
rotated part, from `rope_dim` more features: a query part per head and one key part shared by all heads.

    score_h(i, j) = (q_h(i) . k_h(j) + rope(qr_h(i)) . rope(kr(j))) / sqrt(head_dim + rope_dim)

The cache holds `c` and `rope(kr)`: `latent_dim + rope_dim` numbers per token and layer, against
`2 * heads * head_dim` for multi-head attention.

Decoding can skip the keys and values altogether ("absorbed" weights): `q_h . (W_uk[h] c) = (W_uk[h]^T q_h)
. c`, so each head's query moves into the latent space once, and `sum_j p_j W_uv[h] c_j = W_uv[h] sum_j p_j
c_j`, so the weights average the latents and `W_uv[h]` is applied once to the average (or folded into the
output projection). What remains is attention of `heads` query heads against one shared key-value head,
the latents: multi-query attention.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from qkv._checks import (
    check_bool,
    check_cache_update,
    check_module_input,
    check_number,
    check_same_dtype_and_device,
    check_sizes,
    check_tensor,
    shape,
)
from qkv.dispatch import attention
from qkv.positions import apply_rope


class LatentCache:
    """The latents `(B, T, latent_dim)` and rotated shared keys `(B, T, rope_dim)` of one MLA layer."""

    def __init__(self) -> None:
        self.latents: Tensor | None = None
        self.rope_keys: Tensor | None = None

    def __len__(self) -> int:
        """T, the tokens cached so far."""
        return 0 if self.latents is None else self.latents.size(1)

    def update(
        self, latents: Tensor, rope_keys: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Append new tokens' latents and rotated keys; return those of every token so far.

        Args:
            latents: `(B, T_new, latent_dim)`.
            rope_keys: `(B, T_new, rope_dim)`.

        Returns:
            `(latents, rope_keys)`: `(B, T, latent_dim)` and `(B, T, rope_dim)`, `T = len(self)` after
            the update.

        Raises:
            TypeError: a non-tensor or non-float input, or dtypes that differ (from each other or from
                what the cache holds).
            ValueError: inputs that are not 3-D, that disagree on `(B, T_new)`, or whose batch, sizes or
                device differ from what the cache holds.
        """
        self._check(latents, rope_keys)
        if self.latents is None:
            self.latents, self.rope_keys = latents, rope_keys
        else:
            # (B, T + T_new, latent_dim)
            self.latents = torch.cat([self.latents, latents], dim=1)
            # (B, T + T_new, rope_dim)
            self.rope_keys = torch.cat([self.rope_keys, rope_keys], dim=1)
        return self.latents, self.rope_keys

    def _check(self, latents: object, rope_keys: object) -> None:
        check_cache_update(
            ("B", "T", "features"),
            {"latents": latents, "rope_keys": rope_keys},
            {
                "cached latents": self.latents,
                "cached rope_keys": self.rope_keys,
            },
        )


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention whose keys and values come from a per-token latent (see the module docstring).

    Args:
        width: E, the features of each token in and out.
        heads: H.
        head_dim: the features of each head's query and key without RoPE (and of its value).
        rope_dim: the features of the rotated part of each query and of the shared rotated key (even).
        latent_dim: the features of the latent `c` that keys and values come from.
        rope_base: RoPE's base.

    Linear layers have no biases. The queries are projected from the token directly (DeepSeek-V2 also
    compresses them, which saves training memory, not cache).
    """

    def __init__(
        self,
        width: int,
        heads: int,
        head_dim: int,
        rope_dim: int,
        latent_dim: int,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        check_sizes(
            width=width,
            heads=heads,
            head_dim=head_dim,
            rope_dim=rope_dim,
            latent_dim=latent_dim,
        )
        if rope_dim % 2:
            raise ValueError(
                f"rope_dim must be even (RoPE turns channels in pairs), got {rope_dim}"
            )
        check_number("rope_base", rope_base, above=1.0)
        self.heads, self.head_dim, self.rope_dim, self.rope_base = (
            heads,
            head_dim,
            rope_dim,
            rope_base,
        )
        # q_h and qr_h
        self.query = nn.Linear(width, heads * (head_dim + rope_dim), bias=False)
        self.down = nn.Linear(width, latent_dim, bias=False)  # W_dkv: x -> c
        # x -> kr, shared by the heads
        self.rope_key = nn.Linear(width, rope_dim, bias=False)
        # W_uk: c -> k_h
        self.up_key = nn.Linear(latent_dim, heads * head_dim, bias=False)
        # W_uv: c -> v_h
        self.up_value = nn.Linear(latent_dim, heads * head_dim, bias=False)
        self.out = nn.Linear(heads * head_dim, width, bias=False)

    @property
    def cached_numbers_per_token(self) -> int:
        """What the cache keeps per token: `latent_dim + rope_dim` (multi-head attention: `2 H D`)."""
        return self.down.out_features + self.rope_dim

    def forward(
        self,
        x: Tensor,
        cache: LatentCache | None = None,
        *,
        absorbed: bool = False,
    ) -> Tensor:
        """Attend each of the `T_new` tokens of `x (B, T_new, E)` to itself and every earlier token.

        Args:
            x: `(B, T_new, E)`, the tokens after the `len(cache)` already cached (none without a cache).
            cache: a `LatentCache`, appended to; None: `x` is the whole sequence.
            absorbed: compute with the absorbed weights (the same result; see the module docstring).

        Returns:
            `(B, T_new, E)`; `(B, 0, E)` for no new token.

        Raises:
            TypeError: `x` not a floating-point tensor of the parameters' dtype, a cache that is not a
                `LatentCache`, `absorbed` not a bool.
            ValueError: `x` not `(B, T_new, E)` or on another device than the parameters, a cache that
                holds another batch size, latent or rope size, dtype or device.
        """
        self._check(x, cache, absorbed)
        length = x.size(1)
        past = 0 if cache is None else len(cache)
        positions = torch.arange(past, past + length, device=x.device)
        queries = (
            self.query(x).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        )  # (B, H, L, D + Dr)
        q_content, q_rope = queries.split(
            [self.head_dim, self.rope_dim], dim=-1
        )
        # (B, H, L, Dr)
        q_rope = apply_rope(q_rope, positions, base=self.rope_base)
        latents = self.down(x)  # (B, L, C)
        # (B, L, Dr)
        rope_keys = apply_rope(self.rope_key(x), positions, base=self.rope_base)
        if cache is not None:
            # (B, S, C), (B, S, Dr)
            latents, rope_keys = cache.update(latents, rope_keys)
        scale = 1 / math.sqrt(self.head_dim + self.rope_dim)
        if absorbed:
            heads_out = self._absorbed(
                q_content, q_rope, latents, rope_keys, scale
            )
        else:
            heads_out = self._plain(
                q_content, q_rope, latents, rope_keys, scale
            )
        # (B, H, L, D) -> (B, L, H D) -> (B, L, E)
        return self.out(heads_out.transpose(1, 2).flatten(2))

    def _check(self, x: object, cache: object, absorbed: object) -> None:
        """Raise unless `x (B, T_new, E)` fits the parameters and `cache`, if any, holds tokens it extends."""
        check_tensor("x", x)
        if x.dim() != 3 or x.size(-1) != self.query.in_features:
            raise ValueError(
                f"x must be (B, T, E) with E = {self.query.in_features}, got {shape(x)}"
            )
        check_module_input("x", x, self)
        check_bool("absorbed", absorbed)
        if cache is None:
            return
        if not isinstance(cache, LatentCache):
            raise TypeError(
                f"cache must be a qkv.mla.LatentCache or None, got {type(cache).__name__}"
            )
        if cache.latents is None:
            return
        ours = (x.size(0), self.down.out_features, self.rope_dim)  # (B, C, Dr)
        held = (
            cache.latents.size(0),
            cache.latents.size(-1),
            cache.rope_keys.size(-1),
        )
        if held != ours:
            raise ValueError(
                f"cache holds latents {shape(cache.latents)} (B, T, C) and rotated keys "
                f"{shape(cache.rope_keys)} (B, T, Dr), but this call's are ({ours[0]}, ., {ours[1]}) "
                f"and ({ours[0]}, ., {ours[2]})"
            )
        check_same_dtype_and_device(
            **{"cache's latents": cache.latents, "x": x}
        )

    def _plain(self, q_content, q_rope, latents, rope_keys, scale) -> Tensor:
        """Keys and values made from the latents, then attention: `(B, H, L, D)`."""
        keys = (
            self.up_key(latents).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        )  # (B, H, S, D)
        values = (
            self.up_value(latents)
            .unflatten(-1, (self.heads, -1))
            .transpose(1, 2)
        )
        # (B, H, S, Dr)
        shared = rope_keys[:, None].expand(-1, self.heads, -1, -1)
        query = torch.cat([q_content, q_rope], dim=-1)  # (B, H, L, D + Dr)
        key = torch.cat([keys, shared], dim=-1)  # (B, H, S, D + Dr)
        return attention(
            query, key, values, is_causal="bottom_right", scale=scale
        )

    def _absorbed(self, q_content, q_rope, latents, rope_keys, scale) -> Tensor:
        """Queries moved into the latent space, attention over the latents, `W_uv` applied after: `(B, H, L, D)`."""
        # (H, D, C): W_uk[h]
        up_key = self.up_key.weight.view(self.heads, self.head_dim, -1)
        # (H, D, C): W_uv[h]
        up_value = self.up_value.weight.view(self.heads, self.head_dim, -1)
        # (B, H, L, D) @ (H, D, C) -> (B, H, L, C): W_uk[h]^T q_h
        q_latent = q_content @ up_key
        query = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, L, C + Dr)
        # (B, 1, S, C + Dr): one shared head
        key = torch.cat([latents, rope_keys], dim=-1)[:, None]
        averaged = attention(
            query,
            key,
            latents[:, None],
            is_causal="bottom_right",
            scale=scale,
            enable_gqa=True,
        )  # (B, H, L, C): each head's weighted average of the latents
        # (B, H, L, C) @ (H, C, D) -> (B, H, L, D)
        return averaged @ up_value.transpose(-2, -1)
