"""Multi-head attention: project, split into heads, attend in each head, merge, project back.

`head_i = Attention(q W_Q^i, k W_K^i, v W_V^i)` and `MultiHead = Concat(head_1, ..., head_H) W_O`
(Vaswani et al., 2017). Tensors are batch-first, `query` `(B, L, E)`, `key` `(B, S, kdim)`, `value`
`(B, S, vdim)`, or unbatched, `(L, E)`, `(S, kdim)`, `(S, vdim)`, as `torch.nn.MultiheadAttention` takes
them.
"""

import torch
from torch import Tensor, nn

from qkv._checks import (
    check_batch_first,
    check_bool,
    check_module_input,
    check_probability,
    check_sizes,
    shape,
)
from qkv.cache import KVCache
from qkv.dispatch import Backend, _attention, check_backend
from qkv.functional import _attention_weights
from qkv.masks import Causal, Mask, parse_mask


class MultiHeadAttention(nn.Module):
    """Multi-head attention with PyTorch's conventions, written to be read.

    It computes what `torch.nn.MultiheadAttention(batch_first=True)` computes (`from_torch` copies one), with
    these differences:

    - a bool `attn_mask` means True = MAY ATTEND, as in `scaled_dot_product_attention` (torch's module: True =
      may not attend); `key_padding_mask` keeps torch's True = ignore;
    - `is_causal=True` without a mask builds the causal mask itself (torch's flag is a hint that needs the mask),
      and `is_causal="bottom_right"` aligns it on the last key;
    - a query with no key to attend gets zeros before `out_proj` (torch's module gives NaN);
    - it returns the output alone, or with `need_weights=True` the output and every head's weights
      `(B, H, L, S)` (torch returns a pair, the weights averaged over the heads by default).

    Args:
        embed_dim: E, the model width; the output has this size too.
        num_heads: H; each head attends with `head_dim = E // H` features.
        bias: whether the four projections have biases.
        dropout: probability of zeroing an attention weight while training.
        kdim: features of `key` (E when None).
        vdim: features of `value` (E when None).

    Raises:
        TypeError: a size that is not an int, or a `bias` that is not a bool.
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
        check_bool("bias", bias)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(
            embed_dim if kdim is None else kdim, embed_dim, bias=bias
        )
        self.v_proj = nn.Linear(
            embed_dim if vdim is None else vdim, embed_dim, bias=bias
        )
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
        is_causal: Causal = False,
        window: int | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
        backend: Backend = "auto",
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from `query` over `key` and `value` (self-attention when they
        are left out).

        Args:
            query: `(B, L, E)`, or `(L, E)` unbatched (then no `B` in any shape
                here), of the module's dtype and device.
            key: `(B, S, kdim)`; `query` when None.
            value: `(B, S, vdim)`; `key` when None.
            key_padding_mask: `(B, S)` (`(S,)` unbatched), bool (True = IGNORE
                this key) or float (added to the scores); a dimension of size 1
                broadcasts.
            attn_mask: bool (True = MAY ATTEND) or float (added): `(L, S)`,
                `(B*H, L, S)` (one per head) or `(B, H, L, S)`; a dimension of
                size 1 broadcasts.
            is_causal: False; True or `"top_left"` lets query `i` attend keys
                `j <= i` (torch's `is_causal`); `"bottom_right"` keys
                `j <= i + S - L` (the last query sees every key). Needs no mask.
            window: each query also sees only the `window` most recent keys it
                may see; needs `is_causal`.
            need_weights: also return every head's attention weights (before
                dropout), computed by the explicit formula whatever the backend.
            cache: a `KVCache` for decoding, with a batched `query`: this call's
                keys and values are appended to it and the queries attend over
                all of them; `is_causal` (True or `"bottom_right"`) is then
                bottom-right aligned. No other mask with it.
            backend: which backend attends, as for `qkv.attention`. The kernels
                (`"triton"`) take the causal mask, the window, and a bool
                `key_padding_mask` that ignores a suffix of every row (it
                reaches them as key lengths; telling costs one device sync); no
                `attn_mask`, no other padding, no dropout, and batched input
                whose head size `E/H` they support.

        Returns:
            `output (B, L, E)`, or `(output, weights (B, H, L, S))` when
            `need_weights`.

        Raises:
            TypeError: inputs or masks of the wrong type or dtype (the inputs'
                must be the parameters').
            ValueError: inputs or masks of the wrong shape or device, an unknown
                `is_causal`, or a cache that does not fit.
        """
        # --8<-- [start:forward-body]
        key = query if key is None else key
        value = key if value is None else value
        mask = self._mask(
            query, key, value, need_weights, cache, backend,
            key_padding_mask, attn_mask, is_causal, window,
        )  # fmt: skip
        dropout_p = self.dropout if self.training else 0.0

        q = self._split_heads(self.q_proj(query))  # (B, L, E) -> (B, H, L, E/H)
        # (B, S, kdim) -> (B, H, S, E/H)
        k = self._split_heads(self.k_proj(key))
        # (B, S, vdim) -> (B, H, S, E/H)
        v = self._split_heads(self.v_proj(value))
        # the cached keys and values come first: (B, H, S_cached + S, E/H)
        if cache is not None:
            k, v = cache.update(k, v)
        if need_weights:
            weights = _attention_weights(q, k, mask)  # (B, H, L, S)
            # (B, H, L, E/H)
            heads = nn.functional.dropout(weights, dropout_p) @ v
        else:
            # (B, H, L, E/H)
            heads = _attention(q, k, v, mask, dropout_p, backend)
        # (B, H, L, E/H) -> (B, L, E)
        output = self.out_proj(self._merge_heads(heads))
        return (output, weights) if need_weights else output
        # --8<-- [end:forward-body]

    # --8<-- [end:forward]

    # --8<-- [start:heads]
    def _split_heads(self, x: Tensor) -> Tensor:
        """`(B, N, E) -> (B, H, N, E/H)`: each head gets its own slice of the
        features."""
        # (B, N, E) -> (B, N, H, E/H)
        x = x.unflatten(-1, (self.num_heads, self.head_dim))
        return x.transpose(-3, -2)  # (B, N, H, E/H) -> (B, H, N, E/H)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """`(B, H, N, E/H) -> (B, N, E)`: the heads' outputs side by side."""
        # (B, H, N, E/H) -> (B, N, H, E/H) -> (B, N, E)
        return x.transpose(-3, -2).flatten(-2)

    # --8<-- [end:heads]

    def _mask(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        need_weights: bool,
        cache: KVCache | None,
        backend: Backend,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: Causal,
        window: int | None,
    ) -> Mask:
        """Check the inputs; parse the masks given into one `Mask`, the causal mask and window as such.

        With a cache, only `is_causal` and `window` may be given: they cover the cached and the new keys,
        aligned bottom-right (the last query sees every key).
        """
        features = (
            self.q_proj.in_features,
            self.k_proj.in_features,
            self.v_proj.in_features,
        )
        check_batch_first(
            ("query", "key", "value"),
            (query, key, value),
            features,
            unbatched=True,
        )
        check_module_input("query", query, self)
        check_bool("need_weights", need_weights)
        check_backend(backend)
        keys = key.size(-2)  # S
        if cache is not None:
            self._check_cache(
                cache, query, key_padding_mask, attn_mask, is_causal
            )
            keys += len(cache)  # S: cached and new
            is_causal = "bottom_right" if is_causal is True else is_causal
        scores = (
            *query.shape[:-2],
            self.num_heads,
            query.size(-2),
            keys,
        )  # (B, H, L, S)
        attn_mask, name = self._per_head(attn_mask, scores)
        return parse_mask(
            query, key, scores, attn_mask, is_causal, window,
            key_padding_mask=key_padding_mask, mask_name=name,
        )  # fmt: skip

    def _check_cache(
        self,
        cache: object,
        query: Tensor,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: Causal,
    ) -> None:
        """Raise unless `cache` is a `KVCache` that this call's batched keys `(B, H, ., E/H)` can extend."""
        if not isinstance(cache, KVCache):
            raise TypeError(
                f"cache must be a qkv.KVCache or None, got {type(cache).__name__}"
            )
        if query.dim() != 3:
            raise ValueError(
                f"a cache takes batched input only: query must be (B, L, E), got shape {shape(query)}"
            )
        if key_padding_mask is not None or attn_mask is not None:
            raise ValueError(
                "with a cache, pass no key_padding_mask or attn_mask (only is_causal and window)"
            )
        if is_causal == "top_left":
            raise ValueError(
                "with a cache, is_causal aligns bottom-right (the last query sees every key): "
                "pass True or 'bottom_right', not 'top_left'"
            )
        held = cache.key  # (B, H, T, E/H), None while empty
        ours = (query.size(0), self.num_heads, self.head_dim)  # (B, H, E/H)
        if (
            held is not None
            and (held.size(0), held.size(1), held.size(-1)) != ours
        ):
            raise ValueError(
                f"cache holds keys {shape(held)} (B, H, T, E/H), but this call's are "
                f"({ours[0]}, {ours[1]}, ., {ours[2]})"
            )

    def _per_head(
        self, attn_mask: object, scores: tuple[int, ...]
    ) -> tuple[object, str]:
        """Shape a per-head `attn_mask (B*H, L, S)` as the scores `(B, H, L, S)`, and name it for messages.

        Raises:
            ValueError: a mask that is none of the forms the module takes (`parse_mask` checks the rest).
        """
        if not isinstance(attn_mask, Tensor):
            return attn_mask, "attn_mask"
        name = "attn_mask"
        if (
            attn_mask.dim() == 3
            and len(scores) == 4
            and attn_mask.size(0) == scores[0] * scores[1]
        ):
            name = f"attn_mask {shape(attn_mask)}, one per head,"
            # (B*H, L, S) -> (B, H, L, S)
            attn_mask = attn_mask.unflatten(0, scores[:2])
        if attn_mask.dim() not in (2, len(scores)):
            forms = (
                "(L, S), (B*H, L, S) or (B, H, L, S)"
                if len(scores) == 4
                else "(L, S) or (H, L, S)"
            )
            raise ValueError(
                f"attn_mask must be {forms} for the scores' shape {scores}, got {shape(attn_mask)}"
            )
        return attn_mask, name

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
            raise ValueError(
                "module must be batch_first=True: this package is batch-first"
            )
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
            weights = (
                module.q_proj_weight,
                module.k_proj_weight,
                module.v_proj_weight,
            )
        projections = (copy.q_proj, copy.k_proj, copy.v_proj)
        biases = (
            module.in_proj_bias.chunk(3)
            if module.in_proj_bias is not None
            else (None,) * 3
        )
        with torch.no_grad():
            for projection, w, b in zip(
                projections, weights, biases, strict=True
            ):
                projection.weight.copy_(w)
                if b is not None:
                    projection.bias.copy_(b)
            copy.out_proj.weight.copy_(module.out_proj.weight)
            if module.out_proj.bias is not None:
                copy.out_proj.bias.copy_(module.out_proj.bias)
        return copy.train(module.training)
