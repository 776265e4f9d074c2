"""Figures for the post "Masking attention".

`masking-grids`: the causal, padding, combined and sliding-window masks of the post as 0/1 grids, two by
two (the same lengths as the post's printed grids: L = S = 5, a sequence of length 3, a window of 3).
"""

import torch
from matplotlib.figure import Figure
from style import kinds_cmap, label_cells

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
    """Four heat maps, two by two; strong cells (1) may be attended, faint cells (0) are hidden."""
    masks = _masks()
    fig = Figure(figsize=(5.5, 5.8), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, (title, mask) in zip(axes.flat, masks.items(), strict=True):
        image = ax.imshow(mask.int().numpy(), cmap=kinds_cmap(2), vmin=0, vmax=1)
        label_cells(ax, image, [[str(int(kept)) for kept in row] for row in mask.tolist()])
        ax.set_title(title)
        ax.set_xticks(range(LENGTH))
        ax.set_yticks(range(LENGTH))
        ax.tick_params(length=0)
        ax.spines[:].set_visible(False)
    for ax in axes[1]:
        ax.set_xlabel("key j")
    for ax in axes[:, 0]:
        ax.set_ylabel("query i")
    return fig


FIGURES = {"masking-grids": mask_grids}
