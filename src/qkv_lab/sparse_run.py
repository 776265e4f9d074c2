"""Sparse attention on the site's GPT: a lightning indexer distilled from its dense attention, top-k keys kept.

The model is the site's GPT (`qkv_lab.gpt_training.trained_site_gpt`: `SITE_CONFIG`, trained `STEPS` steps
of `BATCH` windows), frozen. Each of its blocks gets an `Indexer`, DeepSeek-V3.2's lightning indexer at toy
size (a few heads of a small dimension, RoPE on its queries and key, `qkv.indexer_scores`), trained as
DeepSeek's dense warm-up trains theirs: the rest of the model frozen, the indexer's scores pulled by a KL
divergence towards the block's dense attention, summed over the heads and normalised per query
(`distillation_loss`). One training per seed; the seed draws the indexers' weights and the training windows.

Then, on the validation split cut into windows of the context, for each `k` of `Settings.top_ks`:

- `attention_mass`: per layer, the share of the dense attention (averaged over the heads) that each query's
  `k` chosen keys hold, over the queries with more than `k` keys in their past: the top-k keys by that
  attention itself (the ceiling for one choice shared by the heads), the indexer's top-k, the last `k` keys
  (a sliding window, the query's own token included) and `k` keys drawn at random among its past.
- `sparse_bits_per_byte`: the bits per byte when every layer attends only to `k` keys per query, chosen by
  the indexer (from that layer's own input, in the sparse model), by the window, or at random.

`python -m qkv_lab.sparse_run` runs it (under ten minutes on one thread of a busy machine; the report holds
each seed's seconds) and writes the report the sparse-attention article reads
(`qkv_lab.results.recorded("sparse-attention")`); the site's build never runs it. The text is the site's
articles, which change with every edit: the report holds the text's record (`qkv_lab.lab_text.text_record`:
hash, snapshot, n-gram baselines), and `--text` reruns it on a snapshot, as it was recorded:

    python -m qkv_lab.sparse_run --text site-text-5a7e11f79759.txt.xz \
        --out src/qkv_lab/results/sparse-attention.json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import qkv
from qkv.gpt import GPT
from qkv.masks import Mask
from qkv.positions import apply_rope
from qkv_lab.gpt_attention import head_weights
from qkv_lab.gpt_training import (
    BATCH,
    LR,
    SEED,
    SITE_CONFIG,
    STEPS,
    bits_per_byte,
    encode,
    site_text,
    split,
    train_gpt,
    trained_site_gpt,
)
from qkv_lab.harness import environment, write_json
from qkv_lab.lab_text import read_text, save_snapshot, text_record
from qkv_lab.toys import one_thread

OUT = Path(__file__).parent / "results" / "sparse-attention.json"
SCHEMES = ("ceiling", "indexer", "window", "random")


# --8<-- [start:settings]
@dataclasses.dataclass(frozen=True)
class Settings:
    """What the run trains and measures; the defaults are the recorded run's."""

    top_ks: tuple[int, ...] = (8, 32)  # keys kept per query, of up to 128
    seeds: tuple[int, ...] = (0, 1, 2)  # the indexers' and the random keys'
    indexer_heads: int = 2  # the GPT has 4 heads of 16 dimensions
    indexer_dim: int = 8
    steps: int = 1000  # distillation steps, of `batch` windows of 128
    batch: int = 8
    lr: float = 3e-3


# --8<-- [end:settings]


