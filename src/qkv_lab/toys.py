"""Toy models trained on the CPU in about a second, so that the articles can show attention that was learned.

- `ReverseAligner` learns to reverse a sequence of tokens through one `AdditiveAttention`: the alignment it
  learns is the anti-diagonal (output step `i` reads source position `S - 1 - i`).
- `AttentionOnly` is a transformer of `MultiHeadAttention` layers with nothing else (no MLP, no norm); trained
  on `repeated_segments` it grows a previous-token head in layer 1 and an induction head in layer 2.

Each `train_*` function draws its data from its own seeded generator and returns the trained model in eval
mode; the result is the same for the same seed on the same machine (other machines may differ in the last
bits of a float, so assert behaviour, not numbers). Each `measure_*` function trains one seed and returns
plain numbers measured on test sequences from a generator that no training run uses (`TEST_SEED`); they
are `@remembered`, so the articles' five seeds train once.
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
def one_thread() -> Iterator[None]:
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
    model: nn.Module,
    batch_loss: Callable[[nn.Module], Tensor],
    steps: int,
    lr: float,
) -> nn.Module:
    """Adam on `batch_loss(model)` for `steps` steps, on one thread; the model comes back in eval mode."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    with one_thread():
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
    """Random `source (B, S)` tokens and the `target (B, S)` to produce: the
    source reversed."""
    source = torch.randint(vocab, (batch, length), generator=generator)
    return source, source.flip(-1)


