"""Figures for the post "Multi-head attention".

`multi-head-attention-heads`: the per-head attention weights of `qkv.examples.position_heads`, the hand-set
module that the post includes and whose heads it asserts (the previous token, the token itself, the next
token and the first token).
"""

from matplotlib.figure import Figure

from qkv.examples import position_heads

N_TOKENS = 6
TITLES = ("head 0: previous", "head 1: itself", "head 2: next", "head 3: first")


def head_heatmaps() -> Figure:
    """One heat map per head, queries as rows and keys as columns."""
    mha, x = position_heads(N_TOKENS)
    _, weights = mha(x, need_weights=True)  # (1, H, N, N), as the post computes them
    fig = Figure(figsize=(10.0, 3.0), layout="constrained")
    axes = fig.subplots(1, len(TITLES))
    for ax, head, title in zip(axes, weights[0].detach(), TITLES, strict=True):
        image = ax.imshow(head.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(N_TOKENS))
        ax.set_yticks(range(N_TOKENS))
        ax.set_xlabel("key position")
    axes[0].set_ylabel("query position")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.9)
    return fig


FIGURES = {"multi-head-attention-heads": head_heatmaps}
