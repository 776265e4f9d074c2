"""Figures for the post "The transformer block".

`transformer-block-pre-post`: the training losses of the post's six-layer post-LN and pre-LN stacks (torch's
`nn.TransformerEncoderLayer` with `norm_first` False or True) on the largest-token task, Adam at 0.01 with no
warm-up: `qkv_lab.toys.train_max_token`, seed 0, the run the post asserts. `transformer-block-stream`: the
mean length of a token's vector in the residual stream after each of 12 blocks at initialisation, torch's
post-LN layer against `qkv.TransformerBlock` (pre-LN). `transformer-block-changes`: the small GPT's bits per
byte on the site text's validation split at each rung of `qkv_lab.block_changes`' ladder, one point per seed,
read from the recorded sweep (`qkv_lab.results.recorded("block-changes")`), not trained at build time.
"""

import torch
from matplotlib.figure import Figure
from torch import nn

import qkv
from qkv_lab.results import recorded
from qkv_lab.toys import DEPTH, train_max_token

STREAM_WIDTH, STREAM_DEPTH = 64, 12


def pre_post_losses() -> Figure:
    """Loss against step for both stacks, raw and as a 10-step running mean."""
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    for pre_ln, label, color in ((False, "post-LN", "C3"), (True, "pre-LN", "C0")):
        losses = torch.tensor(train_max_token(pre_ln))  # seed 0, as the post asserts
        smooth = losses.unfold(0, 10, 1).mean(dim=1)
        if not pre_ln:  # the post: down for a while, then a spike, and no recovery
            low = int(smooth.argmin())
            assert smooth[low] < 0.6 < 1.5 < smooth[low:].max()
            assert smooth[-1] > 2 * smooth[low]
        ax.plot(losses, color=color, alpha=0.25, linewidth=1)
        ax.plot(
            range(9, len(losses)), smooth, color=color, linewidth=2, label=f"{label} (10-step mean)"
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"{DEPTH} layers, Adam at lr 0.01, no warm-up")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(True)
    return fig


def stream_lengths() -> Figure:
    """Mean token-vector length after each block, post-LN (torch) against pre-LN (qkv), at initialisation."""
    torch.manual_seed(0)
    x = torch.randn(8, 16, STREAM_WIDTH)  # (B, N, E)
    stacks = {
        "post-LN (nn.TransformerEncoderLayer)": [
            nn.TransformerEncoderLayer(
                STREAM_WIDTH, 4, 4 * STREAM_WIDTH, dropout=0.0, activation="gelu", batch_first=True
            )
            for _ in range(STREAM_DEPTH)
        ],
        "pre-LN (qkv.TransformerBlock)": [
            qkv.TransformerBlock(STREAM_WIDTH, 4) for _ in range(STREAM_DEPTH)
        ],
    }
    fig = Figure(figsize=(5.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for (label, blocks), marker in zip(stacks.items(), ("o", "s"), strict=True):
        h, lengths = x, [x.norm(dim=-1).mean().item()]
        with torch.no_grad():
            for block in blocks:
                h = block(h)
                lengths.append(h.norm(dim=-1).mean().item())
        ax.plot(range(STREAM_DEPTH + 1), lengths, f"{marker}-", label=label)
    ax.axhline(STREAM_WIDTH**0.5, color="C7", linestyle=":", label="√$E$ = 8")
    ax.set_xlabel("blocks applied")
    ax.set_ylabel("mean length of a token's vector")
    ax.set_title(f"The residual stream at initialisation, E = {STREAM_WIDTH}")
    fig.legend(loc="outside lower center")
    ax.grid(True)
    return fig


def block_changes() -> Figure:
    """Bits per byte of each rung of the ladder, a marker per seed; a rung far above the rest is written out."""
    report = recorded("block-changes")
    rungs = report["rungs"]
    on_scale = [bits for rung in rungs[1:] for bits in rung["bits_per_byte"]]
    low, high = min(on_scale), max(on_scale)
    margin = (high - low) * 0.15
    fig = Figure(figsize=(5.5, 4.6), layout="constrained")
    ax = fig.subplots()
    for index, (seed, marker) in enumerate(zip(report["seeds"], "osD", strict=True)):
        rows, bits = [], []
        for row, rung in enumerate(rungs):
            if rung["bits_per_byte"][index] <= high + margin:
                rows.append(row + (index - 1) * 0.15)  # seeds side by side within a rung's row
                bits.append(rung["bits_per_byte"][index])
        ax.plot(bits, rows, marker, label=f"seed {seed}", linestyle="none")
    for row, rung in enumerate(rungs):
        if max(rung["bits_per_byte"]) > high + margin:
            values = rung["bits_per_byte"]
            ax.annotate(
                f"{min(values):.2f} to {max(values):.2f} →",
                (1, row),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="center",
            )
    ax.set_yticks(range(len(rungs)), [rung["name"] for rung in rungs])
    ax.set_ylim(len(rungs) - 0.5, -0.5)  # the first rung on top
    ax.set_xlim(low - margin, high + margin)
    ax.set_xlabel("validation bits per byte (lower is better)")
    ax.set_title(f"{report['steps']} steps, each rung adds one change")
    fig.legend(loc="outside lower center", ncols=len(report["seeds"]))
    ax.grid(True, axis="x")
    return fig


FIGURES = {
    "transformer-block-pre-post": pre_post_losses,
    "transformer-block-stream": stream_lengths,
    "transformer-block-changes": block_changes,
}
