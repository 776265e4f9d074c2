"""Figures for the post "Multi-head attention".

`multi-head-attention-heads`: the per-head attention weights of `qkv.examples.position_heads`, the hand-set
module that the post includes and whose heads it asserts (the previous token, the token itself, the next
token and the first token).
`multi-head-attention-induction`: the previous-token head of layer 1 and the induction head of layer 2 of
`qkv.toys.train_induction`'s model, on a fresh sequence of 8 tokens repeated once.
"""

import functools

import torch
from matplotlib.figure import Figure

from qkv.examples import position_heads
from qkv.toys import induction_scores, previous_token_scores, repeated_segments, train_induction

N_TOKENS = 6
TITLES = ("head 0: previous", "head 1: itself", "head 2: next", "head 3: first")

# trained once per build, however many times (colour schemes) the figure is drawn
_trained = functools.cache(train_induction)


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


def induction_heatmaps() -> Figure:
    """The learned previous-token head (layer 1) above the learned induction head (layer 2), one sequence."""
    model = _trained()
    tokens, n = repeated_segments(512, 24, 32, torch.Generator().manual_seed(1))  # fresh sequences
    with torch.no_grad():
        _, (first, second) = model(tokens)  # (B, H, N, N) each
        heads = {  # the heads that the post's block finds the same way
            1: int(previous_token_scores(first, n).argmax()),
            2: int(induction_scores(second, n).argmax()),
        }
        sequence = tokens[n == 8][0, :16]  # 8 tokens, then the same 8 again
        _, (first, second) = model(sequence[None])
    maps = {
        f"layer 1, head {heads[1]}: previous token": first[0, heads[1]],
        f"layer 2, head {heads[2]}: induction": second[0, heads[2]],
    }
    fig = Figure(figsize=(4.5, 8.2), layout="constrained")
    axes = fig.subplots(2, 1)
    labels = [str(t) for t in sequence.tolist()]
    for ax, (title, weights) in zip(axes, maps.items(), strict=True):
        image = ax.imshow(weights.numpy(), vmin=0.0, vmax=1.0)
        ax.set_title(title)
        ax.set_xticks(range(16), labels, rotation=90)
        ax.set_yticks(range(16), labels)
        ax.set_xlabel("key token")
        ax.set_ylabel("query token")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.6)
    return fig


FIGURES = {
    "multi-head-attention-heads": head_heatmaps,
    "multi-head-attention-induction": induction_heatmaps,
}
