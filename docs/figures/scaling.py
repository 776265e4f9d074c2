"""Figures for the post "Why attention divides by sqrt(d_k)".

`scaling-variance`: the measured variance of q . k for random unit-variance vectors, against d_k, with and
without the division by sqrt(d_k). `scaling-saturation`: how a 16-key softmax (`qkv.attention_weights`)
saturates as the spread of the scores grows: largest weight, normalised entropy, and the size of the
softmax Jacobian, sum |dp_i/ds_j| = 2 (1 - sum p_j^2), normalised by its maximum.
"""

import math

import torch
from matplotlib.figure import Figure

import qkv

WIDTHS = [2**i for i in range(1, 11)]  # d_k from 2 to 1024
SAMPLES = 4000  # dot products per width
KEYS = 16  # S for the saturation sweep
HEAD_DIM = 64  # d_k of the original Transformer's heads: unscaled spread sqrt(64) = 8


def variance_vs_width() -> Figure:
    """Log-log plot of Var(q . k) and Var(q . k / sqrt(d_k)) against d_k, with the line y = d_k."""
    generator = torch.Generator().manual_seed(0)
    raw, scaled = [], []
    for d_k in WIDTHS:
        q = torch.randn(SAMPLES, d_k, generator=generator)
        k = torch.randn(SAMPLES, d_k, generator=generator)
        dots = (q * k).sum(dim=-1)  # (SAMPLES,)
        raw.append(dots.var().item())
        scaled.append((dots / math.sqrt(d_k)).var().item())
    fig = Figure(figsize=(5.5, 4.0), layout="constrained")
    ax = fig.subplots()
    ax.plot(WIDTHS, WIDTHS, color="C7", linestyle="--", label="$d_k$ (theory)")
    ax.plot(WIDTHS, raw, "o-", label=r"Var$(q \cdot k)$")
    ax.plot(WIDTHS, scaled, "s-", label=r"Var$(q \cdot k\ /$√$d_k)$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("$d_k$")
    ax.set_ylabel("variance (log scale)")
    ax.set_title(f"Variance of dot products,\n{SAMPLES} random pairs per width")
    ax.legend()
    ax.grid(True, which="major")
    return fig


def saturation_vs_spread() -> Figure:
    """Largest weight, entropy / log S and Jacobian size of a softmax over 16 keys, against the score spread."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2000, 1, HEAD_DIM, generator=generator)  # (B, L, E)
    k = torch.randn(2000, KEYS, HEAD_DIM, generator=generator)  # (B, S, E)
    spreads = [2 ** (i / 2) for i in range(-4, 11)]  # standard deviation of the scores, 0.25 to 32
    top, entropy, jacobian = [], [], []
    for spread in spreads:
        p = qkv.attention_weights(q, k, scale=spread / math.sqrt(HEAD_DIM))  # (B, 1, S)
        top.append(p.amax(dim=-1).mean().item())
        entropy.append((-(p * p.clamp_min(1e-30).log()).sum(dim=-1) / math.log(KEYS)).mean().item())
        jacobian.append(((1 - (p**2).sum(dim=-1)) / (1 - 1 / KEYS)).mean().item())
    # the alt text and caption: the largest weight rises, the other two fall; shared at 1, one key at 8
    assert top == sorted(top)
    assert entropy == sorted(entropy, reverse=True)
    assert jacobian == sorted(jacobian, reverse=True)
    assert top[spreads.index(1.0)] < 0.3 < 0.8 < top[spreads.index(8.0)]
    fig = Figure(figsize=(5.5, 5.0), layout="constrained")
    ax = fig.subplots()
    ax.plot(spreads, top, "o-", label="largest weight")
    ax.plot(spreads, entropy, "s-", label="entropy / log S")
    ax.plot(spreads, jacobian, "^-", label=r"$\sum|J|$ / its maximum")
    ax.axvline(1.0, color="C7", linestyle=":", label="spread 1: scaled")
    ax.axvline(
        math.sqrt(HEAD_DIM), color="C7", linestyle="--", label="spread 8: unscaled, $d_k=64$"
    )
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("standard deviation of the scores (log scale)")
    ax.set_ylabel("average over 2000 queries")
    ax.set_title(f"Softmax over {KEYS} keys saturates\nas scores spread")
    fig.legend(loc="outside lower center", ncols=2)
    ax.grid(True)
    return fig


FIGURES = {"scaling-variance": variance_vs_width, "scaling-saturation": saturation_vs_spread}
