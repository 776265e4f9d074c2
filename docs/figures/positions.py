"""Figures for the post "Positions".

`positions-sinusoidal`: `qkv.sinusoidal_positions(64, 64)` as a heat map. `positions-rope-alibi`: the score
of one query and one key (the same random vector, 64 channels) rotated by `qkv.apply_rope` to every offset
from 0 to 512, beside the ALiBi bias `qkv.alibi_bias` of 8 heads against the distance back.
`positions-extrapolation`: the post's toy "last seen" task, one small causal model per positional scheme
trained on length 32 and scored up to 256: `qkv_lab.extrapolation.accuracies` for seed 0, the run the post
names (it asserts all five seeds; the results are remembered on disk, so the build trains nothing the post's
tests trained).
"""

import torch
from matplotlib.figure import Figure

import qkv
from qkv_lab.extrapolation import SCHEMES, TEST_LENGTHS, TRAIN_LENGTH, accuracies


def sinusoidal_table() -> Figure:
    """The table of 64 positions by 64 channels, in the site's colour map from -1 to 1."""
    table = qkv.sinusoidal_positions(64, 64)
    fig = Figure(figsize=(5.5, 4.4), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(table.numpy(), vmin=-1, vmax=1, aspect="auto")
    ax.set_xlabel("channel (sin, cos, sin, cos, ...)")
    ax.set_ylabel("position p")
    ax.set_title("Sinusoidal positions,\n64 positions x 64 channels")
    fig.colorbar(image, ax=ax, label="value")
    return fig


def rope_and_alibi() -> Figure:
    """RoPE's score against the offset, and ALiBi's bias against the distance, one above the other."""
    torch.manual_seed(0)
    dim, offsets = 64, torch.arange(513)
    q = torch.randn(dim, dtype=torch.float64)
    rotated = qkv.apply_rope(q.expand(len(offsets), dim), offsets)  # (N, D): q at positions 0..512
    scores = rotated @ rotated[0]  # the query at each offset against the key at 0
    # the alt text: the maximum at offset 0, then a decay with oscillations (Su et al., section 3.4.3)
    relative = scores / scores[0]
    assert relative[1:].max() < 1
    assert relative[64:].abs().mean() < relative[:64].abs().mean() / 2  # decaying
    assert (relative.diff() > 0).any()  # not monotonic: oscillations
    bias = qkv.alibi_bias(8, 33)[:, -1].flip(-1)  # (H, 33): the last query, distance 0..32 back
    fig = Figure(figsize=(5.5, 7.4), layout="constrained")
    left, right = fig.subplots(2, 1)
    left.plot(offsets, scores / scores[0], color="C0", linewidth=1)
    left.set_xlabel("offset m - n")
    left.set_ylabel("score / score at offset 0")
    left.set_title("RoPE: one query and key, every offset")
    left.grid(True)
    for slope, bias_of_head in zip(qkv.alibi_slopes(8), bias, strict=True):
        right.plot(bias_of_head, label=f"1/{round(1 / slope.item())}")
    right.set_xlabel("distance back, i - j")
    right.set_ylabel("bias added to the score")
    right.set_title("ALiBi: 8 heads, slope per head")
    right.legend(title="slope", ncols=2, loc="lower left")
    right.grid(True)
    return fig


def extrapolation() -> Figure:
    """Accuracy against test length, one line per positional scheme."""
    fig = Figure(figsize=(5.5, 4.4), layout="constrained")
    ax = fig.subplots()
    markers = dict(zip(SCHEMES, "ovDs^", strict=True))
    for scheme in SCHEMES:
        scores = accuracies(scheme, seed=0)  # {length: accuracy}; the post asserts all five seeds
        ax.plot(list(scores), list(scores.values()), f"{markers[scheme]}-", label=scheme)
    ax.axvline(TRAIN_LENGTH, color="C7", linestyle=":", label="training length")
    ax.set_xscale("log", base=2)
    ax.set_xticks(TEST_LENGTHS, [str(n) for n in TEST_LENGTHS])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("test sequence length")
    ax.set_ylabel("accuracy")
    ax.set_title(f"Last-seen task, trained on length {TRAIN_LENGTH}, seed 0")
    fig.legend(loc="outside right center")
    ax.grid(True)
    return fig


FIGURES = {
    "positions-sinusoidal": sinusoidal_table,
    "positions-rope-alibi": rope_and_alibi,
    "positions-extrapolation": extrapolation,
}
