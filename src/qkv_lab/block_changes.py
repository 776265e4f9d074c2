"""The block as models build it today, one change at a time: a ladder of `qkv.gpt` configs trained on the site.

The ladder starts from a block shaped as the original Transformer's and GPT-2's (LayerNorm after each residual
addition, a GELU MLP, learned positions, biases, one key-value head per query head) and makes one change per
rung until it reaches the site's GPT (`qkv_lab.gpt_training.SITE_CONFIG`, Llama's shape), then goes two rungs
further (QK-norm, soft-capped attention scores). Each rung keeps every change before it.

Each rung trains with `train_gpt` on the site text's training split, once per seed, and is measured in bits
per byte on the validation split. `python -m qkv_lab.block_changes` runs the whole ladder (about half an hour
on one thread) and writes the report the transformer-block article draws from
(`qkv_lab.results.recorded("block-changes")`); the site's build never trains it. The report holds the text's
hash and date: the text is the site's articles, so a later edit makes a different text.

`--steps`, `--seeds` and `--rungs` run another budget or part of the ladder; `--text` trains on a snapshot
(`qkv_lab.lab_text`), keeps it beside the report and records the n-gram baselines of its split. The longer
recorded run, `recorded("block-changes-2000-steps")`, is

    python -m qkv_lab.block_changes --steps 2000 --seeds 0 1 2 --rungs pre-LN RoPE soft-capping \
        --text site-text-864a16b87c8d.txt.xz --out src/qkv_lab/results/block-changes-2000-steps.json

and `recorded("block-changes-2000-steps-post-ln")` the same with `--rungs post-LN` and that `--out`;
`recorded("block-changes-2000-steps-rmsnorm-swiglu")` with `--rungs RMSNorm SwiGLU` and
`recorded("block-changes-2000-steps-gqa-biases-qknorm")` with `--rungs GQA "no biases" QK-norm`, run side
by side in two processes. `recorded("block-changes-2000-steps-post-ln-lr-<rate>")` is post-LN again with
`--lr <rate>` (rates 2e-3, 1e-3 and 5e-4), and `recorded("block-changes-2000-steps-pre-ln-lr-2e-3")` pre-LN
at 2e-3, to compare the two at one rate.

The counts are per token of a full context window: `parameter_count` (tied embeddings once) and
`flops_per_token`, the forward pass's matrix products only (2 FLOPs per multiply-add, the masked half of the
scores included, as an unfused CPU path computes them); norms, activations, biases and the softmax cost a few
operations per feature and are left out, as `torch.utils.flop_counter.FlopCounterMode` leaves them out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

import torch

from qkv.gpt import GPT, GPTConfig
from qkv_lab.gpt_training import (
    bits_per_byte,
    encode,
    site_text,
    split,
    train_gpt,
)
from qkv_lab.harness import environment
from qkv_lab.lab_text import read_text, save_snapshot, text_record
from qkv_lab.sweep import arguments, sweep
from qkv_lab.toys import one_thread

# --8<-- [start:ladder]
# the site GPT's sizes, in a block shaped as GPT-2's but with the original's
# post-LN
START = {
    "vocab_size": 256, "width": 64, "layers": 3, "heads": 4, "kv_heads": 4,
    "context": 128, "norm_position": "post", "norm": "layer", "mlp": "gelu",
    "positions": "learned", "bias": True,
}  # fmt: skip
CHANGES = (  # each rung's change, applied on top of every change before it
    ("post-LN", {}),
    ("pre-LN", {"norm_position": "pre"}),
    ("RMSNorm", {"norm": "rms"}),
    ("SwiGLU", {"mlp": "swiglu"}),
    ("RoPE", {"positions": "rope"}),
    ("GQA", {"kv_heads": 2}),
    ("no biases", {"bias": False}),  # the site's GPT
    ("QK-norm", {"qk_norm": True}),
    ("soft-capping", {"softcap": 50.0}),  # Gemma 2's cap on attention scores
)
STEPS, BATCH, LR, SEEDS = 600, 8, 5e-3, (0, 1, 2)
# --8<-- [end:ladder]
# changes beside the ladder, each made on its own to the site's GPT (the rung
# "no biases")
BESIDE = (
    ("output gate", {"gate": True}),  # Qiu et al. (2025), as in Qwen3-Next
)
OUT = Path(__file__).parent / "results" / "block-changes.json"


def ladder() -> list[tuple[str, GPTConfig]]:
    """Each rung's name and config: `START` with the changes of `CHANGES` up to that rung applied."""
    options, rungs = dict(START), []
    for name, change in CHANGES:
        options.update(change)
        rungs.append((name, GPTConfig(**options)))
    return rungs


def beside() -> list[tuple[str, GPTConfig]]:
    """Each change of `BESIDE` with its config: the site's GPT with that change."""
    site = dict(ladder())["no biases"]
    return [
        (name, dataclasses.replace(site, **change)) for name, change in BESIDE
    ]


