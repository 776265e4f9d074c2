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
    """One heat map per head, two by two, queries as rows and keys as columns."""
    mha, x = position_heads(N_TOKENS)
    _, weights = mha(x, need_weights=True)  # (1, H, N, N), as the post computes them
    fig = Figure(figsize=(5.5, 5.4), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, head, title in zip(axes.flat, weights[0].detach(), TITLES, strict=True):
        image = ax.imshow(head.numpy(), vmin=0.0, vmax=1.0)
        ax.set_title(title)
        ax.set_xticks(range(N_TOKENS))
        ax.set_yticks(range(N_TOKENS))
    for ax in axes[1]:
        ax.set_xlabel("key position")
    for ax in axes[:, 0]:
        ax.set_ylabel("query position")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.8)
    return fig


FIGURES = {"multi-head-attention-heads": head_heatmaps}
