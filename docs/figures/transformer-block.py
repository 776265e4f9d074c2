"""Figures for the post "The transformer block".

`transformer-block-pre-post`: the training losses of the post's six-layer post-LN and pre-LN stacks (torch's
`nn.TransformerEncoderLayer` with `norm_first` False or True) on the largest-token task, Adam at 0.01 with no
warm-up. `transformer-block-stream`: the mean length of a token's vector in the residual stream after each of
12 blocks at initialisation, torch's post-LN layer against `qkv.TransformerBlock` (pre-LN). Keep the task,
the model and the training loop in step with the post, which asserts what the first figure draws.
"""

import functools

import torch
from matplotlib.figure import Figure
from torch import nn

import qkv

VOCAB, LENGTH, WIDTH, DEPTH = 16, 12, 32, 6
STEPS, LR = 120, 1e-2
STREAM_WIDTH, STREAM_DEPTH = 64, 12


def _max_token_batch(
    generator: torch.Generator, batch: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (batch, LENGTH), generator=generator)  # (B, N)
    return tokens, tokens.max(dim=1, keepdim=True).values.expand(batch, LENGTH)


class _Stack(nn.Module):
    def __init__(self, pre_ln: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = {"dropout": 0.0, "activation": "gelu", "batch_first": True, "norm_first": pre_ln}
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, **layer) for _ in range(DEPTH)
        )
        self.final_norm = nn.LayerNorm(WIDTH) if pre_ln else nn.Identity()
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.final_norm(x))


@functools.cache  # trained once per build, for the light and the dark figure
def _train(pre_ln: bool, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = _Stack(pre_ln)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    generator = torch.Generator().manual_seed(seed + 100)
    losses = []
    for _ in range(STEPS):
        tokens, target = _max_token_batch(generator)
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), target.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def pre_post_losses() -> Figure:
    """Loss against step for both stacks, raw and as a 10-step running mean."""
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    for pre_ln, label, color in ((False, "post-LN", "C3"), (True, "pre-LN", "C0")):
        losses = torch.tensor(_train(pre_ln))
        smooth = losses.unfold(0, 10, 1).mean(dim=1)
        ax.plot(losses, color=color, alpha=0.25, linewidth=1)
        ax.plot(range(9, STEPS), smooth, color=color, linewidth=2, label=f"{label} (10-step mean)")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"{DEPTH} layers, Adam at lr {LR:g}, no warm-up")
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


FIGURES = {
    "transformer-block-pre-post": pre_post_losses,
    "transformer-block-stream": stream_lengths,
}