def parameter_count(config: GPTConfig) -> int:
    """The parameters of `GPT(config)`, a tied embedding counted once."""
    return sum(p.numel() for p in GPT(config).parameters())


def flops_per_token(config: GPTConfig) -> int:
    """Forward FLOPs per token of the matrix products of `GPT(config)` over a window of `context` tokens.

    Per block: the query and output projections (`E x E` each), the key and value projections (`E x Hkv D`
    each), the output gate's `E x E` if any, the MLP (two or, for SwiGLU, three `E x mlp_width` matrices)
    and attention's two products with
    all `context` keys (`H D` features each); then the output layer (`E x V`). 2 FLOPs per multiply-add.
    """
    e, kv = config.width, config.kv_heads * config.head_dim
    mlp_matrices = 3 if config.mlp == "swiglu" else 2
    gate = e * e if config.gate else 0  # the output gate's map
    weights = (
        2 * e * e + 2 * e * kv + mlp_matrices * e * config.mlp_width + gate
    )  # per block
    # per block
    scores_and_sum = 2 * config.heads * config.head_dim * config.context
    return 2 * (
        config.layers * (weights + scores_and_sum) + e * config.vocab_size
    )


def run(
    rungs: list[tuple[str, GPTConfig]],
    seeds: tuple[int, ...],
    steps: int,
    batch: int,
    lr: float,
    text: str,
    out: Path | None = None,
    baselines: bool = False,
) -> dict:
    """Train every rung once per seed on `text`'s split and report bits per byte on its validation part.

    Args:
        rungs: `(name, config)` pairs, as `ladder()` gives them.
        seeds: the seeds of `train_gpt` (weights and windows).
        steps, batch, lr: as for `train_gpt`.
        text: the text, split by `qkv_lab.gpt_training.split`.
        out: None, or where to write the report after every run (a stopped sweep keeps what it ran).
        baselines: also record the text's n-gram baselines and snapshot name (a second of counting).

    Returns:
        The report: the settings, the text's hash and size, the environment, and per rung its change, config,
        counts, and `bits_per_byte` and `seconds` per seed (in the order of `seeds`). With `baselines`, also
        the text's record (`qkv_lab.lab_text.text_record`: snapshot name, split sizes, n-gram baselines).

    Every rung runs seed `seeds[0]`, then every rung the next seed, and so on: a stopped sweep holds whole
    seeds of the ladder.
    """
    train, validation = split(encode(text))
    # the thread count that training runs with, as `environment` records it
    with one_thread():
        machine = environment(torch.device("cpu"))
    report = {
        "what": "bits per byte on the site text's validation split, one change to the block per rung",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "text_bytes": len(train) + len(validation),
        "validation_bytes": len(validation),
        **(text_record(text) if baselines else {}),
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seeds": list(seeds),
        **machine,
        "timing": "wall-clock seconds of each run (training and scoring), measured once",
        "rungs": [],
    }
    changes = dict(CHANGES) | dict(BESIDE)
    for name, config in rungs:
        report["rungs"].append(
            {
                "name": name,
                "change": changes.get(name, {}),
                "config": dataclasses.asdict(config),
                "parameters": parameter_count(config),
                "flops_per_token": flops_per_token(config),
                "bits_per_byte": [],
                "seconds": [],
            }
        )
    configs = dict(rungs)

    def trial(name: str, seed: int) -> dict[str, float]:
        model, _ = train_gpt(configs[name], train, steps, batch, lr, seed)
        with one_thread():
            return {"bits_per_byte": bits_per_byte(model, validation)}

    entries = {rung["name"]: rung for rung in report["rungs"]}
    return sweep(report, entries, seeds, trial, out)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("block_changes", __doc__, STEPS, SEEDS, OUT)
    parser.add_argument(
        "--text", help="a snapshot (qkv_lab.lab_text) or UTF-8 file, kept beside the report, with the "
        "n-gram baselines in it; default: the site now, no baselines (the recorded block-changes.json)"
    )  # fmt: skip
    parser.add_argument(
        "--rungs",
        nargs="+",
        choices=[name for name, _ in CHANGES + BESIDE],
        help="default: every rung",
    )
    parser.add_argument(
        "--lr", type=float, default=LR, help="the peak learning rate"
    )
    args = parser.parse_args(argv)
    text = site_text() if args.text is None else read_text(args.text)
    if args.text is not None:
        save_snapshot(text, args.out.parent)
    rungs = [
        (name, config)
        for name, config in ladder() + beside()
        if name in (args.rungs or dict(CHANGES))
    ]
    seeds = tuple(args.seeds)
    run(
        rungs,
        seeds,
        args.steps,
        BATCH,
        args.lr,
        text,
        args.out,
        baselines=args.text is not None,
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
