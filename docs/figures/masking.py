"""Figures for the post "Masking attention".

`masking-grids`: the causal, padding, combined and sliding-window masks of the post as 0/1 grids, two by
two (the same lengths as the post's printed grids: L = S = 5, a sequence of length 3, a window of 3).
"""

import torch
from _diagram import canvas, cells
from _style import kinds_cmap, label_cells
from matplotlib.axes import Axes
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
    """Four heat maps, two by two; strong cells (1) may be attended, faint cells (0) are hidden."""
    masks = _masks()
    causal, padding, both, window = masks.values()  # the alt text, mask by mask
    assert causal.equal(torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril())  # a lower triangle
    assert padding.equal(torch.arange(LENGTH).expand(LENGTH, LENGTH) < 3)  # the last columns hidden
    back = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)  # (L, S): i - j
    assert both.equal(padding & causal)
    assert window.equal((back >= 0) & (back < 3))  # a band along the diagonal
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


# --- top-left vs bottom-right causal alignment (issue 9, diagrams) ----------------------------------------

ALIGNED_L, ALIGNED_S = 3, 5  # three queries over five keys
CELL = 0.36  # inches


def _aligned_panel(ax: Axes, x: float, alignment: str, first_query: int, lines: str) -> None:
    """One causal mask of `qkv.causal_mask` as a 0/1 grid, its rows labelled with the queries' positions."""
    mask = qkv.causal_mask(ALIGNED_L, ALIGNED_S, alignment=alignment)  # (L, S), True = may attend
    # the alt text: query first_query + i keeps keys 0 to first_query + i
    assert mask.sum(dim=-1).tolist() == [first_query + i + 1 for i in range(ALIGNED_L)]
    top = 0.95
    ax.text(x + ALIGNED_S * CELL / 2, 0.12, f'alignment="{alignment}"', ha="center", va="top")
    ax.text(x + ALIGNED_S * CELL / 2, 0.42, "key position", ha="center", va="top")
    for j in range(ALIGNED_S):
        ax.text(x + (j + 0.5) * CELL, top - 0.08, str(j), ha="center", va="bottom")
    for i in range(ALIGNED_L):
        ax.text(x - 0.08, top + (i + 0.5) * CELL, str(first_query + i), ha="right", va="center")
    fills = [["C0" if kept else None for kept in row] for row in mask.tolist()]
    cells(ax, x, top, fills, CELL)
    for i, row in enumerate(mask.tolist()):
        for j, kept in enumerate(row):
            ax.text(
                x + (j + 0.5) * CELL, top + (i + 0.5) * CELL, int(kept), ha="center", va="center"
            )
    ax.text(x - 0.08, top + ALIGNED_L * CELL + 0.15, lines, ha="left", va="top", linespacing=1.4)


def causal_alignments() -> Figure:
    """`qkv.causal_mask(3, 5)` aligned top-left and bottom-right, each with the question it answers."""
    fig, ax = canvas(5.5, 2.95)
    ax.text(
        0.12, 0.95 + ALIGNED_L * CELL / 2, "query position", rotation=90, ha="center", va="center"
    )
    _aligned_panel(
        ax,
        0.6,
        "top_left",
        0,
        "query i is token i:\nthe queries start where\nthe keys start (is_causal)",
    )
    _aligned_panel(
        ax,
        3.45,
        "bottom_right",
        ALIGNED_S - ALIGNED_L,
        "query i is token i + 2:\nthe newest 3 tokens after\na cache of 2 (decoding)",
    )
    return fig


FIGURES = {"masking-grids": mask_grids, "masking-causal-alignment": causal_alignments}
