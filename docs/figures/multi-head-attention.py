"""Figures for the post "Multi-head attention".

`multi-head-attention-heads`: the per-head attention weights of the post's hand-set `MultiHeadAttention`
(one-hot positions as input; heads look at the previous token, the token itself, the next token and the
first token). Keep the construction in step with the post, which asserts what this figure draws.
"""

import torch
from matplotlib.figure import Figure

import qkv

N_TOKENS = 6
N_HEADS = 4
SHARPNESS = 12.0
TITLES = ("head 0: previous", "head 1: itself", "head 2: next", "head 3: first")


def _hand_set_weights() -> torch.Tensor:
    """The (H, N, N) attention weights of the post's hand-set module."""
    embed_dim = N_TOKENS * N_HEADS  # each head gets d_head = N_TOKENS features
    mha = qkv.MultiHeadAttention(embed_dim, N_HEADS, bias=False)
    x = torch.eye(N_TOKENS, embed_dim)[None]  # (1, N, E): one-hot positions
    eye = torch.eye(N_TOKENS)
    with torch.no_grad():
        mha.q_proj.weight.zero_()
        mha.k_proj.weight.zero_()
        for h in range(N_HEADS):
            mha.k_proj.weight[h * N_TOKENS : (h + 1) * N_TOKENS, :N_TOKENS] = eye
        for h, shift in enumerate((-1, 0, 1)):
            rows = slice(h * N_TOKENS, (h + 1) * N_TOKENS)
            mha.q_proj.weight[rows, :N_TOKENS] = SHARPNESS * eye.roll(shift, dims=0)
        mha.q_proj.weight[3 * N_TOKENS, :N_TOKENS] = SHARPNESS
        _, weights = mha(x, need_weights=True)  # (1, H, N, N)
    return weights[0]


def head_heatmaps() -> Figure:
    """One heat map per head, queries as rows and keys as columns."""
    weights = _hand_set_weights()
    fig = Figure(figsize=(10.0, 3.0), layout="constrained")
    axes = fig.subplots(1, N_HEADS)
    for ax, head, title in zip(axes, weights, TITLES, strict=True):
        image = ax.imshow(head.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(N_TOKENS))
        ax.set_yticks(range(N_TOKENS))
        ax.set_xlabel("key position")
    axes[0].set_ylabel("query position")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.9)
    return fig


FIGURES = {"multi-head-attention-heads": head_heatmaps}
