"""Multi-head attention: project, split into heads, attend in each head, merge, project back.

`head_i = Attention(q W_Q^i, k W_K^i, v W_V^i)` and `MultiHead = Concat(head_1, ..., head_H) W_O`
(Vaswani et al., 2017). Every tensor is batch-first: `query` `(B, L, E)`, `key` `(B, S, kdim)`,
`value` `(B, S, vdim)`.
"""

from functools import reduce

import torch
from torch import Tensor, nn

from qkv._checks import (
    check_batch_first,
    check_key_mask,
    check_mask,
    check_probability,
    check_sizes,
    shape,
)
from qkv.cache import KVCache
from qkv.dispatch import attention
from qkv.functional import attention_weights
from qkv.masks import causal_mask, keep_to_additive, key_padding_to_keep


class MultiHeadAttention(nn.Module):
    """Multi-head attention with PyTorch's conventions, written to be read.

    Args:
        embed_dim: E, the model width; the output has this size too.
        num_heads: H; each head attends with `head_dim = E // H` features.
        bias: whether the four projections have biases.
        dropout: probability of zeroing an attention weight while training.
        kdim: features of `key` (E when None).
        vdim: features of `value` (E when None).

    Raises:
        TypeError: a size that is not an int.
        ValueError: `embed_dim` not divisible by `num_heads`, or a size that is not positive.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        kdim: int | None = None,
        vdim: int | None = None,
    ) -> None:
        super().__init__()
        given = {"kdim": kdim, "vdim": vdim}
        check_sizes(
            embed_dim=embed_dim,
            num_heads=num_heads,
            **{name: size for name, size in given.items() if size is not None},
        )
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        check_probability("dropout", dropout)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim if kdim is None else kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim if vdim is None else vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    # --8<-- [start:forward]
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from `query` over `key` and `value` (self-attention when they are left out).

        Args:
            query: `(B, L, E)`.
            key: `(B, S, kdim)`; `query` when None.
            value: `(B, S, vdim)`; `key` when None.
            key_padding_mask: bool `(B, S)`, True = IGNORE this key (the convention of
                `nn.MultiheadAttention`).
            attn_mask: bool (True = MAY ATTEND, the convention of `scaled_dot_product_attention`, the opposite
                of `nn.MultiheadAttention`'s bool `attn_mask`) or float (added to the scores), broadcastable
                to `(B, H, L, S)`, or `(B*H, L, S)` as `nn.MultiheadAttention` takes a mask per head.
            is_causal: let query `i` attend keys `j <= i` only (top-left aligned when `L != S`).
            need_weights: also return the attention weights of every head (before dropout).
            cache: a `KVCache` for decoding: this call's keys and values are appended to it and the queries
                attend over all of them; `is_causal` is then bottom-right aligned. No other mask with it.

        Returns:
            `output (B, L, E)`, or `(output, weights (B, H, L, S))` when `need_weights`. A query row with no
            allowed key gives zeros before `out_proj` (`nn.MultiheadAttention` gives NaN).

        Raises:
            TypeError, ValueError: inputs or masks of the wrong type or shape.
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check(query, key, value, key_padding_mask, attn_mask)
        if cache is not None:  # decoding: see _masks_with_cache
            mask = self._masks_with_cache(query, key, key_padding_mask, attn_mask, is_causal, cache)
        else:
            mask = self._merge_masks(query, key, key_padding_mask, attn_mask, is_causal)
        only_causal = is_causal and mask is None  # no mask to fold it into: pass the flag on
        dropout_p = self.dropout if self.training else 0.0

        q = self._split_heads(self.q_proj(query))  # (B, L, E) -> (B, H, L, E/H)
        k = self._split_heads(self.k_proj(key))  # (B, S, kdim) -> (B, H, S, E/H)
        v = self._split_heads(self.v_proj(value))  # (B, S, vdim) -> (B, H, S, E/H)
        if cache is not None:  # the cached keys and values come first: (B, H, S_cached + S, E/H)
            k, v = cache.update(k, v)
        if need_weights:
            weights = attention_weights(q, k, attn_mask=mask, is_causal=only_causal)  # (B, H, L, S)
            heads = nn.functional.dropout(weights, dropout_p) @ v  # (B, H, L, E/H)
        else:
            heads = attention(q, k, v, attn_mask=mask, is_causal=only_causal, dropout_p=dropout_p)
        output = self.out_proj(self._merge_heads(heads))  # (B, H, L, E/H) -> (B, L, E)
        return (output, weights) if need_weights else output

    # --8<-- [end:forward]

    # --8<-- [start:heads]
    def _split_heads(self, x: Tensor) -> Tensor:
        """`(B, N, E) -> (B, H, N, E/H)`: each head gets its own slice of the features."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """`(B, H, N, E/H) -> (B, N, E)`: the heads' outputs side by side."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.embed_dim)

    # --8<-- [end:heads]

    def _merge_masks(
        self,
        query: Tensor,
        key: Tensor,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor | None:
        """One mask of the package's convention (bool keep, or float added) for all the constraints given.

        With nothing but `is_causal`, returns None: the causal flag then goes to the backend as it is.
        """
        masks = [
            key_padding_to_keep(key_padding_mask) if key_padding_mask is not None else None,
            self._per_head(attn_mask, query.size(0)),
        ]
        masks = [m for m in masks if m is not None]
        if not masks:
            return None
        if is_causal:
            masks.append(causal_mask(query.size(1), key.size(1), device=query.device))
        if all(m.dtype == torch.bool for m in masks):
            return reduce(torch.logical_and, masks)
        return reduce(
            torch.add,
            [keep_to_additive(m, query.dtype) if m.dtype == torch.bool else m for m in masks],
        )

    @staticmethod
    def _masks_with_cache(
        query: Tensor,
        key: Tensor,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
        cache: KVCache,
    ) -> Tensor | None:
        """The mask of a call with a cache: none, or causal over cached and new keys, bottom-right aligned."""
        if key_padding_mask is not None or attn_mask is not None:
            raise ValueError("with a cache, pass no key_padding_mask or attn_mask (only is_causal)")
        if not is_causal:
            return None
        keys = len(cache) + key.size(1)  # S, cached and new
        return causal_mask(query.size(1), keys, device=query.device, alignment="bottom_right")

    def _check(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
    ) -> None:
        check_batch_first(
            ("query", "key", "value"),
            (query, key, value),
            (self.q_proj.in_features, self.k_proj.in_features, self.v_proj.in_features),
        )
        if key_padding_mask is not None:
            check_key_mask("key_padding_mask", key_padding_mask, key, "True = ignore")
        if attn_mask is not None:
            target = (query.size(0), self.num_heads, query.size(1), key.size(1))
            per_head = self._per_head(attn_mask, query.size(0))
            name = (
                "attn_mask"
                if per_head is attn_mask
                else f"attn_mask {shape(attn_mask)}, one per head,"
            )
            check_mask(name, per_head, target, query)

    def _per_head(self, attn_mask: Tensor | None, batch: int) -> Tensor | None:
        """`nn.MultiheadAttention`'s per-head mask `(B*H, L, S)` as `(B, H, L, S)`; any other as it is."""
        if (
            isinstance(attn_mask, Tensor)
            and attn_mask.dim() == 3
            and attn_mask.size(0) == batch * self.num_heads
        ):
            return attn_mask.unflatten(0, (batch, self.num_heads))  # (B*H, L, S) -> (B, H, L, S)
        return attn_mask

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a `torch.nn.MultiheadAttention(..., batch_first=True)` that computes the same outputs.

        Raises:
            TypeError: `module` is not an `nn.MultiheadAttention`.
            ValueError: it is not batch-first, or uses `add_bias_kv` or `add_zero_attn`, which this class lacks.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        if not module.batch_first:
            raise ValueError("module must be batch_first=True: this package is batch-first")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "add_bias_kv and add_zero_attn have no counterpart in MultiHeadAttention"
            )
        weight = module.out_proj.weight
        copy = cls(
            module.embed_dim,
            module.num_heads,
            bias=module.in_proj_bias is not None,
            dropout=module.dropout,
            kdim=module.kdim,
            vdim=module.vdim,
        ).to(device=weight.device, dtype=weight.dtype)
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.chunk(3)
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        projections = (copy.q_proj, copy.k_proj, copy.v_proj)
        biases = module.in_proj_bias.chunk(3) if module.in_proj_bias is not None else (None,) * 3
        with torch.no_grad():
            for projection, w, b in zip(projections, weights, biases, strict=True):
                projection.weight.copy_(w)
                if b is not None:
                    projection.bias.copy_(b)
            copy.out_proj.weight.copy_(module.out_proj.weight)
            if module.out_proj.bias is not None:
                copy.out_proj.bias.copy_(module.out_proj.bias)
        return copy.train(module.training)
