"""A pre-LN transformer block: attention and an MLP, each behind a LayerNorm and inside a residual.

    x = x + SelfAttention(LN(x))
    x = x + CrossAttention(LN(x), memory)      (optional: a decoder block)
    x = x + MLP(LN(x))                         (Linear, GELU, Linear)

Pre-LN (normalise before each sub-layer) trains more stably than the original post-LN (Xiong et al., 2020).
"""

import torch.nn.functional as F
from torch import Tensor, nn

from qkv.cache import KVCache
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
        ValueError: `num_heads` does not divide `embed_dim`, or `mlp_ratio` leaves no hidden unit.
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
        hidden = round(embed_dim * mlp_ratio)
        if hidden < 1:
            raise ValueError(
                f"mlp_ratio {mlp_ratio} leaves the MLP no hidden unit with embed_dim {embed_dim}"
            )
        self.attn_norm = nn.LayerNorm(embed_dim)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout)
        self.cross_norm = nn.LayerNorm(embed_dim) if cross_attention else None
        self.cross_attn = (
            MultiHeadAttention(embed_dim, num_heads, dropout=dropout) if cross_attention else None
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
        is_causal: bool = False,
        key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Run the block.

        Args:
            x: `(B, L, E)`.
            memory: `(B, S, E)`, what cross-attention attends over (required with `cross_attention`).
            attn_mask: self-attention mask, bool (True = may attend) or float, broadcastable to `(B, H, L, L)`.
            is_causal: causal self-attention.
            key_padding_mask: bool `(B, L)`, True = ignore this position of `x`.
            memory_key_padding_mask: bool `(B, S)`, True = ignore this position of `memory`.
            cache: the self-attention's `KVCache` when decoding: `x` holds only the new tokens, which attend
                over the cached ones and themselves (`is_causal` aligned bottom-right; no `attn_mask` or
                `key_padding_mask` with it).

        Returns:
            `(B, L, E)`.

        Raises:
            ValueError: `memory` given without cross-attention, or missing with it.
        """
        if (memory is None) != (self.cross_attn is None):
            raise ValueError(
                "pass memory exactly when the block was built with cross_attention=True"
            )
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
                    self.cross_norm(x), memory, key_padding_mask=memory_key_padding_mask
                )
            )
        return x + self.residual_dropout(self.mlp(self.mlp_norm(x)))

    # --8<-- [end:forward]

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
        if not isinstance(layer, nn.TransformerEncoderLayer | nn.TransformerDecoderLayer):
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
            "bias=True": layer.linear1.bias is not None and layer.norm1.bias is not None,
        }
        missing = [name for name, ok in problems.items() if not ok]
        if missing:
            raise ValueError(f"layer must be built with {', '.join(missing)}")
        decoder = isinstance(layer, nn.TransformerDecoderLayer)
        embed_dim, hidden = layer.linear1.in_features, layer.linear1.out_features
        weight = layer.linear1.weight
        block = cls(
            embed_dim,
            layer.self_attn.num_heads,
            mlp_ratio=hidden / embed_dim,
            dropout=layer.dropout.p,
            cross_attention=decoder,
        ).to(device=weight.device, dtype=weight.dtype)
        norms = [layer.norm1, layer.norm2, layer.norm3] if decoder else [layer.norm1, layer.norm2]
        ours = [block.attn_norm, block.cross_norm] if decoder else [block.attn_norm]
        for mine, theirs in zip([*ours, block.mlp_norm], norms, strict=True):
            mine.eps = theirs.eps
            mine.load_state_dict(theirs.state_dict())
        block.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
        if decoder:
            block.cross_attn.load_state_dict(
                MultiHeadAttention.from_torch(layer.multihead_attn).state_dict()
            )
        block.mlp[0].load_state_dict(layer.linear1.state_dict())
        block.mlp[3].load_state_dict(layer.linear2.state_dict())
        return block.train(layer.training)
