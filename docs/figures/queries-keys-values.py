"""Figures for the post "Queries, keys and values".

`qkv-cat-sat-heatmap`: the attention weights of "the cat sat on the mat" with the hand-made embeddings and
projections of `qkv.examples.cat_sat`, which the post includes and whose numbers it asserts.
"""

from matplotlib.figure import Figure
from style import label_cells

import qkv
from qkv.examples import cat_sat


def cat_sat_heatmap() -> Figure:
    """Heat map of the hand-made attention weights, one row per query token, values printed in the cells."""
    tokens, x, w_q, w_k = cat_sat()
    weights = qkv.attention_weights(x @ w_q, x @ w_k)  # (6, 6), as the post computes them
    fig = Figure(figsize=(5.5, 4.6), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(weights.numpy(), vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(tokens)), tokens)
    ax.set_yticks(range(len(tokens)), tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title("Hand-made attention weights (not learned)")
    label_cells(ax, image, [[f"{w:.2f}" for w in row] for row in weights.tolist()])
    fig.colorbar(image, ax=ax, label="weight (each row sums to 1)")
    return fig


FIGURES = {"qkv-cat-sat-heatmap": cat_sat_heatmap}
