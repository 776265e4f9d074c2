"""Length extrapolation on a toy task: one small causal model per positional scheme, trained short, tested long.

The task is "last seen": filler tokens (0) and, now and then, one of `VALUES` value tokens; at every position
the target is the most recent value token so far. `LastSeenModel` is one causal attention layer and an MLP in
which only the positional scheme changes (`SCHEMES`). `train` fits it on sequences of `TRAIN_LENGTH`;
`accuracies` scores it at every length of `TEST_LENGTHS` and keeps the numbers on disk
(`qkv_lab.remember`), so that the post, its figure and a reader's rerun train each (scheme, seed) once.
Training runs on one CPU thread and gives the same numbers for the same seed on the same software.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import qkv
from qkv_lab.remember import remembered
from qkv_lab.toys import one_thread

SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi")
TEST_LENGTHS = (32, 64, 128, 256)
SCORING_SEED = 1_000  # the test sequences: one set for every model, drawn apart from any training seed


# --8<-- [start:task]
VALUES, TRAIN_LENGTH = 8, 32


def last_seen_batch(
    generator: torch.Generator, batch: int, length: int, p: float = 0.2
) -> tuple[Tensor, Tensor]:
    """`tokens (B, N)`, a value token at each position with probability `p`, and
    `target (B, N)`: the latest value token so far (-100, ignored, before the
    first)."""
    is_value = torch.rand(batch, length, generator=generator) < p
    values = torch.randint(1, VALUES + 1, (batch, length), generator=generator)
    tokens = torch.where(is_value, values, 0)
    position = torch.where(is_value, torch.arange(length), -1)  # (B, N)
    last = position.cummax(dim=1).values  # (B, N): where the latest value is
    target = torch.where(last >= 0, tokens.gather(1, last.clamp_min(0)), -100)
    return tokens, target


# --8<-- [end:task]


# --8<-- [start:model]
class LastSeenModel(nn.Module):
    """One causal attention layer of `heads` heads and an MLP; `positions`,
    one of `SCHEMES`, says how order gets in."""

    def __init__(self, positions: str, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.positions, self.heads = positions, heads
        self.embed = nn.Embedding(VALUES + 1, dim)
        self.table = nn.Embedding(TRAIN_LENGTH, dim)  # "learned" only
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )
        self.head = nn.Linear(dim, VALUES + 1)

    def forward(self, tokens: Tensor) -> Tensor:
        """`tokens (B, N)` -> logits `(B, N, VALUES + 1)`."""
        batch, length = tokens.shape
        x = self.embed(tokens)  # (B, N, E)
        if self.positions == "sinusoidal":
            x = x + qkv.sinusoidal_positions(length, x.size(-1))
        if self.positions == "learned":
            x = x + self.table(torch.arange(length))
        q, k, v = (
            self.qkv(x)
            .view(batch, length, 3, self.heads, -1)
            .permute(2, 0, 3, 1, 4)
        )  # (B, N, 3E) -> 3 x (B, H, N, E/H)
        if self.positions == "rope":
            q, k = qkv.apply_rope(q), qkv.apply_rope(k)
        mask = qkv.keep_to_additive(qkv.causal_mask(length))  # (N, N)
        if self.positions == "alibi":
            mask = mask + qkv.alibi_bias(self.heads, length)  # (H, N, N)
        heads = qkv.attention(q, k, v, attn_mask=mask)  # (B, H, N, E/H)
        x = x + self.out(heads.transpose(1, 2).reshape(batch, length, -1))
        return self.head(x + self.mlp(x))


# --8<-- [end:model]


# --8<-- [start:train]
def train(positions: str, steps: int = 200, seed: int = 0) -> LastSeenModel:
    """Adam on `steps` batches of 32 sequences of `TRAIN_LENGTH`."""
    torch.manual_seed(seed)  # the initial weights
    generator = torch.Generator().manual_seed(seed)  # the batches
    model = LastSeenModel(positions)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with one_thread():
        for _ in range(steps):
            tokens, target = last_seen_batch(generator, 32, TRAIN_LENGTH)
            logits = model(tokens)  # (B, N, VALUES + 1)
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@torch.no_grad()
def accuracy(model: LastSeenModel, length: int) -> float:
    """The share of positions (after the first value) answered right, over
    256 test sequences of `length`, the same for every model."""
    generator = torch.Generator().manual_seed(SCORING_SEED)
    tokens, target = last_seen_batch(generator, 256, length)
    scored = target >= 0
    with one_thread():
        right = model(tokens).argmax(-1)[scored] == target[scored]
    return right.float().mean().item()


@remembered
def accuracies(
    positions: str, steps: int = 200, seed: int = 0
) -> dict[int, float]:
    """`{length: accuracy}` of the model trained from `seed`, at every one of
    `TEST_LENGTHS` that it can read (the learned table: only up to its rows)."""
    model = train(positions, steps, seed)
    return {
        n: accuracy(model, n)
        for n in TEST_LENGTHS
        if positions != "learned" or n <= TRAIN_LENGTH
    }


# --8<-- [end:train]
