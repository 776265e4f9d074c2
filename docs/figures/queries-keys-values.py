"""Figures for the post "Queries, keys and values".

`qkv-cat-sat-heatmap`: the attention weights of "the cat sat on the mat" with the hand-made embeddings and
projections of the post (keep the two in step: the post asserts the numbers this figure draws).
"""

import torch
from matplotlib.figure import Figure

import qkv

# features: animate, action, object, determiner, preposition
VOCAB = {
    "the": [0, 0, 0, 1, 0],
    "cat": [1, 0, 0, 0, 0],
    "sat": [0, 1, 0, 0, 0],
    "on": [0, 0, 0, 0, 1],
    "mat": [0, 0, 1, 0, 0],
}
TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def _cat_sat_weights() -> torch.Tensor:
    """The (6, 6) attention weights of the post's hand-made example."""
    x = torch.tensor([VOCAB[t] for t in TOKENS], dtype=torch.float32)  # (N, d_model) = (6, 5)
    w_k = torch.zeros(5, 3)  # keys advertise: animate, action, object
    w_k[0, 0] = w_k[1, 1] = w_k[2, 2] = 1.0
    w_q = torch.zeros(5, 3)  # queries ask for:
    w_q[1, 0] = 4.0  # action -> an animate subject
    w_q[0, 1] = w_q[2, 1] = 4.0  # nouns -> the action
    w_q[4, 2] = 4.0  # preposition -> an object
    w_q[3, 0] = w_q[3, 2] = 4.0  # determiner -> a noun of either kind
    return qkv.attention_weights(x @ w_q, x @ w_k)  # (6, 6)


def cat_sat_heatmap() -> Figure:
    """Heat map of the hand-made attention weights, one row per query token, values printed in the cells."""
    weights = _cat_sat_weights()
    fig = Figure(figsize=(5.6, 4.6), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(weights.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(TOKENS)), TOKENS)
    ax.set_yticks(range(len(TOKENS)), TOKENS)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title("Hand-made attention weights (not learned)")
    for i in range(len(TOKENS)):
        for j in range(len(TOKENS)):
            value = weights[i, j].item()
            ax.text(
                j,
                i,
                f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if value > 0.5 else "black",
            )
    fig.colorbar(image, ax=ax, label="weight (each row sums to 1)")
    return fig


FIGURES = {"qkv-cat-sat-heatmap": cat_sat_heatmap}
