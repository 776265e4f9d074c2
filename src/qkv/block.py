"""A pre-LN transformer block: attention and an MLP, each behind a LayerNorm and inside a residual.

    x = x + SelfAttention(LN(x))
    x = x + CrossAttention(LN(x), memory)      (optional: a decoder block)
    x = x + MLP(LN(x))                         (Linear, GELU, Linear)

Pre-LN (normalise before each sub-layer) trains more stably than the original post-LN (Xiong et al., 2020).
"""

import math
from numbers import Real

import torch.nn.functional as F
from torch import Tensor, nn

from qkv._checks import (
    check_batch_first,
    check_bool,
    check_key_mask,
    check_module_input,
    check_probability,
    check_sizes,
)
from qkv.cache import KVCache
from qkv.masks import Causal
from qkv.multihead import MultiHeadAttention

TorchLayer = nn.TransformerEncoderLayer | nn.TransformerDecoderLayer


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and a GELU MLP, pre-LN with residuals.

    Args:
        embed_dim: E, the model width.
        num_heads: H, heads of each attention layer (must divide `embed_dim`).
        mlp_ratio: the MLP's hidden width as a multiple of `embed_dim` (rounded to the nearest int).
        dropout: dropout on attention weights, inside the MLP, and on each residual branch.
        cross_attention: add a cross-attention layer that attends over `memory` (a decoder block).

    Raises:
        TypeError: a size that is not an int, an `mlp_ratio` or `dropout` that is not a number, or a
            `cross_attention` that is not a bool.
        ValueError: a size that is not positive, `num_heads` does not divide `embed_dim`, an `mlp_ratio`
            that is not finite or leaves no hidden unit, or a `dropout` outside [0, 1].
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        cross_attention: bool = False,
    ) -> None:
        super().__init__()
        check_sizes(embed_dim=embed_dim, num_heads=num_heads)
        hidden = _hidden_width(embed_dim, mlp_ratio)
        check_probability("dropout", dropout)
        check_bool("cross_attention", cross_attention)
        self.attn_norm = nn.LayerNorm(embed_dim)
        self.self_attn = MultiHeadAttention(
            embed_dim, num_heads, dropout=dropout
        )
        self.cross_norm = nn.LayerNorm(embed_dim) if cross_attention else None
        self.cross_attn = (
            MultiHeadAttention(embed_dim, num_heads, dropout=dropout)
            if cross_attention
            else None
        )
        self.mlp_norm = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(
            nn.Linear(embed_dim, hidden),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, embed_dim),
        )
        self.residual_dropout = nn.Dropout(dropout)

    # --8<-- [start:forward]
    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: Causal = False,
        key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Run the block.

        Args:
            x: `(B, L, E)`, or `(L, E)` unbatched (then no `B` in any shape
                here), of the block's dtype and device.
            memory: `(B, S, E)`, what cross-attention attends over (required
                with `cross_attention`).
            attn_mask: self-attention mask, bool (True = may attend) or float,
                broadcastable to `(B, H, L, L)`.
            is_causal: causal self-attention: False, True, `"top_left"` or
                `"bottom_right"`, as `MultiHeadAttention` takes it.
            key_padding_mask: `(B, L)`, bool (True = ignore this position of
                `x`) or float (added).
            memory_key_padding_mask: `(B, S)`, bool (True = ignore this position
                of `memory`) or float (added).
            cache: the self-attention's `KVCache` when decoding: `x` holds only
                the new tokens, which attend over the cached ones and themselves
                (`is_causal` aligned bottom-right; no `attn_mask` or
                `key_padding_mask` with it).

        Returns:
            `(B, L, E)`.

        Raises:
            TypeError, ValueError: `x`, `memory` or a mask of the wrong type,
                dtype, shape or device; `memory` given without cross-attention,
                or missing with it.
        """
        # --8<-- [start:forward-body]
        self._check(x, memory, memory_key_padding_mask)
        x = x + self.residual_dropout(
            self.self_attn(
                self.attn_norm(x),
                attn_mask=attn_mask,
                is_causal=is_causal,
                key_padding_mask=key_padding_mask,
                cache=cache,
            )
        )
        if self.cross_attn is not None:
            x = x + self.residual_dropout(
                self.cross_attn(
                    self.cross_norm(x),
                    memory,
                    key_padding_mask=memory_key_padding_mask,
                )
            )
        return x + self.residual_dropout(self.mlp(self.mlp_norm(x)))
        # --8<-- [end:forward-body]

    # --8<-- [end:forward]

    def _check(
        self,
        x: Tensor,
        memory: Tensor | None,
        memory_key_padding_mask: Tensor | None,
    ) -> None:
        """Raise unless `x (B, L, E)` and `memory (B, S, E)` fit the block; the sub-layers check the rest."""
        if (memory is None) != (self.cross_attn is None):
            raise ValueError(
                "pass memory exactly when the block was built with cross_attention=True"
            )
        if memory_key_padding_mask is not None and memory is None:
            raise ValueError(
                "memory_key_padding_mask needs memory (a block with cross_attention=True)"
            )
        # what x must agree with on batch, dtype and device: memory, or x itself without one
        context = x if memory is None else memory
        widths = (self.self_attn.embed_dim,) * 3  # E
        check_batch_first(
            ("x", "memory", "memory"),
            (x, context, context),
            widths,
            unbatched=True,
        )
        check_module_input("x", x, self)
        if memory_key_padding_mask is not None:
            check_key_mask(
                "memory_key_padding_mask",
                memory_key_padding_mask,
                x,
                memory,
                "True = ignore",
                "memory",
            )

    @classmethod
    def from_torch(cls, layer: TorchLayer) -> "TransformerBlock":
        """A copy of a pre-LN `nn.TransformerEncoderLayer` or `nn.TransformerDecoderLayer` that computes the same.

        The layer must be built with `norm_first=True, batch_first=True, activation="gelu"` (and biases, the
        default). A decoder layer gives a block with cross-attention. In eval mode the outputs agree with the
        layer's, with padding masks and causal self-attention (the layer's boolean masks mean True = ignore,
        the block's `key_padding_mask` too; its `attn_mask` means True = may attend).

        Raises:
            TypeError: `layer` is neither of the two torch layers.
            ValueError: it is post-LN, not batch-first, not GELU (exact), or built with `bias=False`.
        """
        if not isinstance(
            layer, nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
        ):
            raise TypeError(
                "layer must be a torch.nn.TransformerEncoderLayer or TransformerDecoderLayer, "
                f"got {type(layer).__name__}"
            )
        activation = layer.activation
        gelu = activation is F.gelu or (
            isinstance(activation, nn.GELU) and activation.approximate == "none"
        )
        problems = {
            "norm_first=True (pre-LN)": layer.norm_first,
            "batch_first=True": layer.self_attn.batch_first,
            'activation="gelu"': gelu,
            "bias=True": layer.linear1.bias is not None
            and layer.norm1.bias is not None,
        }
        missing = [name for name, ok in problems.items() if not ok]
        if missing:
            raise ValueError(f"layer must be built with {', '.join(missing)}")
        decoder = isinstance(layer, nn.TransformerDecoderLayer)
        embed_dim, hidden = (
            layer.linear1.in_features,
            layer.linear1.out_features,
        )
        weight = layer.linear1.weight
        block = cls(
            embed_dim,
            layer.self_attn.num_heads,
            mlp_ratio=hidden / embed_dim,
            dropout=layer.dropout.p,
            cross_attention=decoder,
        ).to(device=weight.device, dtype=weight.dtype)
        norms = (
            [layer.norm1, layer.norm2, layer.norm3]
            if decoder
            else [layer.norm1, layer.norm2]
        )
        ours = (
            [block.attn_norm, block.cross_norm]
            if decoder
            else [block.attn_norm]
        )
        for mine, theirs in zip([*ours, block.mlp_norm], norms, strict=True):
            mine.eps = theirs.eps
            mine.load_state_dict(theirs.state_dict())
        block.self_attn.load_state_dict(
            MultiHeadAttention.from_torch(layer.self_attn).state_dict()
        )
        if decoder:
            block.cross_attn.load_state_dict(
                MultiHeadAttention.from_torch(layer.multihead_attn).state_dict()
            )
        block.mlp[0].load_state_dict(layer.linear1.state_dict())
        block.mlp[3].load_state_dict(layer.linear2.state_dict())
        return block.train(layer.training)


def _hidden_width(embed_dim: int, mlp_ratio: object) -> int:
    """The MLP's hidden width, `round(embed_dim * mlp_ratio)`: raise unless it is a finite number of units."""
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, Real):
        raise TypeError(
            f"mlp_ratio must be a number, got {type(mlp_ratio).__name__}"
        )
    if not math.isfinite(mlp_ratio):
        raise ValueError(f"mlp_ratio must be finite, got {mlp_ratio}")
    hidden = round(embed_dim * mlp_ratio)
    if hidden < 1:
        raise ValueError(
            f"mlp_ratio {mlp_ratio} leaves the MLP no hidden unit with embed_dim {embed_dim}"
        )
    return hidden
