"""Figures for the post "Positions".

`positions-sinusoidal`: `qkv.sinusoidal_positions(64, 64)` as a heat map. `positions-rope-alibi`: the score
of one query and one key (the same random vector, 64 channels) rotated by `qkv.apply_rope` to every offset
from 0 to 512, beside the ALiBi bias `qkv.alibi_bias` of 8 heads against the distance back.
`positions-extrapolation`: the post's toy "last seen" task, one small causal model per positional scheme
trained on length 32 and scored up to 256. Keep the task, model and training in step with the post, which
asserts what this figure draws.
"""

import functools

import torch
from matplotlib.figure import Figure
from torch import nn

import qkv

VALUES, TRAIN_LENGTH = 8, 32
TEST_LENGTHS = (32, 64, 128, 256)
SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi")


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


def _last_seen_batch(
    generator: torch.Generator, batch: int, length: int, p: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    is_value = torch.rand(batch, length, generator=generator) < p
    values = torch.randint(1, VALUES + 1, (batch, length), generator=generator)
    tokens = torch.where(is_value, values, 0)
    last = torch.where(is_value, torch.arange(length), -1).cummax(dim=1).values  # (B, N)
    target = torch.where(last >= 0, tokens.gather(1, last.clamp_min(0)), -100)
    return tokens, target


class _TinyModel(nn.Module):
    def __init__(self, positions: str, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.positions, self.heads = positions, heads
        self.embed = nn.Embedding(VALUES + 1, dim)
        self.table = nn.Embedding(TRAIN_LENGTH, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, VALUES + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length = tokens.shape
        x = self.embed(tokens)
        if self.positions == "sinusoidal":
            x = x + qkv.sinusoidal_positions(length, x.size(-1))
        if self.positions == "learned":
            x = x + self.table(torch.arange(length))
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if self.positions == "rope":
            q, k = qkv.apply_rope(q), qkv.apply_rope(k)
        mask = qkv.keep_to_additive(qkv.causal_mask(length))
        if self.positions == "alibi":
            mask = mask + qkv.alibi_bias(self.heads, length)
        heads = qkv.attention(q, k, v, attn_mask=mask)
        x = x + self.out(heads.transpose(1, 2).reshape(batch, length, -1))
        return self.head(x + self.mlp(x))


def _train(positions: str, steps: int = 200, seed: int = 0) -> _TinyModel:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = _TinyModel(positions)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        tokens, target = _last_seen_batch(generator, 32, TRAIN_LENGTH)
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), target.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


@torch.no_grad()
def _accuracy(model: _TinyModel, length: int) -> float:
    tokens, target = _last_seen_batch(torch.Generator().manual_seed(1), 256, length)
    scored = target >= 0
    return (model(tokens).argmax(-1)[scored] == target[scored]).float().mean().item()


@functools.cache  # trained once per build, for the light and the dark figure
def accuracies() -> dict[str, list[float]]:
    """Accuracy of each scheme at each test length (the learned table only at the training length)."""
    result = {}
    for scheme in SCHEMES:
        model = _train(scheme)
        lengths = [n for n in TEST_LENGTHS if scheme != "learned" or n <= TRAIN_LENGTH]
        result[scheme] = [_accuracy(model, n) for n in lengths]
    return result


def extrapolation() -> Figure:
    """Accuracy against test length, one line per positional scheme."""
    fig = Figure(figsize=(5.5, 4.4), layout="constrained")
    ax = fig.subplots()
    markers = dict(zip(SCHEMES, "ovDs^", strict=True))
    for scheme, scores in accuracies().items():
        ax.plot(TEST_LENGTHS[: len(scores)], scores, f"{markers[scheme]}-", label=scheme)
    ax.axvline(TRAIN_LENGTH, color="C7", linestyle=":", label="training length")
    ax.set_xscale("log", base=2)
    ax.set_xticks(TEST_LENGTHS, [str(n) for n in TEST_LENGTHS])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("test sequence length")
    ax.set_ylabel("accuracy")
    ax.set_title("Last-seen task, trained on length 32")
    fig.legend(loc="outside right center")
    ax.grid(True)
    return fig


FIGURES = {
    "positions-sinusoidal": sinusoidal_table,
    "positions-rope-alibi": rope_and_alibi,
    "positions-extrapolation": extrapolation,
}
