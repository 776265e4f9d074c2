"""Figures for the post "Attention as a recurrence".

`recurrence-decay-mask`: the weights `D_ts = exp(gamma_t - gamma_s)` that a decay puts on each pair (query t,
key s), read out of `qkv.gated_delta_rule` itself: with one-hot keys and values, queries of ones and `beta = 1`,
output `t` holds row `t` of the mask. Left, one fixed decay per token (RetNet's kind, 0.8); right, a decay
drawn per token (Mamba-2's kind, seed 0). N = 16.
"""

import math

import torch
from matplotlib.figure import Figure

import qkv

N = 16
FIXED = 0.8  # the decay per token of the left panel


def decay_weights(g: torch.Tensor) -> torch.Tensor:
    """The `(N, N)` weights that the gated delta rule puts on each pair, for log decays `g` of shape `(N,)`.

    One-hot keys never overlap, so the delta rule writes each value whole; one-hot values put key `s` in
    column `s`; a query of ones (the scale undone) reads every key with weight 1, times its decay.
    """
    n = len(g)
    keys = torch.eye(n, dtype=torch.float64)[None, None]  # (1, 1, N, N)
    queries = torch.ones_like(keys)
    ones = torch.ones(1, 1, n, dtype=torch.float64)
    out, _ = qkv.gated_delta_rule(queries, keys, keys, g[None, None], ones, scale=1.0)
    return out[0, 0]  # (N, N): row t = D_t.


def decay_mask() -> Figure:
    """Two heat maps side by side: the fixed decay's weights and a drawn decay's, causal zeros above."""
    generator = torch.Generator().manual_seed(0)
    decays = {
        f"fixed decay {FIXED}": torch.full((N,), math.log(FIXED), dtype=torch.float64),
        "a decay per token": -torch.rand(N, generator=generator, dtype=torch.float64),
    }
    fig = Figure(figsize=(5.5, 2.9), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (title, g) in zip(axes, decays.items(), strict=True):
        weights = decay_weights(g)
        gamma = g.cumsum(0)
        expected = (gamma[:, None] - gamma[None, :]).exp().tril()
        assert torch.allclose(weights, expected)  # the formula of the post
        image = ax.imshow(weights.numpy(), vmin=0, vmax=1)
        ax.set_title(title)
        ax.set_xlabel("key s")
    axes[0].set_ylabel("query t")
    fig.colorbar(image, ax=axes, label="weight of the pair", shrink=0.9)
    return fig


FIGURES = {"recurrence-decay-mask": decay_mask}
