"""Toy models trained on the CPU in about a second, so that the articles can show attention that was learned.

- `ReverseAligner` learns to reverse a sequence of tokens through one `AdditiveAttention`: the alignment it
  learns is the anti-diagonal (output step `i` reads source position `S - 1 - i`).
- `AttentionOnly` is a transformer of `MultiHeadAttention` layers with nothing else (no MLP, no norm); trained
  on `repeated_segments` it grows a previous-token head in layer 1 and an induction head in layer 2.

Each `train_*` function draws its data from its own seeded generator and returns the trained model in eval
mode; the result is the same for the same seed on the same machine (other machines may differ in the last
bits of a float, so assert behaviour, not numbers).
"""

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv._checks import check_sizes
from qkv.classic import AdditiveAttention
from qkv.multihead import MultiHeadAttention
from qkv_lab.remember import remembered


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch's CPU operations on one thread inside the block, then restore the thread count.

    These tensors are a few thousand numbers: splitting an operation across threads costs more than it saves,
    and on a busy machine (a CI runner, a laptop doing other work) the waiting threads burned 20 times the
    CPU time of the work itself when we measured it on a busy machine of 2 cores.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _fit(
    model: nn.Module, batch_loss: Callable[[nn.Module], Tensor], steps: int, lr: float
) -> nn.Module:
    """Adam on `batch_loss(model)` for `steps` steps, on one thread; the model comes back in eval mode."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    with _one_thread():
        for _ in range(steps):
            loss = batch_loss(model)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


# --8<-- [start:reverse]
def reverse_task(
    batch: int, length: int, vocab: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Random `source (B, S)` tokens and the `target (B, S)` to produce: the source reversed."""
    source = torch.randint(vocab, (batch, length), generator=generator)
    return source, source.flip(-1)


