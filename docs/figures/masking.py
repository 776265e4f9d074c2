"""Figures for the post "Masking attention".

`masking-grids`: the causal, padding, combined and sliding-window masks of the post as 0/1 grids side by
side (the same lengths as the post's printed grids: L = S = 5, a sequence of length 3, a window of 3).
"""

import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

import qkv

LENGTH = 5


def _masks() -> dict[str, torch.Tensor]:
    """The four (L, S) keep masks, True = may attend."""
    causal = qkv.causal_mask(LENGTH)
    padding = qkv.padding_mask(torch.tensor([3]), max_len=LENGTH)[0, 0].expand(LENGTH, LENGTH)
    return {
        "causal": causal,
        "padding (length 3)": padding,
        "padding & causal": padding & causal,
        "sliding window (w = 3)": qkv.sliding_window_mask(LENGTH, window=3),
    }


def mask_grids() -> Figure:
    """Four heat maps in a row; dark cells may be attended, light cells are hidden."""
    masks = _masks()
    fig = Figure(figsize=(10.0, 3.0), layout="constrained")
    axes = fig.subplots(1, len(masks))
    cmap = ListedColormap(["#f2f2f2", "#1f5fa8"])
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        ax.imshow(mask.int().numpy(), cmap=cmap, vmin=0, vmax=1)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(LENGTH))
        ax.set_yticks(range(LENGTH))
        ax.set_xlabel("key j")
        for i in range(LENGTH):
            for j in range(LENGTH):
                kept = bool(mask[i, j])
                ax.text(
                    j,
                    i,
                    int(kept),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if kept else "black",
                )
    axes[0].set_ylabel("query i")
    return fig


FIGURES = {"masking-grids": mask_grids}