class ReverseAligner(nn.Module):
    """The smallest encoder-decoder that must align: additive attention from
    output steps to source tokens.

    The encoder annotates each source token with its position (key: token +
    position embedding; value: the token embedding alone). The decoder has no
    recurrence: its state at output step `i` is a learned vector. So the only
    way to emit the right token is to attend to the right source position.
    """

    def __init__(self, vocab: int, length: int, dim: int) -> None:
        super().__init__()
        check_sizes(vocab=vocab, length=length, dim=dim)
        self.tokens = nn.Embedding(vocab, dim)
        # the encoder's position of each source token
        self.positions = nn.Embedding(length, dim)
        # the decoder's state at each output step
        self.steps = nn.Embedding(length, dim)
        self.attention = AdditiveAttention(dim, dim, dim)
        self.readout = nn.Linear(dim, vocab)

    # --8<-- [start:aligner-forward]
    def forward(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """`source (B, S)` tokens ->
        `(logits (B, S, vocab), weights (B, S, S))`, output steps by source."""
        positions = torch.arange(source.shape[-1])  # (S,)
        keys = self.tokens(source) + self.positions(positions)  # (B, S, dim)
        values = self.tokens(source)  # (B, S, dim)
        # (S, dim) -> (B, S, dim)
        states = self.steps(positions).expand_as(keys)
        # (B, S, dim), (B, S, S)
        context, weights = self.attention(states, keys, values)
        return self.readout(context), weights

    # --8<-- [end:aligner-forward]


def train_aligner(
    vocab: int = 10,
    length: int = 8,
    dim: int = 16,
    steps: int = 100,
    seed: int = 0,
) -> ReverseAligner:
    """A `ReverseAligner` trained by Adam on `steps` batches of 32 random
    sequences."""
    torch.manual_seed(seed)  # the initial weights
    generator = torch.Generator().manual_seed(seed)  # the data

    def batch_loss(model: ReverseAligner) -> Tensor:
        source, target = reverse_task(32, length, vocab, generator)
        logits, _ = model(source)  # (B, S, vocab)
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    return _fit(ReverseAligner(vocab, length, dim), batch_loss, steps, lr=3e-2)


# --8<-- [end:reverse]


# --8<-- [start:alignment]
# the generator of the test sequences: no training run here uses it
TEST_SEED = 1000


@remembered
def measure_aligner(seed: int) -> dict[str, float]:
    """Train `train_aligner(seed=seed)` and measure it on 256 test sequences of
    8 tokens from 10.

    Returns plain numbers: `accuracy`, the fraction of output tokens right;
    `reads`, the fraction of output steps `i` whose largest weight is on source
    position `S - 1 - i`; `on_anti_diagonal`, the mean weight there; `largest`,
    the mean of each step's largest weight; `b_start` and `b_trained`, the bound
    `sum_k |v_a,k|` on the scores before and after training.
    """
    model = train_aligner(vocab=10, length=8, seed=seed)
    # the same initial weights
    untrained = train_aligner(vocab=10, length=8, steps=0, seed=seed)
    source, target = reverse_task(
        256, 8, 10, torch.Generator().manual_seed(TEST_SEED)
    )
    with torch.no_grad():
        logits, weights = model(source)  # (256, 8, 10), (256, 8, 8)
    steps = torch.arange(8)  # output step i should read source position 7 - i
    return {
        "accuracy": (logits.argmax(-1) == target).float().mean().item(),
        "reads": (weights.argmax(-1) == 7 - steps).float().mean().item(),
        "on_anti_diagonal": weights[:, steps, 7 - steps].mean().item(),
        "largest": weights.max(-1).values.mean().item(),
        "b_start": untrained.attention.score.weight.abs().sum().item(),
        "b_trained": model.attention.score.weight.abs().sum().item(),
    }


# --8<-- [end:alignment]


# --8<-- [start:induction]
def repeated_segments(
    batch: int, length: int, vocab: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """`tokens (B, N)`: a segment of `n` distinct tokens, the same segment
    again, then random tokens.

    `n (B,)` is drawn per sequence from 3 to `N // 2`, so the repeat starts at a
    different position in each sequence: only the tokens, not their positions,
    tell where the copy is. Needs `vocab >= N // 2`.
    """
    n = torch.randint(3, length // 2 + 1, (batch,), generator=generator)  # (B,)
    # (B, vocab) permutations
    shuffled = torch.rand(batch, vocab, generator=generator).argsort(-1)
    segment = shuffled[:, : length // 2]  # (B, N/2) distinct tokens
    position = torch.arange(length)  # (N,)
    in_segment = torch.where(
        position < n[:, None], position, position - n[:, None]
    )  # (B, N)
    copies = segment.gather(-1, in_segment.clamp(max=length // 2 - 1))  # (B, N)
    # (B, N)
    filler = torch.randint(vocab, (batch, length), generator=generator)
    return torch.where(position < 2 * n[:, None], copies, filler), n


def predictable(n: Tensor, length: int) -> Tensor:
    """`(B, N)` bool: positions `t` whose next token is known from the first
    copy (`n <= t < 2n - 1`)."""
    position = torch.arange(length)  # (N,)
    return (position >= n[:, None]) & (position < 2 * n[:, None] - 1)


class AttentionOnly(nn.Module):
    """A causal transformer of attention layers alone: `x = x + attention(x)`,
    layer after layer.

    Token and learned position embeddings in, a linear readout of the next token
    out.
    """

    def __init__(
        self, vocab: int, length: int, dim: int, heads: int, layers: int = 2
    ) -> None:
        super().__init__()
        check_sizes(
            vocab=vocab, length=length, dim=dim, heads=heads, layers=layers
        )
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        self.layers = nn.ModuleList(
            MultiHeadAttention(dim, heads) for _ in range(layers)
        )
        self.readout = nn.Linear(dim, vocab)

    # --8<-- [start:induction-model]
    def forward(self, tokens: Tensor) -> tuple[Tensor, list[Tensor]]:
        """`tokens (B, N)` ->
        `(logits (B, N, vocab), [weights (B, H, N, N) of each layer])`."""
        # (B, N, dim)
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[-1]))
        weights = []
        for layer in self.layers:
            # (B, N, dim)
            out, layer_weights = layer(x, is_causal=True, need_weights=True)
            x = x + out  # each layer writes into the residual stream
            weights.append(layer_weights)
        return self.readout(x), weights

    # --8<-- [end:induction-model]


def train_induction(
    vocab: int = 32,
    length: int = 24,
    dim: int = 16,
    heads: int = 2,
    steps: int = 300,
    seed: int = 0,
) -> AttentionOnly:
    """A 2-layer `AttentionOnly` trained by Adam to predict the repeated tokens
    of `repeated_segments`."""
    torch.manual_seed(seed)  # the initial weights
    generator = torch.Generator().manual_seed(seed)  # the data

    def batch_loss(model: AttentionOnly) -> Tensor:
        tokens, n = repeated_segments(32, length, vocab, generator)
        logits, _ = model(tokens)  # (B, N, vocab)
        # (B, N): where the next token can be known
        scored = predictable(n, length)
        return F.cross_entropy(
            logits[:, :-1][scored[:, :-1]], tokens[:, 1:][scored[:, :-1]]
        )

    return _fit(
        AttentionOnly(vocab, length, dim, heads), batch_loss, steps, lr=2e-2
    )


# --8<-- [end:induction]


# --8<-- [start:scores]
def previous_token_scores(weights: Tensor, n: Tensor) -> Tensor:
    """Each head's mean weight from token `t` to token `t - 1`, over
    `1 <= t < n` (inside the first copy).

    Args:
        weights: `(B, H, N, N)`, one layer's weights.
        n: `(B,)` segment lengths.

    Returns:
        `(H,)` scores in [0, 1]; 1 is a perfect previous-token head.
    """
    position = torch.arange(weights.shape[-1])  # (N,)
    # (B, N) -> pairs
    b, t = ((position >= 1) & (position < n[:, None])).nonzero(as_tuple=True)
    return weights[b, :, t, t - 1].mean(0)  # (pairs, H) -> (H,)


def induction_scores(weights: Tensor, n: Tensor) -> Tensor:
    """Each head's mean weight from a repeated token at `t` to the token after
    its first occurrence, `t - n + 1`.

    Args:
        weights: `(B, H, N, N)`, one layer's weights.
        n: `(B,)` segment lengths.

    Returns:
        `(H,)` scores in [0, 1]; 1 is a perfect induction head.
    """
    b, t = predictable(n, weights.shape[-1]).nonzero(as_tuple=True)
    return weights[b, :, t, t - n[b] + 1].mean(0)  # (pairs, H) -> (H,)


# --8<-- [end:scores]


# --8<-- [start:induction-measure]
@contextlib.contextmanager
def head_removed(layer: MultiHeadAttention, head: int) -> Iterator[None]:
    """Inside the block, `layer` runs without `head`: its slice `W_O^head` of
    the output projection is zero.

    `out_proj.weight` is `(E, E)` as (out, in); the head's slice is its columns
    `head * d` to `(head + 1) * d`, `d = head_dim`. The weight is restored on
    leaving the block.
    """
    d = layer.head_dim
    saved = layer.out_proj.weight.detach().clone()
    with torch.no_grad():
        layer.out_proj.weight[:, head * d : (head + 1) * d] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            layer.out_proj.weight.copy_(saved)


@remembered
def measure_induction(seed: int) -> dict[str, float | list[float]]:
    """Train `train_induction(seed=seed)` and measure it on 512 test sequences
    of 24 tokens from 32.

    Returns plain numbers, lists having one entry per head: `accuracy` on the
    tokens that can be known; `previous_1`, `induction_1`, `previous_2`,
    `induction_2`: the heads' scores in layers 1 and 2; `late_1`, the weight
    that layer 1's heads put on the token before from position 12 on (past every
    first copy); `without_1`, the accuracy with each head of layer 1 removed.
    """
    model = train_induction(vocab=32, length=24, heads=2, seed=seed)
    tokens, n = repeated_segments(
        512, 24, 32, torch.Generator().manual_seed(TEST_SEED)
    )
    # (B, N - 1): where the next token can be known
    scored = predictable(n, 24)[:, :-1]

    def accuracy() -> float:
        with torch.no_grad():
            logits, _ = model(tokens)  # (B, N, vocab)
        correct = logits[:, :-1].argmax(-1) == tokens[:, 1:]  # (B, N - 1)
        return correct[scored].float().mean().item()

    without = []
    for head in range(2):
        with head_removed(model.layers[0], head):
            without.append(accuracy())
    with torch.no_grad():
        _, (first, second) = model(tokens)  # (B, H, N, N) each
    late = torch.arange(12, 24)  # queries that no first copy reaches
    return {
        "accuracy": accuracy(),
        "previous_1": previous_token_scores(first, n).tolist(),
        "induction_1": induction_scores(first, n).tolist(),
        "previous_2": previous_token_scores(second, n).tolist(),
        "induction_2": induction_scores(second, n).tolist(),
        "late_1": first[:, :, late, late - 1]
        .mean((0, 2))
        .tolist(),  # (B, H, 12) -> (H,)
        "without_1": without,
    }


# --8<-- [end:induction-measure]


# --8<-- [start:max-token]
VOCAB, LENGTH, WIDTH, DEPTH = 16, 12, 32, 6


def max_token_batch(
    generator: torch.Generator, batch: int = 32
) -> tuple[Tensor, Tensor]:
    """Random `tokens (B, N)` and the target at every position: the sequence's
    largest token."""
    # (B, N)
    tokens = torch.randint(0, VOCAB, (batch, LENGTH), generator=generator)
    # (B, N)
    return tokens, tokens.max(dim=1, keepdim=True).values.expand(batch, LENGTH)


# --8<-- [start:max-token-stack]
class MaxTokenStack(nn.Module):
    """Six of torch's encoder layers, post-LN (`pre_ln=False`, the original
    Transformer) or pre-LN."""

    def __init__(self, pre_ln: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = {
            "dropout": 0.0,
            "activation": "gelu",
            "batch_first": True,
            "norm_first": pre_ln,
        }
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, **layer)
            for _ in range(DEPTH)
        )
        # pre-LN ends with one
        self.final_norm = nn.LayerNorm(WIDTH) if pre_ln else nn.Identity()
        self.head = nn.Linear(WIDTH, VOCAB)

    # (B, N) -> logits (B, N, VOCAB)
    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.final_norm(x))


# --8<-- [end:max-token-stack]


@remembered
def train_max_token(
    pre_ln: bool, steps: int = 120, lr: float = 1e-2, seed: int = 0
) -> list[float]:
    """Adam from the first step (no warm-up); the loss of every step. Same seed:
    same weights, batches."""
    torch.manual_seed(seed)
    model = MaxTokenStack(pre_ln)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed + 100)
    losses = []
    with one_thread():
        for _ in range(steps):
            tokens, target = max_token_batch(generator)
            loss = F.cross_entropy(
                model(tokens).flatten(0, 1), target.flatten()
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


# --8<-- [end:max-token]