# --8<-- [start:indexer]
class Indexer(nn.Module):
    """A lightning indexer for one block: `heads` queries and one key per
    token, each `dim` wide, turned by RoPE, and a weight per head."""

    def __init__(self, width: int, heads: int, dim: int, rope_base: float):
        super().__init__()
        self.heads, self.rope_base = heads, rope_base
        self.q_proj = nn.Linear(width, heads * dim, bias=False)
        self.k_proj = nn.Linear(width, dim, bias=False)
        self.w_proj = nn.Linear(width, heads, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """The block's normed input `x (B, L, E)` -> causal scores
        `(B, L, L)`."""
        positions = torch.arange(x.size(1), device=x.device)  # (L,)
        q = self.q_proj(x).unflatten(-1, (self.heads, -1)).transpose(1, 2)
        q = apply_rope(q, positions, base=self.rope_base)  # (B, H, L, D)
        k = apply_rope(self.k_proj(x)[:, None], positions, base=self.rope_base)
        w = self.w_proj(x) * self.heads**-0.5  # (B, L, H)
        causal = qkv.causal_mask(x.size(1), x.size(1), device=x.device)
        return qkv.indexer_scores(q, k[:, 0], w, mask=causal)  # (B, L, L)


def distillation_loss(scores: Tensor, weights: Tensor) -> Tensor:
    """KL(p || softmax(scores)), p the dense `weights (B, H, L, S)` summed
    over the heads and normalised per query; mean over the queries."""
    target = weights.sum(1)  # (B, H, L, S) -> (B, L, S)
    target = target / target.sum(-1, keepdim=True)
    log_q = torch.log_softmax(scores, dim=-1)  # -inf where masked
    terms = target * (target.clamp_min(1e-30).log() - log_q)
    return terms.where(target > 0, 0.0).sum(-1).mean()


# --8<-- [end:indexer]


def new_indexers(model: GPT, settings: Settings) -> nn.ModuleList:
    """One `Indexer` per block of `model`, at the settings' size and the model's RoPE base."""
    config = model.config
    return nn.ModuleList(
        Indexer(
            config.width,
            settings.indexer_heads,
            settings.indexer_dim,
            config.rope_base,
        )
        for _ in model.blocks
    )


@torch.no_grad()
def dense_layers(model: GPT, ids: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per block of the dense model: its normed input `(B, L, E)` and its attention weights `(B, H, L, L)`."""
    positions = torch.arange(ids.size(1), device=ids.device)
    x, layers = model.embed(ids), []  # (B, L) -> (B, L, E)
    if model.position_embed is not None:
        x = x + model.position_embed(positions)
    for block in model.blocks:
        h = block.attn_norm(x)
        layers.append((h, head_weights(block.attn, h, positions)))
        x = block(x, positions, Mask(alignment="bottom_right"))
    return layers


def train_indexers(
    model: GPT, train: Tensor, settings: Settings, seed: int
) -> tuple[nn.ModuleList, list[float]]:
    """The indexers of `model`, distilled from its dense attention on random windows of `train`.

    The model stays frozen and the indexers read its dense inputs (DeepSeek's dense warm-up). Each step draws
    `batch` windows from a generator seeded with `seed` (which also seeds the indexers' weights) and takes an
    Adam step on the sum over the layers of `distillation_loss`.

    Returns:
        `(indexers, losses)`: the indexers (eval mode) and each step's summed loss.
    """
    torch.manual_seed(seed)
    indexers = new_indexers(model, settings)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(indexers.parameters(), lr=settings.lr)
    context = model.config.context
    losses = []
    for _ in range(settings.steps):
        starts = torch.randint(
            len(train) - context, (settings.batch, 1), generator=generator
        )
        ids = train[starts + torch.arange(context)]  # (B, C)
        loss = sum(
            distillation_loss(indexer(h), weights)
            for indexer, (h, weights) in zip(
                indexers, dense_layers(model, ids), strict=True
            )
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return indexers.eval(), losses


# --8<-- [start:choices]
def window_scores(length: int) -> Tensor:
    """Scores that rank the past by recency: `(L, L)`, `-inf` in the future."""
    position = torch.arange(length, dtype=torch.float32)
    recency = position[None, :] - position[:, None]  # j - i, 0 on the diagonal
    return recency.masked_fill(recency > 0, -math.inf)


def random_scores(
    batch: int, length: int, generator: torch.Generator
) -> Tensor:
    """Scores that rank the past at random: `(B, L, L)`, `-inf` in the future."""
    scores = torch.rand(batch, length, length, generator=generator)
    return scores.masked_fill(~qkv.causal_mask(length, length), -math.inf)


def kept(scores: Tensor, top_k: int) -> Tensor:
    """The keep mask `(B, 1, L, S)` of each query's `top_k` keys of highest score."""
    return qkv.topk_mask(qkv.topk_indices(scores, top_k), scores.size(-1))


# --8<-- [end:choices]


def held_mass(weights: Tensor, keep: Tensor, top_k: int) -> Tensor:
    """The share of `weights (B, H, L, S)` that `keep (B, 1, L, S)` holds, per head `(B, H)`.

    Averaged over the queries with more than `top_k` keys in their past (queries `top_k` to L - 1); those
    before hold everything whatever the choice.
    """
    held = (weights * keep).sum(-1)  # (B, H, L)
    return held[..., top_k:].mean(-1)


@torch.no_grad()
def attention_mass(
    model: GPT,
    indexers: nn.ModuleList,
    windows: Tensor,
    top_k: int,
    generator: torch.Generator,
    batch: int = 32,
) -> dict[str, list[float]]:
    """Per scheme of `SCHEMES`, per layer: the dense attention mass that `top_k` chosen keys hold.

    Averaged over the heads, the queries with more than `top_k` keys and the `windows (N, C)`.
    """
    sums = {name: torch.zeros(len(model.blocks)) for name in SCHEMES}
    length = windows.size(1)
    for ids in windows.split(batch):
        layers = dense_layers(model, ids)
        for layer, (indexer, (h, weights)) in enumerate(
            zip(indexers, layers, strict=True)
        ):
            choices = {
                "ceiling": weights.mean(1),  # (B, L, S)
                "indexer": indexer(h),
                "window": window_scores(length).expand(len(ids), -1, -1),
                "random": random_scores(len(ids), length, generator),
            }
            for name, scores in choices.items():
                keep = kept(scores, top_k)
                mass = held_mass(weights, keep, top_k)  # (B, H)
                sums[name][layer] += mass.mean(1).sum()
    return {
        name: (total / len(windows)).tolist() for name, total in sums.items()
    }


Chooser = Callable[[int, Tensor], Tensor]


@torch.no_grad()
def sparse_logits(model: GPT, ids: Tensor, choose: Chooser) -> Tensor:
    """The model's logits `(B, L, V)` when each block attends only to the keys `choose(layer, h)` keeps.

    `choose` gets the block's index and its normed input `h (B, L, E)` and returns a keep mask that
    broadcasts to `(B, 1, L, L)`; the causal mask applies as well.
    """
    positions = torch.arange(ids.size(1), device=ids.device)
    x = model.embed(ids)  # (B, L) -> (B, L, E)
    if model.position_embed is not None:
        x = x + model.position_embed(positions)
    for layer, block in enumerate(model.blocks):
        keep = choose(layer, block.attn_norm(x))
        x = block(x, positions, Mask(alignment="bottom_right", dense=keep))
    return model.lm_head(model.norm(x))  # (B, L, E) -> (B, L, V)


def sparse_bits_per_byte(
    model: GPT, validation: Tensor, choose: Chooser, batch: int = 64
) -> float:
    """Bits per byte on `validation` cut as `bits_per_byte` cuts it, with attention kept to `choose`'s keys."""
    context = model.config.context
    windows = [
        validation[s : s + context + 1]
        for s in range(0, len(validation) - 1, context)
    ]
    *full, last = windows
    batches = [
        torch.stack(full[i : i + batch]) for i in range(0, len(full), batch)
    ] + [last[None]]
    nats = sum(
        F.cross_entropy(
            sparse_logits(model, x[:, :-1], choose).flatten(0, 1),
            x[:, 1:].flatten(),
            reduction="sum",
        ).item()
        for x in batches  # (B, context + 1) bytes -> logits (B, context, V)
    )
    return nats / (len(validation) - 1) / math.log(2)


def choosers(
    indexers: nn.ModuleList, top_k: int, generator: torch.Generator
) -> dict[str, Chooser]:
    """The three ways to keep `top_k` keys per query in every layer: the indexer's, a window, random."""
    return {
        "indexer": lambda layer, h: kept(indexers[layer](h), top_k),
        "window": lambda layer, h: kept(window_scores(h.size(1))[None], top_k),
        "random": lambda layer, h: kept(
            random_scores(h.size(0), h.size(1), generator), top_k
        ),
    }


def run(
    settings: Settings,
    model: GPT,
    text: str,
    out: Path | None = None,
    training_steps: int | None = None,
) -> dict:
    """Train `model`'s indexers and measure everything of the module docstring on `text`'s split, per seed.

    `model` is frozen here; `training_steps`, the steps it was trained for, goes into the report.

    Returns:
        The report: the settings, the text's hash and sizes, the environment, the dense model's and the
        n-gram baselines' bits per byte, and per `k` and seed (lists in the order of `settings.seeds`) the
        attention mass held per scheme and layer, and the bits per byte per scheme.
    """
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    train, validation = split(encode(text))
    context = model.config.context
    windows = validation[: len(validation) // context * context].view(
        -1, context
    )  # (N, C)
    with one_thread():
        machine = environment(torch.device("cpu"))
        dense = bits_per_byte(model, validation)
    report = {
        "what": "a lightning indexer distilled from the site GPT's attention; top-k keys kept",
        **text_record(text),
        "validation_windows": len(windows),
        "settings": dataclasses.asdict(settings),
        "model": {
            "config": dataclasses.asdict(model.config),
            "training_steps": training_steps,
        },
        **machine,
        "timing": "wall-clock seconds of each seed's training and measurements, measured once",
        "bits_per_byte": {"dense": dense},
        "distillation_loss": [],
        "seconds": [],
        "top_k": {
            str(k): {"mass": {}, "bits_per_byte": {}} for k in settings.top_ks
        },
    }
    for seed in settings.seeds:
        start = time.perf_counter()
        with one_thread():
            indexers, losses = train_indexers(model, train, settings, seed)
            report["distillation_loss"].append(losses)
            for top_k in settings.top_ks:
                where = report["top_k"][str(top_k)]
                generator = torch.Generator().manual_seed(seed)
                mass = attention_mass(
                    model, indexers, windows, top_k, generator
                )
                for name, layers in mass.items():
                    where["mass"].setdefault(name, []).append(layers)
                for name, choose in choosers(
                    indexers, top_k, generator
                ).items():
                    bits = sparse_bits_per_byte(model, validation, choose)
                    where["bits_per_byte"].setdefault(name, []).append(bits)
        report["seconds"].append(round(time.perf_counter() - start, 1))
        print(
            f"{time.strftime('%H:%M:%S')} seed {seed}: "
            f"{ {k: v['bits_per_byte'] for k, v in report['top_k'].items()} }",
            file=sys.stderr,
        )
        if out is not None:
            write_json(report, out)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.sparse_run", description=__doc__
    )
    parser.add_argument(
        "--text", help="a snapshot (qkv_lab.lab_text) or UTF-8 file, kept beside the report; "
        "default: the site now"
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = site_text() if args.text is None else read_text(args.text)
    save_snapshot(text, args.out.parent)
    if text == site_text():
        model, _ = trained_site_gpt()  # kept on disk by the site's build
    else:  # the site GPT's recipe, on the snapshot's training split
        train, _ = split(encode(text))
        model, _ = train_gpt(SITE_CONFIG, train, STEPS, BATCH, LR, SEED)
    run(Settings(), model, text, args.out, STEPS)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
