"""A hybrid byte-level language model: some layers the gated delta rule, some softmax attention.

Qwen3-Next stacks three gated-delta-rule layers, then one full-attention layer, and repeats (Qwen Team,
2025). `HybridLM` is a small causal language model over bytes whose layers' mixers are given as a tuple,
in order from the input, so that one class builds the all-softmax model (`("softmax",) * 4`), the 3:1
hybrid (`("gated-delta",) * 3 + ("softmax",)`) and the all-gated-delta one (`("gated-delta",) * 4`). The
mixer of a layer is `qkv_lab.recall.Mixer` (a short causal convolution, then the mixer over `HEADS` heads,
each head's output RMS-normalised); each layer is pre-norm, mixer then MLP, as in `recall.RecallModel`.

`python -m qkv_lab.hybrid --text site-text-864a16b87c8d.txt.xz --out src/qkv_lab/results/hybrid.json`
trains each model once per seed on the snapshot's training split (`qkv_lab.gpt_training.split`), one
thread, a fixed number of steps, and records bits per byte on the validation split beside the text's
n-gram baselines (`qkv_lab.lab_text.text_record`; the recorded runs took 649 s of wall clock in all,
about 11 minutes, on one thread of a shared machine); the site's build reads the report
(`qkv_lab.results.recorded("hybrid")`) and trains nothing.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from qkv_lab.gpt_training import (
    bits_per_byte,
    encode,
    split,
    train_bytes_model,
)
from qkv_lab.harness import environment
from qkv_lab.lab_text import read_text, save_snapshot, text_record
from qkv_lab.recall import Mixer
from qkv_lab.sweep import arguments, sweep
from qkv_lab.toys import one_thread

# --8<-- [start:settings]
WIDTH, HEADS, CONTEXT = 64, 4, 128  # bytes in, 4 layers of width 64
MODELS = {
    "softmax": ("softmax",) * 4,
    "hybrid 3:1": ("gated-delta",) * 3 + ("softmax",),  # Qwen3-Next's order
    "gated-delta": ("gated-delta",) * 4,
}
STEPS, BATCH, LR, SEEDS = 800, 8, 5e-3, (0, 1, 2)
# --8<-- [end:settings]
KINDS = ("softmax", "gated-delta")
OUT = Path(__file__).parent / "results" / "hybrid.json"


@dataclasses.dataclass(frozen=True)
class HybridConfig:
    """The sizes of a `HybridLM`: one mixer kind (`KINDS`) per layer, input first.

    Raises:
        ValueError: no layers, a kind not in `KINDS`, or `width` not a multiple of `heads`.
    """

    mixers: tuple[str, ...]
    vocab_size: int = 256
    width: int = WIDTH
    heads: int = HEADS
    context: int = CONTEXT

    def __post_init__(self) -> None:
        if not self.mixers:
            raise ValueError("mixers must name at least one layer, got ()")
        unknown = [kind for kind in self.mixers if kind not in KINDS]
        if unknown:
            raise ValueError(
                f"mixers must be among {KINDS}, got {unknown} in {self.mixers}"
            )
        if self.width % self.heads:
            raise ValueError(
                f"width ({self.width}) must be a multiple of heads "
                f"({self.heads})"
            )


def cache_floats(config: HybridConfig, length: int) -> list[int]:
    """The floats each layer keeps for one sequence after `length` tokens, input layer first.

    A softmax layer keeps the key and value of every token, `2 * width * length`; a gated-delta layer
    keeps one `(Dk, Dv)` state per head, `heads * (width / heads) ** 2`, whatever the length. The short
    convolution's last 3 inputs (`3 * width`, the same in every layer) are left out.
    """
    head_dim = config.width // config.heads
    size = {
        "softmax": 2 * config.width * length,
        "gated-delta": config.heads * head_dim * head_dim,
    }
    return [size[kind] for kind in config.mixers]


class HybridLM(nn.Module):
    """Embedding, one pre-norm block per mixer (mixer, then MLP), output layer: bytes `(B, N)` -> logits.

    Causal in every part: the convolution pads on the left, softmax attention is masked, the gated delta
    rule is a recurrence. No positional encoding besides the convolution, as in `recall.RecallModel`.
    Every layout has the same parameters: a softmax layer's `Mixer` holds the gate layer of the gated
    delta rule too (`2 * heads * (width + 1)` weights), unused and never updated.
    """

    def __init__(self, config: HybridConfig) -> None:
        super().__init__()
        self.config = config
        width = config.width
        self.embed = nn.Embedding(config.vocab_size, width)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.RMSNorm(width),
                    "mixer": Mixer(kind, width, config.heads),
                    "norm2": nn.RMSNorm(width),
                    "mlp": nn.Sequential(
                        nn.Linear(width, 4 * width),
                        nn.GELU(),
                        nn.Linear(4 * width, width),
                    ),
                }
            )
            for kind in config.mixers
        )
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, config.vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, N, E)
        for block in self.blocks:
            x = x + block["mixer"](block["norm1"](x))
            x = x + block["mlp"](block["norm2"](x))
        return self.head(self.norm(x))  # (B, N, V)


def train(
    config: HybridConfig,
    train_bytes: Tensor,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
) -> HybridLM:
    """A `HybridLM` trained by AdamW on random windows of `train_bytes`, in eval mode: the weights from
    `seed`, the training of `qkv_lab.gpt_training.train_bytes_model` (the site GPT's schedule)."""
    torch.manual_seed(seed)  # the initial weights
    model = HybridLM(config)
    trained, _ = train_bytes_model(
        model, config.context, train_bytes, steps, batch, lr, seed
    )
    return trained


def run(
    models: dict[str, tuple[str, ...]],
    seeds: tuple[int, ...],
    steps: int,
    batch: int,
    lr: float,
    text: str,
    out: Path | None = None,
) -> dict:
    """Train every model once per seed on `text`'s split; report bits per byte on its validation part.

    Returns:
        The report: the settings, the environment, the text's record (`lab_text.text_record`: hash,
        snapshot name, split sizes, n-gram baselines), and per model its mixers, parameter count, floats
        kept per layer at the full context (`cache_floats`), and `bits_per_byte` and `seconds` per seed
        (in the order of `seeds`). Every model runs seed `seeds[0]`, then the next seed, and so on.
    """
    train_bytes, validation = split(encode(text))
    with one_thread():
        machine = environment(torch.device("cpu"))
    report = {
        "what": "bits per byte on the site text's validation split, per layout of mixers",
        **text_record(text),
        "model": {"width": WIDTH, "heads": HEADS, "context": CONTEXT},
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "bytes_seen": steps * batch * CONTEXT,
        "seeds": list(seeds),
        **machine,
        "timing": "wall-clock seconds of each run (training and scoring), measured once",
        "models": {},
    }
    configs = {
        name: HybridConfig(mixers, width=WIDTH, heads=HEADS, context=CONTEXT)
        for name, mixers in models.items()
    }
    for name, config in configs.items():
        report["models"][name] = {
            "mixers": list(config.mixers),
            "parameters": sum(p.numel() for p in HybridLM(config).parameters()),
            "cache_floats_per_layer": cache_floats(config, CONTEXT),
            "bits_per_byte": [],
            "seconds": [],
        }

    def trial(name: str, seed: int) -> dict[str, float]:
        model = train(configs[name], train_bytes, steps, batch, lr, seed)
        with one_thread(), torch.no_grad():
            return {"bits_per_byte": bits_per_byte(model, validation)}

    return sweep(report, report["models"], seeds, trial, out)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("hybrid", __doc__, STEPS, SEEDS, OUT)
    parser.add_argument(
        "--text", required=True, help="a snapshot (qkv_lab.lab_text)"
    )
    parser.add_argument(
        "--models", nargs="+", choices=list(MODELS), default=list(MODELS)
    )
    args = parser.parse_args(argv)
    text = read_text(args.text)
    save_snapshot(text, args.out.parent)
    models = {name: MODELS[name] for name in args.models}
    run(models, tuple(args.seeds), args.steps, BATCH, LR, text, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
