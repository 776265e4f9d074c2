"""A pre-LN transformer block: attention and an MLP, each behind a LayerNorm and inside a residual.

    x = x + SelfAttention(LN(x))
    x = x + CrossAttention(LN(x), memory)      (optional: a decoder block)
    x = x + MLP(LN(x))                         (Linear, GELU, Linear)

Pre-LN (normalise before each sub-layer) trains more stably than the original post-LN (Xiong et al., 2020).
"""

from torch import Tensor, nn

from qkv.multihead import MultiHeadAttention


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention and a GELU MLP, pre-LN with residuals.

    Args:
        embed_dim: E, the model width.
        num_heads: H, heads of each attention layer (must divide `embed_dim`).
        mlp_ratio: the MLP's hidden width as a multiple of `embed_dim`.
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
        hidden = int(embed_dim * mlp_ratio)
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
    ) -> Tensor:
        """Run the block.

        Args:
            x: `(B, L, E)`.
            memory: `(B, S, E)`, what cross-attention attends over (required with `cross_attention`).
            attn_mask: self-attention mask, bool (True = may attend) or float, broadcastable to `(B, H, L, L)`.
            is_causal: causal self-attention.
            key_padding_mask: bool `(B, L)`, True = ignore this position of `x`.
            memory_key_padding_mask: bool `(B, S)`, True = ignore this position of `memory`.

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