class ReverseAligner(nn.Module):
    """The smallest encoder-decoder that must align: additive attention from output steps to source tokens.

    The encoder annotates each source token with its position (key: token + position embedding; value: the
    token embedding alone). The decoder has no recurrence: its state at output step `i` is a learned vector.
    So the only way to emit the right token is to attend to the right source position.
    """

    def __init__(self, vocab: int, length: int, dim: int) -> None:
        super().__init__()
        check_sizes(vocab=vocab, length=length, dim=dim)
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)  # the encoder's position of each source token
        self.steps = nn.Embedding(length, dim)  # the decoder's state at each output step
        self.attention = AdditiveAttention(dim, dim, dim)
        self.readout = nn.Linear(dim, vocab)

    def forward(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """`source (B, S)` tokens -> `(logits (B, S, vocab), weights (B, S, S))`, output steps by source."""
        positions = torch.arange(source.shape[-1])  # (S,)
        keys = self.tokens(source) + self.positions(positions)  # (B, S, dim)
        values = self.tokens(source)  # (B, S, dim)
        states = self.steps(positions).expand_as(keys)  # (S, dim) -> (B, S, dim)
        context, weights = self.attention(states, keys, values)  # (B, S, dim), (B, S, S)
        return self.readout(context), weights


def train_aligner(
    vocab: int = 10, length: int = 8, dim: int = 16, steps: int = 100, seed: int = 0
) -> ReverseAligner:
    """A `ReverseAligner` trained by Adam on `steps` batches of 32 random sequences."""
    torch.manual_seed(seed)  # the initial weights
    generator = torch.Generator().manual_seed(seed)  # the data

    def batch_loss(model: ReverseAligner) -> Tensor:
        source, target = reverse_task(32, length, vocab, generator)
        logits, _ = model(source)  # (B, S, vocab)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    return _fit(ReverseAligner(vocab, length, dim), batch_loss, steps, lr=3e-2)


# --8<-- [end:reverse]


# --8<-- [start:induction]
def repeated_segments(
    batch: int, length: int, vocab: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """`tokens (B, N)`: a segment of `n` distinct tokens, the same segment again, then random tokens.

    `n (B,)` is drawn per sequence from 3 to `N // 2`, so the repeat starts at a different position in each
    sequence: only the tokens, not their positions, tell where the copy is. Needs `vocab >= N // 2`.
    """
    n = torch.randint(3, length // 2 + 1, (batch,), generator=generator)  # (B,)
    shuffled = torch.rand(batch, vocab, generator=generator).argsort(-1)  # (B, vocab) permutations
    segment = shuffled[:, : length // 2]  # (B, N/2) distinct tokens
    position = torch.arange(length)  # (N,)
    in_segment = torch.where(position < n[:, None], position, position - n[:, None])  # (B, N)
    copies = segment.gather(-1, in_segment.clamp(max=length // 2 - 1))  # (B, N)
    filler = torch.randint(vocab, (batch, length), generator=generator)  # (B, N)
    return torch.where(position < 2 * n[:, None], copies, filler), n


def predictable(n: Tensor, length: int) -> Tensor:
    """`(B, N)` bool: positions `t` whose next token is known from the first copy (`n <= t < 2n - 1`)."""
    position = torch.arange(length)  # (N,)
    return (position >= n[:, None]) & (position < 2 * n[:, None] - 1)


class AttentionOnly(nn.Module):
    """A causal transformer of attention layers alone: `x = x + attention(x)`, layer after layer.

    Token and learned position embeddings in, a linear readout of the next token out.
    """

    def __init__(self, vocab: int, length: int, dim: int, heads: int, layers: int = 2) -> None:
        super().__init__()
        check_sizes(vocab=vocab, length=length, dim=dim, heads=heads, layers=layers)
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        self.layers = nn.ModuleList(MultiHeadAttention(dim, heads) for _ in range(layers))
        self.readout = nn.Linear(dim, vocab)

    def forward(self, tokens: Tensor) -> tuple[Tensor, list[Tensor]]:
        """`tokens (B, N)` -> `(logits (B, N, vocab), [weights (B, H, N, N) of each layer])`."""
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[-1]))  # (B, N, dim)
        weights = []
        for layer in self.layers:
            out, layer_weights = layer(x, is_causal=True, need_weights=True)  # (B, N, dim)
            x = x + out  # each layer writes into the residual stream
            weights.append(layer_weights)
        return self.readout(x), weights


def train_induction(
    vocab: int = 32,
    length: int = 24,
    dim: int = 16,
    heads: int = 2,
    steps: int = 300,
    seed: int = 0,
) -> AttentionOnly:
    """A 2-layer `AttentionOnly` trained by Adam to predict the repeated tokens of `repeated_segments`."""
    torch.manual_seed(seed)  # the initial weights
    generator = torch.Generator().manual_seed(seed)  # the data

    def batch_loss(model: AttentionOnly) -> Tensor:
        tokens, n = repeated_segments(32, length, vocab, generator)
        logits, _ = model(tokens)  # (B, N, vocab)
        scored = predictable(n, length)  # (B, N): where the next token can be known
        return F.cross_entropy(logits[:, :-1][scored[:, :-1]], tokens[:, 1:][scored[:, :-1]])

    return _fit(AttentionOnly(vocab, length, dim, heads), batch_loss, steps, lr=2e-2)


# --8<-- [end:induction]


# --8<-- [start:scores]
def previous_token_scores(weights: Tensor, n: Tensor) -> Tensor:
    """Each head's mean weight from token `t` to token `t - 1`, over `1 <= t < n` (inside the first copy).

    Args:
        weights: `(B, H, N, N)`, one layer's weights.
        n: `(B,)` segment lengths.

    Returns:
        `(H,)` scores in [0, 1]; 1 is a perfect previous-token head.
    """
    position = torch.arange(weights.shape[-1])  # (N,)
    b, t = ((position >= 1) & (position < n[:, None])).nonzero(as_tuple=True)  # (B, N) -> pairs
    return weights[b, :, t, t - 1].mean(0)  # (pairs, H) -> (H,)


def induction_scores(weights: Tensor, n: Tensor) -> Tensor:
    """Each head's mean weight from a repeated token at `t` to the token after its first occurrence, `t - n + 1`.

    Args:
        weights: `(B, H, N, N)`, one layer's weights.
        n: `(B,)` segment lengths.

    Returns:
        `(H,)` scores in [0, 1]; 1 is a perfect induction head.
    """
    b, t = predictable(n, weights.shape[-1]).nonzero(as_tuple=True)
    return weights[b, :, t, t - n[b] + 1].mean(0)  # (pairs, H) -> (H,)


# --8<-- [end:scores]


# --8<-- [start:max-token]
VOCAB, LENGTH, WIDTH, DEPTH = 16, 12, 32, 6


def max_token_batch(generator: torch.Generator, batch: int = 32) -> tuple[Tensor, Tensor]:
    """Random `tokens (B, N)` and the target at every position: the sequence's largest token."""
    tokens = torch.randint(0, VOCAB, (batch, LENGTH), generator=generator)  # (B, N)
    return tokens, tokens.max(dim=1, keepdim=True).values.expand(batch, LENGTH)  # (B, N)


class MaxTokenStack(nn.Module):
    """Six of torch's encoder layers, post-LN (`pre_ln=False`, the original Transformer) or pre-LN."""

    def __init__(self, pre_ln: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = {"dropout": 0.0, "activation": "gelu", "batch_first": True, "norm_first": pre_ln}
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, **layer) for _ in range(DEPTH)
        )
        self.final_norm = nn.LayerNorm(WIDTH) if pre_ln else nn.Identity()  # pre-LN ends with one
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:  # (B, N) -> logits (B, N, VOCAB)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.final_norm(x))


@remembered
def train_max_token(pre_ln: bool, steps: int = 120, lr: float = 1e-2, seed: int = 0) -> list[float]:
    """Adam from the first step (no warm-up); the loss of every step. Same seed: same weights, batches."""
    torch.manual_seed(seed)
    model = MaxTokenStack(pre_ln)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed + 100)
    losses = []
    with _one_thread():
        for _ in range(steps):
            tokens, target = max_token_batch(generator)
            loss = F.cross_entropy(model(tokens).flatten(0, 1), target.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


# --8<-- [end:max-token]
