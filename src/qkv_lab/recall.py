"""Associative recall on a toy task: softmax attention, linear attention, the gated delta rule.

The task is multi-query associative recall (MQAR; Arora et al., 2023, "Zoology", ICLR 2024), in a small
form: a sequence shows `PAIRS` key-value pairs, `k1 v1 k2 v2 ...`, then asks for every key again in a
random order; after each asked key the model must predict its value. Keys and values are drawn afresh for
every sequence, so the pairs cannot be learned into the weights: they must be read back from the context.

Three tiny models differ only in the mixer of their layers (`MIXERS`): causal softmax attention
(`qkv.scaled_dot_product_attention`), causal linear attention with `elu(x) + 1` features
(`qkv.linear_attention`, the efficient-attention post's) and the gated delta rule (`qkv.gated_delta_rule`,
with L2-normalised queries and keys, a sigmoid `beta` and a decay `g = -softplus(.)`). Everything else is
the same: width, heads, a short causal convolution before the mixer (which lets a key's position see the
token before it, as the models that use these mixers do), each head's output RMS-normalised (as Qwen3-Next's
linear layers do), an MLP, pre-norm residuals. With 4 heads of 16 features and 24 pairs, a linear or delta-rule
head's 16 x 16 state has fewer rows than there are pairs to recall.

`python -m qkv_lab.recall --out src/qkv_lab/results/recall.json` trains each model once per seed, one
thread, a fixed number of steps, and records the accuracy on held-out sequences (the recorded run took
1,648 s of wall clock in all, about 27 minutes, on one thread of a shared machine); the site's build reads
the report (`qkv_lab.results.recorded("recall")`) and trains nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import qkv
from qkv_lab.harness import environment
from qkv_lab.sweep import arguments, sweep
from qkv_lab.toys import one_thread

# --8<-- [start:settings]
VOCAB, PAIRS = 64, 24  # keys are tokens 0-31, values 32-63; 24 pairs each
WIDTH, HEADS, LAYERS = 64, 4, 2  # every model: 2 layers of width 64, 4 heads
STEPS, BATCH, LR, SEEDS = 1000, 32, 3e-3, (0, 1, 2)
MIXERS = ("softmax", "linear", "gated-delta")
# --8<-- [end:settings]
TEST_SEQUENCES = 1000
OUT = Path(__file__).parent / "results" / "recall.json"


def mqar_batch(
    batch: int, pairs: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """`batch` recall sequences of `4 * pairs` tokens, and the target after each token.

    Returns:
        `(tokens, targets)`, both `(batch, 4 * pairs)` integers: the pairs `k v k v ...` (keys below
        `VOCAB // 2`, distinct within a sequence; values from `VOCAB // 2` up), then each key again, once,
        in a random order, each followed by its value. `targets[:, i]` is the token after position `i`
        where that token is an asked-for value, and -1 (ignored) elsewhere.
    """
    half = VOCAB // 2
    keys = torch.rand(batch, half, generator=generator).argsort(-1)[:, :pairs]
    values = torch.randint(half, VOCAB, (batch, pairs), generator=generator)
    order = torch.rand(batch, pairs, generator=generator).argsort(-1)
    shown = torch.stack([keys, values], dim=-1).flatten(1)  # (B, 2P)
    asked = torch.stack(
        [keys.gather(1, order), values.gather(1, order)], dim=-1
    ).flatten(1)  # (B, 2P)
    tokens = torch.cat([shown, asked], dim=1)  # (B, 4P)
    targets = torch.full_like(tokens, -1)
    targets[:, 2 * pairs :: 2] = asked[:, 1::2]  # after an asked key: its value
    return tokens, targets


class Mixer(nn.Module):
    """A short causal convolution, then one of `MIXERS` over `HEADS` heads: `(B, N, E) -> (B, N, E)`."""

    def __init__(self, kind: str, width: int, heads: int) -> None:
        super().__init__()
        self.kind, self.heads = kind, heads
        self.conv = nn.Conv1d(width, width, 4, padding=3, groups=width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.gates = nn.Linear(width, 2 * heads)  # beta and g, per head
        # g starts near -0.007: a decay of 0.993 per token
        with torch.no_grad():
            self.gates.bias[heads:] = -5.0
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        n = x.size(1)
        x = self.conv(x.transpose(1, 2))[..., :n].transpose(1, 2)  # causal
        q, k, v = (
            t.unflatten(-1, (self.heads, -1)).transpose(1, 2)
            for t in self.qkv(F.silu(x)).chunk(3, dim=-1)
        )  # (B, N, E) -> (B, H, N, E/H) each
        if self.kind == "softmax":
            y = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.kind == "linear":
            y = qkv.linear_attention(q, k, v, causal=True)
        else:
            beta, g = self.gates(x).transpose(1, 2).chunk(2, dim=1)  # (B, H, N)
            y, _ = qkv.gated_delta_rule(
                F.normalize(q, dim=-1),
                F.normalize(k, dim=-1),
                v,
                -F.softplus(g),
                beta.sigmoid(),
                chunk_size=16,
            )
        y = F.rms_norm(y, y.shape[-1:])  # each head's output, as Qwen3-Next
        # (B, H, N, D) -> (B, N, E)
        return self.out(y.transpose(1, 2).flatten(2))


class RecallModel(nn.Module):
    """Embedding, `layers` pre-norm blocks (mixer, then MLP), output layer: tokens `(B, N)` -> logits."""

    def __init__(self, kind: str, width=WIDTH, heads=HEADS, layers=LAYERS):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.RMSNorm(width),
                    "mixer": Mixer(kind, width, heads),
                    "norm2": nn.RMSNorm(width),
                    "mlp": nn.Sequential(
                        nn.Linear(width, 4 * width),
                        nn.GELU(),
                        nn.Linear(4 * width, width),
                    ),
                }
            )
            for _ in range(layers)
        )
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, N, E)
        for block in self.blocks:
            x = x + block["mixer"](block["norm1"](x))
            x = x + block["mlp"](block["norm2"](x))
        return self.head(self.norm(x))  # (B, N, VOCAB)


def accuracy(model: RecallModel, tokens: Tensor, targets: Tensor) -> float:
    """The share of asked-for values that the model predicts (argmax) right."""
    with torch.no_grad():
        predicted = model(tokens).argmax(-1)
    asked = targets >= 0
    return (predicted[asked] == targets[asked]).double().mean().item()


def train(
    kind: str, seed: int, steps: int, batch: int, lr: float, pairs: int
) -> tuple[RecallModel, float]:
    """Train a `RecallModel` with mixer `kind` on fresh sequences; return it and its last training loss."""
    torch.manual_seed(seed)
    model = RecallModel(kind)
    data = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, lr, total_steps=steps
    )
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        tokens, targets = mqar_batch(batch, pairs, data)
        loss = F.cross_entropy(
            model(tokens).flatten(0, 1), targets.flatten(), ignore_index=-1
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
    return model, loss.item()


def run(
    mixers: tuple[str, ...],
    seeds: tuple[int, ...],
    steps: int,
    batch: int,
    lr: float,
    pairs: int,
    out: Path | None = None,
) -> dict:
    """Train every mixer once per seed and report its accuracy on `TEST_SEQUENCES` held-out sequences.

    Returns:
        The report: the task and model settings, the environment, and per mixer its parameter count, its
        state per layer for one sequence (floats), and `accuracy`, `final_loss` and `seconds` per seed (in
        the order of `seeds`). The held-out sequences come from a generator seeded apart from training's.
    """
    with one_thread():
        machine = environment(torch.device("cpu"))
    test = mqar_batch(
        TEST_SEQUENCES, pairs, torch.Generator().manual_seed(10_000)
    )
    head_dim = WIDTH // HEADS
    report = {
        "what": "MQAR accuracy on held-out sequences: the share of asked-for values predicted right",
        "task": {
            "vocab": VOCAB,
            "pairs": pairs,
            "length": 4 * pairs,
            "test_sequences": TEST_SEQUENCES,
        },
        "model": {"width": WIDTH, "heads": HEADS, "layers": LAYERS, "conv": 4},
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seeds": list(seeds),
        **machine,
        "timing": "wall-clock seconds of each run (training and scoring), measured once",
        "mixers": {},
    }
    state = {  # per layer, for one sequence of length 4 * pairs
        "softmax": 2 * WIDTH * 4 * pairs,  # the keys and values of every token
        "linear": HEADS * (head_dim * head_dim + head_dim),  # S and z
        "gated-delta": HEADS * head_dim * head_dim,  # S
    }
    for kind in mixers:
        report["mixers"][kind] = {
            "parameters": sum(
                p.numel() for p in RecallModel(kind).parameters()
            ),
            "state_floats_per_layer": state[kind],
            "accuracy": [],
            "final_loss": [],
            "seconds": [],
        }

    def trial(kind: str, seed: int) -> dict[str, float]:
        with one_thread():
            model, loss = train(kind, seed, steps, batch, lr, pairs)
            return {"accuracy": accuracy(model, *test), "final_loss": loss}

    return sweep(report, report["mixers"], seeds, trial, out)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("recall", __doc__, STEPS, SEEDS, OUT)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--mixers", nargs="+", choices=MIXERS, default=MIXERS)
    args = parser.parse_args(argv)
    run(
        tuple(args.mixers),
        tuple(args.seeds),
        args.steps,
        BATCH,
        LR,
        args.pairs,
        args.out,
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
