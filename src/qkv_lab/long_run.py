"""The site's GPT trained four times longer than the build trains it, measured as it trains: induction, sinks.

The model is `qkv_lab.gpt_training.SITE_CONFIG` and the recipe `train_gpt`'s (batches of `BATCH` windows of
128 bytes, AdamW at a peak rate of `LR`, warm-up over the first tenth, cosine decay to a tenth), run for
`STEPS` steps instead of the build's 1,000. Every `EVERY` steps the weights are measured, without touching
the run (a hook after each optimizer step copies them into a second model; the windows come from their own
generator, so the run is the one `train_gpt` makes on its own):

- `bits_per_byte` on the validation split, beside the n-gram baselines of the same split (`qkv_lab.lab_text`);
- per head, the induction score on `SEQUENCES` sequences of `REPEAT` random printable ASCII bytes, each
  repeated once (Olsson et al., 2022; the standard probe): the mean weight a query at `i` in the second copy
  puts on `i - REPEAT + 1`, the byte after its twin in the first copy;
- per head, the previous-byte score on the same sequences (the weight on `i - 1`), the other half of the
  induction circuit;
- the bits per byte of the second copy's bytes `REPEAT + 1 ...` against the first copy's `1 ... REPEAT - 1`:
  a model that copies predicts the second far better, the random first not at all;
- per head, the weight on a window's first byte (`qkv_lab.long_context.attention_shares`), over the first
  `SINK_BYTES` of the validation split: the sink.

An induction head counts as formed at the first checkpoint where some head's score passes `THRESHOLD`, a
line fixed before the run (a head with uniform weights gives each key about 1/100 here).

`python -m qkv_lab.long_run` runs it (`--steps`, `--every`, `--seeds`, `--text` a snapshot to train on,
`--gate` the model with a gate on each head's output, `--out`) and writes `qkv_lab.results.recorded("long-run")` after every checkpoint, so a stopped run keeps what
it measured. The build and the tests never train it. The recorded run is

    python -m qkv_lab.long_run --steps 4000 --every 250 --seeds 0 1 2 \
        --text site-text-864a16b87c8d.txt.xz --out src/qkv_lab/results/long-run.json

and `recorded("long-run-output-gate")` the same with `--gate` and that `--out`.
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
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook

from qkv.gpt import GPT, GPTConfig
from qkv_lab.gpt_attention import attention_maps
from qkv_lab.gpt_training import (
    BATCH,
    LR,
    SITE_CONFIG,
    bits_per_byte,
    encode,
    site_text,
    split,
    train_gpt,
)
from qkv_lab.harness import environment, write_json
from qkv_lab.lab_text import read_text, save_snapshot, text_record
from qkv_lab.long_context import attention_shares
from qkv_lab.toys import one_thread

OUT = Path(__file__).parent / "results" / "long-run.json"
# --8<-- [start:settings]
# 4x the build's 1,000 steps; a checkpoint every 250
STEPS, EVERY, SEEDS = (4000, 250, (0, 1, 2))
# 32 sequences of 64 random bytes, twice: 128 = the context
REPEAT, SEQUENCES, PROBE_SEED = (64, 32, 1234)
# printable ASCII, every byte of which the text holds
ALPHABET = torch.arange(32, 127)
THRESHOLD = 0.4  # an induction head: a head whose induction score passes this
# the first-byte weight over the validation split's first 64 windows
SINK_BYTES = 8192
# --8<-- [end:settings]


def repeated_random_bytes(sequences: int, length: int, seed: int) -> Tensor:
    """`(sequences, 2 * length)` ids: `length` bytes drawn uniformly from `ALPHABET`, then the same again."""
    generator = torch.Generator().manual_seed(seed)
    first = ALPHABET[
        torch.randint(len(ALPHABET), (sequences, length), generator=generator)
    ]
    return first.repeat(1, 2)  # (B, n) -> (B, 2n)


def induction_scores(maps: Tensor, length: int) -> Tensor:
    """Per head, the mean weight of a query `i` of the second copy on `i - length + 1`.

    Args:
        maps: `(layers, B, H, 2n, 2n)` weights over sequences repeated once, `n = length`.

    Returns:
        `(layers, H)`, averaged over queries `n ... 2n - 1` and the batch.
    """
    # (layers, B, H, n + 1): i = n - 1 ... 2n - 1
    twins = maps.diagonal(offset=1 - length, dim1=-2, dim2=-1)
    return twins[..., 1:].mean((1, -1))  # queries n ... 2n - 1


def previous_byte_scores(maps: Tensor) -> Tensor:
    """Per head, the mean weight of queries `1 ...` on the byte before: `(layers, B, H, L, L)` -> `(layers, H)`."""
    return maps.diagonal(offset=-1, dim1=-2, dim2=-1).mean((1, -1))


@torch.no_grad()
def copy_bits(model: GPT, ids: Tensor, length: int) -> tuple[float, float]:
    """Bits per byte of the first copy's bytes `1 ... n - 1` and of the second copy's `n + 1 ... 2n - 1`."""
    logits = model(ids[:, :-1])  # (B, 2n - 1, V): entry i predicts byte i + 1
    bits = F.cross_entropy(
        logits.transpose(1, 2), ids[:, 1:], reduction="none"
    ) / math.log(2)
    return bits[:, : length - 1].mean().item(), bits[:, length:].mean().item()


@torch.no_grad()
def measure(model: GPT, validation: Tensor, probe: Tensor) -> dict:
    """Everything of the module docstring at one checkpoint; `probe` as `repeated_random_bytes` gives it."""
    length = probe.size(1) // 2
    maps = attention_maps(model, probe)  # (layers, B, H, 2n, 2n)
    first, second = copy_bits(model, probe, length)
    first_byte, _ = attention_shares(model, validation[:SINK_BYTES])
    return {
        "bits_per_byte": bits_per_byte(model, validation),
        "induction": induction_scores(maps, length).tolist(),
        "previous_byte": previous_byte_scores(maps).tolist(),
        "copy_bits": {"first": first, "second": second},
        "first_byte_weight": first_byte.tolist(),
    }


def run(
    text: str,
    steps: int,
    every: int,
    seeds: tuple[int, ...],
    out: Path | None = None,
    config: GPTConfig = SITE_CONFIG,
    batch: int = BATCH,
    probe: tuple[int, int] = (SEQUENCES, REPEAT),
) -> dict:
    """Train `config` on `text`'s split for `steps` steps per seed, measuring every `every` steps.

    `probe` is `(sequences, repeat)` of `repeated_random_bytes`; `2 * repeat` must fit the context. The
    defaults are the recorded run's; the tests train smaller.

    Returns:
        The report: the text's record (hash, sizes, baselines), the settings, the environment, and per seed
        its checkpoints (`step` and `measure`'s numbers, plus the mean training loss since the last one, in
        bits per byte), its seconds and the first step at which some head's induction score passes
        `THRESHOLD` (None if none did).
    """
    train, validation = split(encode(text))
    sequences, repeat = probe
    # (sequences, 2 * repeat)
    probe_ids = repeated_random_bytes(sequences, repeat, PROBE_SEED)
    with one_thread():
        machine = environment(torch.device("cpu"))
    report = {
        "what": "the site's GPT trained longer, measured every few steps: induction heads and sinks",
        **text_record(text),
        "config": dataclasses.asdict(config),
        "steps": steps,
        "batch": batch,
        "context": config.context,
        "tokens_seen": steps * batch * config.context,
        "lr": LR,
        "every": every,
        "seeds": list(seeds),
        "probe": {
            "sequences": sequences,
            "repeat": repeat,
            "seed": PROBE_SEED,
            "alphabet": [int(ALPHABET[0]), int(ALPHABET[-1])],
        },
        "threshold": THRESHOLD,
        "sink_bytes": SINK_BYTES,
        **machine,
        "timing": "wall-clock seconds of each seed's training and measurements, measured once",
        "runs": [],
    }

    def save() -> None:
        if out is not None:
            write_json(report, out)

    for seed in seeds:
        runs = {
            "seed": seed,
            "checkpoints": [],
            "formed_at": None,
            "seconds": None,
        }
        report["runs"].append(runs)
        _train_and_measure(
            config,
            train,
            validation,
            probe_ids,
            steps,
            batch,
            every,
            runs,
            save,
        )
        save()
    return report


def _train_and_measure(
    config: GPTConfig,
    train: Tensor,
    validation: Tensor,
    probe: Tensor,
    steps: int,
    batch: int,
    every: int,
    runs: dict,
    save: Callable[[], None],
) -> None:
    """One seed of `run`: train, and fill `runs` (which names the seed) with a checkpoint every `every`."""
    watched, step, start = GPT(config), 0, time.perf_counter()

    def after_step(optimizer: torch.optim.Optimizer, *_: object) -> None:
        nonlocal step
        step += 1
        if step % every:
            return
        # the trained weights, in the order GPT.parameters() gives them
        with torch.no_grad():
            for mine, theirs in zip(
                watched.parameters(),
                optimizer.param_groups[0]["params"],
                strict=True,
            ):
                mine.copy_(theirs)
        numbers = measure(watched.eval(), validation, probe)
        runs["checkpoints"].append({"step": step, **numbers})
        if (
            runs["formed_at"] is None
            and max(map(max, numbers["induction"])) > THRESHOLD
        ):
            runs["formed_at"] = step
        runs["seconds"] = round(time.perf_counter() - start, 1)
        print(
            f"{time.strftime('%H:%M:%S')} seed {runs['seed']} step {step}: "
            f"{numbers['bits_per_byte']:.3f} bits per byte, induction "
            f"{max(map(max, numbers['induction'])):.3f}, copy "
            f"{numbers['copy_bits']['first']:.2f} -> {numbers['copy_bits']['second']:.2f}",
            file=sys.stderr,
            flush=True,
        )
        save()

    hook = register_optimizer_step_post_hook(after_step)
    try:
        _, losses = train_gpt(config, train, steps, batch, LR, runs["seed"])
    finally:
        hook.remove()
    # mean training loss over the steps since the last
    for checkpoint in runs["checkpoints"]:
        since = losses[checkpoint["step"] - every : checkpoint["step"]]
        checkpoint["train_bits_per_byte"] = (
            sum(since) / len(since) / math.log(2)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.long_run", description=__doc__
    )
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--every", type=int, default=EVERY)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument(
        "--text",
        help="a snapshot (qkv_lab.lab_text) or UTF-8 file; default: the site now",
    )
    parser.add_argument(
        "--gate",
        action="store_true",
        help="the site's GPT with a gate on each head's output (GPTConfig.gate)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = site_text() if args.text is None else read_text(args.text)
    save_snapshot(text, args.out.parent)
    config = dataclasses.replace(SITE_CONFIG, gate=args.gate)
    run(text, args.steps, args.every, tuple(args.seeds), args.out, config)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
